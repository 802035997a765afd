//! Every metric flexrun exports, named, described and labelled in one place, so `/metrics` reads
//! like a list a newcomer can check against the code, and no label can take unbounded values.
//!
//! Labels are always from a fixed set: statuses, replan reasons, error codes flexrun defines,
//! route patterns. A value that could come from outside (an error code read back from a frame) is
//! passed through [`code_label`] first.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use metrics::{Unit, counter, describe_counter, describe_gauge, describe_histogram, gauge, histogram};
use metrics_exporter_prometheus::{BuildError, Matcher, PrometheusBuilder, PrometheusRecorder};

/// Latency buckets (seconds): from a millisecond (a commit, a stand-in model) to a minute (a slow
/// model call).
const LATENCY_BUCKETS: &[f64] =
    &[0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0];

/// Writes per commit: one run's frames to a batch of many runs' frames.
const BATCH_BUCKETS: &[f64] = &[1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0];

/// The recorder `/metrics` renders, with histograms (not summaries) for latencies and batches.
pub fn recorder() -> Result<PrometheusRecorder, BuildError> {
    let recorder = PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), LATENCY_BUCKETS)?
        .set_buckets_for_metric(Matcher::Full(DB_WRITES_PER_COMMIT.into()), BATCH_BUCKETS)?
        .build_recorder();
    Ok(recorder)
}

const HTTP_REQUESTS: &str = "flexrun_http_requests_total";
const HTTP_DURATION: &str = "flexrun_http_request_duration_seconds";
const RUNS_STARTED: &str = "flexrun_runs_started_total";
const RUNS_RESUMED: &str = "flexrun_runs_resumed_total";
const RUNS_ENDED: &str = "flexrun_runs_ended_total";
const REPLANS: &str = "flexrun_replans_total";
const MODEL_CALLS: &str = "flexrun_model_calls_total";
const MODEL_ENDPOINT_STATE: &str = "flexrun_model_endpoint_state";
const MODEL_DURATION: &str = "flexrun_model_call_duration_seconds";
const MODEL_TOKENS: &str = "flexrun_model_tokens_total";
const MODEL_COST: &str = "flexrun_model_cost_usd_total";
const BUDGET_EXCEEDED: &str = "flexrun_budget_exceeded_total";
const CAPABILITY_CALLS: &str = "flexrun_capability_calls_total";
const CAPABILITY_DURATION: &str = "flexrun_capability_call_duration_seconds";
const OPEN_STREAMS: &str = "flexrun_open_streams";
const MODEL_CALLS_WAITING: &str = "flexrun_model_calls_waiting";
const HTTP_CAPABILITY_CALLS_WAITING: &str = "flexrun_http_capability_calls_waiting";
const DB_COMMIT_DURATION: &str = crate::store::metrics::COMMIT_DURATION;
const DB_WRITES_PER_COMMIT: &str = crate::store::metrics::WRITES_PER_COMMIT;
const RUNS_OWNED: &str = "flexrun_runs_owned";
const NODE_ID_HELD: &str = "flexrun_node_id_held";
const LEASE_RENEWALS: &str = "flexrun_lease_renewals_total";
const LEASES_LOST: &str = "flexrun_leases_lost_total";
const LEASE_CLAIMS: &str = "flexrun_lease_claims_total";
const SWEEPS: &str = "flexrun_sweeps_total";
const NOTIFICATIONS: &str = "flexrun_notifications_total";
const NOTIFICATION_LAG: &str = "flexrun_notification_lag_seconds";
const BACKLOG_BYTES: &str = "flexrun_stream_backlog_bytes";
const SLOW_READERS_CUT: &str = "flexrun_slow_readers_cut_total";
const OTEL_SPANS_DROPPED: &str = "flexrun_otel_spans_dropped_total";

