//! Guard counters in Redis, shared by every replica of one installation (SPEC
//! §16). A rate limit is the same GCRA as `rate.rs`, one atomic script per check
//! on Redis's clock; a stream slot is a member of a sorted set per key, scored
//! with its lease's end, renewed while its turn streams and removed when it ends,
//! so the slots of a replica that died lapse within the lease — the process
//! lease's length (`[server] lease_s`, 15 s by default, under the 30 s that
//! SPEC §16 allows). Keys carry the
//! installation's id (stored in its database), so installations sharing a Redis
//! never share counters.

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use redis::Script;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};

use super::counters::{Counters, Refusal};
use super::streams::StreamSlot;
use crate::clock::Millis;

/// A check waits at most this for Redis before the ask is refused as unavailable.
const RESPONSE_TIMEOUT: Duration = Duration::from_millis(1500);
/// After Redis failed to answer, checks are refused at once for this long (then
/// tried again), so an outage costs each ask no wait at all.
const DOWN_FOR: Duration = Duration::from_secs(2);

/// GCRA in microseconds on Redis's clock, as `rate.rs`: an interval of
/// `60 s / per_minute` and a burst of a minute. Returns 0 when taken, else the
/// microseconds to wait.
const TAKE: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local interval = tonumber(ARGV[1])
local burst = 60000000
local tat = tonumber(redis.call('GET', KEYS[1]) or now)
if tat < now then tat = now end
local allowed_at = tat + interval - burst
if allowed_at > now then
  return allowed_at - now
end
local next_tat = tat + interval
redis.call('SET', KEYS[1], string.format('%.0f', next_tat), 'PX', math.ceil((next_tat - now) / 1000) + 1000)
return 0
"#;

/// Takes a slot under every key (ARGV: slot id, lease ms, then one cap per key),
/// or none: lapsed slots are dropped first. Returns 1 when taken.
const ACQUIRE: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local lease = tonumber(ARGV[2])
for i, key in ipairs(KEYS) do
  redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
  if redis.call('ZCARD', key) >= tonumber(ARGV[i + 2]) then return 0 end
end
for i, key in ipairs(KEYS) do
  redis.call('ZADD', key, now + lease, ARGV[1])
  redis.call('PEXPIRE', key, lease * 2)
end
return 1
"#;

/// Extends a held slot's lease (ARGV: slot id, lease ms); a slot that lapsed
/// meanwhile is not brought back.
const RENEW: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local lease = tonumber(ARGV[2])
for _, key in ipairs(KEYS) do
  redis.call('ZADD', key, 'XX', now + lease, ARGV[1])
  redis.call('PEXPIRE', key, lease * 2)
end
return 1
"#;

/// The slots of a key whose lease has not lapsed.
const OPEN: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
return redis.call('ZCOUNT', KEYS[1], '(' .. now, '+inf')
"#;

pub struct RedisCounters {
    connection: ConnectionManager,
    prefix: String,
    take: Arc<Script>,
    acquire: Arc<Script>,
    renew: Arc<Script>,
    open: Script,
    /// How long a stream slot holds without renewal; renewed three times within.
    lease: Duration,
    /// Until when Redis counts as down (see `DOWN_FOR`).
    down_until: std::sync::Mutex<Option<std::time::Instant>>,
}

