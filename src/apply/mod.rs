//! `gputune apply` and `gputune rollback` underneath the command line: turning findings'
//! [`Change`](crate::finding::Change)s into a [`plan::Plan`] of writes, journaling every
//! target's state first, executing all or nothing, and restoring from the journal.
//!
//! Flow: `plan::build` (reads only) → `journal::save` (fsynced) → `transaction::execute`
//! (write, read back, verify; restore in reverse on failure) → journal marked applied.

pub mod cgroup;
pub mod error;
pub mod firewall;
pub mod io;
pub mod journal;
pub mod lock;
pub mod nft;
pub mod nic;
pub mod operator;
pub mod owned;
pub mod plan;
pub mod status;
pub mod target;
pub mod transaction;
pub mod validate;

#[cfg(test)]
mod tests;
