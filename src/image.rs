//! Image mode: a `--root` with no running kernel behind it is a golden image (a debootstrap
//! tree, an unpacked container, a mounted disk). Audit judges what will apply when it boots;
//! apply writes only the persisted files and keeps gputune's own state outside the image.

use std::path::PathBuf;

use serde::Serialize;

use crate::host::Root;

pub(crate) mod state;

pub use state::{StateDirError, key_of, state_dir};

/// What an audit judged: the running kernel, the files of a node, or an image.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// The running kernel's values (root `/`, or a snapshot with its own `proc/sys`).
    #[default]
    Live,
    /// `--persisted`: what the node's files give after a reboot.
    Persisted,
    /// A root with no running kernel: what the image will have at boot.
    Image,
}

impl Mode {
    /// The mode an audit of `root` runs in; `--persisted` wins over live, never over image.
    pub(crate) fn detect(root: &Root, persisted: bool) -> Mode {
        if is_image(root) {
            Mode::Image
        } else if persisted {
            Mode::Persisted
        } else {
            Mode::Live
        }
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            Mode::Live => "live",
            Mode::Persisted => "persisted",
            Mode::Image => "image",
        }
    }
}

/// The reason facts only a running node has are skipped in an image.
pub(crate) const NO_KERNEL: &str = "image: no running kernel";

/// True for a root other than `/` whose `proc` and `sys` are absent or empty (an image's
/// mount points): nothing there describes a running kernel. A root with anything under
/// `proc` (`sys`, `mounts`, `meminfo`) or `sys` (a captured sysfs, as hwloc and ghw take
/// them) is a snapshot of a running node, judged as one.
pub(crate) fn is_image(root: &Root) -> bool {
    let empty = |dir: &str| {
        root.list_dir(dir)
            .ok()
            .flatten()
            .is_none_or(|l| l.is_empty())
    };
    !root.is_live() && !root.exists("/proc/sys") && empty("/proc") && empty("/sys")
}

/// Why a `--root` cannot be judged at all.
#[derive(Debug, thiserror::Error)]
pub enum RootError {
    #[error("--root {0}: no such directory (is the image mounted?)")]
    Missing(PathBuf),
    #[error("--root {0}: {1}")]
    Unreadable(PathBuf, #[source] std::io::Error),
    #[error(
        "--root {0} is empty: a failed mount or unpack? Point it at the image's root file system"
    )]
    Empty(PathBuf),
    #[error(
        "--root {0} is not a Linux root file system (it has neither etc/os-release nor usr/): point it at the image's root"
    )]
    NotLinux(PathBuf),
}

/// Refuses a root that is missing, empty, or (as an image) not a Linux root file system, so a
/// failed mount never passes an audit. A root with its own `proc/sys` (a node snapshot) only
/// has to exist and hold something.
pub(crate) fn check_root(root: &Root) -> Result<(), RootError> {
    if root.is_live() {
        return Ok(());
    }
    let dir = root.dir().to_path_buf();
    let mut entries = match std::fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(RootError::Missing(dir));
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotADirectory => {
            return Err(RootError::Missing(dir));
        }
        Err(e) => return Err(RootError::Unreadable(dir, e)),
    };
    if entries.next().is_none() {
        return Err(RootError::Empty(dir));
    }
    if is_image(root)
        && !root.exists("/etc/os-release")
        && !root.exists("/usr/lib/os-release")
        && !root.is_dir("/usr")
    {
        return Err(RootError::NotLinux(dir));
    }
    Ok(())
}

/// True when the root's `proc` is a mounted procfs (a host `/proc` bind-mounted into a chroot
/// build): its `sys` files are the running kernel's, so writing them changes this machine.
/// A `proc` that is a symbolic link to `/proc` is someone's explicit choice of the live kernel
/// (see `apply::io::has_live_kernel`), not an accident, and is not counted.
pub(crate) fn has_mounted_proc(root: &Root) -> bool {
    if root.is_live() {
        return false;
    }
    let path = root.path("/proc");
    if !std::fs::symlink_metadata(&path).is_ok_and(|m| m.is_dir()) {
        return false;
    }
    nix::sys::statfs::statfs(&path)
        .is_ok_and(|fs| fs.filesystem_type() == nix::sys::statfs::PROC_SUPER_MAGIC)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::Tree;

    /// A tree of these files (a name ending in `/` is a directory).
    fn tree(files: &[&str]) -> Tree {
        let tree = Tree::new();
        for f in files {
            if f.ends_with('/') {
                tree.dir(f);
            } else {
                tree.file(f, "x");
            }
        }
        tree
    }

    #[test]
    fn roots_that_are_not_images_are_refused() {
        let missing = Root::new("/nonexistent/gputune-image");
        assert!(matches!(check_root(&missing), Err(RootError::Missing(_))));
        let empty = tree(&[]);
        assert!(matches!(
            check_root(&empty.root()),
            Err(RootError::Empty(_))
        ));
        let junk = tree(&["home/user/notes.txt"]);
        assert!(matches!(
            check_root(&junk.root()),
            Err(RootError::NotLinux(_))
        ));
        for ok in [
            &["etc/os-release"][..],
            &["usr/bin/"],
            &["proc/sys/kernel/x"],
        ] {
            assert!(check_root(&tree(ok).root()).is_ok(), "{ok:?}");
        }
        assert!(check_root(&Root::live()).is_ok());
    }

    #[test]
    fn modes() {
        let image = tree(&["etc/os-release"]);
        let snapshot = tree(&["proc/sys/kernel/x"]);
        assert_eq!(Mode::detect(&image.root(), false), Mode::Image);
        assert_eq!(Mode::detect(&image.root(), true), Mode::Image);
        assert_eq!(Mode::detect(&snapshot.root(), false), Mode::Live);
        assert_eq!(Mode::detect(&snapshot.root(), true), Mode::Persisted);
        assert_eq!(Mode::detect(&Root::live(), false), Mode::Live);
        assert!(!has_mounted_proc(&image.root()));
    }
}
