//! Ownership: which process may write what an answer streams and a call runs
//! (SPEC §6.5, §16). Every rule about it lives here and in `leases.rs`.
//!
//! A process holds a **lease**: a row in `leases`, timed by the database's clock,
//! renewed three times a lifetime. The lease's name is its **fence**, a token made
//! fresh each time a lease is taken (a UUIDv7, so a later fence sorts after an
//! earlier one). Work a process starts — an answer's bubble, a running call — is
//! stamped with the fence current at its start (`Fence`), and every later write
//! of that work names the same fence and counts the rows it changed (`owned`).
//! When another process claimed the work because the lease lapsed (a crash, or a
//! pause longer than the lease: SIGSTOP, a VM pause, a database outage), the rows
//! carry the claimer's fence, the write changes nothing, and the writer gets
//! `StoreError::TakenOver` and stops that work at once.
//!
//! A process whose lease was claimed never holds that fence again: renewing
//! finds no row and takes a new lease under a new fence, so nothing started
//! under the old one can write again, and rows stamped with it are claimable by
//! anyone (their fence is in no lease).
//!
//! Before it delivers a call to a tool, a process checks on its own monotonic
//! clock that its lease is good for a while yet (`Store::hold`); if it is not,
//! it renews first and delivers only if the fence survived. So a process that
//! cannot renew stops delivering until it has a lease again.

pub(super) mod leases;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::error::{StoreError, StoreResult};
use super::{Store, sql};

pub use leases::{Claimed, FileLock, StreamingAnswer};

/// How long a lease holds without renewal unless `[server] lease_s` says otherwise.
pub const DEFAULT_LEASE_MS: i64 = 15_000;

/// The lease under which a piece of work was started: its writes are accepted
/// only while the rows still carry it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fence(Arc<str>);

impl Fence {
    fn fresh() -> Fence {
        Fence(crate::ids::new_id("p").into())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for Fence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// A fenced write's row count: none changed means the work is no longer this
/// fence's (another process claimed it).
pub(crate) fn owned(rows_affected: u64) -> StoreResult<()> {
    match rows_affected {
        0 => Err(StoreError::TakenOver),
        _ => Ok(()),
    }
}

/// This process's lease as it knows it: the current fence and, on the
/// process's monotonic clock, until when the last renewal holds at the least.
pub(crate) struct Lease {
    held: Mutex<Held>,
    /// One renewal at a time: a delivery that finds the lease short renews it
    /// itself, and others waiting meanwhile see the result.
    renewing: tokio::sync::Mutex<()>,
    length: Duration,
}

struct Held {
    fence: Fence,
    /// The renewal was sent before the database set the expiry, so the lease
    /// holds at least until this instant.
    until: Instant,
}

/// How a renewal went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Renewal {
    /// The lease was extended under the same fence.
    Renewed,
    /// The lease had been claimed by another process: a new one was taken
    /// under a new fence, and the work of the old one is no longer this
    /// process's.
    Replaced,
}

impl Lease {
    pub(crate) fn new(length_ms: i64) -> Lease {
        let length = Duration::from_millis(length_ms.max(1) as u64);
        Lease {
            held: Mutex::new(Held {
                fence: Fence::fresh(),
                // Not held until the first take.
                until: Instant::now(),
            }),
            renewing: tokio::sync::Mutex::new(()),
            length,
        }
    }

    pub(crate) fn length(&self) -> Duration {
        self.length
    }

    /// The length as the database's SQL adds it to its clock.
    fn length_ms(&self) -> i64 {
        self.length.as_millis().min(i64::MAX as u128) as i64
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Held> {
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn fence(&self) -> Fence {
        self.lock().fence.clone()
    }

    /// The lease is renewed a third of its length before it lapses; work that
    /// acts on the world (a delivery) needs at least that much left.
    fn margin(&self) -> Duration {
        self.length / 3
    }

    /// Whether `fence` is the current one and holds for a margin yet.
    pub(crate) fn holds(&self, fence: &Fence) -> bool {
        let held = self.lock();
        held.fence == *fence && Instant::now() + self.margin() < held.until
    }

    /// Whether work stamped with `fence` can no longer count on its lease: the
    /// fence was replaced, or no renewal reached the database for a whole lease.
    pub(crate) fn lapsed(&self, fence: &Fence) -> bool {
        let held = self.lock();
        held.fence != *fence || Instant::now() >= held.until
    }

    fn extended(&self, fence: &Fence, sent: Instant) {
        let mut held = self.lock();
        if held.fence == *fence {
            held.until = held.until.max(sent + self.length);
        }
    }

    fn replaced(&self, fence: Fence, sent: Instant) {
        let mut held = self.lock();
        held.fence = fence;
        held.until = sent + self.length;
    }
}

/// This process's lease and the fences its work is stamped with (`store::ownership`).
#[derive(Clone, Copy)]
pub struct Leases<'s>(&'s Store);

impl Store {
    pub fn leases(&self) -> Leases<'_> {
        Leases(self)
    }
}

impl Leases<'_> {
    /// The fence new work is stamped with now.
    pub fn fence(self) -> Fence {
        self.0.lease.fence()
    }

    /// Whether work stamped with `fence` must check with the database before it
    /// tells anyone more (`hold`): its lease may have been claimed meanwhile.
    pub fn lapsed(self, fence: &Fence) -> bool {
        self.0.lease.lapsed(fence)
    }

