//! The accept loop. `axum::serve` offers no read timeouts, so this serves each
//! connection with hyper directly: connections are capped in all and per client
//! address (`limits.rs`), a connection that sends no complete request within
//! `header_timeout` (slow-loris, HTTP/1.1 or HTTP/2) or sits idle past the idle
//! timeout is closed, bodies must arrive within `BODY_READ_TIMEOUT` (a layer in
//! `routes::router`), and shutdown is graceful.

pub mod limits;

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::ConnectInfo;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tower::ServiceExt;

use limits::{Activity, Connections, Limits, Tracked};

/// hyper's smallest ceiling for a connection's read buffer (it asserts it).
const MIN_REQUEST_HEAD: usize = 8 * 1024;

/// Accepts connections until `shutdown` resolves, then lets open ones finish.
/// Connections from `trusted_proxies` are not capped per address: each carries
/// many clients.
pub async fn run(
    listener: TcpListener,
    router: Router,
    limits: Limits,
    trusted_proxies: Vec<IpAddr>,
    shutdown: impl std::future::Future<Output = ()>,
) -> std::io::Result<()> {
    let mut builder = Builder::new(TokioExecutor::new());
    builder
        .http1()
        // The largest request head a connection takes (a larger one is answered
        // 431; bodies are read through the buffer in pieces) is also the ceiling
        // of hyper's read and write buffers, which a connection keeps for its
        // whole life. With hyper's default ceiling, the read that follows the
        // version check (which reads a few bytes ahead) grew the read buffer from
        // 8 to 16 KiB, for every open stream; at 8 KiB it stays 8.
        .max_buf_size(limits.max_request_head.max(MIN_REQUEST_HEAD))
        .timer(TokioTimer::new())
        .header_read_timeout(limits.first_request);
    // Pings find HTTP/2 peers that vanished without closing.
    builder
        .http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(Some(Duration::from_secs(30)))
        .keep_alive_timeout(Duration::from_secs(20));
    let connections = Arc::new(Connections::default());
    let graceful = GracefulShutdown::new();
    tokio::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(pair) => pair,
                Err(e) => {
                    // Running out of file descriptors and the like: wait, do not spin.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        // Events are small writes that must leave at once; Nagle's algorithm would
        // hold them back until the client's delayed acknowledgement.
        if let Err(e) = stream.set_nodelay(true) {
            tracing::debug!(error = %e, "cannot disable Nagle's algorithm");
        }
        let ip = peer.ip().to_canonical();
        let capped = Some(crate::guard::limit_key(ip)).filter(|_| !trusted_proxies.contains(&ip));
        let place = match connections.admit(capped, &limits) {
            Ok(place) => place,
            Err(refusal) => {
                tokio::spawn(refuse(stream, refusal));
                continue;
            }
        };
        let activity = Activity::new();
        let service = {
            let router = router.clone();
            let activity = Arc::clone(&activity);
            tower::service_fn(move |mut req: axum::http::Request<Incoming>| {
                req.extensions_mut().insert(ConnectInfo::<SocketAddr>(peer));
                let in_flight = activity.begin();
                let response = router.clone().oneshot(req.map(axum::body::Body::new));
                async move {
                    let response = response.await?;
                    in_flight.responded();
                    Ok::<_, std::convert::Infallible>(
                        response.map(|body| Tracked::wrap(body, in_flight)),
                    )
                }
            })
        };
        let connection = builder
            .serve_connection_with_upgrades(TokioIo::new(stream), TowerToHyperService::new(service))
            .into_owned();
        tokio::spawn(serve_connection(
            graceful.watch(connection),
            place,
            activity,
            limits,
        ));
    }
    drop(listener);
    if tokio::time::timeout(Duration::from_secs(30), graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("connections still open after 30 seconds were closed");
    }
    Ok(())
}

/// Serves one connection until it ends, or closes it when it sends no request
/// in time; `place` is its place among the open connections, held until then.
/// The connection is boxed: moved into the `select!`, its 1,560 bytes would be
/// kept twice in this future (the argument and the select's own), and every
/// open connection's task would take a 5 KiB allocation rather than 0.75 KiB
/// and a box of 1.75 KiB (BENCHMARKS.md, "Each connection's task from 4,000
/// bytes to 576").
fn serve_connection<C, E, P>(
    connection: C,
    place: P,
    activity: Arc<Activity>,
    limits: Limits,
) -> impl Future<Output = ()> + Send + 'static
where
    C: Future<Output = Result<(), E>> + Send + 'static,
    E: std::fmt::Display,
    P: Send + 'static,
{
    let connection = Box::pin(connection);
    async move {
        let _place = place;
        tokio::select! {
            result = connection => {
                if let Err(e) = result {
                    tracing::debug!(error = %e, "connection ended with an error");
                }
            }
            () = activity.expired(limits) => {
                tracing::debug!("connection closed: no request in time");
            }
        }
    }
}

/// Tells a refused connection why (a 503 with the error envelope), then closes it.
async fn refuse(mut stream: TcpStream, refusal: limits::Refusal) {
    tracing::debug!(?refusal, "connection refused");
    let answer = limits::refusal_response(refusal);
    let _ = tokio::time::timeout(Duration::from_secs(1), stream.write_all(&answer)).await;
    let _ = stream.shutdown().await;
}

/// Ctrl-C or SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
    tracing::info!("shutting down; finishing answers in progress");
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::limits::{Activity, Limits};

    #[test]
    fn a_connections_task_does_not_grow_with_its_connection() {
        let limits = Limits {
            max_connections: 1,
            max_connections_per_ip: 1,
            first_request: Duration::from_secs(1),
            idle: Duration::from_secs(1),
            handler: Duration::from_secs(1),
            max_request_head: 8 * 1024,
        };
        // A connection whose future holds 4 KiB across a wait (hyper's, with
        // both protocols, holds 1.5 KiB).
        let big = async {
            let buffer = [0u8; 4096];
            tokio::task::yield_now().await;
            std::hint::black_box(buffer);
            Ok::<(), std::convert::Infallible>(())
        };
        let task = super::serve_connection(big, (), Activity::new(), limits);
        assert!(
            std::mem::size_of_val(&task) < 1024,
            "{} bytes",
            std::mem::size_of_val(&task)
        );
    }
}
