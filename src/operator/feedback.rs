//! `GET /v1/operator/feedback/export`: visitors' ratings of answers, oldest
//! change first, as JSON lines or CSV — the audit export's companion (issue
//! 41), read a page at a time so memory does not grow with the table.

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::response::Response;
use serde::Serialize;

use super::audit::{ExportQuery, download, export_format};
use super::auth::Operator;
use super::{Params, query_site};
use crate::app::App;
use crate::audit::{Format, csv_field};
use crate::clock::rfc3339;
use crate::error::ApiError;
use crate::store::FeedbackRow;

const PAGE: i64 = 1000;

const CSV_HEADER: &str = "updated_at,created_at,site,conversation,message,rating,comment\n";

/// One exported rating; a public format, like the wire types.
#[derive(Serialize)]
struct Line<'a> {
    updated_at: String,
    created_at: String,
    site: &'a str,
    conversation: &'a str,
    message: &'a str,
    rating: &'a str,
    comment: Option<&'a str>,
}

pub async fn export(
    State(app): State<App>,
    _: Operator,
    Params(query): Params<ExportQuery>,
) -> Result<Response, ApiError> {
    let format = export_format(query.format.as_deref())?;
    let site = query.site;
    if let Some(site) = &site {
        query_site(&app, site)?;
    }
    let (content_type, name) = match format {
        Format::Jsonl => ("application/x-ndjson", "deskbell-feedback.jsonl"),
        Format::Csv => ("text/csv; charset=utf-8", "deskbell-feedback.csv"),
    };
    let start = (app, site, None::<(i64, String)>, false);
    let stream = futures_util::stream::unfold(start, move |(app, site, after, done)| async move {
        if done {
            return None;
        }
        let mut out = Vec::new();
        if after.is_none() && format == Format::Csv {
            out.extend_from_slice(CSV_HEADER.as_bytes());
        }
        let page = match app
            .store
            .feedback()
            .page(site.as_deref(), after.as_ref(), PAGE)
            .await
        {
            Ok(page) => page,
            Err(e) => {
                tracing::error!(error = format!("{e:#}"), "the feedback export failed");
                let failed = Err(std::io::Error::other("the feedback export failed"));
                return Some((failed, (app, site, after, true)));
            }
        };
        let done = (page.len() as i64) < PAGE;
        let next = page
            .last()
            .map(|r| (r.updated_at, r.message.clone()))
            .or(after);
        for row in &page {
            write(row, format, &mut out);
        }
        Some((
            Ok(Bytes::from(out)),
            (app, site, Some(next.unwrap_or_default()), done),
        ))
    });
    download(Body::from_stream(stream), content_type, name)
}

fn write(row: &FeedbackRow, format: Format, out: &mut Vec<u8>) {
    let line = Line {
        updated_at: rfc3339(row.updated_at),
        created_at: rfc3339(row.created_at),
        site: &row.site,
        conversation: &row.conversation,
        message: &row.message,
        rating: &row.rating,
        comment: row.comment.as_deref(),
    };
    match format {
        Format::Jsonl => {
            if serde_json::to_writer(&mut *out, &line).is_ok() {
                out.push(b'\n');
            }
        }
        Format::Csv => {
            let fields = [
                line.updated_at.as_str(),
                line.created_at.as_str(),
                line.site,
                line.conversation,
                line.message,
                line.rating,
                line.comment.unwrap_or_default(),
            ];
            let cells: Vec<String> = fields.iter().map(|f| csv_field(f)).collect();
            out.extend_from_slice(cells.join(",").as_bytes());
            out.push(b'\n');
        }
    }
}
