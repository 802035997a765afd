//! Plan drafts: the planner model's JSON answer, validated and compiled into a [`Plan`].
//! Pure: everything the check needs is passed in, and every problem becomes a [`Diagnostic`].

use std::borrow::Cow;
use std::collections::BTreeSet;

use serde::Deserialize;
use serde_json::Value;

use crate::capability::{Capabilities, Capability, Executor};
use crate::excerpt;
use crate::hash::{HashMap, HashSet};
use crate::plan::{Diagnostic, Edge, NodeId, NodeStatus, Plan, PlanMetadata, PlanNode, blocked_by_cycles};

/// A facet the plan must produce (or find already available), and why.
#[derive(Debug, Clone)]
pub struct RequiredFacet {
    pub facet: String,
    /// `output_contract` or `goal_condition`.
    pub because: &'static str,
}

/// Everything a draft is checked against.
pub struct DraftContext<'a> {
    pub capabilities: &'a Capabilities,
    /// Facets present before this plan runs: envelope inputs and facets written by earlier nodes.
    pub available_facets: &'a HashSet<String>,
    pub required_facets: &'a [RequiredFacet],
    /// Nodes completed in earlier plan versions: id → capability id.
    pub completed: &'a HashMap<String, String>,
    pub version: u32,
    pub metadata: PlanMetadata,
    /// Most nodes a plan may have (`limits.max_plan_nodes`).
    pub max_nodes: usize,
}

/// Most characters of a stage name or label in a draft.
pub const MAX_NAME_CHARS: usize = 200;
/// Most characters of all of one node's rationale and instructions together.
pub const MAX_NODE_TEXT_CHARS: usize = 8_000;
/// Most diagnostics reported of one draft; the rest are counted in a last one.
pub const MAX_DIAGNOSTICS: usize = 20;

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct DraftNode {
    stage: String,
    capability_id: Option<String>,
    kind: Option<String>,
    label: Option<String>,
    #[serde(default)]
    input_facets: OneOrMany,
    #[serde(default)]
    output_facets: OneOrMany,
    #[serde(default)]
    rationale: OneOrMany,
    #[serde(default)]
    instructions: OneOrMany,
    #[serde(default)]
    depends_on: OneOrMany,
    status: Option<String>,
    #[serde(default)]
    arguments: Option<Value>,
}

/// Models write a single string where a list is asked for; both are accepted.
#[derive(Default, Deserialize)]
#[serde(untagged)]
enum OneOrMany {
    #[default]
    None,
    One(String),
    Many(Vec<String>),
}

impl OneOrMany {
    fn iter(&self) -> std::slice::Iter<'_, String> {
        match self {
            Self::None => [].iter(),
            Self::One(s) => std::slice::from_ref(s).iter(),
            Self::Many(v) => v.iter(),
        }
    }

    fn into_vec(self) -> Vec<String> {
        match self {
            Self::None => Vec::new(),
            Self::One(s) => vec![s],
            Self::Many(v) => v,
        }
    }
}

/// Validates a draft and compiles it into a plan, or explains its problems (at most
/// [`MAX_DIAGNOSTICS`] of them, then how many more there were).
pub fn compile(draft: &Value, cx: &DraftContext<'_>) -> Result<Plan, Vec<Diagnostic>> {
    compile_all(draft, cx).map_err(bounded)
}

