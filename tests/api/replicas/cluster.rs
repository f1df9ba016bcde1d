//! Replicas as the operator runs them: two or three `deskbell serve` processes on
//! one PostgreSQL database and one Redis, behind a real HAProxy (Debian's
//! `haproxy`, in the foreground with a generated configuration), which the tests
//! talk to as visitors do.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::crash::harness::{Server, Setup, ask_at, setup_with, visitor_at};
use crate::support::{free_port, redis_url};

pub struct Cluster {
    pub setup: Setup,
    pub replicas: Vec<Option<Server>>,
    /// The load balancer's address: what visitors use.
    pub base: String,
    _haproxy: HaProxy,
}

struct HaProxy(Child);

impl Drop for HaProxy {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Cluster {
    /// `n` replicas on a fresh PostgreSQL database and the shared Redis, behind
    /// HAProxy round-robin; `redis` overrides the Redis URL.
    pub async fn start(
        n: usize,
        redis: Option<String>,
        acme: &str,
        env: &[(&str, &str)],
    ) -> Cluster {
        let redis = redis.unwrap_or_else(redis_url);
        let extra = format!("redis_url = \"{redis}\"\ntrusted_proxies = [\"127.0.0.1\"]\n");
        let setup = setup_with(true, &extra, acme).await;
        // Each replica keeps its files (its knowledge index) in a folder of its own,
        // as replicas on separate machines do.
        let mut replicas = Vec::new();
        for i in 0..n {
            let config = setup.replica_config(i);
            replicas.push(Some(Server::start_env(&config, None, env).await));
        }
        let port = free_port();
        let addresses: Vec<String> = replicas
            .iter()
            .map(|s| {
                s.as_ref()
                    .unwrap()
                    .base
                    .trim_start_matches("http://")
                    .to_string()
            })
            .collect();
        let config =
            deskbell::testkit::haproxy::config(port, &addresses, "inter 500 fall 2 rise 1");
        let path = setup.dir().join("haproxy.cfg");
        std::fs::write(&path, config).unwrap();
        let child = Command::new(deskbell::testkit::haproxy::binary())
            .args(["-f"])
            .arg(&path)
            .arg("-db")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("haproxy (Debian: apt-get install haproxy)");
        let base = format!("http://127.0.0.1:{port}");
        let cluster = Cluster {
            setup,
            replicas,
            base,
            _haproxy: HaProxy(child),
        };
        let http = reqwest::Client::new();
        for _ in 0..200 {
            if let Ok(r) = http.get(format!("{}/healthz", cluster.base)).send().await
                && r.status().is_success()
            {
                return cluster;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        panic!("haproxy did not start");
    }

    pub fn replica(&self, i: usize) -> &Server {
        self.replicas[i].as_ref().expect("a live replica")
    }

    pub async fn visitor(&self) -> String {
        visitor_at(&self.base).await
    }

    /// An ask through the load balancer, on a connection of its own.
    pub async fn ask(&self, token: &str, body: Value) -> crate::support::Reply {
        ask_at(&self.base, token, body).await
    }
}
