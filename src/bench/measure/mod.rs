//! The measurement: what is measured and how it is reported. The collectives and their
//! buffers ([`collective`]), element types, inputs and the exact check ([`data`]), message
//! sizes ([`size`]), the timing loop every backend runs under ([`harness`]), bandwidth as
//! nccl-tests defines it ([`stats`]), what the path could carry ([`context`]), and the
//! renderings of a run: table and JSON ([`output`]), Prometheus gauges ([`prometheus`]).

pub mod collective;
pub mod context;
pub mod data;
pub mod harness;
pub mod output;
pub(crate) mod prometheus;
pub(crate) mod size;
pub(crate) mod stats;
