//! One turn of generation on the worker thread: read the prompt (reusing a cached
//! prefix), then write the answer token by token, handing each piece of text to the
//! waiting turn as soon as it is whole. When the model opens a tool call, every
//! further token is masked by a grammar of the offered tools' schemas, so the call
//! that comes out is valid JSON naming a real tool with arguments its schema allows.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use anyhow::anyhow;
use llguidance::api::TopLevelGrammar;
use llguidance::{Matcher, ParserFactory};
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::Stats;
use super::chat::{self, CALL_OPEN};
use super::model::{Loaded, Weights};
use super::prefix::PrefixCache;
use super::repeat;
use crate::llm::{ChatMessage, ChatRequest, ModelEvent, ProviderError, ToolCall, ToolSpec};
use crate::wire::Usage;

/// Prompt tokens read in one step: bounds the attention matrix of a long prompt.
const CHUNK: usize = 256;
/// How far back repeated tokens are discouraged; tiny models loop without it.
const REPEAT_WINDOW: usize = 64;
const REPEAT_PENALTY: f32 = 1.1;
/// The fewest answer tokens a prompt must leave room for.
const MIN_ROOM: usize = 16;

pub type Events = mpsc::Sender<Result<ModelEvent, ProviderError>>;

pub struct Engine {
    loaded: Loaded,
    factory: ParserFactory,
    prefixes: PrefixCache,
    stats: Arc<Stats>,
}

/// Why generation stopped early.
enum Halt {
    /// Nobody waits for the answer any more.
    Abandoned,
    Failed(anyhow::Error),
}

impl From<anyhow::Error> for Halt {
    fn from(e: anyhow::Error) -> Self {
        Halt::Failed(e)
    }
}

impl From<candle_core::Error> for Halt {
    fn from(e: candle_core::Error) -> Self {
        Halt::Failed(e.into())
    }
}

impl Engine {
    pub fn new(loaded: Loaded, stats: Arc<Stats>) -> anyhow::Result<Self> {
        let mut factory = ParserFactory::new_simple(&loaded.vocab.env)?;
        factory.set_stderr_log_level(0);
        Ok(Self {
            loaded,
            factory,
            prefixes: PrefixCache::new(4),
            stats,
        })
    }

    /// Runs one request, sending its events; failures are sent too.
    /// Forgets every cached prefix: after a panic mid-turn, a half-written model
    /// copy must not be reused.
    pub fn forget_prefixes(&mut self) {
        self.prefixes = PrefixCache::new(4);
    }

    pub fn run(&mut self, request: &ChatRequest, events: &Events) {
        match self.generate(request, events) {
            Ok(()) | Err(Halt::Abandoned) => {}
            Err(Halt::Failed(e)) => {
                tracing::warn!(error = format!("{e:#}"), "the local model failed");
                let _ = events
                    .blocking_send(Err(ProviderError::Stream("the local model failed".into())));
            }
        }
    }

    fn generate(&mut self, request: &ChatRequest, events: &Events) -> Result<(), Halt> {
        let (prefix, rest) = self.fit(request)?;
        let input_tokens = prefix.len() + rest.len();
        let room = self.loaded.context.saturating_sub(input_tokens);
        if room < MIN_ROOM {
            let _ = events.blocking_send(Err(ProviderError::Protocol(format!(
                "the prompt ({input_tokens} tokens) does not fit the model's context"
            ))));
            return Ok(());
        }
        let mut model = self.read_prefix(&prefix)?;
        let mut logits = vec![];
        for (i, chunk) in rest.chunks(CHUNK).enumerate() {
            if events.is_closed() {
                return Err(Halt::Abandoned);
            }
            logits = model.forward(chunk, prefix.len() + i * CHUNK)?;
        }
        let limit = (request.max_tokens as usize).min(room);
        let generating = std::time::Instant::now();
        let mut writer = Writer::new(self, &request.tools, events);
        let mut position = input_tokens;
        let mut written = 0;
        while written < limit {
            let Some(token) = writer.choose(&mut logits)? else {
                // The repetition guard ended a loop.
                break;
            };
            written += 1;
            if writer.take(token)? {
                break;
            }
            logits = model.forward(&[token], position)?;
            position += 1;
        }
        writer.finish()?;
        let seconds = generating.elapsed().as_secs_f64();
        if written > 0 && seconds > 0.0 {
            crate::ops::metrics::local_speed(written as f64 / seconds);
        }
        let usage = Usage {
            input_tokens: input_tokens as u64,
            output_tokens: written as u64,
        };
        send(events, Ok(ModelEvent::Usage(usage)))
    }

