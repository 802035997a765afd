//! Running one capability for one plan node: an `ai` capability is one model call, an `http`
//! capability one POST to its registered endpoint. Both answers are checked against the
//! capability's output contract before the node may complete.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use serde::Serialize;
use serde_json::{Map, Value};

use super::endpoint::{AddressGuard, GuardedResolver, RefusedAddress};
use super::signal::{self, InvalidSignal, Reply};
use super::{Capability, Executor};
use crate::condition::GoalConditionResult;
use crate::contract::{OutputContract, SchemaViolation};
use crate::llm::prompt::{OBJECTIVE_CHARS, SECTION_CHARS, lines_within, section, section_within, value};
use crate::llm::{ChatRequest, LlmClient, LlmError, Purpose, ResponseShape, parse_json_content};
use crate::slots::Slots;
use crate::timeouts::Timeouts;

/// What a node's capability is given (and what an `http` capability receives as its body).
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ContextBundle {
    pub run_id: String,
    pub node_id: String,
    pub capability_id: String,
    pub objective: String,
    /// Current values of the node's input facets.
    pub inputs: Map<String, Value>,
    /// The planner's instructions for this step, then the caller's special instructions.
    pub instructions: Vec<String>,
    /// Outputs of the steps this node depends on, by node id.
    pub prior_outputs: Map<String, Value>,
    /// Failed goal conditions on this node's output facets, when it runs again to repair them.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub repair: Vec<GoalConditionResult>,
    /// The questions this node asked operators (CLARIFY signals) and their answers, oldest first.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub clarifications: Vec<Clarification>,
    /// Why the previous attempt's output was refused, when the node runs again after failing its
    /// capability's post-conditions.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub post_condition_failures: Option<PostConditionFailures>,
}

/// The post-conditions the previous output failed, and how many attempts are left.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PostConditionFailures {
    pub failures: Vec<GoalConditionResult>,
    pub failures_so_far: u32,
    pub max_retries: u32,
}

/// A question a node asked through a CLARIFY signal, and the operator's answer.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Clarification {
    pub request_id: String,
    pub node_id: String,
    pub question: String,
    pub asked_at: String,
    /// `None` while the question waits for its answer.
    pub answer: Option<String>,
    pub answered_at: Option<String>,
}

/// Why a capability produced no usable output.
#[derive(Debug, Clone, thiserror::Error)]
pub enum CapabilityError {
    #[error("capability {0} is not registered")]
    NotRegistered(String),
    #[error("{0}")]
    Model(#[from] LlmError),
    #[error("capability endpoint timed out after {0:?}")]
    Timeout(Duration),
    #[error("could not reach the capability endpoint: {0}")]
    Connection(String),
    /// The endpoint is, or its host name resolved to, an address flexrun does not call. Calling
    /// again would resolve to the same refusal, so it is never retried.
    #[error("capability endpoint refused: {0}")]
    AddressRefused(RefusedAddress),
    #[error("capability endpoint answered HTTP {status}: {body}")]
    Status { status: u16, body: String, retry_after: Option<Duration> },
    #[error("capability response is larger than {0} bytes")]
    TooLarge(usize),
    #[error("capability output is {0}")]
    NotJson(String),
    #[error("capability output does not match its output contract ({} problem(s))", .0.len())]
    Contract(Vec<SchemaViolation>),
    /// Human capabilities are answered by an operator, never run.
    #[error("capability {0} is a human task; an operator submits its output")]
    HumanTask(String),
    #[error(transparent)]
    Signal(#[from] InvalidSignal),
}

impl CapabilityError {
    /// A failure of the call rather than of its content: worth retrying.
    pub fn is_transient(&self) -> bool {
        match self {
            Self::Model(e) => e.is_transient(),
            Self::Timeout(_) | Self::Connection(_) => true,
            Self::Status { status, .. } => matches!(status, 408 | 429) || *status >= 500,
            Self::NotRegistered(_)
            | Self::AddressRefused(_)
            | Self::TooLarge(_)
            | Self::NotJson(_)
            | Self::Contract(_)
            | Self::HumanTask(_)
            | Self::Signal(_) => false,
        }
    }

    /// How long the endpoint asked to wait before trying again.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Self::Model(e) => e.retry_after(),
            Self::Status { retry_after, .. } => *retry_after,
            _ => None,
        }
    }

