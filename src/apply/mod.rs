//! `gputune apply` and `gputune rollback` underneath the command line: turning findings'
//! [`Change`](crate::finding::Change)s into a [`plan::Plan`] of writes, journaling every
//! target's state first, executing all or nothing, and restoring from the journal.
//!
//! Flow: `plan::build` (reads only) → `journal::save` (fsynced) → `transaction::execute`
//! (write, read back, verify; restore in reverse on failure) → journal marked applied;
//! [`run`] holds the policy around that flow (who may write, when to refuse).

pub(crate) mod cgroup;
pub(crate) mod created_dirs;
pub(crate) mod error;
pub mod firewall;
pub mod io;
pub(crate) mod journal;
pub(crate) mod lock;
pub mod nft;
pub mod nic;
pub mod operator;
pub(crate) mod owned;
pub mod plan;
pub(crate) mod render;
pub mod run;
pub(crate) mod status;
pub mod target;
pub mod transaction;
pub(crate) mod validate;

#[cfg(test)]
mod tests;
