//! Retrieval quality on a public labelled set that nobody here wrote (SPEC §21),
//! in BEIR's layout in a folder named by `DESKBELL_RETRIEVAL_SET`: BEIR's
//! SciFact (`scripts/scifact-to-beir`; no package registry this machine reaches
//! carries it) or the Semanlink arXiv set CI fetches from PyPI
//! (`scripts/fetch-retrieval-set`). Searched through the real index by BM25, by
//! meaning and by both fused, scored by nDCG@10 and recall@8 over documents (a
//! document ranks where its best passage does). `--quick` runs a fixed subset
//! for CI; every run fails when hybrid falls below BM25.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::Instant;

use deskbell::config::Embedding;
use deskbell::knowledge::{Knowledge, Mode};

use crate::stats::{Samples, ms, report};

/// BM25's nDCG@10 on SciFact in the BEIR paper (Thakur et al., 2021, table 2).
const PUBLISHED_BM25: f64 = 0.665;

/// Queries and extra documents of the quick subset.
const QUICK_QUERIES: usize = 60;
const QUICK_DOCUMENTS: usize = 400;

/// Passages asked for per question, enough for ten distinct documents.
const DEPTH: usize = 40;

struct Set {
    corpus: Vec<(String, String, String)>,
    queries: Vec<(String, String)>,
    qrels: HashMap<String, HashMap<String, f64>>,
}

fn lines(path: &Path) -> anyhow::Result<Vec<serde_json::Value>> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", path.display()))?;
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| Ok(serde_json::from_str(l)?))
        .collect()
}

