//! Knowledge for operators: each site's sources with their last ingest report
//! and what retrieval gives the model for a question. A re-ingest is
//! `ingest.rs`.

use axum::Json;
use axum::extract::{Path, State};
use serde::Deserialize;

use super::auth::Operator;
use super::{Params, known_site};
use crate::app::App;
use crate::clock::rfc3339;
use crate::config::KnowledgeSource;
use crate::error::ApiError;
use crate::knowledge::Report;
use crate::secret::loggable_url;
use crate::wire::{Items, KnowledgeView, PassageView, ReportView, SearchView, SkippedView};

pub async fn list(
    State(app): State<App>,
    _: Operator,
) -> Result<Json<Items<KnowledgeView>>, ApiError> {
    let mut items = Vec::new();
    for site in &app.config.sites {
        let report = match app.store.ingests().report(&site.id).await? {
            Some(text) => serde_json::from_str::<ReportView>(&text).ok(),
            None => None,
        };
        items.push(KnowledgeView {
            site: site.id.clone(),
            sources: site.knowledge.iter().map(source_text).collect(),
            indexed: app.knowledge.has(&site.id),
            last_report: report,
        });
    }
    Ok(Json(Items { items }))
}

fn source_text(source: &KnowledgeSource) -> String {
    match source {
        KnowledgeSource::Path(path) => loggable_url(path),
        KnowledgeSource::Folder { path, .. } => loggable_url(path),
    }
}

pub fn report_view(report: &Report, at: i64) -> ReportView {
    ReportView {
        at: rfc3339(at),
        added: report.added,
        updated: report.updated,
        unchanged: report.unchanged,
        removed: report.removed,
        chunks: report.chunks,
        skipped: report
            .skipped
            .iter()
            .map(|s| SkippedView {
                source: loggable_url(&s.path),
                reason: s.reason.clone(),
            })
            .collect(),
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SearchQuery {
    q: String,
}

pub async fn search(
    State(app): State<App>,
    _: Operator,
    Path(site): Path<String>,
    Params(query): Params<SearchQuery>,
) -> Result<Json<SearchView>, ApiError> {
    let site = known_site(&app, &site)?;
    let q = query.q.trim();
    if q.is_empty() || q.chars().count() > 4000 {
        return Err(ApiError::InvalidRequest(
            "q: must have 1 to 4000 characters".into(),
        ));
    }
    let passages = app.knowledge.search(&site.config.id, q).await?;
    Ok(Json(SearchView {
        passages: passages
            .into_iter()
            .enumerate()
            .map(|(i, p)| PassageView {
                n: i + 1,
                title: p.title,
                url: p.url,
                text: p.text,
                score: p.score,
                found_by: p.found.names(),
                bm25_rank: p.found.bm25,
                dense_rank: p.found.dense,
            })
            .collect(),
    }))
}
