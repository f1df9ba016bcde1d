//! The group commit. On SQLite every commit is an fsync, and a turn's start and
//! end are what its latency is made of, so they go through one task that takes
//! every start and end waiting at that moment and commits them together, each in
//! its own savepoint (a failing one rolls back alone), and answers each caller
//! only once the commit is on disk. On PostgreSQL it does the same (unless
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
    Start(Box<TurnStart>, oneshot::Sender<Result<Reservation, String>>),
    End(TurnEnd, oneshot::Sender<Result<(), String>>),
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
        commit(&writer, batch).await;
    }
}

/// A job's outcome, told to its caller only after the commit.
enum Done {
    Start(
        oneshot::Sender<Result<Reservation, String>>,
        Result<Reservation, String>,
    ),
    End(oneshot::Sender<Result<(), String>>, Result<(), String>),
}

async fn commit(writer: &sqlx::AnyPool, batch: Vec<Job>) {
    let mut done = Vec::with_capacity(batch.len());
    let result = async {
        let mut tx = writer.begin().await?;
        for job in batch {
            // Each write in its own savepoint: dropping it uncommitted rolls back
            // that write alone.
            let mut savepoint = sqlx::Acquire::begin(&mut tx).await?;
            match job {
                Job::Start(start, reply) => match begin_in(&mut savepoint, &start).await {
                    Ok(Reservation::Reserved) => {
                        savepoint.commit().await?;
                        done.push(Done::Start(reply, Ok(Reservation::Reserved)));
                    }
                    Ok(other) => done.push(Done::Start(reply, Ok(other))),
                    Err(e) => done.push(Done::Start(reply, Err(e.to_string()))),
                },
                Job::End(end, reply) => match end_in(&mut savepoint, &end).await {
                    Ok(()) => {
                        savepoint.commit().await?;
                        done.push(Done::End(reply, Ok(())));
                    }
                    Err(e) => done.push(Done::End(reply, Err(e.to_string()))),
                },
            }
        }
        tx.commit().await?;
        Ok::<(), sqlx::Error>(())
    }
    .await;
    for d in done {
        match (d, &result) {
            (Done::Start(reply, outcome), Ok(())) => drop(reply.send(outcome)),
            (Done::End(reply, outcome), Ok(())) => drop(reply.send(outcome)),
            (Done::Start(reply, _), Err(e)) => {
                drop(reply.send(Err(format!("the commit failed: {e}"))))
            }
            (Done::End(reply, _), Err(e)) => {
                drop(reply.send(Err(format!("the commit failed: {e}"))))
            }
        }
    }
    if let Err(e) = result {
        tracing::error!(error = %e, "a group commit failed");
    }
}
