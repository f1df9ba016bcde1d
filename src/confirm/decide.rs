//! The decision on a verified card: the one atomic pending → decided transition
//! (`Store::decide`), which also opens the continuation's bubble, reserves the
//! continuation's budget and marks a confirmed call running under this process.
//! Of two racing answers — in one process or on two replicas — one wins; the
//! other is refused and audited here.

use crate::app::App;
use crate::error::ApiError;
use crate::states::Reason;
use crate::store::{BudgetShare, CallRow, CallStatus, Decided, MessageRow, Step};
use crate::wire::Decision;

/// Decides `call` for `decision`, opening `bubble`. `Ok(Ok(status))` when this
/// answer won; `Ok(Err(refusal))` when it lost (already audited).
pub async fn decide(
    app: &App,
    call: &CallRow,
    decision: Decision,
    bubble: &MessageRow,
    budget: Option<&BudgetShare>,
) -> anyhow::Result<Result<CallStatus, ApiError>> {
    let now = app.clock.now_ms();
    let (to, reason) = match decision {
        Decision::Confirm => (CallStatus::Confirmed, None),
        Decision::Cancel => (CallStatus::Cancelled, Some(Reason::Visitor)),
    };
    let refusal = match app
        .store
        .cards()
        .decide(
            call,
            Step {
                from: CallStatus::Pending,
                to,
                reason,
                by: None,
            },
            now,
            bubble,
            budget,
        )
        .await?
    {
        Decided::Won => {
            app.live
                .publish(&call.site, &call.conversation, "card_answered");
            let decision = match to {
                CallStatus::Confirmed => "confirmed",
                _ => "cancelled",
            };
            crate::ops::metrics::confirmation(&call.site, decision);
            return Ok(Ok(to));
        }
        lost => refused(app, call, lost, now, None).await?,
    };
    Ok(Err(refusal))
}

/// The refusal of an answer whose transition did not win — another answer got
/// there first, the card went stale or ran out of time, or the budget was
/// spent — audited here, with the operator who answered if one did. Used for
/// a visitor's answer, an edit and a teammate's approval alike.
pub async fn refused(
    app: &App,
    call: &CallRow,
    lost: Decided,
    now: crate::clock::Millis,
    by: Option<&str>,
) -> anyhow::Result<ApiError> {
    let refuse = |reason| super::verify::refuse_by(app, call, reason, by);
    Ok(match lost {
        Decided::Won | Decided::Lost => {
            refuse(Reason::Replayed).await?;
            ApiError::CallNotPending
        }
        Decided::Stale => {
            refuse(Reason::Stale).await?;
            ApiError::CallNotPending
        }
        Decided::Late => {
            app.store
                .cards()
                .expire_due(now, Some(&call.conversation))
                .await?;
            refuse(Reason::Late).await?;
            ApiError::ConfirmationExpired
        }
        Decided::Budget(reservation) => crate::budget::budget_refusal(reservation, now),
    })
}
