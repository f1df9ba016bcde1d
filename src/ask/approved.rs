//! A teammate's answer to a waiting call (SPEC §20), handed to a turn that
//! outlives the request, as a visitor's answer is: the operator's request is
//! answered once the decision is committed, and the call's run and the
//! continuation go on in the turn's task, delivered to the visitor's live
//! channel and history.

use tokio::sync::oneshot;
use tracing::Instrument;

use super::Sink;
use super::turn::{Teammate, Turn};
use crate::app::App;
use crate::confirm::approval::Approval;
use crate::error::ApiError;
use crate::guard::Caller;
use crate::states::CallStatus;

pub async fn decide(
    app: &App,
    approval: Approval,
    operator: String,
    approve: bool,
    note: Option<String>,
) -> Result<CallStatus, ApiError> {
    // No visitor's request is at hand: the site's language, and the model
    // follows the conversation's own language anyway.
    let caller = Caller {
        language: crate::locale::resolve(&approval.site.config.locale, ""),
        site: approval.site.clone(),
        visitor: approval.call.visitor.clone(),
        user_id: app.store.visitors().user(&approval.call.visitor).await?,
    };
    let span = tracing::info_span!(
        "turn",
        site = %approval.call.site,
        conversation = %approval.call.conversation,
        call = %approval.call.id
    );
    let said = Teammate {
        operator,
        approve,
        note,
    };
    let (told, decided) = oneshot::channel();
    let turn = Turn::headless(app.clone(), caller, Sink::detached());
    app.turns
        .spawn(turn.teammate(approval, said, told).instrument(span));
    match decided.await {
        Ok(result) => result,
        Err(_) => Err(ApiError::Internal(anyhow::anyhow!(
            "the approval's turn ended before it decided"
        ))),
    }
}
