//! The confirmation flow (SPEC §6–§8, `../shared/seeds/confirmation.txt`), in one
//! place. A tool whose policy is *Needs confirmation* never runs inside a turn:
//!
//! 1. **Raise a card** (`card::raise`): the call is stored pending with its
//!    canonical arguments, the lines the visitor reads, an expiry and a signature
//!    over all of it, and the card is shown. The turn stops.
//! 2. **Verify an answer** (`verify::verify_answer`): ownership, pending,
//!    unexpired, unchanged tool, signature — before anything runs; every refusal
//!    is audited.
//! 3. **Decide** (`decide::decide`): the one conditional pending → decided update,
//!    which also marks a confirmed call running under this process. Of racing
//!    answers, one wins.
//! 4. **Run the decided call** (`run::prepare`, `run::record`): exactly the stored
//!    arguments, read before the decision; the outcome with its audit row, written
//!    only by the call's owner.
//! 5. **Recover after a crash** (`recover::claim`, `recover::plan`): a dead
//!    process's running calls are delivered again (same `Idempotency-Key`, at most
//!    three deliveries) or failed as `interrupted`.
//!
//! The model rounds around all this — the turn that raises a card, the
//! continuation that follows an answer — are the turn engine's (`ask/`), which
//! calls these functions; nothing here calls back into it. Expired cards are
//! swept by `expiry.rs`; the signature is `sign.rs`. ARCHITECTURE.md maps each
//! sentence of the seed to its code and test.

pub mod approval;
pub mod card;
pub mod decide;
pub mod edit;
pub mod expiry;
pub mod quota;
pub mod recover;
pub mod run;
pub mod sign;
pub mod verify;
pub mod webhook;

pub use verify::{Verified, refuse, verify_answer};
