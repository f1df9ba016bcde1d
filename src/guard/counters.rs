//! The one interface behind every short-lived guard counter: rate-limit buckets and
//! stream slots. `LocalCounters` keeps them in this process, which is exact for a
//! single server; `RedisCounters` (`redis.rs`) keeps them in Redis, so replicas
//! share them (SPEC §16). (The daily budget is durable and lives in the database.)

use std::sync::Arc;

use futures_util::future::BoxFuture;

use super::rate::RateLimiter;
use super::streams::{StreamCaps, StreamSlot};
use crate::clock::Millis;

/// Why a counter refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Over the limit: the seconds to wait.
    Wait(u64),
    /// The shared counters cannot be reached.
    Unavailable,
}

pub trait Counters: Send + Sync + 'static {
    /// Takes one request from the bucket of `key` (`per_minute`, with a burst of the
    /// same size).
    fn take<'a>(
        &'a self,
        key: &'a str,
        per_minute: u32,
        now: Millis,
    ) -> BoxFuture<'a, Result<(), Refusal>>;

    /// Takes a stream slot under every `(key, cap)` at once, or none (`Ok(None)`).
    fn acquire<'a>(
        &'a self,
        limits: &'a [(String, u32)],
    ) -> BoxFuture<'a, Result<Option<StreamSlot>, Refusal>>;

    /// Streams open under `key` now.
    fn open_streams<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<u32, Refusal>>;
}

#[derive(Default)]
pub struct LocalCounters {
    rate: RateLimiter,
    streams: Arc<StreamCaps>,
}

impl LocalCounters {
    pub fn take_now(&self, key: &str, per_minute: u32, now: Millis) -> Result<(), Refusal> {
        self.rate.take(key, per_minute, now).map_err(Refusal::Wait)
    }
}

impl Counters for LocalCounters {
    fn take<'a>(
        &'a self,
        key: &'a str,
        per_minute: u32,
        now: Millis,
    ) -> BoxFuture<'a, Result<(), Refusal>> {
        let taken = self.take_now(key, per_minute, now);
        Box::pin(std::future::ready(taken))
    }

    fn acquire<'a>(
        &'a self,
        limits: &'a [(String, u32)],
    ) -> BoxFuture<'a, Result<Option<StreamSlot>, Refusal>> {
        Box::pin(std::future::ready(Ok(self.streams.acquire(limits))))
    }

    fn open_streams<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<u32, Refusal>> {
        Box::pin(std::future::ready(Ok(self.streams.open(key))))
    }
}
