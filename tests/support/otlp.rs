//! A real OTLP/HTTP trace receiver as a child process on loopback, for the tracing tests:
//! tests/otlp/receiver.py, which decodes every export with the official OpenTelemetry protobuf
//! definitions (`opentelemetry-proto` from PyPI) and keeps the spans as JSON for the test to read.
//! `scripts/test` installs opentelemetry-proto into target/test-tools/otel-venv and points
//! FLEXRUN_OTEL_PYTHON at its python; without it a test fails and says so, never skips.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

use super::process::free_port;

/// How long the receiver may take to answer after it is started (Python starts in well under a
/// second, far longer on a loaded machine running tests side by side).
const STARTUP: Duration = Duration::from_secs(30);

/// How much of the end of the receiver's log a panic message shows.
const LOG_TAIL: usize = 4000;

/// What a test run without scripts/test is told.
const HOW_TO_INSTALL: &str = "run the tests with ./scripts/test, which installs opentelemetry-proto into \
     target/test-tools/otel-venv and sets FLEXRUN_OTEL_PYTHON to its python (or point FLEXRUN_OTEL_PYTHON at a \
     python that has opentelemetry-proto yourself)";

/// The exit status of tests/otlp/receiver.py when it cannot import opentelemetry-proto.
const EXIT_NOT_INSTALLED: i32 = 3;

/// tests/otlp/receiver.py on a port of its own, logging (stdout and stderr) to a file kept for the
/// panic messages. Killed when dropped.
pub struct OtlpReceiver {
    child: Option<Child>,
    port: u16,
    /// Holds the log: `<dir>/receiver.log`.
    dir: tempfile::TempDir,
    http: reqwest::Client,
}

impl OtlpReceiver {
    /// Starts the receiver answering every export with 200 (mode `ok`); returns once it answers.
    pub async fn start() -> Self {
        Self::start_in_mode("ok").await
    }

