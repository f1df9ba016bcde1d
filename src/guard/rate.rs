//! Token-bucket rate limits, as GCRA: each key keeps one "theoretical arrival
//! time", so a limit of N per minute with a burst of N costs one number per key.
//! It runs on the injected clock, so tests move time instead of sleeping, and the
//! same single-value state could live in a shared store for replicas.
//!
//! Memory is bounded by the recent request rate, not by how many keys were ever
//! seen: a key whose arrival time has passed is in exactly the state of a key never
//! seen, so it can be forgotten. Each shard keeps its keys in the order they were
//! last written, and every request forgets a few of the oldest that are due —
//! incremental eviction, never a sweep of the whole map under its lock.

use std::collections::hash_map::DefaultHasher;
use std::collections::{HashMap, VecDeque};
use std::hash::{Hash, Hasher};
use std::sync::Mutex;

use crate::clock::Millis;

/// Independent locks, so requests for different keys rarely wait for each other.
const SHARDS: usize = 16;
/// How many due keys a request forgets at most (amortised O(1) per request).
const EVICT_PER_TAKE: usize = 4;

#[derive(Default)]
struct Shard {
    arrivals: HashMap<String, Millis>,
    /// Keys in the order of their last write, with the arrival time written then;
    /// an entry whose time no longer matches the map is a stale copy.
    order: VecDeque<(String, Millis)>,
}

pub struct RateLimiter {
    shards: Vec<Mutex<Shard>>,
}

impl Default for RateLimiter {
    fn default() -> Self {
        RateLimiter {
            shards: (0..SHARDS).map(|_| Mutex::new(Shard::default())).collect(),
        }
    }
}

impl RateLimiter {
    /// Takes one request for `key` at `per_minute` (burst of the same size). On
    /// refusal, returns the seconds until a request would be allowed.
    pub fn take(&self, key: &str, per_minute: u32, now: Millis) -> Result<(), u64> {
        // In microseconds, so the spacing of a large limit (say 7,000 a minute)
        // does not round and let through more than the limit.
        let now = now.saturating_mul(1000);
        let interval = 60_000_000 / i64::from(per_minute.max(1));
        // A burst is a minute's worth of requests. Kept as the whole minute rather
        // than `interval × per_minute`: for very large limits the interval rounds
        // to zero, and a zero burst would refuse two requests whose clock readings
        // arrive a millisecond out of order.
        let burst = 60_000_000;
        let mut shard = self.shard(key).lock().unwrap_or_else(|e| e.into_inner());
        shard.forget_due(now);
        let tat = shard.arrivals.get(key).copied().unwrap_or(now).max(now);
        let allowed_at = tat + interval - burst;
        if now < allowed_at {
            let wait_us = allowed_at - now;
            return Err(((wait_us + 999_999) / 1_000_000) as u64);
        }
        shard.arrivals.insert(key.to_string(), tat + interval);
        shard.order.push_back((key.to_string(), tat + interval));
        Ok(())
    }

    /// Keys held now.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.lock().unwrap_or_else(|e| e.into_inner()).arrivals.len())
            .sum()
    }

    fn shard(&self, key: &str) -> &Mutex<Shard> {
        let mut hasher = DefaultHasher::new();
        key.hash(&mut hasher);
        &self.shards[(hasher.finish() as usize) % SHARDS]
    }
}

impl Shard {
    /// Forgets up to a few of the oldest-written keys whose arrival time has passed.
    fn forget_due(&mut self, now: Millis) {
        for _ in 0..EVICT_PER_TAKE {
            let Some((key, tat)) = self.order.front() else {
                return;
            };
            if *tat > now {
                return;
            }
            if self.arrivals.get(key) == Some(tat) {
                self.arrivals.remove(key);
            }
            self.order.pop_front();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::RateLimiter;

    #[test]
    fn a_burst_is_allowed_then_requests_are_spaced() {
        let limiter = RateLimiter::default();
        for _ in 0..3 {
            assert!(limiter.take("k", 3, 0).is_ok());
        }
        assert_eq!(limiter.take("k", 3, 0), Err(20));
        assert_eq!(limiter.take("k", 3, 19_001), Err(1));
        assert!(limiter.take("k", 3, 20_000).is_ok());
        assert!(
            limiter.take("other", 3, 20_000).is_ok(),
            "keys are independent"
        );
    }

    #[test]
    fn an_idle_key_refills_to_a_full_burst() {
        let limiter = RateLimiter::default();
        for _ in 0..5 {
            assert!(limiter.take("k", 5, 0).is_ok());
        }
        for _ in 0..5 {
            assert!(limiter.take("k", 5, 600_000).is_ok());
        }
        assert!(limiter.take("k", 5, 600_000).is_err());
    }

    /// 200,000 distinct keys, one request each, spread over ten minutes: the map
    /// holds about a minute's worth, not every key ever seen.
    #[test]
    fn memory_follows_the_recent_rate_not_every_key_ever_seen() {
        let limiter = RateLimiter::default();
        let n = 200_000;
        for i in 0..n {
            let now = i as i64 * 600_000 / n as i64;
            assert!(limiter.take(&format!("v|{i}"), 20, now).is_ok());
        }
        // One request per key at 20/min leaves each key due 3 s after its request:
        // about 3 s of keys (1,000) plus what the amortised eviction has not reached.
        assert!(limiter.len() < 5_000, "{} keys held", limiter.len());
    }

    #[test]
    fn forgetting_a_due_key_changes_nothing_it_would_have_decided() {
        let limiter = RateLimiter::default();
        assert!(limiter.take("k", 1, 0).is_ok());
        assert_eq!(limiter.take("k", 1, 1), Err(60));
        // Other keys' requests evict "k" once due; it then starts afresh, as it would.
        for i in 0..100 {
            let _ = limiter.take(&format!("o{i}"), 60, 61_000);
        }
        assert!(limiter.take("k", 1, 61_000).is_ok());
        assert!(limiter.take("k", 1, 61_001).is_err());
    }

    #[test]
    fn a_large_limit_lets_through_its_burst_and_no_more() {
        for per_minute in [700u32, 7_000, 40_000] {
            let limiter = RateLimiter::default();
            let passed = (0..per_minute * 2)
                .filter(|_| limiter.take("k", per_minute, 5_000).is_ok())
                .count();
            assert_eq!(passed, per_minute as usize, "{per_minute}");
        }
    }

    #[test]
    fn a_limit_above_one_a_millisecond_never_refuses() {
        let limiter = RateLimiter::default();
        for i in 0..100_000 {
            // Readings a millisecond out of order, as concurrent requests take them.
            let now = 1_000 + i / 100 - (i % 2);
            assert!(limiter.take("ip", 1_000_000, now).is_ok(), "{i}");
        }
    }
}
