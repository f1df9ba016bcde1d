//! Knowledge figures: search latency over many chunks, ingestion throughput, and
//! retrieval quality (recall@5) on questions written for the demo's documents.

use std::path::Path;
use std::time::Instant;

use deskbell::config::{Config, Env, KnowledgeSource};
use deskbell::knowledge::Knowledge;

use crate::stats::{Samples, ms, report};

/// Questions a visitor might ask the demo shop, with the document that answers.
const QUESTIONS: &[(&str, &str)] = &[
    ("How long does standard shipping take?", "Shipping"),
    ("How much does express delivery cost?", "Shipping"),
    ("Do you ship to Norway?", "Shipping"),
    ("When does my order leave the warehouse?", "Shipping"),
    ("Can I track my parcel?", "Shipping"),
    (
        "Can I still change the address before it ships?",
        "Shipping",
    ),
    ("How many days do I have to return an item?", "Returns"),
    ("How do I get a return label?", "Returns"),
    ("When will I get my refund?", "Returns"),
    ("Is return shipping free?", "Returns"),
    (
        "Do I need the original packaging to send something back?",
        "Returns",
    ),
    ("How long is the warranty?", "Warranty"),
    ("Does the warranty cover accidental damage?", "Warranty"),
    ("How do I make a warranty claim?", "Warranty"),
    (
        "My grinder has a manufacturing defect, what now?",
        "Warranty",
    ),
    ("Will you repair or replace a broken product?", "Warranty"),
];

pub fn config(dir: &Path, docs: &Path) -> anyhow::Result<Config> {
    let text = format!(
        "[server]\ndata_dir = \"{}\"\n[[site]]\nid = \"bench\"\n",
        dir.join("data").display()
    );
    let mut config = Config::from_toml(&text, "bench", &Env::empty())?;
    config.sites[0].knowledge = vec![KnowledgeSource::Path(docs.display().to_string())];
    // BM25's own figures; the hybrid ones are `retrieval.rs`'s.
    config.knowledge.embedding = deskbell::config::Embedding::Off;
    Ok(config)
}

/// A vocabulary of 20,000 pseudo-words drawn with a Zipf distribution, as words are
/// in real prose: a few very common, most rare. (A small uniform vocabulary makes
/// every term match every chunk, which no real corpus does.)
struct Words {
    seed: u64,
}

impl Words {
    const COUNT: f64 = 20_000.0;

    fn next(&mut self) -> String {
        self.seed = self
            .seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let u = (self.seed >> 11) as f64 / (1u64 << 53) as f64;
        let rank = ((u * Self::COUNT.ln()).exp() - 1.0) as usize;
        word(rank)
    }
}

fn word(rank: usize) -> String {
    const SYLLABLES: &[&str] = &[
        "ka", "lo", "mi", "re", "su", "ta", "ne", "vo", "pi", "da", "go", "ru", "se", "li", "ba",
        "to",
    ];
    let mut n = rank;
    let mut w = String::new();
    loop {
        w.push_str(SYLLABLES[n % SYLLABLES.len()]);
        n /= SYLLABLES.len();
        if n == 0 {
            break;
        }
    }
    w
}

/// Questions of two to five words drawn like the synthetic documents' words, so
/// retrieval finds (and ranks) real matches.
pub fn synthetic_questions(count: usize) -> Vec<String> {
    let mut words = Words { seed: 7 };
    (0..count)
        .map(|i| {
            let n = 2 + i % 4;
            let mut q: Vec<String> = (0..n).map(|_| words.next()).collect();
            q.push("?".into());
            q.join(" ")
        })
        .collect()
}

/// Writes `documents` Markdown files of `sections` sections each; returns the bytes.
pub fn synthetic_docs(dir: &Path, documents: usize, sections: usize) -> anyhow::Result<u64> {
    std::fs::create_dir_all(dir)?;
    let mut words = Words { seed: 42 };
    let mut bytes = 0;
    for d in 0..documents {
        let mut text = format!("# Guide {d}: {} and {}\n\n", words.next(), words.next());
        for s in 0..sections {
            text.push_str(&format!("## Section {s} on {}\n\n", words.next()));
            for _ in 0..3 {
                let sentence: Vec<String> = (0..45).map(|_| words.next()).collect();
                text.push_str(&sentence.join(" "));
                text.push_str(".\n\n");
            }
        }
        bytes += text.len() as u64;
        std::fs::write(dir.join(format!("guide-{d}.md")), text)?;
    }
    Ok(bytes)
}

pub async fn figures(quick: bool) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let docs = dir.path().join("docs");
    // Each section is one chunk: 10,000 files of 10 sections give 100,000.
    let (documents, sections) = if quick { (100, 10) } else { (10_000, 10) };
    let bytes = synthetic_docs(&docs, documents, sections)?;
    let config = config(dir.path(), &docs)?;
    let started = Instant::now();
    let r =
        deskbell::knowledge::ingest_site(&config.server.data_dir, &config.sites[0], None).await?;
    let took = started.elapsed();
    report(
        &format!(
            "ingestion ({documents} Markdown files, {:.1} MB, {} chunks)",
            bytes as f64 / 1e6,
            r.chunks
        ),
        &format!(
            "{:.1} MB/s ({:.1} s)",
            bytes as f64 / 1e6 / took.as_secs_f64(),
            took.as_secs_f64()
        ),
        "",
    );
    let knowledge = Knowledge::open(&config).await?;
    let mut samples = Samples::default();
    for query in synthetic_questions(2_000) {
        let t = Instant::now();
        knowledge.search_top("bench", &query, 8).await?;
        samples.push(t.elapsed());
    }
    report(
        &format!("search latency, top 8 of {} chunks", r.chunks),
        &format!("p50 {} p99 {}", ms(samples.p50()), ms(samples.p99())),
        "p99 < 5 ms",
    );
    recall().await
}

async fn recall() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let docs = dir.path().join("docs");
    std::fs::create_dir_all(&docs)?;
    for (name, text) in deskbell::demo::KNOWLEDGE {
        std::fs::write(docs.join(name), text)?;
    }
    let config = config(dir.path(), &docs)?;
    deskbell::knowledge::ingest_site(&config.server.data_dir, &config.sites[0], None).await?;
    let knowledge = Knowledge::open(&config).await?;
    let mut found = 0;
    let mut first = 0;
    let mut misses = Vec::new();
    for (question, expected) in QUESTIONS {
        let top = knowledge.search_top("bench", question, 5).await?;
        if top.first().is_some_and(|p| p.title.starts_with(expected)) {
            first += 1;
        }
        if top.iter().any(|p| p.title.starts_with(expected)) {
            found += 1;
        } else {
            misses.push(*question);
        }
    }
    report(
        &format!(
            "retrieval recall@1 on {} demo questions (the demo has 3 documents, 7 chunks)",
            QUESTIONS.len()
        ),
        &format!("{:.2}", first as f64 / QUESTIONS.len() as f64),
        "",
    );
    report(
        &format!("retrieval recall@5 on {} demo questions", QUESTIONS.len()),
        &format!(
            "{:.2}{}",
            found as f64 / QUESTIONS.len() as f64,
            if misses.is_empty() {
                String::new()
            } else {
                format!(" (missed: {})", misses.join("; "))
            }
        ),
        "≥ 0.9",
    );
    Ok(())
}
