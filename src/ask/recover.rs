//! Finishing what a dead process left (SPEC §6.5, §16): no call is ever left
//! without an outcome, and no answer vanishes from history.
//!
//! A process that dies leaves calls marked running under its lease and answers
//! marked streaming. Once its lease has lapsed (at the next start on SQLite when
//! that start finds itself alone on the file; after `[server] lease_s` on a live
//! replica sharing PostgreSQL) one process claims them. Each running call is delivered again with
//! the same `Idempotency-Key` — unless three deliveries were already interrupted,
//! then it is failed with reason `interrupted` — its outcome is recorded with its
//! audit row and step line, and the turn's answer is generated and saved as for a
//! visitor who disconnected. An answer with no call to finish is marked failed,
//! keeping the text saved at its last checkpoint, and its budget reservation is
//! released.

use std::collections::HashMap;
use std::sync::Arc;

use super::Sink;
use super::turn::{Bubble, Turn, audit_outcome, estimate_tokens, step_event};
use crate::app::{App, Site};
use crate::guard::Caller;
use crate::llm::ChatMessage;
use crate::store::stored::decode_transcript;
use crate::store::{BudgetShare, CallRow, CallStatus, StreamingAnswer};
use crate::tools::Tool;
use crate::tools::arguments::Arguments;

/// A call is sent to its tool at most this often; a crash during the last
/// delivery fails it with reason `interrupted`.
pub const MAX_DELIVERIES: i64 = 3;

/// Claims the work of dead processes and finishes it in tracked tasks (so shutdown
/// waits for them). `at_start`: this process has just started (see
/// `Store::claim_dead`). Each item is finished on its own: one that fails is
/// logged and failed, and the rest go on.
pub async fn recover(app: &App, at_start: bool) -> anyhow::Result<()> {
    let claimed = app.store.claim_dead(at_start).await?;
    let mut answers: HashMap<String, StreamingAnswer> = claimed
        .answers
        .into_iter()
        .map(|a| (a.id.clone(), a))
        .collect();
    for call in claimed.calls {
        let bubble = match call.kind.as_str() {
            "auto" => Some(call.message.clone()),
            _ => call.run_message.clone(),
        };
        let answer = bubble.and_then(|id| answers.remove(&id));
        let app = Arc::clone(app);
        app.clone().turns.spawn(async move {
            let fallback = (call.clone(), answer.clone());
            if let Err(e) = finish_call(&app, call, answer).await {
                tracing::error!(
                    error = format!("{e:#}"),
                    "a recovered call could not be finished"
                );
                give_up(&app, fallback.0, fallback.1).await;
            }
        });
    }
    for answer in answers.into_values() {
        let spent = estimate_tokens(answer.text.len()) as i64;
        match app.store.fail_answer(&answer, spent).await {
            Ok(()) => {
                tracing::warn!(message = %answer.id, "an answer interrupted by a stop was marked failed")
            }
            Err(e) => {
                tracing::error!(error = format!("{e:#}"), message = %answer.id, "an interrupted answer could not be marked failed")
            }
        }
    }
    Ok(())
}

/// When finishing a recovered call failed (the database, say): the call is failed
/// as interrupted and its answer as failed, so neither is left without an end.
async fn give_up(app: &App, call: CallRow, answer: Option<StreamingAnswer>) {
    if let Err(e) = app
        .store
        .fail_interrupted_call(&call, app.clock.now_ms())
        .await
    {
        tracing::error!(error = format!("{e:#}"), call = %call.id, "a recovered call could not be failed either");
    }
    if let Err(e) = fail_answer(app, answer).await {
        tracing::error!(
            error = format!("{e:#}"),
            "a recovered answer could not be failed either"
        );
    }
}

/// Renews this process's lease and claims lapsed ones, three times a lease, forever.
pub async fn lease_forever(app: App) {
    let mut tick = tokio::time::interval(app.store.renew_every());
    tick.tick().await;
    loop {
        tick.tick().await;
        match app.store.renew_lease().await {
            Ok(true) => {}
            Ok(false) => tracing::error!(
                "this process's lease had lapsed and was taken anew; another process may have finished its calls"
            ),
            Err(e) => tracing::warn!(error = format!("{e:#}"), "the lease could not be renewed"),
        }
        if let Err(e) = recover(&app, false).await {
            tracing::warn!(error = format!("{e:#}"), "recovery of lapsed leases failed");
        }
    }
}

/// What a recovered call will run as, or why it cannot run again.
enum Plan {
    Deliver(Arc<Tool>, Arguments),
    Interrupted,
}

