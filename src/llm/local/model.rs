//! A GGUF model in memory behind one `forward`.
//!
//! The model keeps its attention cache inside the weights value and is `Clone`: a
//! clone shares every weight and the cached keys so far, and the first clone to
//! append copies the keys before writing (`decoder.rs`). That is what makes the
//! prompt-prefix cache cheap: the worker keeps a clone that has read the prefix and
//! starts each turn from another clone of it.

use std::fs::File;
use std::path::Path;

use anyhow::{Context, anyhow, bail};
use candle_core::quantized::gguf_file;
use candle_core::{Device, Tensor};

use super::decoder::ModelWeights;
use super::vocab::Vocab;

#[derive(Clone)]
pub struct Weights(Box<ModelWeights>);

impl Weights {
    /// Reads the next tokens at positions `position..`; returns the logits of the
    /// last one.
    pub fn forward(&mut self, tokens: &[u32], position: usize) -> anyhow::Result<Vec<f32>> {
        let input = Tensor::new(tokens, &Device::Cpu)?.unsqueeze(0)?;
        let logits = self.0.forward(&input, position)?;
        Ok(logits.squeeze(0)?.to_vec1::<f32>()?)
    }

    /// A copy that has read nothing, sharing the weights.
    pub fn fresh(&self) -> Self {
        let mut copy = self.clone();
        copy.0.clear_kv_cache();
        copy
    }

    /// The memory the weights take.
    pub fn bytes(&self) -> usize {
        self.0.weight_bytes()
    }

    /// Gives back the spare room of the key/value cache, before the model is kept.
    pub fn shrink(&mut self) {
        self.0.shrink_cache();
    }
}

/// The longest context used, whatever a file says (Qwen2.5's is 32,768).
const MAX_CONTEXT: usize = 32_768;

pub struct Loaded {
    pub weights: Weights,
    pub vocab: Vocab,
    /// The longest prompt plus answer the model was trained for.
    pub context: usize,
    pub architecture: String,
}

pub fn load(path: &Path, tokenizer: Option<&Path>) -> anyhow::Result<Loaded> {
    let mut file =
        File::open(path).with_context(|| format!("cannot open the model {}", path.display()))?;
    let content = gguf_file::Content::read(&mut file)
        .map_err(|e| anyhow!("{} is not a GGUF model file: {e}", path.display()))?;
    let architecture = content
        .metadata
        .get("general.architecture")
        .and_then(|v| v.to_string().ok())
        .cloned()
        .unwrap_or_default();
    // The rotary tables are built for the whole context, so a file cannot ask for
    // more than a CPU could read anyway.
    let context = content
        .metadata
        .get(&format!("{architecture}.context_length"))
        .and_then(|v| v.to_u32().ok())
        .map_or(2048, |c| c as usize)
        .min(MAX_CONTEXT);
    let vocab = Vocab::load(&content, tokenizer)?;
    let weights = match architecture.as_str() {
        "llama" | "qwen2" => Weights(Box::new(ModelWeights::from_gguf(
            &architecture,
            context,
            content,
            &mut file,
        )?)),
        other => bail!(
            "the model's architecture {other:?} is not supported: use a llama or qwen2 GGUF model"
        ),
    };
    Ok(Loaded {
        weights,
        vocab,
        context,
        architecture,
    })
}
