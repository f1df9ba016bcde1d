//! The one interface behind every short-lived guard counter: rate-limit buckets and
//! stream slots. `LocalCounters` keeps them in this process, which is exact for a
//! single server (the SQLite deployment); replicas sharing PostgreSQL need an
//! implementation backed by a shared store, plugged in here without touching the
//! guards. (The daily budget is durable and already lives in the database.)

use std::sync::Arc;

use super::rate::RateLimiter;
use super::streams::{StreamCaps, StreamSlot};
use crate::clock::Millis;

pub trait Counters: Send + Sync + 'static {
    /// Takes one request from the bucket of `key` (`per_minute`, with a burst of the
    /// same size); on refusal, the seconds to wait.
    fn take(&self, key: &str, per_minute: u32, now: Millis) -> Result<(), u64>;

    /// Takes a stream slot under every `(key, cap)` at once, or none.
    fn acquire(&self, limits: &[(String, u32)]) -> Option<StreamSlot>;

    /// Streams open under `key` now.
    fn open_streams(&self, key: &str) -> u32;
}

#[derive(Default)]
pub struct LocalCounters {
    rate: RateLimiter,
    streams: Arc<StreamCaps>,
}

impl Counters for LocalCounters {
    fn take(&self, key: &str, per_minute: u32, now: Millis) -> Result<(), u64> {
        self.rate.take(key, per_minute, now)
    }

    fn acquire(&self, limits: &[(String, u32)]) -> Option<StreamSlot> {
        self.streams.acquire(limits)
    }

    fn open_streams(&self, key: &str) -> u32 {
        self.streams.open(key)
    }
}
