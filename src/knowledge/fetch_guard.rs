//! What the knowledge fetcher may reach. Web sources are configured by operators,
//! but their text is quoted to visitors and a redirect or a DNS answer can point
//! anywhere, so every hop is checked: the same host as configured, and never a
//! loopback, private, link-local, unspecified or cloud-metadata address — unless
//! the operator opts in with `allow_private = true` on that source (an intranet).
//! Metadata addresses are refused even then.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

use reqwest::Url;
use reqwest::dns::{Addrs, Name, Resolve, Resolving};

/// Whether a fetch may go to `ip`. An IPv6 address that carries an IPv4 one
/// (mapped, NAT64, 6to4) is judged by the IPv4 address it reaches.
pub fn allowed(ip: IpAddr, allow_private: bool) -> bool {
    let ip = embedded_v4(ip).map_or(ip, IpAddr::V4);
    if ip.is_multicast() || metadata(ip) {
        return false;
    }
    allow_private || public(ip)
}

fn embedded_v4(ip: IpAddr) -> Option<Ipv4Addr> {
    let IpAddr::V6(v6) = ip else {
        return None;
    };
    if let Some(v4) = v6.to_ipv4_mapped() {
        return Some(v4);
    }
    let s = v6.segments();
    let tail = Ipv4Addr::new((s[6] >> 8) as u8, s[6] as u8, (s[7] >> 8) as u8, s[7] as u8);
    match s {
        // 64:ff9b::/96, NAT64.
        [0x64, 0xff9b, 0, 0, 0, 0, _, _] => Some(tail),
        // ::/96, IPv4-compatible (deprecated, still routed by some stacks).
        [0, 0, 0, 0, 0, 0, _, _] if s[6] != 0 => Some(tail),
        // 2002::/16, 6to4: the IPv4 address is in the next 32 bits.
        [0x2002, a, b, ..] => Some(Ipv4Addr::new(
            (a >> 8) as u8,
            a as u8,
            (b >> 8) as u8,
            b as u8,
        )),
        _ => None,
    }
}

fn metadata(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            v4 == Ipv4Addr::new(169, 254, 169, 254) || v4 == Ipv4Addr::new(100, 100, 100, 200)
        }
        IpAddr::V6(v6) => v6 == Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254),
    }
}

fn public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            !(v4.is_loopback()
                || v4.is_private()
                || v4.is_link_local()
                || v4.is_unspecified()
                || v4.is_broadcast()
                || v4.is_documentation()
                || v4.octets()[0] == 0
                // 100.64.0.0/10, carrier-grade NAT: inside some provider's network.
                || (v4.octets()[0] == 100 && (v4.octets()[1] & 0xc0) == 64)
                // 198.18.0.0/15, benchmarking networks: lab gear, often internal.
                || (v4.octets()[0] == 198 && (v4.octets()[1] & 0xfe) == 18)
                // 192.0.0.0/24, IETF protocol assignments (DS-Lite, NAT64 gear).
                || (v4.octets()[..3] == [192, 0, 0])
                // 240.0.0.0/4, reserved: never a public host.
                || v4.octets()[0] >= 240)
        }
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => public(IpAddr::V4(v4)),
            None => {
                let first = v6.segments()[0];
                let second = v6.segments()[1];
                !(v6.is_loopback()
                    || v6.is_unspecified()
                    // fc00::/7 unique local, fe80::/10 link-local, fec0::/10
                    // site-local (deprecated, still routed inside some sites).
                    || (first & 0xfe00) == 0xfc00
                    || (first & 0xffc0) == 0xfe80
                    || (first & 0xffc0) == 0xfec0
                    // 64:ff9b:1::/48, NAT64 for local use: reaches whatever
                    // the operator's translator reaches.
                    || (first == 0x64 && second == 0xff9b && v6.segments()[2] == 1)
                    // 2001::/32, Teredo: a tunnel to an IPv4 address it hides.
                    || (first == 0x2001 && second == 0))
            }
        },
    }
}

/// Checks a URL before it is fetched (and each redirect's target): same host as
/// the source's, and, when the host is an address, an allowed one. Names are
/// checked when they are resolved (`GuardedResolver`).
pub fn check_url(url: &Url, root: &Url, allow_private: bool) -> Result<(), String> {
    if url.host_str() != root.host_str() {
        return Err("on another host".into());
    }
    let literal = match url.host() {
        Some(url::Host::Ipv4(v4)) => Some(IpAddr::V4(v4)),
        Some(url::Host::Ipv6(v6)) => Some(IpAddr::V6(v6)),
        _ => None,
    };
    match literal {
        Some(ip) if !allowed(ip, allow_private) => {
            Err("a private or internal address (set allow_private = true on the source for an intranet)".into())
        }
        _ => Ok(()),
    }
}

/// Resolves names as the system does, then drops the addresses a fetch may not
/// reach; a name left with none fails the fetch.
pub struct GuardedResolver {
    pub allow_private: bool,
}

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let allow_private = self.allow_private;
        Box::pin(async move {
            let host = format!("{}:0", name.as_str());
            let found: Vec<SocketAddr> = tokio::net::lookup_host(host).await?.collect();
            let usable: Vec<SocketAddr> = found
                .into_iter()
                .filter(|a| allowed(a.ip(), allow_private))
                .collect();
            if usable.is_empty() {
                return Err("the name resolves only to private or internal addresses".into());
            }
            Ok(Box::new(usable.into_iter()) as Addrs)
        })
    }
}

/// A redirect policy that applies `check_url` to every hop, three hops at most.
pub fn redirects(root: Url, allow_private: bool) -> reqwest::redirect::Policy {
    reqwest::redirect::Policy::custom(move |attempt| {
        if attempt.previous().len() >= 3 {
            return attempt.error("too many redirects");
        }
        match check_url(attempt.url(), &root, allow_private) {
            Ok(()) => attempt.follow(),
            Err(why) => attempt.error(format!("redirected to a URL that is {why}")),
        }
    })
}

pub fn resolver(allow_private: bool) -> Arc<GuardedResolver> {
    Arc::new(GuardedResolver { allow_private })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn internal_addresses_are_refused_unless_allowed_and_metadata_always() {
        for ip in [
            "127.0.0.1",
            "10.1.2.3",
            "192.168.0.1",
            "172.16.5.4",
            "169.254.1.1",
            "::1",
            "fd00::1",
            "fe80::1",
            "0.0.0.0",
            "100.64.0.1",
            "::ffff:127.0.0.1",
            "198.18.0.1",
            "198.19.255.254",
            "192.0.0.8",
            "240.0.0.1",
            "255.255.255.254",
            "64:ff9b:1::a00:1",
            "fec0::1",
            "2001:0:4136:e378:8000:63bf:3fff:fdd2",
        ] {
            let ip: IpAddr = ip.parse().unwrap();
            assert!(!allowed(ip, false), "{ip}");
            assert!(allowed(ip, true), "{ip} with allow_private");
        }
        for ip in [
            "169.254.169.254",
            "fd00:ec2::254",
            "::ffff:169.254.169.254",
            "64:ff9b::a9fe:a9fe",
            "2002:a9fe:a9fe::1",
            "ff02::1",
        ] {
            let ip: IpAddr = ip.parse().unwrap();
            assert!(!allowed(ip, true), "{ip} is never fetched");
        }
        assert!(allowed("93.184.216.34".parse().unwrap(), false));
        assert!(allowed("198.20.0.1".parse().unwrap(), false));
        assert!(allowed("2a00:1450:4001:80b::200e".parse().unwrap(), false));
    }
}
