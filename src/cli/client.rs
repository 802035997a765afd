//! The HTTP client side of the command line: post an envelope, read the run's frames over SSE,
//! and re-attach with `Last-Event-ID` when the connection drops. The post carries an
//! `Idempotency-Key`, so posting again after a lost connection cannot start a second run.

use std::time::Duration;

use anyhow::{Context, bail};
use eventsource_stream::Eventsource;
use futures::StreamExt;
use serde_json::Value;

use super::terminal::safe;
use crate::events::payload::Complete;
use crate::events::{DecodedFrame, Event, Frame, ReceivedFrame};
use crate::retry::RetrySchedule;
use crate::run::RunStatus;
use crate::run::view::RunView;

/// How the client keeps trying to reach a server that is away (restarting, say): 5 more times,
/// waiting from 0.5 s, doubling, with jitter.
const RECONNECT: RetrySchedule = RetrySchedule { max_retries: 5, base_delay: Duration::from_millis(500) };

pub struct Client {
    http: reqwest::Client,
    base: String,
    api_key: Option<String>,
}

/// A frame as the command line reads it: typed, or — from a newer server that sends a frame
/// type this client does not know — only its place and type.
#[derive(Debug)]
pub enum Seen {
    Known(Box<DecodedFrame>),
    Unknown { seq: u64, kind: String },
}

impl Seen {
    /// Reads one SSE `data:` text.
    fn read(data: &str) -> anyhow::Result<Self> {
        if let Ok(frame) = Frame::decode(data) {
            return Ok(Self::Known(Box::new(frame)));
        }
        let frame: ReceivedFrame =
            serde_json::from_str(data).context("the server sent something that is not a frame")?;
        Ok(Self::Unknown { seq: frame.seq, kind: frame.kind })
    }

    fn seq(&self) -> u64 {
        match self {
            Self::Known(frame) => frame.seq.get(),
            Self::Unknown { seq, .. } => *seq,
        }
    }
}

/// How following a run ended.
#[derive(Debug)]
pub enum Outcome {
    /// The `complete` frame.
    Complete(Complete),
    /// The stream ended without `complete`: the run waits for an operator.
    Paused { run_id: String, status: RunStatus },
}

impl Client {
    pub fn new(base: &str, api_key: Option<String>) -> Self {
        Self { http: reqwest::Client::new(), base: base.trim_end_matches('/').to_string(), api_key }
    }

    fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        let request = self.http.request(method, format!("{}{path}", self.base));
        match &self.api_key {
            Some(key) => request.bearer_auth(key),
            None => request,
        }
    }

    /// Posts `envelope` to `run.stream` and hands every frame (with its raw JSON) to `on_frame`
    /// until the run completes or pauses.
    pub async fn run(&self, envelope: Vec<u8>, on_frame: impl FnMut(&Seen, &str)) -> anyhow::Result<Outcome> {
        let response = self.post(envelope).await?;
        self.follow(response, on_frame).await
    }

    /// Answers the request a paused run waits on (`run.resume`) and follows the run as [`Self::run`].
    pub async fn resume(&self, body: &Value, on_frame: impl FnMut(&Seen, &str)) -> anyhow::Result<Outcome> {
        let response = self
            .request(reqwest::Method::POST, "/api/v1/flex/run.resume")
            .header("accept", "text/event-stream")
            .json(body)
            .send()
            .await
            .with_context(|| format!("could not reach flexrun at {}", self.base))?;
        self.follow(check(response).await?, on_frame).await
    }

    /// A JSON request to the API; the answer's body.
    pub async fn call(&self, method: reqwest::Method, path: &str, body: Option<&Value>) -> anyhow::Result<Value> {
        let mut request = self.request(method, path);
        if let Some(body) = body {
            request = request.json(body);
        }
        let response = request.send().await.with_context(|| format!("could not reach flexrun at {}", self.base))?;
        Ok(check(response).await?.json().await?)
    }

    /// Reads a run's frames from `response` (a stream the server opened for it), re-attaching
    /// after the last frame seen whenever the connection drops, until the run completes or pauses.
    async fn follow(
        &self,
        response: reqwest::Response,
        mut on_frame: impl FnMut(&Seen, &str),
    ) -> anyhow::Result<Outcome> {
        let run_id = response
            .headers()
            .get("x-flexrun-run-id")
            .and_then(|v| v.to_str().ok())
            .map(String::from)
            .context("the server did not name the run (no X-Flexrun-Run-Id header)")?;
        let mut last_seq = 0;
        let mut response = Some(response);
        let mut backoff = RECONNECT.backoff();
        loop {
            let stream = match response.take() {
                Some(response) => response,
                None => match self.reattach(&run_id, last_seq).await {
                    Ok(response) => response,
                    Err(error) => {
                        let Some(retry) = backoff.next_retry(None) else { return Err(error) };
                        tracing::warn!(%error, attempt = retry.attempt, "re-attaching to the run failed; retrying");
                        tokio::time::sleep(retry.delay).await;
                        continue;
                    }
                },
            };
            let mut events = stream.bytes_stream().eventsource();
            while let Some(event) = events.next().await {
                let Ok(event) = event else { break };
                let frame = Seen::read(&event.data)?;
                last_seq = frame.seq();
                backoff = RECONNECT.backoff();
                on_frame(&frame, &event.data);
                if let Seen::Known(frame) = frame
                    && let Event::Complete(complete) = frame.event
                {
                    return Ok(Outcome::Complete(complete));
                }
            }
            // The stream ended without `complete`: the run paused, or the connection (or the
            // server) went away.
            match self.status(&run_id).await {
                Ok(status) if !status.is_active() => {
                    return Ok(Outcome::Paused { run_id, status });
                }
                Ok(_) => tracing::info!(run_id, last_seq, "stream dropped; re-attaching"),
                Err(error) => {
                    let Some(retry) = backoff.next_retry(None) else { return Err(error) };
                    tracing::warn!(%error, attempt = retry.attempt, "the server is unreachable; retrying");
                    tokio::time::sleep(retry.delay).await;
                }
            }
        }
    }

    /// Posts the envelope, posting again (same idempotency key) while the server cannot be reached.
    async fn post(&self, envelope: Vec<u8>) -> anyhow::Result<reqwest::Response> {
        let key = uuid::Uuid::now_v7().to_string();
        let mut backoff = RECONNECT.backoff();
        loop {
            let sent = self
                .request(reqwest::Method::POST, "/api/v1/flex/run.stream")
                .header("content-type", "application/json")
                .header("accept", "text/event-stream")
                .header("idempotency-key", &key)
                .body(envelope.clone())
                .send()
                .await;
            match sent {
                Ok(response) => return check(response).await,
                // A request that cannot be made (a URL reqwest will not send to) fails the same
                // way every time: nothing to retry.
                Err(error) if error.is_builder() => {
                    return Err(error).with_context(|| format!("cannot send to flexrun at {}", self.base));
                }
                Err(error) => {
                    let Some(retry) = backoff.next_retry(None) else {
                        return Err(error).with_context(|| format!("could not reach flexrun at {}", self.base));
                    };
                    tracing::warn!(%error, attempt = retry.attempt, "could not reach flexrun; posting again");
                    tokio::time::sleep(retry.delay).await;
                }
            }
        }
    }

    async fn reattach(&self, run_id: &str, last_seq: u64) -> anyhow::Result<reqwest::Response> {
        let response = self
            .request(reqwest::Method::GET, &format!("/api/v1/flex/runs/{run_id}/stream"))
            .header("accept", "text/event-stream")
            .header("last-event-id", last_seq.to_string())
            .send()
            .await?;
        check(response).await
    }

    async fn status(&self, run_id: &str) -> anyhow::Result<RunStatus> {
        let response = self.request(reqwest::Method::GET, &format!("/api/v1/flex/runs/{run_id}")).send().await?;
        let view: RunView = check(response).await?.json().await.context("the server's run is unreadable")?;
        Ok(view.run.status)
    }

    /// `GET path`, read as `T`.
    pub async fn get<T: serde::de::DeserializeOwned>(&self, path: &str) -> anyhow::Result<T> {
        let response = self
            .request(reqwest::Method::GET, path)
            .send()
            .await
            .with_context(|| format!("could not reach flexrun at {}", self.base))?;
        check(response).await?.json().await.context("the server's answer is unreadable")
    }
}

/// Turns an error response into a readable error (the API's `{error: {code, message, details}}`).
async fn check(response: reqwest::Response) -> anyhow::Result<reqwest::Response> {
    if response.status().is_success() {
        return Ok(response);
    }
    let status = response.status();
    let body: Value = response.json().await.unwrap_or(Value::Null);
    bail!(error_message(status, &body))
}

/// The message of an error response: its status and message, then one line per detail. The
/// texts are the server's, escaped: each stays on its line and cannot steer the terminal.
fn error_message(status: reqwest::StatusCode, body: &Value) -> String {
    let error = &body["error"];
    let mut message = format!("{status}: {}", safe(error["message"].as_str().unwrap_or("request failed")));
    for detail in error["details"].as_array().into_iter().flatten() {
        message.push_str(&format!(
            "\n  {} {}",
            safe(detail["path"].as_str().map(|p| if p.is_empty() { "(body)" } else { p }).unwrap_or("")),
            safe(detail["message"].as_str().unwrap_or(""))
        ));
    }
    message
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn error_messages_from_the_server_are_escaped_line_by_line() {
        let body = json!({"error": {"code": "invalid_envelope", "message": "bad\u{1b}[2J\nflexrun: all good",
            "details": [{"path": "/objective\u{9b}1A", "message": "too long\r"}, {"path": "", "message": "x"}]}});
        let message = error_message(reqwest::StatusCode::BAD_REQUEST, &body);
        assert_eq!(
            message,
            "400 Bad Request: bad\\x1b[2J\\x0aflexrun: all good\n  /objective\\u{9b}1A too long\\x0d\n  (body) x"
        );
        let empty = error_message(reqwest::StatusCode::BAD_GATEWAY, &Value::Null);
        assert_eq!(empty, "502 Bad Gateway: request failed");
    }
}