impl RedisCounters {
    /// Connects lazily: a Redis that is down at start makes asks wait for it
    /// (503) rather than stopping the server.
    pub fn connect(
        url: &str,
        installation: &str,
        lease: Duration,
    ) -> anyhow::Result<RedisCounters> {
        let client = redis::Client::open(url)
            .map_err(|e| anyhow::anyhow!("server.redis_url: {}", e.kind_text()))?;
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(RESPONSE_TIMEOUT))
            .set_response_timeout(Some(RESPONSE_TIMEOUT))
            .set_number_of_retries(1)
            .set_max_delay(Duration::from_secs(2));
        let connection = ConnectionManager::new_lazy_with_config(client, config).map_err(|e| {
            anyhow::anyhow!("cannot set up the Redis connection: {}", e.kind_text())
        })?;
        Ok(RedisCounters {
            connection,
            prefix: format!("deskbell:{installation}:"),
            take: Arc::new(Script::new(TAKE)),
            acquire: Arc::new(Script::new(ACQUIRE)),
            renew: Arc::new(Script::new(RENEW)),
            open: Script::new(OPEN),
            lease,
            down_until: std::sync::Mutex::new(None),
        })
    }

    /// Runs one Redis call, bounded by `RESPONSE_TIMEOUT`; a failure marks Redis
    /// down for `DOWN_FOR`, during which calls are refused without being sent.
    async fn bounded<T>(
        &self,
        call: impl std::future::Future<Output = redis::RedisResult<T>>,
    ) -> Result<T, Refusal> {
        let now = std::time::Instant::now();
        {
            let down = self.down_until.lock().unwrap_or_else(|e| e.into_inner());
            if down.is_some_and(|until| now < until) {
                return Err(Refusal::Unavailable);
            }
        }
        let failed = match tokio::time::timeout(RESPONSE_TIMEOUT, call).await {
            Ok(Ok(value)) => return Ok(value),
            Ok(Err(e)) => e.kind_text(),
            Err(_) => "no answer in time".to_string(),
        };
        tracing::warn!(error = %failed, "Redis could not be reached");
        *self.down_until.lock().unwrap_or_else(|e| e.into_inner()) = Some(now + DOWN_FOR);
        Err(Refusal::Unavailable)
    }

    async fn take_slot(&self, limits: &[(String, u32)]) -> Result<Option<StreamSlot>, Refusal> {
        let id = crate::ids::new_id("slot");
        let keys: Vec<String> = limits
            .iter()
            .map(|(k, _)| format!("{}s:{k}", self.prefix))
            .collect();
        let mut invocation = self.acquire.prepare_invoke();
        for key in &keys {
            invocation.key(key);
        }
        invocation.arg(&id).arg(self.lease.as_millis() as u64);
        for (_, cap) in limits {
            invocation.arg(*cap);
        }
        let mut connection = self.connection.clone();
        let taken: i64 = match self.bounded(invocation.invoke_async(&mut connection)).await {
            Ok(taken) => taken,
            Err(refusal) => {
                // No answer in time does not mean the script did not run: it
                // may run once Redis gets to it, taking a slot nobody holds.
                // Giving it back now (sent behind the script, on the same
                // connection) frees it then, not a lease later.
                tokio::spawn(release(self.connection.clone(), keys, id));
                return Err(refusal);
            }
        };
        if taken != 1 {
            return Ok(None);
        }
        let renewal = tokio::spawn(renew_forever(
            self.connection.clone(),
            Arc::clone(&self.renew),
            keys.clone(),
            id.clone(),
            self.lease,
        ));
        let connection = self.connection.clone();
        Ok(Some(StreamSlot::new(move || {
            renewal.abort();
            // Given back at once when Redis answers; if it does not, the lease
            // lapses on its own.
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                runtime.spawn(release(connection, keys, id));
            }
        })))
    }
}

async fn renew_forever(
    connection: ConnectionManager,
    script: Arc<Script>,
    keys: Vec<String>,
    id: String,
    lease: Duration,
) {
    loop {
        tokio::time::sleep(lease / 3).await;
        let mut invocation = script.prepare_invoke();
        for key in &keys {
            invocation.key(key);
        }
        invocation.arg(&id).arg(lease.as_millis() as u64);
        let mut connection = connection.clone();
        if let Err(e) = invocation.invoke_async::<i64>(&mut connection).await {
            tracing::warn!(error = %e.kind_text(), "a stream slot's lease could not be renewed");
        }
    }
}

async fn release(mut connection: ConnectionManager, keys: Vec<String>, id: String) {
    let mut pipe = redis::pipe();
    for key in &keys {
        pipe.zrem(key, &id).ignore();
    }
    if let Err(e) = pipe.query_async::<()>(&mut connection).await {
        tracing::warn!(error = %e.kind_text(), "a stream slot could not be given back; its lease will lapse");
    }
}

impl Counters for RedisCounters {
    fn take<'a>(
        &'a self,
        key: &'a str,
        per_minute: u32,
        _now: Millis,
    ) -> BoxFuture<'a, Result<(), Refusal>> {
        Box::pin(async move {
            let interval = 60_000_000 / i64::from(per_minute.max(1));
            let mut connection = self.connection.clone();
            let mut invocation = self.take.key(format!("{}r:{key}", self.prefix));
            invocation.arg(interval);
            let wait_us: i64 = self
                .bounded(invocation.invoke_async(&mut connection))
                .await?;
            match wait_us {
                0 => Ok(()),
                us => Err(Refusal::Wait((us.max(1) as u64).div_ceil(1_000_000))),
            }
        })
    }

    fn acquire<'a>(
        &'a self,
        limits: &'a [(String, u32)],
    ) -> BoxFuture<'a, Result<Option<StreamSlot>, Refusal>> {
        Box::pin(self.take_slot(limits))
    }

    fn open_streams<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<u32, Refusal>> {
        Box::pin(async move {
            let mut connection = self.connection.clone();
            let invocation = self.open.key(format!("{}s:{key}", self.prefix));
            let open: u32 = self
                .bounded(invocation.invoke_async(&mut connection))
                .await?;
            Ok(open)
        })
    }
}

/// The text of a Redis error without anything it may quote (a URL's password).
trait KindText {
    fn kind_text(&self) -> String;
}

impl KindText for redis::RedisError {
    fn kind_text(&self) -> String {
        format!("{:?}", self.kind())
    }
}
