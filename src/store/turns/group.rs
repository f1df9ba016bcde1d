//! The group commit. On SQLite every commit is an fsync, and a turn's start and
//! end are what its latency is made of, so they go through one task that takes
//! every start and end waiting at that moment and commits them together (a batch
//! that fails runs again one job at a time, so a failing one fails alone), and
//! answers each caller only once the commit is on disk. On PostgreSQL it does the same (unless
//! `[server] group_commit = false`): there every start and end updates its
//! site's budget row, and separate transactions would queue on that row's lock,
//! one commit after another.

use tokio::sync::{mpsc, oneshot};

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::store::error::{StoreError, StoreResult};
use crate::store::turns::{TurnEnd, TurnStart, begin_in, begun, end_in};
use crate::store::{Reservation, Store};

/// Writes committed together at the most.
const BATCH: usize = 128;

enum Job {
    Start(Box<TurnStart>, oneshot::Sender<StartOutcome>),
    End(TurnEnd, oneshot::Sender<EndOutcome>),
}

/// The sending side of the group-commit task.
#[derive(Clone)]
pub(in crate::store) struct GroupCommit {
    jobs: mpsc::Sender<Job>,
    /// Commits still to be reported as failed although they went through: the
    /// ambiguous commit a lost connection makes, for the tests (`Store::
    /// report_commits_failed`). Zero outside them.
    #[cfg_attr(not(feature = "testkit"), allow(dead_code))]
    ambiguous: Arc<AtomicUsize>,
}

impl GroupCommit {
    pub(in crate::store) fn start(writer: sqlx::AnyPool) -> Self {
        let (tx, rx) = mpsc::channel(4 * BATCH);
        let ambiguous = Arc::new(AtomicUsize::new(0));
        tokio::spawn(run(writer, rx, Arc::clone(&ambiguous)));
        GroupCommit {
            jobs: tx,
            ambiguous,
        }
    }
}

/// What a job's caller is told when the end it asked for was not saved.
fn end_outcome(saved: bool) -> EndOutcome {
    match saved {
        true => Ok(()),
        false => Err(StoreError::TakenOver),
    }
}

/// A turn's start and end writes, grouped into shared commits (`group.rs`).
#[derive(Clone, Copy)]
pub struct Turns<'s>(&'s Store);

impl Store {
    pub fn turns(&self) -> Turns<'_> {
        Turns(self)
    }
}

impl Turns<'_> {
    /// Reserves the turn's share of the budget, creates the conversation or closes
    /// its stale and superseded cards, saves the visitor's message and opens the
    /// answer's bubble — all or nothing. Changes nothing when the budget could not
    /// be reserved after all.
    pub async fn begin(self, start: TurnStart) -> StoreResult<Reservation> {
        if let Some(group) = &self.0.group {
            let (reply, answer) = oneshot::channel();
            group
                .jobs
                .send(Job::Start(Box::new(start), reply))
                .await
                .map_err(|_| StoreError::Unavailable("the writer has stopped".into()))?;
            let answer = answer
                .await
                .map_err(|_| StoreError::Unavailable("the writer has stopped".into()))?;
            return answer;
        }
        let mut tx = self.0.writer().begin().await?;
        let started = begin_in(&mut tx, &start).await?;
        if started == Reservation::Reserved {
            tx.commit().await?;
        }
        Ok(started)
    }

    /// Reports the next `n` group commits as failed after they went through, as
    /// a connection lost during the commit's acknowledgement would.
    #[cfg(feature = "testkit")]
    pub fn report_commits_failed(self, n: usize) {
        if let Some(group) = &self.0.group {
            group.ambiguous.store(n, Ordering::Release);
        }
    }

    /// Saves an answer's final text, status, citations and usage, and settles the
    /// turn's budget reservation to what it spent — only while the answer
    /// streams under the end's fence; `TakenOver` when it no longer does.
    pub async fn finish(self, end: TurnEnd) -> StoreResult<()> {
        if let Some(group) = &self.0.group {
            let (reply, answer) = oneshot::channel();
            group
                .jobs
                .send(Job::End(end, reply))
                .await
                .map_err(|_| StoreError::Unavailable("the writer has stopped".into()))?;
            let answer = answer
                .await
                .map_err(|_| StoreError::Unavailable("the writer has stopped".into()))?;
            return answer;
        }
        let mut tx = self.0.writer().begin().await?;
        let saved = end_in(&mut tx, &end).await?;
        tx.commit().await?;
        end_outcome(saved)
    }
}

/// Collects the waiting writes and commits them together, forever.
async fn run(writer: sqlx::AnyPool, mut jobs: mpsc::Receiver<Job>, ambiguous: Arc<AtomicUsize>) {
    while let Some(first) = jobs.recv().await {
        let mut batch = vec![first];
        while batch.len() < BATCH {
            match jobs.try_recv() {
                Ok(job) => batch.push(job),
                Err(_) => break,
            }
        }
        commit(&writer, batch, &ambiguous).await;
    }
}

/// What a job's caller is told, only after the commit.
type StartOutcome = Result<Reservation, StoreError>;
type EndOutcome = Result<(), StoreError>;

