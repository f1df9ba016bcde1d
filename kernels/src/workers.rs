//! The kernels' worker threads (rayon's global pool): a visitor's work run on
//! them whole ([`on_workers`]), and many independent pieces handed to them a
//! round at a time ([`each_on_workers`]) so that a visitor's work is never
//! queued behind a whole ingest.

use rayon::prelude::*;

/// Runs `work` on one of the kernels' worker threads and waits for it. A product
/// called from a worker shares its rows with the other worker directly; called
/// from any other thread, each of the ~120 products a token takes is handed to the
/// pool while its caller sleeps and is woken again, which cost a measured share
/// of generation (issue 42). So a whole turn of generation runs through this.
///
/// While it runs, [`each_on_workers`] called from outside the pool (an ingest)
/// holds its next round back, for up to [`YIELD_FOR`].
pub fn on_workers<R: Send>(work: impl FnOnce() -> R + Send) -> R {
    let _waiting = Foreground::enter();
    rayon::scope(|_| work())
}

/// Runs `work` on one of the kernels' worker threads, as [`on_workers`] does,
/// without waiting: `done` receives its result on that worker. An async caller
/// passes a channel's sender, so no blocking thread is parked per call, where
/// one waited in [`on_workers`] for each question (the first token was the same
/// either way at one visitor; BENCHMARKS.md, "BM25 over the heading and body
/// together"). The ingest holds back for it from now on, as for
/// [`on_workers`]. A panic in `work` reaches `done` as an error: on a spawned
/// job it would otherwise abort the process. `done` itself must not panic (a
/// channel's send does not).
pub fn spawn_on_workers<R: Send + 'static>(
    work: impl FnOnce() -> R + Send + 'static,
    done: impl FnOnce(std::thread::Result<R>) + Send + 'static,
) {
    let waiting = Foreground::enter();
    rayon::spawn(move || {
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(work));
        drop(waiting);
        done(result);
    });
}

/// Work on the pool for a visitor now ([`on_workers`] and
/// [`spawn_on_workers`] calls under way).
static FOREGROUND: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// The longest an ingest's round waits for a visitor's work to finish: a
/// question's embedding takes a few milliseconds; a whole turn of the chat model
/// takes seconds, during which the ingest still goes on, a round per this.
const YIELD_FOR: std::time::Duration = std::time::Duration::from_millis(50);

/// Counts one visitor's call for as long as it lives, panics included.
struct Foreground;

impl Foreground {
    fn enter() -> Foreground {
        FOREGROUND.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Foreground
    }
}

impl Drop for Foreground {
    fn drop(&mut self) {
        FOREGROUND.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// Before an outside caller's next round: lets the visitor's work queued or
/// running on the pool finish first, for up to [`YIELD_FOR`]. Without it, a
/// worker that waits inside a question's shared product (for the other worker's
/// rows) took up the next round's passage meanwhile, and the question waited
/// for that passage too. A worker never waits here: its caller may be the very
/// work it would wait for.
fn yield_to_foreground() {
    if rayon::current_thread_index().is_some() {
        return;
    }
    let until = std::time::Instant::now() + YIELD_FOR;
    while FOREGROUND.load(std::sync::atomic::Ordering::SeqCst) > 0
        && std::time::Instant::now() < until
    {
        std::thread::sleep(std::time::Duration::from_micros(200));
    }
}

/// `work` applied to each item on the kernels' workers, results in order: for
/// independent pieces each as large as a product (passages to embed), which keep
/// every worker busy between their products too.
///
/// The items go to the pool one a worker at a time, not all at once. A worker
/// takes work queued from outside the pool (a question's embedding, a turn of
/// the chat model: [`on_workers`]) only when it has none of its own left, so one
/// hand-off of a whole ingest's passages kept a visitor's question waiting for
/// nearly the whole ingest (3.4 s of a 3.5 s one). Now a worker that finishes its
/// item takes what was queued meanwhile before the next items are handed over
/// (the pool's queue is first in, first out): the question waited 16–18 ms at
/// the median, where two items a worker made it 50 ms (BENCHMARKS.md, "A
/// question during an ingest"). This holds for a caller outside the pool, as an
/// ingest is (a blocking thread); from a worker, the next round goes to that
/// worker's own queue, which comes first. A caller gives items of about one
/// size together, so the workers finish each round together.
pub fn each_on_workers<T: Sync, R: Send>(items: &[T], work: impl Fn(&T) -> R + Sync) -> Vec<R> {
    let round = rayon::current_num_threads().max(1);
    let mut out = Vec::with_capacity(items.len());
    for items in items.chunks(round) {
        yield_to_foreground();
        out.par_extend(items.par_iter().map(&work));
    }
    out
}
