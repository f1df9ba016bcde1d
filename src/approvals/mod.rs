//! The console's approvals queue (SPEC §20): `GET /v1/operator/approvals`
//! lists the calls waiting for a teammate, and `POST
//! /v1/operator/approvals/{call}` approves or declines one with the signature
//! the list gave. The checks are `confirm::approval`'s; the decision and what
//! follows it are a turn's (`ask::approved`).

use axum::extract::{Path, State};
use axum::routing::{get, post};
use axum::{Json, Router};

use crate::app::App;
use crate::clock::rfc3339;
use crate::error::{ApiError, RawBody};
use crate::operator::auth::Operator;
use crate::store::stored::decode_lines;
use crate::wire::{ApprovalBody, ApprovalDecision, ApprovalItem, ApprovalResult, ApprovalsView};

/// A note longer than this is refused: it goes to the model.
const MAX_NOTE_CHARS: usize = 1000;

pub fn router() -> Router<App> {
    Router::new()
        .route("/v1/operator/approvals", get(list))
        .route("/v1/operator/approvals/{call}", post(decide))
}

async fn list(State(app): State<App>, operator: Operator) -> Result<Json<ApprovalsView>, ApiError> {
    let calls = app.store.approvals().waiting(app.clock.now_ms()).await?;
    let mut items = Vec::with_capacity(calls.len());
    for call in calls {
        let Some(site) = app.site(&call.site) else {
            continue;
        };
        let approvers = site
            .tools
            .last_read()
            .get(&call.tool)
            .map(|t| t.approvers.clone())
            .unwrap_or_default();
        items.push(ApprovalItem {
            can_approve: approvers.contains(&operator.role),
            approvers,
            arguments: decode_lines(call.lines.as_deref().unwrap_or("[]")).unwrap_or_default(),
            requested_at: rfc3339(call.created_at),
            expires_at: rfc3339(call.expires_at.unwrap_or_default()),
            signature: call.signature.clone().unwrap_or_default(),
            policy: call.policy,
            call: call.id,
            site: call.site,
            conversation: call.conversation,
            visitor: call.visitor,
            tool: call.tool,
            label: call.label,
        });
    }
    Ok(Json(ApprovalsView { items }))
}

async fn decide(
    State(app): State<App>,
    operator: Operator,
    Path(call): Path<String>,
    RawBody(raw): RawBody,
) -> Result<Json<ApprovalResult>, ApiError> {
    let body: ApprovalBody =
        serde_json::from_slice(&raw).map_err(|e| ApiError::InvalidRequest(e.to_string()))?;
    if let Some(note) = &body.note {
        if note.chars().count() > MAX_NOTE_CHARS {
            return Err(ApiError::InvalidRequest(format!(
                "note must be at most {MAX_NOTE_CHARS} characters"
            )));
        }
        if note.chars().any(crate::tools::render::hidden) {
            return Err(ApiError::InvalidRequest(
                "note must not contain invisible or control characters".into(),
            ));
        }
    }
    let approval = crate::confirm::approval::verify(
        &app,
        &operator.email,
        operator.role,
        &call,
        &body.signature,
    )
    .await?;
    let approve = body.decision == ApprovalDecision::Approve;
    let call = approval.call.id.clone();
    let status =
        crate::ask::approved::decide(&app, approval, operator.email.clone(), approve, body.note)
            .await?;
    Ok(Json(ApprovalResult { call, status }))
}