/// Gives every metric its help text and unit (once the recorder is installed).
pub fn describe() {
    describe_counter!(HTTP_REQUESTS, "HTTP requests answered, by route pattern and status");
    describe_histogram!(HTTP_DURATION, Unit::Seconds, "HTTP request latency, by route pattern and status");
    describe_counter!(RUNS_STARTED, "Runs started by run.stream");
    describe_counter!(RUNS_RESUMED, "Runs picked up again after a restart");
    describe_counter!(RUNS_ENDED, "Runs ended, by status (completed, failed, cancelled) and error code");
    describe_counter!(REPLANS, "Replans granted, by reason (the reason the replan frames carry)");
    describe_counter!(
        MODEL_CALLS,
        "Model calls (each attempt), by purpose (planner, capability), endpoint, model asked for and outcome (ok or the error kind)"
    );
    describe_gauge!(
        MODEL_ENDPOINT_STATE,
        "A model endpoint's circuit breaker: 0 closed, 1 half open (probing), 2 open"
    );
    describe_histogram!(MODEL_DURATION, Unit::Seconds, "Model call latency, by purpose");
    describe_counter!(
        MODEL_TOKENS,
        "Tokens model calls reported, by model and type (input, output, cached_input, reasoning); a model not \
         configured is counted as `other`"
    );
    describe_gauge!(
        MODEL_COST,
        "US dollars model calls cost (priced by llm.prices), by model; only ever grows (a gauge, as the \
         exporter's counters hold whole numbers)"
    );
    describe_counter!(
        BUDGET_EXCEEDED,
        "Runs that reached a limit of their budget, by limit (tokens, costUsd, modelCalls) and action (pause, fail)"
    );
    describe_counter!(CAPABILITY_CALLS, "Capability calls, by agent type and outcome (ok, signal or the error code)");
    describe_histogram!(CAPABILITY_DURATION, Unit::Seconds, "Capability call latency, by agent type");
    describe_gauge!(OPEN_STREAMS, "SSE streams open now (run.stream, run.resume and runs/{id}/stream)");
    describe_gauge!(
        MODEL_CALLS_WAITING,
        "Model calls waiting for a free slot (llm.max_concurrent_calls are in flight)"
    );
    describe_gauge!(
        HTTP_CAPABILITY_CALLS_WAITING,
        "http capability calls waiting for a free slot (http_capabilities.max_concurrent_calls are in flight)"
    );
    describe_gauge!(
        BACKLOG_BYTES,
        Unit::Bytes,
        "Frame text read from run logs for streams whose clients have not taken it yet (bounded by limits.stream_backlog_bytes)"
    );
    describe_counter!(
        SLOW_READERS_CUT,
        "Streams cut off because their clients read too slowly while the node's stream backlog was full"
    );
    describe_counter!(
        OTEL_SPANS_DROPPED,
        "Trace spans not exported, by reason (queue_full: the export queue was full; export_failed: the collector \
         failed or did not answer in time)"
    );
    describe_histogram!(DB_COMMIT_DURATION, Unit::Seconds, "Time to commit one batch of writes");
    describe_histogram!(DB_WRITES_PER_COMMIT, "Writes (of any number of runs) committed together");
    describe_gauge!(RUNS_OWNED, "Runs whose lease this node holds (several nodes on PostgreSQL)");
    describe_gauge!(
        NODE_ID_HELD,
        "1 while this process holds the lock on its node id (several nodes on PostgreSQL), 0 while it takes it again"
    );
    describe_counter!(
        LEASE_RENEWALS,
        "Lease renewals (one statement for all of a node's runs), by outcome (ok, failed)"
    );
    describe_counter!(
        LEASES_LOST,
        "Leases this node lost while driving the run (not renewed in time, or claimed elsewhere)"
    );
    describe_counter!(
        LEASE_CLAIMS,
        "Runs this node claimed, by why (stale: the lease ran out or was handed back; restart: leased under this \
         node id by a process before this one; command)"
    );
    describe_counter!(SWEEPS, "Sweeps for runs whose lease ran out");
    describe_counter!(
        NOTIFICATIONS,
        "Run-change notifications received from the database (LISTEN), by how (notify, poll)"
    );
    describe_histogram!(
        NOTIFICATION_LAG,
        Unit::Seconds,
        "From a run's frame's timestamp to this node learning of it, for runs driven elsewhere"
    );
}

pub fn http_request(route: String, status: u16, elapsed: Option<Duration>) {
    static REQUESTS: Kept<metrics::Counter> = Kept::new();
    static DURATIONS: Kept<metrics::Histogram> = Kept::new();
    let key = format!("{route}\u{1f}{status}");
    let labels = || [("route", route.clone()), ("status", status.to_string())];
    REQUESTS.get(&key, || counter!(HTTP_REQUESTS, &labels())).increment(1);
    if let Some(elapsed) = elapsed {
        DURATIONS.get(&key, || histogram!(HTTP_DURATION, &labels())).record(elapsed.as_secs_f64());
    }
}

pub fn run_started() {
    counter!(RUNS_STARTED).increment(1);
}

pub fn run_resumed() {
    counter!(RUNS_RESUMED).increment(1);
}

/// A run ended with `status`; `code` is its error's code ("" when it completed).
pub fn run_ended(status: &'static str, code: &str) {
    counter!(RUNS_ENDED, "status" => status, "code" => code_label(code)).increment(1);
}