    /// Stable code for `node_error` frames.
    pub fn code(&self) -> &'static str {
        match self {
            Self::NotRegistered(_) => "capability_not_registered",
            Self::Model(_) => "model_error",
            Self::Timeout(_) => "capability_timeout",
            Self::Connection(_) => "capability_unreachable",
            Self::AddressRefused(_) => "capability_address_refused",
            Self::Status { .. } => "capability_http_error",
            Self::TooLarge(_) => "capability_response_too_large",
            Self::NotJson(_) => "capability_output_not_json",
            Self::Contract(_) => "capability_output_invalid",
            Self::HumanTask(_) => "capability_is_human",
            Self::Signal(_) => "capability_signal_invalid",
        }
    }
}

/// What bounds `http` capability calls.
#[derive(Debug, Clone, Copy)]
pub struct HttpLimits {
    /// The largest response body read (`limits.max_capability_response_bytes`).
    pub max_response_bytes: usize,
    /// Calls in flight at once on this node (`http_capabilities.max_concurrent_calls`).
    pub max_concurrent_calls: usize,
}

/// Runs capabilities. One per server; cheap to share.
#[derive(Clone)]
pub struct Executors {
    llm: LlmClient,
    http: reqwest::Client,
    max_response_bytes: usize,
    /// Checks endpoints that name an address: the client resolves only names.
    addresses: AddressGuard,
    /// `http` calls in flight at once (`http_capabilities.max_concurrent_calls`).
    http_slots: Slots,
}

impl Executors {
    /// Executors whose `http` calls resolve names with the system resolver and reach only the
    /// addresses `addresses` allows.
    pub fn new(llm: LlmClient, limits: HttpLimits, addresses: AddressGuard) -> Result<Self, reqwest::Error> {
        Self::with_resolver(llm, limits, GuardedResolver::system(addresses))
    }

    /// Executors whose `http` calls resolve names with `resolver` (tests give names chosen
    /// addresses with it, without DNS).
    pub fn with_resolver(
        llm: LlmClient,
        limits: HttpLimits,
        resolver: GuardedResolver,
    ) -> Result<Self, reqwest::Error> {
        let addresses = resolver.guard();
        // Never follow redirects (only registered URLs are called) and never retry on our behalf
        // (every attempt is flexrun's, announced by a `retry` frame). Names are resolved by the
        // guarded resolver, so the address checked is the address connected to.
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .retry(reqwest::retry::never())
            .dns_resolver(Arc::new(resolver))
            .build()?;
        let http_slots = Slots::new(limits.max_concurrent_calls, crate::telemetry::http_capability_call_waiting);
        Ok(Self { llm, http, max_response_bytes: limits.max_response_bytes, addresses, http_slots })
    }

    /// Runs `capability` for one node and returns its signal, or its output checked against its
    /// contract.
    pub async fn run(
        &self,
        capability: &Capability,
        bundle: &ContextBundle,
        timeouts: &Timeouts,
    ) -> Result<Reply, CapabilityError> {
        let started = std::time::Instant::now();
        let result = self.call(capability, bundle, timeouts).await;
        let outcome = match &result {
            Ok(Reply::Output(_)) => "ok",
            Ok(Reply::Signal(_)) => "signal",
            Err(error) => error.code(),
        };
        crate::telemetry::capability_call(capability.executor.agent_type(), outcome, started.elapsed());
        result
    }

