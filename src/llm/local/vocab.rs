//! The local model's tokenizer: read from the GGUF file's own metadata, or from a
//! `tokenizer.json` beside it, and offered to the grammar engine as a token trie.
//!
//! candle builds a byte-level BPE tokenizer from GGUF metadata, but for the
//! pre-tokenizers it does not know (SmolLM's `smollm`, StarCoder's, plain GPT-2) it
//! falls back to a byte-level pre-tokenizer that adds a leading space, so "Hello"
//! becomes "ĠHello" and every prompt is tokenised differently from how the model was
//! trained. `fix_pre_tokenizer` replaces it with what llama.cpp uses for those names;
//! the tests compare ids with llama.cpp's own tokenisation.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, anyhow};
use candle_core::quantized::gguf_file;
use candle_core::quantized::tokenizer::TokenizerFromGguf;
use tokenizers::Tokenizer;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::digits::Digits;
use tokenizers::pre_tokenizers::sequence::Sequence;
use toktrie::{TokEnv, TokRxInfo, TokTrie, TokenId, TokenizerEnv};

/// GGUF token types (llama.cpp's `llama_token_type`) that are not ordinary text.
const CONTROL: u32 = 3;
const USER_DEFINED: u32 = 4;

pub struct Vocab {
    pub tokenizer: Tokenizer,
    /// The same vocabulary as bytes, for grammar masks.
    pub env: TokEnv,
    /// Special tokens by their text, such as `<|im_end|>`.
    pub specials: HashMap<String, u32>,
    /// Tokens that end the assistant's answer.
    pub stops: Vec<u32>,
}

impl Vocab {
    /// The vocabulary of a GGUF model file, without loading its weights.
    pub fn of_model(path: &Path, tokenizer: Option<&Path>) -> anyhow::Result<Self> {
        let mut file = std::fs::File::open(path)
            .with_context(|| format!("cannot open the model {}", path.display()))?;
        let content = gguf_file::Content::read(&mut file)
            .map_err(|e| anyhow!("{} is not a GGUF model file: {e}", path.display()))?;
        Self::load(&content, tokenizer)
    }

    pub fn load(content: &gguf_file::Content, file: Option<&Path>) -> anyhow::Result<Self> {
        let tokenizer = match file {
            Some(path) => Tokenizer::from_file(path)
                .map_err(|e| anyhow!("cannot read the tokenizer {}: {e}", path.display()))?,
            None => from_gguf(content)?,
        };
        let tokens = string_array(content, "tokenizer.ggml.tokens")?;
        let types = token_types(content, tokens.len());
        let mut specials = HashMap::new();
        for (id, token) in tokens.iter().enumerate() {
            if matches!(types[id], CONTROL | USER_DEFINED) {
                specials.insert(token.clone(), id as u32);
            }
        }
        let eos = content
            .metadata
            .get("tokenizer.ggml.eos_token_id")
            .and_then(|v| v.to_u32().ok());
        let mut stops: Vec<u32> = eos.into_iter().collect();
        for name in ["<|im_end|>", "<|endoftext|>", "<|eot_id|>"] {
            if let Some(id) = specials.get(name)
                && !stops.contains(id)
            {
                stops.push(*id);
            }
        }
        let env = trie_env(
            &tokens,
            &types,
            stops.first().copied().unwrap_or(0),
            &tokenizer,
        );
        Ok(Self {
            tokenizer,
            env,
            specials,
            stops,
        })
    }

    /// Token ids of a text in which special tokens such as `<|im_start|>` count as
    /// the single tokens they are.
    pub fn encode(&self, text: &str) -> anyhow::Result<Vec<u32>> {
        let encoding = self
            .tokenizer
            .encode(text, false)
            .map_err(|e| anyhow!("tokenizer: {e}"))?;
        Ok(encoding.get_ids().to_vec())
    }

    pub fn decode(&self, ids: &[u32]) -> anyhow::Result<String> {
        self.tokenizer
            .decode(ids, false)
            .map_err(|e| anyhow!("tokenizer: {e}"))
    }
}

