//! Chosen crash points for the crash tests. With `DESKBELL_CRASH_AT=<name>` in its
//! environment, the process aborts — no destructor runs, nothing more is written,
//! as under kill -9 — when it reaches the point of that name. Without the variable
//! (always, outside those tests) a point costs one comparison.

use std::sync::OnceLock;

static CRASH_AT: OnceLock<Option<String>> = OnceLock::new();

/// Aborts the process here if the crash tests asked for this point.
pub fn reached(name: &str) {
    let at = CRASH_AT.get_or_init(|| std::env::var("DESKBELL_CRASH_AT").ok());
    if at.as_deref() == Some(name) {
        eprintln!("deskbell: crash point {name} reached; aborting as asked");
        std::process::abort();
    }
}
