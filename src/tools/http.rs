//! The HTTP executor of SPEC §9: one POST per call with an idempotency key and, when
//! the tool has a secret, a timestamped HMAC signature of the body. A tool an MCP
//! server offers is called through that server instead (`mcp::Server::call`).

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::Tool;
use crate::secret::hmac_sha256;
use crate::states::Reason;

/// Results are cut here: the model needs a summary, not a data dump.
pub const MAX_RESULT_BYTES: usize = 16 * 1024;

/// Who a call runs for, sent to the operator's backend with the arguments.
pub struct Invocation<'a> {
    pub call: &'a str,
    pub arguments: &'a Value,
    pub site: &'a str,
    pub conversation: &'a str,
    pub visitor: &'a str,
    pub user_id: Option<&'a str>,
    /// Unix seconds for the signature's timestamp (from the injected clock).
    pub unix_seconds: i64,
}

#[derive(Debug, Clone)]
pub struct Outcome {
    pub succeeded: bool,
    pub http_status: Option<u16>,
    /// The response body (cut at 16 KiB) or a description of the failure.
    pub result: String,
    /// Why it failed: `timeout`, `unreachable` or `http_status`.
    pub failure: Option<Reason>,
    pub duration_ms: i64,
}

#[derive(Clone)]
pub struct Executor {
    http: reqwest::Client,
}

impl Executor {
    /// The client calls go out with (one pool of connections for all).
    pub fn client(&self) -> &reqwest::Client {
        &self.http
    }

    pub fn new() -> anyhow::Result<Self> {
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(5))
            // A tool endpoint that redirects could send the call (and its signature)
            // to another host, so no redirect is followed at all.
            .redirect(reqwest::redirect::Policy::none())
            .build()?;
        Ok(Self { http })
    }

    pub async fn run(&self, tool: &Tool, inv: &Invocation<'_>) -> Outcome {
        if let Some(target) = &tool.mcp {
            return target
                .server
                .call(&target.tool, inv.arguments, tool.timeout)
                .await;
        }
        let started = Instant::now();
        let outcome = tokio::time::timeout(tool.timeout, self.post(tool, inv)).await;
        let duration_ms = started.elapsed().as_millis() as i64;
        match outcome {
            Ok(Ok((status, body))) if (200..300).contains(&status) => Outcome {
                succeeded: true,
                http_status: Some(status),
                result: body,
                failure: None,
                duration_ms,
            },
            Ok(Ok((status, body))) => Outcome {
                succeeded: false,
                http_status: Some(status),
                result: format!("The tool failed with HTTP status {status}. {body}"),
                failure: Some(Reason::HttpStatus),
                duration_ms,
            },
            Ok(Err(e)) => {
                tracing::warn!(
                    tool = %tool.name,
                    url = %crate::secret::loggable_url(&tool.url),
                    error = %e.without_url(),
                    "tool endpoint unreachable"
                );
                Outcome {
                    succeeded: false,
                    http_status: None,
                    result: "The tool could not be reached.".into(),
                    failure: Some(Reason::Unreachable),
                    duration_ms,
                }
            }
            Err(_) => Outcome {
                succeeded: false,
                http_status: None,
                result: format!(
                    "The tool did not answer within {} seconds.",
                    tool.timeout.as_secs_f64()
                ),
                failure: Some(Reason::Timeout),
                duration_ms,
            },
        }
    }

    async fn post(
        &self,
        tool: &Tool,
        inv: &Invocation<'_>,
    ) -> Result<(u16, String), reqwest::Error> {
        let body = json!({
            "call": inv.call,
            "tool": tool.name,
            "arguments": inv.arguments,
            "site": inv.site,
            "conversation": inv.conversation,
            "visitor": {"id": inv.visitor, "user_id": inv.user_id},
        })
        .to_string();
        let mut request = self
            .http
            .post(&tool.url)
            .header("content-type", "application/json")
            .header("idempotency-key", inv.call);
        if let Some(secret) = &tool.secret {
            request = request.header(
                "deskbell-signature",
                signature_header(secret.expose(), inv.unix_seconds, &body),
            );
        }
        let mut response = request.body(body).send().await?;
        let status = response.status().as_u16();
        let mut bytes = Vec::new();
        while let Some(chunk) = response.chunk().await? {
            let room = MAX_RESULT_BYTES - bytes.len();
            bytes.extend_from_slice(&chunk[..chunk.len().min(room)]);
            if bytes.len() >= MAX_RESULT_BYTES {
                break;
            }
        }
        Ok((status, String::from_utf8_lossy(&bytes).into_owned()))
    }
}

/// `t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>`.
pub fn signature_header(secret: &[u8], unix_seconds: i64, body: &str) -> String {
    let mac = hmac_sha256(secret, format!("{unix_seconds}.{body}").as_bytes());
    format!("t={unix_seconds},v1={}", hex::encode(mac))
}
