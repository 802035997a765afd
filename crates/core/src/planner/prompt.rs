//! The planner prompt, built from named sections so each part can be read, tested and changed on
//! its own. Every section has a budget ([`crate::llm::prompt`]), so a prompt stays bounded
//! whatever the envelope carries and the run produced.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::{Arc, LazyLock};

use serde_json::Value;

use crate::capability::{Capability, Executor};
use crate::condition::GoalConditionResult;
use crate::envelope::TaskEnvelope;
use crate::events::payload::{FailedNode, PolicyInfo, SignalInfo};
use crate::llm::prompt::{OBJECTIVE_CHARS, SECTION_CHARS, lines_within, section, section_within, value};
use crate::llm::written::FixedText;
use crate::plan::{Diagnostic, Plan};
use crate::settings::FacetDefinition;

/// A node that completed earlier in the run, with what it produced.
#[derive(Debug, Clone, PartialEq)]
pub struct CompletedWork {
    pub node_id: String,
    pub stage: String,
    pub capability_id: String,
    pub output_facets: Vec<String>,
    pub output: Value,
}

/// Why a new plan is requested after an earlier one.
#[derive(Debug, Clone)]
pub struct Replan<'a> {
    /// `goal_condition_failed`, or another trigger's reason.
    pub reason: &'a str,
    pub failed_goal_conditions: &'a [GoalConditionResult],
    /// What an operator asked for, when an operator asked for the replan.
    pub feedback: Option<&'a str>,
    /// The REPLAN signal of a capability, when one asked for the replan.
    pub signal: Option<&'a SignalInfo>,
    /// The runtime policy, when one asked for the replan.
    pub policy: Option<&'a PolicyInfo>,
    /// The node whose failure asked for the replan.
    pub node_error: Option<&'a FailedNode>,
    pub completed: &'a [CompletedWork],
    pub previous_plan: &'a Plan,
}

/// Everything the planner prompt is built from.
pub struct PromptInput<'a> {
    pub envelope: &'a TaskEnvelope,
    pub capabilities: &'a [Arc<Capability>],
    pub facet_catalog: &'a BTreeMap<String, FacetDefinition>,
    pub replan: Option<Replan<'a>>,
    /// Problems of the previous draft in this planning round, if it was rejected.
    pub rejected_draft: &'a [Diagnostic],
    /// The run's budget, one line per limit (spent, remaining); empty: the run has none.
    pub budget: &'a [String],
}

/// The system and user messages.
pub fn build(input: &PromptInput<'_>) -> (&'static FixedText, String) {
    (&SYSTEM, user(input))
}

/// The system message: the same for every plan, so written (and escaped) once.
static SYSTEM: LazyLock<FixedText> = LazyLock::new(|| FixedText::new(system()));

fn system() -> String {
    let mut s = String::from(
        "You are the flexrun planner. Turn a task envelope into a minimal plan of capability steps. \
         Answer with one JSON object (a PlanDraft) and nothing else: no markdown, no commentary.\n\n",
    );
    s.push_str("### PLAN DRAFT SCHEMA\n");
    s.push_str(
        "{\"nodes\": [{\"stage\": string (unique step name; it becomes the node id),\n\
         \"capabilityId\": string (one of the listed capabilities),\n\
         \"kind\"?: string, \"label\"?: string,\n\
         \"inputFacets\"?: string[], \"outputFacets\"?: string[] (a subset of the capability's output facets),\n\
         \"rationale\"?: string, \"instructions\"?: string[],\n\
         \"dependsOn\"?: string[] (stages that must complete first; without it, a step waits for the \
         earlier steps producing the facets it reads),\n\
         \"status\"?: \"pending\" | \"completed\"}]}\n\n",
    );
    s.push_str("### PLANNER RULES\n");
    for (i, rule) in [
        "Use only capability ids from the CAPABILITIES table, with their facet names spelt exactly.",
        "Every facet a step reads must be an input or be produced by an earlier step.",
        "Produce every facet named by the output contract and by the goal conditions.",
        "Use the fewest steps that satisfy the objective, the output contract and every goal condition.",
        "Give each step a rationale and concrete instructions for the capability.",
        "When replanning: keep every completed step you still need under its exact stage name; it is \
         not run again. Completed work and the current run context outweigh the old plan. Mark a \
         completed step \"status\": \"pending\" only if it must run again.",
    ]
    .iter()
    .enumerate()
    {
        let _ = writeln!(s, "{}. {rule}", i + 1);
    }
    s
}

