//! Running one capability for one plan node: an `ai` capability is one model call, an `http`
//! capability one POST to its registered endpoint. Both answers are checked against the
//! capability's output contract before the node may complete.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use serde_json::{Map, Value};

use super::resolver::GuardedResolver;
use super::signal::{self, Reply};
use super::{AddressGuard, Capability, CapabilityError, ContextBundle, Executor, RefusedAddress, check_output};
use crate::contract::OutputContract;
use crate::llm::pool::ModelPool;
use crate::llm::prompt::{OBJECTIVE_CHARS, SECTION_CHARS, lines_within, section, section_within, value};
use crate::llm::route::RouteEntry;
use crate::llm::{ChatRequest, Purpose, ResponseShape, SystemPrompt, parse_json_content};
use crate::mcp::McpServers;
use crate::slots::Slots;
use crate::timeouts::Timeouts;
use flexrun_core::mcp::McpTool;
use flexrun_core::usage::Metered;

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
    /// The model pool `ai` capabilities call, along `route` (`[llm.routes] capabilities`).
    models: Arc<ModelPool>,
    route: Arc<[RouteEntry]>,
    http: reqwest::Client,
    max_response_bytes: usize,
    /// Checks endpoints that name an address: the client resolves only names.
    addresses: AddressGuard,
    /// `http` and MCP tool calls in flight at once (`http_capabilities.max_concurrent_calls`).
    http_slots: Slots,
    /// The MCP servers whose tools `mcp` capabilities call.
    mcp: Option<McpServers>,
}

impl Executors {
    /// Executors whose `http` calls resolve names with the system resolver and reach only the
    /// addresses `addresses` allows.
    pub fn new(
        models: (Arc<ModelPool>, Vec<RouteEntry>),
        limits: HttpLimits,
        addresses: AddressGuard,
    ) -> Result<Self, reqwest::Error> {
        Self::with_resolver(models, limits, GuardedResolver::system(addresses))
    }

    /// Executors whose `http` calls resolve names with `resolver` (tests give names chosen
    /// addresses with it, without DNS).
    pub fn with_resolver(
        (models, route): (Arc<ModelPool>, Vec<RouteEntry>),
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
        let route = route.into();
        Ok(Self {
            models,
            route,
            http,
            max_response_bytes: limits.max_response_bytes,
            addresses,
            http_slots,
            mcp: None,
        })
    }

    /// These executors, calling MCP tools through `mcp`.
    pub fn with_mcp(mut self, mcp: McpServers) -> Self {
        self.mcp = Some(mcp);
        self
    }

    /// The client of `http` calls — redirects never followed, names resolved by the guarded
    /// resolver — for MCP sessions, under the same rules.
    pub fn http_client(&self) -> reqwest::Client {
        self.http.clone()
    }

    /// Runs `capability` for one node and returns its signal, or its output checked against its
    /// contract, with the usage of its model call (an `ai` capability's).
    pub async fn run(
        &self,
        capability: &Capability,
        bundle: &ContextBundle,
        timeouts: &Timeouts,
    ) -> Metered<Result<Reply, CapabilityError>> {
        let started = std::time::Instant::now();
        let called = self.call(capability, bundle, timeouts).await;
        let outcome = match &called.result {
            Ok(Reply::Output(_)) => "ok",
            Ok(Reply::Signal(_)) => "signal",
            Err(error) => error.code(),
        };
        crate::telemetry::capability_call(capability.executor.agent_type(), outcome, started.elapsed());
        called
    }

    async fn call(
        &self,
        capability: &Capability,
        bundle: &ContextBundle,
        timeouts: &Timeouts,
    ) -> Metered<Result<Reply, CapabilityError>> {
        let answer = match &capability.executor {
            Executor::Ai { instructions } => self.run_ai(capability, instructions, bundle, timeouts.model_call).await,
            Executor::Http { endpoint } => {
                Metered::unmetered(self.run_http(endpoint, bundle, timeouts.capability_call).await)
            }
            Executor::Human { .. } => {
                return Metered::unmetered(Err(CapabilityError::HumanTask(capability.id.clone())));
            }
            // Boxed: an MCP session's future is six times an `ai` call's, and every step's future
            // would otherwise be as large, whatever its capability.
            Executor::Mcp(tool) => {
                let call = Box::pin(self.run_mcp(capability, tool, bundle, timeouts.capability_call));
                return Metered::unmetered(call.await);
            }
        };
        answer.map(|answer| {
            let reply = signal::read(answer?)?;
            if let Reply::Output(output) = &reply {
                check_output(&capability.output_contract, output)?;
            }
            Ok(reply)
        })
    }