fn from_gguf(content: &gguf_file::Content) -> anyhow::Result<Tokenizer> {
    let mut tokenizer =
        Tokenizer::from_gguf(content).context("the model file carries no usable tokenizer")?;
    let pre = content
        .metadata
        .get("tokenizer.ggml.pre")
        .and_then(|v| v.to_string().ok())
        .map_or("gpt2", |s| s.as_str());
    fix_pre_tokenizer(&mut tokenizer, pre);
    Ok(tokenizer)
}

/// Gives the names candle's GGUF reader does not handle the pre-tokenizer
/// llama.cpp uses for them: StarCoder-style vocabularies split every digit and add
/// no leading space; plain GPT-2 adds no leading space either.
fn fix_pre_tokenizer(tokenizer: &mut Tokenizer, pre: &str) {
    let byte_level = ByteLevel::new(false, true, true);
    match pre {
        "smollm" | "starcoder" | "refact" | "codeshell" | "command-r" | "exaone" | "minerva" => {
            let digits = Digits::new(true);
            tokenizer
                .with_pre_tokenizer(Some(Sequence::new(vec![digits.into(), byte_level.into()])));
        }
        "qwen2" | "llama3" | "smaug-bpe" | "lfm2" => return,
        _ => {
            tokenizer.with_pre_tokenizer(Some(byte_level));
        }
    }
    tokenizer.with_decoder(Some(ByteLevel::default()));
    tokenizer.with_post_processor(None::<ByteLevel>);
}

fn string_array(content: &gguf_file::Content, key: &str) -> anyhow::Result<Vec<String>> {
    let value = content
        .metadata
        .get(key)
        .ok_or_else(|| anyhow!("the model file has no {key}"))?;
    value
        .to_vec()?
        .iter()
        .map(|v| Ok(v.to_string()?.clone()))
        .collect()
}

fn token_types(content: &gguf_file::Content, len: usize) -> Vec<u32> {
    let mut types = vec![1; len];
    if let Some(Ok(values)) = content
        .metadata
        .get("tokenizer.ggml.token_type")
        .map(|v| v.to_vec())
    {
        for (slot, v) in types.iter_mut().zip(values) {
            *slot = v.to_i32().map_or(1, |t| t as u32);
        }
    }
    types
}

/// The GPT-2 byte-level alphabet backwards: the printable character each byte is
/// spelled with in the vocabulary, mapped to the byte.
fn byte_level_chars() -> HashMap<char, u8> {
    let mut map = HashMap::new();
    let mut next = 0x100u32;
    for byte in 0..=255u8 {
        let c = byte as char;
        if matches!(c, '!'..='~' | '\u{A1}'..='\u{AC}' | '\u{AE}'..='\u{FF}') {
            map.insert(c, byte);
        } else if let Some(c) = char::from_u32(next) {
            map.insert(c, byte);
            next += 1;
        }
    }
    map
}

fn trie_env(tokens: &[String], types: &[u32], eos: u32, tokenizer: &Tokenizer) -> TokEnv {
    let chars = byte_level_chars();
    let bytes: Vec<Vec<u8>> = tokens
        .iter()
        .zip(types)
        .map(|(token, kind)| {
            if matches!(*kind, CONTROL | USER_DEFINED) {
                let mut b = vec![TokTrie::SPECIAL_TOKEN_MARKER];
                b.extend_from_slice(token.as_bytes());
                b
            } else {
                // A token outside the byte-level alphabet is spelled as itself.
                token
                    .chars()
                    .map(|c| chars.get(&c).copied())
                    .collect::<Option<Vec<u8>>>()
                    .unwrap_or_else(|| token.as_bytes().to_vec())
            }
        })
        .collect();
    let info = TokRxInfo::new(tokens.len() as u32, eos);
    let trie = TokTrie::from(&info, &bytes);
    Arc::new(TrieEnv {
        trie,
        tokenizer: tokenizer.clone(),
    })
}

struct TrieEnv {
    trie: TokTrie,
    tokenizer: Tokenizer,
}

impl TokenizerEnv for TrieEnv {
    fn tok_trie(&self) -> &TokTrie {
        &self.trie
    }

    fn tokenize_bytes(&self, s: &[u8]) -> Vec<TokenId> {
        self.trie.tokenize_with_greedy_fallback(s, |text| {
            self.tokenizer
                .encode(text, false)
                .map(|e| e.get_ids().to_vec())
                .unwrap_or_default()
        })
    }
}
