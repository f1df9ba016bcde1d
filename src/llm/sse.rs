//! The loop every remote provider shares: server-sent events in, model events
//! out, with a timeout between events. What a provider's events mean is its
//! `Decoder`'s business (`chunks.rs` for OpenAI, `anthropic/events.rs`).

use std::collections::VecDeque;
use std::time::Duration;

use bytes::Bytes;
use eventsource_stream::Eventsource;
use futures_util::{Stream, StreamExt, stream};

use super::{ModelEvent, ModelStream, ProviderError};

/// Turns the `data:` payloads of one streamed response into model events.
pub trait Decoder: Send + 'static {
    /// Decodes one event's data.
    fn push(&mut self, data: &str) -> Result<Vec<ModelEvent>, ProviderError>;
    /// Called when the byte stream ends; a response that had not finished was cut.
    fn finish(&mut self) -> Result<Vec<ModelEvent>, ProviderError>;
    /// The response said it is complete: nothing after this is read.
    fn is_done(&self) -> bool;
}

struct DecodeState<S, D> {
    events: S,
    decoder: D,
    queue: VecDeque<ModelEvent>,
    ended: bool,
    idle: Duration,
}

/// Decodes an SSE byte stream with `decoder`, waiting at most `idle` for each
/// event.
pub fn decode<S, E, D>(bytes: S, decoder: D, idle: Duration) -> ModelStream
where
    S: Stream<Item = Result<Bytes, E>> + Send + 'static,
    E: std::fmt::Display + Send + 'static,
    D: Decoder,
{
    let state = DecodeState {
        events: Box::pin(bytes.eventsource()),
        decoder,
        queue: VecDeque::new(),
        ended: false,
        idle,
    };
    stream::unfold(state, |mut st| async move {
        loop {
            if let Some(event) = st.queue.pop_front() {
                return Some((Ok(event), st));
            }
            if st.ended {
                return None;
            }
            let step = match tokio::time::timeout(st.idle, st.events.next()).await {
                Err(_) => Err(ProviderError::Timeout),
                Ok(None) => st.decoder.finish(),
                Ok(Some(Err(e))) => Err(ProviderError::Stream(e.to_string())),
                Ok(Some(Ok(event))) => st.decoder.push(&event.data),
            };
            match step {
                Ok(events) => {
                    st.queue.extend(events);
                    st.ended = st.decoder.is_done();
                }
                Err(e) => {
                    st.ended = true;
                    return Some((Err(e), st));
                }
            }
        }
    })
    .boxed()
}

/// Waits for a stream's first event, so that a fault before anything was
/// streamed can still be retried or answered with 503.
pub async fn first(mut events: ModelStream) -> Result<ModelStream, ProviderError> {
    match events.next().await {
        Some(Ok(first)) => Ok(stream::once(async { Ok(first) }).chain(events).boxed()),
        Some(Err(e)) => Err(e),
        None => Ok(stream::empty().boxed()),
    }
}
