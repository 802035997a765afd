//! OpenTelemetry traces of runs, in the GenAI semantic conventions, sent over OTLP/HTTP
//! (`docs/observability.md`).
//!
//! A run outlives the process that starts it: it may be resumed after a crash, by another node,
//! or a day later when an operator answers. Its trace must still be one, so its ids are in its
//! log: the `start` frame records the trace and the root span's id
//! ([`flexrun_core::trace::RunTrace`]), and every span of the run — whoever makes it — is a
//! child of that root. The root itself is sent once, by whoever ends the run, with the run's
//! start time. The SDK's tracer picks its own ids and cannot do that, so flexrun builds each
//! span's data itself ([`OpenSpan`]) and hands it to a bounded exporter ([`export`]); the SDK's
//! sampler decides which runs are traced, the OTLP crate encodes and sends.
//!
//! - [`SpanScope`]: the span an operation runs under, carried in the OpenTelemetry context of its
//!   future, so a model call or an `http` call deep below finds its parent and sends
//!   `traceparent`.
//! - [`spans`]: what each span is called and which attributes it carries.
//! - [`export`]: the queue, the batches, drops counted.

mod export;
mod settings;
pub mod spans;

use std::borrow::Cow;
use std::future::Future;
use std::sync::Arc;
use std::time::SystemTime;

use opentelemetry::context::FutureExt as _;
use opentelemetry::trace::{SpanContext, SpanKind, Status, TraceContextExt as _, TraceFlags, TraceState};
use opentelemetry::{Context, InstrumentationScope, KeyValue, Value as AttributeValue};
use opentelemetry_sdk::trace::{IdGenerator, RandomIdGenerator, Sampler, SamplingDecision, ShouldSample, SpanData};
use serde_json::Value;

use crate::config::{ConfigError, TelemetrySettings};
use crate::redact::Redaction;
use export::Exporter;
use flexrun_core::trace::{RunTrace, SpanId, TraceId, TraceParent};

/// The most text one captured attribute carries (a prompt, an output): spans stay bounded.
const CAPTURED_BYTES: usize = 16 * 1024;

/// Trace export: on (an endpoint is set) or off, when every call here does nothing.
#[derive(Clone, Default)]
pub struct Traces {
    on: Option<Arc<On>>,
}

struct On {
    exporter: Exporter,
    sampler: Sampler,
    ids: RandomIdGenerator,
    capture: bool,
    redaction: Redaction,
    scope: InstrumentationScope,
}

impl Traces {
    /// Export as `settings` say: off without an endpoint. Starts the export task on the current
    /// runtime; makes no network call.
    pub fn start(settings: &TelemetrySettings, redaction: Redaction) -> Result<Self, ConfigError> {
        let Some(url) = settings.traces_url() else { return Ok(Self::default()) };
        let exporter = Exporter::start(settings, url)?;
        let scope = InstrumentationScope::builder("flexrun").with_version(env!("CARGO_PKG_VERSION")).build();
        let on = On {
            exporter,
            sampler: settings.sampler()?,
            ids: RandomIdGenerator::default(),
            capture: settings.capture_message_content,
            redaction,
            scope,
        };
        Ok(Self { on: Some(Arc::new(on)) })
    }

    /// Sends the spans queued so far, waiting at most `patience` (before the process exits).
    pub async fn flush(&self, patience: std::time::Duration) {
        if let Some(on) = &self.on {
            on.exporter.flush(patience).await;
        }
    }

    /// The trace of a run starting now, under the caller's span `parent` if it sent one; `None`
    /// when export is off or the sampler leaves the run out (then it is never traced).
    pub fn begin_run(&self, parent: Option<TraceParent>) -> Option<RunTrace> {
        let on = self.on.as_ref()?;
        let trace_id = match parent {
            Some(parent) => parent.trace_id,
            None => on.new_trace_id(),
        };
        let parent_cx = parent
            .map_or_else(Context::new, |parent| Context::new().with_remote_span_context(span_context(parent, true)));
        let decision = on.sampler.should_sample(
            Some(&parent_cx),
            otel_trace_id(trace_id),
            spans::RUN,
            &SpanKind::Internal,
            &[],
            &[],
        );
        if decision.decision != SamplingDecision::RecordAndSample {
            return None;
        }
        Some(RunTrace { trace_id, span_id: on.new_span_id(), parent_span_id: parent.map(|parent| parent.span_id) })
    }

