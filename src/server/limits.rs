//! Bounds on connections (SPEC §10's "every public door bounded"): how many may be
//! open at once, in all and from one client address, and how long one may sit
//! without a request — before its first (slow-loris, on HTTP/1.1 and HTTP/2 alike)
//! and between requests (idle keep-alive).

use std::collections::HashMap;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use bytes::Bytes;
use http_body::{Body as HttpBody, Frame, SizeHint};
use tokio::time::Instant;

/// The connection bounds of `[server]`.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_connections: usize,
    pub max_connections_per_ip: usize,
    /// Before the first request's headers are complete.
    pub first_request: Duration,
    /// Between requests, when none is in flight.
    pub idle: Duration,
    /// How long a handler may work before its response begins: the longest
    /// deadline a handler keeps by itself (`[llm] turn_timeout_s` for an ask,
    /// whose stream begins only once the model answered), and a margin.
    pub handler: Duration,
    /// The largest HTTP/1.1 request head, in bytes (`[server] max_request_head_kib`).
    pub max_request_head: usize,
}

/// Open connections, in all and by client address.
#[derive(Default)]
pub struct Connections {
    total: AtomicUsize,
    by_ip: Mutex<HashMap<IpAddr, usize>>,
}

/// One open connection's place under the caps; given back when dropped.
pub struct Admitted {
    connections: Arc<Connections>,
    ip: Option<IpAddr>,
}

/// Why a connection was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    Full,
    TooManyFromAddress,
}

impl Connections {
    /// Takes a place for a connection from `ip` (`None`: a trusted proxy, whose
    /// connections carry many clients and are not capped per address).
    pub fn admit(
        self: &Arc<Self>,
        ip: Option<IpAddr>,
        limits: &Limits,
    ) -> Result<Admitted, Refusal> {
        if self.total.fetch_add(1, Ordering::AcqRel) >= limits.max_connections {
            self.total.fetch_sub(1, Ordering::AcqRel);
            return Err(Refusal::Full);
        }
        if let Some(ip) = ip {
            let mut by_ip = self.by_ip.lock().unwrap_or_else(|e| e.into_inner());
            let open = by_ip.entry(ip).or_default();
            if *open >= limits.max_connections_per_ip {
                drop(by_ip);
                self.total.fetch_sub(1, Ordering::AcqRel);
                return Err(Refusal::TooManyFromAddress);
            }
            *open += 1;
        }
        Ok(Admitted {
            connections: Arc::clone(self),
            ip,
        })
    }
}

impl Drop for Admitted {
    fn drop(&mut self) {
        self.connections.total.fetch_sub(1, Ordering::AcqRel);
        if let Some(ip) = self.ip {
            let mut by_ip = self
                .connections
                .by_ip
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            if let Some(open) = by_ip.get_mut(&ip) {
                *open -= 1;
                if *open == 0 {
                    by_ip.remove(&ip);
                }
            }
        }
    }
}

