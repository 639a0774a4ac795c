//! Every foreign call gputune makes, behind safe functions: one module per C library loaded
//! at run time (`cuda`, `nccl`, and `nvml` for what nvml-wrapper lacks: each opens its library, resolves its symbols once and turns
//! every failure into a typed error) and `linux` for the few kernel calls that neither nix
//! nor socket2 offers. Nothing outside this folder uses `unsafe`.

mod codes;
mod library;

pub(crate) mod cuda;
pub(crate) mod linux;
pub(crate) mod nccl;
pub(crate) mod nvml;
