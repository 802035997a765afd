//! The `flexrun serve` binary as a child process, so a test can kill it (SIGKILL) at any point and
//! start it again on the same database. The stand-in model stays up in the test process across
//! restarts.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use flexrun::events::ReceivedFrame;
use serde_json::Value;

use super::read_frames;

/// A `flexrun serve` process on a loopback port (the same one across restarts), logging to
/// `<dir>/server.log`.
pub struct ServerProcess {
    child: Option<Child>,
    port: u16,
    pub base: String,
    pub dir: PathBuf,
    /// One client for every request a test sends: building a client loads the system's TLS
    /// roots, slow enough in debug builds to stall a test sending many requests at once.
    pub http: reqwest::Client,
    env: Vec<(String, String)>,
}

impl ServerProcess {
    /// Starts `flexrun serve` on a database in `dir`, with `capabilities` registered from files and
    /// the model at `llm_base_url`. Returns once the health endpoint answers.
    pub async fn start(dir: &Path, llm_base_url: &str, capabilities: &[Value], env: &[(&str, &str)]) -> Self {
        let mut server = Self::new(dir, llm_base_url, capabilities, env);
        server.spawn().await;
        server
    }

    /// Starts `flexrun serve` as [`Self::start`] does, for a process that is to refuse to start:
    /// waits for it to exit by itself, and returns its exit status and what it logged.
    pub async fn refused(
        dir: &Path,
        llm_base_url: &str,
        capabilities: &[Value],
        env: &[(&str, &str)],
    ) -> (std::process::ExitStatus, String) {
        let mut server = Self::new(dir, llm_base_url, capabilities, env);
        server.launch();
        let status = server.exited(Duration::from_secs(30)).await;
        (status, server.log())
    }

