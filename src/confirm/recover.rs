//! Recovering after a crash (SPEC §6.5, §16): what a dead process left — calls
//! marked running under its lease, answers marked streaming — is claimed by one
//! other process (`Store::claim_dead`). An answer with no call to finish is failed
//! here, keeping the text saved at its last checkpoint and releasing its budget
//! reservation. Each running call is delivered again with the same
//! `Idempotency-Key` unless three deliveries were already cut short, its tool
//! changed or it is an MCP tool, which has no such key (then it is failed as
//! `interrupted`); the turn engine does that and
//! saves the continuation (`ask::recover`).

use std::collections::HashMap;
use std::sync::Arc;

use crate::app::App;
use crate::config::Policy;
use crate::llm::estimate_tokens;
use crate::states::CallKind;
use crate::store::{CallRow, Fence, StreamingAnswer};
use crate::tools::arguments::Arguments;
use crate::tools::{Tool, Toolbox};

/// A call is sent to its tool at most this often; a crash during the last
/// delivery fails it with reason `interrupted`.
pub const MAX_DELIVERIES: i64 = 3;

/// A call a dead process was running, with the answer it was streaming into,
/// both now stamped with `fence`.
pub struct Interrupted {
    pub call: CallRow,
    pub answer: Option<StreamingAnswer>,
    pub fence: Fence,
}

/// Claims what dead processes left (`at_start`: see `Store::claim_dead`). Answers
/// with no running call are failed here; the calls are returned to be finished.
pub async fn claim(app: &App, at_start: bool) -> anyhow::Result<Vec<Interrupted>> {
    let claimed = app.store.leases().claim_dead(at_start).await?;
    let fence = claimed.fence.clone();
    let mut answers: HashMap<String, StreamingAnswer> = claimed
        .answers
        .into_iter()
        .map(|a| (a.id.clone(), a))
        .collect();
    let calls = claimed
        .calls
        .into_iter()
        .map(|call| {
            let bubble = match call.kind {
                CallKind::Auto => Some(call.message.clone()),
                _ => call.run_message.clone(),
            };
            let answer = bubble.and_then(|id| answers.remove(&id));
            Interrupted {
                call,
                answer,
                fence: fence.clone(),
            }
        })
        .collect();
    // Failed in tasks of their own (tracked, so shutdown waits for them): the
    // write is retried while the database is busy, and the lease's renewal,
    // which called this, must not wait for it.
    for answer in answers.into_values() {
        let (app, fence) = (Arc::clone(app), fence.clone());
        app.clone().turns.spawn(async move {
            match fail_interrupted_answer(&app, &answer, &fence).await {
                Ok(()) => {
                    tracing::warn!(message = %answer.id, "an answer interrupted by a stop was marked failed")
                }
                Err(e) => {
                    tracing::error!(error = format!("{e:#}"), message = %answer.id, "an interrupted answer could not be marked failed")
                }
            }
        });
    }
    Ok(calls)
}

/// What a recovered call will run as, or why it cannot run again.
pub enum Plan {
    Deliver(Arc<Tool>, Arguments),
    Interrupted,
}

pub fn plan(tools: Option<&Toolbox>, call: &CallRow) -> Plan {
    if call.deliveries > MAX_DELIVERIES {
        return Plan::Interrupted;
    }
    let Some(tool) = tools.and_then(|t| t.get(&call.tool)) else {
        return Plan::Interrupted;
    };
    // A confirmed call runs only under the configuration the visitor saw; an
    // auto call only while its tool still runs automatically.
    let unchanged = match call.kind {
        CallKind::Auto => tool.policy == Policy::Auto,
        _ => call.config_digest.as_ref() == Some(&tool.digest),
    };
    // MCP has no idempotency key: a call its server may already have carried
    // out is not sent again (at most once beats twice for a write).
    if !unchanged || tool.mcp.is_some() {
        return Plan::Interrupted;
    }
    match Arguments::from_canonical(call.arguments.clone()) {
        Ok(arguments) => Plan::Deliver(Arc::clone(tool), arguments),
        Err(_) => Plan::Interrupted,
    }
}

/// Marks an interrupted answer failed, charging an estimate of its saved text.
pub async fn fail_interrupted_answer(
    app: &App,
    answer: &StreamingAnswer,
    fence: &Fence,
) -> anyhow::Result<()> {
    let spent = estimate_tokens(answer.text.len()) as i64;
    let store = &app.store;
    Ok(store
        .leases()
        .until_written(fence, "an interrupted answer", || {
            store.leases().fail_interrupted_answer(answer, spent, fence)
        })
        .await?)
}

/// Fails a call interrupted too often (or not to be delivered again) as
/// `interrupted`, written until it lands.
pub async fn fail_interrupted(
    app: &App,
    call: &CallRow,
    fence: &Fence,
) -> crate::store::StoreResult<()> {
    let store = &app.store;
    store
        .leases()
        .until_written(fence, "an interrupted call", || {
            store
                .calls()
                .fail_interrupted(call, app.clock.now_ms(), fence)
        })
        .await
}

/// When finishing a recovered call failed (the database, say): the call is failed
/// as interrupted and its answer as failed, so neither is left without an end.
pub async fn fail_unfinished(
    app: &App,
    call: &CallRow,
    answer: Option<&StreamingAnswer>,
    fence: &Fence,
) {
    if let Err(e) = fail_interrupted(app, call, fence).await {
        tracing::error!(error = format!("{e:#}"), call = %call.id, "a recovered call could not be failed either");
    }
    if let Some(answer) = answer
        && let Err(e) = fail_interrupted_answer(app, answer, fence).await
    {
        tracing::error!(
            error = format!("{e:#}"),
            "a recovered answer could not be failed either"
        );
    }
}
