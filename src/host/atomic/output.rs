//! `--output FILE` for every command that writes a report (audit, fleet, bench): what lies at
//! the name decides whether the report replaces it or is written into it.
//!
//! The directory a report goes to may belong to someone else (node_exporter's textfile
//! directory owned by its service user), who can plant a link or a FIFO at the name before
//! root's cron job runs: a link to `/dev/kmsg` would put the report in the kernel log, a FIFO
//! would block the job forever. So a link or special file is followed or written into only
//! where nobody but root and the caller could have put it; anywhere else it is replaced,
//! atomically, like a regular file. `--output /dev/stdout` and `/dev/null` still work: `/dev`
//! and `/proc/self/fd` are root's and the caller's.

use std::ffi::OsString;
use std::fs::File;
use std::io::{self, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStringExt;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use nix::fcntl::{self, OFlag};
use nix::sys::stat::{FileStat, Mode};

use super::{open_dir, write_at};
use crate::host::confine::{self, Refusal};

/// How many links one `--output` path may lead through (the kernel's MAXSYMLINKS).
const MAX_LINKS: usize = 40;

/// Where the report goes.
enum Dest {
    /// A pipe, terminal, device or `/proc/self/fd` entry the caller named: written into.
    Into(File),
    /// `name` in `dir`, replaced atomically by [`write_at`].
    Replace { dir: OwnedFd, name: OsString },
}

/// Writes `--output`. A missing name, a regular file, and a link or special file someone
/// else could have put there are replaced atomically by [`write_at`] (node_exporter's
/// textfile collector relies on it); missing directories on the way are created (0755
/// whatever the umask, as `mkdir -p` with the usual umask makes them). A link that only root
/// or the caller could have made is followed (to its file, which is replaced, and the link
/// kept); a pipe, terminal or character device of root's or the caller's in such a directory
/// is written into, never replaced (`--output /dev/null` as root must not turn the node's
/// `/dev/null` into a regular file). A directory or block device is refused.
pub(crate) fn write_output(path: &Path, bytes: &[u8]) -> io::Result<()> {
    match resolve(path)? {
        Dest::Into(mut file) => file.write_all(bytes).and_then(|()| file.flush()),
        Dest::Replace { dir, name } => write_at(dir.as_fd(), &name, bytes),
    }
}

fn resolve(named: &Path) -> io::Result<Dest> {
    let me = nix::unistd::geteuid().as_raw();
    // `./` before a relative name, so every path names its directory (joining an absolute
    // path gives it back; a relative link's target is joined to a directory so named).
    let mut path = Path::new(".").join(named);
    for _ in 0..=MAX_LINKS {
        let (Some(name), Some(parent)) = (path.file_name(), path.parent()) else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "the path names no file",
            ));
        };
        let (name, parent) = (name.to_os_string(), parent.to_path_buf());
        let dir = open_or_create_dir(&parent)?;
        let Some(st) = confine::lstat_at(dir.as_fd(), &name)? else {
            return Ok(Dest::Replace { dir, name });
        };
        let guarded = guarded(&confine::fstat(dir.as_fd())?, &st, me);
        match st.st_mode & libc::S_IFMT {
            libc::S_IFREG => return Ok(Dest::Replace { dir, name }),
            libc::S_IFDIR => return Err(Refusal::NotRegular("directory").into()),
            libc::S_IFLNK | libc::S_IFIFO | libc::S_IFCHR | libc::S_IFSOCK if !guarded => {
                return Ok(Dest::Replace { dir, name });
            }
            libc::S_IFLNK if on_procfs(&dir) => {
                // `/proc/self/fd/N` (where `/dev/stdout` leads): a handle of this process,
                // not a path to read; opened as the process's own.
                return open_into(&path).map(Dest::Into);
            }
            libc::S_IFLNK => {
                let target = PathBuf::from(OsString::from_vec(confine::readlink_at(
                    dir.as_fd(),
                    &name,
                )?));
                path = if target.is_absolute() {
                    target
                } else {
                    parent.join(target)
                };
            }
            libc::S_IFIFO | libc::S_IFCHR | libc::S_IFSOCK => {
                let fd = fcntl::openat(
                    dir.as_fd(),
                    name.as_os_str(),
                    OFlag::O_WRONLY | OFlag::O_NOFOLLOW | OFlag::O_NOCTTY | OFlag::O_CLOEXEC,
                    Mode::empty(),
                )?;
                return Ok(Dest::Into(File::from(fd)));
            }
            kind => {
                return Err(Refusal::NotRegular(confine::kind_name(kind)).into());
            }
        }
    }
    Err(io::Error::from_raw_os_error(libc::ELOOP))
}

