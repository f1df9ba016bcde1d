//! Running a decided call: what the run needs is read from the stored call before
//! the decision is committed, and the outcome is recorded with its audit row by
//! the call's owner only (SPEC §6.5, §9, §10).

use crate::app::App;
use crate::llm::ChatMessage;
use crate::states::AuditEvent;
use crate::store::stored::decode_transcript;
use crate::store::{AuditRow, CallRow, CallStatus, Fence};
use crate::tools::arguments::Arguments;
use crate::tools::http::Outcome;

/// The stored transcript to resume from and the exact arguments that will run,
/// read before deciding: a stored call that no longer parses (an upgrade that
/// changed a shape, a damaged row) leaves the card undecided rather than a call
/// decided that can never run.
pub fn prepare(call: &CallRow) -> anyhow::Result<(Vec<ChatMessage>, Arguments)> {
    let transcript = decode_transcript(call.context.as_deref().unwrap_or("[]"))?;
    let arguments = Arguments::from_canonical(call.arguments.clone())?;
    Ok((transcript, arguments))
}

/// Records a run's outcome and its `executed` or `failed` audit row, trying
/// again until it lands or the call is no longer this process's (`TakenOver`):
/// the result is kept here meanwhile, and nobody is told the outcome before
/// the database holds it.
pub async fn record(
    app: &App,
    call: &CallRow,
    outcome: &Outcome,
    status: CallStatus,
    fence: &Fence,
) -> anyhow::Result<()> {
    let audit = audit_outcome(call, outcome, app.clock.now_ms());
    app.store
        .leases()
        .until_written(fence, "a call's outcome", || {
            app.store
                .calls()
                .record_outcome(call, status, Some(&outcome.result), &audit, fence)
        })
        .await?;
    let outcome = match outcome.succeeded {
        true => "succeeded",
        false => "failed",
    };
    crate::ops::metrics::tool_call(&call.site, Some(&call.tool), call.policy.as_str(), outcome);
    Ok(())
}

/// The audit row of a run: `executed`, or `failed` with its reason, the HTTP
/// status and the duration.
pub fn audit_outcome(call: &CallRow, outcome: &Outcome, now: i64) -> AuditRow {
    let (event, reason) = if outcome.succeeded {
        (AuditEvent::Executed, None)
    } else {
        (AuditEvent::Failed, outcome.failure)
    };
    let mut row = AuditRow::for_call(call, event, reason, now);
    row.http_status = outcome.http_status.map(i64::from);
    row.duration_ms = Some(outcome.duration_ms);
    row
}