    /// Waits until work stamped with `fence` may act on the world (deliver a
    /// call): `Ok` once the lease is known to hold for a while yet under that
    /// fence, renewing it if needed; `TakenOver` when the fence was replaced. A
    /// database out of reach is retried with back-off, so the wait lasts as long
    /// as this process has no lease; callers bound it by their own deadline.
    pub async fn hold(self, fence: &Fence) -> StoreResult<()> {
        let mut pause = Duration::from_millis(50);
        loop {
            if self.0.lease.holds(fence) {
                return Ok(());
            }
            if self.0.lease.fence() != *fence {
                return Err(StoreError::TakenOver);
            }
            if let Err(e) = self.renew().await {
                tracing::warn!(error = format!("{e:#}"), "the lease could not be renewed");
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(self.0.lease.margin().max(Duration::from_millis(50)));
            }
        }
    }

    /// Runs a fenced write until it lands. An outcome or an answer's end left
    /// unwritten would leave a call running and an answer streaming, its budget
    /// reserved, until this process died and another delivered the call again —
    /// maybe days later. So a write the database could not take (out of reach,
    /// busy, a pool that timed out) is tried again with back-off, from 100 ms up
    /// to 5 s, for as long as the work is this process's: once the fence is
    /// replaced, one more try decides (done, or `TakenOver`). What cannot come
    /// right by waiting (a corrupt row, a conflict, a constraint) is returned
    /// at once. Each write must be idempotent: a commit reported failed may
    /// have gone through.
    pub async fn until_written<T, F, Fut>(
        self,
        fence: &Fence,
        what: &'static str,
        mut write: F,
    ) -> StoreResult<T>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = StoreResult<T>>,
    {
        let mut pause = Duration::from_millis(100);
        loop {
            let e = match write().await {
                Err(e) if e.is_transient() => e,
                done => return done,
            };
            if self.0.lease.fence() != *fence {
                // One more try decides: a write that landed before (its commit
                // reported failed) is found done by its idempotent re-run; one
                // that did not finds the work no longer this fence's.
                return match write().await {
                    Err(e) if e.is_transient() => Err(StoreError::TakenOver),
                    done => done,
                };
            }
            tracing::warn!(
                error = format!("{e:#}"),
                what,
                retry_in_ms = pause.as_millis() as u64,
                "a write of owned work failed; trying again"
            );
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_secs(5));
        }
    }

    /// Takes a lease under the current fence (at start), timed by the
    /// database's clock.
    pub async fn take(self) -> StoreResult<()> {
        let fence = self.0.lease.fence();
        let sent = Instant::now();
        self.insert(&fence).await?;
        self.0.lease.extended(&fence, sent);
        Ok(())
    }

    async fn insert(self, fence: &Fence) -> StoreResult<()> {
        let now = self.0.now_sql();
        sqlx::query(sql(format!(
            "INSERT INTO leases (owner, started_at, expires_at) VALUES ($1, {now}, {now} + $2)"
        )))
        .bind(fence.as_str())
        .bind(self.0.lease.length_ms())
        .execute(self.0.writer())
        .await?;
        Ok(())
    }

    /// Renews the lease. If it had lapsed and another process claimed it (this
    /// one was paused for longer than a lease), a new lease is taken under a
    /// new fence: what was started under the old one is no longer this
    /// process's, and its writes are refused (`TakenOver`).
    pub async fn renew(self) -> StoreResult<Renewal> {
        let _one = self.0.lease.renewing.lock().await;
        let fence = self.0.lease.fence();
        let sent = Instant::now();
        let renewed = sqlx::query(sql(format!(
            "UPDATE leases SET expires_at = {} + $2 WHERE owner = $1",
            self.0.now_sql()
        )))
        .bind(fence.as_str())
        .bind(self.0.lease.length_ms())
        .execute(self.0.writer())
        .await?
        .rows_affected();
        if renewed == 1 {
            self.0.lease.extended(&fence, sent);
            return Ok(Renewal::Renewed);
        }
        let next = Fence::fresh();
        let sent = Instant::now();
        self.insert(&next).await?;
        self.0.lease.replaced(next, sent);
        Ok(Renewal::Replaced)
    }

    /// Gives the lease up at a clean shutdown (nothing is left running then).
    pub async fn release(self) -> StoreResult<()> {
        sqlx::query("DELETE FROM leases WHERE owner = $1")
            .bind(self.0.lease.fence().as_str())
            .execute(self.0.writer())
            .await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_not_yet_taken_holds_nothing_and_a_replaced_fence_never_holds_again() {
        let lease = Lease::new(3_000);
        let first = lease.fence();
        assert!(!lease.holds(&first), "not held before it is taken");
        lease.extended(&first, Instant::now());
        assert!(lease.holds(&first));
        lease.replaced(Fence::fresh(), Instant::now());
        assert!(!lease.holds(&first), "the old fence is gone for good");
        lease.extended(&first, Instant::now());
        assert!(!lease.holds(&first), "extending an old fence does nothing");
        assert!(lease.holds(&lease.fence()));
    }

    #[test]
    fn a_lease_stops_holding_a_margin_before_it_lapses() {
        let lease = Lease::new(3_000);
        let fence = lease.fence();
        let long_ago = Instant::now() - Duration::from_millis(2_100);
        lease.extended(&fence, long_ago);
        assert!(
            !lease.holds(&fence),
            "less than a third of the lease left is not enough to deliver"
        );
    }

    #[test]
    fn fresh_fences_sort_in_the_order_they_were_made() {
        let a = Fence::fresh();
        std::thread::sleep(Duration::from_millis(2));
        let b = Fence::fresh();
        assert!(a.as_str() < b.as_str());
    }
}
