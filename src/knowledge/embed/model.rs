//! The sentence-embedding model (SPEC §21): a BERT-family encoder run by candle on
//! the CPU, mean-pooled over the tokens and normalised, so that the dot product of
//! two vectors is their cosine similarity.

use anyhow::Context;
use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use candle_transformers::models::bert::{BertModel, Config};
use tokenizers::{PaddingParams, PaddingStrategy, Tokenizer, TruncationParams};

/// Tokens read from a passage: all-MiniLM-L6-v2 was trained on 256 (its
/// `sentence_bert_config.json`); longer passages are cut, as sentence-transformers
/// cuts them.
pub const MAX_TOKENS: usize = 256;

/// Passages embedded in one forward pass at ingest. Passages are sorted by length
/// first, so a batch's padding is small.
const BATCH: usize = 16;

pub struct Embedder {
    model: BertModel,
    /// The same weights in 8 bits, for questions (`short.rs`).
    short: super::short::Short,
    tokenizer: Tokenizer,
    dim: usize,
}

impl Embedder {
    /// The model from the bytes of its `config.json`, `tokenizer.json` and
    /// `model.safetensors` (read once by the caller, who also hashes them).
    pub fn load(config: &[u8], tokenizer: &[u8], weights: Vec<u8>) -> anyhow::Result<Embedder> {
        let raw = serde_json::from_slice::<serde_json::Value>(config)
            .context("config.json is not JSON")?;
        let config: Config = serde_json::from_value(raw.clone())
            .context("config.json is not a BERT configuration")?;
        let number = |key: &str| {
            raw.get(key)
                .and_then(|v| v.as_u64())
                .map(|v| v as usize)
                .with_context(|| format!("config.json has no {key}"))
        };
        let dim = number("hidden_size")?;
        let mut tokenizer = Tokenizer::from_bytes(tokenizer)
            .map_err(|e| anyhow::anyhow!("tokenizer.json cannot be read: {e}"))?;
        tokenizer
            .with_truncation(Some(TruncationParams {
                max_length: MAX_TOKENS,
                ..Default::default()
            }))
            .map_err(|e| anyhow::anyhow!("cannot set the tokenizer's truncation: {e}"))?;
        tokenizer.with_padding(Some(PaddingParams {
            strategy: PaddingStrategy::BatchLongest,
            ..Default::default()
        }));
        let short = super::short::Short::load(
            &weights,
            number("num_hidden_layers")?,
            number("num_attention_heads")?,
        )?;
        let vb = VarBuilder::from_buffered_safetensors(weights, DType::F32, &Device::Cpu)
            .context("model.safetensors cannot be read")?;
        let model = BertModel::load(vb, &config).context("the embedding model cannot be loaded")?;
        Ok(Embedder {
            model,
            short,
            tokenizer,
            dim,
        })
    }

    pub fn dim(&self) -> usize {
        self.dim
    }

    /// A question's vector: on the 8-bit kernels when it is short, which it
    /// nearly always is.
    pub fn embed_question(&self, text: &str) -> anyhow::Result<Vec<f32>> {
        let encoding = self
            .tokenizer
            .encode(text, true)
            .map_err(|e| anyhow::anyhow!("cannot tokenise: {e}"))?;
        let ids = encoding.get_ids();
        if ids.len() <= super::short::SHORT_TOKENS {
            // On a kernel worker, each of the question's 24 products shares its
            // rows with the other worker directly instead of being handed to the
            // pool while this thread sleeps (as for the chat model, issue 42).
            return deskbell_kernels::on_workers(|| self.short.embed(ids));
        }
        self.embed(&[text])?
            .pop()
            .context("the embedding model gave no vector")
    }

    /// One normalised vector per text, in order. Texts are embedded in batches of
    /// similar length.
    pub fn embed(&self, texts: &[&str]) -> anyhow::Result<Vec<Vec<f32>>> {
        let mut order: Vec<usize> = (0..texts.len()).collect();
        order.sort_by_key(|&i| texts[i].len());
        let mut out = vec![Vec::new(); texts.len()];
        for batch in order.chunks(BATCH) {
            let inputs: Vec<&str> = batch.iter().map(|&i| texts[i]).collect();
            for (&i, vector) in batch.iter().zip(self.embed_batch(&inputs)?) {
                out[i] = vector;
            }
        }
        Ok(out)
    }

