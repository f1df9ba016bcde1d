//! Tools for operators: every tool of every site as it stands (the file's values
//! with the console's changes), a preview of the card a call would raise, and
//! the admin's changes of label, description and policy (SPEC §15).

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State};
use serde::Deserialize;

use super::auth::Operator;
use super::{Params, chosen_sites, known_site};
use crate::app::{App, Site};
use crate::clock::rfc3339;
use crate::error::{ApiError, JsonBody, RawBody, parse_json};
use crate::secret::loggable_url;
use crate::states::AuditEvent;
use crate::store::{AuditRow, ToolEdit};
use crate::tools::arguments::Arguments;
use crate::tools::catalog::View;
use crate::tools::render;
use crate::wire::{CardPreview, Items, PreviewRequest, ToolChange, ToolFileView, ToolView};

/// Longest label and description the console accepts.
const MAX_LABEL_CHARS: usize = 200;
const MAX_DESCRIPTION_CHARS: usize = 4000;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    site: Option<String>,
}

pub async fn list(
    State(app): State<App>,
    _: Operator,
    Params(query): Params<ListQuery>,
) -> Result<Json<Items<ToolView>>, ApiError> {
    let sites = chosen_sites(&app, query.site.as_deref())?;
    let mut items = Vec::new();
    for site in sites {
        // One read of the site's tools for all of them.
        let view = site.tools.for_console(&app.store).await;
        items.extend(
            view.base
                .tools
                .iter()
                .filter_map(|t| tool_view(&site, &view, &t.name)),
        );
    }
    Ok(Json(Items { items }))
}

/// A tool as it stands now, with what the file (for an MCP tool: the file and
/// its server) says and who changed it.
fn tool_view(site: &Site, view: &View, name: &str) -> Option<ToolView> {
    let file = view.base.tools.iter().find(|t| t.name == name)?;
    let tool = view.toolbox.get(name)?;
    let change = view.overrides.get(name);
    Some(ToolView {
        site: site.config.id.clone(),
        name: tool.name.clone(),
        label: tool.label.clone(),
        description: tool.description.clone(),
        policy: tool.policy,
        confirm_when: tool.rule.as_ref().map(|r| r.source.clone()),
        source: match tool.mcp {
            Some(_) => "mcp",
            None => "file",
        },
        url: loggable_url(&tool.url),
        timeout_s: tool.timeout.as_secs_f64(),
        input_schema: tool.schema.clone(),
        changed: change.is_some(),
        changed_by: change.map(|c| c.operator.clone()),
        changed_at: change.map(|c| rfc3339(c.changed_at)),
        file: ToolFileView {
            label: file.label.clone(),
            description: file.description.clone(),
            policy: file.policy,
            confirm_when: file.confirm_when.clone(),
        },
    })
}

pub async fn change(
    State(app): State<App>,
    operator: Operator,
    Path((site_id, name)): Path<(String, String)>,
    RawBody(body): RawBody,
) -> Result<Json<ToolView>, ApiError> {
    // The role first: an agent learns nothing from how its body would be read.
    operator.require_admin()?;
    let change: ToolChange = parse_json(&body)?;
    let site = Arc::clone(known_site(&app, &site_id)?);
    let before = site.tools.for_console(&app.store).await;
    let file = before
        .base
        .tools
        .iter()
        .find(|t| t.name == name)
        .ok_or(ApiError::Missing("tool"))?;
    check(&change)?;
    let now = app.clock.now_ms();
    let label = change.label.as_deref().map(str::trim);
    let edit = ToolEdit {
        site: &site_id,
        tool: &name,
        label,
        description: change.description.as_deref(),
        policy: change.policy,
        confirm_when: change.confirm_when.as_deref().map(str::trim),
        reset: change.reset,
        operator: &operator.email,
        at: now,
        file_policy: file.policy,
    };
    let audit = AuditRow {
        at: now,
        event: AuditEvent::ToolChanged,
        reason: None,
        call: String::new(),
        site: site_id.clone(),
        conversation: String::new(),
        visitor: String::new(),
        tool: name.clone(),
        policy: file.policy,
        arguments: change_json(&change)?,
        http_status: None,
        duration_ms: None,
        operator: Some(operator.email.clone()),
        rule: None,
    };
    let stale = app.store.tools().change(&edit, audit).await?;
    for call in &stale {
        app.live
            .publish(&call.site, &call.conversation, "card_answered");
        crate::ops::metrics::confirmation(&call.site, "expired");
    }
    tracing::info!(
        operator = %operator.email,
        site = %site_id,
        tool = %name,
        stale_cards = stale.len(),
        "a tool was changed in the console"
    );
    let view = site.tools.for_console(&app.store).await;
    let view = tool_view(&site, &view, &name).ok_or(ApiError::Missing("tool"))?;
    Ok(Json(view))
}

