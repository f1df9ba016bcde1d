//! Integration tests: the real app over HTTP on port 0, a fresh database each.

mod anthropic;
mod ask;
mod audit;
mod cli;
mod confirm;
mod connections;
mod crash;
mod desk;
mod doors;
mod early_ask;
mod edges;
mod expiry;
mod feedback;
mod fencing;
mod gates;
mod guards;
#[cfg(feature = "local-model")]
mod hybrid;
#[cfg(feature = "local-model")]
mod hybrid_crash;
#[cfg(feature = "local-model")]
mod hybrid_store;
mod identity;
mod ingest_jobs;
mod knowledge;
mod limits;
#[cfg(feature = "local-model")]
mod local;
#[cfg(feature = "local-model")]
mod local_arch;
#[cfg(feature = "local-model")]
mod local_decoder;
#[cfg(feature = "local-model")]
mod local_demo;
mod locale;
mod mcp;
mod metrics;
mod operator;
mod operator_reads;
mod operator_tools;
mod outcomes;
mod pgvector;
mod postgres;
mod provider;
mod redis;
mod refusals;
mod replicas;
mod support;
mod tool_calls;
mod turn_limits;
mod visitors;
mod web_sources;
