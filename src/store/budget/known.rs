//! What this replica knows of each site's daily budget without asking the
//! database, for one decision: whether a question may ask the model before its
//! own budget read returns (`ask/turn/head.rs`). The turn's reservation still
//! decides whether it goes on; this only decides whether a model request may
//! be sent that would be dropped if the reservation were refused.
//!
//! What is known is the latest read's spent and reserved tokens, plus the
//! shares this replica reserved since that read began. A share noted while a
//! read is in flight may already be in what it found and is then counted twice,
//! which errs on the side of reading first; none is lost. Other replicas'
//! reservations since are not known; the caller leaves room for them.

use std::collections::HashMap;
use std::sync::Mutex;

use crate::clock::Millis;

#[derive(Default)]
pub(in crate::store) struct KnownBudgets {
    sites: Mutex<HashMap<String, Site>>,
}

#[derive(Default)]
struct Site {
    /// Every share this replica reserved of the site's budget, on any day.
    reserved_here: i64,
    last: Option<Known>,
}

struct Known {
    day: String,
    /// When the read was asked for (it began at or after this).
    read_at: Millis,
    /// Spent plus reserved tokens, as read and then reserved here.
    used: i64,
}

impl KnownBudgets {
    /// A mark to take just before a read of `site`'s budget begins, and to
    /// give back to `read` with what it found.
    pub(in crate::store) fn before_read(&self, site: &str) -> i64 {
        self.sites().get(site).map_or(0, |s| s.reserved_here)
    }

    /// A read of `site`'s budget for `day`, asked for at `read_at` and begun
    /// after `mark` was taken, found `used` tokens spent or reserved. It
    /// replaces what was known (reads of a site run one at a time,
    /// `site_reads.rs`), keeping the shares reserved here since it began.
    pub(in crate::store) fn read(
        &self,
        site: &str,
        day: &str,
        read_at: Millis,
        used: i64,
        mark: i64,
    ) {
        self.with_site(site, |site| {
            let since = site.reserved_here.saturating_sub(mark);
            site.last = Some(Known {
                day: day.to_string(),
                read_at,
                used: used.saturating_add(since),
            });
        });
    }

    /// This replica reserved `share` tokens of `site`'s budget for `day`.
    pub(in crate::store) fn reserved(&self, site: &str, day: &str, share: i64) {
        self.with_site(site, |site| {
            site.reserved_here = site.reserved_here.saturating_add(share);
            if let Some(known) = site.last.as_mut().filter(|k| k.day == day) {
                known.used = known.used.saturating_add(share);
            }
        });
    }

    /// The tokens of `site`'s budget for `day` spent or reserved as far as this
    /// replica knows, if it read them at `since` or later.
    pub(in crate::store) fn used(&self, site: &str, day: &str, since: Millis) -> Option<i64> {
        self.sites()
            .get(site)
            .and_then(|s| s.last.as_ref())
            .filter(|k| k.day == day && k.read_at >= since)
            .map(|k| k.used)
    }

    /// Runs `f` on the site's entry, made on first use: its name is copied
    /// only then, not on every turn's reservation.
    fn with_site<R>(&self, site: &str, f: impl FnOnce(&mut Site) -> R) -> R {
        let mut sites = self.sites();
        if let Some(known) = sites.get_mut(site) {
            return f(known);
        }
        f(sites.entry(site.to_string()).or_default())
    }

    fn sites(&self) -> std::sync::MutexGuard<'_, HashMap<String, Site>> {
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
        let mark = known.before_read("s");
        known.read("s", "d", 1_000, 300, mark);
        known.reserved("s", "d", 50);
        known.reserved("s", "other day", 7);
        known.reserved("t", "d", 7);
        assert_eq!(known.used("s", "d", 1_000), Some(350));
        let mark = known.before_read("s");
        known.read("s", "d", 2_000, 120, mark);
        assert_eq!(
            known.used("s", "d", 0),
            Some(120),
            "a later read replaces it"
        );
    }

    /// A share reserved while a read was in flight may have committed after the
    /// read looked: it is kept, not lost with what the read replaced.
    #[test]
    fn a_share_reserved_while_a_read_is_in_flight_is_kept() {
        let known = KnownBudgets::default();
        let mark = known.before_read("s");
        known.read("s", "d", 1_000, 100, mark);
        let mark = known.before_read("s");
        known.reserved("s", "d", 50);
        known.reserved("s", "d", 50);
        // The read did not see them.
        known.read("s", "d", 2_000, 100, mark);
        assert_eq!(known.used("s", "d", 0), Some(200));
    }

    #[test]
    fn a_read_older_than_asked_or_of_another_day_is_not_known() {
        let known = KnownBudgets::default();
        known.read("s", "d1", 1_000, 10, 0);
        assert_eq!(known.used("s", "d1", 1_001), None);
        assert_eq!(known.used("s", "d2", 0), None);
        assert_eq!(known.used("t", "d1", 0), None);
    }
}
