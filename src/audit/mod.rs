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
    /// `null` on an operator's row (`tool_changed`), which belongs to no call.
    pub call: Option<&'a str>,
    pub site: &'a str,
    pub conversation: Option<&'a str>,
    pub visitor: Option<&'a str>,
    pub tool: &'a str,
    pub policy: &'a str,
    pub arguments: serde_json::Value,
    pub http_status: Option<i64>,
    pub duration_ms: Option<i64>,
    pub operator: Option<&'a str>,
    /// On a `requested` row whose gate a `confirm_when` decided (SPEC §20):
    /// `{"confirm_when": "<rule>", "result": true|false|"error: …"}`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rule: Option<serde_json::Value>,
}

impl<'a> From<&'a AuditRow> for ExportRow<'a> {
    fn from(r: &'a AuditRow) -> Self {
        ExportRow {
            at: rfc3339(r.at),
            event: r.event.as_str(),
            reason: r.reason.map(|r| r.as_str()),
            call: present(&r.call),
            site: &r.site,
            conversation: present(&r.conversation),
            visitor: present(&r.visitor),
            tool: &r.tool,
            policy: r.policy.as_str(),
            arguments: serde_json::from_str(&r.arguments).unwrap_or(serde_json::Value::Null),
            http_status: r.http_status,
            duration_ms: r.duration_ms,
            operator: r.operator.as_deref(),
            rule: r.rule.as_deref().and_then(|t| serde_json::from_str(t).ok()),
        }
    }
}

/// Operator rows keep empty text where a call row has its ids (the columns are
/// NOT NULL); the export says `null` for them.
fn present(text: &str) -> Option<&str> {
    (!text.is_empty()).then_some(text)
}

pub const CSV_HEADER: &str = "at,event,reason,call,site,conversation,visitor,tool,policy,arguments,http_status,duration_ms,operator,rule";

pub async fn export(
    store: &Store,
    site: Option<&str>,
    format: Format,
    out: &mut impl Write,
) -> anyhow::Result<usize> {
    if format == Format::Csv {
        writeln!(out, "{CSV_HEADER}")?;
    }
    // A page at a time, after the last row written: memory stays that of one page
    // however large the table grows.
    let mut after = None;
    let mut written = 0;
    loop {
        let page = store.audit().page(site, after.take(), EXPORT_PAGE).await?;
        let Some((last_id, last)) = page.last() else {
            break;
        };
        after = Some((last.at, last_id.clone()));
        for (_, row) in &page {
            write_row(row, format, out)?;
        }
        written += page.len();
        if (page.len() as i64) < EXPORT_PAGE {
            break;
        }
    }
    Ok(written)
}

/// Rows read from the database at once while exporting.
pub const EXPORT_PAGE: i64 = 1000;

pub fn write_row(row: &AuditRow, format: Format, out: &mut impl Write) -> anyhow::Result<()> {
    {
        let r = ExportRow::from(row);
        match format {
            Format::Jsonl => writeln!(out, "{}", serde_json::to_string(&r)?)?,
            Format::Csv => {
                let fields = [
                    r.at.clone(),
                    r.event.to_string(),
                    r.reason.unwrap_or_default().to_string(),
                    r.call.unwrap_or_default().to_string(),
                    r.site.to_string(),
                    r.conversation.unwrap_or_default().to_string(),
                    r.visitor.unwrap_or_default().to_string(),
                    r.tool.to_string(),
                    r.policy.to_string(),
                    row.arguments.clone(),
                    r.http_status.map(|s| s.to_string()).unwrap_or_default(),
                    r.duration_ms.map(|s| s.to_string()).unwrap_or_default(),
                    r.operator.unwrap_or_default().to_string(),
                    row.rule.clone().unwrap_or_default(),
                ];
                let line: Vec<String> = fields.iter().map(|f| csv_field(f)).collect();
                writeln!(out, "{}", line.join(","))?;
            }
        }
    }
    Ok(())
}

/// RFC 4180 quoting: fields with commas, quotes or line breaks are quoted, and a
/// leading `=`, `+`, `-`, `@`, tab or carriage return is prefixed with `'` so
/// spreadsheets do not run it as a formula.
pub(crate) fn csv_field(field: &str) -> String {
    let field = if field.starts_with(['=', '+', '-', '@', '\t', '\r']) {
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
