//! Two replicas behind HAProxy (SPEC §16): both on one fresh PostgreSQL database
//! and one Redis, round-robined by Debian's `haproxy` with a generated
//! configuration. Reports short-turn throughput and added time to first token
//! through the balancer, and against one replica alone on the same database in
//! the same run. Everything shares this machine's two cores.

use std::process::Stdio;
use std::time::Duration;

use tokio::process::Command;

use crate::figures::{fakes, ttft_at, turns_per_second};
use crate::server::{Server, free_port, fresh_postgres, start_replica};
use crate::stats::{ms, report};

pub async fn figures(sizes: &crate::figures::Sizes) -> anyhow::Result<()> {
    let postgres = std::env::var("BENCH_POSTGRES")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432".into());
    let redis = std::env::var("BENCH_REDIS").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let (llm, hook) = fakes().await?;
    let database = fresh_postgres(&postgres).await?;
    let dirs = [tempfile::tempdir()?, tempfile::tempdir()?];
    let env = [("DESKBELL_REDIS_URL", redis.as_str())];
    let mut replicas: Vec<Server> = Vec::new();
    for dir in &dirs {
        replicas.push(start_replica(dir.path(), &llm, &hook, &env, &database).await?);
    }
    let (balancer, _haproxy, _config) = haproxy(&replicas).await?;
    let concurrency = 64.min(sizes.concurrency.max(8));
    for (label, base) in [
        ("one replica", replicas[0].base.as_str()),
        ("two replicas behind HAProxy", &balancer),
    ] {
        let rate = turns_per_second(base, concurrency, sizes.throughput_for).await?;
        report(
            &format!(
                "short question turns per second, PostgreSQL + Redis, {label} ({concurrency} clients)"
            ),
            &format!("{rate:.0} turns/s"),
            "",
        );
        let (deskbell, model) = ttft_at(base, &llm, sizes).await?;
        let added = |p: f64| deskbell.percentile(p).saturating_sub(model.percentile(p));
        report(
            &format!(
                "added time to first token, {label} ({} streams)",
                sizes.concurrency
            ),
            &format!("p50 {} p99 {}", ms(added(0.5)), ms(added(0.99))),
            "",
        );
    }
    Ok(())
}

/// HAProxy in the foreground, round-robin over the replicas; returns its base
/// URL, the child (killed on drop) and the folder of its configuration.
async fn haproxy(
    replicas: &[Server],
) -> anyhow::Result<(String, tokio::process::Child, tempfile::TempDir)> {
    let port = free_port()?;
    let addresses: Vec<String> = replicas
        .iter()
        .map(|r| r.base.trim_start_matches("http://").to_string())
        .collect();
    let text = deskbell::testkit::haproxy::config(port, &addresses, "");
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("haproxy.cfg");
    std::fs::write(&path, text)?;
    let child = Command::new(deskbell::testkit::haproxy::binary())
        .arg("-f")
        .arg(&path)
        .arg("-db")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()?;
    let base = format!("http://127.0.0.1:{port}");
    for _ in 0..200 {
        if reqwest::get(format!("{base}/healthz"))
            .await
            .is_ok_and(|r| r.status().is_success())
        {
            return Ok((base, child, dir));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    anyhow::bail!("HAProxy did not start (Debian: apt-get install haproxy)")
}
