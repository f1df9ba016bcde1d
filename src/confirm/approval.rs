//! A teammate's approval (SPEC §20). A call of a tool with policy `approve`
//! goes to the console's approvals queue when it is raised; one with
//! `confirm+approve` goes there once the visitor confirmed its card. Either
//! way it waits as `awaiting_approval` with its own expiry (`approval_ttl_min`)
//! and a signature made with the approvals' key, so a visitor's card signature
//! never passes for an approval. An operator's answer is checked here — role,
//! waiting, unexpired, unchanged tool, signature in constant time — and every
//! refusal is audited with the operator; the decision itself is the cards' one
//! conditional transition, so of racing approvals on any replica one runs.

use std::sync::Arc;

use crate::app::App;
use crate::error::ApiError;
use crate::ids::CallId;
use crate::secret::constant_time_eq;
use crate::states::{CallKind, CallStatus, OperatorRole, Reason};
use crate::store::{CallRow, Decided};
use crate::tools::Tool;

/// A call whose approval passed every check, with its tool and site.
pub struct Approval {
    pub call: CallRow,
    pub tool: Arc<Tool>,
    pub site: Arc<crate::app::Site>,
}

/// The visitor confirmed a `confirm+approve` card: it now waits for a
/// teammate, under a new expiry and the approvals' signature.
pub async fn await_teammate(app: &App, call: &CallRow, tool: &Tool) -> Result<CallRow, ApiError> {
    let now = app.clock.now_ms();
    let mut waiting = call.clone();
    waiting.status = CallStatus::AwaitingApproval;
    waiting.expires_at = Some(now + tool.approval_ttl.as_millis() as i64);
    let signature = super::sign::sign(&app.keys.approvals, &waiting);
    waiting.signature = Some(signature.clone());
    let expires_at = waiting.expires_at.unwrap_or(now);
    let refusal = match app
        .store
        .cards()
        .to_approval(call, now, expires_at, &signature)
        .await?
    {
        Decided::Won => {
            crate::ops::metrics::confirmation(&call.site, "confirmed");
            requested(app, &waiting);
            return Ok(waiting);
        }
        lost => super::decide::refused(app, call, lost, now, None).await?,
    };
    Err(refusal)
}

/// Checks an operator's answer to a waiting call before anything changes.
pub async fn verify(
    app: &App,
    operator: &str,
    role: OperatorRole,
    call_id: &str,
    signature: &str,
) -> Result<Approval, ApiError> {
    let call = match CallId::parse(call_id) {
        Some(id) => app.store.calls().get(id.as_str()).await?,
        None => None,
    };
    let Some(call) = call.filter(|c| c.kind == CallKind::Confirmation) else {
        return Err(ApiError::CallNotFound);
    };
    // A visitor's own card is theirs to answer: an operator's attempt is
    // refused and audited (SPEC §19: an operator never confirms for them).
    if !call.policy.asks_teammate() {
        refuse(app, &call, Reason::NotApprover, operator).await?;
        return Err(ApiError::Forbidden);
    }
    let Some(site) = app.site(&call.site).cloned() else {
        return Err(ApiError::CallNotFound);
    };
    let tools = site.tools.current(&app.store).await;
    let tool = tools
        .get(&call.tool)
        .filter(|t| Some(&t.digest) == call.config_digest.as_ref())
        .cloned();
    // Who may approve is the tool's word as the card was signed under it.
    if let Some(tool) = &tool
        && !tool.approvers.contains(&role)
    {
        refuse(app, &call, Reason::NotApprover, operator).await?;
        return Err(ApiError::Forbidden);
    }
    let now = app.clock.now_ms();
    let refused = match call.status {
        CallStatus::Expired if call.reason == Some(Reason::Stale) => {
            Some((Reason::Stale, ApiError::CallNotPending))
        }
        CallStatus::Expired => Some((Reason::Late, ApiError::ConfirmationExpired)),
        CallStatus::AwaitingApproval if call.expires_at.is_none_or(|at| at <= now) => {
            app.store
                .cards()
                .expire_due(now, Some(&call.conversation))
                .await?;
            Some((Reason::Late, ApiError::ConfirmationExpired))
        }
        CallStatus::AwaitingApproval => None,
        // Still with the visitor (`confirm+approve` before their Confirm), or
        // decided already.
        _ => Some((Reason::Replayed, ApiError::CallNotPending)),
    };
    if let Some((reason, error)) = refused {
        refuse(app, &call, reason, operator).await?;
        return Err(error);
    }
    let Some(tool) = tool else {
        refuse(app, &call, Reason::Stale, operator).await?;
        return Err(ApiError::CallNotPending);
    };
    if !super::sign::verify(&app.keys.approvals, &call, signature) {
        let stored = call.signature.as_deref().unwrap_or_default();
        let reason = match constant_time_eq(stored.as_bytes(), signature.trim().as_bytes()) {
            true => Reason::Altered,
            false => Reason::Forged,
        };
        refuse(app, &call, reason, operator).await?;
        return Err(ApiError::SignatureInvalid);
    }
    Ok(Approval { call, tool, site })
}

/// A refused approval, audited with the operator who sent it.
pub async fn refuse(
    app: &App,
    call: &CallRow,
    reason: Reason,
    operator: &str,
) -> anyhow::Result<()> {
    super::verify::refuse_by(app, call, reason, Some(operator)).await
}

/// A call started waiting: the console's live views, the gauge and the team's
/// webhook hear of it.
pub fn requested(app: &App, call: &CallRow) {
    app.live
        .publish(&call.site, &call.conversation, "approval_requested");
    count_waiting(app);
    if let Some(site) = app.site(&call.site) {
        super::webhook::approval_requested(app, site, call);
    }
}

/// A teammate decided: the console's views and the gauge move, and the
/// visitor's live channel says how the waiting call ended. Best effort: the
/// decision is committed, and history shows it whatever happens here.
pub async fn decided(app: &App, call: &CallRow, status: CallStatus) {
    app.live
        .publish(&call.site, &call.conversation, "approval_decided");
    count_waiting(app);
    let decision = match status {
        CallStatus::Confirmed => "approved",
        _ => "declined",
    };
    crate::ops::metrics::confirmation(&call.site, decision);
    tell_visitor(app, call, status).await;
}

/// Puts how a waiting call ended on the visitor's live channel (`event:
/// card`); a failure is logged, never owed.
pub async fn tell_visitor(app: &App, call: &CallRow, status: CallStatus) {
    let data = serde_json::json!({"call": call.id, "status": status}).to_string();
    let event = crate::store::desk::NewEvent {
        kind: "card",
        data: &data,
    };
    if let Err(e) = app
        .store
        .desk()
        .append(&call.conversation, event, app.clock.now_ms())
        .await
    {
        tracing::warn!(error = format!("{e:#}"), call = %call.id, "how a waiting call ended could not be put on the visitor's channel");
    }
}

/// Sets the `deskbell_approvals_waiting` gauge from the database, in a task
/// of its own: nobody waits for the count.
pub fn count_waiting(app: &App) {
    let app = Arc::clone(app);
    tokio::spawn(async move {
        match app.store.approvals().count(app.clock.now_ms()).await {
            Ok(n) => crate::ops::metrics::approvals_waiting(n),
            Err(e) => tracing::warn!(error = format!("{e:#}"), "approvals could not be counted"),
        }
    });
}
