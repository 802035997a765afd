//! A flex run's frames as a LangGraph stream: `metadata` first, then for each frame the events of
//! the modes asked for (`values`, `updates`, `custom`, `messages`), `error` if the run failed,
//! and `end` last. The last event of each frame carries `id: <seq>`, so a client that reconnects
//! with `Last-Event-ID` gets exactly the frames after it; a `: heartbeat` comment keeps an idle
//! stream alive. [`Translator`] is pure; [`respond`] puts it on the wire.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use actix_web::http::header;
use actix_web::{HttpRequest, HttpResponse, Responder};
use actix_web_lab::sse::{self, Sse};
use futures::stream::BoxStream;
use futures::{StreamExt, stream};
use serde::Serialize;
use serde_json::{Value, json};

use super::project;
use super::request::StreamMode;
use super::values::ValuesWriter;
use crate::events::payload::CompleteStatus;
use crate::events::{Event, Frame};
use crate::redact::Redaction;
use crate::run::RunStatus;
use crate::run::backlog::Backlogs;
use crate::run::follow::FollowError;
use crate::run::state::{At, RunState};
use crate::store::events::LoggedFrame;
use crate::telemetry;

/// How often an idle stream sends a comment: the JS SDK re-joins after three missed ones.
pub const HEARTBEAT: Duration = Duration::from_secs(5);

/// One SSE event of the stream.
#[derive(Debug, Clone, PartialEq)]
pub struct Part {
    pub event: &'static str,
    /// The event's JSON text.
    pub data: String,
    pub id: Option<u64>,
}

impl Part {
    fn new(event: &'static str, data: &Value) -> Self {
        Self { event, data: data.to_string(), id: None }
    }

    /// An event whose data is `value` with every secret replaced, as `redaction.value` would
    /// replace them. The keys are judged as the text is written (`Redaction::watch`), so a value
    /// without a secret key (every one, but for a run whose data has one) is written once and
    /// not rebuilt: `values` is the whole projection, sent after every step.
    fn redacted(event: &'static str, value: &impl Serialize, redaction: &Redaction) -> Self {
        let mut watch = redaction.watch();
        let mut text = Vec::with_capacity(1024);
        let written = value.serialize(&mut serde_json::Serializer::with_formatter(&mut text, &mut watch));
        let data = match (written, watch.found()) {
            (Ok(()), false) => String::from_utf8(text).ok(),
            _ => None,
        };
        let rebuilt = || redaction.value(serde_json::to_value(value).unwrap_or_default()).to_string();
        Self { event, data: data.unwrap_or_else(rebuilt), id: None }
    }
}

/// Turns a run's frames into LangGraph events, folding them into the run's state as they come.
pub struct Translator {
    state: RunState,
    modes: Vec<StreamMode>,
    objective: String,
    chat: Option<Vec<Value>>,
    redaction: Redaction,
    values: ValuesWriter,
}

impl Translator {
    /// Translates the frames that follow `state`.
    pub fn new(
        state: RunState,
        modes: Vec<StreamMode>,
        objective: String,
        chat: Option<Vec<Value>>,
        redaction: Redaction,
    ) -> Self {
        let values = ValuesWriter::new(&redaction, state.run_id.as_str(), &objective);
        Self { state, modes, objective, chat, redaction, values }
    }

    fn wants(&self, mode: StreamMode) -> bool {
        self.modes.contains(&mode)
    }

    /// The first event: the run's id (and that this is its first attempt).
    pub fn metadata(&self) -> Part {
        Part::new("metadata", &json!({"run_id": self.state.run_id, "attempt": 1}))
    }

