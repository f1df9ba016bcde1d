//! The embedded sentence-embedding model (SPEC §21): loaded once at start from
//! `[knowledge] embedding_model`, or the pinned default downloaded once into the
//! model cache. When it cannot be had, knowledge search is BM25 alone and the
//! log says so in one line; nothing else changes.

#[cfg(feature = "local-model")]
mod long;
#[cfg(feature = "local-model")]
mod model;
#[cfg(feature = "local-model")]
mod short;
#[cfg(feature = "local-model")]
mod source;

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use sha2::{Digest, Sha256};

use super::dense::{decode, encode};
use super::index::Embed;
use crate::config::{Config, Embedding as Setting};
use crate::store::Store;

/// A loaded embedding model and its name, which keys the vectors it made.
pub struct Embedding {
    /// A hash of its files, wherever they are: vectors made by other weights
    /// are never mixed with these, and replicas loading the same files from
    /// different folders share their vectors.
    pub id: String,
    #[cfg(feature = "local-model")]
    model: model::Embedder,
}

impl Embedding {
    /// Loads the model in `dir` (`config.json`, `tokenizer.json`,
    /// `model.safetensors`). Reads a large file: not for an async thread.
    #[cfg(feature = "local-model")]
    pub fn load(dir: &Path) -> anyhow::Result<Embedding> {
        let read = |name: &str| {
            std::fs::read(dir.join(name))
                .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", dir.join(name).display()))
        };
        let (config, tokenizer, weights) = (
            read("config.json")?,
            read("tokenizer.json")?,
            read("model.safetensors")?,
        );
        let mut hash = Sha256::new();
        for bytes in [&config, &tokenizer, &weights] {
            hash.update(bytes);
        }
        let digest = hex::encode(hash.finalize());
        Ok(Embedding {
            id: format!("sha256:{}", &digest[..32]),
            model: model::Embedder::load(&config, &tokenizer, weights)?,
        })
    }

    #[cfg(not(feature = "local-model"))]
    pub fn load(_: &Path) -> anyhow::Result<Embedding> {
        anyhow::bail!("this build has no embedding model (built without the `local-model` feature)")
    }

    /// The vectors' size.
    pub fn dim(&self) -> usize {
        #[cfg(feature = "local-model")]
        return self.model.dim();
        #[cfg(not(feature = "local-model"))]
        0
    }

    /// One unit vector per text. Runs the model: not for an async thread.
    pub fn embed(&self, texts: &[&str]) -> anyhow::Result<Vec<Vec<f32>>> {
        #[cfg(feature = "local-model")]
        return self.model.embed(texts);
        #[cfg(not(feature = "local-model"))]
        {
            let _ = texts;
            anyhow::bail!("this build has no embedding model")
        }
    }

    /// A question's vector, then `then` with it and the moment a worker took
    /// it up, both on one of the kernels' workers: the search by meaning runs
    /// on the core the embedding has just woken and warmed, and may share its
    /// scan with the other worker there. The work is handed to the pool now,
    /// and its result comes back to the returned future, with no blocking
    /// thread between (`deskbell_kernels::spawn_on_workers`).
    pub fn embed_one_then<R, F>(
        self: &Arc<Self>,
        text: String,
        then: F,
    ) -> impl std::future::Future<Output = anyhow::Result<R>> + use<R, F>
    where
        R: Send + 'static,
        F: FnOnce(Vec<f32>, std::time::Instant) -> R + Send + 'static,
    {
        #[cfg(feature = "local-model")]
        let received = {
            let (sent, received) = tokio::sync::oneshot::channel();
            let embedding = self.clone();
            deskbell_kernels::spawn_on_workers(
                move || {
                    let started = std::time::Instant::now();
                    embedding
                        .model
                        .embed_question(&text)
                        .map(|vector| then(vector, started))
                },
                move |result| {
                    // The asker may have gone (a closed turn): nothing to tell.
                    let _ = sent.send(result);
                },
            );
            received
        };
        #[cfg(not(feature = "local-model"))]
        let _ = (text, then);
        async move {
            #[cfg(feature = "local-model")]
            return match received.await {
                Ok(Ok(result)) => result,
                Ok(Err(_)) => anyhow::bail!("the question's embedding panicked"),
                Err(_) => anyhow::bail!("the question's embedding ended without a result"),
            };
            #[cfg(not(feature = "local-model"))]
            anyhow::bail!("this build has no embedding model")
        }
    }

    /// A question's vector.
    pub fn embed_one(&self, text: &str) -> anyhow::Result<Vec<f32>> {
        #[cfg(feature = "local-model")]
        return self.model.embed_question(text);
        #[cfg(not(feature = "local-model"))]
        {
            let _ = text;
            anyhow::bail!("this build has no embedding model")
        }
    }
}

