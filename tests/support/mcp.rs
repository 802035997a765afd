//! Real MCP servers as child processes on loopback, for the MCP tests: the npm reference server
//! (`@modelcontextprotocol/server-everything`) and tests/mcp/server.py on the official Python SDK.
//! Both speak Streamable HTTP at `/mcp`. `scripts/test` installs them into target/test-tools and
//! points FLEXRUN_MCP_EVERYTHING and FLEXRUN_MCP_PYTHON at them; without them a test fails and
//! says so, never skips.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use super::process::free_port;

/// How long a server may take to answer after it is started (node and Python start in about a
/// second, far longer on a loaded machine running tests side by side).
const STARTUP: Duration = Duration::from_secs(30);

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Everything,
    Python,
}

impl std::fmt::Display for Kind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Kind::Everything => "npm server-everything",
            Kind::Python => "tests/mcp/server.py",
        })
    }
}

/// An MCP server process on a port of its own, the same across restarts, logging (stdout and
/// stderr) to a file kept for the panic messages.
pub struct McpProcess {
    child: Option<Child>,
    kind: Kind,
    port: u16,
    program: PathBuf,
    args: Vec<String>,
    env: Vec<(String, String)>,
    /// Holds the log: `<dir>/server.log`.
    dir: tempfile::TempDir,
    http: reqwest::Client,
}

impl McpProcess {
    /// The npm reference server (`node $FLEXRUN_MCP_EVERYTHING streamableHttp`), which has no
    /// host option: it listens on every interface, and tests reach it on 127.0.0.1. Node runs the
    /// entry point itself, not through npx: killing npx would leave the server running.
    pub async fn everything() -> Self {
        let script = installed(
            "FLEXRUN_MCP_EVERYTHING",
            "@modelcontextprotocol/server-everything into target/test-tools/mcp-everything and points this \
             variable at its dist/index.js",
        );
        let port = free_port();
        let args = vec![script.display().to_string(), "streamableHttp".into()];
        let env = vec![("PORT".into(), port.to_string())];
        Self::start(Kind::Everything, port, PathBuf::from("node"), args, env).await
    }

    /// tests/mcp/server.py on the Python SDK (`$FLEXRUN_MCP_PYTHON tests/mcp/server.py <port>`).
    pub async fn python() -> Self {
        Self::python_with_env(&[]).await
    }

    /// tests/mcp/server_modern.py, written with the Python SDK 2.x: it speaks the 2026-07-28
    /// protocol revision.
    pub async fn python_modern() -> Self {
        let python = installed(
            "FLEXRUN_MCP_MODERN_PYTHON",
            "the Python SDK `mcp` 2.x into target/test-tools/mcp-modern-venv and points this variable at its python",
        );
        let port = free_port();
        let server = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/mcp/server_modern.py");
        let env = vec![("PYTHONUNBUFFERED".to_string(), "1".to_string())];
        Self::start(Kind::Python, port, python, vec![server.into(), port.to_string()], env).await
    }

    /// tests/mcp/server.py with `env` added (`MCP_EXPECTED_TOKEN`, the token `auth_ok` expects,
    /// is never inherited from the tests' own environment: set it here).
    pub async fn python_with_env(env: &[(&str, &str)]) -> Self {
        let python = installed(
            "FLEXRUN_MCP_PYTHON",
            "the Python SDK `mcp` into target/test-tools/mcp-venv and points this variable at its python",
        );
        let port = free_port();
        let server = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/mcp/server.py");
        let args = vec![server.into(), port.to_string()];
        let mut all = vec![("PYTHONUNBUFFERED".to_string(), "1".to_string())];
        all.extend(env.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        Self::start(Kind::Python, port, python, args, all).await
    }

    async fn start(kind: Kind, port: u16, program: PathBuf, args: Vec<String>, env: Vec<(String, String)>) -> Self {
        let dir = tempfile::tempdir().expect("a directory for the MCP server's log");
        let mut server = Self { child: None, kind, port, program, args, env, dir, http: super::http_client() };
        server.spawn().await;
        server
    }

    /// The server's MCP endpoint.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/mcp", self.port)
    }

