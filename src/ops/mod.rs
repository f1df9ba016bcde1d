//! Operating Deskbell (SPEC §18): Prometheus metrics on their own address,
//! readiness for load balancers, and the OpenAPI document.

pub mod logs;
pub mod metrics;
pub mod openapi;
pub mod ready;
