//! Hybrid retrieval's cost at scale (SPEC §21): one question's embedding, and a
//! hybrid search over 100,000 passages (10,000 synthetic documents of ten
//! sections), with the real embedding model for the question. The passages'
//! vectors are random unit vectors, since embedding 100,000 synthetic passages
//! would take hours and the search's cost does not depend on what the vectors
//! say; their ingest is timed apart, with the real model, on 10,000 passages
//! in `--only retrieval-ingest` ([`ingest`]). Memory is the process's resident size with
//! the model and vectors loaded, less its size with BM25 alone.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use deskbell::config::Embedding;
use deskbell::knowledge::{Embed, Knowledge};

use crate::stats::{Samples, ms, report};

/// Random unit vectors, the same for the same text.
struct Random {
    dim: usize,
}

impl Embed for Random {
    fn model(&self) -> &str {
        "random"
    }

    fn vectors(&self, texts: &[String]) -> anyhow::Result<Vec<Vec<f32>>> {
        Ok(texts
            .iter()
            .map(|t| {
                let mut seed = t.bytes().fold(1469598103934665603u64, |h, b| {
                    (h ^ u64::from(b)).wrapping_mul(1099511628211)
                });
                let mut v: Vec<f32> = (0..self.dim)
                    .map(|_| {
                        seed = seed
                            .wrapping_mul(6364136223846793005)
                            .wrapping_add(1442695040888963407);
                        (seed >> 40) as f32 / (1u64 << 24) as f32 - 0.5
                    })
                    .collect();
                let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
                v.iter_mut().for_each(|x| *x /= norm);
                v
            })
            .collect())
    }
}

fn rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
        })
        .map_or(0.0, |kb| kb / 1024.0)
}