fn user(input: &PromptInput<'_>) -> String {
    let envelope = input.envelope;
    let mut s = String::new();
    section_within(&mut s, "OBJECTIVE", &envelope.objective, OBJECTIVE_CHARS);
    section(&mut s, "INPUTS", &facet_values(envelope.inputs.iter()));
    section(&mut s, "OUTPUT CONTRACT", &value(serde_json::to_value(&envelope.output_contract).unwrap_or_default()));
    if !envelope.goal_conditions.is_empty() {
        let goals = envelope
            .goal_conditions
            .iter()
            .map(|g| format!("- facet \"{}\" @ path \"{}\": {}", g.facet, g.path, value(&g.expression)));
        let goals =
            format!("Every condition must hold before the run can finish:\n{}", lines_within(goals, SECTION_CHARS));
        section(&mut s, "GOAL CONDITIONS", &goals);
    }
    section(&mut s, "CAPABILITIES", &capability_table(input.capabilities));
    if let Some(tools) = tool_arguments(input.capabilities) {
        section(&mut s, "TOOL ARGUMENTS", &tools);
    }
    if !input.facet_catalog.is_empty() {
        section(&mut s, "FACET CATALOG", &facet_catalog(input.facet_catalog));
    }
    if !envelope.special_instructions.is_empty() {
        section(&mut s, "SPECIAL INSTRUCTIONS", &bullets(&envelope.special_instructions));
    }
    if let Some(planner) = &envelope.planner_policy {
        section(&mut s, "POLICIES", &value(planner));
    }
    if !input.budget.is_empty() {
        let text = format!(
            "This run has a spending budget; every step of an ai capability and every plan is a model call. \
             Plan economically: no step that the goal does not need.\n{}\n",
            input.budget.join("\n")
        );
        section(&mut s, "BUDGET", &text);
    }
    if let Some(replan) = &input.replan {
        replan_sections(&mut s, replan);
    }
    if !input.rejected_draft.is_empty() {
        let problems = input.rejected_draft.iter().map(|d| format!("- [{}] {}", d.code, d.message));
        let text =
            format!("Your previous draft was rejected. Fix every problem:\n{}", lines_within(problems, SECTION_CHARS));
        section(&mut s, "PREVIOUS DRAFT DIAGNOSTICS", &text);
    }
    section(&mut s, "OUTPUT FORMAT", "Return only the PlanDraft JSON object.");
    s
}

