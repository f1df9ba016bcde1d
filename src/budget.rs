//! Each site's daily token budget (SPEC §5), its rules in one place: a turn
//! reserves its cap (`max_tokens_per_turn`) before it starts and settles to what it
//! spent when it ends — what the provider reported, plus an estimate for rounds
//! it reported nothing for — so turns running at once overshoot the budget by one
//! turn's cap at the most. The budget is *spent* only when settled spend reaches
//! it; running turns' reservations are a moment's wait. The SQL is
//! `store/budgets.rs`; spend is stored, so a restart forgets nothing.

use chrono::{DateTime, Utc};

use crate::clock::Millis;
use crate::error::ApiError;
use crate::wire::Usage;

/// A turn's reservation of its site's daily budget.
#[derive(Debug, Clone)]
pub struct BudgetShare {
    pub site: String,
    pub day: String,
    /// What the turn reserves (its token cap).
    pub reserved: i64,
    /// The site's daily budget.
    pub limit: i64,
}

impl BudgetShare {
    /// What one turn of `site` reserves of its day's budget at `now`: its
    /// token cap, never more than the whole day's budget (with a cap above it,
    /// one turn could spend past the budget on its own).
    /// `per_turn` and `daily` are the site's `max_tokens_per_turn` and
    /// `daily_token_budget`.
    pub fn for_turn(site: &str, per_turn: u64, daily: u64, now: Millis) -> BudgetShare {
        BudgetShare {
            site: site.to_string(),
            day: utc_day(now),
            reserved: (per_turn as i64).min(daily as i64),
            limit: daily as i64,
        }
    }
}

/// Whether a turn may reserve: the budget is spent only when the day's settled
/// spend has reached it; when running turns' reservations are what stands in the
/// way, they will be settled within a turn's time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reservation {
    Reserved,
    /// Spent tokens have reached the budget: nothing more today.
    Spent,
    /// Only other turns' reservations stand in the way: try again in a moment.
    Held,
}

/// Seconds a client is asked to wait when running turns hold the rest of the budget.
const HELD_RETRY_AFTER_S: u64 = 3;

/// How a reservation would go with this much spent and reserved.
pub fn judge(spent: i64, reserved: i64, limit: i64) -> Reservation {
    if spent >= limit {
        Reservation::Spent
    } else if spent + reserved >= limit {
        Reservation::Held
    } else {
        Reservation::Reserved
    }
}

/// The refusal for a budget that could not be reserved: `daily_budget_exhausted`
/// (until midnight UTC) only when the day's spent tokens reached the budget; when
/// running turns' reservations stand in the way, `too_many_streams` for a moment.
pub fn budget_refusal(reservation: Reservation, now: Millis) -> ApiError {
    match reservation {
        Reservation::Held => ApiError::TooManyStreams(HELD_RETRY_AFTER_S),
        _ => ApiError::DailyBudgetExhausted(seconds_to_midnight(now)),
    }
}

/// What a turn spent: what the provider reported, plus the estimate for rounds it
/// reported no usage for.
pub fn spent(usage: Usage, unreported: u64) -> i64 {
    (usage.input_tokens + usage.output_tokens + unreported) as i64
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
