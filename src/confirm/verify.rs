//! Verifying an answer to a card (SPEC §8): before anything runs, the conversation
//! must belong to the caller, the call must be pending in it and unexpired, its
//! tool's configuration unchanged, and the signature must match the stored call —
//! in constant time. Every refusal is audited; nothing runs.

use std::sync::Arc;

use super::sign;
use crate::app::App;
use crate::error::ApiError;
use crate::guard::Caller;
use crate::ids::{CallId, ConversationId};
use crate::secret::constant_time_eq;
use crate::states::{AuditEvent, CallKind, CallStatus, Reason};
use crate::store::{AuditRow, CallRow};
use crate::tools::Tool;

/// A call that passed every check, with the tool it will run as.
pub struct Verified {
    pub call: CallRow,
    pub tool: Arc<Tool>,
}

pub async fn verify_answer(
    app: &App,
    caller: &Caller,
    conversation: &str,
    call_id: &str,
    signature: &str,
) -> Result<Verified, ApiError> {
    let Some(id) = ConversationId::parse(conversation) else {
        return Err(ApiError::ConversationNotFound);
    };
    let call = match CallId::parse(call_id) {
        Some(call_id) => app.store.calls().get(call_id.as_str()).await?,
        None => None,
    };
    if !crate::guard::owns(app, caller, &id).await? {
        if let Some(c) = call.as_ref().filter(|c| c.conversation == conversation) {
            refuse(app, c, Reason::ForeignConversation).await?;
        }
        return Err(ApiError::ConversationNotFound);
    }
    let call = match call {
        Some(c) if c.conversation == conversation && c.kind == CallKind::Confirmation => c,
        Some(c) => {
            if c.conversation != conversation {
                refuse(app, &c, Reason::ForeignConversation).await?;
            }
            return Err(ApiError::CallNotFound);
        }
        None => return Err(ApiError::CallNotFound),
    };
    let now = app.clock.now_ms();
    // A card closed because an operator changed its tool is refused as stale
    // (SPEC §8), not as late.
    if call.status == CallStatus::Expired && call.reason == Some(Reason::Stale) {
        refuse(app, &call, Reason::Stale).await?;
        return Err(ApiError::CallNotPending);
    }
    if call.status == CallStatus::Expired {
        refuse(app, &call, Reason::Late).await?;
        return Err(ApiError::ConfirmationExpired);
    }
    if call.status != CallStatus::Pending {
        refuse(app, &call, Reason::Replayed).await?;
        return Err(ApiError::CallNotPending);
    }
    if call.expires_at.is_none_or(|at| at <= now) {
        app.store
            .cards()
            .expire_due(now, Some(conversation))
            .await?;
        refuse(app, &call, Reason::Late).await?;
        return Err(ApiError::ConfirmationExpired);
    }
    // An MCP tool as its server offers it now, not at its last notice: a schema
    // changed a moment ago makes the card stale (SPEC §17).
    if let Some(target) = caller
        .site
        .tools
        .last_read()
        .get(&call.tool)
        .and_then(|t| t.mcp.clone())
    {
        target.server.relist().await;
    }
    // The tools as they stand in the database now: a change made on another
    // replica a moment ago counts (SPEC §8).
    let tools = caller.site.tools.current(&app.store).await;
    let tool = tools
        .get(&call.tool)
        .filter(|t| Some(&t.digest) == call.config_digest.as_ref());
    let Some(tool) = tool.cloned() else {
        refuse(app, &call, Reason::Stale).await?;
        return Err(ApiError::CallNotPending);
    };
    if !sign::verify(&app.keys.confirmations, &call, signature) {
        // The stored signature still matching the submitted one means the row was
        // changed after it was signed; otherwise the answer's signature is made up.
        let stored = call.signature.as_deref().unwrap_or_default();
        let reason = if constant_time_eq(stored.as_bytes(), signature.trim().as_bytes()) {
            Reason::Altered
        } else {
            Reason::Forged
        };
        refuse(app, &call, reason).await?;
        return Err(ApiError::SignatureInvalid);
    }
    Ok(Verified { call, tool })
}

pub async fn refuse(app: &App, call: &CallRow, reason: Reason) -> anyhow::Result<()> {
    refuse_by(app, call, reason, None).await
}

/// A refused answer's audit row, naming the operator who sent it if one did.
pub async fn refuse_by(
    app: &App,
    call: &CallRow,
    reason: Reason,
    operator: Option<&str>,
) -> anyhow::Result<()> {
    tracing::warn!(call = %call.id, reason = reason.as_str(), "an answer to a card was refused");
    let mut row = AuditRow::for_call(call, AuditEvent::Refused, Some(reason), app.clock.now_ms());
    row.operator = operator.map(str::to_string);
    Ok(app.store.audit().append(&row).await?)
}
