//! A model call's span (`chat <model>`, GenAI conventions), when the call is made in a traced
//! run's scope (`crate::traces::SpanScope`): one per attempt, a child of the plan or step it is
//! for, its request sent with that span's `traceparent`.

use opentelemetry::trace::SpanKind;
use serde_json::json;

use super::{ChatRequest, LlmError, ResponseShape};
use crate::traces::{OpenSpan, SpanScope, spans};
use flexrun_core::usage::Metered;

/// A call's span, with the scope it was made in (for captured content).
pub struct ChatSpan {
    span: OpenSpan,
    scope: SpanScope,
}

impl ChatSpan {
    /// The span of a call about to be sent to `url`, if the current future is in a traced run.
    pub fn start(request: &ChatRequest<'_>, url: &reqwest::Url) -> Option<Self> {
        let scope = SpanScope::current()?;
        let mut span = scope.child(spans::chat(request.model), SpanKind::Client);
        span.set(spans::OPERATION, "chat");
        span.set(spans::PROVIDER, spans::PROVIDER_OPENAI);
        span.set(spans::REQUEST_MODEL, request.model.to_string());
        span.set(spans::CONVERSATION_ID, scope.run_id().to_string());
        if let Some(host) = url.host_str() {
            span.set(spans::SERVER_ADDRESS, host.to_string());
        }
        if let Some(port) = url.port_or_known_default() {
            span.set(spans::SERVER_PORT, i64::from(port));
        }
        let output_type = match request.shape {
            ResponseShape::Text => "text",
            ResponseShape::JsonObject | ResponseShape::JsonSchema { .. } => "json",
        };
        span.set(spans::OUTPUT_TYPE, output_type);
        if let (Some(system), Some(user)) = (scope.text(request.system.text()), scope.text(request.user)) {
            let messages = json!([
                {"role": "system", "parts": [{"type": "text", "content": system}]},
                {"role": "user", "parts": [{"type": "text", "content": user}]},
            ]);
            span.set(spans::INPUT_MESSAGES, messages.to_string());
        }
        Some(Self { span, scope })
    }

    /// The `traceparent` header of the call's request.
    pub fn traceparent(&self) -> String {
        self.span.id().header()
    }

    /// What the endpoint answered, as far as the span shows it. Its id and finish reason are the
    /// endpoint's text, set whether or not content is captured: kept only when they are short
    /// identifiers (one of megabytes would make the whole export batch too large to send).
    pub fn answered(&mut self, id: Option<&str>, model: Option<&str>, finish: Option<&str>, content: Option<&str>) {
        if let Some(id) = id.and_then(crate::excerpt::identifier) {
            self.span.set(spans::RESPONSE_ID, id.to_string());
        }
        if let Some(model) = model {
            self.span.set(spans::RESPONSE_MODEL, model.to_string());
        }
        if let Some(finish) = finish.and_then(crate::excerpt::identifier) {
            let reasons: Vec<opentelemetry::StringValue> = vec![finish.to_string().into()];
            self.span.set(spans::FINISH_REASONS, opentelemetry::Value::Array(reasons.into()));
        }
        if let Some(content) = content.and_then(|content| self.scope.text(content)) {
            let messages = json!([{
                "role": "assistant",
                "parts": [{"type": "text", "content": content}],
                "finish_reason": finish.unwrap_or("stop"),
            }]);
            self.span.set(spans::OUTPUT_MESSAGES, messages.to_string());
        }
    }

    /// Ends the span with the call's usage, or its error.
    pub fn end(mut self, called: &Metered<Result<String, LlmError>>) {
        if let Some(usage) = &called.usage {
            self.span.usage(&usage.counts, usage.cost);
        }
        if let Err(error) = &called.result {
            self.span.fail(error.kind(), &error.to_string());
        }
        self.span.end();
    }
}