    /// Starts the receiver in `mode` (`ok`, `fail`: every export answered 503, `hang`: every
    /// export answered after 60 s); returns once it answers.
    pub async fn start_in_mode(mode: &str) -> Self {
        let python = python();
        let port = free_port();
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/otlp/receiver.py");
        let dir = tempfile::tempdir().expect("a directory for the OTLP receiver's log");
        let log_path = dir.path().join("receiver.log");
        let log = std::fs::File::create(&log_path).expect("create the OTLP receiver's log");
        let stdout = log.try_clone().expect("share the OTLP receiver's log");
        let child = Command::new(&python)
            .arg(script)
            .arg(port.to_string())
            .arg(format!("--mode={mode}"))
            .env("PYTHONUNBUFFERED", "1")
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| {
                panic!("start the OTLP receiver ({} {script}): {e}: {HOW_TO_INSTALL}", python.display())
            });
        let mut receiver = Self { child: Some(child), port, dir, http: super::http_client() };
        receiver.wait_until_ready().await;
        receiver
    }

    /// The base URL (`http://127.0.0.1:<port>`), to which an OTLP/HTTP exporter appends
    /// `/v1/traces`.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The full URL of the trace route (`<endpoint>/v1/traces`).
    pub fn traces_url(&self) -> String {
        format!("{}/v1/traces", self.endpoint())
    }

    /// Every span received so far (exports answered 200), in the order received, as
    /// tests/otlp/receiver.py keeps them: `traceId`, `spanId`, `parentSpanId` (lowercase hex, ""
    /// for a root), `name`, `kind` (`SPAN_KIND_INTERNAL`, ...), `startTimeUnixNano`,
    /// `endTimeUnixNano`, `attributes` (an object of typed values), `status` (`{code:
    /// "STATUS_CODE_ERROR", message}`), `events`, `links`, `resource` (an object), `scope`.
    pub async fn spans(&self) -> Vec<Value> {
        self.get_list("/spans").await
    }

    /// Polls (every 50 ms) until `pred` holds for the spans received so far, and returns them;
    /// panics after `timeout`, listing the names of the spans there are.
    pub async fn wait_for_spans(&self, pred: impl Fn(&[Value]) -> bool, timeout: Duration) -> Vec<Value> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let spans = self.spans().await;
            if pred(&spans) {
                return spans;
            }
            if tokio::time::Instant::now() >= deadline {
                let names: Vec<&str> = spans.iter().map(|s| s["name"].as_str().unwrap_or("?")).collect();
                panic!(
                    "the OTLP receiver's spans did not become what the test waits for within {timeout:?}; it has {} \
                     span(s): {names:?}\n{}",
                    spans.len(),
                    self.log_tail()
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Every export request received so far, in order, whatever it was answered:
    /// `{"headers": {lowercased name: value}, "spans": <count in its body>, "mode": "ok" | "fail" |
    /// "hang", "status": <the HTTP status it was answered with, null while a hang lasts>}`.
    pub async fn requests(&self) -> Vec<Value> {
        self.get_list("/requests").await
    }

    /// Sets how exports are answered from now on: `ok`, `fail` (503, storing nothing) or `hang`
    /// (answered 503 after 60 s, storing nothing).
    pub async fn set_mode(&self, mode: &str) {
        self.post("/control", json!({ "mode": mode })).await;
    }

    /// Forgets the spans and requests received so far.
    pub async fn reset(&self) {
        self.post("/reset", json!({})).await;
    }

    /// Everything the receiver wrote to stdout and stderr so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("receiver.log")).unwrap_or_default()
    }

    /// The end of [`Self::log`], for panic messages.
    fn log_tail(&self) -> String {
        let log = self.log();
        let mut start = log.len().saturating_sub(LOG_TAIL);
        while !log.is_char_boundary(start) {
            start += 1;
        }
        format!("OTLP receiver log (last {} bytes):\n{}", log.len() - start, &log[start..])
    }

    async fn get_list(&self, path: &str) -> Vec<Value> {
        let url = format!("{}{path}", self.endpoint());
        let response = self
            .http
            .get(&url)
            .send()
            .await
            .unwrap_or_else(|e| panic!("GET {url} of the OTLP receiver: {e}\n{}", self.log_tail()));
        assert_eq!(response.status(), 200, "GET {url} of the OTLP receiver\n{}", self.log_tail());
        response
            .json()
            .await
            .unwrap_or_else(|e| panic!("GET {url} of the OTLP receiver answers a JSON list: {e}\n{}", self.log_tail()))
    }

    async fn post(&self, path: &str, body: Value) {
        let url = format!("{}{path}", self.endpoint());
        let response = self
            .http
            .post(&url)
            .json(&body)
            .send()
            .await
            .unwrap_or_else(|e| panic!("POST {url} of the OTLP receiver: {e}\n{}", self.log_tail()));
        let status = response.status();
        let text = response.text().await.unwrap_or_default();
        assert_eq!(status, 200, "POST {url} {body} to the OTLP receiver: {text}\n{}", self.log_tail());
    }

    /// Polls `GET /healthz` until the receiver answers; panics when it exits first (saying how to
    /// install opentelemetry-proto when that is why) or after [`STARTUP`].
    async fn wait_until_ready(&mut self) {
        let deadline = tokio::time::Instant::now() + STARTUP;
        let url = format!("{}/healthz", self.endpoint());
        loop {
            let ready = self.http.get(&url).send().await.is_ok_and(|response| response.status().is_success());
            if ready {
                return;
            }
            let exited = self.child.as_mut().and_then(|c| c.try_wait().expect("poll the OTLP receiver"));
            if let Some(status) = exited {
                self.child = None;
                if status.code() == Some(EXIT_NOT_INSTALLED) {
                    panic!(
                        "the OTLP receiver cannot import opentelemetry-proto with FLEXRUN_OTEL_PYTHON: \
                         {HOW_TO_INSTALL}\n{}",
                        self.log_tail()
                    );
                }
                panic!("the OTLP receiver exited with {status} at start\n{}", self.log_tail());
            }
            if tokio::time::Instant::now() >= deadline {
                panic!(
                    "the OTLP receiver did not answer on port {} within {STARTUP:?}\n{}",
                    self.port,
                    self.log_tail()
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for OtlpReceiver {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            // It may have exited by itself already; reaping it is what matters.
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The python FLEXRUN_OTEL_PYTHON names; panics, saying how to install it, when the variable is
/// unset or names no file.
fn python() -> PathBuf {
    let python = std::env::var_os("FLEXRUN_OTEL_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| panic!("FLEXRUN_OTEL_PYTHON is not set: {HOW_TO_INSTALL}"));
    assert!(python.is_file(), "FLEXRUN_OTEL_PYTHON names {}, which does not exist: {HOW_TO_INSTALL}", python.display());
    python
}
