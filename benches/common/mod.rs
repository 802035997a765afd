//! What the server benchmarks share: `flexrun serve` as a child process (the release build, or
//! `BENCH_SERVER_BIN` to compare two builds back to back) on a fresh SQLite file, and its CPU time
//! and memory read from /proc. `BENCH_START_SECS` (default 30) is how long a start may take: a
//! server run under a simulator (`valgrind --tool=callgrind --cache-sim=yes`) needs minutes.
#![allow(dead_code)] // Each bench uses the part it needs.

use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

/// An `ai` capability with a JSON Schema output contract of any object.
pub fn capability(id: &str, inputs: &[&str], outputs: &[&str]) -> Value {
    json!({
        "capabilityId": id, "version": "1", "displayName": id, "summary": id, "kind": "execution",
        "agentType": "ai", "inputFacets": inputs, "outputFacets": outputs, "instructions": id,
        "outputContract": {"mode": "json_schema", "schema": {"type": "object"}}
    })
}

/// Posts `envelope` to `run.stream` and reads the run to `complete`, which must say `completed`.
/// Returns the run's id and the types of its frames, in order. `http` is shared by every run a
/// bench makes: building a client loads the system's TLS roots, which costs more than a run.
pub async fn run_to_completion(http: &reqwest::Client, base: &str, envelope: &Value) -> (String, Vec<String>) {
    use eventsource_stream::Eventsource;
    use futures::StreamExt;
    let response = http.post(format!("{base}/api/v1/flex/run.stream")).json(envelope).send().await.expect("run.stream");
    assert_eq!(response.status(), 200);
    let run_id = response.headers()["x-flexrun-run-id"].to_str().unwrap().to_string();
    let mut events = response.bytes_stream().eventsource();
    let mut kinds = Vec::new();
    while let Some(event) = events.next().await {
        let event = event.expect("SSE");
        kinds.push(event.event.clone());
        if event.event == "complete" {
            assert!(event.data.contains(r#""status":"completed""#), "run did not complete: {}", &event.data);
            break;
        }
    }
    (run_id, kinds)
}

pub struct Server {
    child: Child,
    pub base: String,
    launch: Launch,
}

/// How a server is started (its port among its settings), kept to start it again.
struct Launch {
    binary: String,
    pinned: bool,
    env: Vec<(String, String)>,
}

impl Server {
    /// Starts the server with `capabilities` registered, the model at `llm`, and `env` on top.
    pub async fn start(dir: &Path, llm: &str, capabilities: &[Value], env: &[(&str, &str)]) -> Self {
        let capabilities_dir = dir.join("capabilities");
        std::fs::create_dir_all(&capabilities_dir).unwrap();
        for c in capabilities {
            let name = format!("{}.json", c["capabilityId"].as_str().unwrap());
            std::fs::write(capabilities_dir.join(name), c.to_string()).unwrap();
        }
        let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let mut all: Vec<(String, String)> = [
            ("FLEXRUN_BIND", format!("127.0.0.1:{port}")),
            ("FLEXRUN_DATABASE_URL", format!("sqlite://{}", dir.join("bench.db").display())),
            ("FLEXRUN_CAPABILITIES_DIR", capabilities_dir.display().to_string()),
            ("FLEXRUN_LLM_BASE_URL", llm.to_string()),
            ("FLEXRUN_LLM_API_KEY", "bench".to_string()),
            ("FLEXRUN_LOG", "warn".to_string()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        all.extend(env.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        let launch = Launch {
            binary: std::env::var("BENCH_SERVER_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_flexrun").to_string()),
            // BENCH_PIN=1 runs the server on CPU 1 and leaves CPU 0 to the clients and the stand-in.
            pinned: std::env::var("BENCH_PIN").is_ok_and(|v| v == "1"),
            env: all,
        };
        let server = Self { child: launch.spawn(), base: format!("http://127.0.0.1:{port}"), launch };
        server.wait_until_healthy().await;
        server
    }

    /// Starts the server again, on the same port and settings, after [`Self::kill`].
    pub async fn restart(&mut self) {
        self.child = self.launch.spawn();
        self.wait_until_healthy().await;
    }

    async fn wait_until_healthy(&self) {
        let seconds: u64 = std::env::var("BENCH_START_SECS").ok().and_then(|s| s.parse().ok()).unwrap_or(30);
        let http = reqwest::Client::new();
        for _ in 0..seconds * 20 {
            if http.get(format!("{}/api/v1/health", self.base)).send().await.is_ok() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("flexrun serve did not answer within {seconds} s (BENCH_START_SECS)");
    }

    /// Kills the server at once (SIGKILL), as a crash would.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// User + system CPU seconds the server process has used.
    pub fn cpu_seconds(&self) -> f64 {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.child.id())).unwrap();
        let fields: Vec<&str> = stat.rsplit_once(')').unwrap().1.split_whitespace().collect();
        let ticks: f64 = fields[11].parse::<f64>().unwrap() + fields[12].parse::<f64>().unwrap();
        ticks / clock_ticks()
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn peak_rss_mib(&self) -> f64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        let kib: f64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0);
        kib / 1024.0
    }
}

impl Drop for Server {
    /// Stops the server as an operator would (SIGTERM) and waits for it, so a server run under a
    /// profiler (`BENCH_SERVER_BIN` a script that runs it under callgrind) exits normally and writes
    /// its profile; one still running after a minute is killed.
    fn drop(&mut self) {
        let _ = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status();
        for _ in 0..600 {
            if !matches!(self.child.try_wait(), Ok(None)) {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Launch {
    fn spawn(&self) -> Child {
        let mut command = if self.pinned { Command::new("taskset") } else { Command::new(&self.binary) };
        if self.pinned {
            command.args(["-c", "1", &self.binary]);
        }
        command
            .arg("serve")
            .env_clear()
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdout(Stdio::null())
            .spawn()
            .expect("start flexrun serve")
    }
}

fn clock_ticks() -> f64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100.0)
}