    async fn call(
        &self,
        capability: &Capability,
        bundle: &ContextBundle,
        timeouts: &Timeouts,
    ) -> Result<Reply, CapabilityError> {
        let answer = match &capability.executor {
            Executor::Ai { instructions } => self.run_ai(capability, instructions, bundle, timeouts.model_call).await?,
            Executor::Http { endpoint } => self.run_http(endpoint, bundle, timeouts.capability_call).await?,
            Executor::Human { .. } => return Err(CapabilityError::HumanTask(capability.id.clone())),
        };
        let reply = signal::read(answer)?;
        if let Reply::Output(output) = &reply {
            check_output(&capability.output_contract, output)?;
        }
        Ok(reply)
    }

    async fn run_ai(
        &self,
        capability: &Capability,
        instructions: &str,
        bundle: &ContextBundle,
        timeout: Duration,
    ) -> Result<Value, CapabilityError> {
        let slot = self.llm.slot().await;
        let (system, user) = ai_prompt(capability, instructions, bundle);
        let name = schema_name(&capability.id);
        let shape = match &capability.output_contract {
            // The model may answer with its output or with a signal.
            OutputContract::JsonSchema { schema, .. } => {
                ResponseShape::JsonSchema { name: &name, schema: schema.source(), or: Some(&signal::SCHEMA) }
            }
            OutputContract::Facets { .. } => ResponseShape::JsonObject,
            OutputContract::Freeform { .. } => ResponseShape::Text,
        };
        let content = slot.complete(ChatRequest { purpose: Purpose::Capability, system, user, shape, timeout }).await?;
        match capability.output_contract {
            OutputContract::Freeform { .. } => Ok(parse_json_content(&content).unwrap_or(Value::String(content))),
            _ => parse_json_content(&content).map_err(CapabilityError::NotJson),
        }
    }

