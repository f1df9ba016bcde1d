//! Ingests from the console: each site's last report, and ingest jobs with
//! their progress, kept in the database so that any replica can answer for a
//! job another one runs (`operator::ingest`).

use sqlx::Row;

use super::Store;
use super::error::StoreResult;
use crate::clock::Millis;

/// A job's state as stored.
pub const RUNNING: &str = "running";
pub const FINISHED: &str = "finished";
pub const FAILED: &str = "failed";

/// An ingest job as stored.
#[derive(Debug, Clone)]
pub struct IngestJobRow {
    pub id: String,
    pub site: String,
    pub state: String,
    pub read: i64,
    pub found: i64,
    /// The report as JSON (`wire::ReportView`), once finished.
    pub report: Option<String>,
    pub error: Option<String>,
    pub started_at: Millis,
    pub updated_at: Millis,
}

/// Ingest jobs and the knowledge reports they leave (SPEC §15).
#[derive(Clone, Copy)]
pub struct Ingests<'s>(&'s Store);

impl Store {
    pub fn ingests(&self) -> Ingests<'_> {
        Ingests(self)
    }
}

impl Ingests<'_> {
    pub async fn save_report(self, site: &str, at: Millis, report: &str) -> StoreResult<()> {
        sqlx::query(
            "INSERT INTO knowledge_reports (site, at, report) VALUES ($1, $2, $3) \
             ON CONFLICT (site) DO UPDATE SET at = $2, report = $3",
        )
        .bind(site)
        .bind(at)
        .bind(report)
        .execute(self.0.writer())
        .await?;
        Ok(())
    }

    pub async fn report(self, site: &str) -> StoreResult<Option<String>> {
        Ok(
            sqlx::query_scalar("SELECT report FROM knowledge_reports WHERE site = $1")
                .bind(site)
                .fetch_optional(self.0.pool())
                .await?,
        )
    }

    pub async fn start(self, id: &str, site: &str, operator: &str, now: Millis) -> StoreResult<()> {
        sqlx::query(
            "INSERT INTO ingest_jobs (id, site, operator, state, read_count, found_count, started_at, updated_at) \
             VALUES ($1, $2, $3, $4, 0, 0, $5, $5)",
        )
        .bind(id)
        .bind(site)
        .bind(operator)
        .bind(RUNNING)
        .bind(now)
        .execute(self.0.writer())
        .await?;
        Ok(())
    }

    /// A running job's counts so far.
    pub async fn progress(
        self,
        id: &str,
        read: usize,
        found: usize,
        now: Millis,
    ) -> StoreResult<()> {
        sqlx::query(
            "UPDATE ingest_jobs SET read_count = $2, found_count = $3, updated_at = $4 WHERE id = $1 AND state = $5",
        )
        .bind(id)
        .bind(read as i64)
        .bind(found as i64)
        .bind(now)
        .bind(RUNNING)
        .execute(self.0.writer())
        .await?;
        Ok(())
    }

    /// A job's end: `FINISHED` with its report, or `FAILED` with a reason
    /// fit to show.
    pub async fn end(
        self,
        id: &str,
        state: &str,
        counts: (usize, usize),
        report: Option<&str>,
        error: Option<&str>,
        now: Millis,
    ) -> StoreResult<()> {
        sqlx::query(
            "UPDATE ingest_jobs SET state = $2, read_count = $3, found_count = $4, report = $5, error = $6, updated_at = $7 \
             WHERE id = $1",
        )
        .bind(id)
        .bind(state)
        .bind(counts.0 as i64)
        .bind(counts.1 as i64)
        .bind(report)
        .bind(error)
        .bind(now)
        .execute(self.0.writer())
        .await?;
        Ok(())
    }

    pub async fn job(self, site: &str, id: &str) -> StoreResult<Option<IngestJobRow>> {
        let row = sqlx::query(
            "SELECT id, site, state, read_count, found_count, report, error, started_at, updated_at \
             FROM ingest_jobs WHERE id = $1 AND site = $2",
        )
        .bind(id)
        .bind(site)
        .fetch_optional(self.0.pool())
        .await?;
        let Some(row) = row else {
            return Ok(None);
        };
        Ok(Some(IngestJobRow {
            id: row.try_get("id")?,
            site: row.try_get("site")?,
            state: row.try_get("state")?,
            read: row.try_get("read_count")?,
            found: row.try_get("found_count")?,
            report: row.try_get("report")?,
            error: row.try_get("error")?,
            started_at: row.try_get("started_at")?,
            updated_at: row.try_get("updated_at")?,
        }))
    }
}
