//! Where apply keeps an image's journal and lock, and making that directory safely on a host
//! that has never run gputune: whoever can change the directory (or swap one of its parents)
//! can rewrite the journal and steer what `rollback` writes, so it must be the caller's own,
//! reached only through directories nobody else can change.

use std::ffi::OsString;
use std::fs::{self, File};
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{self, OFlag};
use nix::sys::stat::{self, Mode};

/// Where apply keeps its journal and lock for an image: `GPUTUNE_STATE_DIR` when set, else the
/// invoking host's `/var/lib/gputune/images/KEY` as root, else the user's state directory
/// (`$XDG_STATE_HOME` or `~/.local/state`)`/gputune/images/KEY`. KEY names the image's
/// absolute path, so two images never share a journal and nothing is written inside either.
pub fn state_dir(image: &Path, euid_is_root: bool) -> PathBuf {
    if let Some(dir) = std::env::var_os("GPUTUNE_STATE_DIR").filter(|d| !d.is_empty()) {
        return PathBuf::from(dir);
    }
    let base = if euid_is_root {
        PathBuf::from("/var/lib/gputune")
    } else if let Some(dir) = std::env::var_os("XDG_STATE_HOME").filter(|d| !d.is_empty()) {
        PathBuf::from(dir).join("gputune")
    } else if let Some(home) = std::env::var_os("HOME").filter(|d| !d.is_empty()) {
        PathBuf::from(home).join(".local/state/gputune")
    } else {
        std::env::temp_dir().join(format!("gputune-{}", euid()))
    };
    base.join("images").join(key_of(image))
}

fn euid() -> u32 {
    nix::unistd::geteuid().as_raw()
}

/// A directory name for an image path: its absolute path with `/` as `_` and anything
/// unusual as `%XX`, readable and unique.
pub fn key_of(image: &Path) -> String {
    let absolute = std::fs::canonicalize(image).unwrap_or_else(|_| image.to_path_buf());
    let mut key = String::new();
    for b in absolute.as_os_str().as_encoded_bytes() {
        match b {
            b'/' => key.push('_'),
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'.' => key.push(*b as char),
            _ => key.push_str(&format!("%{b:02X}")),
        }
    }
    key
}

/// Why the state directory cannot hold apply's journal. Every message names the directory
/// and what to do (exit 3).
#[derive(Debug, thiserror::Error)]
pub enum StateDirError {
    #[error("state directory {}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error(
        "state directory {}: a path with `..` is ambiguous; name the directory without it (GPUTUNE_STATE_DIR)",
        .0.display()
    )]
    Dots(PathBuf),
    #[error(
        "state directory {} is a symbolic link: gputune keeps apply's journal only in a real directory; remove the link, or set GPUTUNE_STATE_DIR to the directory it points to",
        .0.display()
    )]
    Link(PathBuf),
    #[error(
        "state directory {} is a {kind}, not a directory: move it away, or set GPUTUNE_STATE_DIR to a directory of your own",
        path.display()
    )]
    NotDir { path: PathBuf, kind: &'static str },
    #[error(
        "{} belongs to uid {owner}, not to you (uid {me}): its owner could rewrite apply's journal and steer rollback. Remove it, or set GPUTUNE_STATE_DIR to a directory of your own",
        path.display()
    )]
    Foreign { path: PathBuf, owner: u32, me: u32 },
    #[error(
        "{} can be changed by other users (mode {mode:o}): they could swap apply's journal. Remove their write permission (chmod go-w), or set GPUTUNE_STATE_DIR to a directory of your own",
        path.display()
    )]
    Writable { path: PathBuf, mode: u32 },
}

/// Mode of every directory [`ensure`] creates: the journal is the caller's alone.
const DIR_MODE: u32 = 0o700;

