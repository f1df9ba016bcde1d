//! The kernels' worker pool serves a visitor's work (`on_workers`) before an
//! outside caller's many items (`each_on_workers`, an ingest) go on. A process of
//! its own, so no other test's work shares the pool or its count of visitors'
//! calls; the tests here take turns for the same reason.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use deskbell_kernels::{each_on_workers, on_workers};

/// One test at a time: both watch the one global pool.
static POOL: Mutex<()> = Mutex::new(());

#[derive(Debug, Clone, Copy, PartialEq)]
enum Event {
    Item(usize),
    Asked,
    BusyEnded,
}

/// Waits until `log` holds `event` (the other thread's work has begun).
fn wait_for(log: &Mutex<Vec<Event>>, event: Event) {
    let until = Instant::now() + Duration::from_secs(10);
    while !log.lock().unwrap().contains(&event) {
        assert!(Instant::now() < until, "{event:?} never happened");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Items handed over at once would keep the question queued until no item was
/// left to start (seen so: it ran after nearly all of them); one round of an
/// item a worker at a time lets it in before the round after next at the latest.
#[test]
fn work_queued_during_an_outside_callers_items_runs_before_their_next_rounds() {
    let _turn = POOL.lock().unwrap_or_else(|e| e.into_inner());
    let workers = rayon::current_num_threads();
    let items: Vec<usize> = (0..8 * workers).collect();
    let log = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        s.spawn(|| {
            each_on_workers(&items, |&i| {
                log.lock().unwrap().push(Event::Item(i));
                std::thread::sleep(Duration::from_millis(10));
            })
        });
        wait_for(&log, Event::Item(0));
        on_workers(|| log.lock().unwrap().push(Event::Asked));
    });
    let log = log.into_inner().unwrap();
    let before = log.iter().position(|e| *e == Event::Asked).unwrap();
    assert!(
        before < 3 * workers,
        "{before} of {} items started before the question: {log:?}",
        items.len()
    );
}

/// A round of an outside caller waits while a visitor's work runs on the pool
/// (for up to 50 ms; this work takes 10), so a worker free meanwhile does not
/// start an item the visitor's work may then wait for.
#[test]
fn an_outside_callers_round_waits_for_a_visitors_work_under_way() {
    let _turn = POOL.lock().unwrap_or_else(|e| e.into_inner());
    let workers = rayon::current_num_threads();
    let items: Vec<usize> = (0..workers).collect();
    let log = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        s.spawn(|| {
            on_workers(|| {
                log.lock().unwrap().push(Event::Asked);
                std::thread::sleep(Duration::from_millis(10));
                log.lock().unwrap().push(Event::BusyEnded);
            })
        });
        wait_for(&log, Event::Asked);
        let out = each_on_workers(&items, |&i| {
            log.lock().unwrap().push(Event::Item(i));
            i * 2
        });
        // Results in the items' order, whatever ran first.
        assert_eq!(out, items.iter().map(|i| i * 2).collect::<Vec<_>>());
    });
    let log = log.into_inner().unwrap();
    let ended = log.iter().position(|e| *e == Event::BusyEnded).unwrap();
    let first = log
        .iter()
        .position(|e| matches!(e, Event::Item(_)))
        .unwrap();
    assert!(
        ended < first,
        "an item started before the work ended: {log:?}"
    );
}

/// Results come back in the items' order across many rounds.
#[test]
fn results_keep_the_items_order_across_rounds() {
    let _turn = POOL.lock().unwrap_or_else(|e| e.into_inner());
    let items: Vec<usize> = (0..10 * rayon::current_num_threads() + 3).collect();
    let out = each_on_workers(&items, |&i| i + 1);
    assert_eq!(out, items.iter().map(|i| i + 1).collect::<Vec<_>>());
}