/// The embedding model the configuration asks for, or `None` with the reason
/// logged: knowledge search is then BM25 alone.
pub async fn open(config: &Config) -> Option<Arc<Embedding>> {
    if config.knowledge.embedding == Setting::Off
        || config.sites.iter().all(|s| s.knowledge.is_empty())
    {
        return None;
    }
    let dir = match &config.knowledge.embedding_model {
        Some(dir) => std::path::PathBuf::from(dir),
        None => {
            match fetch_default(&config.llm.local_cache, config.llm.hub_endpoint.as_deref()).await {
                Ok(dir) => dir,
                Err(e) => {
                    bm25_only(&format!("{e:#}"));
                    return None;
                }
            }
        }
    };
    match tokio::task::spawn_blocking(move || Embedding::load(&dir)).await {
        Ok(Ok(embedding)) => {
            tracing::info!(model = %embedding.id, "knowledge search is hybrid: BM25 and the embedding model");
            Some(Arc::new(embedding))
        }
        Ok(Err(e)) => {
            bm25_only(&format!("{e:#}"));
            None
        }
        Err(e) => {
            bm25_only(&e.to_string());
            None
        }
    }
}

fn bm25_only(why: &str) {
    tracing::warn!("knowledge search is BM25 only: the embedding model could not be loaded. {why}");
    eprintln!("Knowledge search is BM25 only: the embedding model could not be loaded. {why}");
}

/// The default model's folder in the model cache `cache`, downloaded first
/// from the Hub (or `endpoint`) when the cache does not hold a verified copy.
#[cfg(feature = "local-model")]
pub async fn fetch_default(
    cache: &Path,
    endpoint: Option<&str>,
) -> anyhow::Result<std::path::PathBuf> {
    source::fetch(cache, endpoint).await
}

#[cfg(not(feature = "local-model"))]
pub async fn fetch_default(_: &Path, _: Option<&str>) -> anyhow::Result<std::path::PathBuf> {
    anyhow::bail!("this build has no embedding model (built without the `local-model` feature)")
}

/// Vectors made at ingest through the database's cache of them: a passage's
/// vector is looked up by model and text hash first, and only those missing (or
/// whose row does not decode) are embedded, then stored for every replica.
pub struct Cached {
    embedding: Arc<Embedding>,
    store: Option<Store>,
    runtime: tokio::runtime::Handle,
}

impl Cached {
    /// Vectors from `embedding`, through `store`'s cache when there is one.
    /// Made on an async thread (it takes that runtime's handle), used on a
    /// blocking one.
    pub fn new(embedding: Arc<Embedding>, store: Option<Store>) -> Cached {
        Cached {
            embedding,
            store,
            runtime: tokio::runtime::Handle::current(),
        }
    }
}

fn hash_of(text: &str) -> String {
    hex::encode(Sha256::digest(text.as_bytes()))
}

impl Embed for Cached {
    fn model(&self) -> &str {
        &self.embedding.id
    }

    fn vectors(&self, texts: &[String]) -> anyhow::Result<Vec<Vec<f32>>> {
        let keys: Vec<String> = texts.iter().map(|t| hash_of(t)).collect();
        let model = self.embedding.id.as_str();
        // The database's rows are a cache: one that cannot be read (a
        // replica converting the column, the database away) means embedding
        // these passages here, not an ingest without vectors.
        let stored = match &self.store {
            Some(store) => match self.runtime.block_on(store.vectors().get(model, &keys)) {
                Ok(stored) => stored,
                Err(e) => {
                    tracing::warn!(error = %e, "stored passage vectors could not be read; they are embedded here");
                    HashMap::new()
                }
            },
            None => HashMap::new(),
        };
        let dim = self.embedding.dim();
        let mut out: Vec<Option<Vec<f32>>> = keys
            .iter()
            .map(|k| stored.get(k).and_then(|bytes| decode(bytes, dim)))
            .collect();
        let corrupt = keys
            .iter()
            .zip(&out)
            .filter(|(k, v)| v.is_none() && stored.contains_key(*k))
            .count();
        if corrupt > 0 {
            tracing::warn!(
                corrupt,
                "stored passage vectors did not decode; they are embedded again"
            );
        }
        let missing: Vec<usize> = (0..texts.len()).filter(|&i| out[i].is_none()).collect();
        let inputs: Vec<&str> = missing.iter().map(|&i| texts[i].as_str()).collect();
        let made = self.embedding.embed(&inputs)?;
        let mut rows = Vec::with_capacity(made.len());
        for (&i, vector) in missing.iter().zip(made) {
            rows.push((keys[i].clone(), encode(&vector)));
            out[i] = Some(vector);
        }
        if let Some(store) = &self.store
            && let Err(e) = self.runtime.block_on(store.vectors().put(model, &rows))
        {
            tracing::warn!(error = %e, "passage vectors could not be stored; the next ingest embeds them again");
        }
        Ok(out.into_iter().flatten().collect())
    }
}
