//! Plan drafts: the planner model's JSON answer, validated and compiled into a [`Plan`].
//! Pure: everything the check needs is passed in, and every problem becomes a [`Diagnostic`].

use std::collections::{BTreeSet, HashMap, HashSet};

use crate::capability::Capabilities;

use serde::Deserialize;
use serde_json::Value;

use crate::capability::Capability;
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
}

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
    fn into_vec(self) -> Vec<String> {
        match self {
            Self::None => Vec::new(),
            Self::One(s) => vec![s],
            Self::Many(v) => v,
        }
    }
}

/// Validates a draft and compiles it into a plan, or explains every problem.
pub fn compile(draft: &Value, cx: &DraftContext<'_>) -> Result<Plan, Vec<Diagnostic>> {
    let raw_nodes = draft_nodes(draft)?;
    let mut diagnostics = Vec::new();
    let mut nodes: Vec<(PlanNode, Vec<String>)> = Vec::new();
    for (index, raw) in raw_nodes.iter().enumerate() {
        match serde_json::from_value::<DraftNode>(raw.clone()) {
            Ok(draft_node) => {
                if let Some(node) = compile_node(draft_node, cx, &nodes, &mut diagnostics) {
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

fn draft_nodes(draft: &Value) -> Result<&Vec<Value>, Vec<Diagnostic>> {
    match draft.get("nodes").and_then(Value::as_array) {
        Some(nodes) if !nodes.is_empty() => Ok(nodes),
        _ => Err(vec![Diagnostic::error(
            "DRAFT_INVALID",
            "the draft must be a JSON object with a non-empty `nodes` array",
        )]),
    }
}

/// One draft node → a plan node plus its explicit `dependsOn` list, or diagnostics.
fn compile_node(
    draft: DraftNode,
    cx: &DraftContext<'_>,
    earlier: &[(PlanNode, Vec<String>)],
    diagnostics: &mut Vec<Diagnostic>,
) -> Option<(PlanNode, Vec<String>)> {
    let stage = draft.stage.trim().to_string();
    let id = NodeId::from_stage(&stage);
    if id.is_empty() || id == "_" {
        diagnostics.push(Diagnostic::error("STAGE_MISSING", "every node needs a non-empty `stage`"));
        return None;
    }
    if earlier.iter().any(|(n, _)| n.id == id) {
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
    for facet in draft.input_facets.into_vec() {
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
        status: if carried { NodeStatus::Completed } else { NodeStatus::Pending },
    };
    Some((node, draft.depends_on.into_vec()))
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
    let mut edges = Vec::new();
    for (index, (node, depends_on)) in nodes.iter().enumerate() {
        if !depends_on.is_empty() {
            for dependency in depends_on {
                let from = NodeId::from_stage(dependency);
                if nodes.iter().any(|(n, _)| n.id == from) && from != node.id {
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
            continue;
        }
        let mut froms = BTreeSet::new();
        for facet in node.input_facets.iter().chain(&node.output_facets) {
            let earlier = nodes[..index].iter().rev().find(|(n, _)| n.output_facets.contains(facet));
            if let Some((producer, _)) = earlier
                && froms.insert(producer.id.clone())
            {
                edges.push(Edge { from: producer.id.clone(), to: node.id.clone(), reason: format!("facet:{facet}") });
            }
        }
    }
    edges
}

/// Every input facet must be available before the plan runs or produced by an earlier-ordered node.
fn check_inputs(nodes: &[PlanNode], cx: &DraftContext<'_>, diagnostics: &mut Vec<Diagnostic>) {
    for (index, node) in nodes.iter().enumerate() {
        for facet in &node.input_facets {
            let produced_before = nodes[..index].iter().any(|n| n.output_facets.contains(facet));
            if !produced_before && !cx.available_facets.contains(facet) {
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
                available: HashSet::from(["brief".to_string()]),
                required: vec![RequiredFacet { facet: "post_copy".into(), because: "output_contract" }],
                completed: HashMap::new(),
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
            };
            compile(&draft, &cx)
        }
    }

    fn codes(diagnostics: &[Diagnostic]) -> Vec<&str> {
        diagnostics.iter().map(|d| d.code.as_ref()).collect()
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
