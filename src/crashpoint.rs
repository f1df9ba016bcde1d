//! Chosen crash points for the crash tests. With `DESKBELL_CRASH_AT=<name>` in its
//! environment, the process aborts — no destructor runs, nothing more is written,
//! as under kill -9 — when it reaches the point of that name. With
//! `DESKBELL_PAUSE_AT=<name>` it stops itself there instead (SIGSTOP, once), as a
//! long pause of a live process would, until the test sends SIGCONT. Without the
//! variables (always, outside those tests) a point costs two comparisons.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};

static CRASH_AT: OnceLock<Option<String>> = OnceLock::new();
static PAUSE_AT: OnceLock<Option<String>> = OnceLock::new();
static PAUSED: AtomicBool = AtomicBool::new(false);

/// Aborts the process here if the crash tests asked for this point, or pauses it
/// the first time it gets here if the fencing tests did.
pub fn reached(name: &str) {
    let at = CRASH_AT.get_or_init(|| std::env::var("DESKBELL_CRASH_AT").ok());
    if at.as_deref() == Some(name) {
        eprintln!("deskbell: crash point {name} reached; aborting as asked");
        std::process::abort();
    }
    let pause = PAUSE_AT.get_or_init(|| std::env::var("DESKBELL_PAUSE_AT").ok());
    if pause.as_deref() == Some(name) && !PAUSED.swap(true, Ordering::AcqRel) {
        eprintln!("deskbell: pause point {name} reached; stopping as asked");
        // The whole process stops, every thread of it, as under a VM pause.
        // Raised here rather than sent by a `kill` child: a child that exits
        // while its parent is stopped can leave the process group orphaned,
        // and the kernel then continues every stopped member at once.
        // SAFETY: `raise` only sends a signal to this process.
        #[cfg(unix)]
        unsafe {
            libc::raise(libc::SIGSTOP);
        }
    }
}
