//! Test stand-ins that speak real protocols over real sockets: a scripted model
//! server (OpenAI Chat Completions with SSE) and a recording tool endpoint. They live
//! in the library so that tests, benchmarks and examples share them.

mod fake_llm;
pub mod haproxy;
mod webhook;

pub use fake_llm::{FakeLlm, Piece, Reply};
pub use webhook::{HookReply, Recorded, Webhook};

use tokio::net::TcpListener;

/// Serves a router on a fresh loopback port and returns its base URL.
pub async fn serve_on_loopback(router: axum::Router) -> std::io::Result<String> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
        let _ = tcp.set_nodelay(true);
    });
    tokio::spawn(async move {
        let _ = axum::serve(listener, router).await;
    });
    Ok(format!("http://{addr}"))
}
