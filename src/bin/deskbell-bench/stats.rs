//! Medians and percentiles of measured durations.

use std::time::Duration;

#[derive(Default)]
pub struct Samples(Vec<Duration>);

impl Samples {
    pub fn push(&mut self, d: Duration) {
        self.0.push(d);
    }

    pub fn extend(&mut self, other: Samples) {
        self.0.extend(other.0);
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn percentile(&self, p: f64) -> Duration {
        if self.0.is_empty() {
            return Duration::ZERO;
        }
        let mut sorted = self.0.clone();
        sorted.sort_unstable();
        let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
        sorted[index.min(sorted.len() - 1)]
    }

    pub fn p50(&self) -> Duration {
        self.percentile(0.5)
    }

    pub fn p99(&self) -> Duration {
        self.percentile(0.99)
    }
}

/// A round of clients that each ask one after another, all starting at the same
/// instant: each client's first sample (the round's opening wave, which meets
/// every other client's first request at once) apart from the rest.
#[derive(Default)]
pub struct Round {
    pub opening: Samples,
    pub rest: Samples,
}

impl Round {
    /// Adds one client's samples, in the order it took them.
    pub fn add_client(&mut self, samples: Samples) {
        let mut taken = samples.0.into_iter();
        if let Some(first) = taken.next() {
            self.opening.push(first);
        }
        self.rest.0.extend(taken);
    }

    pub fn all(self) -> Samples {
        let mut all = self.opening;
        all.extend(self.rest);
        all
    }
}

pub fn ms(d: Duration) -> String {
    format!("{:.3} ms", d.as_secs_f64() * 1000.0)
}

/// "Deskbell p50 … p99 …; model alone p50 … p99 …".
pub fn beside_model(deskbell: &Samples, model: &Samples) -> String {
    format!(
        "Deskbell p50 {} p99 {}; model alone p50 {} p99 {}",
        ms(deskbell.p50()),
        ms(deskbell.p99()),
        ms(model.p50()),
        ms(model.p99())
    )
}

/// One printed figure: name, median, p99, what it should be.
pub fn report(name: &str, value: &str, goal: &str) {
    println!("| {name} | {value} | {goal} |");
}

/// The resident memory of a process (`"self"` or a pid), from /proc; 0 if unreadable.
pub fn rss_mib(process: &str) -> f64 {
    std::fs::read_to_string(format!("/proc/{process}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

/// The share of the machine's CPU time that the server and the PostgreSQL
/// processes took over a stretch of time (all of it: 100 % is every core busy).
pub struct CpuShare {
    server: Option<u32>,
    started: std::time::Instant,
    server_at_start: f64,
    postgres_at_start: f64,
}

impl CpuShare {
    pub fn start(server: Option<u32>) -> Self {
        CpuShare {
            server,
            started: std::time::Instant::now(),
            server_at_start: server.map_or(0.0, cpu_seconds),
            postgres_at_start: cpu_seconds_named("postgres"),
        }
    }

    /// "server 61 %, PostgreSQL 22 % of 2 cores".
    pub fn finish(&self) -> String {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
        let wall = self.started.elapsed().as_secs_f64() * cores;
        let server = self.server.map_or(0.0, cpu_seconds) - self.server_at_start;
        let postgres = cpu_seconds_named("postgres") - self.postgres_at_start;
        format!(
            "CPU: server {:.0} %, PostgreSQL {:.0} % of {cores} cores",
            100.0 * server / wall,
            100.0 * postgres / wall
        )
    }
}

/// User and system CPU seconds of a process, from /proc; 0 if unreadable.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // The fields after the command name, which is in parentheses and may hold spaces.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // utime and stime are fields 14 and 15 of stat, 12 and 13 after the name.
    (ticks(11) + ticks(12)) / 100.0
}

/// The CPU seconds of every process whose command name is `name`.
fn cpu_seconds_named(name: &str) -> f64 {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return 0.0;
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == name)
        })
        .map(cpu_seconds)
        .sum()
}