fn compile_all(draft: &Value, cx: &DraftContext<'_>) -> Result<Plan, Vec<Diagnostic>> {
    let raw_nodes = draft_nodes(draft, cx.max_nodes)?;
    let mut diagnostics = Vec::new();
    let mut nodes: Vec<(PlanNode, Vec<String>)> = Vec::new();
    let mut ids = HashSet::default();
    for (index, raw) in raw_nodes.iter().enumerate() {
        match serde_json::from_value::<DraftNode>(raw.clone()) {
            Ok(draft_node) => {
                if let Some(node) = compile_node(draft_node, cx, &ids, &mut diagnostics) {
                    ids.insert(node.0.id.clone());
                    nodes.push(node);
                }
            }
            Err(e) => diagnostics.push(Diagnostic::error(
                "DRAFT_NODE_INVALID",
                format!("node {index} does not match the draft schema: {e}"),
            )),
        }
    }
    if !diagnostics.is_empty() {
        return Err(diagnostics);
    }
    let edges = edges(&nodes, &mut diagnostics);
    let nodes: Vec<PlanNode> = nodes.into_iter().map(|(node, _)| node).collect();
    check_inputs(&nodes, cx, &mut diagnostics);
    check_required(&nodes, cx, &mut diagnostics);
    let ids: Vec<NodeId> = nodes.iter().map(|n| n.id.clone()).collect();
    let blocked = blocked_by_cycles(&ids, &edges);
    if !blocked.is_empty() {
        diagnostics.push(Diagnostic::error(
            "PLAN_CYCLE",
            format!("the dependencies form a cycle; these stages can never start: {}", blocked.join(", ")),
        ));
    }
    if diagnostics.is_empty() {
        Ok(Plan { version: cx.version, nodes, edges, metadata: cx.metadata.clone() })
    } else {
        Err(diagnostics)
    }
}

fn draft_nodes(draft: &Value, max_nodes: usize) -> Result<&Vec<Value>, Vec<Diagnostic>> {
    match draft.get("nodes").and_then(Value::as_array) {
        Some(nodes) if nodes.len() > max_nodes => Err(vec![Diagnostic::error(
            "PLAN_TOO_LARGE",
            format!("the draft has {} nodes; a plan may have at most {max_nodes}", nodes.len()),
        )]),
        Some(nodes) if !nodes.is_empty() => Ok(nodes),
        _ => Err(vec![Diagnostic::error(
            "DRAFT_INVALID",
            "the draft must be a JSON object with a non-empty `nodes` array",
        )]),
    }
}

/// The first [`MAX_DIAGNOSTICS`] diagnostics, each message bounded, and one counting the rest:
/// they are sent in a frame and fed back to the planner, so they must not grow with the draft.
fn bounded(mut diagnostics: Vec<Diagnostic>) -> Vec<Diagnostic> {
    let more = diagnostics.len().saturating_sub(MAX_DIAGNOSTICS);
    diagnostics.truncate(MAX_DIAGNOSTICS);
    let shorten = |text: &mut String, max: usize| {
        if let Cow::Owned(shorter) = excerpt::excerpt(text, max) {
            *text = shorter;
        }
    };
    for diagnostic in &mut diagnostics {
        shorten(&mut diagnostic.message, excerpt::MESSAGE);
        for name in
            [&mut diagnostic.node_stage, &mut diagnostic.capability_id, &mut diagnostic.facet].into_iter().flatten()
        {
            shorten(name, MAX_NAME_CHARS);
        }
    }
    if more > 0 {
        diagnostics.push(Diagnostic::error("MORE_DIAGNOSTICS", format!("and {more} more problems of the same draft")));
    }
    diagnostics
}

/// Stage names, labels and per-node text within their limits: a draft is a model's answer, and
/// what it carries is stored, streamed and sent along with every call of its nodes.
fn check_sizes(draft: &DraftNode, stage: &str, diagnostics: &mut Vec<Diagnostic>) -> bool {
    let long_name =
        [Some(stage), draft.label.as_deref()].into_iter().flatten().any(|n| n.chars().count() > MAX_NAME_CHARS);
    let text: usize = draft.rationale.iter().chain(draft.instructions.iter()).map(|t| t.chars().count()).sum();
    if long_name || text > MAX_NODE_TEXT_CHARS {
        let shown = excerpt::excerpt(stage, 60);
        diagnostics.push(
            Diagnostic::error(
                "NODE_TEXT_TOO_LONG",
                format!(
                    "stage \"{shown}\": a stage name or label may have at most {MAX_NAME_CHARS} characters, \
                     rationale and instructions together at most {MAX_NODE_TEXT_CHARS}"
                ),
            )
            .stage(&shown),
        );
        return false;
    }
    true
}