    /// The port it listens on (the same across restarts).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Every tool call the Python server received so far, in order: `{"tool", "arguments",
    /// "meta"}`, `meta` being the request's `_meta` as sent (null when there was none).
    pub async fn calls(&self) -> Vec<Value> {
        let response = self.http.get(self.plain_url("/calls")).send().await.expect("GET /calls");
        assert_eq!(response.status(), 200, "GET /calls");
        response.json().await.expect("GET /calls answers a JSON list")
    }

    /// Ends the Python server's `hold` calls on `key` (and any later one at once).
    pub async fn release(&self, key: &str) {
        self.post(&format!("/release/{key}")).await;
    }

    /// Makes tests/mcp/server_modern.py answer `subscriptions/listen` from now on with an event
    /// stream that stays open and never acknowledges the subscription.
    pub async fn silence_listen(&self) {
        self.post("/listen/silence").await;
    }

    /// `POST path` to a plain route of a Python server, which answers 200.
    async fn post(&self, path: &str) {
        let response = self.http.post(self.plain_url(path)).send().await.unwrap_or_else(|e| panic!("POST {path}: {e}"));
        assert_eq!(response.status(), 200, "POST {path}");
    }

    /// Kills the process with SIGKILL (no shutdown code runs) and reaps it.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            // It may have exited by itself already; reaping it is what matters.
            let _ = child.kill();
            child.wait().expect("reap the MCP server");
        }
    }

    /// Starts the server again on the same port (killing it first if it still runs). Its state
    /// (the Python server's calls, added tools, released keys) starts afresh.
    pub async fn restart(&mut self) {
        self.kill();
        self.spawn().await;
    }

    /// Everything the server wrote to stdout and stderr so far, across restarts.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    /// A plain HTTP route of the Python server (not MCP).
    fn plain_url(&self, path: &str) -> String {
        assert_eq!(self.kind, Kind::Python, "{path} is a route of tests/mcp/server.py only");
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("server.log")
    }

    async fn spawn(&mut self) {
        let log_start = self.log().len();
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())
            .expect("open the MCP server's log");
        let stdout = log.try_clone().expect("share the MCP server's log");
        let child = Command::new(&self.program)
            .args(&self.args)
            .env_remove("MCP_EXPECTED_TOKEN")
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "start the {} MCP server ({}): {e} (scripts/test installs nodejs when node is missing)",
                    self.kind,
                    self.program.display()
                )
            });
        self.child = Some(child);
        self.wait_until_ready(log_start).await;
    }

    /// Polls until the server answers: the Python server's `GET /healthz`; the npm server's port
    /// (it has no health route), or its log line saying it listens (after `log_start`: what this
    /// start logged, not a previous one).
    async fn wait_until_ready(&mut self, log_start: usize) {
        let deadline = tokio::time::Instant::now() + STARTUP;
        loop {
            let ready = match self.kind {
                Kind::Python => self
                    .http
                    .get(self.plain_url("/healthz"))
                    .send()
                    .await
                    .is_ok_and(|response| response.status().is_success()),
                Kind::Everything => {
                    self.log().get(log_start..).is_some_and(|log| log.contains("listening on port"))
                        || tokio::net::TcpStream::connect(("127.0.0.1", self.port)).await.is_ok()
                }
            };
            let exited = self.child.as_mut().and_then(|c| c.try_wait().expect("poll the MCP server"));
            if let Some(status) = exited {
                self.child = None;
                panic!("the {} MCP server exited with {status} at start:\n{}", self.kind, self.log());
            }
            if ready {
                return;
            }
            if tokio::time::Instant::now() >= deadline {
                panic!(
                    "the {} MCP server did not answer on port {} within {STARTUP:?}:\n{}",
                    self.kind,
                    self.port,
                    self.log()
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for McpProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The installed file the environment variable `var` names; panics, saying how to install it,
/// when the variable is unset or the file is missing.
fn installed(var: &str, what_scripts_test_does: &str) -> PathBuf {
    let path = std::env::var_os(var).map(PathBuf::from).unwrap_or_else(|| {
        panic!(
            "{var} is not set: run the tests with scripts/test, which installs {what_scripts_test_does}, or set \
             {var} yourself"
        )
    });
    assert!(
        Path::new(&path).is_file(),
        "{var} names {}, which does not exist: run scripts/test, which installs {what_scripts_test_does}",
        path.display()
    );
    path
}
