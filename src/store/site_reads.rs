//! The read every question makes before the model is asked — its site's budget
//! row and tool version (`Store::budget_and_tool_version`) — shared by the
//! questions of a site that wait for it at the same moment.
//!
//! When a hundred visitors ask at once, a hundred identical reads queue for a
//! handful of pooled connections, and the last waits for all the others: on
//! PostgreSQL that queue was most of the first token's p99. Here the reads of
//! one site run one at a time, and a question takes the result of a read that
//! *began after the question asked*, so it sees every commit that finished
//! before it asked, exactly as a read of its own would. A question waits at the
//! most for the read in flight to end and one more.
//!
//! "Began after" is decided by one sequence shared by the questions and the
//! reads, not by a clock, so two events in the same clock tick are still
//! ordered.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// What one read found, and when it began.
#[derive(Clone)]
pub(super) struct SiteRead {
    /// The sequence number taken just before the query was sent.
    began: u64,
    pub day: String,
    /// The day's budget row: spent and reserved, when it exists.
    pub budget: Option<(i64, i64)>,
    pub tool_version: i64,
}

type Slot = Arc<tokio::sync::Mutex<Option<SiteRead>>>;

#[derive(Default)]
pub(super) struct SiteReads {
    sequence: AtomicU64,
    /// One slot per site; sites come from the configuration, so this stays small.
    sites: Mutex<HashMap<String, Slot>>,
}

impl SiteReads {
    /// The latest read of `site` for `day` that began after this call, made by
    /// `read` if no such read has ended by the time the site's slot is free.
    pub(super) async fn fresh<F, Fut, E>(
        &self,
        site: &str,
        day: &str,
        read: F,
    ) -> Result<SiteRead, E>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<(Option<(i64, i64)>, i64), E>>,
    {
        let asked = self.sequence.fetch_add(1, Ordering::SeqCst);
        let slot = self.slot(site);
        // tokio's mutex is fair: questions take the slot in the order they asked.
        let mut held = slot.lock().await;
        if let Some(last) = held.as_ref().filter(|r| r.began > asked && r.day == day) {
            return Ok(last.clone());
        }
        let began = self.sequence.fetch_add(1, Ordering::SeqCst);
        let (budget, tool_version) = read().await?;
        let fresh = SiteRead {
            began,
            day: day.to_string(),
            budget,
            tool_version,
        };
        *held = Some(fresh.clone());
        Ok(fresh)
    }

    fn slot(&self, site: &str) -> Slot {
        // A poisoned map only means another thread panicked between two plain
        // map operations; the map itself is still whole.
        let mut sites = self.sites.lock().unwrap_or_else(|p| p.into_inner());
        sites.entry(site.to_string()).or_default().clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    #[tokio::test]
    async fn questions_asking_together_share_one_read_and_a_later_one_reads_again() {
        let reads = Arc::new(SiteReads::default());
        let made = Arc::new(AtomicUsize::new(0));
        let gate = Arc::new(tokio::sync::Notify::new());
        let read = |version: i64| {
            let made = made.clone();
            let gate = gate.clone();
            move || async move {
                made.fetch_add(1, Ordering::SeqCst);
                gate.notified().await;
                Ok::<_, ()>((None, version))
            }
        };
        // The first question's read is in flight; ten more ask meanwhile.
        let first = tokio::spawn({
            let (reads, read) = (reads.clone(), read(1));
            async move { reads.fresh("s", "d", read).await }
        });
        tokio::task::yield_now().await;
        let mut waiting = Vec::new();
        for _ in 0..10 {
            let (reads, read) = (reads.clone(), read(2));
            waiting.push(tokio::spawn(
                async move { reads.fresh("s", "d", read).await },
            ));
        }
        tokio::task::yield_now().await;
        gate.notify_one();
        assert_eq!(first.await.unwrap().unwrap().tool_version, 1);
        // They asked while the first read was in flight, so its result may miss a
        // commit they should see: one more read, begun after them, serves them all.
        tokio::task::yield_now().await;
        gate.notify_one();
        for w in waiting {
            assert_eq!(w.await.unwrap().unwrap().tool_version, 2);
        }
        assert_eq!(made.load(Ordering::SeqCst), 2);
        // A question asking after every read ended reads again.
        gate.notify_one();
        let later = reads.fresh("s", "d", read(3)).await.unwrap();
        assert_eq!(later.tool_version, 3);
        assert_eq!(made.load(Ordering::SeqCst), 3);
    }

    #[tokio::test]
    async fn a_read_of_another_day_or_site_is_not_taken() {
        let reads = SiteReads::default();
        let at = |version| move || async move { Ok::<_, ()>((Some((1, 2)), version)) };
        assert_eq!(reads.fresh("s", "d1", at(1)).await.unwrap().tool_version, 1);
        assert_eq!(reads.fresh("s", "d2", at(2)).await.unwrap().tool_version, 2);
        assert_eq!(reads.fresh("t", "d2", at(3)).await.unwrap().tool_version, 3);
    }

    #[tokio::test]
    async fn a_failed_read_is_not_kept() {
        let reads = SiteReads::default();
        let failed = reads
            .fresh("s", "d", || async {
                Err::<(Option<(i64, i64)>, i64), _>("down")
            })
            .await;
        assert!(failed.is_err());
        let next = reads
            .fresh("s", "d", || async { Ok::<_, &str>((None, 7)) })
            .await
            .unwrap();
        assert_eq!(next.tool_version, 7);
    }
}
