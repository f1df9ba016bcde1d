//! The kernels' worker pool serves a visitor's work (`on_workers`) before an
//! outside caller's many items (`each_on_workers`, an ingest) go on. A process of
//! its own, so no other test's work shares the pool or its count of visitors'
//! calls; the tests here take turns for the same reason.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use deskbell_kernels::{each_on_workers, on_workers, spawn_on_workers};

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

/// The visitor's work ended before any item of the outside caller began.
fn assert_no_item_before_the_work_ended(log: &[Event]) {
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
    assert_no_item_before_the_work_ended(&log.into_inner().unwrap());
}

/// Results come back in the items' order across many rounds.
#[test]
fn results_keep_the_items_order_across_rounds() {
    let _turn = POOL.lock().unwrap_or_else(|e| e.into_inner());
    let items: Vec<usize> = (0..10 * rayon::current_num_threads() + 3).collect();
    let out = each_on_workers(&items, |&i| i + 1);
    assert_eq!(out, items.iter().map(|i| i + 1).collect::<Vec<_>>());
}

/// Work handed to the pool without waiting (`spawn_on_workers`: a question's
/// embedding and search, awaited by an async task) holds an outside caller's
/// rounds back as `on_workers` does, until it ends.
#[test]
fn an_outside_callers_round_waits_for_work_handed_over_without_waiting() {
    let _turn = POOL.lock().unwrap_or_else(|e| e.into_inner());
    let items: Vec<usize> = (0..rayon::current_num_threads()).collect();
    let log = std::sync::Arc::new(Mutex::new(Vec::new()));
    let (sent, received) = std::sync::mpsc::channel();
    let busy = log.clone();
    spawn_on_workers(
        move || {
            busy.lock().unwrap().push(Event::Asked);
            std::thread::sleep(Duration::from_millis(10));
            busy.lock().unwrap().push(Event::BusyEnded);
            rayon::current_thread_index().is_some()
        },
        move |result| {
            let _ = sent.send(result.ok());
        },
    );
    wait_for(&log, Event::Asked);
    each_on_workers(&items, |&i| log.lock().unwrap().push(Event::Item(i)));
    let on_a_worker = received.recv_timeout(Duration::from_secs(10)).unwrap();
    assert_eq!(on_a_worker, Some(true), "the work ran on a worker");
    assert_no_item_before_the_work_ended(&log.lock().unwrap());
}

/// A panic in work handed over without waiting comes back as an error: in a
/// spawned rayon job it would abort the process.
#[test]
fn a_panic_in_work_handed_over_without_waiting_comes_back_as_an_error() {
    let _turn = POOL.lock().unwrap_or_else(|e| e.into_inner());
    let (sent, received) = std::sync::mpsc::channel();
    spawn_on_workers(
        || -> usize { panic!("a panic on purpose") },
        move |result| {
            let _ = sent.send(result.is_err());
        },
    );
    assert!(received.recv_timeout(Duration::from_secs(10)).unwrap());
    // The pool still serves work afterwards.
    assert_eq!(on_workers(|| 6 * 7), 42);
}
