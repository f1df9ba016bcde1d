//! Finishing what a dead process left (SPEC §6.5, §16): no call is ever left
//! without an outcome, and no answer vanishes from history.
//!
//! `confirm::recover` claims a dead process's work (fails the answers that had
//! no call running) and says, for each running call, whether it may be delivered
//! again. This module is the turn engine's part: it delivers the call with the
//! same `Idempotency-Key` (or fails it as `interrupted`), records the outcome with
//! its audit row and step line, and generates and saves the turn's answer, as for
//! a visitor who disconnected.

use std::sync::Arc;

use super::Sink;
use super::turn::{Bubble, Turn};
use crate::app::App;
use crate::confirm::recover::{self as claimed, Interrupted, Plan};
use crate::confirm::run;
use crate::guard::Caller;
use crate::llm::ChatMessage;
use crate::states::CallKind;
use crate::store::stored::decode_transcript;
use crate::store::{CallRow, CallStatus, Fence, Renewal, StoreError, StreamingAnswer};

/// Claims the work of dead processes and finishes each call in a tracked task (so
/// shutdown waits for them). `at_start`: this process has just started (see
/// `Store::claim_dead`). A call whose finishing fails is failed as interrupted,
/// and the others go on.
pub async fn recover(app: &App, at_start: bool) -> anyhow::Result<()> {
    for Interrupted {
        call,
        answer,
        fence,
    } in claimed::claim(app, at_start).await?
    {
        let app = Arc::clone(app);
        let span = tracing::info_span!("turn", site = %call.site, conversation = %call.conversation, call = %call.id);
        app.clone().turns.spawn(tracing::Instrument::instrument(
            async move {
                match finish(&app, &call, answer.clone(), &fence).await {
                    Ok(()) => {}
                    Err(e) if StoreError::taken_over(&e) => tracing::warn!(
                        "a recovered call was taken over by another process before it finished"
                    ),
                    Err(e) => {
                        tracing::error!(
                            error = format!("{e:#}"),
                            "a recovered call could not be finished"
                        );
                        claimed::fail_unfinished(&app, &call, answer.as_ref(), &fence).await;
                    }
                }
            },
            span,
        ));
    }
    Ok(())
}

/// Renews this process's lease and claims lapsed ones, three times a lease, forever.
pub async fn lease_forever(app: App) {
    let mut tick = tokio::time::interval(app.store.renew_every());
    tick.tick().await;
    loop {
        tick.tick().await;
        match app.store.leases().renew().await {
            Ok(Renewal::Renewed) => {}
            Ok(Renewal::Replaced) => tracing::error!(
                "this process's lease had lapsed and was claimed; it took a new one, and what it was doing under the old one is finished by another process"
            ),
            Err(e) => tracing::warn!(error = format!("{e:#}"), "the lease could not be renewed"),
        }
        if let Err(e) = recover(&app, false).await {
            tracing::warn!(error = format!("{e:#}"), "recovery of lapsed leases failed");
        }
    }
}

