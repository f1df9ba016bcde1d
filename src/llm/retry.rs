//! Retrying a provider before its first token. A retry after text was shown
//! would repeat it, so only the start of a stream is retried: connection
//! faults, 429, 5xx (Anthropic's 529 "overloaded" among them) and a stream that
//! failed before its first event.

use std::future::Future;
use std::time::Duration;

use reqwest::header::{HeaderMap, RETRY_AFTER};

use super::{ModelStream, ProviderError};

/// The longest `retry-after` that is waited out. A provider asking for longer
/// is answered at once with 503: the visitor is better told to try again than
/// kept waiting on a spinner.
pub const LONGEST_WAIT: Duration = Duration::from_secs(20);

/// A failed attempt, with how long the provider asked us to wait, if it said.
pub struct Fault {
    pub error: ProviderError,
    pub retry_after: Option<Duration>,
}

impl From<ProviderError> for Fault {
    fn from(error: ProviderError) -> Self {
        Fault {
            error,
            retry_after: None,
        }
    }
}

/// The wait a response's `retry-after` header asks for, in seconds (the HTTP
/// date form is not used by model providers and is ignored).
pub fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let seconds: f64 = headers
        .get(RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()?;
    // A peer's number: NaN or negative is ignored, and one past what a
    // Duration holds is capped (it is then too long to wait: `with_retries`).
    if seconds.is_nan() {
        return None;
    }
    Duration::try_from_secs_f64(seconds.min(LONGEST_WAIT.as_secs_f64() * 2.0)).ok()
}

/// Runs `attempt` once and up to `retries` more times while it fails
/// transiently, waiting the provider's `retry-after` when it gave one and a
/// growing pause otherwise.
pub async fn with_retries<F, Fut>(
    retries: u32,
    mut attempt: F,
) -> Result<ModelStream, ProviderError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<ModelStream, Fault>>,
{
    let mut n = 0;
    loop {
        match attempt().await {
            Ok(stream) => return Ok(stream),
            Err(fault) if fault.error.is_transient() && n < retries => {
                let pause = match fault.retry_after {
                    Some(wait) if wait > LONGEST_WAIT => return Err(fault.error),
                    Some(wait) => wait,
                    None => Duration::from_millis(150 << n),
                };
                tracing::warn!(error = %fault.error, attempt = n, pause_ms = pause.as_millis() as u64, "model provider fault; retrying");
                tokio::time::sleep(pause).await;
                n += 1;
            }
            Err(fault) => return Err(fault.error),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn after(value: &str) -> Option<Duration> {
        let mut headers = HeaderMap::new();
        headers.insert(RETRY_AFTER, value.parse().unwrap());
        retry_after(&headers)
    }

    #[test]
    fn a_retry_after_from_a_peer_is_read_without_panicking_whatever_it_says() {
        assert_eq!(after("2"), Some(Duration::from_secs(2)));
        assert_eq!(after(" 0.5 "), Some(Duration::from_millis(500)));
        assert!(
            after("1e20").is_some_and(|d| d > LONGEST_WAIT),
            "huge is too long, not a panic"
        );
        assert!(after("inf").is_some_and(|d| d > LONGEST_WAIT));
        assert_eq!(after("-1"), None);
        assert_eq!(after("NaN"), None);
        assert_eq!(after("Wed, 21 Oct 2015 07:28:00 GMT"), None);
    }
}
