//! Test stand-ins that speak real protocols over real sockets: a scripted model
//! server (OpenAI Chat Completions or Anthropic Messages, streamed) and a
//! recording tool endpoint. They live
//! in the library so that tests, benchmarks and examples share them.

mod fake_anthropic;
mod fake_llm;
pub mod haproxy;
mod postgres;
mod script;
mod webhook;

pub use fake_llm::FakeLlm;
pub use postgres::fresh_database as fresh_postgres;
pub use script::{Dialect, Piece, Reply};
pub use webhook::{HookReply, Recorded, Webhook};

use tokio::net::TcpListener;

/// Serves a router on a fresh loopback port and returns its base URL. It speaks
/// HTTP/1.1 and, to a client that starts with HTTP/2 (h2c), HTTP/2 with no cap
/// on concurrent streams, so one connection may carry thousands of them.
pub async fn serve_on_loopback(router: axum::Router) -> std::io::Result<String> {
    use hyper_util::rt::{TokioExecutor, TokioIo};
    use hyper_util::server::conn::auto::Builder;
    use hyper_util::service::TowerToHyperService;
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let mut builder = Builder::new(TokioExecutor::new());
    // A large connection window, as hosted model servers give, so that the
    // request bodies of thousands of turns at once are not cut into small frames
    // that h2 counts against its budget (the client's reason, `llm/remote.rs`).
    builder
        .http2()
        .max_concurrent_streams(None)
        .initial_connection_window_size(crate::llm::H2_CONNECTION_WINDOW);
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                continue;
            };
            let _ = tcp.set_nodelay(true);
            let service = TowerToHyperService::new(router.clone());
            let connection = builder
                .serve_connection_with_upgrades(TokioIo::new(tcp), service)
                .into_owned();
            tokio::spawn(async move {
                let _ = connection.await;
            });
        }
    });
    Ok(format!("http://{addr}"))
}
