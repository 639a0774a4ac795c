//! The control plane: who the ranks are and how they meet and agree. Joining a launcher's
//! job ([`launch`], [`hostlist`]), the rendezvous at rank 0 ([`rendezvous`]) behind a gate
//! ([`gate`]) that admits only ranks proving the job's token ([`auth`]), the frames they
//! exchange ([`frame`]), what a rank says while it waits ([`wait`]), and the star of control
//! connections that synchronises them, gathers their figures ([`figures`]) and stops the job
//! when one rank fails ([`group`]). Nothing here measures; the measurement runs on top.

pub(crate) mod auth;
pub(crate) mod figures;
pub mod frame;
pub(crate) mod gate;
pub mod group;
pub(crate) mod hostlist;
pub(crate) mod launch;
pub mod rendezvous;
pub(crate) mod wait;