/// A replan granted, for `reason`.
pub fn replan(reason: &'static str) {
    counter!(REPLANS, "reason" => reason).increment(1);
}

/// A run reached a limit of its budget (`tokens`, `costUsd`, `modelCalls`) and paused or failed.
pub fn budget_exceeded(limit: &'static str, action: &'static str) {
    counter!(BUDGET_EXCEEDED, "limit" => limit, "action" => action).increment(1);
}

/// One model call: `outcome` is `ok` or the error's kind.
pub fn model_call(purpose: &'static str, endpoint: &str, model: &str, outcome: &'static str, elapsed: Duration) {
    static CALLS: Kept<metrics::Counter> = Kept::new();
    static DURATIONS: Kept<metrics::Histogram> = Kept::new();
    let key = [purpose, endpoint, model, outcome].join("\u{1f}");
    CALLS
        .get(&key, || {
            let (endpoint, model) = (endpoint.to_string(), model.to_string());
            counter!(MODEL_CALLS, "purpose" => purpose, "endpoint" => endpoint, "model" => model, "outcome" => outcome)
        })
        .increment(1);
    DURATIONS.get(purpose, || histogram!(MODEL_DURATION, "purpose" => purpose)).record(elapsed.as_secs_f64());
}

/// An endpoint's circuit breaker moved: 0 closed, 1 half open (probing), 2 open.
pub fn model_endpoint_state(endpoint: &str, state: &'static str) {
    let value = match state {
        "open" => 2.0,
        "half_open" => 1.0,
        _ => 0.0,
    };
    gauge!(MODEL_ENDPOINT_STATE, "endpoint" => endpoint.to_string()).set(value);
}

/// What one answered model call used. `model` is a label from a fixed set: the caller passes a
/// configured model's name, or `other`. A series is made with its first known value, never
/// before: a model without a price has no cost series rather than one reading 0 (free), and an
/// endpoint that never reports cached or reasoning tokens has no series for them. The handles
/// are [`Kept`].
pub fn model_usage(model: &str, usage: &flexrun_core::usage::CallUsage) {
    static TOKENS: Kept<metrics::Counter> = Kept::new();
    static COSTS: Kept<Arc<Mutex<CostGauge>>> = Kept::new();
    let counts = &usage.counts;
    let types = [
        ("input", counts.input_tokens),
        ("output", counts.output_tokens),
        ("cached_input", counts.cached_input_tokens),
        ("reasoning", counts.reasoning_tokens),
    ];
    for (kind, tokens) in types {
        if let Some(tokens) = tokens {
            let key = [model, kind].join("\u{1f}");
            TOKENS.get(&key, || counter!(MODEL_TOKENS, "model" => model.to_string(), "type" => kind)).increment(tokens);
        }
    }
    if let Some(cost) = usage.cost {
        let make =
            || Arc::new(Mutex::new(CostGauge { gauge: gauge!(MODEL_COST, "model" => model.to_string()), micros: 0 }));
        let kept = COSTS.get(model, make);
        let mut kept = kept.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        kept.micros = kept.micros.saturating_add(cost.0);
        kept.gauge.set(flexrun_core::usage::Micros(kept.micros).dollars());
    }
}

/// A model's cost gauge and its total in whole micro-dollars: the gauge is set to the total, not
/// incremented by each call's dollars, so it reads what the runs' totals add up to (exact
/// micro-dollars) rather than a float sum that drifts (0.0009450000000000001). Set under the
/// lock, it never goes back.
struct CostGauge {
    gauge: metrics::Gauge,
    micros: u64,
}

/// One capability call: `outcome` is `ok`, `signal` or the error's code.
pub fn capability_call(agent_type: &'static str, outcome: &'static str, elapsed: Duration) {
    static CALLS: Kept<metrics::Counter> = Kept::new();
    static DURATIONS: Kept<metrics::Histogram> = Kept::new();
    let key = [agent_type, outcome].join("\u{1f}");
    CALLS.get(&key, || counter!(CAPABILITY_CALLS, "agent_type" => agent_type, "outcome" => outcome)).increment(1);
    DURATIONS
        .get(agent_type, || histogram!(CAPABILITY_DURATION, "agent_type" => agent_type))
        .record(elapsed.as_secs_f64());
}

/// The handles of a metric's series, kept by their label values (joined by U+001F). Every HTTP
/// request, model call and capability call updates a few series, and finding a series from its
/// labels — copying and hashing them in the registry — costs several times what updating it
/// does. The label values are from fixed sets (see the module's doc), so this holds a bounded
/// number of handles. A handle is made after `http::serve` installed the recorder: every caller
/// runs after it.
struct Kept<H>(std::sync::Mutex<Option<crate::hash::HashMap<String, H>>>);

