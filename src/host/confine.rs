//! Confinement: opening a host path as if the root were `/`.
//!
//! gputune reads images and trees other people built, as root. An absolute symlink inside
//! such a tree (`etc/sysctl.d -> /etc/...`) must name a file inside the tree, and `..` must
//! never climb above it, or a verdict is about the wrong file and a write lands on the host.
//! The kernel does this for us with `openat2(RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS)`
//! (Linux 5.6+); on older kernels, or where seccomp hides the syscall, [`open_walk`] does the
//! same component by component with `O_NOFOLLOW` opens. Every open here is `O_CLOEXEC`.

use std::ffi::OsStr;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Component, Path};

use nix::errno::Errno;
use nix::fcntl::{self, AtFlags, OFlag, OpenHow, ResolveFlag};
use nix::sys::stat::{self, FileStat, Mode};

/// The most a configuration or kernel file may hold before gputune refuses to read it
/// (16 MiB): far above any real sysctl.d, profile, limits.conf or `/proc` file, far below
/// what would hurt the node's memory.
pub(crate) const READ_CAP: u64 = 16 << 20;

/// The most entries a directory may have before gputune refuses to list it: far above any
/// real sysfs or configuration directory, far below what would exhaust memory.
pub(crate) const MAX_DIR_ENTRIES: usize = 1 << 20;

/// How many symbolic links one resolution may follow (the kernel's own limit, MAXSYMLINKS).
const MAX_LINKS: usize = 40;

/// Why a path was refused though the file system would have allowed it. Carried inside an
/// `io::Error` (kind `Other`) so every reader keeps its `HostError`; ask
/// [`super::HostError::refusal`] to decide on it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Refusal {
    /// `..` would climb above the root.
    #[error("the path climbs above the root")]
    Escapes,
    /// A FIFO, device, socket or directory where a regular file was expected.
    #[error("is a {0}, not a regular file")]
    NotRegular(&'static str),
    /// Larger than the read cap.
    #[error("is larger than {cap} bytes, the most gputune reads")]
    TooLarge { cap: u64 },
    /// A directory with more entries than gputune lists.
    #[error("has more than {cap} entries, the most gputune lists")]
    TooMany { cap: usize },
    /// A write would have gone through a symbolic link at the final component.
    #[error("is a symbolic link; gputune never writes through one")]
    FinalLink,
}

impl From<Refusal> for io::Error {
    fn from(r: Refusal) -> io::Error {
        io::Error::other(r)
    }
}

/// The refusal inside an `io::Error`, if it is one.
#[cfg(test)]
pub(crate) fn refusal_of(e: &io::Error) -> Option<&Refusal> {
    e.get_ref()
        .and_then(|inner| inner.downcast_ref::<Refusal>())
}

/// Reads a file of the invoking host (a profile path the user gave, not a path under the
/// root): opened non-blocking, it must be a regular file of at most `cap` bytes.
pub(crate) fn read_regular(path: &Path, cap: u64) -> io::Result<Vec<u8>> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)?;
    let st = fstat(file.as_fd())?;
    if st.st_mode & libc::S_IFMT != libc::S_IFREG {
        return Err(Refusal::NotRegular(kind_name(st.st_mode)).into());
    }
    let mut bytes = Vec::new();
    file.take(cap + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > cap {
        return Err(Refusal::TooLarge { cap }.into());
    }
    Ok(bytes)
}