    /// A span starting now under `parent` (the run's root or one of its spans); `None` when
    /// export is off.
    pub fn span(
        &self,
        parent: Option<TraceParent>,
        name: impl Into<Cow<'static, str>>,
        kind: SpanKind,
    ) -> Option<OpenSpan> {
        let (on, parent) = (self.on.as_ref()?, parent?);
        Some(OpenSpan::new(on.clone(), parent, name.into(), kind, SystemTime::now()))
    }

    /// A span that began at `start` (a time the run's log recorded) and ends now: a wait for
    /// an operator, which no process watched from beginning to end.
    pub fn span_since(&self, parent: Option<TraceParent>, name: &'static str, start: SystemTime) -> Option<OpenSpan> {
        let (on, parent) = (self.on.as_ref()?, parent?);
        Some(OpenSpan::new(on.clone(), parent, Cow::Borrowed(name), SpanKind::Internal, start.min(SystemTime::now())))
    }

    /// Sends a run's root span (`invoke_workflow`), from `start` to now, with the ids its log
    /// recorded: sent once, when the run ends.
    pub fn end_run(&self, trace: &RunTrace, start: SystemTime, attributes: Vec<KeyValue>, status: Status) {
        let Some(on) = &self.on else { return };
        let context =
            span_context(TraceParent { trace_id: trace.trace_id, span_id: trace.span_id, sampled: true }, false);
        let parent = trace.parent_span_id.map_or(opentelemetry::trace::SpanId::INVALID, otel_span_id);
        on.exporter.send(SpanData {
            span_context: context,
            parent_span_id: parent,
            parent_span_is_remote: trace.parent_span_id.is_some(),
            span_kind: SpanKind::Internal,
            name: Cow::Borrowed(spans::RUN),
            start_time: start,
            end_time: SystemTime::now().max(start),
            attributes,
            dropped_attributes_count: 0,
            events: Default::default(),
            links: Default::default(),
            status,
            instrumentation_scope: on.scope.clone(),
        });
    }

    /// The text values under secret keys in `value`, when content is captured (else none are
    /// looked for).
    pub fn secret_values(&self, value: &Value) -> Vec<String> {
        self.on.as_ref().filter(|on| on.capture).map(|on| on.redaction.secret_values(value)).unwrap_or_default()
    }

    /// The scope operations of run `run_id` run in under span `parent`, for their model and
    /// `http` calls; `secrets`: values that must not appear in captured content.
    pub fn scope(
        &self,
        parent: Option<TraceParent>,
        run_id: &str,
        secrets: impl FnOnce() -> Vec<String>,
    ) -> Option<SpanScope> {
        let (on, parent) = (self.on.as_ref()?, parent?);
        let secrets = if on.capture { secrets() } else { Vec::new() };
        Some(SpanScope { on: on.clone(), parent, run_id: run_id.into(), secrets: secrets.into() })
    }
}

/// A span being recorded: its attributes are set as what it covers happens; [`Self::end`] sends it.
pub struct OpenSpan {
    on: Arc<On>,
    id: TraceParent,
    parent: SpanId,
    name: Cow<'static, str>,
    kind: SpanKind,
    start: SystemTime,
    attributes: Vec<KeyValue>,
    status: Status,
}

impl OpenSpan {
    fn new(on: Arc<On>, parent: TraceParent, name: Cow<'static, str>, kind: SpanKind, start: SystemTime) -> Self {
        let id = TraceParent { trace_id: parent.trace_id, span_id: on.new_span_id(), sampled: true };
        Self { on, id, parent: parent.span_id, name, kind, start, attributes: Vec::new(), status: Status::Unset }
    }

    /// This span as the parent of others (and of the calls that carry `traceparent`).
    pub fn id(&self) -> TraceParent {
        self.id
    }

    pub fn set(&mut self, key: &'static str, value: impl Into<AttributeValue>) {
        self.attributes.push(KeyValue::new(key, value));
    }

    /// A count, when known.
    pub fn count(&mut self, key: &'static str, value: Option<u64>) {
        if let Some(value) = value.and_then(|v| i64::try_from(v).ok()) {
            self.set(key, value);
        }
    }

    /// A call's token counts and cost, as far as known.
    pub fn usage(&mut self, counts: &flexrun_core::usage::Counts, cost: Option<flexrun_core::usage::Micros>) {
        self.attributes.extend(spans::usage(counts, cost));
    }

