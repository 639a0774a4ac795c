//! Writing a file so readers see the old content or the new, never a half-written one, and
//! so nobody who can write the directory can redirect the write.
//!
//! The temporary file is created beside the target with `O_CREAT | O_EXCL | O_NOFOLLOW` under
//! a name with 64 random bits ([`confine::temp_name`]): a link planted for it is never
//! followed and the name cannot be guessed in advance. Everything after the directory is
//! opened works on that directory's handle (`*at` calls), so renaming a directory under us
//! cannot move the write elsewhere.

use std::ffi::OsStr;
use std::fs::File;
use std::io::{self, Write};
use std::os::fd::{BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use nix::dir::Dir;
use nix::errno::Errno;
use nix::fcntl::{self, OFlag};
use nix::sys::stat::Mode;
use nix::unistd::{self, UnlinkatFlags};

use super::confine::{self, Refusal};

mod output;

pub(crate) use output::write_output;

/// Removes `name` from `dir` (not a directory); a missing one is fine.
pub(crate) fn unlink_at(dir: BorrowedFd<'_>, name: &[u8]) -> io::Result<()> {
    match unistd::unlinkat(dir, name, UnlinkatFlags::NoRemoveDir) {
        Ok(()) | Err(Errno::ENOENT | Errno::ENOTDIR) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Removes the empty directory `name` from `dir`; a missing one is fine, a non-empty one
/// is an error (`ENOTEMPTY`) the caller may ignore.
pub(crate) fn rmdir_at(dir: BorrowedFd<'_>, name: &[u8]) -> io::Result<()> {
    match unistd::unlinkat(dir, name, UnlinkatFlags::RemoveDir) {
        Ok(()) | Err(Errno::ENOENT) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

fn rename_at(dir: BorrowedFd<'_>, from: &[u8], to: &[u8]) -> io::Result<()> {
    Ok(fcntl::renameat(dir, from, dir, to)?)
}

/// Writes `bytes` as `name` in the directory `dir`: unpredictable temporary file, fsync,
/// rename over `name`, fsync of the directory. The file keeps the mode of the regular file
/// it replaces, else gets 0644 whatever the umask (`/etc/nccl.conf` and limits.d are read
/// by unprivileged users). `dir` must be opened for reading (not `O_PATH`) so it can be
/// fsynced.
pub(crate) fn write_at(dir: BorrowedFd<'_>, name: &OsStr, bytes: &[u8]) -> io::Result<()> {
    let mode = match confine::lstat_at(dir, name)? {
        Some(st) if st.st_mode & libc::S_IFMT == libc::S_IFREG => st.st_mode & 0o7777,
        _ => 0o644,
    };
    let tmp = confine::temp_name(name)?;
    let create =
        OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    let mut file = File::from(fcntl::openat(
        dir,
        &tmp[..],
        create,
        Mode::S_IRUSR | Mode::S_IWUSR,
    )?);
    let result = (|| {
        file.set_permissions(std::fs::Permissions::from_mode(mode))?;
        file.write_all(bytes)?;
        file.sync_all()?;
        rename_at(dir, &tmp, name.as_bytes())?;
        fsync(dir)
    })();
    if result.is_err() {
        let _ = unlink_at(dir, &tmp);
    }
    result
}

/// fsync of a directory handle (so a rename or unlink in it survives a crash).
pub(crate) fn fsync(dir: BorrowedFd<'_>) -> io::Result<()> {
    Ok(unistd::fsync(dir)?)
}

/// Makes `name` in `dir` a symbolic link to `dest` through an unpredictable temporary link
/// and a rename, then fsyncs the directory.
pub(crate) fn symlink_at(dir: BorrowedFd<'_>, name: &OsStr, dest: &str) -> io::Result<()> {
    let tmp = confine::temp_name(name)?;
    unistd::symlinkat(dest, dir, &tmp[..])?;
    if let Err(e) = rename_at(dir, &tmp, name.as_bytes()) {
        let _ = unlink_at(dir, &tmp);
        return Err(e);
    }
    fsync(dir)
}

/// Removes the temporary files gputune left for `name` in `dir` (a run killed between
/// create and rename); only regular files and links are touched. Returns how many.
pub(crate) fn remove_stale_temps(dir: BorrowedFd<'_>, name: &OsStr) -> io::Result<usize> {
    let mut removed = 0;
    for entry in list_fd(dir)? {
        if !confine::is_temp_for(&entry, name.as_bytes()) {
            continue;
        }
        let kind =
            confine::lstat_at(dir, OsStr::from_bytes(&entry))?.map(|st| st.st_mode & libc::S_IFMT);
        if matches!(kind, Some(libc::S_IFREG) | Some(libc::S_IFLNK)) {
            unlink_at(dir, &entry)?;
            removed += 1;
        }
    }
    if removed > 0 {
        fsync(dir)?;
    }
    Ok(removed)
}

/// The names in a directory handle (not `.` and `..`), unsorted.
pub(crate) fn list_fd(dir: BorrowedFd<'_>) -> io::Result<Vec<Vec<u8>>> {
    // A stream of its own, opened for reading (an O_PATH handle cannot be read).
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC;
    let mut stream = Dir::openat(dir, ".", flags, Mode::empty())?;
    let mut names = Vec::new();
    for entry in stream.iter() {
        let name = entry?.file_name().to_bytes().to_vec();
        if name == b"." || name == b".." {
            continue;
        }
        if names.len() >= confine::MAX_DIR_ENTRIES {
            return Err(Refusal::TooMany {
                cap: confine::MAX_DIR_ENTRIES,
            }
            .into());
        }
        names.push(name);
    }
    Ok(names)
}

/// Opens a real directory for `*at` calls and fsync.
pub(crate) fn open_dir(dir: &Path) -> io::Result<OwnedFd> {
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC;
    Ok(fcntl::open(dir, flags, Mode::empty())?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use nix::sys::stat;
    use std::fs;
    use std::os::fd::AsFd;
    use std::os::unix::fs::FileTypeExt;

    #[test]
    fn replaces_content_and_leaves_no_temp_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("gputune.prom");
        write_output(&path, b"one\n").unwrap();
        write_output(&path, b"two\n").unwrap();
        assert_eq!(fs::read_to_string(&path).unwrap(), "two\n");
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);
        assert_eq!(
            fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o644
        );
    }

    #[test]
    fn planted_pid_links_are_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        fs::write(&victim, "keep\n").unwrap();
        let out = dir.path().join("out");
        fs::create_dir(&out).unwrap();
        let pid = std::process::id();
        for p in pid.saturating_sub(5)..pid + 5 {
            std::os::unix::fs::symlink(&victim, out.join(format!(".gputune.prom.{p}.tmp")))
                .unwrap();
        }
        write_output(&out.join("gputune.prom"), b"x\n").unwrap();
        assert_eq!(fs::read_to_string(&victim).unwrap(), "keep\n");
        assert_eq!(fs::read_to_string(out.join("gputune.prom")).unwrap(), "x\n");
    }

    #[test]
    fn special_files_are_written_into_or_refused_never_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        assert_eq!(
            unistd::mkfifo(&fifo, Mode::from_bits_truncate(0o600)),
            Ok(())
        );
        let reader = {
            let fifo = fifo.clone();
            std::thread::spawn(move || fs::read_to_string(fifo).unwrap())
        };
        write_output(&fifo, b"through\n").unwrap();
        assert_eq!(reader.join().unwrap(), "through\n");
        assert!(fs::symlink_metadata(&fifo).unwrap().file_type().is_fifo());

        // Our own null device, so a regression cannot replace the host's /dev/null.
        let null = dir.path().join("null");
        // makedev(1, 3) is the null device.
        let made = stat::mknod(
            &null,
            stat::SFlag::S_IFCHR,
            Mode::from_bits_truncate(0o666),
            stat::makedev(1, 3),
        );
        assert_eq!(made, Ok(()), "mknod needs root");
        write_output(&null, b"x").unwrap();
        assert!(
            fs::symlink_metadata(&null)
                .unwrap()
                .file_type()
                .is_char_device()
        );

        let err = write_output(dir.path(), b"x").unwrap_err();
        assert!(confine::refusal_of(&err).is_some());
    }

    #[test]
    fn stale_temporary_files_are_recognised_and_removed() {
        let dir = tempfile::tempdir().unwrap();
        for n in [
            ".nccl.conf.77.tmp",
            ".nccl.conf.gputune-0123456789abcdef.tmp",
            ".nccl.conf.x.tmp",
            "nccl.conf",
        ] {
            fs::write(dir.path().join(n), "").unwrap();
        }
        let fd = open_dir(dir.path()).unwrap();
        assert_eq!(
            remove_stale_temps(fd.as_fd(), OsStr::new("nccl.conf")).unwrap(),
            2
        );
        let mut left: Vec<_> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        left.sort();
        assert_eq!(left, [".nccl.conf.x.tmp", "nccl.conf"]);
    }
}
