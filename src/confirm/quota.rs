//! Quotas (SPEC §20): which use of a tool's quota a new call would hold, and
//! what the model is told when the quota is spent. The counting itself is the
//! store's, in the transaction that stores the call (`store::quotas`).

use chrono::{DateTime, Utc};

use crate::clock::Millis;
use crate::config::{Quota, QuotaPer, QuotaWindow};
use crate::store::QuotaUse;

/// The use a call by `visitor` at `now` holds of `quota`.
pub fn use_of(quota: &Quota, visitor: &str, now: Millis) -> QuotaUse {
    let subject = match quota.per {
        QuotaPer::Visitor => visitor.to_string(),
        // A visitor id never is '*'.
        QuotaPer::Site => "*".to_string(),
    };
    QuotaUse {
        subject,
        period: period(quota.window, now),
        note: None,
    }
}

/// The UTC day (`2026-12-04`) or month (`2026-12`) that `now` falls in.
pub fn period(window: QuotaWindow, now: Millis) -> String {
    let at = DateTime::<Utc>::from_timestamp_millis(now).unwrap_or_default();
    match window {
        QuotaWindow::Day => at.format("%Y-%m-%d").to_string(),
        QuotaWindow::Month => at.format("%Y-%m").to_string(),
    }
}

pub fn window_name(window: QuotaWindow) -> &'static str {
    match window {
        QuotaWindow::Day => "day",
        QuotaWindow::Month => "month",
    }
}

/// What the model is told of a call refused because its quota is spent.
pub fn spent(quota: &Quota) -> String {
    let who = match quota.per {
        QuotaPer::Visitor => "this visitor",
        QuotaPer::Site => "this site",
    };
    format!(
        "Not run: the tool may run at most {} times for {who} per UTC {}, and that is used up. \
         Tell the visitor so; do not call this tool again in this conversation.",
        quota.max,
        window_name(quota.window)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_use_is_counted_in_its_utc_day_or_month() {
        // 2026-12-31T23:59:59.999Z, one millisecond before the new year.
        let now = 1_798_761_599_999;
        assert_eq!(period(QuotaWindow::Day, now), "2026-12-31");
        assert_eq!(period(QuotaWindow::Month, now), "2026-12");
        assert_eq!(period(QuotaWindow::Month, now + 1), "2027-01");
        let site = Quota {
            per: QuotaPer::Site,
            window: QuotaWindow::Day,
            max: 3,
        };
        assert_eq!(use_of(&site, "v_1", now).subject, "*");
    }
}