/// The resident size of a fresh process (this benchmark again, with
/// `--rss-of`) that opens the index in `dir`, with the model in `model` or
/// BM25 alone: the garbage of building the index stays out of the figure.
fn rss_in_child(
    dir: &std::path::Path,
    docs: &std::path::Path,
    model: Option<&std::path::Path>,
) -> anyhow::Result<f64> {
    let mut command = std::process::Command::new(std::env::current_exe()?);
    command.arg("--rss-of").arg(dir).arg(docs);
    if let Some(model) = model {
        command.arg(model);
    }
    let out = command.output()?;
    anyhow::ensure!(
        out.status.success(),
        "the measuring process failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8_lossy(&out.stdout).trim().parse()?)
}

/// `--rss-of <dir> <docs> [<model>]`: opens the index and prints the resident
/// size in MiB, once a few searches have run.
pub async fn rss_of(args: &[String]) -> anyhow::Result<()> {
    let [dir, docs, rest @ ..] = args else {
        anyhow::bail!("usage: --rss-of <dir> <docs> [<model>]");
    };
    let mut config =
        crate::knowledge::config(std::path::Path::new(dir), std::path::Path::new(docs))?;
    if let Some(model) = rest.first() {
        config.knowledge.embedding = Embedding::On;
        config.knowledge.embedding_model = Some(model.clone());
    }
    let knowledge = Knowledge::open(&config).await?;
    for q in crate::knowledge::synthetic_questions(20) {
        knowledge.search_top("bench", &q, 8).await?;
    }
    println!("{:.1}", rss_mib());
    Ok(())
}

pub async fn figures(quick: bool) -> anyhow::Result<()> {
    let Some(model) = std::env::var_os("DESKBELL_EMBEDDING_MODEL")
        .or_else(|| std::env::var_os("DESKBELL_TEST_EMBEDDER"))
        .map(PathBuf::from)
    else {
        report(
            "hybrid retrieval at scale",
            "skipped: set DESKBELL_EMBEDDING_MODEL (scripts/fetch-test-embedder)",
            "",
        );
        return Ok(());
    };
    let dir = tempfile::tempdir()?;
    let docs = dir.path().join("docs");
    let documents = if quick { 100 } else { 10_000 };
    crate::knowledge::synthetic_docs(&docs, documents, 10)?;
    let mut config = crate::knowledge::config(dir.path(), &docs)?;
    let started = Instant::now();
    let r = deskbell::knowledge::ingest_site_with(
        &config.server.data_dir,
        &config.sites[0],
        Some(Arc::new(Random { dim: 384 })),
    )
    .await?;
    let built = started.elapsed();
    let with_bm25 = rss_in_child(dir.path(), &docs, None)?;
    let with_hybrid = rss_in_child(dir.path(), &docs, Some(&model))?;
    config.knowledge.embedding = Embedding::On;
    config.knowledge.embedding_model = Some(model.display().to_string());
    let hybrid = Knowledge::open(&config).await?;
    let embedding = hybrid
        .embedding()
        .ok_or_else(|| anyhow::anyhow!("the embedding model did not load"))?
        .clone();
    let questions = crate::knowledge::synthetic_questions(if quick { 200 } else { 2_000 });
    let timed = |texts: &mut dyn Iterator<Item = &str>, before: &mut dyn FnMut(usize)| {
        embedding_times(&embedding, texts, before)
    };
    let real = "How long does standard shipping take to Norway?";
    let real = timed(&mut std::iter::repeat_n(real, 300), &mut |_| {})?;
    let made_up = timed(
        &mut questions.iter().take(300).map(String::as_str),
        &mut |_| {},
    )?;
    report_embedding(
        "(all-MiniLM-L6-v2, 8 words, 11 tokens)",
        &real,
        "p50 ≤ 5 ms",
    );
    report_embedding(
        "(all-MiniLM-L6-v2, 2 to 5 made-up words)",
        &made_up,
        "p50 ≤ 5 ms",
    );
    // In a server a question arrives after other work (the turn before, the
    // model's answer, other visitors) has had the caches, not after another
    // question: 64 MB touched before each one takes the weights out of them
    // and lets the kernels' workers fall asleep, as a pause would.
    let mut sweep = vec![0u8; 64 << 20];
    let cold = timed(
        &mut questions.iter().take(100).map(String::as_str),
        &mut |i| {
            sweep.iter_mut().for_each(|b| *b = b.wrapping_add(i as u8));
            std::hint::black_box(&sweep);
        },
    )?;
    report_embedding(
        "(2 to 5 made-up words) after 64 MB of other memory was written",
        &cold,
        "",
    );
    // A server's question comes after the model's 50 ms or more, in which the
    // kernels' workers fall asleep and their cores idle.
    let paused = timed(
        &mut questions.iter().take(60).map(String::as_str),
        &mut |_| std::thread::sleep(std::time::Duration::from_millis(50)),
    )?;
    report_embedding("(2 to 5 made-up words) after a 50 ms pause", &paused, "");
    let mut search = Samples::default();
    for q in &questions {
        let t = Instant::now();
        hybrid.search_top("bench", q, 8).await?;
        search.push(t.elapsed());
    }
    report(
        &format!(
            "hybrid search latency, top 8 of {} chunks (index built in {:.1} s)",
            r.chunks,
            built.as_secs_f64()
        ),
        &format!("p50 {} p99 {}", ms(search.p50()), ms(search.p99())),
        "p99 ≤ 10 ms",
    );
    report(
        &format!("memory of the embedding model and {} vectors", r.chunks),
        &format!(
            "{:.0} MiB more than BM25 alone ({:.0} → {:.0} MiB resident, each opened in a fresh process)",
            with_hybrid - with_bm25,
            with_bm25,
            with_hybrid,
        ),
        "≤ 250 MiB",
    );
    Ok(())
}

/// `--only retrieval-ingest`: 10,000 passages (1,000 synthetic documents of ten
/// sections, each section a passage of some 140 words) ingested with the real
/// embedding model, timed from reading the files to the committed index; then
/// the same files again, which embeds nothing (only changed passages are).
pub async fn ingest(quick: bool) -> anyhow::Result<()> {
    let Some(model) = std::env::var_os("DESKBELL_EMBEDDING_MODEL")
        .or_else(|| std::env::var_os("DESKBELL_TEST_EMBEDDER"))
        .map(PathBuf::from)
    else {
        report(
            "hybrid retrieval ingest",
            "skipped: set DESKBELL_EMBEDDING_MODEL (scripts/fetch-test-embedder)",
            "",
        );
        return Ok(());
    };
    let embedding = Arc::new(deskbell::knowledge::embed::Embedding::load(&model)?);
    let dir = tempfile::tempdir()?;
    let docs = dir.path().join("docs");
    let documents = if quick { 20 } else { 1_000 };
    let bytes = crate::knowledge::synthetic_docs(&docs, documents, 10)?;
    let config = crate::knowledge::config(dir.path(), &docs)?;
    let ingest = || {
        deskbell::knowledge::ingest_site(
            &config.server.data_dir,
            &config.sites[0],
            Some(embedding.clone()),
        )
    };
    let mut took = Vec::new();
    let mut chunks = 0;
    for _ in 0..2 {
        let started = Instant::now();
        let r = ingest().await?;
        took.push(started.elapsed().as_secs_f64());
        // The second ingest reports no changed chunks: the figure is the first's.
        chunks = chunks.max(r.chunks);
    }
    report(
        &format!(
            "ingest with embeddings ({documents} Markdown files, {:.1} MB, {chunks} chunks; all-MiniLM-L6-v2)",
            bytes as f64 / 1e6
        ),
        &format!(
            "{:.1} s ({:.0} chunks/s); again unchanged: {:.2} s",
            took[0],
            chunks as f64 / took[0],
            took[1]
        ),
        "≤ 60 s for 10,000 chunks",
    );
    // The same ingest from nothing again (this harness keeps no vector cache),
    // now with a visitor asking a question every 20 ms on the kernels' workers,
    // as a turn does: what an ingest makes a question wait.
    std::fs::remove_dir_all(config.server.data_dir.join("knowledge"))?;
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let asker = {
        let (embedding, stop) = (embedding.clone(), stop.clone());
        let runtime = tokio::runtime::Handle::current();
        std::thread::spawn(move || -> anyhow::Result<Samples> {
            let mut times = Samples::default();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let t = Instant::now();
                let asked = embedding.embed_one_then("can I send it back?".into(), |v, _| v);
                runtime.block_on(asked)?;
                times.push(t.elapsed());
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            Ok(times)
        })
    };
    let started = Instant::now();
    let ingested = ingest().await;
    let busy = started.elapsed().as_secs_f64();
    // Stopped before any error returns, so the thread never outlives the figure.
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let questions = asker
        .join()
        .map_err(|_| anyhow::anyhow!("the asking thread panicked"))??;
    ingested?;
    report(
        "a question's embedding while the ingest runs again (one every 20 ms)",
        &format!(
            "p50 {}, p99 {}, max {} over {} questions; that ingest {busy:.1} s",
            ms(questions.p50()),
            ms(questions.p99()),
            ms(questions.percentile(1.0)),
            questions.len()
        ),
        "",
    );
    Ok(())
}

/// Each text's embedding time, `before(i)` run (untimed) before text `i`.
fn embedding_times(
    embedding: &deskbell::knowledge::embed::Embedding,
    texts: &mut dyn Iterator<Item = &str>,
    before: &mut dyn FnMut(usize),
) -> anyhow::Result<Samples> {
    let mut times = Samples::default();
    for (i, text) in texts.enumerate() {
        before(i);
        let t = Instant::now();
        embedding.embed_one(text)?;
        times.push(t.elapsed());
    }
    Ok(times)
}

fn report_embedding(what: &str, times: &Samples, goal: &str) {
    report(
        &format!("embedding one question {what}"),
        &format!("p50 {} p99 {}", ms(times.p50()), ms(times.p99())),
        goal,
    );
}