    /// The prompt's prefix and rest as tokens. When they leave too little of the
    /// model's context for an answer, the oldest messages after the system message
    /// are left out, one at a time, down to the last one; the prefix stays.
    fn fit(&self, request: &ChatRequest) -> Result<(Vec<u32>, Vec<u32>), Halt> {
        let vocab = &self.loaded.vocab;
        let specials: Vec<&str> = vocab.specials.keys().map(String::as_str).collect();
        let wanted = self
            .loaded
            .context
            .saturating_sub(MIN_ROOM.max(request.max_tokens as usize / 2));
        let render = |messages: &[ChatMessage]| {
            chat::render(messages, &request.tools, &specials, request.stable_system)
        };
        let prompt = render(&request.messages);
        let prefix = vocab.encode(&prompt.prefix)?;
        let mut rest = vocab.encode(&prompt.rest)?;
        let first = usize::from(matches!(
            request.messages.first(),
            Some(ChatMessage::System { .. })
        ));
        let mut dropped = 0;
        while prefix.len() + rest.len() > wanted && request.messages.len() > first + dropped + 1 {
            dropped += 1;
            let kept: Vec<ChatMessage> = request.messages[..first]
                .iter()
                .chain(&request.messages[first + dropped..])
                .cloned()
                .collect();
            rest = vocab.encode(&render(&kept).rest)?;
        }
        Ok((prefix, rest))
    }

    /// A model that has read `prefix`, from the cache when it can be.
    fn read_prefix(&mut self, prefix: &[u32]) -> Result<Weights, Halt> {
        if let Some(model) = self.prefixes.get(prefix) {
            self.stats.prefix_hits.fetch_add(1, Ordering::Relaxed);
            return Ok(model);
        }
        let mut model = self.loaded.weights.fresh();
        for (i, chunk) in prefix.chunks(CHUNK).enumerate() {
            model.forward(chunk, i * CHUNK)?;
        }
        model.shrink();
        self.prefixes.put(prefix.to_vec(), model.clone());
        Ok(model)
    }
}

fn send(events: &Events, event: Result<ModelEvent, ProviderError>) -> Result<(), Halt> {
    events.blocking_send(event).map_err(|_| Halt::Abandoned)
}

/// Turns chosen tokens into text deltas and tool calls.
struct Writer<'a> {
    engine: &'a Engine,
    tools: &'a [Arc<ToolSpec>],
    events: &'a Events,
    /// Tokens of the text part of the answer.
    text: Vec<u32>,
    /// How much of the decoded text has been sent.
    sent: usize,
    /// Set once the model opened a tool call: the grammar and the call's tokens.
    call: Option<(Matcher, Vec<u32>)>,
    calls: Vec<ToolCall>,
    recent: Vec<u32>,
    strikes: repeat::Strikes,
}

impl<'a> Writer<'a> {
    fn new(engine: &'a Engine, tools: &'a [Arc<ToolSpec>], events: &'a Events) -> Self {
        Self {
            engine,
            tools,
            events,
            text: Vec::new(),
            sent: 0,
            call: None,
            calls: Vec::new(),
            recent: Vec::new(),
            strikes: repeat::Strikes::default(),
        }
    }

    /// The next token: the likeliest one the grammar allows, with recent tokens
    /// made a little less likely and none that repeats a run of the answer's text
    /// (`repeat.rs`); `None` when the guard ends a loop.
    fn choose(&mut self, logits: &mut [f32]) -> Result<Option<u32>, Halt> {
        for token in &self.recent {
            if let Some(l) = logits.get_mut(*token as usize) {
                *l = if *l >= 0.0 {
                    *l / REPEAT_PENALTY
                } else {
                    *l * REPEAT_PENALTY
                };
            }
        }
        if self.call.is_none() && self.guard(logits) {
            return Ok(None);
        }
        if let Some((matcher, _)) = &mut self.call {
            let mask = matcher
                .compute_mask()
                .map_err(|e| anyhow!("grammar: {e}"))?;
            for (token, l) in logits.iter_mut().enumerate() {
                if !mask.is_allowed(token as u32) {
                    *l = f32::NEG_INFINITY;
                }
            }
        }
        let best = logits
            .iter()
            .enumerate()
            .max_by(|a, b| a.1.total_cmp(b.1))
            .map(|(i, _)| i as u32)
            .ok_or_else(|| anyhow!("the model gave no logits"))?;
        self.recent.push(best);
        if self.recent.len() > REPEAT_WINDOW {
            self.recent.remove(0);
        }
        Ok(Some(best))
    }

    /// Bans the tokens that would repeat a run of the text; true when the model
    /// keeps reaching for them, so the answer should end.
    fn guard(&mut self, logits: &mut [f32]) -> bool {
        let bans = repeat::banned(&self.text, repeat::NGRAM);
        if bans.is_empty() {
            return false;
        }
        let top = logits
            .iter()
            .enumerate()
            .max_by(|a, b| a.1.total_cmp(b.1))
            .map(|(i, _)| i as u32);
        if top.is_some_and(|t| bans.contains(&t)) && self.strikes.strike(self.text.len()) {
            return true;
        }
        for token in bans {
            if let Some(l) = logits.get_mut(token as usize) {
                *l = f32::NEG_INFINITY;
            }
        }
        false
    }

