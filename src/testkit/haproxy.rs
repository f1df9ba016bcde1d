//! HAProxy in front of replicas (SPEC §16), as the replica tests and the
//! benchmark run it: Debian's `haproxy` in the foreground with a generated
//! configuration that round-robins the replicas and checks `/healthz`.

/// The program: Debian puts it in /usr/sbin, which a non-root PATH may miss.
pub fn binary() -> &'static str {
    if std::path::Path::new("/usr/sbin/haproxy").exists() {
        "/usr/sbin/haproxy"
    } else {
        "haproxy"
    }
}

/// A configuration listening on 127.0.0.1:`port` in front of `replicas`
/// (`host:port` each). `maxconn` stays within the sandbox's open-file limit
/// (HAProxy wants two descriptors a connection).
pub fn config(port: u16, replicas: &[String], check: &str) -> String {
    let servers: String = replicas
        .iter()
        .enumerate()
        .map(|(i, address)| format!("    server r{i} {address} check {check}\n"))
        .collect();
    format!(
        "global\n    maxconn 4096\n\ndefaults\n    mode http\n    timeout connect 2s\n    timeout client 60s\n    timeout server 60s\n    option forwardfor\n\n\
         frontend visitors\n    bind 127.0.0.1:{port}\n    default_backend deskbell\n\n\
         backend deskbell\n    balance roundrobin\n    option httpchk GET /healthz\n{servers}"
    )
}