/// Makes `dir` exist as a directory of the calling user, creating it and its missing parents
/// (mode 0700 whatever the umask). Refused: a `dir` that is a symbolic link, is not a
/// directory, belongs to another user or that others may write; an existing parent owned by
/// anyone but root or the caller, or writable by others without the sticky bit (as `/tmp`
/// has), since its owner could swap what lies below it. Parents may be links (`$HOME` on
/// another mount): they are judged where they lead.
pub(crate) fn ensure(dir: &Path) -> Result<(), StateDirError> {
    let me = euid();
    let io_err = |path: &Path| {
        let path = path.to_path_buf();
        move |source| StateDirError::Io { path, source }
    };
    let dir = std::path::absolute(dir).map_err(io_err(dir))?;
    if dir.components().any(|c| c == Component::ParentDir) {
        return Err(StateDirError::Dots(dir));
    }
    // The names to create, deepest first, and the deepest part of `dir` that exists.
    let mut missing: Vec<OsString> = Vec::new();
    let mut existing = dir.as_path();
    loop {
        match fs::symlink_metadata(existing) {
            Ok(_) => break,
            // ENOTDIR: a file on the way, refused below as the existing part.
            Err(e)
                if e.kind() == io::ErrorKind::NotFound
                    || e.raw_os_error() == Some(libc::ENOTDIR) =>
            {
                let (Some(name), Some(parent)) = (existing.file_name(), existing.parent()) else {
                    return Err(io_err(existing)(e));
                };
                missing.push(name.to_os_string());
                existing = parent;
            }
            Err(e) => return Err(io_err(existing)(e)),
        }
    }
    if missing.is_empty() {
        let meta = fs::symlink_metadata(&dir).map_err(io_err(&dir))?;
        if meta.file_type().is_symlink() {
            return Err(StateDirError::Link(dir));
        }
        judge(&dir, &meta, me, false)?;
        return trusted_parents(&dir, me);
    }
    // Parents are judged where they lead; the one to create in is opened by that real path
    // and everything below it is made and entered by handle, never by name again.
    let real = fs::canonicalize(existing).map_err(io_err(existing))?;
    let meta = fs::metadata(&real).map_err(io_err(&real))?;
    judge(&real, &meta, me, true)?;
    trusted_parents(&real, me)?;
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    let mut cur: OwnedFd =
        fcntl::open(&real, flags, Mode::empty()).map_err(|e| io_err(&real)(e.into()))?;
    let mut path = real;
    for name in missing.iter().rev() {
        path.push(name);
        match stat::mkdirat(&cur, name.as_os_str(), Mode::from_bits_truncate(DIR_MODE)) {
            Ok(()) | Err(Errno::EEXIST) => {}
            Err(e) => return Err(io_err(&path)(e.into())),
        }
        let next = match fcntl::openat(&cur, name.as_os_str(), flags, Mode::empty()) {
            Ok(fd) => fd,
            Err(Errno::ELOOP) => return Err(StateDirError::Link(path)),
            Err(Errno::ENOTDIR) => {
                return Err(StateDirError::NotDir { path, kind: "file" });
            }
            Err(e) => return Err(io_err(&path)(e.into())),
        };
        let file = File::from(next);
        let meta = file.metadata().map_err(io_err(&path))?;
        // Made by someone else in a race (EEXIST above): judged like one found.
        judge(&path, &meta, me, false)?;
        if meta.mode() & 0o7777 != DIR_MODE {
            file.set_permissions(fs::Permissions::from_mode(DIR_MODE))
                .map_err(io_err(&path))?;
        }
        cur = OwnedFd::from(file);
    }
    nix::unistd::fsync(cur.as_fd()).map_err(|e| io_err(&path)(e.into()))
}

/// A directory the journal may live in (or under): a directory, owned by the caller (or root,
/// for a parent), and not writable by others unless it is a sticky parent.
fn judge(path: &Path, meta: &fs::Metadata, me: u32, parent: bool) -> Result<(), StateDirError> {
    if !meta.is_dir() {
        return Err(StateDirError::NotDir {
            path: path.to_path_buf(),
            kind: crate::host::confine::kind_name(meta.mode()),
        });
    }
    let owner = meta.uid();
    if owner != me && !(parent && owner == 0) {
        return Err(StateDirError::Foreign {
            path: path.to_path_buf(),
            owner,
            me,
        });
    }
    let mode = meta.mode() & 0o7777;
    let sticky = parent && mode & libc::S_ISVTX != 0;
    if mode & 0o022 != 0 && !sticky {
        return Err(StateDirError::Writable {
            path: path.to_path_buf(),
            mode,
        });
    }
    Ok(())
}

