//! Deskbell: a self-hosted AI help desk. See ARCHITECTURE.md for the map.
//!
//! Public are the modules the binary, the tests and the benchmark harness use;
//! the request handlers and the confirmation flow are internal.

pub mod app;
mod approvals;
mod ask;
mod audit;
pub mod budget;
pub mod cli;
pub mod clock;
pub mod config;
mod confirm;
mod console;
pub(crate) mod conversation;
mod crashpoint;
pub mod demo;
mod desk;
mod error;
mod feedback;
mod guard;
/// The guards' counters, for tests and benchmarks that play a replica.
pub use guard::counters::{Counters, Refusal};
pub use guard::redis::RedisCounters;
pub mod ids;
pub mod knowledge;
mod live;
pub mod llm;
pub mod locale;
pub mod mcp;
pub mod operator;
pub mod ops;
pub mod routes;
pub mod secret;
mod server;
pub mod states;
pub mod store;
#[cfg(feature = "testkit")]
pub mod testkit;
pub mod tools;
pub mod visitor;
mod widget;
pub mod wire;