/// True when nobody but root and the caller could have put `entry` in the directory `dir`:
/// the directory is theirs and nobody else may write it, or it is sticky (as `/tmp` is) and
/// the entry is theirs (others cannot rename or remove it there). Links cannot be changed,
/// only replaced, so who could replace one is who decides where it leads.
fn guarded(dir: &FileStat, entry: &FileStat, me: u32) -> bool {
    let ours = |uid: u32| uid == 0 || uid == me;
    if !ours(dir.st_uid) {
        return false;
    }
    let shared = dir.st_mode & 0o022 != 0;
    !shared || (dir.st_mode & libc::S_ISVTX != 0 && ours(entry.st_uid))
}

fn on_procfs(dir: &OwnedFd) -> bool {
    nix::sys::statfs::fstatfs(dir)
        .is_ok_and(|fs| fs.filesystem_type() == nix::sys::statfs::PROC_SUPER_MAGIC)
}

/// Opens what the caller named for writing into it; appending, so `--output /dev/stdout`
/// with standard output on a file adds to it as the shell's redirection would.
fn open_into(path: &Path) -> io::Result<File> {
    std::fs::OpenOptions::new()
        .append(true)
        .custom_flags(libc::O_NOCTTY)
        .open(path)
}

/// Opens `dir`, creating it and its missing parents first (each 0755 whatever the umask), so
/// `--output /var/lib/gputune/audit.json` works on a host where the directory is not made yet.
fn open_or_create_dir(dir: &Path) -> io::Result<OwnedFd> {
    match open_dir(dir) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        other => return other,
    }
    let mut missing = Vec::new();
    let mut cur = dir;
    while let Err(e) = std::fs::symlink_metadata(cur) {
        if e.kind() != io::ErrorKind::NotFound {
            return Err(e);
        }
        missing.push(cur.to_path_buf());
        // `dir` starts at `/` or `.` (see `resolve`), which always exist.
        let Some(parent) = cur.parent() else { break };
        cur = parent;
    }
    for d in missing.iter().rev() {
        let made = match std::fs::create_dir(d) {
            Ok(()) => true,
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => false,
            Err(e) => {
                return Err(io::Error::new(
                    e.kind(),
                    format!("cannot create the directory {}: {e}", d.display()),
                ));
            }
        };
        if made {
            std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755))?;
        }
    }
    open_dir(dir)
}

#[cfg(test)]
mod tests {
    use super::*;
    use nix::sys::stat;
    use nix::unistd::{self, Uid};
    use std::fs;
    use std::io::Read;
    use std::os::unix::fs::FileTypeExt;

    const NOBODY: u32 = 65534;

    /// A directory of `nobody` (node_exporter's textfile directory, as its service user
    /// keeps it), in a temp dir of root's.
    fn theirs(top: &Path) -> PathBuf {
        let dir = top.join("textfile");
        fs::create_dir(&dir).unwrap();
        unistd::chown(&dir, Some(Uid::from_raw(NOBODY)), None).expect("chown needs root");
        dir
    }

    fn lchown_nobody(path: &Path) {
        std::os::unix::fs::lchown(path, Some(NOBODY), None).unwrap();
    }

    /// Our own null device, so nothing is ever written into a device of the host.
    fn null_device(path: &Path) {
        let made = stat::mknod(
            path,
            stat::SFlag::S_IFCHR,
            Mode::from_bits_truncate(0o666),
            stat::makedev(1, 3),
        );
        assert_eq!(made, Ok(()), "mknod needs root");
    }

    fn is_regular_with(path: &Path, text: &str) -> bool {
        fs::symlink_metadata(path).unwrap().is_file() && fs::read_to_string(path).unwrap() == text
    }

    /// The test's end of a FIFO, opened for reading and writing (Linux allows it on a FIFO)
    /// and non-blocking: whoever opens the FIFO then never waits for a peer, and reading never
    /// waits for data, so a write that wrongly goes into the FIFO shows up here instead of
    /// hanging the test.
    struct Listener(fs::File);

