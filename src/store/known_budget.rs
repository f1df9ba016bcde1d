//! What this replica knows of each site's daily budget without asking the
//! database, for one decision: whether a question may ask the model before its
//! own budget read returns (`ask/turn/head.rs`). The turn's reservation still
//! decides whether it goes on; this only decides whether a model request may
//! be sent that would be dropped if the reservation were refused.
//!
//! What is known is the latest read's spent and reserved tokens, plus the
//! shares this replica reserved after it. Other replicas' reservations since
//! are not known; the caller leaves room for them.

use std::collections::HashMap;
use std::sync::Mutex;

use crate::clock::Millis;

#[derive(Default)]
pub(super) struct KnownBudgets {
    sites: Mutex<HashMap<String, Known>>,
}

struct Known {
    day: String,
    /// When the read was asked for (it began at or after this).
    read_at: Millis,
    /// Spent plus reserved tokens, as read and then reserved here.
    used: i64,
}

impl KnownBudgets {
    /// A read of `site`'s budget for `day`, asked for at `read_at`, found
    /// `used` tokens spent or reserved. It replaces what was known: reads of
    /// a site run one at a time (`site_reads.rs`), so it is the latest.
    pub(super) fn read(&self, site: &str, day: &str, read_at: Millis, used: i64) {
        let known = Known {
            day: day.to_string(),
            read_at,
            used,
        };
        self.sites().insert(site.to_string(), known);
    }

    /// This replica reserved `share` tokens of `site`'s budget for `day`.
    pub(super) fn reserved(&self, site: &str, day: &str, share: i64) {
        if let Some(known) = self.sites().get_mut(site).filter(|k| k.day == day) {
            known.used = known.used.saturating_add(share);
        }
    }

    /// The tokens of `site`'s budget for `day` spent or reserved as far as this
    /// replica knows, if it read them at `since` or later.
    pub(super) fn used(&self, site: &str, day: &str, since: Millis) -> Option<i64> {
        self.sites()
            .get(site)
            .filter(|k| k.day == day && k.read_at >= since)
            .map(|k| k.used)
    }

    fn sites(&self) -> std::sync::MutexGuard<'_, HashMap<String, Known>> {
        // A poisoned map only means another thread panicked between two plain
        // map operations; the map itself is still whole.
        self.sites.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reservations_made_here_after_a_read_add_to_it() {
        let known = KnownBudgets::default();
        assert_eq!(known.used("s", "d", 0), None, "nothing read yet");
        known.reserved("s", "d", 50);
        assert_eq!(
            known.used("s", "d", 0),
            None,
            "a reservation alone is no read"
        );
        known.read("s", "d", 1_000, 300);
        known.reserved("s", "d", 50);
        known.reserved("s", "other day", 7);
        known.reserved("t", "d", 7);
        assert_eq!(known.used("s", "d", 1_000), Some(350));
        known.read("s", "d", 2_000, 120);
        assert_eq!(
            known.used("s", "d", 0),
            Some(120),
            "a later read replaces it"
        );
    }

    #[test]
    fn a_read_older_than_asked_or_of_another_day_is_not_known() {
        let known = KnownBudgets::default();
        known.read("s", "d1", 1_000, 10);
        assert_eq!(known.used("s", "d1", 1_001), None);
        assert_eq!(known.used("s", "d2", 0), None);
        assert_eq!(known.used("t", "d1", 0), None);
    }
}
