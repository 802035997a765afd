//! What redacting a streamed frame costs: `cargo bench --bench redaction`.
//!
//! Every frame a client reads passes [`Redaction::text`]. The frames are those of the demo's
//! repair run (`tests/snapshots/demo_repair.jsonl`: plans, outputs, goal-condition results), which
//! hold no secret, as nearly every frame does; and the same frames with a secret key added to each
//! payload, which are parsed and written again. Prints the mean time per frame of each, and what
//! judging a frame's keys as it is encoded ([`Redaction::watch`], the live path) adds to writing
//! it with `serde_json`'s compact formatter.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::as_conversions)] // Bench code states what it expects.

use std::hint::black_box;
use std::time::{Duration, Instant};

use flexrun::redact::Redaction;

const FRAMES: &str = include_str!("../tests/snapshots/demo_repair.jsonl");

/// Mean time per pass of `f` over at least `min` of wall time.
fn time(min: Duration, mut f: impl FnMut()) -> Duration {
    for _ in 0..100 {
        f();
    }
    let (mut passes, started) = (0u32, Instant::now());
    while started.elapsed() < min {
        for _ in 0..100 {
            f();
        }
        passes += 100;
    }
    started.elapsed() / passes
}

fn main() {
    let passes: u32 = std::env::var("BENCH_MILLIS").ok().and_then(|v| v.parse().ok()).unwrap_or(2_000);
    let min = Duration::from_millis(passes.into());
    let redaction = Redaction::default();
    let clean: Vec<&str> = FRAMES.lines().filter(|l| !l.is_empty()).collect();
    let secret: Vec<String> =
        clean.iter().map(|f| f.replacen(r#""payload":{"#, r#""payload":{"apiKey":"sk-1","#, 1)).collect();
    let keys: usize = clean.iter().map(|f| f.matches("\":").count()).sum();
    let bytes: usize = clean.iter().map(|f| f.len()).sum();
    println!("{} frames, {bytes} bytes, about {keys} keys", clean.len());
    let per_frame = |d: Duration, n: usize| d.as_nanos() as f64 / n as f64;
    let t = time(min, || {
        for frame in &clean {
            black_box(redaction.text(black_box(frame)));
        }
    });
    println!("no secret:   {:.0} ns per frame", per_frame(t, clean.len()));
    let t = time(min, || {
        for frame in &secret {
            black_box(redaction.text(black_box(frame)));
        }
    });
    println!("with secret: {:.0} ns per frame", per_frame(t, secret.len()));

    let values: Vec<serde_json::Value> = clean.iter().map(|f| serde_json::from_str(f).unwrap()).collect();
    let mut out = Vec::with_capacity(64 * 1024);
    let compact = time(min, || {
        for value in &values {
            out.clear();
            serde::Serialize::serialize(black_box(value), &mut serde_json::Serializer::new(&mut out)).unwrap();
        }
    });
    let watched = time(min, || {
        for value in &values {
            out.clear();
            let mut watch = redaction.watch();
            let mut serializer = serde_json::Serializer::with_formatter(&mut out, &mut watch);
            serde::Serialize::serialize(black_box(value), &mut serializer).unwrap();
            black_box(watch.found());
        }
    });
    println!(
        "encoded:     {:.0} ns per frame, {:.0} ns with its keys judged",
        per_frame(compact, values.len()),
        per_frame(watched, values.len())
    );
}
