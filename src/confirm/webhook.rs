//! `approval.requested` (SPEC §20): a site with `[site.approval_webhook]` is
//! told of each call that starts waiting for a teammate, so the team can route
//! it to chat or email. Signed like tool calls (`Deskbell-Signature`), sent in
//! a task of its own: a slow or failing endpoint delays and loses nothing but
//! the notice, which the console's queue still shows.

use std::time::Duration;

use serde_json::json;

use crate::app::{App, Site};
use crate::clock::rfc3339;
use crate::store::CallRow;
use crate::store::stored::decode_lines;
use crate::tools::http::signature_header;

pub fn approval_requested(app: &App, site: &Site, call: &CallRow) {
    let Some(hook) = site.config.approval_webhook.clone() else {
        return;
    };
    let console = app
        .config
        .server
        .public_url
        .as_deref()
        .map(|base| format!("{}/console#approvals", base.trim_end_matches('/')));
    let body = json!({
        "event": "approval.requested",
        "call": call.id,
        "site": call.site,
        "conversation": call.conversation,
        "tool": call.tool,
        "label": call.label,
        "policy": call.policy,
        "arguments": decode_lines(call.lines.as_deref().unwrap_or("[]")).unwrap_or_default(),
        "expires_at": rfc3339(call.expires_at.unwrap_or_default()),
        "console": console,
    })
    .to_string();
    let client = app.executor.client().clone();
    let unix_seconds = app.clock.now_ms().div_euclid(1000);
    let call_id = call.id.clone();
    tokio::spawn(async move {
        let mut request = client
            .post(&hook.url)
            .timeout(Duration::from_secs_f64(hook.timeout_s.clamp(0.1, 300.0)))
            .header("content-type", "application/json")
            .header("idempotency-key", format!("approval.requested:{call_id}"));
        if let Some(secret) = &hook.secret {
            request = request.header(
                "deskbell-signature",
                signature_header(secret.expose(), unix_seconds, &body),
            );
        }
        match request.body(body).send().await {
            Ok(r) if r.status().is_success() => {}
            Ok(r) => {
                tracing::warn!(call = %call_id, status = r.status().as_u16(), "the approval webhook refused a notice")
            }
            Err(e) => {
                tracing::warn!(call = %call_id, error = %e, "the approval webhook could not be reached")
            }
        }
    });
}