/// Delivers `call` again (or fails it as interrupted), then continues its turn
/// into the interrupted answer.
async fn finish(
    app: &App,
    call: &CallRow,
    answer: Option<StreamingAnswer>,
    fence: &Fence,
) -> anyhow::Result<()> {
    let site = app.site(&call.site).cloned();
    let tools = match &site {
        Some(site) => Some(site.tools.current(&app.store).await),
        None => None,
    };
    let plan = claimed::plan(tools.as_deref(), call);
    let Some(site) = site else {
        claimed::fail_unfinished(app, call, answer.as_ref(), fence).await;
        return Ok(());
    };
    let caller = Caller {
        language: crate::locale::resolve(&site.config.locale, ""),
        site,
        visitor: call.visitor.clone(),
        user_id: app.store.visitors().user(&call.visitor).await?,
    };
    let mut turn = Turn::headless(Arc::clone(app), caller, Sink::detached());
    turn.resume(call, answer.as_ref(), fence.clone());
    let outcome = match &plan {
        Plan::Deliver(tool, arguments) => {
            tracing::warn!(call = %call.id, delivery = call.deliveries, "delivering an interrupted call again");
            let (outcome, status) = turn.run_tool(&call.id, tool, &arguments.value).await?;
            run::record(app, call, &outcome, status, fence).await?;
            turn.send_step(&call.id, tool, status).await;
            outcome.result
        }
        Plan::Interrupted => {
            tracing::warn!(call = %call.id, "a call interrupted too often is failed");
            claimed::fail_interrupted(app, call, fence).await?;
            "The call was interrupted by a server fault and did not complete.".to_string()
        }
    };
    let Some(answer) = answer else {
        return Ok(());
    };
    let context = match transcript(call, &answer) {
        Ok(context) => context,
        Err(e) => {
            tracing::error!(
                error = format!("{e:#}"),
                "a recovered turn's transcript could not be read"
            );
            return claimed::fail_interrupted_answer(app, &answer, fence).await;
        }
    };
    let results = tool_results(app, call, &answer, &outcome).await?;
    let reserved = answer.share();
    let bubble = Bubble {
        id: answer.id,
        text: answer.text,
    };
    let message = bubble.id.clone();
    turn.continue_recovered(context, results, call, &outcome, bubble, reserved)
        .await?;
    // A widget open on the conversation sees the recovered answer at once,
    // and a "Waiting for a teammate" line its approval (a crash may have come
    // between the approval and its notice).
    if call.policy.asks_teammate() {
        crate::confirm::approval::tell_visitor(app, call, CallStatus::Confirmed).await;
    }
    crate::conversation::deliver(app, &call.conversation, &message).await
}

/// The transcript the turn resumes from: a card's own (for a confirmed call), or
/// the one the answer saved before its tool round (for an auto call).
fn transcript(call: &CallRow, answer: &StreamingAnswer) -> anyhow::Result<Vec<ChatMessage>> {
    let text = match call.kind {
        CallKind::Auto => answer.context.as_deref(),
        _ => call.context.as_deref(),
    };
    let text = text.ok_or_else(|| anyhow::anyhow!("no transcript was saved"))?;
    Ok(decode_transcript(text)?)
}

/// For an auto call, what the model is told of every call of the response that was
/// running: the stored results of calls that finished, the new outcome of this
/// one, a refusal note for refused ones. A confirmed call's transcript already
/// holds the others; its own result is added by the continuation.
async fn tool_results(
    app: &App,
    call: &CallRow,
    answer: &StreamingAnswer,
    outcome: &str,
) -> anyhow::Result<Vec<ChatMessage>> {
    if call.kind != CallKind::Auto {
        return Ok(Vec::new());
    }
    let context = decode_transcript(answer.context.as_deref().unwrap_or("[]"))?;
    let Some(ChatMessage::Assistant { tool_calls, .. }) = context.last() else {
        return Ok(Vec::new());
    };
    let rows = app.store.calls().of_message(&answer.id).await?;
    Ok(tool_calls
        .iter()
        .map(|tc| {
            let row = rows.iter().rev().find(|r| r.model_call_id == tc.id);
            let (content, is_error) = match row {
                Some(r) if r.id == call.id => {
                    (outcome.to_string(), call.status == CallStatus::Failed)
                }
                Some(r) if r.status == CallStatus::Refused => (
                    "Error: this call was refused and did not run.".to_string(),
                    true,
                ),
                Some(r) => match &r.result {
                    Some(result) => (result.clone(), r.status == CallStatus::Failed),
                    None => ("Not run: the turn was interrupted.".into(), true),
                },
                None => ("Not run: the turn was interrupted.".into(), true),
            };
            ChatMessage::Tool {
                tool_call_id: tc.id.clone(),
                content,
                is_error,
            }
        })
        .collect())
}