fn check(change: &ToolChange) -> Result<(), ApiError> {
    let fields = change.label.is_some()
        || change.description.is_some()
        || change.policy.is_some()
        || change.confirm_when.is_some();
    if change.reset && fields {
        return Err(ApiError::InvalidRequest(
            "reset: comes alone, without label, description, policy or confirm_when".into(),
        ));
    }
    if !change.reset && !fields {
        return Err(ApiError::InvalidRequest(
            "body: give label, description, policy or confirm_when, or reset".into(),
        ));
    }
    // A rule that does not compile is refused with its position, as at load.
    if let Some(rule) = change.confirm_when.as_deref().map(str::trim)
        && !rule.is_empty()
        && let Err(why) = crate::tools::rule::Rule::compile(rule)
    {
        return Err(ApiError::InvalidRequest(format!("confirm_when: {why}")));
    }
    if let Some(label) = &change.label {
        let chars = label.trim().chars().count();
        if chars == 0 || chars > MAX_LABEL_CHARS {
            return Err(ApiError::InvalidRequest(format!(
                "label: must have 1 to {MAX_LABEL_CHARS} characters"
            )));
        }
        if label.chars().any(render::hidden) {
            return Err(ApiError::InvalidRequest(
                "label: must not contain invisible or control characters".into(),
            ));
        }
    }
    if let Some(description) = &change.description
        && description.chars().count() > MAX_DESCRIPTION_CHARS
    {
        return Err(ApiError::InvalidRequest(format!(
            "description: at most {MAX_DESCRIPTION_CHARS} characters"
        )));
    }
    Ok(())
}

/// What changed, as the audit row's arguments (canonical JSON).
fn change_json(change: &ToolChange) -> Result<String, ApiError> {
    let mut value = serde_json::Map::new();
    if change.reset {
        value.insert("reset".into(), true.into());
    }
    if let Some(label) = &change.label {
        value.insert("label".into(), label.trim().into());
    }
    if let Some(description) = &change.description {
        value.insert("description".into(), description.clone().into());
    }
    if let Some(policy) = change.policy {
        value.insert("policy".into(), policy.as_str().into());
    }
    if let Some(rule) = &change.confirm_when {
        value.insert("confirm_when".into(), rule.trim().into());
    }
    serde_json_canonicalizer::to_string(&serde_json::Value::Object(value))
        .map_err(|e| ApiError::Internal(e.into()))
}

/// The card these arguments would raise, rendered by the code that renders real
/// cards; arguments a real call would be refused for are refused here too.
pub async fn preview(
    State(app): State<App>,
    _: Operator,
    Path((site_id, name)): Path<(String, String)>,
    JsonBody(request): JsonBody<PreviewRequest>,
) -> Result<Json<CardPreview>, ApiError> {
    let site = known_site(&app, &site_id)?;
    let toolbox = site.tools.current(&app.store).await;
    let tool = toolbox.get(&name).ok_or(ApiError::Missing("tool"))?;
    let raw =
        serde_json::to_string(&request.arguments).map_err(|e| ApiError::Internal(e.into()))?;
    let arguments = Arguments::from_model(&raw)
        .map_err(|why| ApiError::InvalidRequest(format!("arguments: {why}")))?;
    tool.check_arguments(&arguments.value)
        .map_err(|why| ApiError::InvalidRequest(format!("arguments: {why}")))?;
    Ok(Json(CardPreview {
        title: tool.label.clone(),
        lines: render::render(&tool.schema, &arguments.value),
    }))
}
