//! The embedded model (`[llm] provider = "local"`): a GGUF model run in-process by
//! candle, so Deskbell answers with no API key and no model server.
//!
//! One model is loaded once and shared. Generation runs on a dedicated worker thread,
//! never on the async runtime; turns wait in a bounded queue, and a turn that finds
//! the queue full is refused at once (503 `provider_unavailable`) instead of waiting
//! without end. The worker streams each piece of text as soon as it is decoded and
//! stops as soon as nobody is left to read it.
//!
//! Speed: the weights are held as the file's 4-bit Q4_1 blocks where it has them,
//! else as 8-bit blocks, and multiplied by Deskbell's own kernels
//! (`deskbell-kernels`), which pick AVX-512 VNNI, AVX2 or NEON at run time
//! (candle's quantized kernels are chosen at compile time, so a portable build of
//! them is scalar); long prompts go through the 8-bit product of many tokens, or
//! expand one matrix at a time for candle's f32 GEMM (`linear.rs`).

mod cache;
mod chat;
mod decoder;
mod engine;
pub mod fetch;
mod linear;
mod model;
mod prefix;
mod repeat;
mod vocab;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{SyncSender, TrySendError, sync_channel};
use std::time::Instant;

use futures_util::future::BoxFuture;
use futures_util::{StreamExt, stream};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

use super::{ChatRequest, ModelStream, Provider, ProviderError};
use engine::{Engine, Events};

pub use vocab::Vocab;

struct Job {
    request: ChatRequest,
    events: Events,
}

/// What the worker has done, for logs, tests and benchmarks.
#[derive(Default)]
pub struct Stats {
    pub turns: AtomicU64,
    pub abandoned: AtomicU64,
    pub prefix_hits: AtomicU64,
    /// Turns whose generation panicked (the worker survived them).
    pub panics: AtomicU64,
    /// Set by the crash tests only: the next turn's generation panics.
    panic_next: AtomicBool,
}

pub struct LocalProvider {
    jobs: SyncSender<Job>,
    pub stats: Arc<Stats>,
}

/// A loaded model and facts about it, for start-up logs and benchmarks.
pub struct ModelInfo {
    pub path: PathBuf,
    pub architecture: String,
    pub context: usize,
    pub load_ms: u128,
    /// The memory the weights take.
    pub weight_bytes: usize,
}

impl LocalProvider {
    /// Loads the model and starts the worker. `queue` is how many turns may wait
    /// while one is being answered.
    pub fn start(
        path: PathBuf,
        tokenizer: Option<PathBuf>,
        queue: usize,
    ) -> anyhow::Result<(Self, ModelInfo)> {
        let started = Instant::now();
        let loaded = model::load(&path, tokenizer.as_deref())?;
        let info = ModelInfo {
            path,
            architecture: loaded.architecture.clone(),
            context: loaded.context,
            load_ms: started.elapsed().as_millis(),
            weight_bytes: loaded.weights.bytes(),
        };
        let stats = Arc::new(Stats::default());
        let mut engine = Engine::new(loaded, stats.clone())?;
        let (jobs, waiting) = sync_channel::<Job>(queue);
        let worker_stats = stats.clone();
        std::thread::Builder::new()
            .name("deskbell-model".into())
            .spawn(move || {
                // The loop ends when the provider, and with it the sender, is dropped.
                while let Ok(job) = waiting.recv() {
                    crate::ops::metrics::local_queue(-1.0);
                    if job.events.is_closed() {
                        worker_stats.abandoned.fetch_add(1, Ordering::Relaxed);
                        continue;
                    }
                    // A panic in generation (a bug, a model file candle mishandles)
                    // fails that turn only: the worker lives on for the next one.
                    // The turn runs on a kernel worker, so each product shares its
                    // rows without handing itself to the pool; a panic there comes
                    // back to this thread (where the test's injected one starts).
                    let inject = worker_stats.panic_next.swap(false, Ordering::Relaxed);
                    let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        deskbell_kernels::on_workers(|| {
                            if inject {
                                panic!("a panic injected by a test");
                            }
                            engine.run(&job.request, &job.events);
                        });
                    }));
                    if ran.is_err() {
                        worker_stats.panics.fetch_add(1, Ordering::Relaxed);
                        tracing::error!("the local model's generation panicked; the turn failed and the worker goes on");
                        engine.forget_prefixes();
                        let failed = ProviderError::Stream("the local model failed".into());
                        let _ = job.events.blocking_send(Err(failed));
                    }
                    if job.events.is_closed() {
                        worker_stats.abandoned.fetch_add(1, Ordering::Relaxed);
                    }
                    worker_stats.turns.fetch_add(1, Ordering::Relaxed);
                }
            })?;
        tracing::info!(
            model = %info.path.display(),
            architecture = %info.architecture,
            load_ms = info.load_ms as u64,
            weight_mib = info.weight_bytes >> 20,
            "the local model is loaded"
        );
        Ok((Self { jobs, stats }, info))
    }
}

