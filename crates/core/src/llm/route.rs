//! Model routing as pure rules: a route is an ordered chain of `<endpoint>/<model>` entries; a call
//! goes to the first entry whose endpoint's [`Breaker`] lets it through, and what a failure means
//! for the chain is [`after_failure`]'s to say. The server's model pool makes the calls.

use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::LlmError;

/// One entry of a route: a model served by a named endpoint.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct RouteEntry {
    pub endpoint: String,
    pub model: String,
}

impl RouteEntry {
    /// `<endpoint>/<model>`: the endpoint is the text before the first `/` (a model name may
    /// hold more, as `meta-llama/llama-3` does).
    pub fn parse(text: &str) -> Option<Self> {
        let (endpoint, model) = text.split_once('/')?;
        let name_ok = !endpoint.is_empty()
            && endpoint.len() <= 64
            && endpoint.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-'));
        (name_ok && !model.is_empty() && model.len() <= 200)
            .then(|| Self { endpoint: endpoint.into(), model: model.into() })
    }
}

impl std::fmt::Display for RouteEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.endpoint, self.model)
    }
}

/// The first entry of `chain` that repeats an earlier one: `(its index, the earlier one's)`. A
/// chain tries each entry once — the run's retries go along it again — so a repeat is a mistake
/// (a cycle) that would only call a failing model twice and count it twice against its breaker.
pub fn first_repeat<T: PartialEq>(chain: &[T]) -> Option<(usize, usize)> {
    chain
        .iter()
        .enumerate()
        .find_map(|(i, entry)| chain[..i].iter().position(|earlier| earlier == entry).map(|at| (i, at)))
}

/// What a failed call means for the rest of its chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AfterFailure {
    /// Rate-limited, overloaded, down, too slow, or refusing what is its own (the key, the
    /// model): the next entry — after `wait`, the `Retry-After` a rate-limited endpoint asked
    /// for when it is short (zero otherwise: a long one is not waited for, another endpoint is
    /// there).
    NextEntry { wait: Duration },
    /// The answer's content was at fault (400, unreadable, schema-invalid): another endpoint
    /// would not change it; the call fails as it is.
    Stop,
}

/// What a failure of one entry means: 429 honours a `Retry-After` up to `patience`, then falls
/// over (at once when it is longer); 5xx, 408, timeouts and connection failures fall over at
/// once, and so do 401, 403 and 404 — the endpoint refusing its key or not serving the model,
/// which another endpoint may well answer (not retried on the same one: they are not transient);
/// anything else stops.
pub fn after_failure(error: &LlmError, patience: Duration) -> AfterFailure {
    match error {
        LlmError::Status { status: 429, retry_after: Some(wait), .. } if *wait <= patience => {
            AfterFailure::NextEntry { wait: *wait }
        }
        LlmError::Status { status: 401 | 403 | 404, .. } => AfterFailure::NextEntry { wait: Duration::ZERO },
        error if error.is_transient() => AfterFailure::NextEntry { wait: Duration::ZERO },
        _ => AfterFailure::Stop,
    }
}

/// `[llm.breaker]`: after `failures` failures in a row an endpoint is skipped for `cool_down`,
/// then one call is let through to probe it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BreakerSettings {
    pub failures: u32,
    pub cool_down: Duration,
}

impl Default for BreakerSettings {
    fn default() -> Self {
        Self { failures: 5, cool_down: Duration::from_secs(30) }
    }
}

/// An endpoint's circuit breaker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Breaker {
    /// Calls go through; `failures` in a row so far.
    Closed { failures: u32 },
    /// Calls are skipped until `until`.
    Open { until: Instant },
    /// One probing call is in flight; others are skipped until it ends.
    Probing,
}

/// Whether a call may go to an endpoint, as its breaker says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    Call,
    /// The first call after the cool-down: its outcome opens or closes the breaker.
    Probe,
    Skip,
}

impl Default for Breaker {
    fn default() -> Self {
        Self::Closed { failures: 0 }
    }
}

impl Breaker {
    /// Whether a call may go now (a probe moves the breaker to [`Breaker::Probing`]).
    pub fn admit(&mut self, now: Instant) -> Admission {
        match *self {
            Self::Closed { .. } => Admission::Call,
            Self::Open { until } if now >= until => {
                *self = Self::Probing;
                Admission::Probe
            }
            Self::Open { .. } | Self::Probing => Admission::Skip,
        }
    }

    /// A call that went through ended: a success closes the breaker; a failure counts, and the
    /// `failures`-th in a row (or a failed probe) opens it for the cool-down. A failure of a call
    /// let through before the breaker opened leaves the cool-down as it is: calls that were
    /// already on their way to a dead endpoint say nothing new, and each would otherwise put the
    /// probe off by another cool-down.
    pub fn record(&mut self, succeeded: bool, now: Instant, settings: BreakerSettings) {
        *self = match (*self, succeeded) {
            (_, true) => Self::Closed { failures: 0 },
            (Self::Closed { failures }, false) if failures + 1 < settings.failures => {
                Self::Closed { failures: failures + 1 }
            }
            (Self::Open { until }, false) => Self::Open { until },
            (_, false) => Self::Open { until: now + settings.cool_down },
        };
    }

