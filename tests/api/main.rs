//! Integration tests: the real app over HTTP on port 0, a fresh database each.

mod ask;
mod cli;
mod confirm;
mod crash;
mod edges;
mod guards;
mod knowledge;
#[cfg(feature = "local-model")]
mod local;
#[cfg(feature = "local-model")]
mod local_arch;
mod postgres;
mod support;
mod visitors;
