//! The benchmark harness: starts the real `deskbell serve` (a child process, release
//! build) against a scripted model and a tool endpoint in this process, drives it over
//! loopback HTTP with many concurrent clients, and prints each figure with its median
//! and p99. `--quick` runs every figure small, for CI.
//!
//! Build both binaries first: `cargo build --release --bins --features testkit`, then
//! `ulimit -n 65536; target/release/deskbell-bench` (see BENCHMARKS.md).

mod client;
mod confirm;
mod console;
mod desk;
#[cfg(feature = "local-model")]
mod encoder_product;
mod figures;
mod floor;
mod knowledge;
mod latency;
mod load;
#[cfg(feature = "local-model")]
mod local;
#[cfg(feature = "local-model")]
mod local_vs;
mod quality;
mod replicas;
mod retrieval;
mod retrieval_graph;
mod retrieval_speed;
mod server;
mod stats;

use std::process::ExitCode;

const USAGE: &str = "\
Usage: deskbell-bench [--quick] [--only <figure>]

Starts the real server against a scripted model and prints each figure as a
Markdown table row (see BENCHMARKS.md).

Options:
  --quick          every figure small, for CI
  --only <figure>  one group: start, ttft, latency, throughput, metrics,
                   confirm, guards, visitors, knowledge, retrieval-quality,
                   retrieval-speed, retrieval-graph, retrieval-ingest,
                   encoder-product, commit-floor,
                   console, streams,
                   desk, local,
                   local-vs-llamacpp, replicas, quality
  -h, --help       this text

Environment for the retrieval figures (SPEC §21):
  DESKBELL_RETRIEVAL_SET    a BEIR folder: corpus.jsonl, queries.jsonl, qrels/test.tsv
  DESKBELL_TEST_EMBEDDER    the embedding model (scripts/fetch-test-embedder)
  BENCH_EMBEDDING_MODEL     the same for --only latency: the site searches hybrid

Environment for local-vs-llamacpp (issue 42): DESKBELL_TEST_MODEL (the GGUF file)
and DESKBELL_LLAMACPP_URL, llama.cpp's llama-server serving the same file with
as many threads as the machine has cores, for example
  LLM_PEER_THREADS=2 ../shared/tools/llm-peer/start.sh -d ~/.cache/llm-peer -p 8811
  DESKBELL_LLAMACPP_URL=http://127.0.0.1:8811 deskbell-bench --only local-vs-llamacpp
";

fn main() -> ExitCode {
    if std::env::args().any(|a| a == "--help" || a == "-h") {
        print!("{USAGE}");
        return ExitCode::SUCCESS;
    }
    let quick = std::env::args().any(|a| a == "--quick");
    let only: Option<String> = std::env::args().skip_while(|a| a != "--only").nth(1);
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("deskbell-bench: {e}");
            return ExitCode::FAILURE;
        }
    };
    let args: Vec<String> = std::env::args().collect();
    let run = async {
        match args.iter().position(|a| a == "--rss-of") {
            Some(at) => retrieval_speed::rss_of(&args[at + 1..]).await,
            None => figures::run_all(quick, only.as_deref()).await,
        }
    };
    match runtime.block_on(run) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("deskbell-bench: {e:#}");
            ExitCode::FAILURE
        }
    }
}
