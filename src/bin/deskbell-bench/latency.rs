//! What Deskbell adds to the first token when the model has latency of its own
//! (issues 16 and 19): the model stand-in waits 50 ms before its first chunk,
//! the site has 1,000 documents and a tool, and 100 streams ask at once. Rounds
//! alternate between Deskbell and the model asked directly, so both are measured
//! in the same run under the same machine's weather; each round's added time is
//! Deskbell's percentile minus the model's, and the figure is the rounds' median
//! with their spread.
//!
//! With `BENCH_EMBEDDING_MODEL` (a sentence-embedding model's folder, such as
//! `scripts/fetch-test-embedder` prints) the site searches hybrid (SPEC §21),
//! so that the growth of the added time is measured against one question's
//! embedding (issue 40's goal); the server embeds the passages at start.

use std::time::Duration;

use deskbell::testkit::{FakeLlm, Webhook};

use crate::client::Client;
use crate::figures::{Sizes, ask_each, model_ttft};
use crate::server;
use crate::stats::{Samples, ms, report};

const MODEL_LATENCY: Duration = Duration::from_millis(50);

pub async fn figures(sizes: &Sizes, quick: bool) -> anyhow::Result<()> {
    let llm = FakeLlm::start().await?;
    llm.set_first_token_delay(MODEL_LATENCY);
    let hook = Webhook::start().await?;
    let dir = tempfile::tempdir()?;
    let docs = dir.path().join("docs");
    let documents = if quick { 100 } else { 1_000 };
    crate::knowledge::synthetic_docs(&docs, documents, 3)?;
    let model = std::env::var("BENCH_EMBEDDING_MODEL").ok();
    let env: Vec<(&str, &str)> = match &model {
        Some(path) => vec![
            ("DESKBELL_EMBEDDING", "on"),
            ("DESKBELL_EMBEDDING_MODEL", path.as_str()),
        ],
        None => Vec::new(),
    };
    let search = if model.is_some() { "hybrid" } else { "BM25" };
    let s = server::start_in_env(dir.path(), Some(&docs), &llm, &hook, &env).await?;
    let client = Client::new(&s.base);
    let questions = crate::knowledge::synthetic_questions(sizes.asks_per_client);
    let mut tokens = Vec::new();
    for _ in 0..sizes.concurrency {
        tokens.push(client.visitor("bench").await?);
    }
    // A warm-up round for connections and caches, measured by nobody.
    ask_each(&client, &tokens, &questions[..2.min(questions.len())]).await?;
    let rounds = if quick { 2 } else { 7 };
    let (mut p50s, mut p99s) = (Vec::new(), Vec::new());
    let (mut opening_p99s, mut rest_p99s) = (Vec::new(), Vec::new());
    let (mut deskbell_all, mut model_all) = (Samples::default(), Samples::default());
    for _ in 0..rounds {
        let (deskbell, _) = ask_each(&client, &tokens, &questions).await?;
        let model = model_ttft(&llm, sizes.concurrency, sizes.asks_per_client).await?;
        let added_p99 = |d: &Samples, m: &Samples| d.p99().saturating_sub(m.p99());
        opening_p99s.push(added_p99(&deskbell.opening, &model.opening));
        rest_p99s.push(added_p99(&deskbell.rest, &model.rest));
        let (deskbell, model) = (deskbell.all(), model.all());
        p50s.push(deskbell.p50().saturating_sub(model.p50()));
        p99s.push(added_p99(&deskbell, &model));
        deskbell_all.extend(deskbell);
        model_all.extend(model);
    }
    report(
        &format!(
            "time to first token, model with 50 ms of its own, {documents} documents ({search} search) and a tool, {} streams ({} turns in {rounds} rounds)",
            sizes.concurrency,
            deskbell_all.len()
        ),
        &crate::stats::beside_model(&deskbell_all, &model_all),
        "",
    );
    report(
        &format!(
            "added time to first token with the 50 ms model, {search} search (median of rounds, spread)"
        ),
        &format!(
            "p50 {} ({}); p99 {} ({})",
            ms(median(&p50s)),
            spread(&p50s),
            ms(median(&p99s)),
            spread(&p99s)
        ),
        "p50 ≤ 0.5 ms, p99 ≤ 2 ms",
    );
    // Every client of a round sends its first question at the same instant, so
    // a round opens with a hundred questions at once, which one core serves one
    // after another; the figure above mixes that wave with the steady state.
    // Shown apart, against the model's own first requests and the rest.
    report(
        "added p99 with the 50 ms model, each round's opening wave (every visitor's first ask) apart from the rest (median of rounds, spread)",
        &format!(
            "opening wave {} ({}); rest {} ({})",
            ms(median(&opening_p99s)),
            spread(&opening_p99s),
            ms(median(&rest_p99s)),
            spread(&rest_p99s)
        ),
        "",
    );
    Ok(())
}

fn median(values: &[Duration]) -> Duration {
    let mut v = values.to_vec();
    v.sort_unstable();
    v.get(v.len() / 2).copied().unwrap_or_default()
}

fn spread(values: &[Duration]) -> String {
    let min = values.iter().min().copied().unwrap_or_default();
    let max = values.iter().max().copied().unwrap_or_default();
    format!("{}–{}", ms(min), ms(max))
}