    async fn run_http(
        &self,
        endpoint: &reqwest::Url,
        bundle: &ContextBundle,
        timeout: Duration,
    ) -> Result<Value, CapabilityError> {
        // The client connects to an address in the URL without resolving it, so the resolver
        // never sees it: such endpoints are checked here (registration refuses them too).
        self.addresses.check_url(endpoint).map_err(CapabilityError::AddressRefused)?;
        let _slot = self.http_slots.take().await;
        let call = async {
            let response = self.http.post(endpoint.clone()).json(bundle).send().await.map_err(connection)?;
            let status = response.status();
            let retry_after = response
                .headers()
                .get(reqwest::header::RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(crate::retry::parse_retry_after);
            let body = self.read_limited(response).await?;
            if !status.is_success() {
                let body = String::from_utf8_lossy(&body).chars().take(500).collect();
                return Err(CapabilityError::Status { status: status.as_u16(), body, retry_after });
            }
            serde_json::from_slice(&body).map_err(|e| CapabilityError::NotJson(format!("not valid JSON ({e})")))
        };
        tokio::time::timeout(timeout, call).await.map_err(|_| CapabilityError::Timeout(timeout))?
    }

    async fn read_limited(&self, response: reqwest::Response) -> Result<Vec<u8>, CapabilityError> {
        let limit = self.max_response_bytes;
        if response.content_length().is_some_and(|len| usize::try_from(len).map_or(true, |len| len > limit)) {
            return Err(CapabilityError::TooLarge(limit));
        }
        let mut body = Vec::new();
        let mut chunks = response.bytes_stream();
        while let Some(chunk) = chunks.next().await {
            body.extend_from_slice(&chunk.map_err(connection)?);
            if body.len() > limit {
                return Err(CapabilityError::TooLarge(limit));
            }
        }
        Ok(body)
    }
}

/// A failed call: refused by the resolver (found among the error's causes), or a connection
/// failure worth retrying.
fn connection(error: reqwest::Error) -> CapabilityError {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(&error);
    while let Some(e) = cause {
        if let Some(refused) = e.downcast_ref::<RefusedAddress>() {
            return CapabilityError::AddressRefused(refused.clone());
        }
        cause = e.source();
    }
    CapabilityError::Connection(error.without_url().to_string())
}

/// `response_format` names allow `[A-Za-z0-9_-]{1,64}`.
fn schema_name(capability_id: &str) -> String {
    capability_id.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' { c } else { '_' }).take(64).collect()
}

/// Checks an output against a capability's contract.
pub fn check_output(contract: &OutputContract, output: &Value) -> Result<(), CapabilityError> {
    let violations = match contract {
        OutputContract::JsonSchema { schema, .. } => schema.violations(output),
        OutputContract::Facets { facets } => facets
            .iter()
            .filter(|facet| output.get(facet.as_str()).is_none())
            .map(|facet| SchemaViolation {
                instance_path: String::new(),
                keyword: "required".into(),
                message: format!("facet \"{facet}\" is missing from the output object"),
            })
            .collect(),
        OutputContract::Freeform { .. } => Vec::new(),
    };
    if violations.is_empty() { Ok(()) } else { Err(CapabilityError::Contract(violations)) }
}

fn ai_prompt(capability: &Capability, instructions: &str, bundle: &ContextBundle) -> (String, String) {
    let mut system = format!(
        "{instructions}\n\nYou are executing capability \"{}\" (ID: {}) as one step of a flexrun plan.\n{}\n",
        capability.display_name, capability.id, capability.summary
    );
    system.push_str(match capability.output_contract {
        OutputContract::Freeform { .. } => "Answer with the requested text only.",
        _ => "Answer with one JSON object that satisfies the output contract, and nothing else.",
    });
    system.push('\n');
    system.push_str(signal::PROMPT);
    let mut user = String::new();
    section_within(&mut user, "OBJECTIVE", &bundle.objective, OBJECTIVE_CHARS);
    let instructions = bundle.instructions.iter().map(|i| format!("- {}", value(i)));
    section(&mut user, "STEP", &format!("Node: {}\n{}", bundle.node_id, lines_within(instructions, SECTION_CHARS)));
    section(&mut user, "INPUTS", &json_text(&bundle.inputs));
    if !bundle.prior_outputs.is_empty() {
        section(&mut user, "PRIOR OUTPUTS", &json_text(&bundle.prior_outputs));
    }
    if !bundle.repair.is_empty() {
        let repair = serde_json::to_string(&bundle.repair).unwrap_or_default();
        section(&mut user, "GOAL CONDITIONS TO REPAIR", &format!("Your output must make these hold:\n{repair}"));
    }
    if let Some(failed) = &bundle.post_condition_failures {
        let failed = serde_json::to_string(failed).unwrap_or_default();
        let text = format!("Previous post-condition failures detected.\n{failed}");
        section(&mut user, "PREVIOUS POST-CONDITION FAILURES", &text);
    }
    if !bundle.clarifications.is_empty() {
        let asked = bundle.clarifications.iter().map(|c| {
            let answer = c.answer.as_deref().unwrap_or("(not answered)");
            format!("- Question: {}\n  Answer: {}", value(&c.question), value(answer))
        });
        let text = format!("You asked, and an operator answered:\n{}", lines_within(asked, SECTION_CHARS));
        section(&mut user, "CLARIFICATIONS", &text);
    }
    let contract = serde_json::to_string(&capability.output_contract).unwrap_or_default();
    section(&mut user, "OUTPUT CONTRACT", &contract);
    (system, user)
}

/// A JSON object as compact text, without copying it into a `Value` first.
fn json_text(map: &Map<String, Value>) -> String {
    serde_json::to_string(map).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn facets_contract_needs_every_facet() {
        let contract = OutputContract::parse(&json!({"mode": "facets", "facets": ["a", "b"]}), "").unwrap();
        assert!(check_output(&contract, &json!({"a": 1, "b": 2})).is_ok());
        let Err(CapabilityError::Contract(violations)) = check_output(&contract, &json!({"a": 1})) else {
            panic!("expected contract violation")
        };
        assert_eq!(violations.len(), 1);
        assert!(violations[0].message.contains("\"b\""));
    }

    #[test]
    fn schema_names_are_sanitised() {
        assert_eq!(schema_name("copywriter.draft v2"), "copywriter_draft_v2");
    }
}