    fn embed_batch(&self, texts: &[&str]) -> anyhow::Result<Vec<Vec<f32>>> {
        let encodings = self
            .tokenizer
            .encode_batch(texts.to_vec(), true)
            .map_err(|e| anyhow::anyhow!("cannot tokenise: {e}"))?;
        let rows = encodings.len();
        let width = encodings.first().map_or(0, |e| e.get_ids().len());
        let mut ids = Vec::with_capacity(rows * width);
        let mut mask = Vec::with_capacity(rows * width);
        for e in &encodings {
            ids.extend(e.get_ids().iter().copied());
            mask.extend(e.get_attention_mask().iter().copied());
        }
        let device = &Device::Cpu;
        let ids = Tensor::from_vec(ids, (rows, width), device)?;
        let mask = Tensor::from_vec(mask, (rows, width), device)?;
        let types = ids.zeros_like()?;
        let hidden = self.model.forward(&ids, &types, Some(&mask))?;
        // Mean over the real tokens only: padding is masked out of the sum and
        // the count.
        let mask = mask.to_dtype(DType::F32)?.unsqueeze(2)?;
        let summed = hidden.broadcast_mul(&mask)?.sum(1)?;
        let counts = mask.sum(1)?.clamp(1e-9f32, f32::MAX)?;
        let mean = summed.broadcast_div(&counts)?;
        let norms = mean
            .sqr()?
            .sum_keepdim(1)?
            .sqrt()?
            .clamp(1e-12f32, f32::MAX)?;
        let unit = mean.broadcast_div(&norms)?;
        Ok(unit.to_vec2::<f32>()?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The test model's folder (`scripts/fetch-test-embedder`), when fetched.
    fn test_model() -> Option<std::path::PathBuf> {
        std::env::var_os("DESKBELL_TEST_EMBEDDER").map(Into::into)
    }

    fn cosine(a: &[f32], b: &[f32]) -> f32 {
        a.iter().zip(b).map(|(x, y)| x * y).sum()
    }

    #[test]
    fn a_question_in_other_words_is_nearer_its_page_than_another_page() {
        let Some(dir) = test_model() else {
            eprintln!("DESKBELL_TEST_EMBEDDER is not set; skipped");
            return;
        };
        let read = |name: &str| std::fs::read(dir.join(name)).unwrap();
        let model = Embedder::load(
            &read("config.json"),
            &read("tokenizer.json"),
            read("model.safetensors"),
        )
        .unwrap();
        let texts = [
            "can I send it back?",
            "Returns\nYou may return any item within 30 days for a full refund.",
            "Shipping\nOrders leave our warehouse within two working days.",
            "",
            &"word ".repeat(5000),
            "Kann ich es zurückschicken?",
        ];
        let v = model.embed(&texts).unwrap();
        assert_eq!(v.len(), texts.len());
        for vector in &v {
            assert_eq!(vector.len(), 384);
            let norm: f32 = vector.iter().map(|x| x * x).sum();
            assert!((norm - 1.0).abs() < 1e-4, "{norm}");
        }
        assert!(cosine(&v[0], &v[1]) > cosine(&v[0], &v[2]) + 0.05);
        // Batched and alone give the same vector.
        let alone = model.embed(&[texts[1]]).unwrap();
        assert!(cosine(&alone[0], &v[1]) > 0.9999);
        // A question on the 8-bit kernels points where the f32 model's does.
        for (i, text) in texts.iter().enumerate().filter(|(_, t)| t.len() < 100) {
            let short = model.embed_question(text).unwrap();
            let similar = cosine(&short, &v[i]);
            assert!(similar > 0.99, "{text:?}: {similar}");
        }
        assert_eq!(
            model.embed_question(texts[4]).unwrap().len(),
            384,
            "long: candle's path"
        );
    }
}
