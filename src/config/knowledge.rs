//! `[knowledge]` (SPEC §21): whether knowledge search adds dense vectors from the
//! embedded sentence-embedding model to BM25, and which model files to use.

use serde::Deserialize;

/// `embedding = "on"` (the default) or `"off"` (BM25 only).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Embedding {
    #[default]
    On,
    Off,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct KnowledgeConfig {
    pub embedding: Embedding,
    /// A folder holding `config.json`, `tokenizer.json` and `model.safetensors`
    /// of a BERT-family sentence-embedding model (`DESKBELL_EMBEDDING_MODEL`);
    /// when unset, the pinned default is downloaded once into the model cache.
    pub embedding_model: Option<String>,
}
