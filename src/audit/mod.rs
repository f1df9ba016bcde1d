//! `deskbell audit export` (SPEC §10): the audit table, oldest first, as JSON lines
//! or CSV.

use std::io::Write;

use serde::Serialize;

use crate::clock::rfc3339;
use crate::store::{AuditRow, Store};

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Jsonl,
    Csv,
}

/// One exported row; a public format, like the wire types.
#[derive(Debug, Serialize)]
pub struct ExportRow<'a> {
    pub at: String,
    pub event: &'a str,
    pub reason: Option<&'a str>,
    pub call: &'a str,
    pub site: &'a str,
    pub conversation: &'a str,
    pub visitor: &'a str,
    pub tool: &'a str,
    pub policy: &'a str,
    pub arguments: serde_json::Value,
    pub http_status: Option<i64>,
    pub duration_ms: Option<i64>,
}

impl<'a> From<&'a AuditRow> for ExportRow<'a> {
    fn from(r: &'a AuditRow) -> Self {
        ExportRow {
            at: rfc3339(r.at),
            event: r.event.as_str(),
            reason: r.reason.map(|r| r.as_str()),
            call: &r.call,
            site: &r.site,
            conversation: &r.conversation,
            visitor: &r.visitor,
            tool: &r.tool,
            policy: r.policy.as_str(),
            arguments: serde_json::from_str(&r.arguments).unwrap_or(serde_json::Value::Null),
            http_status: r.http_status,
            duration_ms: r.duration_ms,
        }
    }
}

const CSV_HEADER: &str =
    "at,event,reason,call,site,conversation,visitor,tool,policy,arguments,http_status,duration_ms";

pub async fn export(
    store: &Store,
    site: Option<&str>,
    format: Format,
    out: &mut impl Write,
) -> anyhow::Result<usize> {
    let rows = store.audit_rows(site).await?;
    if format == Format::Csv {
        writeln!(out, "{CSV_HEADER}")?;
    }
    for row in &rows {
        let r = ExportRow::from(row);
        match format {
            Format::Jsonl => writeln!(out, "{}", serde_json::to_string(&r)?)?,
            Format::Csv => {
                let fields = [
                    r.at.clone(),
                    r.event.to_string(),
                    r.reason.unwrap_or_default().to_string(),
                    r.call.to_string(),
                    r.site.to_string(),
                    r.conversation.to_string(),
                    r.visitor.to_string(),
                    r.tool.to_string(),
                    r.policy.to_string(),
                    row.arguments.clone(),
                    r.http_status.map(|s| s.to_string()).unwrap_or_default(),
                    r.duration_ms.map(|s| s.to_string()).unwrap_or_default(),
                ];
                let line: Vec<String> = fields.iter().map(|f| csv_field(f)).collect();
                writeln!(out, "{}", line.join(","))?;
            }
        }
    }
    Ok(rows.len())
}

/// RFC 4180 quoting: fields with commas, quotes or line breaks are quoted, and a
/// leading `=`, `+`, `-` or `@` is prefixed with `'` so spreadsheets do not run it.
fn csv_field(field: &str) -> String {
    let field = if field.starts_with(['=', '+', '-', '@']) {
        format!("'{field}")
    } else {
        field.to_string()
    };
    if field.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", field.replace('"', "\"\""))
    } else {
        field
    }
}
