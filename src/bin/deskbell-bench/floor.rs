//! The floor under issue 42's first goal: how many turns a second the store
//! alone could take if a turn cost nothing but its two group-committed writes
//! (its start and its end), with no HTTP, no model and no prompt. Run it on
//! one core (`taskset -c 1`), like the pinned server: the turns/s of
//! `--only throughput` as a share of this says how much of a turn's cost is the
//! database's and how much everything else's.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use deskbell::budget::BudgetShare;
use deskbell::states::{MessageStatus, Role};
use deskbell::store::{Durability, Fence, MessageRow, Store, TurnEnd, TurnStart};
use deskbell::wire::Usage;

use crate::figures::Sizes;
use crate::stats::report;

/// As many writers as `--only throughput` has clients.
const CLIENTS: usize = 64;

pub async fn commit_floor(sizes: &Sizes) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let (url, database) = match std::env::var("BENCH_POSTGRES") {
        Ok(server) => (crate::server::fresh_postgres(&server).await?, "PostgreSQL"),
        Err(_) => (
            format!("sqlite://{}", dir.path().join("floor.db").display()),
            "SQLite",
        ),
    };
    let store = Store::connect(&url, Durability::default()).await?;
    store.leases().take().await?;
    let turns = Arc::new(AtomicU64::new(0));
    let until = Instant::now() + sizes.throughput_for;
    let started = Instant::now();
    let mut clients = tokio::task::JoinSet::new();
    for _ in 0..CLIENTS {
        let (store, turns) = (store.clone(), Arc::clone(&turns));
        clients.spawn(async move {
            while Instant::now() < until {
                turn(&store).await?;
                turns.fetch_add(1, Ordering::Relaxed);
            }
            anyhow::Ok(())
        });
    }
    while let Some(done) = clients.join_next().await {
        done??;
    }
    let rate = turns.load(Ordering::Relaxed) as f64 / started.elapsed().as_secs_f64();
    report(
        &format!(
            "turns per second the store alone takes: a start and an end each, group-committed ({database}, {CLIENTS} writers)"
        ),
        &format!("{rate:.0} turns/s"),
        "the ceiling of --only throughput",
    );
    Ok(())
}

/// One turn's writes, as the server makes them for a short question in a new
/// conversation of a site with a daily budget.
async fn turn(store: &Store) -> anyhow::Result<()> {
    let owner = store.leases().fence();
    let share = BudgetShare {
        site: "bench".into(),
        day: "2026-12-07".into(),
        reserved: 1_000,
        limit: i64::MAX / 4,
    };
    let conversation = deskbell::ids::new_id("c");
    let now = 1;
    let mut bubble = message(&conversation, Role::Assistant, &owner);
    bubble.status = MessageStatus::Streaming;
    bubble.budget_day = Some(share.day.clone());
    bubble.reserved = share.reserved;
    let answer = bubble.id.clone();
    store
        .turns()
        .begin(TurnStart {
            conversation: conversation.clone(),
            is_new: true,
            site: share.site.clone(),
            visitor: "v_bench".into(),
            now,
            visitor_message: message(&conversation, Role::Visitor, &owner),
            bubble,
            budget: Some(share.clone()),
        })
        .await?;
    store
        .turns()
        .finish(TurnEnd {
            message: answer,
            text: "Returns are accepted within 30 days.".into(),
            status: MessageStatus::Answered,
            citations: Some("[]".into()),
            usage: Usage {
                input_tokens: 120,
                output_tokens: 9,
            },
            unreported: 0,
            budget: Some(share),
            owner,
        })
        .await?;
    Ok(())
}

fn message(conversation: &str, role: Role, owner: &Fence) -> MessageRow {
    let assistant = role == Role::Assistant;
    MessageRow {
        id: deskbell::ids::new_id("m"),
        conversation: conversation.into(),
        turn: deskbell::ids::new_id("t"),
        role,
        text: if assistant {
            String::new()
        } else {
            "Can I send it back?".into()
        },
        status: MessageStatus::Sent,
        citations: None,
        created_at: 1,
        owner: assistant.then(|| owner.to_string()),
        budget_day: None,
        reserved: 0,
        author: None,
    }
}
