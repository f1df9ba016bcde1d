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

use crate::store::error::{StoreError, StoreResult};

/// What a read found: the day's budget row (spent and reserved, when it exists)
/// and the site's tool version.
#[derive(Clone)]
pub(in crate::store) struct Found {
    pub budget: Option<(i64, i64)>,
    pub tool_version: i64,
}

impl Found {
    /// The day's tokens spent or reserved.
    pub fn used(&self) -> i64 {
        self.budget
            .map_or(0, |(spent, reserved)| spent.saturating_add(reserved))
    }
}

/// The site's last read: when it began, for which day, and what came of it.
/// A database out of reach is shared like a result, so that while it is
/// unreachable the questions queued on a site fail together after one wait
/// instead of one after another, each after its own; any other failure is not
/// kept, and the next question reads again.
struct Last {
    /// The sequence number taken just before the query was sent.
    began: u64,
    day: String,
    outcome: Result<Found, String>,
}

type Slot = Arc<tokio::sync::Mutex<Option<Last>>>;

#[derive(Default)]
pub(in crate::store) struct SiteReads {
    sequence: AtomicU64,
    /// One slot per site; sites come from the configuration, so this stays small.
    sites: Mutex<HashMap<String, Slot>>,
}

impl SiteReads {
    /// The latest read of `site` for `day` that began after this call, made by
    /// `read` if no such read has ended by the time the site's slot is free.
    pub(in crate::store) async fn shared<F, Fut>(
        &self,
        site: &str,
        day: &str,
        read: F,
    ) -> StoreResult<Found>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = StoreResult<Found>>,
    {
        let asked = self.sequence.fetch_add(1, Ordering::SeqCst);
        let slot = self.slot(site);
        // tokio's mutex is fair: questions take the slot in the order they asked.
        let mut held = slot.lock().await;
        if let Some(last) = held.as_ref().filter(|l| l.began > asked && l.day == day) {
            return last.outcome.clone().map_err(StoreError::Unavailable);
        }
        let began = self.sequence.fetch_add(1, Ordering::SeqCst);
        let outcome = read().await;
        let kept = match &outcome {
            Ok(found) => Ok(found.clone()),
            Err(StoreError::Unavailable(cause)) => Err(cause.clone()),
            Err(_) => return outcome,
        };
        *held = Some(Last {
            began,
            day: day.to_string(),
            outcome: kept,
        });
        outcome
    }

