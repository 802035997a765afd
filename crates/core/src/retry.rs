//! Retries of transient failures (model and `http` capability calls): exponential backoff with
//! jitter from backon, capped at 60 s, a server's `Retry-After` honoured. Whether a failure is
//! transient is decided by the error types (`LlmError::is_transient`,
//! `CapabilityError::is_transient`); content errors never are.

use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBackoff, ExponentialBuilder};
use serde::Deserialize;

use crate::settings::RetrySettings;

/// The longest wait before a retry, whatever the backoff or the server asks for.
pub const MAX_DELAY: Duration = Duration::from_secs(60);

/// `policies.retry` of an envelope: overrides of the configured policy.
#[derive(Debug, Clone, Copy, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RetryOverrides {
    pub max_retries: Option<u32>,
    /// Seconds.
    pub base_delay: Option<f64>,
}

/// How often and how patiently one call is retried.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RetrySchedule {
    pub max_retries: u32,
    pub base_delay: Duration,
}

impl RetrySchedule {
    /// The envelope's values where given, the configured ones otherwise.
    pub fn resolve(overrides: &RetryOverrides, settings: &RetrySettings) -> Self {
        let seconds = overrides.base_delay.unwrap_or(settings.base_delay_secs).clamp(0.0, MAX_DELAY.as_secs_f64());
        Self {
            max_retries: overrides.max_retries.unwrap_or(settings.max_retries),
            base_delay: Duration::from_secs_f64(seconds),
        }
    }

    /// The delays before each retry of one call: `base · 2ⁿ` plus up to as much jitter, at most
    /// `max_retries` of them.
    pub fn backoff(&self) -> Backoff {
        let delays = ExponentialBuilder::default()
            .with_min_delay(self.base_delay)
            .with_max_delay(MAX_DELAY)
            .with_factor(2.0)
            .with_max_times(usize::try_from(self.max_retries).unwrap_or(usize::MAX))
            .with_jitter()
            .build();
        Backoff { delays, attempts: 0, max_retries: self.max_retries }
    }
}

/// The retries left for one call.
#[derive(Debug)]
pub struct Backoff {
    delays: ExponentialBackoff,
    attempts: u32,
    max_retries: u32,
}

/// One granted retry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retry {
    /// 1 for the first retry.
    pub attempt: u32,
    pub max_retries: u32,
    pub delay: Duration,
}

impl Backoff {
    /// Retries granted so far.
    pub fn attempts(&self) -> u32 {
        self.attempts
    }

    /// The next retry, if any is left; a server's `Retry-After` replaces the computed delay.
    pub fn next_retry(&mut self, retry_after: Option<Duration>) -> Option<Retry> {
        let computed = self.delays.next()?;
        self.attempts += 1;
        let delay = retry_after.unwrap_or(computed).min(MAX_DELAY);
        Some(Retry { attempt: self.attempts, max_retries: self.max_retries, delay })
    }
}

/// A `Retry-After` header value in seconds (the HTTP-date form is not used by model APIs), at
/// most [`MAX_DELAY`] — what a retry waits at most anyway. The value is a server's: `1e20` seconds
/// is more than a `Duration` holds, and converting it unbounded panicked the run's coordinator.
pub fn parse_retry_after(value: &str) -> Option<Duration> {
    let seconds = value.trim().parse::<f64>().ok().filter(|s| s.is_finite() && *s >= 0.0)?;
    Some(Duration::from_secs_f64(seconds.min(MAX_DELAY.as_secs_f64())))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(max_retries: u32, base: f64) -> RetrySchedule {
        RetrySchedule { max_retries, base_delay: Duration::from_secs_f64(base) }
    }

    #[test]
    fn a_retry_after_is_read_in_seconds_and_at_most_the_longest_delay() {
        assert_eq!(parse_retry_after(" 2.5 "), Some(Duration::from_millis(2500)));
        for huge in ["1e20", "99999999999999999999", "1e300", "600"] {
            assert_eq!(parse_retry_after(huge), Some(MAX_DELAY), "{huge}");
        }
        for refused in ["-1", "inf", "NaN", "soon", "", "Wed, 21 Oct 2026 07:28:00 GMT"] {
            assert_eq!(parse_retry_after(refused), None, "{refused}");
        }
    }

    #[test]
    fn grants_max_retries_with_growing_delays() {
        let mut backoff = policy(3, 1.0).backoff();
        let retries: Vec<Retry> = std::iter::from_fn(|| backoff.next_retry(None)).collect();
        assert_eq!(retries.iter().map(|r| r.attempt).collect::<Vec<_>>(), [1, 2, 3]);
        for (retry, base) in retries.iter().zip([1.0, 2.0, 4.0]) {
            let delay = retry.delay.as_secs_f64();
            assert!(delay >= base && delay < 2.0 * base, "attempt {}: {delay}", retry.attempt);
            assert_eq!(retry.max_retries, 3);
        }
    }

    #[test]
    fn retry_after_wins_and_everything_is_capped() {
        let mut backoff = policy(2, 1.0).backoff();
        assert_eq!(backoff.next_retry(Some(Duration::from_secs(7))).unwrap().delay, Duration::from_secs(7));
        assert_eq!(backoff.next_retry(Some(Duration::from_secs(600))).unwrap().delay, MAX_DELAY);
        assert!(backoff.next_retry(None).is_none());
        assert!(policy(0, 1.0).backoff().next_retry(None).is_none());
        let mut long = policy(10, 30.0).backoff();
        assert!(std::iter::from_fn(|| long.next_retry(None)).all(|r| r.delay <= MAX_DELAY));
    }

    #[test]
    fn retry_after_values() {
        assert_eq!(parse_retry_after("2"), Some(Duration::from_secs(2)));
        assert_eq!(parse_retry_after(" 0.5 "), Some(Duration::from_millis(500)));
        assert_eq!(parse_retry_after("Wed, 21 Oct 2026 07:28:00 GMT"), None);
        assert_eq!(parse_retry_after("-1"), None);
    }

    #[test]
    fn envelope_overrides_settings() {
        let settings = RetrySettings { max_retries: 3, base_delay_secs: 1.0 };
        let overrides = RetryOverrides { max_retries: Some(5), base_delay: None };
        assert_eq!(RetrySchedule::resolve(&overrides, &settings), policy(5, 1.0));
    }
}
