//! The sentence-embedding model (SPEC §21): a BERT-family encoder run on the CPU
//! by Deskbell's kernels (`short.rs`, `long.rs`), mean-pooled over the tokens and
//! normalised, so that the dot product of two vectors is their cosine similarity.

use tokenizers::{Tokenizer, TruncationParams};

/// Tokens read from a passage: all-MiniLM-L6-v2 was trained on 256 (its
/// `sentence_bert_config.json`); longer passages are cut, as sentence-transformers
/// cuts them.
pub const MAX_TOKENS: usize = 256;

pub struct Embedder {
    /// The encoder's weights, in 8 bits and in f32 (`short.rs`).
    short: super::short::Short,
    tokenizer: Tokenizer,
    dim: usize,
}

impl Embedder {
    /// The model from the bytes of its `config.json`, `tokenizer.json` and
    /// `model.safetensors` (read once by the caller, who also hashes them).
    pub fn load(config: &[u8], tokenizer: &[u8], weights: Vec<u8>) -> anyhow::Result<Embedder> {
        let raw = serde_json::from_slice::<serde_json::Value>(config)
            .map_err(|e| anyhow::anyhow!("config.json is not JSON: {e}"))?;
        let number = |key: &str| {
            raw.get(key)
                .and_then(|v| v.as_u64())
                .map(|v| v as usize)
                .ok_or_else(|| anyhow::anyhow!("config.json has no {key}"))
        };
        let dim = number("hidden_size")?;
        let eps = encoder_kind(&raw)?;
        let mut tokenizer = Tokenizer::from_bytes(tokenizer)
            .map_err(|e| anyhow::anyhow!("tokenizer.json cannot be read: {e}"))?;
        tokenizer
            .with_truncation(Some(TruncationParams {
                max_length: MAX_TOKENS,
                ..Default::default()
            }))
            .map_err(|e| anyhow::anyhow!("cannot set the tokenizer's truncation: {e}"))?;
        // Each text is run alone, so padding would only add tokens to the mean:
        // `tokenizer.json` may ask for it (all-MiniLM-L6-v2's pads to 128).
        tokenizer.with_padding(None);
        let short = super::short::Short::load(
            &weights,
            number("num_hidden_layers")?,
            number("num_attention_heads")?,
            eps,
        )?;
        anyhow::ensure!(
            short.dim() == dim,
            "config.json's hidden_size is not the weights' width"
        );
        Ok(Embedder {
            short,
            tokenizer,
            dim,
        })
    }

    pub fn dim(&self) -> usize {
        self.dim
    }

    /// A question's vector.
    pub fn embed_question(&self, text: &str) -> anyhow::Result<Vec<f32>> {
        let mut vectors = self.embed(&[text])?;
        vectors
            .pop()
            .ok_or_else(|| anyhow::anyhow!("the embedding model gave no vector"))
    }

    /// One normalised vector per text, in order, each on one kernel worker (a
    /// short text's products are shared with the other worker too).
    pub fn embed(&self, texts: &[&str]) -> anyhow::Result<Vec<Vec<f32>>> {
        let mut ids = Vec::with_capacity(texts.len());
        for text in texts {
            let encoding = self
                .tokenizer
                .encode(*text, true)
                .map_err(|e| anyhow::anyhow!("cannot tokenise: {e}"))?;
            ids.push(encoding.get_ids().to_vec());
        }
        // Longest first, so the passages the kernels' workers take together
        // (one each, `each_on_workers`) are of about one length and the workers
        // finish each round together; each passage is embedded alone, so the
        // order changes no vector.
        let mut order: Vec<usize> = (0..ids.len()).collect();
        order.sort_by_key(|&i| std::cmp::Reverse(ids[i].len()));
        let made = deskbell_kernels::each_on_workers(&order, |&i| self.short.embed(&ids[i]));
        let mut in_order: Vec<Option<anyhow::Result<Vec<f32>>>> =
            std::iter::repeat_with(|| None).take(ids.len()).collect();
        for (i, vector) in order.into_iter().zip(made) {
            in_order[i] = Some(vector);
        }
        // The error of the first text that failed, as when they ran in order.
        in_order.into_iter().flatten().collect()
    }
}