/// Every directory above `dir` (a path without links above it, or one whose links only root
/// and the caller can change) is judged as a parent.
fn trusted_parents(dir: &Path, me: u32) -> Result<(), StateDirError> {
    let real = match dir.parent() {
        Some(p) => fs::canonicalize(p).map_err(|source| StateDirError::Io {
            path: p.to_path_buf(),
            source,
        })?,
        None => return Ok(()),
    };
    for ancestor in real.ancestors() {
        let meta = fs::metadata(ancestor).map_err(|source| StateDirError::Io {
            path: ancestor.to_path_buf(),
            source,
        })?;
        judge(ancestor, &meta, me, true)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(p: &Path) -> u32 {
        fs::metadata(p).unwrap().mode() & 0o7777
    }

    #[test]
    fn keys_name_the_image_path() {
        assert_eq!(
            key_of(Path::new("/nonexistent/img 1")),
            "_nonexistent_img%201"
        );
    }

    #[test]
    fn missing_directories_are_made_private_whatever_the_umask() {
        let top = tempfile::tempdir().unwrap();
        fs::set_permissions(top.path(), fs::Permissions::from_mode(0o755)).unwrap();
        let dir = top.path().join("state/gputune/images/_img");
        ensure(&dir).unwrap();
        for d in ["state", "state/gputune", "state/gputune/images/_img"] {
            assert_eq!(mode(&top.path().join(d)), DIR_MODE, "{d}");
        }
        // A second run finds it and accepts it.
        ensure(&dir).unwrap();
    }

    #[test]
    fn links_files_and_shared_directories_are_refused() {
        let top = tempfile::tempdir().unwrap();
        fs::set_permissions(top.path(), fs::Permissions::from_mode(0o755)).unwrap();
        let real = top.path().join("real");
        fs::create_dir(&real).unwrap();
        let link = top.path().join("link");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        assert!(matches!(ensure(&link), Err(StateDirError::Link(_))));
        let file = top.path().join("file");
        fs::write(&file, "").unwrap();
        assert!(matches!(ensure(&file), Err(StateDirError::NotDir { .. })));
        assert!(matches!(
            ensure(&file.join("below")),
            Err(StateDirError::NotDir { .. })
        ));
        let shared = top.path().join("shared");
        fs::create_dir(&shared).unwrap();
        fs::set_permissions(&shared, fs::Permissions::from_mode(0o777)).unwrap();
        assert!(matches!(
            ensure(&shared),
            Err(StateDirError::Writable { .. })
        ));
        // A world-writable parent without the sticky bit lets others swap what is below it.
        assert!(matches!(
            ensure(&shared.join("state")),
            Err(StateDirError::Writable { .. })
        ));
        assert!(!shared.join("state").exists());
        // With the sticky bit (as /tmp has) it is fine.
        fs::set_permissions(&shared, fs::Permissions::from_mode(0o1777)).unwrap();
        ensure(&shared.join("state")).unwrap();
        // A link among the parents is judged where it leads.
        ensure(&link.join("state")).unwrap();
        assert!(real.join("state").is_dir());
        assert!(matches!(
            ensure(Path::new("/tmp/../tmp/x")),
            Err(StateDirError::Dots(_))
        ));
    }

    #[test]
    fn another_users_directory_is_refused() {
        assert_eq!(euid(), 0, "giving a directory to another user needs root");
        let top = tempfile::tempdir().unwrap();
        fs::set_permissions(top.path(), fs::Permissions::from_mode(0o755)).unwrap();
        let theirs = top.path().join("theirs");
        fs::create_dir(&theirs).unwrap();
        nix::unistd::chown(&theirs, Some(nix::unistd::Uid::from_raw(65534)), None).unwrap();
        let err = ensure(&theirs).unwrap_err();
        assert!(
            matches!(err, StateDirError::Foreign { owner: 65534, .. }),
            "{err}"
        );
        assert!(err.to_string().contains("GPUTUNE_STATE_DIR"), "{err}");
        // Nor is anything made below a parent another user owns.
        assert!(matches!(
            ensure(&theirs.join("images/_img")),
            Err(StateDirError::Foreign { .. })
        ));
        assert!(!theirs.join("images").exists());
    }
}
