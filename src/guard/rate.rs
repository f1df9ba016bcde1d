//! Token-bucket rate limits, as GCRA: each key keeps one "theoretical arrival
//! time", so a limit of N per minute with a burst of N costs one number per key.
//! It runs on the injected clock, so tests move time instead of sleeping, and the
//! same single-value state could live in a shared store for replicas.

use std::collections::HashMap;
use std::sync::Mutex;

use crate::clock::Millis;

/// Keys above this count trigger a sweep of the idle ones.
const SWEEP_AT: usize = 100_000;

#[derive(Default)]
pub struct RateLimiter {
    arrivals: Mutex<HashMap<String, Millis>>,
}

impl RateLimiter {
    /// Takes one request for `key` at `per_minute` (burst of the same size). On
    /// refusal, returns the seconds until a request would be allowed.
    pub fn take(&self, key: &str, per_minute: u32, now: Millis) -> Result<(), u64> {
        let interval = 60_000 / i64::from(per_minute.max(1));
        let burst = interval * i64::from(per_minute.max(1));
        let mut arrivals = self.arrivals.lock().unwrap_or_else(|e| e.into_inner());
        if arrivals.len() >= SWEEP_AT {
            arrivals.retain(|_, tat| *tat > now);
        }
        let tat = arrivals.get(key).copied().unwrap_or(now).max(now);
        let allowed_at = tat + interval - burst;
        if now < allowed_at {
            let wait_ms = allowed_at - now;
            return Err(((wait_ms + 999) / 1000) as u64);
        }
        arrivals.insert(key.to_string(), tat + interval);
        Ok(())
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
}