/// One draft node → a plan node plus its explicit `dependsOn` list, or diagnostics.
fn compile_node(
    draft: DraftNode,
    cx: &DraftContext<'_>,
    earlier: &HashSet<NodeId>,
    diagnostics: &mut Vec<Diagnostic>,
) -> Option<(PlanNode, Vec<String>)> {
    let stage = draft.stage.trim().to_string();
    if !check_sizes(&draft, &stage, diagnostics) {
        return None;
    }
    let id = NodeId::from_stage(&stage);
    if id.is_empty() || id == "_" {
        diagnostics.push(Diagnostic::error("STAGE_MISSING", "every node needs a non-empty `stage`"));
        return None;
    }
    if earlier.contains(&id) {
        diagnostics.push(
            Diagnostic::error("DUPLICATE_STAGE", format!("stage \"{stage}\" (node id `{id}`) appears twice"))
                .stage(&stage),
        );
        return None;
    }
    let Some(capability_id) = draft.capability_id.filter(|c| !c.trim().is_empty()) else {
        diagnostics.push(
            Diagnostic::error("CAPABILITY_MISSING", format!("planner node \"{stage}\" must declare a capabilityId"))
                .stage(&stage),
        );
        return None;
    };
    let Some(capability) = cx.capabilities.get(&capability_id) else {
        diagnostics.push(
            Diagnostic::error(
                "CAPABILITY_NOT_REGISTERED",
                format!("planner referenced capability \"{capability_id}\" which is not registered"),
            )
            .stage(&stage)
            .capability(&capability_id),
        );
        return None;
    };
    let output_facets = output_facets(&stage, capability, draft.output_facets.into_vec(), diagnostics)?;
    let mut input_facets = capability.input_facets.clone();
    let (arguments, read) = tool_arguments(&stage, capability, draft.arguments, diagnostics)?;
    for facet in draft.input_facets.into_vec().into_iter().chain(read) {
        if !input_facets.contains(&facet) {
            input_facets.push(facet);
        }
    }
    let rerun = draft.status.as_deref() == Some("pending");
    let carried = cx.completed.get(id.as_str()) == Some(&capability.id) && !rerun;
    let node = PlanNode {
        label: draft.label.unwrap_or_else(|| stage.clone()),
        id,
        stage,
        capability_id,
        kind: draft.kind.unwrap_or_else(|| capability.kind.as_str().to_string()),
        input_facets,
        output_facets,
        rationale: draft.rationale.into_vec(),
        instructions: draft.instructions.into_vec(),
        arguments,
        status: if carried { NodeStatus::Completed } else { NodeStatus::Pending },
    };
    Some((node, draft.depends_on.into_vec()))
}

/// An MCP tool node's arguments, checked against the tool's input schema, and the facets they
/// read (they become the node's inputs, so the facets' producers run first). Other nodes take no
/// arguments: a draft's are dropped.
fn tool_arguments(
    stage: &str,
    capability: &Capability,
    drafted: Option<Value>,
    diagnostics: &mut Vec<Diagnostic>,
) -> Option<(Option<Value>, Vec<String>)> {
    let Executor::Mcp(tool) = &capability.executor else { return Some((None, Vec::new())) };
    match crate::mcp::arguments::check(tool, drafted) {
        Ok((arguments, read)) => Some((Some(arguments), read)),
        Err(problems) => {
            for (code, message) in problems {
                diagnostics.push(
                    Diagnostic::error(code, format!("stage \"{stage}\": {message}"))
                        .stage(stage)
                        .capability(&capability.id),
                );
            }
            None
        }
    }
}