    impl Listener {
        fn on(fifo: &Path) -> Self {
            let file = fs::OpenOptions::new()
                .read(true)
                .write(true)
                .custom_flags(libc::O_NONBLOCK)
                .open(fifo)
                .unwrap();
            Self(file)
        }

        /// What was written into the FIFO since the last call.
        fn received(&mut self) -> String {
            let mut got = Vec::new();
            let mut buf = [0; 4096];
            loop {
                match self.0.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => got.extend_from_slice(&buf[..n]),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) => panic!("reading the FIFO: {e}"),
                }
            }
            String::from_utf8(got).unwrap()
        }
    }

    #[test]
    fn links_planted_in_another_users_directory_are_replaced_not_followed() {
        let top = tempfile::tempdir().unwrap();
        let dir = theirs(top.path());
        let victim = top.path().join("victim");
        fs::write(&victim, "keep\n").unwrap();
        let kmsg = top.path().join("kmsg");
        null_device(&kmsg);
        let fifo = top.path().join("fifo");
        unistd::mkfifo(&fifo, Mode::from_bits_truncate(0o666)).unwrap();
        let mut listener = Listener::on(&fifo);
        for target in [&victim, &kmsg, &fifo] {
            let out = dir.join("gputune.prom");
            let _ = fs::remove_file(&out);
            std::os::unix::fs::symlink(target, &out).unwrap();
            lchown_nobody(&out);
            write_output(&out, b"report\n").unwrap();
            assert!(is_regular_with(&out, "report\n"), "{}", target.display());
        }
        assert_eq!(fs::read_to_string(&victim).unwrap(), "keep\n");
        assert_eq!(listener.received(), "");
        assert!(
            fs::symlink_metadata(&kmsg)
                .unwrap()
                .file_type()
                .is_char_device()
        );
        assert!(fs::symlink_metadata(&fifo).unwrap().file_type().is_fifo());
    }

    #[test]
    fn a_fifo_planted_in_another_users_directory_is_replaced() {
        let top = tempfile::tempdir().unwrap();
        let dir = theirs(top.path());
        let out = dir.join("gputune.prom");
        unistd::mkfifo(&out, Mode::from_bits_truncate(0o666)).unwrap();
        std::os::unix::fs::lchown(&out, Some(NOBODY), None).unwrap();
        let mut listener = Listener::on(&out);
        write_output(&out, b"report\n").unwrap();
        assert!(is_regular_with(&out, "report\n"));
        assert_eq!(listener.received(), "");
    }

    #[test]
    fn a_link_of_ours_into_their_directory_stops_at_their_link() {
        let top = tempfile::tempdir().unwrap();
        fs::set_permissions(top.path(), fs::Permissions::from_mode(0o755)).unwrap();
        let dir = theirs(top.path());
        let kmsg = top.path().join("kmsg");
        null_device(&kmsg);
        let planted = dir.join("gputune.prom");
        std::os::unix::fs::symlink(&kmsg, &planted).unwrap();
        lchown_nobody(&planted);
        let mine = top.path().join("mine.prom");
        std::os::unix::fs::symlink(&planted, &mine).unwrap();
        write_output(&mine, b"report\n").unwrap();
        assert!(
            fs::symlink_metadata(&mine)
                .unwrap()
                .file_type()
                .is_symlink()
        );
        assert!(is_regular_with(&planted, "report\n"));
    }

    #[test]
    fn links_of_our_own_are_followed_to_a_file_that_is_replaced() {
        let top = tempfile::tempdir().unwrap();
        fs::set_permissions(top.path(), fs::Permissions::from_mode(0o755)).unwrap();
        let file = top.path().join("real.prom");
        fs::write(&file, "old\n").unwrap();
        let link = top.path().join("gputune.prom");
        std::os::unix::fs::symlink("real.prom", &link).unwrap();
        write_output(&link, b"new\n").unwrap();
        assert!(
            fs::symlink_metadata(&link)
                .unwrap()
                .file_type()
                .is_symlink()
        );
        assert!(is_regular_with(&file, "new\n"));
    }

    #[test]
    fn a_link_to_a_handle_of_this_process_writes_into_what_it_has_open() {
        // As `--output /dev/stdout` with standard output redirected to a file (`> f`): the
        // link must stay, the file gets the report.
        let top = tempfile::tempdir().unwrap();
        fs::set_permissions(top.path(), fs::Permissions::from_mode(0o755)).unwrap();
        let file = top.path().join("redirected");
        let mut handle = fs::File::create(&file).unwrap();
        handle.write_all(b"before\n").unwrap();
        let link = top.path().join("stdout");
        use std::os::fd::AsRawFd;
        std::os::unix::fs::symlink(format!("/proc/self/fd/{}", handle.as_raw_fd()), &link).unwrap();
        write_output(&link, b"report\n").unwrap();
        assert!(
            fs::symlink_metadata(&link)
                .unwrap()
                .file_type()
                .is_symlink()
        );
        // Added after what the handle wrote, as `>>` would: not a new file in its place.
        assert_eq!(fs::read_to_string(&file).unwrap(), "before\nreport\n");
    }

    #[test]
    fn a_fifo_of_ours_is_written_into() {
        let top = tempfile::tempdir().unwrap();
        fs::set_permissions(top.path(), fs::Permissions::from_mode(0o755)).unwrap();
        let fifo = top.path().join("fifo");
        unistd::mkfifo(&fifo, Mode::from_bits_truncate(0o600)).unwrap();
        let link = top.path().join("out");
        std::os::unix::fs::symlink(&fifo, &link).unwrap();
        let mut listener = Listener::on(&fifo);
        for path in [&fifo, &link] {
            write_output(path, b"through\n").unwrap();
            assert_eq!(listener.received(), "through\n", "{}", path.display());
        }
        assert!(fs::symlink_metadata(&fifo).unwrap().file_type().is_fifo());
    }

    #[test]
    fn missing_directories_are_created() {
        let top = tempfile::tempdir().unwrap();
        let out = top.path().join("var/lib/gputune/audit.json");
        write_output(&out, b"{}\n").unwrap();
        assert!(is_regular_with(&out, "{}\n"));
        for d in ["var", "var/lib", "var/lib/gputune"] {
            let mode = fs::metadata(top.path().join(d))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o7777, 0o755, "{d}");
        }
        // `..` after a directory it makes: the directory exists when `..` is reached.
        let out = top.path().join("new/../other/x.json");
        write_output(&out, b"x\n").unwrap();
        assert!(is_regular_with(&top.path().join("other/x.json"), "x\n"));
        // A file where a directory should be is still an error, naming nothing made.
        fs::write(top.path().join("flat"), "").unwrap();
        assert!(write_output(&top.path().join("flat/x.json"), b"x").is_err());
        // A directory that cannot be made is named.
        std::os::unix::fs::symlink(top.path().join("nowhere"), top.path().join("dangling"))
            .unwrap();
        let err = write_output(&top.path().join("dangling/sub/x.json"), b"x").unwrap_err();
        assert!(
            err.to_string().contains("cannot create the directory")
                && err.to_string().contains("dangling/sub"),
            "{err}"
        );
    }

    #[test]
    fn an_entry_is_trusted_only_where_nobody_else_could_have_put_it() {
        const ME: u32 = 1000;
        const OTHER: u32 = 65534;
        let top = tempfile::tempdir().unwrap();
        let base = stat::stat(top.path()).unwrap();
        let with = |uid: u32, mode: u32| {
            let mut st = base;
            st.st_uid = uid;
            st.st_mode = mode;
            st
        };
        let dir = |uid: u32, perm: u32| with(uid, libc::S_IFDIR | perm);
        let entry = |uid: u32| with(uid, libc::S_IFLNK | 0o777);
        // (directory's owner, its permissions, entry's owner, trusted)
        let cases = [
            (0, 0o755, OTHER, true),
            (ME, 0o700, OTHER, true),
            (OTHER, 0o755, ME, false),
            (0, 0o775, ME, false),
            (0, 0o757, ME, false),
            (0, 0o1777, 0, true),
            (0, 0o1777, ME, true),
            (0, 0o1777, OTHER, false),
            (OTHER, 0o1777, ME, false),
        ];
        for (owner, perm, planted_by, trusted) in cases {
            assert_eq!(
                guarded(&dir(owner, perm), &entry(planted_by), ME),
                trusted,
                "directory {owner} {perm:o}, entry {planted_by}"
            );
        }
    }
}
