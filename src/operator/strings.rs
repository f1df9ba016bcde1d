//! The widget's words from the console (SPEC §22): every string of a site with
//! the catalog's English, the config file's override and the console's own,
//! and an admin's changes, which win over the file until reset.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;

use super::auth::Operator;
use super::known_site;
use crate::app::App;
use crate::clock::rfc3339;
use crate::error::{ApiError, RawBody, parse_json};
use crate::locale::{self, StringOverride};
use crate::store::StringRow;
use crate::wire::{ConsoleString, SiteStringsView, StringChange, StringView};

/// The longest text the console accepts for one string, in characters.
const MAX_TEXT_CHARS: usize = 500;

pub async fn list(
    State(app): State<App>,
    _: Operator,
    Path(site_id): Path<String>,
) -> Result<Json<SiteStringsView>, ApiError> {
    let site = known_site(&app, &site_id)?;
    let rows = app.store.widget_strings().of_site(&site_id).await?;
    let strings = locale::english()
        .iter()
        .map(|(key, english)| StringView {
            key: key.clone(),
            english: english.clone(),
            file: site.config.strings.get(key).map(|o| match o {
                StringOverride::All(text) => serde_json::json!(text),
                StringOverride::PerLanguage(by) => serde_json::json!(by),
            }),
            console: rows
                .iter()
                .filter(|r| &r.key == key)
                .map(|r| ConsoleString {
                    language: r.language.clone(),
                    text: r.text.clone(),
                    operator: r.operator.clone(),
                    changed_at: rfc3339(r.changed_at),
                })
                .collect(),
        })
        .collect();
    Ok(Json(SiteStringsView {
        site: site_id,
        locale: site.config.locale.clone(),
        languages: locale::known().into_iter().map(String::from).collect(),
        strings,
    }))
}

pub async fn set(
    State(app): State<App>,
    operator: Operator,
    Path((site_id, key)): Path<(String, String)>,
    RawBody(body): RawBody,
) -> Result<StatusCode, ApiError> {
    operator.require_admin()?;
    let change: StringChange = parse_json(&body)?;
    known_site(&app, &site_id)?;
    let text = change.text.trim();
    if text.is_empty()
        || text.chars().count() > MAX_TEXT_CHARS
        || text.chars().any(char::is_control)
    {
        return Err(ApiError::InvalidRequest(format!(
            "text: must be 1 to {MAX_TEXT_CHARS} characters, without control characters"
        )));
    }
    let value = match change.language.as_str() {
        "*" => StringOverride::All(text.to_string()),
        language => StringOverride::PerLanguage([(language.to_string(), text.to_string())].into()),
    };
    locale::check_override(&key, &value).map_err(|why| {
        match locale::english().contains_key(&key) {
            true => ApiError::InvalidRequest(format!("{key}: {why}")),
            false => ApiError::Missing("string"),
        }
    })?;
    let row = StringRow {
        key,
        language: change.language,
        text: text.to_string(),
        operator: operator.email.clone(),
        changed_at: app.clock.now_ms(),
    };
    app.store.widget_strings().set(&site_id, &row).await?;
    Ok(StatusCode::NO_CONTENT)
}

pub async fn reset(
    State(app): State<App>,
    operator: Operator,
    Path((site_id, key)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    operator.require_admin()?;
    known_site(&app, &site_id)?;
    if !locale::english().contains_key(&key) {
        return Err(ApiError::Missing("string"));
    }
    app.store.widget_strings().reset(&site_id, &key).await?;
    Ok(StatusCode::NO_CONTENT)
}
