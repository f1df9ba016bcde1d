//! Prometheus metrics (SPEC §18) with the `metrics` facade: recording is a few
//! atomic operations behind a key lookup, and a no-op until `install` set the
//! recorder (no `metrics_bind`, no recorder). `/metrics` is served on
//! `[server] metrics_bind` only, never on the public address.
//!
//! Every label value is bounded: sites and tools come from the configuration
//! (a call to a tool the site does not have is counted as `(unknown)`), the rest
//! are fixed words. No conversation or visitor id is ever a label.

use std::sync::OnceLock;
use std::time::Duration;

use metrics::{counter, gauge, histogram};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();

/// Buckets for times, in seconds: a first token within a few milliseconds to
/// a turn of two minutes.
const SECONDS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0,
];

/// Installs the process's recorder once and returns its handle (tests start
/// several apps in one process; they share it).
pub fn install() -> anyhow::Result<&'static PrometheusHandle> {
    if let Some(handle) = HANDLE.get() {
        return Ok(handle);
    }
    let recorder = PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), SECONDS)?
        .build_recorder();
    let handle = recorder.handle();
    // Another thread may have won the race; then its recorder is the one in use.
    if metrics::set_global_recorder(recorder).is_ok() {
        describe();
        let _ = HANDLE.set(handle);
    }
    HANDLE
        .get()
        .ok_or_else(|| anyhow::anyhow!("another metrics recorder is installed"))
}

fn describe() {
    use metrics::{describe_counter, describe_gauge, describe_histogram};
    describe_counter!("deskbell_turns_total", "Turns ended, by site and status.");
    describe_histogram!(
        "deskbell_queue_wait_seconds",
        "How long conversations waited in the queue before an operator took them, by site."
    );
    describe_gauge!(
        "deskbell_approvals_waiting",
        "Tool calls waiting in the console's approvals queue for a teammate (SPEC §20)."
    );
    describe_gauge!(
        "deskbell_operators_online",
        "Operators whose console was in use within the last two minutes, as last counted."
    );
    describe_counter!(
        "deskbell_feedback_total",
        "Ratings visitors gave answers, by site and rating (up, down); a changed rating counts again."
    );
    describe_counter!(
        "deskbell_handoffs_total",
        "Conversations handed to a person, by site and by who asked (visitor, assistant, console)."
    );
    describe_histogram!(
        "deskbell_time_to_first_token_seconds",
        "From the ask's arrival to the first streamed text."
    );
    describe_histogram!(
        "deskbell_turn_duration_seconds",
        "From the ask's arrival to the turn's end."
    );
    describe_counter!(
        "deskbell_tool_calls_total",
        "Tool calls by site, tool, policy and outcome (succeeded, failed, refused)."
    );
    describe_counter!(
        "deskbell_confirmations_total",
        "Cards closed, by site and decision (confirmed, cancelled, expired, superseded)."
    );
    describe_counter!(
        "deskbell_guard_refusals_total",
        "Visitor requests refused by the guards, by error code."
    );
    describe_counter!(
        "deskbell_tokens_total",
        "Model tokens by site and kind (input, output)."
    );
    describe_gauge!("deskbell_open_streams", "Answers streaming now.");
    describe_counter!(
        "deskbell_provider_errors_total",
        "Model provider failures by kind."
    );
    describe_gauge!(
        "deskbell_local_queue_depth",
        "Turns waiting for the embedded model."
    );
    describe_gauge!(
        "deskbell_local_tokens_per_second",
        "The embedded model's generation speed in its last turn."
    );
}

/// Installs the recorder and serves `/metrics` on `addr` (`[server]
/// metrics_bind`) in the background; returns the address bound.
pub async fn start(addr: &str) -> anyhow::Result<std::net::SocketAddr> {
    let handle = install()?;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {addr} for metrics: {e}"))?;
    let bound = listener.local_addr()?;
    tokio::spawn(serve(listener, handle));
    tracing::info!(addr = %bound, "metrics are served at /metrics");
    Ok(bound)
}

