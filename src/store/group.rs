//! The group commit. On SQLite every commit is an fsync, and a turn's start and
//! end are what its latency is made of, so they go through one task that takes
//! every start and end waiting at that moment and commits them together (a batch
//! that fails runs again one job at a time, so a failing one fails alone), and
//! answers each caller only once the commit is on disk. On PostgreSQL it does the same (unless
//! `[server] group_commit = false`): there every start and end updates its
//! site's budget row, and separate transactions would queue on that row's lock,
//! one commit after another.

use tokio::sync::{mpsc, oneshot};

use super::error::{StoreError, StoreResult};
use super::turns::{TurnEnd, TurnStart, begin_in, end_in};
use super::{Reservation, Store};

/// Writes committed together at the most.
const BATCH: usize = 128;

enum Job {
    Start(Box<TurnStart>, oneshot::Sender<StartOutcome>),
    End(TurnEnd, oneshot::Sender<EndOutcome>),
}

impl Job {
    /// The budget row the job locks, if any (the sort is stable: jobs of one
    /// row keep their order of arrival).
    fn budget_row(&self) -> Option<(&str, &str)> {
        let share = match self {
            Job::Start(start, _) => start.budget.as_ref(),
            Job::End(end, _) => end.budget.as_ref(),
        };
        share.map(|s| (s.site.as_str(), s.day.as_str()))
    }
}

/// The sending side of the group-commit task.
#[derive(Clone)]
pub(super) struct GroupCommit(mpsc::Sender<Job>);

impl GroupCommit {
    pub(super) fn start(writer: sqlx::AnyPool) -> Self {
        let (tx, rx) = mpsc::channel(4 * BATCH);
        tokio::spawn(run(writer, rx));
        GroupCommit(tx)
    }
}

impl Store {
    /// Reserves the turn's share of the budget, creates the conversation or closes
    /// its stale and superseded cards, saves the visitor's message and opens the
    /// answer's bubble — all or nothing. Changes nothing when the budget could not
    /// be reserved after all.
    pub async fn begin_turn(&self, start: TurnStart) -> StoreResult<Reservation> {
        if let Some(group) = &self.group {
            let (reply, answer) = oneshot::channel();
            group
                .0
                .send(Job::Start(Box::new(start), reply))
                .await
                .map_err(|_| StoreError::Unavailable("the writer has stopped".into()))?;
            let answer = answer
                .await
                .map_err(|_| StoreError::Unavailable("the writer has stopped".into()))?;
            return answer.map_err(StoreError::Unavailable);
        }
        let mut tx = self.writer().begin().await?;
        let started = begin_in(&mut tx, &start).await?;
        if started == Reservation::Reserved {
            tx.commit().await?;
        }
        Ok(started)
    }

    /// Saves an answer's final text, status, citations and usage, and settles the
    /// turn's budget reservation to what it spent.
    pub async fn finish_turn(&self, end: TurnEnd) -> StoreResult<()> {
        if let Some(group) = &self.group {
            let (reply, answer) = oneshot::channel();
            group
                .0
                .send(Job::End(end, reply))
                .await
                .map_err(|_| StoreError::Unavailable("the writer has stopped".into()))?;
            let answer = answer
                .await
                .map_err(|_| StoreError::Unavailable("the writer has stopped".into()))?;
            return answer.map_err(StoreError::Unavailable);
        }
        let mut tx = self.writer().begin().await?;
        end_in(&mut tx, &end).await?;
        tx.commit().await?;
        Ok(())
    }
}

/// Collects the waiting writes and commits them together, forever.
async fn run(writer: sqlx::AnyPool, mut jobs: mpsc::Receiver<Job>) {
    while let Some(first) = jobs.recv().await {
        let mut batch = vec![first];
        while batch.len() < BATCH {
            match jobs.try_recv() {
                Ok(job) => batch.push(job),
                Err(_) => break,
            }
        }
        // Every batch takes its budget rows in one order (site, then day), so
        // two replicas' batches cannot each hold a row the other waits for.
        batch.sort_by(|a, b| a.budget_row().cmp(&b.budget_row()));
        commit(&writer, batch).await;
    }
}

/// What a job's caller is told, only after the commit.
type StartOutcome = Result<Reservation, String>;
type EndOutcome = Result<(), String>;

/// Commits a batch: first all of it in one transaction, with no savepoints (each
/// one is two more round trips per job on PostgreSQL). A start refused for its
/// budget writes nothing before the refusal, so it needs no undoing. If any
/// statement fails, the batch is rolled back and each job runs again in its own
/// transaction, so one bad job fails alone.
async fn commit(writer: &sqlx::AnyPool, batch: Vec<Job>) {
    match together(writer, &batch).await {
        Ok(outcomes) => {
            for (job, outcome) in batch.into_iter().zip(outcomes) {
                match (job, outcome) {
                    (Job::Start(_, reply), Outcome::Start(o)) => drop(reply.send(o)),
                    (Job::End(_, reply), Outcome::End(o)) => drop(reply.send(o)),
                    // `together` answers each job in its own kind.
                    (Job::Start(_, reply), Outcome::End(_)) => {
                        drop(reply.send(Err("the group commit mixed up its jobs".into())))
                    }
                    (Job::End(_, reply), Outcome::Start(_)) => {
                        drop(reply.send(Err("the group commit mixed up its jobs".into())))
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

enum Outcome {
    Start(StartOutcome),
    End(EndOutcome),
}

async fn together(writer: &sqlx::AnyPool, batch: &[Job]) -> Result<Vec<Outcome>, sqlx::Error> {
    let mut tx = writer.begin().await?;
    let mut outcomes = Vec::with_capacity(batch.len());
    for job in batch {
        outcomes.push(match job {
            Job::Start(start, _) => Outcome::Start(Ok(begin_in(&mut tx, start).await?)),
            Job::End(end, _) => {
                end_in(&mut tx, end).await?;
                Outcome::End(Ok(()))
            }
        });
    }
    tx.commit().await?;
    Ok(outcomes)
}

/// One job in a transaction of its own, after its batch failed.
async fn alone(writer: &sqlx::AnyPool, job: Job) {
    match job {
        Job::Start(start, reply) => {
            let outcome = async {
                let mut tx = writer.begin().await?;
                let started = begin_in(&mut tx, &start).await?;
                if started == Reservation::Reserved {
                    tx.commit().await?;
                }
                Ok::<_, sqlx::Error>(started)
            }
            .await;
            drop(reply.send(outcome.map_err(|e| e.to_string())));
        }
        Job::End(end, reply) => {
            let outcome = async {
                let mut tx = writer.begin().await?;
                end_in(&mut tx, &end).await?;
                tx.commit().await
            }
            .await;
            drop(reply.send(outcome.map_err(|e| e.to_string())));
        }
    }
}