    /// Content (a prompt, an output, a tool's arguments) when capturing it is on: redacted by the
    /// one policy and cut to a bounded length.
    pub fn content(&mut self, key: &'static str, value: impl FnOnce() -> Value) {
        if self.on.capture {
            let redacted = self.on.redaction.value(value()).to_string();
            self.set(key, crate::excerpt::excerpt(&redacted, CAPTURED_BYTES).into_owned());
        }
    }

    /// Moves the span's start to now: it was made before a wait it does not cover (a retry's
    /// backoff).
    pub fn starts_now(&mut self) {
        self.start = SystemTime::now();
    }

    /// Marks the span failed: `error.type` (a code flexrun defines) and a bounded message.
    pub fn fail(&mut self, error_type: &str, message: &str) {
        self.set(spans::ERROR_TYPE, error_type.to_string());
        self.status = Status::error(crate::excerpt::excerpt(message, crate::excerpt::MESSAGE).into_owned());
    }

    /// Ends the span now and queues it for export.
    pub fn end(self) {
        let end = SystemTime::now().max(self.start);
        self.end_at(end);
    }

    fn end_at(self, end: SystemTime) {
        let data = SpanData {
            span_context: span_context(self.id, false),
            parent_span_id: otel_span_id(self.parent),
            parent_span_is_remote: false,
            span_kind: self.kind,
            name: self.name,
            start_time: self.start,
            end_time: end,
            attributes: self.attributes,
            dropped_attributes_count: 0,
            events: Default::default(),
            links: Default::default(),
            status: self.status,
            instrumentation_scope: self.on.scope.clone(),
        };
        self.on.exporter.send(data);
    }
}

/// The span an operation of a run runs under, found by whatever the operation calls (a model, an
/// `http` capability) through the OpenTelemetry context of its future.
#[derive(Clone)]
pub struct SpanScope {
    on: Arc<On>,
    parent: TraceParent,
    run_id: Arc<str>,
    /// Values of secret keys among what the operation was given: captured text never shows them.
    secrets: Arc<[String]>,
}

impl SpanScope {
    /// The scope the current future runs in, if its run is traced.
    pub fn current() -> Option<Self> {
        Context::map_current(|cx| cx.get::<SpanScope>().cloned())
    }

    /// Runs `work` in this scope. Not an `async fn`: one would hold `work` twice (as its argument
    /// and as what it awaits), and a step's call is kilobytes, copied whole when boxed.
    pub fn enter<F: Future>(self, work: F) -> impl Future<Output = F::Output> {
        work.with_context(Context::new().with_value(self))
    }

    /// The `traceparent` header of a call made directly under the scope's span.
    pub fn traceparent(&self) -> String {
        self.parent.header()
    }

    pub fn run_id(&self) -> &str {
        &self.run_id
    }

    /// A span starting now below the scope's span.
    pub fn child(&self, name: impl Into<Cow<'static, str>>, kind: SpanKind) -> OpenSpan {
        OpenSpan::new(self.on.clone(), self.parent, name.into(), kind, SystemTime::now())
    }

    /// Text content (a prompt, a model's answer) when capturing is on: every secret value the
    /// scope knows replaced, cut to a bounded length.
    pub fn text(&self, text: &str) -> Option<String> {
        if !self.on.capture {
            return None;
        }
        let mut text = crate::excerpt::excerpt(text, CAPTURED_BYTES).into_owned();
        for secret in self.secrets.iter() {
            text = text.replace(secret.as_str(), crate::redact::REDACTED);
        }
        Some(text)
    }
}

fn span_context(parent: TraceParent, remote: bool) -> SpanContext {
    let flags = if parent.sampled { TraceFlags::SAMPLED } else { TraceFlags::default() };
    SpanContext::new(otel_trace_id(parent.trace_id), otel_span_id(parent.span_id), flags, remote, TraceState::NONE)
}

fn otel_trace_id(id: TraceId) -> opentelemetry::trace::TraceId {
    opentelemetry::trace::TraceId::from_bytes(id.to_bytes())
}

fn otel_span_id(id: SpanId) -> opentelemetry::trace::SpanId {
    opentelemetry::trace::SpanId::from_bytes(id.to_bytes())
}

impl On {
    /// A random id (the generator's; one that is all zero, which it may give once in 2^128,
    /// is drawn again).
    fn new_trace_id(&self) -> TraceId {
        loop {
            if let Some(id) = TraceId::from_bytes(self.ids.new_trace_id().to_bytes()) {
                return id;
            }
        }
    }

    fn new_span_id(&self) -> SpanId {
        loop {
            if let Some(id) = SpanId::from_bytes(self.ids.new_span_id().to_bytes()) {
                return id;
            }
        }
    }
}