    /// A probe that ended with no outcome — its call dropped before an answer or a failure (the
    /// run cancelled, the step superseded or cut off by its own deadline) — says nothing of the
    /// endpoint: the cool-down is over, so the next call probes. Kept probing, the endpoint would
    /// be skipped by every call until the process restarts.
    pub fn abandon_probe(&mut self, now: Instant) {
        if *self == Self::Probing {
            *self = Self::Open { until: now };
        }
    }

    /// The state's name, as health and metrics show it: `closed`, `open`, `half_open`.
    pub fn state(&self, now: Instant) -> &'static str {
        match self {
            Self::Closed { .. } => "closed",
            Self::Open { until } if now < *until => "open",
            Self::Open { .. } | Self::Probing => "half_open",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_is_an_endpoint_and_a_model_that_may_hold_slashes() {
        let entry = RouteEntry::parse("router/meta-llama/llama-3").unwrap();
        assert_eq!((entry.endpoint.as_str(), entry.model.as_str()), ("router", "meta-llama/llama-3"));
        assert_eq!(entry.to_string(), "router/meta-llama/llama-3");
        for bad in ["gpt-4o", "/m", "e/", "bad name/m"] {
            assert_eq!(RouteEntry::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_chain_that_repeats_an_entry_is_found_at_the_repeat() {
        assert_eq!(first_repeat(&["a/x", "b/y", "c/z"]), None);
        assert_eq!(first_repeat(&["a/x", "b/y", "a/x", "b/y"]), Some((2, 0)));
    }

    #[test]
    fn rate_limits_fall_over_after_a_short_wait_or_at_once_content_errors_stop() {
        let patience = Duration::from_secs(2);
        let limited = |secs| LlmError::Status {
            status: 429,
            message: String::new(),
            retry_after: Some(Duration::from_secs(secs)),
        };
        let now = AfterFailure::NextEntry { wait: Duration::ZERO };
        assert_eq!(after_failure(&limited(1), patience), AfterFailure::NextEntry { wait: Duration::from_secs(1) });
        assert_eq!(after_failure(&limited(60), patience), now);
        let status = |status| LlmError::Status { status, message: String::new(), retry_after: None };
        assert_eq!(after_failure(&status(503), patience), now);
        assert_eq!(after_failure(&LlmError::Timeout(patience), patience), now);
        assert_eq!(after_failure(&status(401), patience), now, "the endpoint's own refusal");
        assert_eq!(after_failure(&status(404), patience), now);
        assert_eq!(after_failure(&status(400), patience), AfterFailure::Stop);
        assert_eq!(after_failure(&LlmError::Protocol("x".into()), patience), AfterFailure::Stop);
    }

    #[test]
    fn a_breaker_opens_after_failures_in_a_row_then_probes_and_closes() {
        let settings = BreakerSettings { failures: 2, cool_down: Duration::from_secs(10) };
        let now = Instant::now();
        let mut breaker = Breaker::default();
        breaker.record(false, now, settings);
        assert_eq!(breaker.admit(now), Admission::Call, "one failure: still closed");
        breaker.record(false, now, settings);
        assert_eq!((breaker.admit(now), breaker.state(now)), (Admission::Skip, "open"));
        let later = now + Duration::from_secs(11);
        assert_eq!(breaker.state(later), "half_open");
        assert_eq!(breaker.admit(later), Admission::Probe);
        assert_eq!(breaker.admit(later), Admission::Skip, "one probe at a time");
        breaker.record(false, later, settings);
        assert_eq!(breaker.admit(later), Admission::Skip, "a failed probe opens it again");
        let much_later = later + Duration::from_secs(11);
        assert_eq!(breaker.admit(much_later), Admission::Probe);
        breaker.record(true, much_later, settings);
        assert_eq!((breaker.admit(much_later), breaker.state(much_later)), (Admission::Call, "closed"));

        // Calls let through before it opened fail afterwards: the cool-down is not put off.
        let mut opened = Breaker::default();
        opened.record(false, now, settings);
        opened.record(false, now, settings);
        opened.record(false, now + Duration::from_secs(9), settings);
        assert_eq!(opened.admit(later), Admission::Probe, "the probe comes a cool-down after it opened");

        let mut abandoned = Breaker::Probing;
        abandoned.abandon_probe(much_later);
        assert_eq!(abandoned.admit(much_later), Admission::Probe, "a probe with no outcome: the next call probes");
        breaker.abandon_probe(much_later);
        assert_eq!(breaker.state(much_later), "closed", "only a probe is abandoned");
    }
}
