//! The names flexrun's spans and attributes carry, in one place: the OpenTelemetry GenAI
//! semantic conventions (`gen_ai.*`, development status, as of semantic-conventions-genai
//! `002c8a6`; `docs/observability.md` pins it) and flexrun's own (`flexrun.*`) where they have
//! none — a run's status, a plan's version, a goal round, an operator's wait, a call's cost.

/// The root span of a run: `invoke_workflow {gen_ai.workflow.name}`.
pub const RUN: &str = "invoke_workflow flexrun";
/// One per plan version: the planner's drafts are its `chat` children.
pub const PLAN: &str = "plan flexrun";
/// One per goal-condition evaluation round.
pub const GOAL_CONDITIONS: &str = "flexrun.goal_conditions";
/// From an operator request to its resolution.
pub const OPERATOR_WAIT: &str = "flexrun.operator_wait";

/// `chat {model}`: one per model call attempt.
pub fn chat(model: &str) -> String {
    format!("chat {model}")
}

/// `execute_tool {capabilityId}`: one per step attempt.
pub fn execute_tool(capability_id: &str) -> String {
    format!("execute_tool {capability_id}")
}

pub const OPERATION: &str = "gen_ai.operation.name";
pub const WORKFLOW_NAME: &str = "gen_ai.workflow.name";
pub const CONVERSATION_ID: &str = "gen_ai.conversation.id";
pub const PROVIDER: &str = "gen_ai.provider.name";
pub const REQUEST_MODEL: &str = "gen_ai.request.model";
pub const RESPONSE_MODEL: &str = "gen_ai.response.model";
pub const RESPONSE_ID: &str = "gen_ai.response.id";
pub const FINISH_REASONS: &str = "gen_ai.response.finish_reasons";
pub const OUTPUT_TYPE: &str = "gen_ai.output.type";
pub const INPUT_TOKENS: &str = "gen_ai.usage.input_tokens";
pub const OUTPUT_TOKENS: &str = "gen_ai.usage.output_tokens";
pub const CACHE_READ_TOKENS: &str = "gen_ai.usage.cache_read.input_tokens";
pub const REASONING_TOKENS: &str = "gen_ai.usage.reasoning.output_tokens";
pub const INPUT_MESSAGES: &str = "gen_ai.input.messages";
pub const OUTPUT_MESSAGES: &str = "gen_ai.output.messages";
pub const TOOL_NAME: &str = "gen_ai.tool.name";
pub const TOOL_TYPE: &str = "gen_ai.tool.type";
pub const TOOL_CALL_ID: &str = "gen_ai.tool.call.id";
pub const TOOL_ARGUMENTS: &str = "gen_ai.tool.call.arguments";
pub const TOOL_RESULT: &str = "gen_ai.tool.call.result";
pub const SERVER_ADDRESS: &str = "server.address";
pub const SERVER_PORT: &str = "server.port";
pub const ERROR_TYPE: &str = "error.type";

/// The OpenAI-compatible endpoints flexrun calls are all `openai` to the conventions;
/// `server.address` tells them apart.
pub const PROVIDER_OPENAI: &str = "openai";

pub const RUN_ID: &str = "flexrun.run.id";
pub const RUN_STATUS: &str = "flexrun.run.status";
/// A model call's cost in US dollars (the conventions have no cost attribute).
pub const COST_USD: &str = "flexrun.cost.usd";
pub const PLAN_VERSION: &str = "flexrun.plan.version";
pub const REPLAN_REASON: &str = "flexrun.replan.reason";
pub const PLAN_DRAFTS: &str = "flexrun.plan.drafts";
pub const NODE_ID: &str = "flexrun.node.id";
pub const NODE_STATUS: &str = "flexrun.node.status";
pub const NODE_ATTEMPT: &str = "flexrun.node.attempt";
pub const GOAL_PASSED: &str = "flexrun.goal.passed";
pub const GOAL_FAILED: &str = "flexrun.goal.failed";
pub const WAIT_KIND: &str = "flexrun.operator_wait.kind";
pub const WAIT_SUBJECT: &str = "flexrun.operator_wait.subject";
pub const WAIT_DECISION: &str = "flexrun.operator_wait.decision";

/// A call's (or a run's) token counts and cost as attributes: the counts it knows, each once.
pub fn usage(
    counts: &flexrun_core::usage::Counts,
    cost: Option<flexrun_core::usage::Micros>,
) -> Vec<opentelemetry::KeyValue> {
    let known = [
        (INPUT_TOKENS, counts.input_tokens),
        (OUTPUT_TOKENS, counts.output_tokens),
        (CACHE_READ_TOKENS, counts.cached_input_tokens),
        (REASONING_TOKENS, counts.reasoning_tokens),
    ];
    let mut attributes: Vec<opentelemetry::KeyValue> = known
        .into_iter()
        .filter_map(|(key, count)| Some(opentelemetry::KeyValue::new(key, i64::try_from(count?).ok()?)))
        .collect();
    if let Some(cost) = cost {
        attributes.push(opentelemetry::KeyValue::new(COST_USD, cost.dollars()));
    }
    attributes
}