impl<H: Clone> Kept<H> {
    const fn new() -> Self {
        Self(std::sync::Mutex::new(None))
    }

    /// The handle kept under `key`, made by `make` the first time.
    fn get(&self, key: &str, make: impl FnOnce() -> H) -> H {
        let mut kept = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let kept = kept.get_or_insert_with(Default::default);
        if let Some(handle) = kept.get(key) {
            return handle.clone();
        }
        let handle = make();
        kept.insert(key.to_string(), handle.clone());
        handle
    }
}

/// What stream backlogs hold together now (`run::backlog`): set whenever that changes, as frames
/// are held and taken — so its one handle is kept (made after the recorder is installed, as
/// [`Kept`]'s are) rather than looked up each time.
pub fn backlog_bytes(bytes: u64) {
    static GAUGE: std::sync::OnceLock<metrics::Gauge> = std::sync::OnceLock::new();
    GAUGE.get_or_init(|| gauge!(BACKLOG_BYTES)).set(f64::from(u32::try_from(bytes).unwrap_or(u32::MAX)));
}

/// A slow reader's stream was cut off to keep the node's backlogs within their bound.
pub fn slow_reader_cut() {
    counter!(SLOW_READERS_CUT).increment(1);
}

/// Spans the trace export dropped (`crate::traces::export`).
pub fn otel_spans_dropped(reason: &'static str, count: usize) {
    counter!(OTEL_SPANS_DROPPED, "reason" => reason).increment(u64::try_from(count).unwrap_or(u64::MAX));
}

pub fn runs_owned(count: usize) {
    gauge!(RUNS_OWNED).set(f64::from(u32::try_from(count).unwrap_or(u32::MAX)));
}

/// Whether this process holds the lock on its node id (`run::lease::identity`).
pub fn node_id_held(held: bool) {
    gauge!(NODE_ID_HELD).set(if held { 1.0 } else { 0.0 });
}

/// One renewal of this node's leases.
pub fn lease_renewal(ok: bool) {
    counter!(LEASE_RENEWALS, "outcome" => if ok { "ok" } else { "failed" }).increment(1);
}

pub fn leases_lost(count: usize) {
    counter!(LEASES_LOST).increment(u64::try_from(count).unwrap_or(u64::MAX));
}

/// Runs claimed: `why` is `stale` (a sweep), `restart` (leased under this node id by an earlier
/// process) or `command` (an operator's command on a waiting run).
pub fn lease_claims(why: &'static str, count: usize) {
    counter!(LEASE_CLAIMS, "why" => why).increment(u64::try_from(count).unwrap_or(u64::MAX));
}

pub fn sweep() {
    counter!(SWEEPS).increment(1);
}

/// A run changed elsewhere and this node learnt of it (`how`: notify or poll), `lag` after the
/// change was committed (when known).
pub fn notification(how: &'static str, lag: Option<Duration>) {
    counter!(NOTIFICATIONS, "how" => how).increment(1);
    if let Some(lag) = lag {
        histogram!(NOTIFICATION_LAG).record(lag.as_secs_f64());
    }
}

/// Counts something in a gauge for as long as the guard lives.
pub struct Counted(&'static str);

impl Counted {
    fn new(gauge: &'static str) -> Self {
        gauge!(gauge).increment(1.0);
        Self(gauge)
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        gauge!(self.0).decrement(1.0);
    }
}

/// Counts an open SSE stream for as long as it lives.
pub fn open_stream() -> Counted {
    Counted::new(OPEN_STREAMS)
}

/// Counts a model call waiting for a free slot, until it has one (or gives up).
pub fn model_call_waiting() -> Counted {
    Counted::new(MODEL_CALLS_WAITING)
}

/// Counts an `http` capability call waiting for a free slot, until it has one.
pub fn http_capability_call_waiting() -> Counted {
    Counted::new(HTTP_CAPABILITY_CALLS_WAITING)
}

/// Longest error code used as a label as it is.
const CODE_CHARS: usize = 48;

/// An error code as a label: flexrun's codes are short snake_case words; anything else is `other`,
/// so a label never carries text from outside.
fn code_label(code: &str) -> String {
    let plain =
        code.len() <= CODE_CHARS && code.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
    if plain { code.to_string() } else { "other".to_string() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_short_codes_become_labels() {
        assert_eq!(code_label("plan_rejected"), "plan_rejected");
        assert_eq!(code_label(""), "");
        assert_eq!(code_label("Robert'); DROP"), "other");
        assert_eq!(code_label(&"a".repeat(49)), "other");
    }
}