async fn finish_call(
    app: &App,
    call: CallRow,
    answer: Option<StreamingAnswer>,
) -> anyhow::Result<()> {
    let site = app.site(&call.site).cloned();
    let plan = plan(site.as_deref(), &call);
    let Some(site) = site else {
        app.store
            .fail_interrupted_call(&call, app.clock.now_ms())
            .await?;
        return fail_answer(app, answer).await;
    };
    let caller = Caller {
        site,
        visitor: call.visitor.clone(),
        user_id: app.store.visitor_user(&call.visitor).await?,
    };
    let mut turn = Turn::headless(Arc::clone(app), caller, Sink::detached());
    turn.resume(&call, answer.as_ref());
    let outcome = match &plan {
        Plan::Deliver(tool, arguments) => {
            tracing::warn!(call = %call.id, delivery = call.deliveries, "delivering an interrupted call again");
            let (outcome, status) = turn.run_tool(&call.id, tool, &arguments.value).await;
            let audit = audit_outcome(&call, &outcome, app.clock.now_ms());
            app.store
                .record_outcome(&call, status, Some(&outcome.result), &audit)
                .await?;
            turn.sink
                .send(step_event(&call.id, tool, status.as_str()))
                .await;
            outcome.result
        }
        Plan::Interrupted => {
            tracing::warn!(call = %call.id, "a call interrupted too often is failed");
            app.store
                .fail_interrupted_call(&call, app.clock.now_ms())
                .await?;
            "The call was interrupted by a server fault and did not complete.".to_string()
        }
    };
    let Some(answer) = answer else {
        return Ok(());
    };
    let context = match transcript(&call, &answer) {
        Ok(context) => context,
        Err(e) => {
            tracing::error!(
                error = format!("{e:#}"),
                "a recovered turn's transcript could not be read"
            );
            return fail_answer(app, Some(answer)).await;
        }
    };
    let tools = tool_results(app, &call, &answer, &outcome).await?;
    turn.recovered_share = answer.budget_day.clone().map(|day| BudgetShare {
        site: answer.site.clone(),
        day,
        reserved: answer.reserved,
        limit: 0,
    });
    turn.continue_recovered(
        context,
        tools,
        &call,
        &outcome,
        Bubble {
            id: answer.id,
            text: answer.text,
        },
    )
    .await
}

fn plan(site: Option<&Site>, call: &CallRow) -> Plan {
    if call.deliveries > MAX_DELIVERIES {
        return Plan::Interrupted;
    }
    let Some(tool) = site.and_then(|s| s.tools.get(&call.tool)) else {
        return Plan::Interrupted;
    };
    // A confirmed call runs only under the configuration the visitor saw; an
    // auto call only while its tool still runs automatically.
    let unchanged = match call.kind.as_str() {
        "auto" => tool.policy == crate::config::Policy::Auto,
        _ => call.config_digest.as_ref() == Some(&tool.digest),
    };
    if !unchanged {
        return Plan::Interrupted;
    }
    match Arguments::from_canonical(call.arguments.clone()) {
        Ok(arguments) => Plan::Deliver(Arc::clone(tool), arguments),
        Err(_) => Plan::Interrupted,
    }
}

/// The transcript the turn resumes from: a card's own (for a confirmed call), or
/// the one the answer saved before its tool round (for an auto call).
fn transcript(call: &CallRow, answer: &StreamingAnswer) -> anyhow::Result<Vec<ChatMessage>> {
    let text = match call.kind.as_str() {
        "auto" => answer.context.as_deref(),
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
    if call.kind != "auto" {
        return Ok(Vec::new());
    }
    let context = decode_transcript(answer.context.as_deref().unwrap_or("[]"))?;
    let Some(ChatMessage::Assistant { tool_calls, .. }) = context.last() else {
        return Ok(Vec::new());
    };
    let rows = app.store.calls_of_message(&answer.id).await?;
    Ok(tool_calls
        .iter()
        .map(|tc| {
            let row = rows.iter().rev().find(|r| r.model_call_id == tc.id);
            let content = match row {
                Some(r) if r.id == call.id => outcome.to_string(),
                Some(r) if r.status == CallStatus::Refused.as_str() => {
                    "Error: this call was refused and did not run.".to_string()
                }
                Some(r) => r
                    .result
                    .clone()
                    .unwrap_or_else(|| "Not run: the turn was interrupted.".into()),
                None => "Not run: the turn was interrupted.".into(),
            };
            ChatMessage::Tool {
                tool_call_id: tc.id.clone(),
                content,
            }
        })
        .collect())
}

async fn fail_answer(app: &App, answer: Option<StreamingAnswer>) -> anyhow::Result<()> {
    if let Some(answer) = answer {
        let spent = estimate_tokens(answer.text.len()) as i64;
        app.store.fail_answer(&answer, spent).await?;
    }
    Ok(())
}