    /// Takes a chosen token; true when the answer is complete.
    fn take(&mut self, token: u32) -> Result<bool, Halt> {
        if let Some((matcher, tokens)) = &mut self.call {
            matcher
                .consume_token(token)
                .map_err(|e| anyhow!("grammar: {e}"))?;
            tokens.push(token);
            if matcher.is_stopped() || matcher.is_accepting().unwrap_or(false) {
                self.close_call()?;
                return Ok(true);
            }
            return Ok(false);
        }
        let vocab = &self.engine.loaded.vocab;
        if vocab.stops.contains(&token) {
            return Ok(true);
        }
        let is_open = vocab.specials.get(CALL_OPEN) == Some(&token);
        if vocab.specials.values().any(|t| *t == token) && !is_open {
            // Any other control token means the model left its turn.
            return Ok(true);
        }
        self.text.push(token);
        let decoded = vocab.decode(&self.text)?;
        let opened = match self.tools.is_empty() {
            true => None,
            false => decoded
                .get(self.sent..)
                .and_then(|unsent| unsent.find(CALL_OPEN))
                .map(|i| i + self.sent),
        };
        let Some(at) = opened else {
            self.flush(&decoded, false)?;
            return Ok(false);
        };
        self.flush(&decoded[..at], true)?;
        // The token that completed `<tool_call>` may carry the call's first bytes
        // (often its newline): the grammar reads them first.
        let after = &decoded[at + CALL_OPEN.len()..];
        let mut matcher = self.grammar()?;
        let mut tokens = Vec::new();
        if !after.is_empty() {
            tokens = vocab.encode(after)?;
            matcher
                .consume_tokens(&tokens)
                .map_err(|e| anyhow!("grammar: {e}"))?;
        }
        self.call = Some((matcher, tokens));
        Ok(false)
    }

    /// Sends the decoded text not sent yet, holding back an unfinished character
    /// and anything that may be the start of a tool call.
    fn flush(&mut self, decoded: &str, all: bool) -> Result<(), Halt> {
        let mut end = decoded.len();
        if !all {
            if decoded.ends_with('\u{FFFD}') {
                return Ok(());
            }
            if !self.tools.is_empty() {
                for cut in (1..CALL_OPEN.len()).rev() {
                    if decoded.ends_with(&CALL_OPEN[..cut]) {
                        end -= cut;
                        break;
                    }
                }
            }
        }
        if end > self.sent && decoded.is_char_boundary(end) && decoded.is_char_boundary(self.sent) {
            let delta = decoded[self.sent..end].to_string();
            self.sent = end;
            send(self.events, Ok(ModelEvent::Text(delta)))?;
        }
        Ok(())
    }

    fn grammar(&self) -> Result<Matcher, Halt> {
        let choices: Vec<Value> = self
            .tools
            .iter()
            .map(|t| {
                json!({
                    "type": "object",
                    "properties": {"name": {"const": t.name}, "arguments": t.parameters},
                    "required": ["name", "arguments"],
                    "additionalProperties": false,
                })
            })
            .collect();
        let schema = json!({
            "anyOf": choices,
            "x-guidance": {"item_separator": ", ", "key_separator": ": ", "whitespace_flexible": false},
        });
        let lark = format!("start: call | \"\\n\" call\ncall: %json {schema}\n");
        let parser = self
            .engine
            .factory
            .create_parser(TopLevelGrammar::from_lark(lark));
        Ok(Matcher::new(parser))
    }

    fn close_call(&mut self) -> Result<(), Halt> {
        let Some((_, tokens)) = self.call.take() else {
            return Ok(());
        };
        let text = self.engine.loaded.vocab.decode(&tokens)?;
        let value: Value = serde_json::from_str(text.trim())
            .map_err(|e| anyhow!("the constrained call is not JSON: {e}"))?;
        let name = value["name"].as_str().unwrap_or_default().to_string();
        self.calls.push(ToolCall {
            id: format!("call_{}", crate::ids::new_id("l")),
            name,
            arguments: value["arguments"].to_string(),
        });
        Ok(())
    }

    /// Sends what is left: held-back text, and the tool calls.
    fn finish(mut self) -> Result<(), Halt> {
        // Text before a call was sent when the call opened.
        if self.call.is_none() && self.calls.is_empty() && !self.text.is_empty() {
            let decoded = self.engine.loaded.vocab.decode(&self.text)?;
            self.flush(&decoded, true)?;
        }
        if !self.calls.is_empty() {
            let calls = std::mem::take(&mut self.calls);
            send(self.events, Ok(ModelEvent::ToolCalls(calls)))?;
        }
        Ok(())
    }
}
