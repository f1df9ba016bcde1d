//! Figures for the embedded model, in this process: load time and memory, prompt
//! and generation speed, and time to first token with and without the cached
//! prompt prefix. The model is `DESKBELL_LOCAL_MODEL`, else `DESKBELL_TEST_MODEL`
//! (the test model `scripts/fetch-test-model` fetches); without one it is skipped.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use deskbell::llm::{ChatMessage, ChatRequest, LocalProvider, ModelEvent, Provider, ToolSpec};
use futures_util::StreamExt;
use serde_json::json;

use crate::stats::{Samples, ms, report};

pub async fn figures(quick: bool) -> anyhow::Result<()> {
    let Some(path) = ["DESKBELL_LOCAL_MODEL", "DESKBELL_TEST_MODEL"]
        .iter()
        .find_map(std::env::var_os)
        .map(PathBuf::from)
    else {
        println!("| local model | skipped: set DESKBELL_LOCAL_MODEL or DESKBELL_TEST_MODEL | |");
        return Ok(());
    };
    let before = rss_mib();
    let (provider, info) = LocalProvider::start(path.clone(), None, 4)?;
    let name = path
        .file_name()
        .map_or(String::new(), |n| n.to_string_lossy().into_owned());
    report(
        &format!("local: load {name}"),
        &format!(
            "{} ms, +{:.0} MiB RSS, weights {} MiB",
            info.load_ms,
            rss_mib() - before,
            info.weight_bytes >> 20
        ),
        "",
    );
    let rounds = if quick { 2 } else { 6 };
    let (mut cold, mut warm) = (Samples::default(), Samples::default());
    let (mut prompt_rate, mut output_rate) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        // Each round brings new tools, so its first turn reads the prefix afresh.
        let tools = tools(round);
        for (i, question) in ["Where is my order 1001?", "How long does shipping take?"]
            .iter()
            .enumerate()
        {
            let turn = turn(&provider, &tools, question).await?;
            if i == 0 {
                cold.push(turn.first);
                prompt_rate.push(turn.input as f64 / turn.first.as_secs_f64());
            } else {
                warm.push(turn.first);
            }
            if turn.output > 1 {
                output_rate
                    .push((turn.output - 1) as f64 / (turn.total - turn.first).as_secs_f64());
            }
        }
    }
    report(
        "local: time to first token, prefix read",
        &format!("p50 {}", ms(cold.p50())),
        "",
    );
    report(
        "local: time to first token, prefix cached",
        &format!("p50 {}", ms(warm.p50())),
        "",
    );
    report(
        "local: prompt reading",
        &format!("{:.0} tokens/s (median)", median(&mut prompt_rate)),
        "",
    );
    report(
        "local: generation",
        &format!("{:.1} tokens/s (median)", median(&mut output_rate)),
        "",
    );
    report(
        "local: RSS after the runs",
        &format!("{:.0} MiB", rss_mib()),
        "",
    );
    Ok(())
}

const SYSTEM: &str = "You are the support assistant of Acme Store. Be brief.";

struct Turn {
    first: Duration,
    total: Duration,
    input: u64,
    output: u64,
}

async fn turn(
    provider: &LocalProvider,
    tools: &[Arc<ToolSpec>],
    question: &str,
) -> anyhow::Result<Turn> {
    let request = ChatRequest {
        messages: vec![
            ChatMessage::System {
                content: "You are the support assistant of Acme Store. Be brief.".into(),
            },
            ChatMessage::User {
                content: question.into(),
            },
        ],
        tools: tools.to_vec(),
        max_tokens: 32,
        stable_system: SYSTEM.len(),
    };
    let started = Instant::now();
    let mut stream = provider.stream(request).await?;
    let first = started.elapsed();
    let (mut input, mut output) = (0, 0);
    while let Some(event) = stream.next().await {
        if let ModelEvent::Usage(u) = event? {
            (input, output) = (u.input_tokens, u.output_tokens);
        }
    }
    Ok(Turn {
        first,
        total: started.elapsed(),
        input,
        output,
    })
}

fn tools(round: usize) -> Vec<Arc<ToolSpec>> {
    let order = json!({"type": "object", "required": ["order_id"], "properties": {"order_id": {"type": "integer", "minimum": 1}}});
    ["lookup_order", "cancel_order", "change_address"]
        .iter()
        .map(|name| {
            Arc::new(ToolSpec {
                name: format!("{name}_{round}"),
                description: format!("{name} for an order of Acme Store that has not shipped yet."),
                parameters: order.clone(),
            })
        })
        .collect()
}

pub fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(0.0)
}

fn rss_mib() -> f64 {
    crate::stats::rss_mib("self")
}
