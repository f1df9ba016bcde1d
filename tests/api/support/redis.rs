//! Redis for the tests: the machine's own (`DESKBELL_TEST_REDIS`, default the
//! local server), or a private `redis-server` child the test can stop and start.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// The shared Redis the suite uses; each test's keys live under its own
/// database's installation id, so tests never share counters.
pub fn redis_url() -> String {
    std::env::var("DESKBELL_TEST_REDIS").unwrap_or_else(|_| "redis://127.0.0.1:6379".into())
}

/// A `redis-server` of this test's own, on a fixed port, keeping nothing on disk.
pub struct RedisChild {
    pub port: u16,
    child: Option<Child>,
}

impl RedisChild {
    pub async fn start() -> RedisChild {
        let mut redis = RedisChild {
            port: super::free_port(),
            child: None,
        };
        redis.restart().await;
        redis
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Starts it (again) on its port and waits until it answers.
    pub async fn restart(&mut self) {
        let child = Command::new("redis-server")
            .args([
                "--port",
                &self.port.to_string(),
                "--save",
                "",
                "--appendonly",
                "no",
            ])
            .args(["--bind", "127.0.0.1"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server (Debian: apt-get install redis-server)");
        self.child = Some(child);
        for _ in 0..200 {
            if tokio::net::TcpStream::connect(("127.0.0.1", self.port))
                .await
                .is_ok()
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("redis-server did not start");
    }

    /// Kills it, as a crash or a network cut would look to Deskbell.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for RedisChild {
    fn drop(&mut self) {
        self.stop();
    }
}
