//! Sending spans: a bounded queue, batches, one OTLP/HTTP request at a time.
//!
//! The SDK's batch processor drops spans when its queue is full but does not say how many; flexrun
//! must count them (`flexrun_otel_spans_dropped_total`), so the queue is its own: [`Exporter::send`]
//! never waits — a full queue drops the span — and a task sends what is queued in batches of up to
//! `max_export_batch_size`, each request bounded by `export_timeout_millis` (a failed or timed-out
//! request drops its batch). A slow or dead collector costs a run nothing but its spans.

use std::time::Duration;

use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{SpanData, SpanExporter as _};
use tokio::sync::{mpsc, oneshot};

use crate::config::{ConfigError, TelemetrySettings};
use crate::telemetry;

/// The sending end of the span queue.
#[derive(Debug, Clone)]
pub struct Exporter {
    queue: mpsc::Sender<Queued>,
}

/// What the export task is given: a span, or a flush answered once everything queued before it
/// was sent (or dropped).
#[derive(Debug)]
enum Queued {
    Span(Box<SpanData>),
    Flush(oneshot::Sender<()>),
}

/// How batches are made and sent.
#[derive(Debug, Clone, Copy)]
struct Batching {
    size: usize,
    delay: Duration,
    timeout: Duration,
}

impl Exporter {
    /// Starts the task that sends queued spans to `url` (on the current runtime). Makes no
    /// network call itself.
    pub fn start(settings: &TelemetrySettings, url: String) -> Result<Self, ConfigError> {
        let timeout = settings.export_timeout();
        // Not even reqwest's protocol-level retries: a request that fails drops its batch.
        let http = reqwest::Client::builder()
            .retry(reqwest::retry::never())
            .timeout(timeout)
            .build()
            .map_err(|error| ConfigError::Invalid { key: "telemetry.endpoint", problem: error.to_string() })?;
        let mut otlp = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(Protocol::HttpBinary)
            .with_endpoint(url)
            .with_timeout(timeout)
            .with_headers(settings.header_map()?)
            .with_retry_policy(opentelemetry_otlp::RetryPolicy::disabled())
            .with_http_client(http)
            .build()
            .map_err(|error| ConfigError::Invalid { key: "telemetry.endpoint", problem: error.to_string() })?;
        otlp.set_resource(&Resource::builder_empty().with_service_name(settings.service_name.clone()).build());
        let (queue, spans) = mpsc::channel(settings.queue_size);
        let batching = Batching { size: settings.max_export_batch_size, delay: settings.schedule_delay(), timeout };
        tokio::spawn(send_batches(spans, otlp, batching));
        Ok(Self { queue })
    }

    /// Queues `span` for export; drops it (and counts it) if the queue is full.
    pub fn send(&self, span: SpanData) {
        if self.queue.try_send(Queued::Span(Box::new(span))).is_err() {
            telemetry::otel_spans_dropped("queue_full", 1);
        }
    }

    /// Sends what is queued now, waiting at most `patience`: a process about to exit keeps the
    /// spans of its last runs.
    pub async fn flush(&self, patience: Duration) {
        let (done, sent) = oneshot::channel();
        let flushed = async {
            if self.queue.send(Queued::Flush(done)).await.is_ok() {
                let _ = sent.await;
            }
        };
        let _ = tokio::time::timeout(patience, flushed).await;
    }
}

/// Sends what is queued, in batches, until every sender is gone.
async fn send_batches(mut queue: mpsc::Receiver<Queued>, otlp: opentelemetry_otlp::SpanExporter, batching: Batching) {
    let mut failing = false;
    loop {
        let (batch, flush) = match queue.recv().await {
            None => return,
            Some(Queued::Flush(done)) => {
                let _ = done.send(());
                continue;
            }
            Some(Queued::Span(first)) => next_batch(&mut queue, *first, batching).await,
        };
        send(&otlp, batch, batching.timeout, &mut failing).await;
        if let Some(done) = flush {
            let _ = done.send(());
        }
    }
}

/// `first` and what follows it within the schedule delay, up to a batch; cut short by a flush,
/// returned to be answered once the batch is sent.
async fn next_batch(
    queue: &mut mpsc::Receiver<Queued>,
    first: SpanData,
    batching: Batching,
) -> (Vec<SpanData>, Option<oneshot::Sender<()>>) {
    let mut batch = vec![first];
    let until = tokio::time::Instant::now() + batching.delay;
    while batch.len() < batching.size {
        match tokio::time::timeout_at(until, queue.recv()).await {
            Ok(Some(Queued::Span(span))) => batch.push(*span),
            Ok(Some(Queued::Flush(done))) => return (batch, Some(done)),
            Ok(None) | Err(_) => break,
        }
    }
    (batch, None)
}

/// One export request within `timeout`; its spans are dropped (and counted) if it fails. A
/// failure is logged once per outage (`failing`), not once per batch.
async fn send(otlp: &opentelemetry_otlp::SpanExporter, batch: Vec<SpanData>, timeout: Duration, failing: &mut bool) {
    let count = batch.len();
    let error = match tokio::time::timeout(timeout, otlp.export(batch)).await {
        Ok(Ok(())) => None,
        Ok(Err(error)) => Some(crate::excerpt::log(error).to_string()),
        Err(_) => Some(format!("no answer within {} ms", timeout.as_millis())),
    };
    match error {
        None if *failing => {
            *failing = false;
            tracing::info!("OTLP trace export works again");
        }
        None => {}
        Some(error) => {
            telemetry::otel_spans_dropped("export_failed", count);
            if !std::mem::replace(failing, true) {
                tracing::warn!(%error, "OTLP trace export failed: spans are dropped until it works again");
            }
        }
    }
}