fn replan_sections(s: &mut String, replan: &Replan<'_>) {
    section(s, "REPLAN REASON", replan.reason);
    if let Some(feedback) = replan.feedback {
        section(s, "OPERATOR FEEDBACK", &format!("An operator asked for a new plan: {feedback}"));
    }
    if let Some(signal) = replan.signal {
        let mut text = format!(
            "Capability {} (node {}) found the remaining plan invalid: {}\n",
            signal.capability_id, signal.node_id, signal.reason
        );
        if !signal.details.is_null() {
            let _ = writeln!(text, "Details: {}", value(&signal.details));
        }
        text.push_str(
            "Plan the remaining work from what was actually built (COMPLETED NODES) and the current run \
             context; they outweigh the previous plan.\n",
        );
        section(s, "CAPABILITY SIGNAL", &text);
    }
    if let Some(policy) = replan.policy {
        let mut text =
            format!("Runtime policy \"{}\" ({}) asked for a new plan", policy.policy_id, policy.trigger_kind);
        if let Some(node) = &policy.node_id {
            let _ = write!(text, " after node {node}");
        }
        text.push('.');
        if let Some(rationale) = &policy.rationale {
            let _ = write!(text, " Rationale: {rationale}");
        }
        text.push('\n');
        section(s, "RUNTIME POLICY", &text);
    }
    if let Some(failed) = replan.node_error {
        let text = format!(
            "Node {} (capability {}) failed with `{}`: {}\nPlan the remaining work so that it does not fail this \
             way again: correct the step's arguments (against the tool's input schema and the facets they read), \
             use another capability, or first produce what the step was missing. A new node may keep the failed \
             node's id; completed nodes are not run again.\n",
            failed.node_id, failed.capability_id, failed.code, failed.message
        );
        section(s, "NODE ERROR REPAIR", &text);
    }
    let completed = if replan.completed.is_empty() {
        "No step has completed yet.\n".to_string()
    } else {
        let lines = replan.completed.iter().map(|work| {
            format!(
                "- stage \"{}\" (node {}) → capability {} | output facets: {}\n  output: {}",
                work.stage,
                work.node_id,
                work.capability_id,
                work.output_facets.join(", "),
                value(&work.output)
            )
        });
        lines_within(lines, SECTION_CHARS)
    };
    section(s, "COMPLETED NODES", &completed);
    let previous =
        replan.previous_plan.nodes.iter().map(|n| {
            serde_json::json!({"stage": n.stage, "capabilityId": n.capability_id, "nodeId": n.id}).to_string()
        });
    let previous = format!("Version {}:\n{}", replan.previous_plan.version, lines_within(previous, SECTION_CHARS));
    section(s, "PREVIOUS PLAN", &previous);
    if !replan.failed_goal_conditions.is_empty() {
        section(s, "GOAL CONDITION REPAIR", &goal_condition_repair(replan.failed_goal_conditions));
    }
}

/// The repair section: each failed condition with what was observed, and the rule that all must
/// hold before the run may finish.
pub fn goal_condition_repair(failed: &[GoalConditionResult]) -> String {
    let mut s = String::from(
        "The following goal conditions must evaluate `true` before completion. Replan nodes to \
         gather the needed data or transformations that satisfy every predicate:\n",
    );
    for (i, r) in failed.iter().enumerate() {
        let _ = writeln!(s, "\n{}. Facet \"{}\" @ path \"{}\"", i + 1, r.facet, r.path);
        let _ = writeln!(s, "  Expression:\n  {}", r.expression);
        if let Some(dsl) = r.dsl.as_ref().filter(|dsl| **dsl != r.expression) {
            let _ = writeln!(s, "  Original DSL:\n  {dsl}");
        }
        if let Some(logic) = &r.json_logic {
            let _ = writeln!(s, "  JSON Logic:\n  {logic}");
        }
        if let Some(observed) = &r.observed_value {
            let _ = writeln!(s, "  Observed value:\n  {}", value(observed));
        }
        match &r.error {
            Some(error) => {
                let _ = writeln!(s, "  Evaluator error: {error}");
            }
            None => s.push_str("  Result: FAILED (satisfied=false)\n"),
        }
    }
    s
}

fn capability_table(capabilities: &[Arc<Capability>]) -> String {
    let mut s = String::from(
        "| Capability ID | Name | Kind | Input facets | Output facets | Summary |\n|---|---|---|---|---|---|\n",
    );
    for c in capabilities {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} |",
            c.id,
            c.display_name,
            c.kind.as_str(),
            or_dash(&c.input_facets.join(", ")),
            or_dash(&c.output_facets.join(", ")),
            c.summary.replace('\n', " ")
        );
    }
    s
}

