//! A re-ingest from the console (admin) is a job, not a request: crawling a
//! site can take minutes, longer than any connection should wait, and a closed
//! tab or a cut connection must not cancel it. `POST …/ingest` starts the job
//! in a task of its own; with `Prefer: respond-async` it answers `202` at once
//! with the job and its `Location`, else it waits for the report and returns
//! it as SPEC §15 says. `GET …/ingest/{job}` tells the job's progress from the
//! database, so any replica can answer for it.

use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::auth::Operator;
use super::knowledge::report_view;
use super::known_site;
use crate::app::{App, Site};
use crate::clock::{Millis, rfc3339};
use crate::error::ApiError;
use crate::knowledge::Progress;
use crate::store::IngestJobRow;
use crate::store::ingests::{FAILED, FINISHED, RUNNING};
use crate::wire::{IngestJobView, ReportView};

/// How often a running job writes its progress.
const PROGRESS_EVERY: Duration = Duration::from_millis(500);

/// A job still `running` that has not written for this long lost its process.
/// Generous: on SQLite a progress write waits behind the ingest's own publish,
/// which for a large site takes a while.
const LOST_AFTER_MS: Millis = 300_000;

pub async fn start(
    State(app): State<App>,
    operator: Operator,
    Path(site): Path<String>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    operator.require_admin()?;
    let site = Arc::clone(known_site(&app, &site)?);
    let site_id = site.config.id.clone();
    let job = crate::ids::new_id("ingest");
    let now = app.clock.now_ms();
    app.store
        .ingests()
        .start(&job, &site_id, &operator.email, now)
        .await?;
    tracing::info!(operator = %operator.email, site = %site_id, job, "knowledge re-ingest started from the console");
    let (done, ended) = tokio::sync::oneshot::channel();
    let task = {
        let (app, job) = (app.clone(), job.clone());
        async move {
            let _ = done.send(run(&app, &site, &job).await);
        }
    };
    app.turns.spawn(task);
    if respond_async(&headers) {
        let view = started(&job, &site_id, now);
        let location = format!("/v1/operator/knowledge/{site_id}/ingest/{job}");
        return Ok((
            StatusCode::ACCEPTED,
            [(header::LOCATION, location)],
            Json(view),
        )
            .into_response());
    }
    match ended.await {
        Ok(Some(report)) => Ok(Json(report).into_response()),
        _ => Err(ApiError::Internal(anyhow::anyhow!(
            "the knowledge ingest failed"
        ))),
    }
}

/// `Prefer: respond-async` (RFC 7240), among other preferences.
fn respond_async(headers: &HeaderMap) -> bool {
    headers
        .get_all("prefer")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|p| p.trim().eq_ignore_ascii_case("respond-async"))
}

/// A job that is just starting.
fn started(job: &str, site: &str, now: Millis) -> IngestJobView {
    IngestJobView {
        job: job.to_string(),
        site: site.to_string(),
        state: RUNNING.into(),
        read: 0,
        found: 0,
        report: None,
        error: None,
        started_at: rfc3339(now),
        updated_at: rfc3339(now),
    }
}

/// Runs the ingest, writing its progress as it goes, then its end; the report
/// when it finished. Failures are logged; the job says only that it failed.
async fn run(app: &App, site: &Site, job: &str) -> Option<ReportView> {
    let progress = Progress::default();
    let config = &site.config;
    let ingest =
        app.knowledge
            .ingest_with(&app.store, &app.config.server.data_dir, config, &progress);
    // The progress is written beside the ingest, never instead of it: both
    // are polled together, so a progress write waiting for the writer that
    // the ingest's transaction holds cannot stall that transaction.
    let written = async {
        let mut tick = tokio::time::interval(PROGRESS_EVERY);
        loop {
            tick.tick().await;
            let (read, found) = progress.counts();
            let now = app.clock.now_ms();
            if let Err(e) = app.store.ingests().progress(job, read, found, now).await {
                tracing::warn!(
                    error = format!("{e:#}"),
                    job,
                    "an ingest's progress could not be saved"
                );
            }
        }
    };
    let result = tokio::select! {
        result = ingest => result,
        never = written => never,
    };
    let now = app.clock.now_ms();
    let counts = progress.counts();
    let (state, report, error) = match result {
        Ok(report) => {
            crate::knowledge::log_report(&config.id, &report);
            let view = report_view(&report, now);
            match save_report(app, &config.id, &view, now).await {
                Ok(text) => (FINISHED, Some((view, text)), None),
                Err(e) => {
                    tracing::error!(
                        error = format!("{e:#}"),
                        job,
                        "an ingest's report could not be saved"
                    );
                    (FAILED, None, Some("the report could not be saved"))
                }
            }
        }
        Err(e) => {
            tracing::error!(error = format!("{e:#}"), job, site = %config.id, "a knowledge ingest failed");
            (
                FAILED,
                None,
                Some("the ingest failed; the server's log says why"),
            )
        }
    };
    let text = report.as_ref().map(|(_, text)| text.as_str());
    // Tried a few times: a job left `running` would read as lost later.
    let mut pause = Duration::from_millis(200);
    for attempt in 1..=5 {
        let ended = app
            .store
            .ingests()
            .end(job, state, counts, text, error, now)
            .await;
        match ended {
            Ok(()) => break,
            Err(e) if attempt == 5 => {
                tracing::error!(
                    error = format!("{e:#}"),
                    job,
                    "an ingest's end could not be saved"
                )
            }
            Err(_) => {
                tokio::time::sleep(pause).await;
                pause *= 2;
            }
        }
    }
    report.map(|(view, _)| view)
}

async fn save_report(
    app: &App,
    site: &str,
    view: &ReportView,
    now: Millis,
) -> anyhow::Result<String> {
    let text = serde_json::to_string(view)?;
    app.store.ingests().save_report(site, now, &text).await?;
    Ok(text)
}

pub async fn show(
    State(app): State<App>,
    _: Operator,
    Path((site, job)): Path<(String, String)>,
) -> Result<Json<IngestJobView>, ApiError> {
    let site = known_site(&app, &site)?;
    let row = app
        .store
        .ingests()
        .job(&site.config.id, &job)
        .await?
        .ok_or(ApiError::Missing("ingest job"))?;
    Ok(Json(view(row, app.clock.now_ms())))
}

fn view(row: IngestJobRow, now: Millis) -> IngestJobView {
    let lost = row.state == RUNNING && now - row.updated_at > LOST_AFTER_MS;
    let (state, error) = match lost {
        true => (
            FAILED.to_string(),
            Some("the server running it stopped before it finished".to_string()),
        ),
        false => (row.state, row.error),
    };
    IngestJobView {
        job: row.id,
        site: row.site,
        state,
        read: row.read,
        found: row.found,
        report: row
            .report
            .as_deref()
            .and_then(|text| serde_json::from_str(text).ok()),
        error,
        started_at: rfc3339(row.started_at),
        updated_at: rfc3339(row.updated_at),
    }
}
