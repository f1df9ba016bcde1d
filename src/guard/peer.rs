//! The client's IP address: the connection's peer, or — only when that peer is a
//! listed trusted proxy — the nearest untrusted address in `X-Forwarded-For`.

use std::net::{IpAddr, SocketAddr};

use axum::extract::{ConnectInfo, FromRequestParts};
use axum::http::HeaderMap;
use axum::http::request::Parts;

/// The connection's peer address, when the server was started with connection info.
#[derive(Debug, Clone, Copy)]
pub struct Peer(pub Option<IpAddr>);

impl<S: Send + Sync> FromRequestParts<S> for Peer {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        Ok(Peer(
            parts
                .extensions
                .get::<ConnectInfo<SocketAddr>>()
                .map(|c| c.0.ip()),
        ))
    }
}

pub fn client_ip(peer: Peer, headers: &HeaderMap, trusted: &[IpAddr]) -> IpAddr {
    let Some(peer) = peer.0.map(|p| p.to_canonical()) else {
        return super::UNKNOWN_PEER;
    };
    if !trusted.contains(&peer) {
        return peer;
    }
    let chain: Vec<IpAddr> = headers
        .get_all("x-forwarded-for")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|part| part.trim().parse::<IpAddr>().ok())
        .map(|ip| ip.to_canonical())
        .collect();
    chain
        .iter()
        .rev()
        .find(|ip| !trusted.contains(ip))
        .or(chain.first())
        .copied()
        .unwrap_or(peer)
}

/// The address a per-client limit counts under: an IPv4 address as it is (an
/// IPv4-mapped IPv6 address as its IPv4 one), an IPv6 address by its /64 — one host
/// usually holds a whole /64, and would otherwise get a bucket per address.
pub fn limit_key(ip: IpAddr) -> IpAddr {
    match ip.to_canonical() {
        IpAddr::V6(v6) => {
            let s = v6.segments();
            IpAddr::V6(std::net::Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0))
        }
        v4 => v4,
    }
}

/// `headers` with each value copied into its own allocation: the values hyper
/// parses are slices of the connection's read buffer, which they keep alive.
pub fn owned_headers(headers: &HeaderMap) -> HeaderMap {
    let mut owned = HeaderMap::with_capacity(headers.len());
    for (name, value) in headers {
        let mut copy = axum::http::HeaderValue::from_maybe_shared(
            axum::body::Bytes::copy_from_slice(value.as_bytes()),
        )
        .unwrap_or_else(|_| value.clone());
        copy.set_sensitive(value.is_sensitive());
        owned.append(name.clone(), copy);
    }
    owned
}

#[cfg(test)]
mod tests {
    use super::*;

    fn xff(value: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert("x-forwarded-for", value.parse().unwrap());
        h
    }

    #[test]
    fn owned_headers_are_the_same_headers_in_memory_of_their_own() {
        let shared = axum::body::Bytes::from_static(b"a-token-value");
        let mut headers = HeaderMap::new();
        let mut token = axum::http::HeaderValue::from_maybe_shared(shared.clone()).unwrap();
        token.set_sensitive(true);
        headers.insert("authorization", token);
        headers.append("x-forwarded-for", "198.51.100.1".parse().unwrap());
        headers.append("x-forwarded-for", "203.0.113.9".parse().unwrap());
        let owned = owned_headers(&headers);
        assert_eq!(owned, headers);
        let copied = &owned["authorization"];
        assert!(copied.is_sensitive(), "a secret stays out of logs");
        assert_ne!(
            copied.as_bytes().as_ptr(),
            shared.as_ptr(),
            "the value is not a slice of the buffer it was read from"
        );
        assert_eq!(owned.get_all("x-forwarded-for").iter().count(), 2);
    }

    #[test]
    fn forwarded_addresses_count_only_behind_a_trusted_proxy() {
        let proxy: IpAddr = "10.0.0.1".parse().unwrap();
        let client: IpAddr = "203.0.113.9".parse().unwrap();
        let spoofed = xff("198.51.100.1, 203.0.113.9");
        assert_eq!(
            client_ip(Peer(Some(client)), &spoofed, &[proxy]),
            client,
            "an untrusted peer is the client"
        );
        assert_eq!(
            client_ip(Peer(Some(proxy)), &spoofed, &[proxy]),
            client,
            "the nearest untrusted hop"
        );
        assert_eq!(
            client_ip(Peer(Some(proxy)), &HeaderMap::new(), &[proxy]),
            proxy
        );
    }
}
