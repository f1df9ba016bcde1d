//! The benchmark harness: starts the real `deskbell serve` (a child process, release
//! build) against a scripted model and a tool endpoint in this process, drives it over
//! loopback HTTP with many concurrent clients, and prints each figure with its median
//! and p99. `--quick` runs every figure small, for CI.
//!
//! Build both binaries first: `cargo build --release --bins --features testkit`, then
//! `ulimit -n 65536; target/release/deskbell-bench` (see BENCHMARKS.md).

mod client;
mod confirm;
mod console;
mod desk;
mod figures;
mod knowledge;
mod latency;
mod load;
#[cfg(feature = "local-model")]
mod local;
mod quality;
mod replicas;
mod server;
mod stats;

use std::process::ExitCode;

fn main() -> ExitCode {
    let quick = std::env::args().any(|a| a == "--quick");
    let only: Option<String> = std::env::args().skip_while(|a| a != "--only").nth(1);
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("deskbell-bench: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(figures::run_all(quick, only.as_deref())) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("deskbell-bench: {e:#}");
            ExitCode::FAILURE
        }
    }
}
