//! `[site.handoff] hours` (SPEC §19): when people are there to answer, as
//! `"Mon-Fri 09:00-17:00 Europe/Berlin"` — days (single days or ranges, comma
//! separated; a range may wrap, as `Sat-Mon`), one span of the day, and an IANA
//! time zone. The span is read on the zone's own wall clock through jiff's
//! time zone database (bundled, so a machine without one still knows), so a
//! change to or from summer time moves the hours with the clock on the wall.

use jiff::Timestamp;
use jiff::tz::TimeZone;

use crate::clock::Millis;

const DAYS: [&str; 7] = ["mon", "tue", "wed", "thu", "fri", "sat", "sun"];

/// Parsed hours.
#[derive(Debug, Clone)]
pub struct Hours {
    /// Monday first.
    days: [bool; 7],
    /// Minutes after midnight, `open` < `close` (`close` may be 24:00).
    open: u16,
    close: u16,
    zone: TimeZone,
}

impl Hours {
    pub fn parse(text: &str) -> Result<Hours, String> {
        let parts: Vec<&str> = text.split_whitespace().collect();
        let [days, span, zone] = parts.as_slice() else {
            return Err(
                "must be days, a span of the day and a time zone, as \"Mon-Fri 09:00-17:00 Europe/Berlin\""
                    .into(),
            );
        };
        let days = parse_days(days)?;
        let (open, close) = span
            .split_once('-')
            .ok_or_else(|| format!("{span:?} is not a span such as 09:00-17:00"))?;
        let (open, close) = (minutes(open)?, minutes(close)?);
        if open >= close {
            return Err(format!(
                "{span:?} must open before it closes on the same day"
            ));
        }
        let zone = TimeZone::get(zone)
            .map_err(|_| format!("{zone:?} is not a time zone of the IANA database"))?;
        Ok(Hours {
            days,
            open,
            close,
            zone,
        })
    }

    /// Whether the hours are open at `at` (milliseconds since the epoch).
    pub fn open_at(&self, at: Millis) -> bool {
        let Ok(instant) = Timestamp::from_millisecond(at) else {
            return false;
        };
        let local = instant.to_zoned(self.zone.clone());
        let day = usize::from(local.weekday().to_monday_zero_offset().unsigned_abs());
        let minute = local.hour() as u16 * 60 + local.minute() as u16;
        self.days[day] && self.open <= minute && minute < self.close
    }
}

fn parse_days(text: &str) -> Result<[bool; 7], String> {
    let mut days = [false; 7];
    for item in text.split(',') {
        let (first, last) = match item.split_once('-') {
            Some((a, b)) => (day(a)?, day(b)?),
            None => (day(item)?, day(item)?),
        };
        let mut d = first;
        loop {
            days[d] = true;
            if d == last {
                break;
            }
            d = (d + 1) % 7;
        }
    }
    Ok(days)
}

fn day(text: &str) -> Result<usize, String> {
    let lower = text.to_ascii_lowercase();
    DAYS.iter()
        .position(|d| *d == lower)
        .ok_or_else(|| format!("{text:?} is not a day (Mon, Tue, Wed, Thu, Fri, Sat, Sun)"))
}

fn minutes(text: &str) -> Result<u16, String> {
    let bad = || format!("{text:?} is not a time such as 09:00");
    let (h, m) = text.split_once(':').ok_or_else(bad)?;
    if h.len() != 2 || m.len() != 2 {
        return Err(bad());
    }
    let (h, m): (u16, u16) = (h.parse().map_err(|_| bad())?, m.parse().map_err(|_| bad())?);
    match (h, m) {
        (24, 0) => Ok(24 * 60),
        (0..=23, 0..=59) => Ok(h * 60 + m),
        _ => Err(bad()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(utc: &str) -> Millis {
        utc.parse::<Timestamp>().unwrap().as_millisecond()
    }

    /// 29 March 2026: Berlin moves from UTC+1 to UTC+2 at 02:00. At 15:01 UTC
    /// the wall clock says 17:01, after closing; a fixed UTC+1 would say 16:01.
    #[test]
    fn hours_follow_the_wall_clock_across_a_change_to_summer_time() {
        let hours = Hours::parse("Mon-Sun 09:00-17:00 Europe/Berlin").unwrap();
        assert!(
            !hours.open_at(ms("2026-03-29T15:01:00Z")),
            "17:01 in Berlin"
        );
        assert!(hours.open_at(ms("2026-03-29T14:59:00Z")), "16:59 in Berlin");
        assert!(
            hours.open_at(ms("2026-03-28T15:59:00Z")),
            "16:59 the day before, UTC+1"
        );
        assert!(
            !hours.open_at(ms("2026-03-28T16:01:00Z")),
            "17:01 the day before"
        );
    }

    #[test]
    fn days_ranges_wrap_and_single_days_count() {
        let hours = Hours::parse("Sat-Mon,Wed 00:00-24:00 UTC").unwrap();
        // 2026-12-05 is a Saturday.
        for (day, open) in [
            ("2026-12-05", true),
            ("2026-12-06", true),
            ("2026-12-07", true),
            ("2026-12-08", false),
            ("2026-12-09", true),
            ("2026-12-10", false),
        ] {
            assert_eq!(
                hours.open_at(ms(&format!("{day}T12:00:00Z"))),
                open,
                "{day}"
            );
        }
    }

    #[test]
    fn malformed_hours_are_refused_with_what_is_wrong() {
        for (text, says) in [
            ("Mon-Fri 09:00-17:00", "must be days"),
            ("Mon-Fry 09:00-17:00 UTC", "\"Fry\" is not a day"),
            ("Mon-Fri 9:00-17:00 UTC", "not a time"),
            ("Mon-Fri 17:00-09:00 UTC", "open before it closes"),
            ("Mon-Fri 09:00-25:00 UTC", "not a time"),
            ("Mon-Fri 09:00-17:00 Mars/Olympus", "not a time zone"),
        ] {
            let e = Hours::parse(text).unwrap_err();
            assert!(e.contains(says), "{text}: {e}");
        }
    }
}
