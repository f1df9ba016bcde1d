//! What an ask needs before its turn starts: some of the site's daily token budget
//! left (its share is reserved in the turn's first transaction) and a slot under
//! the stream caps. Both are given back when the turn ends.

use chrono::{DateTime, Utc};

use super::Caller;
use super::streams::StreamSlot;
use crate::app::App;
use crate::clock::Millis;
use crate::error::ApiError;
use crate::store::{BudgetShare, Reservation};

/// Seconds a client is asked to wait when the stream caps are full.
const STREAMS_RETRY_AFTER_S: u64 = 5;
/// Seconds a client is asked to wait when running turns hold the rest of the budget.
const HELD_RETRY_AFTER_S: u64 = 3;

/// The refusal for a budget that could not be reserved: `daily_budget_exhausted`
/// (until midnight UTC) only when the day's spent tokens reached the budget; when
/// running turns' reservations stand in the way, `too_many_streams` for a moment.
pub fn budget_refusal(reservation: Reservation, now: Millis) -> ApiError {
    match reservation {
        Reservation::Held => ApiError::TooManyStreams(HELD_RETRY_AFTER_S),
        _ => ApiError::DailyBudgetExhausted(seconds_to_midnight(now)),
    }
}

/// Held by a running turn: its share of the daily budget, settled when the turn is
/// saved, and its stream slot, freed when this value is dropped, whatever happens.
pub struct Admission {
    share: BudgetShare,
    /// Set once the turn's first transaction has reserved the share.
    reserved: bool,
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

    /// The share to settle with the turn's last write, if it was reserved.
    pub fn reserved_share(&self) -> Option<&BudgetShare> {
        self.reserved.then_some(&self.share)
    }

    pub fn mark_reserved(&mut self) {
        self.reserved = true;
    }
}

/// The budget (429 `daily_budget_exhausted`, until midnight UTC), then the stream
/// caps (429 `too_many_streams`), in the order of SPEC §5.
pub async fn admit_turn(app: &App, caller: &Caller) -> Result<Admission, ApiError> {
    let limits = &caller.site.config.limits;
    let site = caller.site.config.id.clone();
    let now = app.clock.now_ms();
    let share = BudgetShare {
        site: site.clone(),
        day: utc_day(now),
        reserved: limits.max_tokens_per_turn as i64,
        limit: limits.daily_token_budget as i64,
    };
    // A read here; the reservation is part of the turn's first transaction, so a
    // turn costs one commit fewer.
    match app.store.budget_open(&share).await? {
        Reservation::Reserved => {}
        refusal => return Err(super::refused(budget_refusal(refusal, now))),
    }
    let keys = [
        (
            format!("v|{site}|{}", caller.visitor),
            limits.concurrent_streams_per_visitor,
        ),
        (format!("s|{site}"), limits.concurrent_streams),
    ];
    let Some(slot) = app.counters.acquire(&keys) else {
        return Err(super::refused(ApiError::TooManyStreams(
            STREAMS_RETRY_AFTER_S,
        )));
    };
    Ok(Admission {
        share,
        reserved: false,
        _slot: slot,
    })
}

pub fn utc_day(ms: Millis) -> String {
    DateTime::<Utc>::from_timestamp_millis(ms)
        .unwrap_or_default()
        .format("%Y-%m-%d")
        .to_string()
}

pub fn seconds_to_midnight(ms: Millis) -> u64 {
    let day_ms = 86_400_000;
    let left = day_ms - ms.rem_euclid(day_ms);
    ((left + 999) / 1000) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_resets_at_midnight_utc() {
        let noon = 1_764_504_000_000; // 2025-11-30T12:00:00Z
        assert_eq!(utc_day(noon), "2025-11-30");
        assert_eq!(seconds_to_midnight(noon), 12 * 3600);
        assert_eq!(seconds_to_midnight(noon + 12 * 3_600_000 - 1), 1);
    }
}