    async fn run_ai(
        &self,
        capability: &Capability,
        instructions: &str,
        bundle: &ContextBundle,
        timeout: Duration,
    ) -> Metered<Result<Value, CapabilityError>> {
        let (system, user) = ai_prompt(capability, instructions, bundle);
        let name = schema_name(&capability.id);
        let shape = match &capability.output_contract {
            // The model may answer with its output or with a signal.
            OutputContract::JsonSchema { schema, .. } => {
                ResponseShape::JsonSchema { name: &name, schema: schema.json(), or: Some(&signal::SCHEMA) }
            }
            OutputContract::Facets { .. } => ResponseShape::JsonObject,
            OutputContract::Freeform { .. } => ResponseShape::Text,
        };
        let chain = self.chain(capability, bundle);
        let routed = self
            .models
            .complete(&chain, |_, model| ChatRequest {
                purpose: Purpose::Capability,
                model,
                system: SystemPrompt::Built(&system),
                user: &user,
                shape,
                timeout,
            })
            .await;
        routed.called.map(|content| {
            let content = content?;
            match capability.output_contract {
                OutputContract::Freeform { .. } => Ok(parse_json_content(&content).unwrap_or(Value::String(content))),
                _ => parse_json_content(&content).map_err(CapabilityError::NotJson),
            }
        })
    }

    /// The chain an `ai` capability's call goes along: the run's (`policies.models`), else the
    /// capability's `preferredModels`, else the server's route. Both were checked against the
    /// endpoints when given; one the configuration no longer serves falls back to the route.
    fn chain(&self, capability: &Capability, bundle: &ContextBundle) -> Vec<RouteEntry> {
        let asked = if bundle.models.is_empty() { &capability.preferred_models } else { &bundle.models };
        if asked.is_empty() {
            return self.route.to_vec();
        }
        self.models.chain(asked).unwrap_or_else(|problem| {
            tracing::warn!(capability = %capability.id, problem = %crate::excerpt::log(&problem), "model chain not served; using the route");
            self.route.to_vec()
        })
    }

    /// Why a plan's step cannot run when its capability is no longer registered: a tool its MCP
    /// server stopped offering is `tool_unavailable`, like a tool that went away mid-run; anything
    /// else `capability_not_registered`. Both ask for a repair replan.
    pub fn unregistered(&self, capability_id: &str) -> CapabilityError {
        match &self.mcp {
            Some(mcp) if mcp.names_a_tool(capability_id) => CapabilityError::ToolUnavailable(format!(
                "capability {capability_id} is no longer offered: its MCP server stopped listing the tool"
            )),
            _ => CapabilityError::NotRegistered(capability_id.to_string()),
        }
    }

    /// An MCP tool call, within the server's timeout and the capability call timeout.
    async fn run_mcp(
        &self,
        capability: &Capability,
        tool: &McpTool,
        bundle: &ContextBundle,
        timeout: Duration,
    ) -> Result<Reply, CapabilityError> {
        let mcp = self.mcp.as_ref().ok_or_else(|| CapabilityError::ToolUnavailable("MCP is not set up".into()))?;
        let facet = capability.output_facets.first().map(String::as_str).unwrap_or(tool.name.as_str());
        let _slot = self.http_slots.take().await;
        mcp.call(tool, facet, bundle, timeout).await
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
            let mut post = self.http.post(endpoint.clone()).json(bundle);
            if let Some(scope) = crate::traces::SpanScope::current() {
                post = post.header("traceparent", scope.traceparent());
            }
            let response = post.send().await.map_err(connection)?;
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

    #[test]
    fn schema_names_are_sanitised() {
        assert_eq!(schema_name("copywriter.draft v2"), "copywriter_draft_v2");
    }
}
