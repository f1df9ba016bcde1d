//! What an ask needs before its turn starts: some of the site's daily token budget
//! left (`budget.rs`; its share is reserved in the turn's first transaction) and a
//! slot under the stream caps. Both are given back when the turn ends.

use super::Caller;
use super::streams::StreamSlot;
use crate::app::App;
use crate::budget::{BudgetShare, Reservation, budget_refusal};
use crate::error::ApiError;

/// Seconds a client is asked to wait when the stream caps are full.
const STREAMS_RETRY_AFTER_S: u64 = 5;
/// Held by a running turn: its share of the daily budget, settled when the turn is
/// saved, and its stream slot, freed when this value is dropped, whatever happens.
pub struct Admission {
    share: BudgetShare,
    _slot: StreamSlot,
}

impl Admission {
    /// The most tokens the turn may use; it starts no model round past this.
    pub fn cap(&self) -> u64 {
        self.share.reserved as u64
    }

    pub fn share(&self) -> &BudgetShare {
        &self.share
    }
}

/// The budget (429 `daily_budget_exhausted`, until midnight UTC), then the stream
/// caps (429 `too_many_streams`), in the order of SPEC §5.
pub async fn admit_turn(app: &App, caller: &Caller) -> Result<Admission, ApiError> {
    reserve(app, caller, true)
        .await
        .inspect_err(|e| crate::ops::metrics::guard_refused(e.code()))
}

/// For a question: the stream caps now, and the budget read by the turn itself
/// (`budget_open_with_tool_version`) beside its other reads, so the model is
/// asked one database round trip sooner. A question refused by the stream caps
/// is told about a spent budget first, as SPEC §5 orders them.
pub async fn admit_question(app: &App, caller: &Caller) -> Result<Admission, ApiError> {
    reserve(app, caller, false)
        .await
        .inspect_err(|e| crate::ops::metrics::guard_refused(e.code()))
}

/// Whether the turn's share could be reserved now (a read: the reservation is
/// part of the turn's first transaction, so a turn costs one commit fewer), and
/// the site's tool version, read together: a question's reads before it asks
/// the model are then one database round trip.
pub async fn budget_open_with_tool_version(
    app: &App,
    share: &BudgetShare,
) -> Result<i64, ApiError> {
    read_budget_and_tool_version(app, share)
        .await
        .inspect_err(|e| crate::ops::metrics::guard_refused(e.code()))
}

async fn read_budget_and_tool_version(app: &App, share: &BudgetShare) -> Result<i64, ApiError> {
    match app
        .store
        .budget()
        .and_tool_version(share, app.clock.now_ms())
        .await?
    {
        (Reservation::Reserved, version) => Ok(version),
        (refusal, _) => Err(super::refused(budget_refusal(refusal, app.clock.now_ms()))),
    }
}

async fn check_budget(app: &App, share: &BudgetShare) -> Result<(), ApiError> {
    match app.store.budget().open(share).await? {
        Reservation::Reserved => Ok(()),
        refusal => Err(super::refused(budget_refusal(refusal, app.clock.now_ms()))),
    }
}

async fn reserve(app: &App, caller: &Caller, budget_first: bool) -> Result<Admission, ApiError> {
    let limits = &caller.site.config.limits;
    let site = caller.site.config.id.clone();
    let now = app.clock.now_ms();
    let share = BudgetShare::for_turn(
        &site,
        limits.max_tokens_per_turn,
        limits.daily_token_budget,
        now,
    );
    if budget_first {
        check_budget(app, &share).await?;
    }
    let keys = [
        (
            format!("v|{site}|{}", caller.visitor),
            limits.concurrent_streams_per_visitor,
        ),
        (format!("s|{site}"), limits.concurrent_streams),
    ];
    let slot = match app.counters.acquire(&keys).await {
        Ok(Some(slot)) => slot,
        refused => {
            if !budget_first {
                check_budget(app, &share).await?;
            }
            return Err(super::refused(match refused {
                Err(r) => super::refusal_error(r, ApiError::TooManyStreams),
                Ok(_) => ApiError::TooManyStreams(STREAMS_RETRY_AFTER_S),
            }));
        }
    };
    Ok(Admission { share, _slot: slot })
}

/// At most this many live channels (`GET /v1/conversations/{id}/events`) per
/// visitor and site at once: a widget open in a few tabs, not a flood.
pub const EVENT_STREAMS_PER_VISITOR: u32 = 8;

/// A slot for one visitor's live channel (SPEC §19), counted like answer
/// streams (across replicas when Redis is configured); 429 `too_many_streams`
/// past the cap.
pub async fn admit_event_stream(app: &App, caller: &Caller) -> Result<StreamSlot, ApiError> {
    let keys = [(
        format!("e|{}|{}", caller.site.config.id, caller.visitor),
        EVENT_STREAMS_PER_VISITOR,
    )];
    match app.counters.acquire(&keys).await {
        Ok(Some(slot)) => Ok(slot),
        Ok(None) => Err(super::refused(ApiError::TooManyStreams(
            STREAMS_RETRY_AFTER_S,
        ))),
        Err(r) => Err(super::refused(super::refusal_error(
            r,
            ApiError::TooManyStreams,
        ))),
    }
}
