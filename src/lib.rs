//! Deskbell: a self-hosted AI help desk. See ARCHITECTURE.md for the map.

pub mod app;
pub mod ask;
pub mod audit;
pub mod budget;
pub mod cli;
pub mod clock;
pub mod config;
pub mod confirm;
pub mod conversation;
pub mod crashpoint;
pub mod demo;
pub mod error;
pub mod guard;
pub mod ids;
pub mod knowledge;
pub mod llm;
pub mod routes;
pub mod secret;
pub mod server;
pub mod states;
pub mod store;
pub mod testkit;
pub mod tools;
pub mod visitor;
pub mod widget;
pub mod wire;