    /// The events for one frame (the last one with the frame's seq as its id).
    pub fn frame(&mut self, logged: &LoggedFrame) -> Vec<Part> {
        let mut parts = Vec::new();
        if let Some((at, event)) = event_of(logged) {
            // `updates` carry a node's output whole, once; the state the stream keeps does not.
            let update = self.wants(StreamMode::Updates).then(|| self.update(&event)).flatten();
            let event = project::lightened(self.state.run_id.as_str(), at.seq, event);
            if let Err(error) = self.state.apply(at, &event) {
                tracing::warn!(error = %error, "a frame could not be applied for a LangGraph stream");
            }
            if let Some(update) = update {
                parts.push(Part::redacted("updates", &update, &self.redaction));
            }
            if self.wants(StreamMode::Values) {
                self.values.saw(&event);
                if changes_values(&event) {
                    parts.push(self.values());
                }
            }
            if self.wants(StreamMode::MessagesTuple)
                && matches!(&*event, Event::Complete(c) if c.status == CompleteStatus::Completed)
                && let Some(message) = project::answer(&self.state, &self.redaction)
            {
                let metadata = json!({"run_id": self.state.run_id, "langgraph_node": "flex"});
                parts.push(Part::redacted("messages", &json!([message, metadata]), &self.redaction));
            }
        }
        if self.wants(StreamMode::Custom) {
            parts.push(Part { event: "custom", data: self.redaction.text(&logged.json).into_owned(), id: None });
        }
        if let Some(last) = parts.last_mut() {
            last.id = Some(logged.seq.get());
        }
        parts
    }

    /// `values`: the run's projection, with its open requests.
    fn values(&mut self) -> Part {
        let chat = self.chat.as_deref();
        match self.values.write(&self.state, chat, &self.redaction) {
            Some(data) => Part { event: "values", data, id: None },
            None => {
                let values = project::Values::of(&self.state, &self.objective, chat, &self.redaction)
                    .with_interrupts(&self.state);
                Part::redacted("values", &values, &self.redaction)
            }
        }
    }

    /// `updates`: what a step changed, keyed by the step's name.
    fn update(&self, event: &Event) -> Option<Value> {
        match event {
            Event::PlanGenerated(generated) => {
                Some(json!({"planner": {"planVersion": generated.plan.plan.version, "plan": generated.plan}}))
            }
            Event::NodeComplete(complete) => Some(json!({ complete.node_id.clone(): {"output": complete.output} })),
            Event::NodeError(error) => Some(json!({ error.node_id.clone(): {"error": error.error} })),
            Event::GoalConditionFailed(failed) => {
                Some(json!({"goal_conditions": {"failed": failed.failed_goal_conditions, "attempt": failed.attempt}}))
            }
            Event::HitlRequest(request) => {
                Some(json!({"__interrupt__": [project::interrupt(&self.state, &request.request)]}))
            }
            // Not a step's result: the `custom` mode carries them.
            Event::Start(_)
            | Event::PlanRequested(_)
            | Event::PlanRejected(_)
            | Event::PlanUpdated(_)
            | Event::NodeStart(_)
            | Event::ValidationError(_)
            | Event::PolicyTriggered(_)
            | Event::PolicyUpdate(_)
            | Event::HitlResolved(_)
            | Event::Log(_)
            | Event::Retry(_)
            | Event::BudgetExceeded(_)
            | Event::Complete(_) => None,
        }
    }

    /// The last events: `error` if the run failed, then `end`.
    pub fn end(&self) -> Vec<Part> {
        let mut parts = Vec::new();
        if self.state.status == RunStatus::Failed {
            let error = self.state.end.as_ref().and_then(|end| end.error.clone()).unwrap_or(Value::Null);
            let code = error.get("code").and_then(Value::as_str).unwrap_or("run_failed");
            let message = error.get("message").and_then(Value::as_str).unwrap_or("the run failed");
            parts.push(Part::redacted("error", &json!({"error": code, "message": message}), &self.redaction));
        }
        let status = project::run_status(self.state.status);
        parts.push(Part::new("end", &json!({"run_id": self.state.run_id, "status": status})));
        parts
    }
}