/// A node writes the capability's declared output facets; a draft may narrow them, not invent new
/// ones. A capability that declares none writes what the draft names.
fn output_facets(
    stage: &str,
    capability: &Capability,
    drafted: Vec<String>,
    diagnostics: &mut Vec<Diagnostic>,
) -> Option<Vec<String>> {
    if capability.output_facets.is_empty() {
        return Some(drafted);
    }
    let unknown: Vec<&String> = drafted.iter().filter(|f| !capability.output_facets.contains(f)).collect();
    if unknown.is_empty() {
        return Some(capability.output_facets.clone());
    }
    for facet in unknown {
        diagnostics.push(
            Diagnostic::error(
                "FACET_NOT_PRODUCED",
                format!(
                    "capability \"{}\" does not produce facet \"{facet}\" (it produces: {})",
                    capability.id,
                    capability.output_facets.join(", ")
                ),
            )
            .stage(stage)
            .capability(&capability.id)
            .facet(facet),
        );
    }
    None
}

/// Explicit `dependsOn` edges where given; otherwise an edge from the nearest earlier producer of
/// each facet a node reads or writes (so two writers of one facet run in plan order).
fn edges(nodes: &[(PlanNode, Vec<String>)], diagnostics: &mut Vec<Diagnostic>) -> Vec<Edge> {
    let ids: HashSet<&NodeId> = nodes.iter().map(|(n, _)| &n.id).collect();
    // The latest node so far writing each facet: one pass, whatever the plan's size.
    let mut producer: HashMap<&str, &NodeId> = HashMap::default();
    let mut edges = Vec::new();
    // Inputs of nodes whose dependencies are explicit, with the node that writes them before.
    let mut awaited: Vec<(&NodeId, &NodeId, &str, &str)> = Vec::new();
    for (node, depends_on) in nodes {
        if !depends_on.is_empty() {
            let told = diagnostics.len();
            for dependency in depends_on {
                let from = NodeId::from_stage(dependency);
                if from == node.id {
                    let message = format!("stage \"{}\" depends on itself: a step cannot wait for itself", node.stage);
                    diagnostics.push(Diagnostic::error("SELF_DEPENDENCY", message).stage(&node.stage));
                } else if ids.contains(&from) {
                    edges.push(Edge { from, to: node.id.clone(), reason: "depends_on".into() });
                } else {
                    diagnostics.push(
                        Diagnostic::error(
                            "UNKNOWN_DEPENDENCY",
                            format!(
                                "stage \"{}\" depends on \"{dependency}\", which is not a stage of this plan",
                                node.stage
                            ),
                        )
                        .stage(&node.stage),
                    );
                }
            }
            // Dependencies that are all stages of the plan: whether they wait for what the node
            // reads is checked once every edge is known.
            if diagnostics.len() == told {
                let written_before = node.input_facets.iter().filter_map(|f| producer.get(f.as_str()).map(|p| (*p, f)));
                awaited
                    .extend(written_before.map(|(from, facet)| (from, &node.id, facet.as_str(), node.stage.as_str())));
            }
        } else {
            let mut froms = BTreeSet::new();
            for facet in node.input_facets.iter().chain(&node.output_facets) {
                if let Some(&from) = producer.get(facet.as_str())
                    && froms.insert(from.clone())
                {
                    edges.push(Edge { from: from.clone(), to: node.id.clone(), reason: format!("facet:{facet}") });
                }
            }
        }
        for facet in &node.output_facets {
            producer.insert(facet, &node.id);
        }
    }
    for (from, to, facet, stage) in awaited {
        if !reaches(&edges, from, to) {
            let message = format!(
                "stage \"{stage}\" reads facet \"{facet}\", which stage \"{from}\" writes before it, but its dependsOn \
                 does not wait for that stage: add it (or a stage that waits for it)"
            );
            diagnostics.push(Diagnostic::error("INPUT_NOT_AWAITED", message).stage(stage).facet(facet));
        }
    }
    edges
}

