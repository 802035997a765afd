//! Attempts limited per client, in bounded memory: a token bucket per client, kept as the one
//! instant at which the bucket is full again (the "generic cell rate algorithm"). A client whose
//! bucket is full holds no state, so it is dropped from the table; the table holds at most a fixed
//! number of clients, and when all of them are still limited a new client is refused too, rather
//! than let an attacker with many addresses push the limited ones out (and so free them).

use std::hash::Hash;
use std::time::{Duration, Instant};

use crate::hash::HashMap;

/// Refused: the client may try again after this long.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("too many attempts; try again in {0:?}")]
pub struct Throttled(pub Duration);

impl Throttled {
    /// Whole seconds to wait, rounded up and at least one (what `Retry-After` says).
    pub fn secs(&self) -> u64 {
        self.0.as_secs().saturating_add(u64::from(self.0.subsec_nanos() > 0)).max(1)
    }
}

/// Token buckets of `burst` attempts refilled at `burst` per minute, one per client `K`.
pub struct Throttle<K> {
    /// Time one attempt takes to refill.
    interval: Duration,
    /// How far ahead of now a client's full time may be and still allow an attempt: the burst
    /// less one attempt.
    tolerance: Duration,
    /// Clients held at most.
    capacity: usize,
    /// Each limited client's instant at which its bucket is full again.
    full_at: HashMap<K, Instant>,
}

impl<K: Hash + Eq> Throttle<K> {
    /// `burst` attempts at once, and `burst` a minute after (at least one); at most `capacity`
    /// clients tracked.
    pub fn per_minute(burst: u32, capacity: usize) -> Self {
        let burst = burst.max(1);
        let interval = Duration::from_secs(60) / burst;
        Self { interval, tolerance: interval * (burst - 1), capacity, full_at: HashMap::default() }
    }

    /// When `client` may make an attempt at `now`, what its bucket's full time becomes (pass it
    /// to [`Self::take`]); else how long it must wait. Changes nothing but dropping full buckets.
    pub fn check(&mut self, client: &K, now: Instant) -> Result<Instant, Throttled> {
        let full_at = match self.full_at.get(client) {
            Some(&at) => at.max(now),
            None => {
                if self.full_at.len() >= self.capacity {
                    self.full_at.retain(|_, at| *at > now);
                }
                if self.full_at.len() >= self.capacity {
                    let freed =
                        self.full_at.values().min().map_or(self.interval, |at| at.saturating_duration_since(now));
                    return Err(Throttled(freed));
                }
                now
            }
        };
        let ahead = full_at.saturating_duration_since(now);
        if ahead > self.tolerance {
            return Err(Throttled(ahead - self.tolerance));
        }
        Ok(full_at + self.interval)
    }

    /// Spends one attempt of `client`'s bucket, as [`Self::check`] allowed.
    pub fn take(&mut self, client: K, full_at: Instant) {
        self.full_at.insert(client, full_at);
    }

    #[cfg(test)]
    fn tracked(&self) -> usize {
        self.full_at.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attempt(throttle: &mut Throttle<u32>, client: u32, now: Instant) -> Result<(), Throttled> {
        let full_at = throttle.check(&client, now)?;
        throttle.take(client, full_at);
        Ok(())
    }

    #[test]
    fn a_burst_then_one_attempt_per_interval() {
        let mut throttle = Throttle::per_minute(3, 10);
        let start = Instant::now();
        for _ in 0..3 {
            attempt(&mut throttle, 1, start).unwrap();
        }
        let refused = attempt(&mut throttle, 1, start).unwrap_err();
        assert_eq!(refused, Throttled(Duration::from_secs(20)), "one attempt refills in 60 / 3 s");
        assert_eq!(refused.secs(), 20);
        assert!(attempt(&mut throttle, 2, start).is_ok(), "another client has its own bucket");
        let later = start + Duration::from_secs(20);
        attempt(&mut throttle, 1, later).unwrap();
        assert!(attempt(&mut throttle, 1, later).is_err());
        assert_eq!(Throttled(Duration::from_millis(1)).secs(), 1, "Retry-After rounds up");
    }

    #[test]
    fn a_refused_check_spends_nothing() {
        let mut throttle = Throttle::per_minute(1, 10);
        let start = Instant::now();
        attempt(&mut throttle, 1, start).unwrap();
        for _ in 0..100 {
            assert!(throttle.check(&1, start).is_err());
        }
        assert!(attempt(&mut throttle, 1, start + Duration::from_secs(60)).is_ok());
    }

    #[test]
    fn the_table_is_bounded_and_full_buckets_are_dropped() {
        let mut throttle = Throttle::per_minute(2, 3);
        let start = Instant::now();
        for client in 0..3 {
            attempt(&mut throttle, client, start).unwrap();
        }
        // Every tracked client is still limited: a new one is refused until one refills.
        let refused = attempt(&mut throttle, 99, start).unwrap_err();
        assert_eq!(refused, Throttled(Duration::from_secs(30)));
        assert_eq!(throttle.tracked(), 3);
        attempt(&mut throttle, 0, start).unwrap();
        // Clients 1 and 2 are full again after 30 s; 0 is not.
        let later = start + Duration::from_secs(30);
        attempt(&mut throttle, 99, later).unwrap();
        assert_eq!(throttle.tracked(), 2, "the full buckets were dropped, 0 and 99 remain");
        assert!(throttle.check(&0, later).is_ok());
    }
}
