//! The embedded model against llama.cpp's own server on the same GGUF file
//! (issue 42): prompt reading and generation speed and resident memory, measured
//! in turns (llama.cpp, then Deskbell, five times) so both see the same machine.
//!
//! llama.cpp's figures are the `timings` its `/completion` endpoint reports for
//! the model alone (no HTTP); Deskbell's are the decoder's own loop, timed the
//! same way: the prompt read in one step with no cache, then greedy tokens with
//! no end of answer taken. The server is `DESKBELL_LLAMACPP_URL` (for example
//! `http://127.0.0.1:8811`, started with the same threads as this machine has
//! cores: `LLM_PEER_THREADS=2 ../shared/tools/llm-peer/start.sh -p 8811`); its
//! memory is the resident size of the process named `llama-server`.

use std::path::PathBuf;
use std::time::Duration;

use deskbell::llm::local::{decode_timing, load_for_timing};
use serde_json::{Value, json};

use crate::local::median;
use crate::stats::{report, rss_mib};

/// About 180 tokens of ordinary text, so both read a prompt of one size.
const PROMPT: &str = "You are the support assistant of Acme Store, an online shop that sells \
kitchen tools, garden furniture and small electrical goods to customers in Europe. Orders \
placed before two in the afternoon leave the warehouse on the same working day and arrive \
within two to four days; orders to islands take a day longer. A customer may return any item \
within thirty days of delivery, unused and in its original packaging, and the refund reaches \
the original payment method within five working days of the item arriving back. Gift cards \
cannot be refunded. Customers can change the delivery address until the order is packed, \
cancel an order that has not shipped, and ask for an invoice with their company's tax number. \
The store is closed on public holidays, and the support team answers messages from eight in \
the morning until six in the evening. Now write a long, friendly answer to a customer who asks \
where their order is and when it will arrive.";

/// Tokens generated in each run.
const GENERATE: usize = 128;

struct Run {
    prompt_rate: f64,
    generation_rate: f64,
}

pub async fn figures(quick: bool) -> anyhow::Result<()> {
    let (Some(url), Some(model)) = (
        std::env::var("DESKBELL_LLAMACPP_URL").ok(),
        ["DESKBELL_LOCAL_MODEL", "DESKBELL_TEST_MODEL"]
            .iter()
            .find_map(std::env::var_os)
            .map(PathBuf::from),
    ) else {
        println!(
            "| local vs llama.cpp | skipped: set DESKBELL_LLAMACPP_URL and DESKBELL_TEST_MODEL | |"
        );
        return Ok(());
    };
    let url = url
        .trim_end_matches('/')
        .trim_end_matches("/v1")
        .to_string();
    let client = reqwest::Client::new();
    let (weights, vocab) = tokio::task::block_in_place(|| load_for_timing(&model))?;
    let ours = |generate| {
        tokio::task::block_in_place(|| decode_timing(&weights, &vocab, PROMPT, generate))
    };
    // A first run of each warms caches and the server; it is not counted.
    llama(&client, &url, 8).await?;
    ours(8)?;
    let rounds = if quick { 1 } else { 5 };
    let (mut theirs, mut mine) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        theirs.push(llama(&client, &url, GENERATE).await?);
        let t = ours(GENERATE)?;
        mine.push(Run {
            prompt_rate: t.prompt_tokens as f64 / t.prompt.as_secs_f64(),
            generation_rate: t.generated as f64 / t.generation.as_secs_f64(),
        });
    }
    let pairs = |f: fn(&Run) -> f64| {
        mine.iter()
            .zip(&theirs)
            .map(|(a, b)| format!("{:.2}", f(a) / f(b)))
            .collect::<Vec<_>>()
            .join(" · ")
    };
    let line = |name: &str, f: fn(&Run) -> f64| {
        report(
            &format!("local vs llama.cpp: {name}"),
            &format!(
                "Deskbell {:.1} tokens/s, llama.cpp {:.1} tokens/s (medians of {rounds}); ratio by pair {}",
                median(&mut mine.iter().map(f).collect::<Vec<_>>()),
                median(&mut theirs.iter().map(f).collect::<Vec<_>>()),
                pairs(f)
            ),
            "",
        );
    };
    line("generation", |r| r.generation_rate);
    line("prompt reading", |r| r.prompt_rate);
    let (ours, theirs) = (rss_mib("self"), llama_rss_mib());
    report(
        "local vs llama.cpp: resident memory",
        &format!(
            "Deskbell {ours:.0} MiB (the whole bench process), llama.cpp {} ; ratio {}",
            theirs.map_or("unknown".into(), |m| format!("{m:.0} MiB")),
            theirs.map_or("unknown".into(), |m| format!("{:.2}", ours / m))
        ),
        "",
    );
    Ok(())
}

/// One run on llama.cpp's server: the same prompt, no cached prefix, `generate`
/// tokens with the end of answer ignored, greedy.
async fn llama(client: &reqwest::Client, url: &str, generate: usize) -> anyhow::Result<Run> {
    let body = json!({
        "prompt": PROMPT,
        "n_predict": generate,
        "ignore_eos": true,
        "temperature": 0,
        "cache_prompt": false,
    });
    let reply: Value = client
        .post(format!("{url}/completion"))
        .json(&body)
        .timeout(Duration::from_secs(300))
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    let timing = |key: &str| {
        reply["timings"][key]
            .as_f64()
            .ok_or_else(|| anyhow::anyhow!("llama.cpp's reply has no timings.{key}"))
    };
    Ok(Run {
        prompt_rate: timing("prompt_per_second")?,
        generation_rate: timing("predicted_per_second")?,
    })
}

/// The resident memory of the process named `llama-server`, if one runs here.
fn llama_rss_mib() -> Option<f64> {
    std::fs::read_dir("/proc")
        .ok()?
        .flatten()
        .find_map(|entry| {
            let name = entry.file_name().to_string_lossy().into_owned();
            let comm = std::fs::read_to_string(entry.path().join("comm")).ok()?;
            (comm.trim() == "llama-server").then(|| rss_mib(&name))
        })
}