/// Whether `edges` lead from `from` to `to`.
fn reaches(edges: &[Edge], from: &NodeId, to: &NodeId) -> bool {
    let mut seen: HashSet<&NodeId> = HashSet::default();
    let mut next = vec![from];
    while let Some(at) = next.pop() {
        if at == to {
            return true;
        }
        if seen.insert(at) {
            next.extend(edges.iter().filter(|e| &e.from == at).map(|e| &e.to));
        }
    }
    false
}

/// Every input facet must be available before the plan runs or produced by an earlier-ordered node.
fn check_inputs(nodes: &[PlanNode], cx: &DraftContext<'_>, diagnostics: &mut Vec<Diagnostic>) {
    let mut produced: HashSet<&str> = HashSet::default();
    for (index, node) in nodes.iter().enumerate() {
        for facet in &node.input_facets {
            if !produced.contains(facet.as_str()) && !cx.available_facets.contains(facet) {
                let later = nodes[index + 1..].iter().any(|n| n.output_facets.contains(facet));
                let hint = if later { "; move its producer before this stage" } else { "" };
                diagnostics.push(
                    Diagnostic::error(
                        "MISSING_INPUT_FACET",
                        format!(
                            "stage \"{}\" needs facet \"{facet}\", which is neither an input nor produced by an earlier stage{hint}",
                            node.stage
                        ),
                    )
                    .stage(&node.stage)
                    .capability(&node.capability_id)
                    .facet(facet),
                );
            }
        }
        produced.extend(node.output_facets.iter().map(String::as_str));
    }
}