fn field(v: &serde_json::Value, name: &str) -> String {
    match v.get(name) {
        Some(serde_json::Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
        None => String::new(),
    }
}

/// Reads a BEIR folder: `corpus.jsonl`, `queries.jsonl`, `qrels/test.tsv`.
fn read_set(dir: &Path) -> anyhow::Result<Set> {
    let corpus = lines(&dir.join("corpus.jsonl"))?
        .iter()
        .map(|d| (field(d, "_id"), field(d, "title"), field(d, "text")))
        .collect();
    let mut qrels: HashMap<String, HashMap<String, f64>> = HashMap::new();
    let tsv = std::fs::read_to_string(dir.join("qrels").join("test.tsv"))?;
    for line in tsv.lines().skip(1) {
        let cols: Vec<&str> = line.split('\t').collect();
        if let [q, d, score] = cols[..] {
            let score: f64 = score.trim().parse().unwrap_or(0.0);
            if score > 0.0 {
                qrels.entry(q.into()).or_default().insert(d.into(), score);
            }
        }
    }
    let queries = lines(&dir.join("queries.jsonl"))?
        .iter()
        .map(|q| (field(q, "_id"), field(q, "text")))
        .filter(|(id, _)| qrels.contains_key(id))
        .collect();
    Ok(Set {
        corpus,
        queries,
        qrels,
    })
}

/// The quick subset: the first queries by id, their relevant documents and the
/// first documents of the corpus, the same every run.
fn subset(mut set: Set) -> Set {
    set.queries.sort();
    set.queries.truncate(QUICK_QUERIES);
    let mut keep: HashSet<String> = set
        .queries
        .iter()
        .flat_map(|(q, _)| set.qrels[q].keys().cloned())
        .collect();
    keep.extend(set.corpus.iter().take(QUICK_DOCUMENTS).map(|d| d.0.clone()));
    set.corpus.retain(|d| keep.contains(&d.0));
    set
}

fn ndcg_at_10(ranked: &[String], relevant: &HashMap<String, f64>) -> f64 {
    let gain = |i: usize, g: f64| (2f64.powf(g) - 1.0) / ((i + 2) as f64).log2();
    let dcg: f64 = ranked
        .iter()
        .take(10)
        .enumerate()
        .map(|(i, d)| gain(i, relevant.get(d).copied().unwrap_or(0.0)))
        .sum();
    let mut ideal: Vec<f64> = relevant.values().copied().collect();
    ideal.sort_by(|a, b| b.total_cmp(a));
    let idcg: f64 = ideal
        .iter()
        .take(10)
        .enumerate()
        .map(|(i, g)| gain(i, *g))
        .sum();
    if idcg == 0.0 { 0.0 } else { dcg / idcg }
}

fn recall_at_8(ranked: &[String], relevant: &HashMap<String, f64>) -> f64 {
    let hit = ranked
        .iter()
        .take(8)
        .filter(|d| relevant.contains_key(*d))
        .count();
    hit as f64 / relevant.len().max(1) as f64
}

/// Writes each document as a Markdown file named by its id (once; the folder
/// is kept beside the build, so a second run embeds nothing).
fn write_corpus(set: &Set, docs: &Path) -> anyhow::Result<()> {
    if docs.exists() {
        return Ok(());
    }
    let part = docs.with_extension("part");
    let _ = std::fs::remove_dir_all(&part);
    std::fs::create_dir_all(&part)?;
    for (id, title, text) in &set.corpus {
        std::fs::write(
            part.join(format!("{id}.md")),
            format!("# {title}\n\n{text}\n"),
        )?;
    }
    std::fs::rename(&part, docs)?;
    Ok(())
}

/// The first 12 hex digits of the SHA-256 of the set's three files.
fn set_hash(dir: &Path) -> anyhow::Result<String> {
    use sha2::{Digest, Sha256};
    let mut hash = Sha256::new();
    for file in ["corpus.jsonl", "queries.jsonl", "qrels/test.tsv"] {
        let bytes = std::fs::read(dir.join(file))
            .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", dir.join(file).display()))?;
        hash.update((bytes.len() as u64).to_le_bytes());
        hash.update(&bytes);
    }
    Ok(hex::encode(hash.finalize())[..12].to_string())
}

fn document_of(path: &str) -> String {
    Path::new(path)
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default()
}

pub async fn figures(quick: bool) -> anyhow::Result<()> {
    let (Some(set_dir), Some(model)) = (
        std::env::var_os("DESKBELL_RETRIEVAL_SET").map(PathBuf::from),
        std::env::var_os("DESKBELL_EMBEDDING_MODEL")
            .or_else(|| std::env::var_os("DESKBELL_TEST_EMBEDDER"))
            .map(PathBuf::from),
    ) else {
        report(
            "retrieval quality (a labelled set)",
            "skipped: no labelled set (DESKBELL_RETRIEVAL_SET, a BEIR folder: scripts/fetch-retrieval-set) or no model (DESKBELL_TEST_EMBEDDER, scripts/fetch-test-embedder)",
            "",
        );
        return Ok(());
    };
    let mut set = read_set(&set_dir)?;
    // A set no larger than the subset's documents runs whole.
    let whole = !quick || set.corpus.len() <= QUICK_DOCUMENTS;
    if !whole {
        set = subset(set);
    }
    // The set is named by its folder. Each set and size is built in a folder
    // of its own, kept between runs and named by the set's files' hash too, so
    // a changed set under the same name is never scored on the old one's index.
    let set_name = set_dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "set".into());
    let scifact = set_name.to_lowercase().contains("scifact");
    let size = if whole { "full" } else { "quick" };
    let work = Path::new("target")
        .join("retrieval-quality")
        .join(format!("{set_name}-{}", set_hash(&set_dir)?))
        .join(size);
    let docs = work.join("docs");
    write_corpus(&set, &docs)?;
    let mut config = crate::knowledge::config(&work, &docs)?;
    config.knowledge.embedding = Embedding::On;
    config.knowledge.embedding_model = Some(model.display().to_string());
    let started = Instant::now();
    let knowledge = Knowledge::open(&config).await?;
    let opened = started.elapsed();
    anyhow::ensure!(
        knowledge.embedding().is_some(),
        "the embedding model in {} did not load",
        model.display()
    );
    let label = format!(
        "{set_name}{} ({} queries, {} documents)",
        if whole { "" } else { " subset" },
        set.queries.len(),
        set.corpus.len()
    );
    report(
        &format!("retrieval index of {label}, opened or built"),
        &format!("{:.1} s", opened.as_secs_f64()),
        "",
    );
    let mut scores = Vec::new();
    for (mode, title) in [
        (Mode::Bm25, "BM25"),
        (Mode::Dense, "dense"),
        (Mode::Hybrid, "hybrid"),
    ] {
        let (mut ndcg, mut recall) = (0.0, 0.0);
        let mut samples = Samples::default();
        for (id, text) in &set.queries {
            let t = Instant::now();
            let passages = knowledge.search_by("bench", text, DEPTH, mode).await?;
            samples.push(t.elapsed());
            let mut seen = HashSet::new();
            let ranked: Vec<String> = passages
                .iter()
                .map(|p| document_of(&p.path))
                .filter(|d| seen.insert(d.clone()))
                .collect();
            ndcg += ndcg_at_10(&ranked, &set.qrels[id]);
            recall += recall_at_8(&ranked, &set.qrels[id]);
        }
        let n = set.queries.len().max(1) as f64;
        let (ndcg, recall) = (ndcg / n, recall / n);
        let goal = match mode {
            Mode::Bm25 if scifact && !quick => format!("published {PUBLISHED_BM25} ± 0.03"),
            Mode::Hybrid => "≥ BM25 and dense".into(),
            _ => String::new(),
        };
        report(
            &format!("retrieval {title} on {label}"),
            &format!(
                "nDCG@10 {ndcg:.3}, recall@8 {recall:.3}, search p50 {} p99 {}",
                ms(samples.p50()),
                ms(samples.p99())
            ),
            &goal,
        );
        scores.push(ndcg);
    }
    if let [bm25, dense, hybrid] = scores[..] {
        anyhow::ensure!(
            hybrid >= bm25,
            "hybrid nDCG@10 {hybrid:.3} fell below BM25's {bm25:.3} on {label}"
        );
        if hybrid < dense {
            eprintln!("note: hybrid nDCG@10 {hybrid:.3} is below dense's {dense:.3} on {label}");
        }
    }
    Ok(())
}