/// How to call the MCP tools among `capabilities` (`None` when there are none): the
/// `arguments` field, facet references with an example, and each tool's input schema.
fn tool_arguments(capabilities: &[Arc<Capability>]) -> Option<String> {
    let tools: Vec<(&str, &Value)> = capabilities
        .iter()
        .filter_map(|c| match &c.executor {
            Executor::Mcp(tool) => Some((c.id.as_str(), tool.arguments.source())),
            _ => None,
        })
        .collect();
    if tools.is_empty() {
        return None;
    }
    let mut s = String::from(
        "A step of an MCP tool (agent type mcp) gives the tool's arguments in \"arguments\": a JSON object \
         valid against the tool's input schema below. Its output is its one output facet. To pass a facet's \
         value (an input, or a facet an earlier step produces), write {\"$facet\": \"<facet>\", \"pointer\": \
         \"/path/in/it\"} (pointer optional: the whole value) in place of the value; the step then runs after \
         that facet's producer. Example: {\"stage\": \"total\", \"capabilityId\": \"calc.add\", \"arguments\": \
         {\"a\": 2, \"b\": {\"$facet\": \"first_sum\", \"pointer\": \"/total\"}}}\n",
    );
    // Whole: a tool's schema is bounded when its server is read (`mcp::tool::MAX_SCHEMA_BYTES`).
    let schemas = tools.into_iter().map(|(id, schema)| format!("- {id}: {schema}"));
    s.push_str(&lines_within(schemas, SECTION_CHARS));
    Some(s)
}

fn facet_catalog(catalog: &BTreeMap<String, FacetDefinition>) -> String {
    let mut s = String::new();
    for (name, facet) in catalog {
        let _ = write!(s, "- {name}");
        if let Some(description) = &facet.description {
            let _ = write!(s, ": {description}");
        }
        if let Some(schema) = &facet.schema {
            let _ = write!(s, " (schema: {})", value(schema));
        }
        s.push('\n');
    }
    s
}

fn facet_values<'a>(values: impl ExactSizeIterator<Item = (&'a String, &'a Value)>) -> String {
    if values.len() == 0 {
        return "none".to_string();
    }
    lines_within(values.map(|(name, v)| format!("- {name}: {}", value(v))), SECTION_CHARS)
}

fn bullets(items: &[String]) -> String {
    lines_within(items.iter().map(|i| format!("- {}", value(i))), SECTION_CHARS)
}

