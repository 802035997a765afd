//! The OpenAPI document, fuzzed: schemathesis (a property-based API fuzzer) generates requests
//! from `GET /api/v1/openapi.json` — valid and invalid bodies, queries, paths and headers — and
//! sends them to the real `flexrun serve` binary (keys on, an operator key sent; the model a
//! stand-in on loopback). It fails on any 5xx, any status code the document does not list, and
//! any response that breaks its documented schema or content type.
//!
//! `scripts/test` installs schemathesis (from PyPI, into `target/test-tools`) and points
//! `FLEXRUN_SCHEMATHESIS` at it.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::as_conversions)] // Test code states what it expects.

mod support;

use std::path::PathBuf;
use std::process::Command;

use flexrun::llm::standin::StandIn;
use serde_json::Value;
use support::process::ServerProcess;
use support::*;

const OPERATOR: &str = "fuzz-operator-key";

/// The schemathesis command: `FLEXRUN_SCHEMATHESIS`, else `st` on the `PATH`.
fn schemathesis() -> PathBuf {
    let configured = std::env::var_os("FLEXRUN_SCHEMATHESIS").map(PathBuf::from);
    let found = configured.clone().or_else(|| {
        let path = std::env::var_os("PATH")?;
        std::env::split_paths(&path).map(|dir| dir.join("st")).find(|st| st.is_file())
    });
    match found {
        // Absolute: the fuzzer runs in a scratch directory.
        Some(st) if st.is_file() => std::fs::canonicalize(&st).unwrap_or(st),
        _ => panic!(
            "schemathesis is not installed{}: run the tests with scripts/test, which installs it into \
             target/test-tools, or `pip install schemathesis` and set FLEXRUN_SCHEMATHESIS to its `st`",
            configured.map(|c| format!(" at {}", c.display())).unwrap_or_default()
        ),
    }
}

/// Every planner call gets a one-step plan; every capability call a valid post.
fn model() -> flexrun::llm::standin::Script {
    script(|call| if call.is_planner() { plan(&[("draft", "writer")]) } else { post(0.9) })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_answers_every_generated_request_as_its_openapi_document_says() {
    let st = schemathesis();
    let model = StandIn::start(model()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let keys = [("FLEXRUN_API_KEYS", "fuzz:fuzz-caller-key"), ("FLEXRUN_OPERATOR_KEYS", "ops:fuzz-operator-key")];
    let server = ServerProcess::start(dir.path(), &model.base_url, &default_capabilities(), &keys).await;
    let document: Value =
        server.http.get(server.url("/api/v1/openapi.json")).send().await.unwrap().json().await.unwrap();
    assert_eq!(document["openapi"], "3.1.0");

    let examples = std::env::var("FLEXRUN_FUZZ_EXAMPLES").unwrap_or_else(|_| "40".into());
    let output = tokio::task::spawn_blocking({
        let (schema, base) = (server.url("/api/v1/openapi.json"), server.base.clone());
        let scratch = dir.path().to_path_buf();
        move || {
            Command::new(&st)
                .current_dir(scratch)
                .args(["run", &schema, "--url", &base])
                .args(["--checks", "not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance,response_headers_conformance"])
                .args(["--phases", "examples,coverage,fuzzing"])
                // One worker: Debian's Python 3.11 can crash compiling in two threads at once
                // ("AST constructor recursion depth mismatch"), a fault of neither schemathesis's
                // findings nor flexrun.
                .args(["--max-examples", &examples, "--workers", "1", "--request-timeout", "20"])
                .args(["--header", &format!("Authorization: Bearer {OPERATOR}")])
                .args(["--suppress-health-check", "all", "--no-color"])
                .env("SCHEMATHESIS_HOOKS", "")
                .output()
                .expect("run schemathesis")
        }
    })
    .await
    .unwrap();
    let report = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    eprintln!("{report}");
    assert!(output.status.success(), "schemathesis found problems (report above)");
    let log = server.log();
    let errors: Vec<&str> = log.lines().filter(|l| l.contains("ERROR")).collect();
    assert!(errors.is_empty(), "the server logged errors:\n{}", errors.join("\n"));
}
