//! What the database holds of a turn's answer, as explicit states, and so what
//! the turn still owes it. The rules behind them are `store::ownership`'s: an
//! answer's row is written under the turn's fence; while it streams, its end
//! (answered, or failed) and its budget settlement are owed exactly once; once
//! another process has taken it over, this turn writes nothing more.
//!
//! A turn moves only forward: `Unwritten` → `Open` → `Ended` or `TakenOver`.
//! Each transition is a method that consumes the state it leaves and returns
//! the next, so a turn cannot end or fail an answer it never opened, settle one
//! twice, or open a second: those steps do not compile. `Written` is the turn's
//! field that holds whichever state it is in.

use crate::budget::BudgetShare;

/// Nothing of the answer is written yet: a failure owes the database nothing.
pub(in crate::ask) struct Unwritten;

/// The answer's row is written and streams under the turn's fence. Its end must
/// be written (`Open::ended`), or, if the turn cannot write it, the row is
/// failed when the turn settles; either way `share` is settled with that write.
pub(in crate::ask) struct Open {
    pub bubble: String,
    /// The reservation the answer's last write settles: the turn's own share,
    /// or, for a turn finished after a crash, the dead turn's.
    pub share: Option<BudgetShare>,
}

/// The answer's end is written with its settlement: nothing more is owed.
pub(in crate::ask) struct Ended;

/// Another process took the answer over (this process's lease lapsed): that
/// process ends and settles it; this turn only tells its visitor so.
pub(in crate::ask) struct TakenOver;

impl Unwritten {
    /// The answer's first write landed, reserving `share`.
    pub fn open(self, bubble: String, share: Option<BudgetShare>) -> Open {
        Open { bubble, share }
    }

    /// Another process holds the turn's work before this turn wrote its answer
    /// (a continuation whose call was claimed).
    pub fn taken_over(self) -> TakenOver {
        TakenOver
    }
}

impl Open {
    /// The answer's end (or its failure) was written with its settlement.
    pub fn ended(self) -> Ended {
        Ended
    }

    /// A fenced write found the answer's rows stamped by another process.
    pub fn taken_over(self) -> TakenOver {
        TakenOver
    }
}

/// The state a turn is in.
pub(in crate::ask) enum Written {
    Unwritten(Unwritten),
    Open(Open),
    Ended(Ended),
    TakenOver(TakenOver),
}

impl Written {
    pub fn new() -> Written {
        Written::Unwritten(Unwritten)
    }

    /// Takes the state out for a transition; the turn puts the next one back.
    /// `Ended` stands in meanwhile: a transition that fails half-way owes nothing
    /// it did not say it owes.
    pub fn take(&mut self) -> Written {
        std::mem::replace(self, Written::Ended(Ended))
    }

    /// The reservation an open answer settles.
    pub fn share(&self) -> Option<&BudgetShare> {
        match self {
            Written::Open(open) => open.share.as_ref(),
            _ => None,
        }
    }

    /// Any state → `TakenOver`: once a fenced write finds the work claimed,
    /// nothing of this turn is written again.
    pub fn taken_over(&mut self) {
        *self = match self.take() {
            Written::Unwritten(unwritten) => Written::TakenOver(unwritten.taken_over()),
            Written::Open(open) => Written::TakenOver(open.taken_over()),
            // An answer whose end was written stays ended: the claim found
            // nothing of it to take (`owned` counts no row of an ended answer).
            Written::Ended(ended) => Written::Ended(ended),
            Written::TakenOver(taken) => Written::TakenOver(taken),
        };
    }
}
