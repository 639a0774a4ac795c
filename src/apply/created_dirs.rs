//! The directories an apply creates for its files (`/etc/systemd/logind.conf.d`, a slice's
//! `.d`), kept beside the journal so rollback can remove them again and leave the tree exactly
//! as it was: an image's manifest after apply and rollback matches the one before.

use std::io;

use crate::apply::target::{Step, Target};
use crate::host::Root;

/// Host path of the list, under the state root (beside the journal).
const PATH: &str = "/var/lib/gputune/created-dirs";

/// Adds the parents of `steps`' files that do not exist under `root` yet to the list.
pub(crate) fn remember(state: &Root, root: &Root, steps: &[Step]) -> io::Result<()> {
    let mut dirs = load(state);
    for step in steps {
        let Target::File(file) = &step.target else {
            continue;
        };
        let mut missing = Vec::new();
        let mut dir = std::path::Path::new(file.as_str()).parent();
        while let Some(d) = dir.and_then(|d| d.to_str()) {
            if d == "/" || root.exists(d) {
                break;
            }
            missing.push(d.to_string());
            dir = std::path::Path::new(d).parent();
        }
        for d in missing {
            if !dirs.contains(&d) {
                dirs.push(d);
            }
        }
    }
    if dirs.is_empty() {
        return Ok(());
    }
    let to_io = |e: crate::host::HostError| io::Error::other(e.to_string());
    state.create_dirs("/var/lib/gputune").map_err(to_io)?;
    state
        .write_file(PATH, format!("{}\n", dirs.join("\n")).as_bytes())
        .map_err(to_io)
}

/// Removes the recorded directories that are empty again, deepest first, then the list.
/// A directory someone has since put files in stays.
pub(crate) fn remove(state: &Root, root: &Root) {
    let mut dirs = load(state);
    dirs.sort_by_key(|d| std::cmp::Reverse(d.matches('/').count()));
    for d in dirs {
        let _ = root.remove_dir(&d);
    }
    let _ = state.remove_file(PATH);
}

/// The recorded directories that exist under `root` now: what [`remove`] would try to remove.
pub(crate) fn pending(state: &Root, root: &Root) -> Vec<String> {
    let mut dirs = load(state);
    dirs.sort_by_key(|d| std::cmp::Reverse(d.matches('/').count()));
    dirs.retain(|d| root.is_dir(d));
    dirs
}

/// The list; only absolute paths under `/etc` without `..` are taken from it, since it is a
/// file on disk and rollback must not be steered elsewhere.
fn load(state: &Root) -> Vec<String> {
    let text = state.read_optional(PATH).ok().flatten().unwrap_or_default();
    text.lines()
        .filter(|l| l.starts_with("/etc/") && !l.split('/').any(|p| p == ".." || p == "."))
        .map(str::to_string)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apply::target::State;

    #[test]
    fn created_directories_are_removed_and_others_kept() {
        let image = tempfile::tempdir().unwrap();
        let state = tempfile::tempdir().unwrap();
        let (root, state) = (Root::new(image.path()), Root::new(state.path()));
        std::fs::create_dir_all(image.path().join("etc/systemd")).unwrap();
        let step = |p: &str| Step {
            what: p.into(),
            target: Target::File(p.into()),
            before: State::Absent,
            after: State::Present("x".into()),
        };
        remember(
            &state,
            &root,
            &[
                step("/etc/systemd/logind.conf.d/90-gputune.conf"),
                step("/etc/systemd/system/a.slice.d/90-gputune.conf"),
            ],
        )
        .unwrap();
        for d in ["etc/systemd/logind.conf.d", "etc/systemd/system/a.slice.d"] {
            std::fs::create_dir_all(image.path().join(d)).unwrap();
        }
        std::fs::write(image.path().join("etc/systemd/system/a.slice.d/other"), "").unwrap();
        remove(&state, &root);
        assert!(!image.path().join("etc/systemd/logind.conf.d").exists());
        assert!(
            image
                .path()
                .join("etc/systemd/system/a.slice.d/other")
                .exists()
        );
        assert!(image.path().join("etc/systemd").exists());
        assert!(!state.path(PATH).exists());
    }
}
