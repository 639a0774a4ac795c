//! What a run of checks is judged against and told to leave out, shared by every command
//! that audits (audit, apply, health, bench, explain): the profile named or chosen for the
//! node, and the `--skip` ids that matched nothing.

use crate::error::Result;
use crate::finding::Finding;
use crate::host::Root;
use crate::profile::{Loader, Profile, default};

/// The named profile, or the one the node's hardware calls for and why.
pub(crate) fn load_profile(name: Option<&str>, root: &Root) -> Result<(Profile, Option<String>)> {
    let loader = Loader::new(root, &super::keys);
    match name {
        Some(name) => Ok((loader.load(name)?, None)),
        None => {
            let (name, reason) = default::choose(root)?;
            Ok((loader.load(&name)?, Some(reason)))
        }
    }
}

/// Says on stderr which `--skip` ids named no check, and the id likely meant: a typo must
/// not pass for a skipped check. (Not an error: ids of NICs or slices differ by node.)
pub(crate) fn warn_unmatched_skips(skip: &[String], findings: &[Finding]) {
    for (id, closest) in super::unmatched_skips(skip, findings) {
        let hint = closest.map_or(String::new(), |c| {
            format!(" (did you mean {}?)", crate::report::table::clean(&c))
        });
        eprintln!("gputune: --skip {id}: no check of this run has this id{hint}");
    }
}