/// The answer to a refused connection, written before it is closed: a plain
/// HTTP/1.1 503 with the `{"error": …}` envelope, so a client knows why.
pub fn refusal_response(refusal: Refusal) -> Vec<u8> {
    let (code, message) = match refusal {
        Refusal::Full => (
            "too_many_connections",
            "the server has too many open connections; try again shortly",
        ),
        Refusal::TooManyFromAddress => (
            "too_many_connections",
            "too many open connections from this address; close some and try again",
        ),
    };
    let body = format!(r#"{{"error":{{"code":"{code}","message":"{message}"}}}}"#);
    format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nretry-after: 5\r\n\
         connection: close\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// A response that has not written a frame for this long has a client that stopped
/// reading (answer streams send a keep-alive comment every 15 s).
const STALLED: Duration = Duration::from_secs(30);

/// What a connection is doing: requests in flight (until their response bodies
/// end) and when it last did anything.
#[derive(Default)]
pub struct Activity {
    in_flight: AtomicUsize,
    /// Requests whose handler has not produced a response yet.
    handling: AtomicUsize,
    /// Milliseconds since `start` of the last request or response end.
    last: AtomicI64,
    requests: AtomicUsize,
    start: Option<Instant>,
    /// Wakes the watchdog when a request starts or ends, so its deadline moves.
    changed: tokio::sync::Notify,
}

impl Activity {
    pub fn new() -> Arc<Activity> {
        Arc::new(Activity {
            start: Some(Instant::now()),
            ..Activity::default()
        })
    }

    fn now_ms(&self) -> i64 {
        self.start.map_or(0, |s| s.elapsed().as_millis() as i64)
    }

    /// A request arrived; the returned guard, kept by its response body, ends it.
    pub fn begin(self: &Arc<Self>) -> InFlight {
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        self.handling.fetch_add(1, Ordering::AcqRel);
        self.requests.fetch_add(1, Ordering::AcqRel);
        self.last.store(self.now_ms(), Ordering::Release);
        self.changed.notify_one();
        InFlight {
            activity: Arc::clone(self),
            handling: AtomicBool::new(true),
        }
    }

    /// A response frame was written: the client is still reading.
    fn progressed(&self) {
        self.last.store(self.now_ms(), Ordering::Release);
    }

    /// Resolves when the connection has gone without a request for too long —
    /// `first_request` before its first one, `idle` after — or when a response in
    /// flight has not moved for `STALLED` (a client that stopped reading). A
    /// handler still working on its response is given `handler`: it keeps its
    /// own deadline, and cutting it sooner would cancel work it may finish.
    pub async fn expired(&self, limits: Limits) {
        let stalled = STALLED.max(limits.idle);
        loop {
            let busy = self.in_flight.load(Ordering::Acquire) > 0;
            let handling = self.handling.load(Ordering::Acquire) > 0;
            let limit = match (busy, self.requests.load(Ordering::Acquire)) {
                (true, _) if handling => stalled.max(limits.handler),
                (true, _) => stalled,
                (false, 0) => limits.first_request,
                (false, _) => limits.idle,
            };
            let since = self.now_ms() - self.last.load(Ordering::Acquire);
            let left = limit.as_millis() as i64 - since;
            if left <= 0 {
                return;
            }
            let wait = Duration::from_millis(left.max(100) as u64);
            tokio::select! {
                () = tokio::time::sleep(wait) => {}
                () = self.changed.notified() => {}
            }
        }
    }
}

/// A request in flight; dropped when its response body is done (or dropped).
pub struct InFlight {
    activity: Arc<Activity>,
    /// Until its handler produced the response.
    handling: AtomicBool,
}

impl InFlight {
    /// The handler produced its response: from now on the body must move.
    pub fn responded(&self) {
        if self.handling.swap(false, Ordering::AcqRel) {
            let a = &self.activity;
            a.last.store(a.now_ms(), Ordering::Release);
            a.handling.fetch_sub(1, Ordering::AcqRel);
            a.changed.notify_one();
        }
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.responded();
        let a = &self.activity;
        a.last.store(a.now_ms(), Ordering::Release);
        a.in_flight.fetch_sub(1, Ordering::AcqRel);
        a.changed.notify_one();
    }
}

/// A response body that keeps its request counted as in flight until it ends, so
/// a long answer stream is never mistaken for an idle connection.
pub struct Tracked {
    inner: Body,
    in_flight: InFlight,
}

impl Tracked {
    pub fn wrap(inner: Body, in_flight: InFlight) -> Body {
        Body::new(Tracked { inner, in_flight })
    }
}

impl HttpBody for Tracked {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if let Poll::Ready(Some(Ok(_))) = &polled {
            self.in_flight.activity.progressed();
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(total: usize, per_ip: usize) -> Limits {
        Limits {
            max_connections: total,
            max_connections_per_ip: per_ip,
            first_request: Duration::from_secs(1),
            idle: Duration::from_secs(1),
            handler: Duration::from_secs(1),
            max_request_head: 8 * 1024,
        }
    }

    #[test]
    fn places_are_capped_in_all_and_per_address_and_given_back() {
        let c = Arc::new(Connections::default());
        let a: IpAddr = "192.0.2.1".parse().unwrap();
        let b: IpAddr = "192.0.2.2".parse().unwrap();
        let l = limits(3, 2);
        let one = c.admit(Some(a), &l).unwrap();
        let _two = c.admit(Some(a), &l).unwrap();
        assert_eq!(
            c.admit(Some(a), &l).err(),
            Some(Refusal::TooManyFromAddress)
        );
        let _three = c.admit(Some(b), &l).unwrap();
        assert_eq!(c.admit(None, &l).err(), Some(Refusal::Full));
        drop(one);
        assert!(
            c.admit(Some(a), &l).is_ok(),
            "a closed connection frees its place"
        );
    }
}
