//! Bindings to C libraries loaded at run time, one module per library: each opens its
//! library, resolves its symbols and turns every failure into a typed error, so the rest of
//! the crate calls safe functions.

mod codes;
mod library;

pub mod cuda;
pub mod linux;
pub mod nccl;