fn or_dash(s: &str) -> &str {
    if s.is_empty() { "—" } else { s }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::envelope;
    use crate::plan::PlanMetadata;
    use serde_json::json;

    /// A first plan with no nodes: what a replan prompt's "previous plan" is in these tests.
    fn empty_plan() -> Plan {
        Plan {
            version: 1,
            nodes: vec![],
            edges: vec![],
            metadata: PlanMetadata {
                planner_model: "m".into(),
                planner_attempt: 1,
                phase: crate::plan::Phase::Initial,
                draft_node_count: 0,
            },
        }
    }

    fn envelope() -> TaskEnvelope {
        envelope::from_value(
            json!({
                "objective": "Write a post",
                "inputs": {"brief": {"topic": "flexrun"}},
                "outputContract": {"mode": "facets", "facets": ["post_copy"]},
                "goal_condition": [{"facet": "post_copy", "path": "/quality_score",
                                    "condition": {"jsonLogic": {">=": [{"var": "quality_score"}, 0.8]}}}],
                "specialInstructions": ["Mention Rust"]
            }),
            &crate::condition::dsl::Catalog::builtin(),
        )
        .unwrap()
    }

    static NO_FACETS: BTreeMap<String, FacetDefinition> = BTreeMap::new();

    /// A first plan's prompt input for `envelope`, with nothing else.
    fn initial(envelope: &TaskEnvelope) -> PromptInput<'_> {
        PromptInput {
            envelope,
            capabilities: &[],
            facet_catalog: &NO_FACETS,
            replan: None,
            rejected_draft: &[],
            budget: &[],
        }
    }

    fn failed() -> GoalConditionResult {
        GoalConditionResult {
            facet: "post_copy".into(),
            path: "/quality_score".into(),
            expression: "{\">=\":[{\"var\":\"quality_score\"},0.8]}".into(),
            satisfied: false,
            dsl: None,
            json_logic: Some(json!({">=": [{"var": "quality_score"}, 0.8]})),
            observed_value: Some(json!(0.6)),
            error: None,
        }
    }

    #[test]
    fn initial_prompt_has_its_sections() {
        let envelope = envelope();
        let input = initial(&envelope);
        let (system, user) = build(&input);
        let system = system.text();
        assert!(system.contains("### PLAN DRAFT SCHEMA") && system.contains("### PLANNER RULES"));
        for title in
            ["OBJECTIVE", "INPUTS", "OUTPUT CONTRACT", "GOAL CONDITIONS", "CAPABILITIES", "SPECIAL INSTRUCTIONS"]
        {
            assert!(user.contains(&format!("### {title}\n")), "{title}: {user}");
        }
        assert!(!user.contains("GOAL CONDITION REPAIR"));
        assert!(user.contains("- brief: {\"topic\":\"flexrun\"}"));
    }

    #[test]
    fn a_run_with_a_budget_is_told_what_is_left() {
        let envelope = envelope();
        let budget = ["- costUsd: $0.02 spent of $0.05, $0.03 left".to_string()];
        let input = PromptInput { budget: &budget, ..initial(&envelope) };
        let (_, user) = build(&input);
        assert!(user.contains("### BUDGET\n"), "{user}");
        assert!(user.contains("- costUsd: $0.02 spent of $0.05, $0.03 left"), "{user}");
        let without = PromptInput { budget: &[], ..input };
        assert!(!build(&without).1.contains("### BUDGET"));
    }

    #[test]
    fn mcp_tools_come_with_how_to_give_their_arguments_and_their_schemas() {
        let envelope = envelope();
        assert!(!build(&initial(&envelope)).1.contains("TOOL ARGUMENTS"), "no tool, no section");
        let server =
            crate::mcp::McpServer::parse(&json!({"id": "calc", "url": "http://127.0.0.1:1/mcp"}), &Default::default())
                .unwrap();
        let schema = json!({"type": "object", "properties": {"a": {"type": "integer"}}});
        let tool = serde_json::from_value(json!({"name": "add", "inputSchema": schema})).unwrap();
        let capabilities = [Arc::new(crate::mcp::tool::capability(&server, tool).unwrap())];
        let (_, user) = build(&PromptInput { capabilities: &capabilities, ..initial(&envelope) });
        let section = user.split("### TOOL ARGUMENTS\n").nth(1).expect("the section");
        assert!(section.contains("{\"$facet\": \"<facet>\""), "{section}");
        assert!(section.contains(&format!("- calc.add: {schema}")), "{section}");
    }

    #[test]
    fn replan_prompt_carries_completed_work_and_repair() {
        let envelope = envelope();
        let previous = empty_plan();
        let completed = [CompletedWork {
            node_id: "draft".into(),
            stage: "draft".into(),
            capability_id: "writer".into(),
            output_facets: vec!["post_copy".into()],
            output: json!({"quality_score": 0.6}),
        }];
        let failed = [failed()];
        let input = PromptInput {
            replan: Some(Replan {
                reason: "goal_condition_failed",
                failed_goal_conditions: &failed,
                feedback: None,
                signal: None,
                policy: None,
                node_error: None,
                completed: &completed,
                previous_plan: &previous,
            }),
            ..initial(&envelope)
        };
        let (_, user) = build(&input);
        assert!(!user.contains("OPERATOR FEEDBACK"));
        let repair = user.split("### GOAL CONDITION REPAIR\n").nth(1).expect("repair section");
        assert!(repair.contains("Facet \"post_copy\" @ path \"/quality_score\""));
        assert!(repair.contains("Observed value:\n  0.6"));
        assert!(repair.contains("must evaluate `true` before completion"));
        assert!(user.contains("stage \"draft\" (node draft) → capability writer"));
        assert!(user.contains("### REPLAN REASON\ngoal_condition_failed"));
    }

    #[test]
    fn a_failed_node_is_named_with_its_error_in_its_own_section() {
        let envelope = crate::envelope::from_value(
            json!({"objective": "o", "outputContract": {"mode": "freeform", "instructions": "i"}}),
            &crate::condition::dsl::Catalog::builtin(),
        )
        .unwrap();
        let previous = empty_plan();
        let failed = FailedNode {
            node_id: "lookup".into(),
            capability_id: "orders.find".into(),
            code: "tool_error".into(),
            message: "no order 42".into(),
        };
        let input = PromptInput {
            replan: Some(Replan {
                reason: "node_error",
                failed_goal_conditions: &[],
                feedback: None,
                signal: None,
                policy: None,
                node_error: Some(&failed),
                completed: &[],
                previous_plan: &previous,
            }),
            ..initial(&envelope)
        };
        let (_, user) = build(&input);
        let section = user.split("### NODE ERROR REPAIR\n").nth(1).expect("node error section");
        assert!(section.starts_with("Node lookup (capability orders.find) failed with `tool_error`: no order 42\n"));
        assert!(!user.contains("GOAL CONDITION REPAIR"));
    }

    #[test]
    fn operator_feedback_has_its_own_section() {
        let envelope = crate::envelope::from_value(
            json!({"objective": "o", "outputContract": {"mode": "freeform", "instructions": "i"}}),
            &crate::condition::dsl::Catalog::builtin(),
        )
        .unwrap();
        let previous = empty_plan();
        let input = PromptInput {
            replan: Some(Replan {
                reason: "operator_rejected",
                failed_goal_conditions: &[],
                feedback: Some("use a friendlier tone"),
                signal: None,
                policy: None,
                node_error: None,
                completed: &[],
                previous_plan: &previous,
            }),
            ..initial(&envelope)
        };
        let (_, user) = build(&input);
        assert!(user.contains("### OPERATOR FEEDBACK\nAn operator asked for a new plan: use a friendlier tone"));
        assert!(!user.contains("GOAL CONDITION REPAIR"));
    }

    #[test]
    fn a_prompt_stays_bounded_whatever_the_run_carries() {
        let mut envelope = envelope();
        envelope.objective = "o".repeat(1_000_000);
        for i in 0..5_000 {
            envelope.inputs.insert(format!("input_{i}"), json!({"text": "i".repeat(5_000)}));
        }
        let diagnostics: Vec<Diagnostic> =
            (0..10_000).map(|i| Diagnostic::error("MISSING_INPUT_FACET", format!("problem {i}"))).collect();
        let completed: Vec<CompletedWork> = (0..1_000)
            .map(|i| CompletedWork {
                node_id: format!("n{i}"),
                stage: format!("n{i}"),
                capability_id: "writer".into(),
                output_facets: vec!["post_copy".into()],
                output: json!({"text": "w".repeat(10_000)}),
            })
            .collect();
        let previous = empty_plan();
        let input = PromptInput {
            envelope: &envelope,
            capabilities: &[],
            facet_catalog: &BTreeMap::new(),
            replan: Some(Replan {
                reason: "goal_condition_failed",
                failed_goal_conditions: &[],
                feedback: None,
                signal: None,
                policy: None,
                node_error: None,
                completed: &completed,
                previous_plan: &previous,
            }),
            rejected_draft: &diagnostics,
            budget: &[],
        };
        let (_, user) = build(&input);
        assert!(user.len() < 100_000, "a prompt of {} bytes", user.len());
        assert!(user.contains("… (992000 more characters)"), "the objective says how much was cut");
        assert!(user.contains("more entries not shown)"), "lists say how many entries were left out");
        assert!(user.contains("### OUTPUT FORMAT"), "sections after the long ones are still there");
    }
}
