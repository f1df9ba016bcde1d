//! Operating Deskbell (SPEC §18): Prometheus metrics on their own address, and
//! readiness for load balancers.

pub mod metrics;
pub mod ready;