/// A frame's event and place: as encoded, for a frame delivered live; else read from its text.
fn event_of(logged: &LoggedFrame) -> Option<(At, Cow<'_, Event>)> {
    if let Some(live) = &logged.live {
        return Some((At { seq: logged.seq, timestamp: live.timestamp }, Cow::Borrowed(&*live.event)));
    }
    match Frame::decode(&logged.json) {
        Ok(decoded) => Some((At { seq: decoded.seq, timestamp: decoded.timestamp }, Cow::Owned(decoded.event))),
        Err(error) => {
            tracing::warn!(error = %crate::excerpt::log(&error), "a frame could not be decoded for a LangGraph stream");
            None
        }
    }
}

/// Frames that change what `values` shows.
fn changes_values(event: &Event) -> bool {
    matches!(
        event,
        Event::Start(_)
            | Event::PlanGenerated(_)
            | Event::NodeComplete(_)
            | Event::NodeError(_)
            | Event::GoalConditionFailed(_)
            | Event::HitlRequest(_)
            | Event::HitlResolved(_)
            | Event::Complete(_)
    )
}

/// The stream of a run on a thread, with `Location` (where the SDK reconnects, with the same
/// modes) and `Content-Location` (the run).
pub fn respond(
    req: &HttpRequest,
    translator: Translator,
    frames: BoxStream<'static, Result<LoggedFrame, FollowError>>,
    thread_id: &str,
    backlogs: &Arc<Backlogs>,
) -> HttpResponse {
    let run_id = translator.state.run_id.to_string();
    let modes: Vec<String> = translator.modes.iter().map(|m| format!("stream_mode={}", m.as_str())).collect();
    let location = format!("/threads/{thread_id}/runs/{run_id}/stream?{}", modes.join("&"));
    let content_location = format!("/threads/{thread_id}/runs/{run_id}");
    let first = translator.metadata();
    let open = telemetry::open_stream();
    let body =
        stream::unfold((translator, frames, Some(first), false), move |(mut translator, mut frames, first, ended)| {
            let _open = &open;
            async move {
                if let Some(first) = first {
                    return Some((Ok(vec![first]), (translator, frames, None, ended)));
                }
                if ended {
                    return None;
                }
                match frames.next().await {
                    Some(Ok(frame)) => {
                        let parts = translator.frame(&frame);
                        Some((Ok(parts), (translator, frames, None, false)))
                    }
                    Some(Err(error)) => Some((Err(error), (translator, frames, None, true))),
                    None => {
                        let parts = translator.end();
                        Some((Ok(parts), (translator, frames, None, true)))
                    }
                }
            }
        })
        .flat_map(|parts: Result<Vec<Part>, FollowError>| {
            let events: Vec<Result<sse::Event, FollowError>> = match parts {
                Ok(parts) => parts.into_iter().map(|p| Ok(event(p))).collect(),
                Err(error) => vec![Err(error)],
            };
            stream::iter(events)
        });
    let sse = Sse::from_stream(body).with_keep_alive(HEARTBEAT);
    let mut response = sse.respond_to(req);
    let headers = response.headers_mut();
    for (name, value) in [(header::LOCATION, location), (header::CONTENT_LOCATION, content_location)] {
        if let Ok(value) = header::HeaderValue::from_str(&value) {
            headers.insert(name, value);
        }
    }
    crate::http::sliced(response, backlogs)
}

fn event(part: Part) -> sse::Event {
    let data = sse::Data::new(part.data).event(part.event);
    sse::Event::Data(match part.id {
        Some(id) => data.id(id.to_string()),
        None => data,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redacted_data_is_the_redacted_value_written_once() {
        let redaction = Redaction::default();
        let plain = json!({"runId": "r", "outputs": {"draft": {"text": "x", "quality_score": 0.9}}, "plan": null});
        let part = Part::redacted("values", &plain, &redaction);
        assert_eq!(part.data, plain.to_string());
        let secret = json!({"outputs": {"call": {"api_key": "sk-1", "headers": {"Authorization": "Bearer t"}}}});
        let part = Part::redacted("values", &secret, &redaction);
        assert_eq!(part.data, redaction.value(secret).to_string());
        assert!(!part.data.contains("sk-1") && !part.data.contains("Bearer t"), "{}", part.data);
    }
}