/// The components of `host_path` relative to the root; a `..` that would climb above the
/// root (lexically) is refused rather than clamped, so a journal or include naming
/// `/../../tmp/x` is reported instead of silently meaning something else.
pub(crate) fn relative(host_path: &str) -> io::Result<String> {
    let mut depth: usize = 0;
    for c in Path::new(host_path).components() {
        match c {
            Component::Normal(_) => depth += 1,
            Component::ParentDir => {
                depth = depth.checked_sub(1).ok_or(Refusal::Escapes)?;
            }
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    let rel = host_path.trim_start_matches('/');
    Ok(if rel.is_empty() {
        ".".into()
    } else {
        rel.into()
    })
}

/// Opens a directory of the real file system (the root itself) as a handle to resolve in.
pub(crate) fn open_root(dir: &Path) -> io::Result<OwnedFd> {
    let flags = OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC;
    Ok(fcntl::open(dir, flags, Mode::empty())?)
}

/// The mode of a file [`open`] creates (the lock), less the umask: readable by all, and
/// never 0, which would lock out its owner.
const CREATE_MODE: Mode = Mode::from_bits_truncate(0o644);

/// How often [`open_kernel`] asks again when the kernel answers EAGAIN.
const OPENAT2_TRIES: usize = 8;

/// Opens `host_path` under `root` (a handle from [`open_root`]) with `flags`, resolving it as
/// if `root` were `/`.
pub(crate) fn open(
    root: BorrowedFd<'_>,
    host_path: &str,
    flags: libc::c_int,
) -> io::Result<OwnedFd> {
    let rel = relative(host_path)?;
    match open_kernel(root, &rel, flags) {
        // EAGAIN: openat2 with RESOLVE_IN_ROOT gives up when any rename or mount anywhere on
        // the system raced its lookup, which a busy node (or a parallel test run) does all
        // the time; the walk resolves the same way without that condition.
        Err(Errno::ENOSYS | Errno::EPERM | Errno::EAGAIN) => open_walk(root, &rel, flags),
        other => Ok(other?),
    }
}

fn open_kernel(root: BorrowedFd<'_>, rel: &str, flags: libc::c_int) -> nix::Result<OwnedFd> {
    // O_TMPFILE includes O_DIRECTORY's bit: test it whole, or every directory open would
    // carry a mode and the kernel would refuse it (EINVAL).
    let creates = flags & libc::O_CREAT != 0 || flags & libc::O_TMPFILE == libc::O_TMPFILE;
    let how = OpenHow::new()
        .flags(OFlag::from_bits_retain(flags | libc::O_CLOEXEC))
        .mode(if creates { CREATE_MODE } else { Mode::empty() })
        .resolve(ResolveFlag::RESOLVE_IN_ROOT | ResolveFlag::RESOLVE_NO_MAGICLINKS);
    // The kernel answers EAGAIN when a rename raced the resolution; try again a few times.
    let mut answer = fcntl::openat2(root, rel, how);
    for _ in 1..OPENAT2_TRIES {
        if !matches!(answer, Err(Errno::EAGAIN)) {
            break;
        }
        answer = fcntl::openat2(root, rel, how);
    }
    answer
}

fn openat(dir: BorrowedFd<'_>, name: &OsStr, flags: libc::c_int) -> io::Result<OwnedFd> {
    let flags = OFlag::from_bits_retain(flags | libc::O_CLOEXEC);
    Ok(fcntl::openat(dir, name, flags, CREATE_MODE)?)
}

/// `fstat` on an open handle.
pub(crate) fn fstat(fd: BorrowedFd<'_>) -> io::Result<FileStat> {
    Ok(stat::fstat(fd)?)
}

/// `fstatat` without following a final link; `None` when the name does not exist.
pub(crate) fn lstat_at(dir: BorrowedFd<'_>, name: &OsStr) -> io::Result<Option<FileStat>> {
    match stat::fstatat(dir, name, AtFlags::AT_SYMLINK_NOFOLLOW) {
        Ok(st) => Ok(Some(st)),
        Err(Errno::ENOENT | Errno::ENOTDIR) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// The target of the link `name` in `dir`.
pub(crate) fn readlink_at(dir: BorrowedFd<'_>, name: &OsStr) -> io::Result<Vec<u8>> {
    Ok(fcntl::readlinkat(dir, name)?.into_vec())
}

/// What kind of file a `stat` mode is, in words for messages.
pub(crate) fn kind_name(mode: libc::mode_t) -> &'static str {
    match mode & libc::S_IFMT {
        libc::S_IFREG => "regular file",
        libc::S_IFDIR => "directory",
        libc::S_IFIFO => "FIFO",
        libc::S_IFCHR => "character device",
        libc::S_IFBLK => "block device",
        libc::S_IFSOCK => "socket",
        libc::S_IFLNK => "symbolic link",
        _ => "special file",
    }
}

/// The component-by-component equivalent of `openat2(RESOLVE_IN_ROOT)`: every component is
/// opened `O_PATH | O_NOFOLLOW`; a symbolic link is read and its target resolved again from
/// the root (absolute) or the current directory (relative); `..` at the root stays there.
/// The final open adds `O_NOFOLLOW`, so a link swapped in after the check fails with ELOOP
/// instead of being followed.
pub(crate) fn open_walk(
    root: BorrowedFd<'_>,
    rel: &str,
    flags: libc::c_int,
) -> io::Result<OwnedFd> {
    let dup = |fd: BorrowedFd<'_>| fd.try_clone_to_owned();
    let mut stack: Vec<OwnedFd> = vec![dup(root)?];
    let mut todo: std::collections::VecDeque<Vec<u8>> = split(rel.as_bytes());
    let mut links = 0;
    while let Some(name) = todo.pop_front() {
        let cur = stack
            .last()
            .ok_or_else(|| io::Error::from_raw_os_error(libc::EINVAL))?;
        match name.as_slice() {
            b"." => continue,
            b".." => {
                if stack.len() > 1 {
                    stack.pop();
                }
                continue;
            }
            _ => {}
        }
        let last = todo.is_empty();
        let os = OsStr::from_bytes(&name);
        let st = lstat_at(cur.as_fd(), os)?;
        match st {
            None if last && flags & libc::O_CREAT != 0 => {
                return openat(cur.as_fd(), os, flags | libc::O_NOFOLLOW);
            }
            None => return Err(io::Error::from_raw_os_error(libc::ENOENT)),
            Some(st) if st.st_mode & libc::S_IFMT == libc::S_IFLNK => {
                if last && flags & libc::O_NOFOLLOW != 0 {
                    return Err(io::Error::from_raw_os_error(libc::ELOOP));
                }
                links += 1;
                if links > MAX_LINKS {
                    return Err(io::Error::from_raw_os_error(libc::ELOOP));
                }
                let target = readlink_at(cur.as_fd(), os)?;
                if target.first() == Some(&b'/') {
                    stack.truncate(1);
                }
                for part in split(&target).into_iter().rev() {
                    todo.push_front(part);
                }
            }
            Some(_) if last => return openat(cur.as_fd(), os, flags | libc::O_NOFOLLOW),
            Some(_) => {
                let next = openat(
                    cur.as_fd(),
                    os,
                    libc::O_PATH | libc::O_NOFOLLOW | libc::O_DIRECTORY,
                )?;
                stack.push(next);
            }
        }
    }
    // The path named a directory (".", or ended in ".."): open it with the caller's flags.
    let cur = stack
        .last()
        .ok_or_else(|| io::Error::from_raw_os_error(libc::EINVAL))?;
    openat(cur.as_fd(), OsStr::new("."), flags)
}

fn split(path: &[u8]) -> std::collections::VecDeque<Vec<u8>> {
    path.split(|b| *b == b'/')
        .filter(|c| !c.is_empty())
        .map(<[u8]>::to_vec)
        .collect()
}

/// Sixteen hex digits from the kernel's random pool, for temporary names nobody can predict.
pub(crate) fn random_suffix() -> io::Result<String> {
    let mut buf = [0u8; 8];
    getrandom::fill(&mut buf).map_err(io::Error::other)?;
    Ok(buf.iter().map(|b| format!("{b:02x}")).collect())
}

/// The marker in every temporary name gputune makes, so a later run can recognise (and
/// remove) what a killed one left behind.
pub(crate) const TEMP_MARK: &str = ".gputune-";

/// The temporary name for `name`: `.NAME.gputune-<16 hex>.tmp`.
pub(crate) fn temp_name(name: &OsStr) -> io::Result<Vec<u8>> {
    let mut t = b".".to_vec();
    t.extend_from_slice(name.as_bytes());
    t.extend_from_slice(TEMP_MARK.as_bytes());
    t.extend_from_slice(random_suffix()?.as_bytes());
    t.extend_from_slice(b".tmp");
    Ok(t)
}

/// True when `entry` is a temporary file gputune made for `name`: today's
/// `.NAME.gputune-HEX.tmp`, or the `.NAME.PID.tmp` earlier versions made.
pub(crate) fn is_temp_for(entry: &[u8], name: &[u8]) -> bool {
    let Some(rest) = entry.strip_prefix(b".").and_then(|r| r.strip_prefix(name)) else {
        return false;
    };
    let Some(mid) = rest.strip_suffix(b".tmp") else {
        return false;
    };
    if let Some(hex) = mid.strip_prefix(TEMP_MARK.as_bytes()) {
        return !hex.is_empty() && hex.iter().all(u8::is_ascii_hexdigit);
    }
    mid.strip_prefix(b".")
        .is_some_and(|pid| !pid.is_empty() && pid.iter().all(u8::is_ascii_digit))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;
    use std::io::Read;
    use std::os::fd::AsFd;

    fn tree() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let r = dir.path().join("root");
        fs::create_dir_all(r.join("etc/sysctl.d")).unwrap();
        fs::create_dir_all(r.join("usr/share")).unwrap();
        fs::write(r.join("usr/share/x.conf"), "inside\n").unwrap();
        fs::create_dir_all(dir.path().join("usr/share")).unwrap();
        fs::write(dir.path().join("usr/share/x.conf"), "outside\n").unwrap();
        std::os::unix::fs::symlink("/usr/share/x.conf", r.join("etc/sysctl.d/abs.conf")).unwrap();
        std::os::unix::fs::symlink(
            "../../../../../usr/share/x.conf",
            r.join("etc/sysctl.d/rel.conf"),
        )
        .unwrap();
        std::os::unix::fs::symlink("/", r.join("etc/up")).unwrap();
        dir
    }

    fn read_with(
        opener: fn(BorrowedFd<'_>, &str, libc::c_int) -> io::Result<OwnedFd>,
        root: &OwnedFd,
        p: &str,
    ) -> String {
        let fd = opener(root.as_fd(), p, libc::O_RDONLY).unwrap();
        let mut s = String::new();
        fs::File::from(fd).read_to_string(&mut s).unwrap();
        s
    }

    fn walk(root: BorrowedFd<'_>, p: &str, flags: libc::c_int) -> io::Result<OwnedFd> {
        open_walk(root, &relative(p)?, flags)
    }

    #[test]
    fn links_resolve_inside_the_root_with_the_kernel_and_the_walk() {
        let dir = tree();
        let root = open_root(&dir.path().join("root")).unwrap();
        type Opener = for<'a, 'b> fn(BorrowedFd<'a>, &'b str, libc::c_int) -> io::Result<OwnedFd>;
        for opener in [open as Opener, walk as Opener] {
            assert_eq!(
                read_with(opener, &root, "/etc/sysctl.d/abs.conf"),
                "inside\n"
            );
            assert_eq!(
                read_with(opener, &root, "/etc/sysctl.d/rel.conf"),
                "inside\n"
            );
            assert_eq!(
                read_with(opener, &root, "/etc/up/usr/share/x.conf"),
                "inside\n"
            );
            assert!(
                opener(
                    root.as_fd(),
                    "/etc/sysctl.d/abs.conf",
                    libc::O_RDONLY | libc::O_NOFOLLOW
                )
                .is_err()
            );
        }
    }

    #[test]
    fn dot_dot_above_the_root_is_refused() {
        let dir = tree();
        let root = open_root(&dir.path().join("root")).unwrap();
        let err = open(root.as_fd(), "/../usr/share/x.conf", libc::O_RDONLY).unwrap_err();
        assert_eq!(refusal_of(&err), Some(&Refusal::Escapes));
        assert!(open(root.as_fd(), "/etc/../usr/share/x.conf", libc::O_RDONLY).is_ok());
    }

    #[test]
    fn link_loops_end_with_eloop() {
        let dir = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink("b", dir.path().join("a")).unwrap();
        std::os::unix::fs::symlink("a", dir.path().join("b")).unwrap();
        let root = open_root(dir.path()).unwrap();
        let e = walk(root.as_fd(), "/a", libc::O_RDONLY).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ELOOP));
    }

    /// The walk (openat2 missing, blocked or racing) creates only the last component: a
    /// missing directory on the way is ENOENT, never a new regular file of that name.
    #[test]
    fn the_walk_creates_the_final_component_only() {
        let dir = tree();
        let root = open_root(&dir.path().join("root")).unwrap();
        let create = libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL;
        let e = walk(root.as_fd(), "/etc/missing-dir/x.conf", create).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENOENT), "{e}");
        assert!(!dir.path().join("root/etc/missing-dir").exists());
        let e = walk(root.as_fd(), "/etc/missing.conf", libc::O_RDONLY).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENOENT), "{e}");
        assert!(!dir.path().join("root/etc/missing.conf").exists());
        drop(walk(root.as_fd(), "/etc/sysctl.d/new.conf", create).unwrap());
        let st = fs::symlink_metadata(dir.path().join("root/etc/sysctl.d/new.conf")).unwrap();
        assert!(st.is_file());
        // A link at the final component is not followed by a create: the file outside stays.
        let e = walk(
            root.as_fd(),
            "/etc/sysctl.d/abs.conf",
            libc::O_WRONLY | libc::O_CREAT | libc::O_NOFOLLOW,
        )
        .unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ELOOP), "{e}");
        // `..` at the root stays there, and a path naming a directory opens it.
        let up = open_walk(root.as_fd(), "../..", libc::O_RDONLY | libc::O_DIRECTORY).unwrap();
        let (a, b) = (fstat(up.as_fd()).unwrap(), fstat(root.as_fd()).unwrap());
        assert_eq!((a.st_dev, a.st_ino), (b.st_dev, b.st_ino));
        assert_eq!(
            read_with(walk, &root, "/etc/sysctl.d/../../usr/./share/x.conf"),
            "inside\n"
        );
    }

    /// The longest chain the kernel follows (40 links) resolves; one more is ELOOP.
    #[test]
    fn the_walk_follows_at_most_forty_links() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("f"), "end\n").unwrap();
        std::os::unix::fs::symlink("f", dir.path().join("l0")).unwrap();
        for i in 1..=MAX_LINKS {
            std::os::unix::fs::symlink(format!("l{}", i - 1), dir.path().join(format!("l{i}")))
                .unwrap();
        }
        let root = open_root(dir.path()).unwrap();
        let last = format!("/l{}", MAX_LINKS - 1);
        assert_eq!(read_with(walk, &root, &last), "end\n");
        let e = walk(root.as_fd(), &format!("/l{MAX_LINKS}"), libc::O_RDONLY).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ELOOP));
    }

    /// A file of the invoking host is read whole up to the cap, refused above it (never
    /// truncated), and must be a regular file.
    #[test]
    fn read_regular_refuses_what_is_over_the_cap() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("p.toml");
        fs::write(&p, "0123456789").unwrap();
        assert_eq!(read_regular(&p, 10).unwrap(), b"0123456789");
        let e = read_regular(&p, 9).unwrap_err();
        assert_eq!(refusal_of(&e), Some(&Refusal::TooLarge { cap: 9 }));
        let e = read_regular(dir.path(), 10).unwrap_err();
        assert_eq!(refusal_of(&e), Some(&Refusal::NotRegular("directory")));
    }

    #[test]
    fn kinds_are_named() {
        let names: Vec<&str> = [
            libc::S_IFREG,
            libc::S_IFDIR,
            libc::S_IFIFO,
            libc::S_IFCHR,
            libc::S_IFBLK,
            libc::S_IFSOCK,
            libc::S_IFLNK,
            0,
        ]
        .into_iter()
        .map(kind_name)
        .collect();
        assert_eq!(
            names,
            [
                "regular file",
                "directory",
                "FIFO",
                "character device",
                "block device",
                "socket",
                "symbolic link",
                "special file"
            ]
        );
    }

    #[test]
    fn temporary_names_are_unpredictable_and_recognised() {
        let a = temp_name(OsStr::new("90-gputune.conf")).unwrap();
        let b = temp_name(OsStr::new("90-gputune.conf")).unwrap();
        assert_ne!(a, b);
        assert!(is_temp_for(&a, b"90-gputune.conf"));
        assert!(is_temp_for(b".nccl.conf.1234.tmp", b"nccl.conf"));
        assert!(!is_temp_for(b".nccl.conf.12x4.tmp", b"nccl.conf"));
        assert!(!is_temp_for(b"nccl.conf", b"nccl.conf"));
        assert!(!is_temp_for(b".other.1.tmp", b"nccl.conf"));
        // Someone else's file that only looks like one is never removed.
        for theirs in [
            &b".nccl.conf.gputune-.tmp"[..],
            b".nccl.conf.gputune-notes.tmp",
            b".nccl.conf..tmp",
        ] {
            assert!(
                !is_temp_for(theirs, b"nccl.conf"),
                "{}",
                String::from_utf8_lossy(theirs)
            );
        }
    }

    /// `--root` must name a directory: a file is refused when the root is opened, not
    /// later as a puzzling "not a directory" on every path under it.
    #[test]
    fn a_root_that_is_not_a_directory_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("image.tar");
        fs::write(&file, "x").unwrap();
        let e = open_root(&file).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENOTDIR), "{e}");
    }

    /// A file the kernel creates under the root (the lock) is its owner's to read and write
    /// and nobody's to run, and an exclusive create happens once.
    #[test]
    fn files_created_through_the_kernel_get_a_usable_mode() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tree();
        let root = open_root(&dir.path().join("root")).unwrap();
        let create = libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL;
        drop(open(root.as_fd(), "/etc/gputune.lock", create).unwrap());
        let mode = fs::metadata(dir.path().join("root/etc/gputune.lock"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o700, 0o600, "{mode:o}");
        assert_eq!(mode & 0o111, 0, "{mode:o}");
        let e = open(root.as_fd(), "/etc/gputune.lock", create).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EEXIST), "{e}");
    }
}