/// Output-contract and goal-condition facets must be produced by the plan or already available.
fn check_required(nodes: &[PlanNode], cx: &DraftContext<'_>, diagnostics: &mut Vec<Diagnostic>) {
    for required in cx.required_facets {
        let produced = nodes.iter().any(|n| n.output_facets.contains(&required.facet));
        if !produced && !cx.available_facets.contains(&required.facet) {
            let (code, what) = match required.because {
                "goal_condition" => ("GOAL_FACET_UNCOVERED", "goal condition facet"),
                _ => ("OUTPUT_FACET_UNCOVERED", "required output facet"),
            };
            diagnostics.push(
                Diagnostic::error(code, format!("the draft does not produce {what} \"{}\"", required.facet))
                    .facet(&required.facet),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capability::EndpointAllowlist;
    use serde_json::json;
    use std::sync::Arc;

    fn capability(id: &str, inputs: &[&str], outputs: &[&str]) -> Arc<Capability> {
        let registration = json!({
            "capabilityId": id, "version": "1", "displayName": id, "summary": "s", "kind": "execution",
            "inputFacets": inputs, "outputFacets": outputs,
            "outputContract": {"mode": "json_schema", "schema": {"type": "object"}}
        });
        Arc::new(Capability::parse(registration, &EndpointAllowlist::default()).unwrap())
    }

    struct Fixture {
        capabilities: Capabilities,
        available: HashSet<String>,
        required: Vec<RequiredFacet>,
        completed: HashMap<String, String>,
    }

    impl Fixture {
        fn new() -> Self {
            let capabilities = [
                capability("writer", &["brief"], &["post_copy"]),
                capability("editor", &["post_copy"], &["post_copy"]),
                capability("designer", &["brief"], &["visual"]),
            ]
            .into_iter()
            .map(|c| (c.id.clone(), c))
            .collect();
            Self {
                capabilities,
                available: HashSet::from_iter(["brief".to_string()]),
                required: vec![RequiredFacet { facet: "post_copy".into(), because: "output_contract" }],
                completed: HashMap::default(),
            }
        }

        fn compile(&self, draft: Value) -> Result<Plan, Vec<Diagnostic>> {
            let cx = DraftContext {
                capabilities: &self.capabilities,
                available_facets: &self.available,
                required_facets: &self.required,
                completed: &self.completed,
                version: 2,
                metadata: PlanMetadata {
                    planner_model: "m".into(),
                    planner_attempt: 1,
                    phase: crate::plan::Phase::Initial,
                    draft_node_count: 0,
                },
                max_nodes: 5,
            };
            compile(&draft, &cx)
        }
    }

    fn codes(diagnostics: &[Diagnostic]) -> Vec<&str> {
        diagnostics.iter().map(|d| d.code.as_ref()).collect()
    }

    fn with_tool(mut fixture: Fixture) -> Fixture {
        let server = crate::mcp::McpServer::parse(
            &json!({"id": "calc", "url": "http://127.0.0.1:1/mcp", "outputFacets": {"add": "post_copy"}}),
            &Default::default(),
        )
        .unwrap();
        let tool: crate::mcp::ToolDescription = serde_json::from_value(json!({"name": "add", "inputSchema": {
            "type": "object", "required": ["a", "b"],
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}}}))
        .unwrap();
        let add = Arc::new(crate::mcp::tool::capability(&server, tool).unwrap());
        fixture.capabilities.insert(add.id.clone(), add);
        fixture
    }

    #[test]
    fn a_tool_node_keeps_its_arguments_and_reads_the_facets_they_name() {
        let plan = with_tool(Fixture::new())
            .compile(json!({"nodes": [
                {"stage": "visual", "capabilityId": "designer"},
                {"stage": "sum", "capabilityId": "calc.add",
                 "arguments": {"a": 1, "b": {"$facet": "visual", "pointer": "/width"}}},
            ]}))
            .unwrap();
        let sum = &plan.nodes[1];
        assert_eq!(sum.arguments, Some(json!({"a": 1, "b": {"$facet": "visual", "pointer": "/width"}})));
        assert_eq!(sum.input_facets, ["visual"]);
        assert_eq!(
            plan.edges.iter().map(|e| (e.from.as_str(), e.to.as_str())).collect::<Vec<_>>(),
            [("visual", "sum")]
        );
        assert_eq!(plan.nodes[0].arguments, None, "only tool nodes take arguments");
    }

    #[test]
    fn a_tool_nodes_bad_arguments_and_unknown_facets_are_diagnostics() {
        let fixture = with_tool(Fixture::new());
        let bad = fixture
            .compile(
                json!({"nodes": [{"stage": "sum", "capabilityId": "calc.add", "arguments": {"a": "one", "b": 2}}]}),
            )
            .unwrap_err();
        assert_eq!(codes(&bad), ["INVALID_ARGUMENTS"]);
        assert!(bad[0].message.contains("`/a`"), "{}", bad[0].message);
        let unknown = fixture
            .compile(json!({"nodes": [{"stage": "sum", "capabilityId": "calc.add",
                                        "arguments": {"a": 1, "b": {"$facet": "nowhere"}}}]}))
            .unwrap_err();
        assert_eq!(codes(&unknown), ["MISSING_INPUT_FACET"]);
    }

    #[test]
    fn a_dependency_on_no_stage_or_on_itself_is_told_as_what_it_is() {
        let diagnostics = Fixture::new()
            .compile(json!({"nodes": [
                {"stage": "draft", "capabilityId": "writer", "dependsOn": ["draft"]},
                {"stage": "polish", "capabilityId": "editor", "dependsOn": ["nowhere"]},
            ]}))
            .unwrap_err();
        assert_eq!(codes(&diagnostics), ["SELF_DEPENDENCY", "UNKNOWN_DEPENDENCY"]);
        assert!(diagnostics[0].message.contains("\"draft\" depends on itself"), "{}", diagnostics[0].message);
        assert!(diagnostics[1].message.contains("not a stage of this plan"), "{}", diagnostics[1].message);
    }

    #[test]
    fn compiles_facet_edges_and_keeps_independent_nodes_apart() {
        let plan = Fixture::new()
            .compile(json!({"nodes": [
                {"stage": "Draft copy", "capabilityId": "writer"},
                {"stage": "visual", "capabilityId": "designer"},
                {"stage": "polish", "capabilityId": "editor", "rationale": "tighten"}
            ]}))
            .unwrap();
        assert_eq!(plan.version, 2);
        let ids: Vec<_> = plan.nodes.iter().map(|n| n.id.as_str()).collect();
        assert_eq!(ids, ["Draft_copy", "visual", "polish"]);
        assert_eq!(
            plan.edges,
            [Edge { from: "Draft_copy".into(), to: "polish".into(), reason: "facet:post_copy".into() }]
        );
        assert_eq!(plan.nodes[2].rationale, ["tighten"]);
        assert_eq!(plan.nodes[0].output_facets, ["post_copy"]);
    }

    #[test]
    fn a_draft_over_the_size_limits_is_refused_and_says_why() {
        let nodes =
            |n: usize| (0..n).map(|i| json!({"stage": format!("s{i}"), "capabilityId": "writer"})).collect::<Vec<_>>();
        let too_many = Fixture::new().compile(json!({"nodes": nodes(6)})).unwrap_err();
        assert_eq!(codes(&too_many), ["PLAN_TOO_LARGE"]);
        assert!(too_many[0].message.contains("6 nodes") && too_many[0].message.contains("at most 5"));
        assert!(Fixture::new().compile(json!({"nodes": nodes(5)})).is_ok());

        let long_stage = json!({"nodes": [{"stage": "s".repeat(MAX_NAME_CHARS + 1), "capabilityId": "writer"}]});
        let refused = Fixture::new().compile(long_stage).unwrap_err();
        assert_eq!(codes(&refused), ["NODE_TEXT_TOO_LONG"]);
        assert!(refused[0].message.len() < 400, "the diagnostic quotes the stage in part");
        let long_text = json!({"nodes": [{"stage": "draft", "capabilityId": "writer",
            "instructions": vec!["x".repeat(MAX_NODE_TEXT_CHARS / 2); 3]}]});
        assert_eq!(codes(&Fixture::new().compile(long_text).unwrap_err()), ["NODE_TEXT_TOO_LONG"]);
    }

    #[test]
    fn diagnostics_are_bounded_in_number_and_length() {
        let bad: Vec<Value> =
            (0..5).map(|i| json!({"stage": format!("s{i}"), "capabilityId": "x".repeat(10_000)})).collect();
        let diagnostics = Fixture::new().compile(json!({"nodes": bad})).unwrap_err();
        assert_eq!(codes(&diagnostics), vec!["CAPABILITY_NOT_REGISTERED"; 5]);
        assert!(diagnostics.iter().all(|d| d.message.chars().count() < 400), "{diagnostics:?}");
        assert!(diagnostics.iter().all(|d| d.capability_id.as_ref().unwrap().len() < 300), "{diagnostics:?}");
        let more: Vec<Diagnostic> = (0..MAX_DIAGNOSTICS + 7).map(|_| Diagnostic::error("X", "x")).collect();
        let shown = bounded(more);
        assert_eq!(shown.len(), MAX_DIAGNOSTICS + 1);
        assert_eq!(shown[MAX_DIAGNOSTICS].code, "MORE_DIAGNOSTICS");
        assert!(shown[MAX_DIAGNOSTICS].message.starts_with("and 7 more"));
    }

    #[test]
    fn explicit_dependencies_replace_derived_ones() {
        let plan = Fixture::new()
            .compile(json!({"nodes": [
                {"stage": "a", "capabilityId": "designer"},
                {"stage": "b", "capabilityId": "writer", "dependsOn": ["a"]}
            ]}))
            .unwrap();
        assert_eq!(plan.edges, [Edge { from: "a".into(), to: "b".into(), reason: "depends_on".into() }]);
    }

    #[test]
    fn explicit_dependencies_must_wait_for_the_writer_of_what_a_node_reads() {
        // `polish` reads `post_copy`, which `draft` writes; it waits for `visual` only.
        let unordered = Fixture::new()
            .compile(json!({"nodes": [
                {"stage": "draft", "capabilityId": "writer"},
                {"stage": "visual", "capabilityId": "designer"},
                {"stage": "polish", "capabilityId": "editor", "dependsOn": ["visual"]}
            ]}))
            .unwrap_err();
        assert_eq!(codes(&unordered), ["INPUT_NOT_AWAITED"]);
        assert!(unordered[0].message.contains("\"post_copy\"") && unordered[0].message.contains("\"draft\""));
        // Waiting for it through another stage is waiting for it.
        let through = Fixture::new().compile(json!({"nodes": [
            {"stage": "draft", "capabilityId": "writer"},
            {"stage": "visual", "capabilityId": "designer", "dependsOn": ["draft"]},
            {"stage": "polish", "capabilityId": "editor", "dependsOn": ["visual"]}
        ]}));
        assert!(through.is_ok(), "{through:?}");
    }

    #[test]
    fn reports_every_node_problem() {
        let errors = Fixture::new()
            .compile(json!({"nodes": [
                {"stage": "a", "capabilityId": "ghost"},
                {"stage": "b"},
                {"stage": "c", "capabilityId": "writer", "outputFacets": ["visual"]},
                {"capabilityId": "writer"}
            ]}))
            .unwrap_err();
        assert_eq!(
            codes(&errors),
            ["CAPABILITY_NOT_REGISTERED", "CAPABILITY_MISSING", "FACET_NOT_PRODUCED", "DRAFT_NODE_INVALID"]
        );
        assert_eq!(errors[0].capability_id.as_deref(), Some("ghost"));
    }

    #[test]
    fn missing_inputs_uncovered_outputs_and_cycles() {
        let mut fixture = Fixture::new();
        fixture.required.push(RequiredFacet { facet: "score".into(), because: "goal_condition" });
        let errors = fixture
            .compile(json!({"nodes": [
                {"stage": "polish", "capabilityId": "editor"},
                {"stage": "x", "capabilityId": "designer", "dependsOn": ["y"]},
                {"stage": "y", "capabilityId": "designer", "dependsOn": ["x"]}
            ]}))
            .unwrap_err();
        assert_eq!(codes(&errors), ["MISSING_INPUT_FACET", "GOAL_FACET_UNCOVERED", "PLAN_CYCLE"]);
        assert!(errors[2].message.contains("x, y"), "{}", errors[2].message);
    }

    #[test]
    fn completed_nodes_carry_over_unless_marked_pending() {
        let mut fixture = Fixture::new();
        fixture.completed.insert("draft".into(), "writer".into());
        fixture.completed.insert("visual".into(), "designer".into());
        let plan = fixture
            .compile(json!({"nodes": [
                {"stage": "draft", "capabilityId": "writer"},
                {"stage": "visual", "capabilityId": "designer", "status": "pending"},
                {"stage": "polish", "capabilityId": "editor"}
            ]}))
            .unwrap();
        let status: Vec<_> = plan.nodes.iter().map(|n| n.status).collect();
        assert_eq!(status, [NodeStatus::Completed, NodeStatus::Pending, NodeStatus::Pending]);
    }

    #[test]
    fn not_a_draft() {
        assert_eq!(codes(&Fixture::new().compile(json!({"steps": []})).unwrap_err()), ["DRAFT_INVALID"]);
        assert_eq!(codes(&Fixture::new().compile(json!({"nodes": []})).unwrap_err()), ["DRAFT_INVALID"]);
    }

    #[test]
    fn node_ids_from_stages() {
        assert_eq!(NodeId::from_stage("Draft copy!").as_str(), "Draft_copy_");
        assert_eq!(NodeId::from_stage("  a--b ").as_str(), "a--b");
        assert_eq!(NodeId::from_stage("x.y/z").as_str(), "x_y_z");
    }
}