/// Commits a batch: first all of it in one transaction, written a kind at a time
/// (`bulk.rs`), with no savepoints. A start refused for its budget writes
/// nothing, so it needs no undoing. If any statement fails, the batch is rolled
/// back and each job runs again in its own transaction, so one bad job fails
/// alone. Running a job again is idempotent: a start already written (the
/// batch committed although the commit was reported failed) is not written
/// twice, and an end already saved under its fence counts as saved.
async fn commit(writer: &sqlx::AnyPool, batch: Vec<Job>, ambiguous: &AtomicUsize) {
    let began = std::time::Instant::now();
    let written = together(writer, &batch).await;
    // How large the batches are and how long each took: what an operator needs
    // to tell a slow disk from a busy writer when turns start late.
    tracing::debug!(
        jobs = batch.len(),
        us = began.elapsed().as_micros() as u64,
        ok = written.is_ok(),
        "group commit"
    );
    let written = written.and_then(|written| {
        let reported_failed = ambiguous
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1))
            .is_ok();
        match reported_failed {
            true => Err(sqlx::Error::Io(std::io::Error::other(
                "the commit's acknowledgement was lost",
            ))),
            false => Ok(written),
        }
    });
    match written {
        Ok(written) => {
            // Committed, and nobody told yet (the crash tests stop here).
            crate::crashpoint::reached("group_committed");
            let mut reservations = written.reservations.into_iter();
            for job in batch {
                match job {
                    Job::Start(_, reply) => {
                        drop(reply.send(reservations.next().ok_or_else(|| {
                            StoreError::Unavailable(
                                "the group commit lost a start's outcome".into(),
                            )
                        })))
                    }
                    Job::End(end, reply) => {
                        drop(reply.send(end_outcome(written.ended.contains(&end.message))))
                    }
                }
            }
        }
        Err(e) => {
            tracing::debug!(error = %e, "a group commit failed; its writes run one by one");
            for job in batch {
                alone(writer, job).await;
            }
        }
    }
}

/// The batch in one transaction.
async fn together(
    writer: &sqlx::AnyPool,
    batch: &[Job],
) -> Result<crate::store::turns::bulk::Written, sqlx::Error> {
    let ends: Vec<&TurnEnd> = batch
        .iter()
        .filter_map(|job| match job {
            Job::End(end, _) => Some(end),
            Job::Start(..) => None,
        })
        .collect();
    let starts: Vec<&TurnStart> = batch
        .iter()
        .filter_map(|job| match job {
            Job::Start(start, _) => Some(&**start),
            Job::End(..) => None,
        })
        .collect();
    write_together(writer, &ends, &starts).await
}

async fn write_together(
    writer: &sqlx::AnyPool,
    ends: &[&TurnEnd],
    starts: &[&TurnStart],
) -> Result<crate::store::turns::bulk::Written, sqlx::Error> {
    let began = std::time::Instant::now();
    let mut tx = writer.begin().await?;
    let written = crate::store::turns::bulk::write(&mut tx, ends, starts).await?;
    // Written and not committed (the crash tests stop here).
    crate::crashpoint::reached("group_written");
    let write_time = began.elapsed();
    tx.commit().await?;
    // Where a batch's time goes, for whoever asks why starts wait (one line a
    // batch, at debug level: `DESKBELL_LOG=info,deskbell::group_commit=debug`).
    tracing::debug!(
        target: "deskbell::group_commit",
        starts = starts.len(),
        ends = ends.len(),
        written_us = write_time.as_micros() as u64,
        committed_us = began.elapsed().as_micros() as u64,
        "batch committed"
    );
    Ok(written)
}

#[cfg(feature = "testkit")]
impl Turns<'_> {
    /// Writes `ends` and `starts` as one batch, with no falling back to job by job
    /// when a statement fails: the tests see the batch's own statements at work.
    pub async fn write_batch(
        self,
        ends: &[TurnEnd],
        starts: &[TurnStart],
    ) -> Result<Vec<Reservation>, sqlx::Error> {
        let ends: Vec<&TurnEnd> = ends.iter().collect();
        let starts: Vec<&TurnStart> = starts.iter().collect();
        Ok(write_together(self.0.writer(), &ends, &starts)
            .await?
            .reservations)
    }
}

/// One job in a transaction of its own, after its batch failed.
async fn alone(writer: &sqlx::AnyPool, job: Job) {
    match job {
        Job::Start(start, reply) => {
            let outcome = async {
                let mut tx = writer.begin().await?;
                if begun(&mut tx, &start).await? {
                    return Ok(Reservation::Reserved);
                }
                let started = begin_in(&mut tx, &start).await?;
                if started == Reservation::Reserved {
                    tx.commit().await?;
                }
                Ok::<_, sqlx::Error>(started)
            }
            .await;
            drop(reply.send(outcome.map_err(StoreError::from)));
        }
        Job::End(end, reply) => {
            let outcome = async {
                let mut tx = writer.begin().await?;
                let saved = end_in(&mut tx, &end).await?;
                tx.commit().await?;
                Ok::<_, sqlx::Error>(saved)
            }
            .await;
            drop(reply.send(outcome.map_err(StoreError::from).and_then(end_outcome)));
        }
    }
}