/// Refuses a configuration the encoder (`short.rs`) does not implement, which
/// would otherwise load and give wrong vectors without a word: it runs BERT with
/// absolute positions and the erf GELU. Returns the layer norms' epsilon.
fn encoder_kind(config: &serde_json::Value) -> anyhow::Result<f32> {
    // An absent key takes BERT's default; a value that is not a string fails
    // the comparison below and is named in its message.
    let text = |key: &str, usual: &str| match config.get(key) {
        None => usual.to_string(),
        Some(v) => v.as_str().map_or_else(|| v.to_string(), str::to_string),
    };
    let activation = text("hidden_act", "gelu");
    anyhow::ensure!(
        activation == "gelu",
        "config.json's hidden_act is {activation:?}; the embedding model must use \"gelu\""
    );
    let positions = text("position_embedding_type", "absolute");
    anyhow::ensure!(
        positions == "absolute",
        "config.json's position_embedding_type is {positions:?}; the embedding model must use \"absolute\""
    );
    let eps = config
        .get("layer_norm_eps")
        .map_or(Some(1e-12), |v| v.as_f64())
        .filter(|eps| eps.is_finite() && *eps > 0.0)
        .ok_or_else(|| anyhow::anyhow!("config.json's layer_norm_eps is not a positive number"))?;
    Ok(eps as f32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_configuration_the_encoder_does_not_run_is_refused_with_its_reason() {
        let load = |config: &str| {
            Embedder::load(config.as_bytes(), b"{}", Vec::new())
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default()
        };
        let base = r#""hidden_size": 384, "num_hidden_layers": 6, "num_attention_heads": 12"#;
        let relu = load(&format!(r#"{{{base}, "hidden_act": "relu"}}"#));
        assert!(relu.contains("hidden_act is \"relu\""), "{relu}");
        let relative = load(&format!(
            r#"{{{base}, "position_embedding_type": "relative_key"}}"#
        ));
        assert!(relative.contains("position_embedding_type"), "{relative}");
        let eps = load(&format!(r#"{{{base}, "layer_norm_eps": -1}}"#));
        assert!(eps.contains("layer_norm_eps"), "{eps}");
        // A usual configuration gets past these checks, to the tokenizer.
        let usual = load(&format!(
            r#"{{{base}, "hidden_act": "gelu", "layer_norm_eps": 1e-12}}"#
        ));
        assert!(usual.contains("tokenizer.json"), "{usual}");
        assert!(encoder_kind(&serde_json::json!({})).is_ok());
        assert!(encoder_kind(&serde_json::json!({"hidden_act": {"gelu": 1}})).is_err());
    }

    /// The test model (`scripts/fetch-test-embedder`) and its folder, when fetched.
    fn test_embedder() -> Option<(std::path::PathBuf, Embedder)> {
        let dir: std::path::PathBuf = std::env::var_os("DESKBELL_TEST_EMBEDDER")?.into();
        let read = |name: &str| std::fs::read(dir.join(name)).unwrap();
        let model = Embedder::load(
            &read("config.json"),
            &read("tokenizer.json"),
            read("model.safetensors"),
        )
        .unwrap();
        Some((dir, model))
    }

    /// A help page's section of about 200 tokens, as the chunker cuts them.
    const PASSAGE: &str = "Returns and refunds\nYou may return most new, unopened \
        items within 30 days of delivery for a full refund. We also pay the return \
        shipping costs if the return is a result of our error (you received an \
        incorrect or defective item, for example). You should expect to receive your \
        refund within four weeks of giving your package to the return shipper; in many \
        cases you will receive a refund more quickly. This time period includes the \
        transit time for us to receive your return from the shipper (five to ten \
        business days), the time it takes us to process your return once we receive it \
        (three to five business days), and the time it takes your bank to process our \
        refund request (five to ten business days). If you need to return an item, sign \
        in to your account, view the order using the Complete Orders link under the My \
        Account menu and click the Return Item(s) button. We will notify you by email \
        of your refund once we have received and processed the returned item.";

    fn cosine(a: &[f32], b: &[f32]) -> f32 {
        a.iter().zip(b).map(|(x, y)| x * y).sum()
    }

    /// candle's f32 BERT, mean-pooled and normalised as sentence-transformers
    /// does: the reference the kernels are held to.
    fn reference(dir: &std::path::Path, texts: &[&str]) -> Vec<Vec<f32>> {
        use candle_core::{DType, Device, Tensor};
        use candle_transformers::models::bert::{BertModel, Config};
        let read = |name: &str| std::fs::read(dir.join(name)).unwrap();
        let config: Config = serde_json::from_slice(&read("config.json")).unwrap();
        let weights = read("model.safetensors");
        let vb =
            candle_nn::VarBuilder::from_buffered_safetensors(weights, DType::F32, &Device::Cpu)
                .unwrap();
        let model = BertModel::load(vb, &config).unwrap();
        let mut tokenizer = Tokenizer::from_bytes(read("tokenizer.json")).unwrap();
        tokenizer
            .with_truncation(Some(TruncationParams {
                max_length: MAX_TOKENS,
                ..Default::default()
            }))
            .unwrap();
        tokenizer.with_padding(None);
        let embed = |text: &&str| {
            let ids = tokenizer.encode(*text, true).unwrap().get_ids().to_vec();
            let n = ids.len();
            let ids = Tensor::from_vec(ids, (1, n), &Device::Cpu).unwrap();
            let hidden = model
                .forward(&ids, &ids.zeros_like().unwrap(), None)
                .unwrap();
            let mean: Vec<f32> = hidden
                .mean(1)
                .unwrap()
                .squeeze(0)
                .unwrap()
                .to_vec1()
                .unwrap();
            let norm = mean.iter().map(|v| v * v).sum::<f32>().sqrt();
            mean.iter().map(|v| v / norm).collect()
        };
        texts.iter().map(embed).collect()
    }

    /// A visitor's question asked while an ingest embeds many passages is
    /// answered long before the ingest ends: the passages go to the kernels'
    /// workers one each at a time, and the question, queued meanwhile, is taken
    /// between two rounds. When they went at once, a worker took it only once no
    /// passage was left to start, so it waited for nearly the whole ingest. The
    /// measure is relative (the question's wait against the rest of the
    /// ingest's), so a slower machine does not change the outcome.
    #[test]
    fn a_question_asked_during_an_ingest_does_not_wait_for_its_end() {
        use std::time::{Duration, Instant};
        let Some((_, model)) = test_embedder() else {
            eprintln!("DESKBELL_TEST_EMBEDDER is not set; skipped");
            return;
        };
        // Some seconds of passages on any number of workers.
        let passages = vec![PASSAGE; 64 * rayon::current_num_threads()];
        let (asked, answered, ingested) = std::thread::scope(|s| {
            let ingest = s.spawn(|| {
                model.embed(&passages).unwrap();
                Instant::now()
            });
            // Lets the ingest reach the workers first (tokenising takes
            // milliseconds).
            std::thread::sleep(Duration::from_millis(300));
            let asked = Instant::now();
            deskbell_kernels::on_workers(|| model.embed_question("can I send it back?")).unwrap();
            (asked, Instant::now(), ingest.join().unwrap())
        });
        let (wait, rest) = (answered - asked, ingested.saturating_duration_since(asked));
        assert!(
            wait * 4 < rest,
            "the question waited {wait:?}, the ingest went on {rest:?} after it was asked"
        );
    }

    /// Where the CPU has AMX-BF16, a passage takes the bf16 tiles, so the test
    /// below would no longer cover the 8-bit path that CPUs with VNNI alone
    /// take. `DESKBELL_AMX` is read once a process: the test is run again in
    /// a process of its own with the tiles kept to 8 bits.
    #[test]
    fn the_vectors_hold_with_passages_on_the_8_bit_tiles_too() {
        if std::env::var_os("DESKBELL_TEST_EMBEDDER").is_none()
            || !deskbell_kernels::tiles::available()
        {
            eprintln!("no embedder or no AMX-BF16 here: the test below covers this path");
            return;
        }
        let name = "knowledge::embed::model::tests::a_question_in_other_words_is_nearer_its_page_than_another_page";
        let run = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", name, "--nocapture"])
            .env("DESKBELL_AMX", "int8")
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&run.stdout);
        assert!(
            run.status.success(),
            "{said}{}",
            String::from_utf8_lossy(&run.stderr)
        );
        assert!(said.contains("1 passed"), "{said}");
    }

    #[test]
    fn a_question_in_other_words_is_nearer_its_page_than_another_page() {
        let Some((dir, model)) = test_embedder() else {
            eprintln!("DESKBELL_TEST_EMBEDDER is not set; skipped");
            return;
        };
        let texts = [
            "can I send it back?",
            "Returns\nYou may return any item within 30 days for a full refund.",
            "Shipping\nOrders leave our warehouse within two working days.",
            "",
            &"word ".repeat(5000),
            "Kann ich es zurückschicken?",
            PASSAGE,
        ];
        let v = model.embed(&texts).unwrap();
        assert_eq!(v.len(), texts.len());
        for vector in &v {
            assert_eq!(vector.len(), 384);
            let norm: f32 = vector.iter().map(|x| x * x).sum();
            assert!((norm - 1.0).abs() < 1e-4, "{norm}");
        }
        assert!(cosine(&v[0], &v[1]) > cosine(&v[0], &v[2]) + 0.05);
        assert!(cosine(&v[0], &v[6]) > cosine(&v[0], &v[2]) + 0.05);
        // Alone and among others give the same vector.
        assert_eq!(model.embed_question(texts[1]).unwrap(), v[1]);
        // Every text points where candle's f32 model points: through 8 bits (the
        // product of any text where the CPU has VNNI or AVX2's widened product
        // and `DESKBELL_EMBED_INT8` is not `off`, a short text's rows
        // elsewhere) within their rounding, through the f32 GEMM within f32
        // rounding.
        for ((text, ours), theirs) in texts.iter().zip(&v).zip(reference(&dir, &texts)) {
            let similar = cosine(ours, &theirs);
            let tokens = model.tokenizer.encode(*text, true).unwrap().len();
            let in_f32 = tokens > super::super::short::SHORT_TOKENS
                && super::super::short::passages_in_f32();
            let floor = if in_f32 { 0.9999 } else { 0.998 };
            let start: String = text.chars().take(40).collect();
            assert!(similar > floor, "{start:?} ({tokens} tokens): {similar}");
        }
    }
}