    fn slot(&self, site: &str) -> Slot {
        // A poisoned map only means another thread panicked between two plain
        // map operations; the map itself is still whole.
        let mut sites = self.sites.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(slot) = sites.get(site) {
            return slot.clone();
        }
        sites.entry(site.to_string()).or_default().clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    fn found(tool_version: i64) -> Found {
        Found {
            budget: None,
            tool_version,
        }
    }

    /// A read whose every call is counted and waits for the gate.
    fn gated(
        made: &Arc<AtomicUsize>,
        gate: &Arc<tokio::sync::Notify>,
        outcome: StoreResult<Found>,
    ) -> impl FnOnce() -> std::pin::Pin<Box<dyn Future<Output = StoreResult<Found>> + Send>> + Send + use<>
    {
        let (made, gate) = (made.clone(), gate.clone());
        move || {
            Box::pin(async move {
                made.fetch_add(1, Ordering::SeqCst);
                gate.notified().await;
                outcome
            })
        }
    }

    /// A queued question's outcome; one that went on to read on its own waits
    /// at the gate, which nobody opens again, and fails the test here.
    async fn settled(question: tokio::task::JoinHandle<StoreResult<Found>>) -> StoreResult<Found> {
        tokio::time::timeout(std::time::Duration::from_secs(5), question)
            .await
            .expect("a queued question made a read of its own")
            .unwrap()
    }

    fn unavailable() -> StoreResult<Found> {
        Err(StoreError::Unavailable("down".into()))
    }

    /// The first question's read is in flight when ten more ask; returns the
    /// first's task and theirs, each read answering `outcome` after the gate.
    #[allow(clippy::type_complexity)]
    async fn ten_ask_while_one_reads(
        reads: &Arc<SiteReads>,
        made: &Arc<AtomicUsize>,
        gate: &Arc<tokio::sync::Notify>,
        outcome: fn(i64) -> StoreResult<Found>,
    ) -> (
        tokio::task::JoinHandle<StoreResult<Found>>,
        Vec<tokio::task::JoinHandle<StoreResult<Found>>>,
    ) {
        let first = tokio::spawn({
            let (reads, read) = (reads.clone(), gated(made, gate, outcome(1)));
            async move { reads.shared("s", "d", read).await }
        });
        tokio::task::yield_now().await;
        let mut waiting = Vec::new();
        for _ in 0..10 {
            let (reads, read) = (reads.clone(), gated(made, gate, outcome(2)));
            waiting.push(tokio::spawn(
                async move { reads.shared("s", "d", read).await },
            ));
        }
        tokio::task::yield_now().await;
        (first, waiting)
    }

    /// A question asking after the two reads of a test ended makes a third.
    async fn a_later_question_reads_again(
        reads: &SiteReads,
        made: &Arc<AtomicUsize>,
        gate: &Arc<tokio::sync::Notify>,
    ) {
        gate.notify_one();
        let later = reads
            .shared("s", "d", gated(made, gate, Ok(found(3))))
            .await
            .unwrap();
        assert_eq!(later.tool_version, 3);
        assert_eq!(made.load(Ordering::SeqCst), 3);
    }

    #[tokio::test]
    async fn questions_asking_together_share_one_read_and_a_later_one_reads_again() {
        let reads = Arc::new(SiteReads::default());
        let made = Arc::new(AtomicUsize::new(0));
        let gate = Arc::new(tokio::sync::Notify::new());
        let (first, waiting) =
            ten_ask_while_one_reads(&reads, &made, &gate, |v| Ok(found(v))).await;
        gate.notify_one();
        assert_eq!(first.await.unwrap().unwrap().tool_version, 1);
        // They asked while the first read was in flight, so its result may miss a
        // commit they should see: one more read, begun after them, serves them all.
        tokio::task::yield_now().await;
        gate.notify_one();
        for w in waiting {
            assert_eq!(settled(w).await.unwrap().tool_version, 2);
        }
        assert_eq!(made.load(Ordering::SeqCst), 2);
        a_later_question_reads_again(&reads, &made, &gate).await;
    }

    /// While the database is out of reach, the questions queued on a site fail
    /// with the one read that began after them, not each after a read (and a
    /// wait for a connection) of its own.
    #[tokio::test]
    async fn a_database_out_of_reach_fails_the_queued_questions_together() {
        let reads = Arc::new(SiteReads::default());
        let made = Arc::new(AtomicUsize::new(0));
        let gate = Arc::new(tokio::sync::Notify::new());
        let (first, waiting) =
            ten_ask_while_one_reads(&reads, &made, &gate, |_| unavailable()).await;
        gate.notify_one();
        assert!(matches!(
            first.await.unwrap(),
            Err(StoreError::Unavailable(_))
        ));
        tokio::task::yield_now().await;
        gate.notify_one();
        for w in waiting {
            assert!(matches!(settled(w).await, Err(StoreError::Unavailable(_))));
        }
        assert_eq!(made.load(Ordering::SeqCst), 2);
        // Once it answers again, the next question reads and is served.
        a_later_question_reads_again(&reads, &made, &gate).await;
    }

    #[tokio::test]
    async fn a_read_of_another_day_or_site_is_not_taken() {
        let reads = SiteReads::default();
        let at = |version| move || async move { Ok(found(version)) };
        assert_eq!(
            reads.shared("s", "d1", at(1)).await.unwrap().tool_version,
            1
        );
        assert_eq!(
            reads.shared("s", "d2", at(2)).await.unwrap().tool_version,
            2
        );
        assert_eq!(
            reads.shared("t", "d2", at(3)).await.unwrap().tool_version,
            3
        );
    }

    #[tokio::test]
    async fn a_read_failing_for_another_cause_is_not_kept() {
        let reads = SiteReads::default();
        let failed = reads
            .shared("s", "d", || async {
                Err(StoreError::Corrupt("bad row".into()))
            })
            .await;
        assert!(matches!(failed, Err(StoreError::Corrupt(_))));
        let next = reads
            .shared("s", "d", || async { Ok(found(7)) })
            .await
            .unwrap();
        assert_eq!(next.tool_version, 7);
    }
}