    /// A process not started yet, on a port of its own.
    fn new(dir: &Path, llm_base_url: &str, capabilities: &[Value], env: &[(&str, &str)]) -> Self {
        let capabilities_dir = dir.join("capabilities");
        std::fs::create_dir_all(&capabilities_dir).unwrap();
        for capability in capabilities {
            let name = format!("{}.json", capability["capabilityId"].as_str().unwrap());
            std::fs::write(capabilities_dir.join(name), capability.to_string()).unwrap();
        }
        let port = free_port();
        // No FLEXRUN_NODE_ID: the default, `<host>-<port>`, stays across restarts on the same
        // port, so a restarted node takes its own leased runs back at once (PostgreSQL).
        let mut all: Vec<(String, String)> = vec![
            ("FLEXRUN_DATABASE_URL".into(), super::database::url(dir)),
            ("FLEXRUN_CAPABILITIES_DIR".into(), capabilities_dir.display().to_string()),
            ("FLEXRUN_LLM_BASE_URL".into(), llm_base_url.into()),
            ("FLEXRUN_LLM_API_KEY".into(), "test-key".into()),
            ("FLEXRUN_LLM_MODEL".into(), "test-model".into()),
            ("FLEXRUN_LOG".into(), "info".into()),
        ];
        all.extend(env.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        let base = format!("http://127.0.0.1:{port}");
        Self { child: None, port, base, dir: dir.to_path_buf(), http: super::http_client(), env: all }
    }

    /// Kills the process with SIGKILL: no shutdown code runs.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            child.kill().expect("SIGKILL the server");
            child.wait().expect("reap the server");
        }
    }

    /// Sends `signal` (`STOP`, `CONT`, `TERM`) to the process.
    pub fn signal(&self, signal: &str) {
        let pid = self.child.as_ref().expect("the server runs").id();
        let sent = Command::new("kill").arg(format!("-{signal}")).arg(pid.to_string()).status().expect("kill");
        assert!(sent.success(), "kill -{signal} {pid}");
    }

    /// Waits up to `patience` for the process to exit by itself; its exit status.
    pub async fn exited(&mut self, patience: Duration) -> std::process::ExitStatus {
        let deadline = tokio::time::Instant::now() + patience;
        let child = self.child.as_mut().expect("the server runs");
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                self.child = None;
                return status;
            }
            assert!(tokio::time::Instant::now() < deadline, "flexrun serve did not exit:\n{}", self.log());
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Starts the process again after [`Self::kill`].
    pub async fn restart(&mut self) {
        assert!(self.child.is_none(), "kill the server first");
        self.spawn().await;
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// The port it listens on (the same across restarts).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Posts an envelope to `run.stream`: the run id and the (streaming) response.
    pub async fn post_run(&self, envelope: &Value) -> (String, reqwest::Response) {
        let response = self
            .http
            .post(self.url("/api/v1/flex/run.stream"))
            .json(envelope)
            .send()
            .await
            .expect("run.stream request");
        assert_eq!(response.status(), 200, "run.stream refused {envelope}");
        (response.headers()["x-flexrun-run-id"].to_str().unwrap().to_string(), response)
    }

    /// Re-attaches to a run after frame `last_seen` (`Last-Event-ID`) and reads it to the end.
    pub async fn reattach(&self, run_id: &str, last_seen: u64) -> Vec<ReceivedFrame> {
        let response = self
            .http
            .get(self.url(&format!("/api/v1/flex/runs/{run_id}/stream")))
            .header("last-event-id", last_seen.to_string())
            .send()
            .await
            .expect("re-attach request");
        assert_eq!(response.status(), 200);
        read_frames(response, usize::MAX).await
    }

    /// The resident memory of the running process, in bytes (Linux: `/proc/<pid>/status`).
    pub fn resident_bytes(&self) -> u64 {
        let pid = self.child.as_ref().expect("the server runs").id();
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        let line = status.lines().find(|l| l.starts_with("VmRSS:")).expect("VmRSS in /proc/<pid>/status");
        let kib: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
        kib * 1024
    }

    /// Everything the server processes wrote to stderr so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default()
    }

    async fn spawn(&mut self) {
        self.launch();
        self.wait_until_healthy().await;
    }

    fn launch(&mut self) {
        let log = std::fs::OpenOptions::new().create(true).append(true).open(self.dir.join("server.log")).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_flexrun"))
            .arg("serve")
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .env("FLEXRUN_BIND", format!("127.0.0.1:{}", self.port))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start flexrun serve");
        self.child = Some(child);
    }

    async fn wait_until_healthy(&mut self) {
        for _ in 0..300 {
            if let Ok(response) = self.http.get(self.url("/api/v1/health")).send().await
                && response.status().is_success()
            {
                return;
            }
            if let Some(status) = self.child.as_mut().and_then(|c| c.try_wait().unwrap()) {
                panic!("flexrun serve exited with {status}:\n{}", self.log());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("flexrun serve did not become healthy:\n{}", self.log());
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A port nobody listens on right now, which stays free while its server is down for a restart.
///
/// A port from the kernel's ephemeral range (what binding port 0 gives) can be taken, while the
/// server is down, as the local port of any outgoing connection — the stand-in model's clients,
/// another test's requests — and the restart then fails with "address already in use". So the
/// port comes from just below that range, which the kernel never hands out by itself, and each
/// port is handed out once per test process.
pub fn free_port() -> u16 {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let ephemeral_low = ephemeral_range_start();
    let span = ephemeral_low.saturating_sub(RESERVED_BELOW).max(1);
    let offset = std::process::id() % span;
    loop {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        assert!(n < span, "no free port below the ephemeral range");
        let port = u16::try_from(RESERVED_BELOW + (offset + n) % span).expect("ports fit in u16");
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}

/// Ports below this are left to well-known services.
const RESERVED_BELOW: u32 = 10_000;

/// The lowest port the kernel picks for outgoing connections (Linux's default if unreadable).
fn ephemeral_range_start() -> u32 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse().ok())
        .unwrap_or(32_768)
}