/// The last token's logits after each run of `steps`, read one after another by
/// Deskbell's decoder, for the tests that hold it to candle's reference models.
/// Nothing else calls it.
#[doc(hidden)]
pub fn logits_after(path: &std::path::Path, steps: &[&[u32]]) -> anyhow::Result<Vec<Vec<f32>>> {
    let mut weights = model::load(path, None)?.weights;
    let mut position = 0;
    let mut logits = Vec::new();
    for tokens in steps {
        logits.push(weights.forward(tokens, position)?);
        position += tokens.len();
    }
    Ok(logits)
}

/// How fast the decoder alone reads a prompt and generates, as llama.cpp's server
/// reports its own `timings`: `prompt` read in one step by a model that has read
/// nothing, then `generate` tokens, each the likeliest (no end is taken as one).
#[doc(hidden)]
pub struct DecodeTiming {
    pub prompt_tokens: usize,
    pub prompt: std::time::Duration,
    pub generated: usize,
    pub generation: std::time::Duration,
}

/// Loads a model once, for [`decode_timing`].
#[doc(hidden)]
pub fn load_for_timing(path: &std::path::Path) -> anyhow::Result<(model::Weights, Vocab)> {
    let loaded = model::load(path, None)?;
    Ok((loaded.weights, loaded.vocab))
}

/// Reads `prompt` with a fresh copy of `weights` and generates `generate` tokens
/// greedily, timing each half. For the benchmark against llama.cpp only.
#[doc(hidden)]
pub fn decode_timing(
    weights: &model::Weights,
    vocab: &Vocab,
    prompt: &str,
    generate: usize,
) -> anyhow::Result<DecodeTiming> {
    deskbell_kernels::on_workers(|| timed(weights, vocab, prompt, generate))
}

fn timed(
    weights: &model::Weights,
    vocab: &Vocab,
    prompt: &str,
    generate: usize,
) -> anyhow::Result<DecodeTiming> {
    let tokens = vocab.encode(prompt)?;
    let mut model = weights.fresh();
    let started = Instant::now();
    let mut logits = model.forward(&tokens, 0)?;
    let prompt_time = started.elapsed();
    let started = Instant::now();
    for i in 0..generate {
        let next = logits
            .iter()
            .enumerate()
            .max_by(|a, b| a.1.total_cmp(b.1))
            .map_or(0, |(id, _)| id as u32);
        logits = model.forward(&[next], tokens.len() + i)?;
    }
    Ok(DecodeTiming {
        prompt_tokens: tokens.len(),
        prompt: prompt_time,
        generated: generate,
        generation: started.elapsed(),
    })
}

/// The logits after each of `branches`, each read by a clone of one model that has
/// read `prefix`; then that model itself reads the first branch, and its logits come
/// last. For the test that holds the clones' shared key cache to copy on write.
#[doc(hidden)]
pub fn logits_of_branches(
    path: &std::path::Path,
    prefix: &[u32],
    branches: &[&[u32]],
) -> anyhow::Result<Vec<Vec<f32>>> {
    let mut root = model::load(path, None)?.weights;
    root.forward(prefix, 0)?;
    let mut logits = Vec::new();
    for branch in branches {
        logits.push(root.clone().forward(branch, prefix.len())?);
    }
    if let Some(first) = branches.first() {
        logits.push(root.forward(first, prefix.len())?);
    }
    Ok(logits)
}

impl LocalProvider {
    /// Makes the next turn's generation panic, so tests can hold that the worker
    /// survives one. Nothing else calls it.
    #[doc(hidden)]
    pub fn panic_on_next_turn(&self) {
        self.stats.panic_next.store(true, Ordering::Relaxed);
    }
}

impl Provider for LocalProvider {
    fn stream(&self, request: ChatRequest) -> BoxFuture<'_, Result<ModelStream, ProviderError>> {
        Box::pin(async move {
            let (events, mut received) = mpsc::channel(64);
            let sent = self.jobs.try_send(Job { request, events });
            if sent.is_ok() {
                crate::ops::metrics::local_queue(1.0);
            }
            sent.map_err(|e| match e {
                TrySendError::Full(_) => ProviderError::Busy,
                TrySendError::Disconnected(_) => {
                    ProviderError::Connect("the local model has stopped".into())
                }
            })?;
            match received.recv().await {
                Some(Ok(first)) => Ok(stream::once(async { Ok(first) })
                    .chain(ReceiverStream::new(received))
                    .boxed()),
                Some(Err(e)) => Err(e),
                None => Err(ProviderError::Stream("the local model has stopped".into())),
            }
        })
    }
}
