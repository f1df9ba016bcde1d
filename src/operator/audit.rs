//! The audit table for operators: a filtered, newest-first page, and the whole
//! table as a streamed download (oldest first, as `deskbell audit export`).

use axum::Json;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

use super::auth::Operator;
use super::{Params, cursor, page, page_limit, parse_cursor, parse_time, query_site};
use crate::app::App;
use crate::audit::{CSV_HEADER, EXPORT_PAGE, ExportRow, Format, write_row};
use crate::error::ApiError;
use crate::states::AuditEvent;
use crate::store::AuditFilter;
use crate::wire::Page;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    site: Option<String>,
    event: Option<AuditEvent>,
    tool: Option<String>,
    call: Option<String>,
    after: Option<String>,
    before: Option<String>,
    cursor: Option<String>,
    limit: Option<i64>,
}

pub async fn list(
    State(app): State<App>,
    _: Operator,
    Params(query): Params<ListQuery>,
) -> Result<Json<Page<serde_json::Value>>, ApiError> {
    if let Some(site) = &query.site {
        query_site(&app, site)?;
    }
    let limit = page_limit(query.limit, 50)?;
    let filter = AuditFilter {
        site: query.site,
        event: query.event.map(|e| e.as_str().to_string()),
        tool: query.tool.filter(|t| !t.is_empty()),
        call: query.call.filter(|c| !c.is_empty()),
        after: query
            .after
            .as_deref()
            .map(|t| parse_time("after", t))
            .transpose()?,
        before: query
            .before
            .as_deref()
            .map(|t| parse_time("before", t))
            .transpose()?,
        cursor: query.cursor.as_deref().map(parse_cursor).transpose()?,
        limit: limit + 1,
    };
    let rows = app.store.audit().filtered(&filter).await?;
    let (rows, next_cursor) = page(rows, limit, |(id, r)| cursor(r.at, id));
    let items = rows
        .iter()
        .map(|(_, row)| serde_json::to_value(ExportRow::from(row)))
        .collect::<Result<_, _>>()
        .map_err(|e| ApiError::Internal(e.into()))?;
    Ok(Json(Page { items, next_cursor }))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExportQuery {
    pub(super) format: Option<String>,
    pub(super) site: Option<String>,
}

/// The whole table (of one site, optionally), read and sent a page at a time:
/// the server's memory does not grow with the table.
pub async fn export(
    State(app): State<App>,
    _: Operator,
    Params(query): Params<ExportQuery>,
) -> Result<Response, ApiError> {
    let format = export_format(query.format.as_deref())?;
    if let Some(site) = &query.site {
        query_site(&app, site)?;
    }
    let (content_type, name) = match format {
        Format::Jsonl => ("application/x-ndjson", "deskbell-audit.jsonl"),
        Format::Csv => ("text/csv; charset=utf-8", "deskbell-audit.csv"),
    };
    let state = Export {
        app,
        site: query.site,
        format,
        after: None,
        header: format == Format::Csv,
        done: false,
    };
    let stream = futures_util::stream::unfold(state, |mut state| async move {
        let chunk = state.next().await?;
        Some((chunk, state))
    });
    download(Body::from_stream(stream), content_type, name)
}

/// A response that browsers save as the file `name` and nothing keeps.
pub(super) fn download(
    body: Body,
    content_type: &'static str,
    name: &str,
) -> Result<Response, ApiError> {
    let mut response = body.into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(
        header::CONTENT_DISPOSITION,
        HeaderValue::from_str(&format!("attachment; filename=\"{name}\""))
            .map_err(|e| ApiError::Internal(e.into()))?,
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    Ok(response)
}

/// The `format` of an export: JSON lines unless `csv` is asked for.
pub(super) fn export_format(format: Option<&str>) -> Result<Format, ApiError> {
    match format.unwrap_or("jsonl") {
        "jsonl" => Ok(Format::Jsonl),
        "csv" => Ok(Format::Csv),
        _ => Err(ApiError::InvalidRequest(
            "format: must be jsonl or csv".into(),
        )),
    }
}

struct Export {
    app: App,
    site: Option<String>,
    format: Format,
    after: Option<(i64, String)>,
    header: bool,
    done: bool,
}

impl Export {
    /// The next chunk of the download; `None` at the end. A failure mid-way ends
    /// the body early (the client sees a cut download), and is logged.
    async fn next(&mut self) -> Option<Result<Bytes, std::io::Error>> {
        if self.done {
            return None;
        }
        let mut out = Vec::new();
        if std::mem::take(&mut self.header) {
            out.extend_from_slice(CSV_HEADER.as_bytes());
            out.push(b'\n');
        }
        let page = match self
            .app
            .store
            .audit()
            .page(self.site.as_deref(), self.after.take(), EXPORT_PAGE)
            .await
        {
            Ok(page) => page,
            Err(e) => {
                tracing::error!(error = format!("{e:#}"), "the audit export failed");
                self.done = true;
                return Some(Err(std::io::Error::other("the audit export failed")));
            }
        };
        if (page.len() as i64) < EXPORT_PAGE {
            self.done = true;
        }
        if let Some((id, row)) = page.last() {
            self.after = Some((row.at, id.clone()));
        }
        for (_, row) in &page {
            if let Err(e) = write_row(row, self.format, &mut out) {
                tracing::error!(
                    error = format!("{e:#}"),
                    "an audit row could not be written"
                );
            }
        }
        Some(Ok(Bytes::from(out)))
    }
}