/// Serves `GET /metrics` on its own listener until the process ends, keeping
/// the histograms' upkeep going.
async fn serve(listener: tokio::net::TcpListener, handle: &'static PrometheusHandle) {
    let upkeep = tokio::spawn(async move {
        let mut every = tokio::time::interval(Duration::from_secs(5));
        loop {
            every.tick().await;
            handle.run_upkeep();
        }
    });
    let router = axum::Router::new().route(
        "/metrics",
        axum::routing::get(move || async move {
            (
                [(
                    axum::http::header::CONTENT_TYPE,
                    "text/plain; version=0.0.4; charset=utf-8",
                )],
                handle.render(),
            )
        }),
    );
    if let Err(e) = axum::serve(listener, router).await {
        tracing::error!(error = %e, "the metrics address stopped serving");
    }
    upkeep.abort();
}

pub fn turn_ended(site: &str, status: &'static str, took: Duration) {
    counter!("deskbell_turns_total", "site" => site.to_string(), "status" => status).increment(1);
    histogram!("deskbell_turn_duration_seconds", "site" => site.to_string())
        .record(took.as_secs_f64());
}

pub fn first_token(site: &str, after: Duration) {
    histogram!("deskbell_time_to_first_token_seconds", "site" => site.to_string())
        .record(after.as_secs_f64());
}

pub fn tokens(site: &str, input: u64, output: u64) {
    counter!("deskbell_tokens_total", "site" => site.to_string(), "kind" => "input")
        .increment(input);
    counter!("deskbell_tokens_total", "site" => site.to_string(), "kind" => "output")
        .increment(output);
}

/// `tool` must be a tool of the site, else `(unknown)` is counted.
pub fn tool_call(site: &str, tool: Option<&str>, policy: &'static str, outcome: &'static str) {
    counter!(
        "deskbell_tool_calls_total",
        "site" => site.to_string(),
        "tool" => tool.unwrap_or("(unknown)").to_string(),
        "policy" => policy,
        "outcome" => outcome,
    )
    .increment(1);
}

pub fn confirmation(site: &str, decision: &'static str) {
    counter!("deskbell_confirmations_total", "site" => site.to_string(), "decision" => decision)
        .increment(1);
}

/// A visitor rated an answer.
pub fn feedback(site: &str, rating: &str) {
    counter!("deskbell_feedback_total", "site" => site.to_string(), "rating" => rating.to_string())
        .increment(1);
}

/// A conversation went to a person (SPEC §19); `from` is who asked:
/// `visitor`, `assistant` or `console`.
pub fn handoff(site: &str, from: &str) {
    counter!("deskbell_handoffs_total", "site" => site.to_string(), "from" => from.to_string())
        .increment(1);
}

/// How long a conversation waited in the queue before an operator took it.
pub fn queue_wait(site: &str, waited_ms: i64) {
    histogram!("deskbell_queue_wait_seconds", "site" => site.to_string())
        .record(waited_ms.max(0) as f64 / 1000.0);
}

/// Operators whose console was in use within the presence window.
pub fn operators_online(count: i64) {
    gauge!("deskbell_operators_online").set(count as f64);
}

/// Calls waiting for a teammate, as the database counts them.
pub fn approvals_waiting(count: i64) {
    gauge!("deskbell_approvals_waiting").set(count as f64);
}

pub fn guard_refused(code: &'static str) {
    counter!("deskbell_guard_refusals_total", "code" => code).increment(1);
}

pub fn provider_error(kind: &'static str) {
    counter!("deskbell_provider_errors_total", "kind" => kind).increment(1);
}

/// One more turn waits for the embedded model (`+1`) or one was taken up (`-1`):
/// changes, not levels, so the worker and the askers need no order.
pub fn local_queue(change: f64) {
    gauge!("deskbell_local_queue_depth").increment(change);
}

pub fn local_speed(tokens_per_second: f64) {
    gauge!("deskbell_local_tokens_per_second").set(tokens_per_second);
}

/// Counts an answer streaming from creation to drop.
pub struct OpenStream(());

impl OpenStream {
    pub fn open() -> OpenStream {
        gauge!("deskbell_open_streams").increment(1.0);
        OpenStream(())
    }
}

impl Drop for OpenStream {
    fn drop(&mut self) {
        gauge!("deskbell_open_streams").decrement(1.0);
    }
}
