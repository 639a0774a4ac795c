//! The host root: every read and write of `/proc`, `/sys`, `/etc`, `/dev`, `/run` and
//! `/var/lib` goes through one [`Root`], so `--root DIR` and tests see the same code paths
//! as a live node.

pub(crate) mod atomic;
pub(crate) mod bind;
pub(crate) mod clock;
pub(crate) mod cmdline;
pub(crate) mod confine;
pub mod cpulist;
pub(crate) mod cudnn;
pub mod ethtool;
pub(crate) mod exec;
pub(crate) mod kmsg;
pub mod ldcache;
pub(crate) mod libsearch;
pub mod libversion;
pub mod mounts;
pub(crate) mod nccl;
pub(crate) mod net;
pub mod sysctl;
pub(crate) mod torch;
pub(crate) mod version;

use std::ffi::OsStr;
use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

pub(crate) use confine::{READ_CAP, Refusal};

/// An I/O failure on a host path, carrying the path it happened on.
#[derive(Debug, thiserror::Error)]
#[error("{}: {source}", path.display())]
pub struct HostError {
    pub path: PathBuf,
    #[source]
    pub source: io::Error,
}

impl HostError {
    pub(crate) fn new(path: impl Into<PathBuf>, source: io::Error) -> Self {
        HostError {
            path: path.into(),
            source,
        }
    }

    /// Why gputune refused the path (it escapes the root, is not a regular file, is too
    /// large, or a write would follow a link), when that is the failure.
    #[cfg(test)]
    pub(crate) fn refusal(&self) -> Option<&Refusal> {
        confine::refusal_of(&self.source)
    }
}

/// Where the node's file system starts: `/` on a live node, a fixture or a mounted image
/// otherwise.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Root {
    dir: PathBuf,
}

impl Root {
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Root { dir: dir.into() }
    }

    /// The running node itself.
    pub fn live() -> Self {
        Root::new("/")
    }

    /// True when this root is the running node, so live-only facts (syscalls, netlink,
    /// loaded libraries) describe the same machine as the files.
    pub(crate) fn is_live(&self) -> bool {
        self.dir == Path::new("/")
    }

    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    /// The real path of a host path such as `/proc/swaps` under this root.
    pub fn path(&self, host_path: &str) -> PathBuf {
        self.dir.join(host_path.trim_start_matches('/'))
    }

    /// Opens a host path resolved inside this root (absolute links stay inside it, `..`
    /// never climbs above it, magic `/proc` links are not followed); see [`confine`].
    pub(crate) fn open(&self, host_path: &str, flags: libc::c_int) -> Result<OwnedFd, HostError> {
        let err = |e| HostError::new(self.path(host_path), e);
        let root = confine::open_root(&self.dir).map_err(err)?;
        confine::open(root.as_fd(), host_path, flags).map_err(err)
    }

    /// Reads a file of at most `cap` bytes that must be a regular file (the kernel's
    /// `/proc` and `/sys` attributes are); a missing file is `Ok(None)`. It is opened
    /// non-blocking, so a FIFO planted where a configuration file belongs is refused
    /// instead of hanging the audit, and `/dev/zero` cannot grow memory without bound.
    pub(crate) fn read_capped(
        &self,
        host_path: &str,
        cap: u64,
    ) -> Result<Option<Vec<u8>>, HostError> {
        let flags = libc::O_RDONLY | libc::O_NONBLOCK | libc::O_NOCTTY;
        let fd = match self.open(host_path, flags) {
            Ok(fd) => fd,
            Err(e) if e.source.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        let err = |e| HostError::new(self.path(host_path), e);
        let st = confine::fstat(fd.as_fd()).map_err(err)?;
        if st.st_mode & libc::S_IFMT != libc::S_IFREG {
            return Err(err(
                Refusal::NotRegular(confine::kind_name(st.st_mode)).into()
            ));
        }
        let mut bytes = Vec::new();
        File::from(fd)
            .take(cap + 1)
            .read_to_end(&mut bytes)
            .map_err(err)?;
        if bytes.len() as u64 > cap {
            return Err(err(Refusal::TooLarge { cap }.into()));
        }
        Ok(Some(bytes))
    }

    /// Reads a whole text file (up to [`READ_CAP`]); a missing file is `Ok(None)`, not an
    /// error.
    pub(crate) fn read_optional(&self, host_path: &str) -> Result<Option<String>, HostError> {
        Ok(self
            .read_optional_bytes(host_path)?
            .map(|bytes| String::from_utf8_lossy(&bytes).into_owned()))
    }

    /// Reads a whole binary file (up to [`READ_CAP`]); a missing file is `Ok(None)`.
    pub(crate) fn read_optional_bytes(
        &self,
        host_path: &str,
    ) -> Result<Option<Vec<u8>>, HostError> {
        self.read_capped(host_path, READ_CAP)
    }

    /// The host name as the kernel has it (the UTS namespace's), `localhost` when it has
    /// none or cannot be read.
    pub(crate) fn hostname(&self) -> String {
        self.read_optional("/proc/sys/kernel/hostname")
            .ok()
            .flatten()
            .map(|h| h.trim().to_string())
            .filter(|h| !h.is_empty())
            .unwrap_or_else(|| "localhost".to_string())
    }

    /// Reads a whole text file that must exist.
    pub(crate) fn read(&self, host_path: &str) -> Result<String, HostError> {
        self.read_optional(host_path)?.ok_or_else(|| {
            HostError::new(
                self.path(host_path),
                io::Error::from(io::ErrorKind::NotFound),
            )
        })
    }

    /// Names in a directory, sorted; a missing directory is `Ok(None)`.
    pub(crate) fn list_dir(&self, host_path: &str) -> Result<Option<Vec<String>>, HostError> {
        let fd = match self.open(host_path, libc::O_RDONLY | libc::O_DIRECTORY) {
            Ok(fd) => fd,
            Err(e) if e.source.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        let mut names: Vec<String> = atomic::list_fd(fd.as_fd())
            .map_err(|e| HostError::new(self.path(host_path), e))?
            .iter()
            .map(|n| String::from_utf8_lossy(n).into_owned())
            .collect();
        names.sort();
        Ok(Some(names))
    }

    /// True when the host path exists inside the root (following links, as sysfs users
    /// expect, but never out of the root).
    pub(crate) fn exists(&self, host_path: &str) -> bool {
        self.open(host_path, libc::O_PATH).is_ok()
    }

    /// True when the host path is a regular file inside the root (links followed inside).
    pub(crate) fn is_file(&self, host_path: &str) -> bool {
        self.kind_is(host_path, |t| t.is_file())
    }

    /// True when the host path is a directory inside the root (links followed inside).
    pub(crate) fn is_dir(&self, host_path: &str) -> bool {
        self.kind_is(host_path, |t| t.is_dir())
    }

    fn kind_is(&self, host_path: &str, test: impl Fn(std::fs::FileType) -> bool) -> bool {
        self.open(host_path, libc::O_PATH)
            .ok()
            .and_then(|fd| File::from(fd).metadata().ok())
            .is_some_and(|m| test(m.file_type()))
    }

    /// The real path (under the root, like `fs::canonicalize`) that `host_path` resolves to
    /// inside the root; `None` when it does not exist. sysfs readers use it to follow
    /// `device` links without leaving an image.
    pub(crate) fn canonicalize(&self, host_path: &str) -> Option<PathBuf> {
        use std::os::fd::AsRawFd;
        let fd = self.open(host_path, libc::O_PATH).ok()?;
        std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd())).ok()
    }

    /// The directory holding `host_path`, opened inside the root for `*at` calls, and the
    /// final name. The name itself is never resolved, so writes and removals act on it and
    /// not on what a link there points to.
    fn parent(&self, host_path: &str) -> Result<(OwnedFd, Vec<u8>), HostError> {
        let err = |e| HostError::new(self.path(host_path), e);
        let p = Path::new(host_path);
        let name = p
            .file_name()
            .filter(|n| *n != OsStr::new(".."))
            .ok_or_else(|| err(io::Error::new(io::ErrorKind::InvalidInput, "no file name")))?;
        confine::relative(host_path).map_err(err)?;
        let dir = p.parent().and_then(Path::to_str).unwrap_or("/");
        let dir = if dir.is_empty() { "/" } else { dir };
        let fd = self.open(dir, libc::O_RDONLY | libc::O_DIRECTORY)?;
        Ok((fd, name.as_bytes().to_vec()))
    }

    /// [`Root::parent`], or `None` when a directory on the way is missing (so there is
    /// nothing to remove or read there).
    fn existing_parent(&self, host_path: &str) -> Result<Option<(OwnedFd, Vec<u8>)>, HostError> {
        match self.parent(host_path) {
            Ok(p) => Ok(Some(p)),
            Err(e) if is_missing(&e.source) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Creates the missing directories of `host_dir` inside the root, each 0755 whatever
    /// the umask (the files in them are read by unprivileged users).
    pub(crate) fn create_dirs(&self, host_dir: &str) -> Result<(), HostError> {
        let rel =
            confine::relative(host_dir).map_err(|e| HostError::new(self.path(host_dir), e))?;
        let mut prefix = String::new();
        for part in rel.split('/').filter(|c| !c.is_empty() && *c != ".") {
            prefix.push('/');
            prefix.push_str(part);
            if self.open(&prefix, libc::O_PATH | libc::O_DIRECTORY).is_ok() {
                continue;
            }
            let (dir, name) = self.parent(&prefix)?;
            let err = |e| HostError::new(self.path(&prefix), e);
            match nix::sys::stat::mkdirat(
                &dir,
                std::ffi::OsStr::from_bytes(&name),
                nix::sys::stat::Mode::from_bits_truncate(0o755),
            ) {
                Ok(()) | Err(nix::errno::Errno::EEXIST) => {}
                Err(e) => return Err(err(e.into())),
            }
            let made = self.open(&prefix, libc::O_RDONLY | libc::O_DIRECTORY)?;
            use std::os::unix::fs::PermissionsExt;
            File::from(made)
                .set_permissions(std::fs::Permissions::from_mode(0o755))
                .map_err(err)?;
        }
        Ok(())
    }

    /// Replaces a file inside the root atomically (see [`atomic::write_at`]), creating its
    /// directories; a link at the final name is replaced, never followed.
    pub(crate) fn write_file(&self, host_path: &str, bytes: &[u8]) -> Result<(), HostError> {
        if let Some(dir) = Path::new(host_path).parent().and_then(Path::to_str) {
            self.create_dirs(dir)?;
        }
        let (dir, name) = self.parent(host_path)?;
        atomic::write_at(dir.as_fd(), OsStr::from_bytes(&name), bytes)
            .map_err(|e| HostError::new(self.path(host_path), e))
    }

    /// Removes a file or link inside the root (never what a link points to); a missing one
    /// is fine.
    pub(crate) fn remove_file(&self, host_path: &str) -> Result<(), HostError> {
        let Some((dir, name)) = self.existing_parent(host_path)? else {
            return Ok(());
        };
        let err = |e| HostError::new(self.path(host_path), e);
        atomic::unlink_at(dir.as_fd(), &name).map_err(err)?;
        atomic::fsync(dir.as_fd()).map_err(err)
    }

    /// Removes an empty directory inside the root (never through a link); a missing one is
    /// fine, a non-empty one an error.
    pub(crate) fn remove_dir(&self, host_path: &str) -> Result<(), HostError> {
        let (dir, name) = self.parent(host_path)?;
        let err = |e| HostError::new(self.path(host_path), e);
        atomic::rmdir_at(dir.as_fd(), &name).map_err(err)?;
        atomic::fsync(dir.as_fd()).map_err(err)
    }

    /// The target of the link at `host_path`; `None` when there is none (missing, or not a
    /// link).
    pub(crate) fn read_link(&self, host_path: &str) -> Result<Option<String>, HostError> {
        let Some((dir, name)) = self.existing_parent(host_path)? else {
            return Ok(None);
        };
        match confine::readlink_at(dir.as_fd(), OsStr::from_bytes(&name)) {
            Ok(t) => Ok(Some(String::from_utf8_lossy(&t).into_owned())),
            Err(e) if is_missing(&e) => Ok(None),
            Err(e) => Err(HostError::new(self.path(host_path), e)),
        }
    }

    /// Makes `host_path` a link to `dest` (a temporary link renamed over it).
    pub(crate) fn symlink(&self, host_path: &str, dest: &str) -> Result<(), HostError> {
        if let Some(dir) = Path::new(host_path).parent().and_then(Path::to_str) {
            self.create_dirs(dir)?;
        }
        let (dir, name) = self.parent(host_path)?;
        atomic::symlink_at(dir.as_fd(), OsStr::from_bytes(&name), dest)
            .map_err(|e| HostError::new(self.path(host_path), e))
    }

    /// Writes a kernel knob in place with one `write`, as the kernel requires. The knob
    /// must be a regular file reached without a final link.
    pub(crate) fn write_knob(&self, host_path: &str, value: &str) -> Result<(), HostError> {
        use std::io::Write;
        let fd = self.open(
            host_path,
            libc::O_WRONLY | libc::O_TRUNC | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY,
        );
        let err = |e| HostError::new(self.path(host_path), e);
        let fd = match fd {
            Err(e) if e.source.raw_os_error() == Some(libc::ELOOP) => {
                return Err(err(Refusal::FinalLink.into()));
            }
            other => other?,
        };
        let st = confine::fstat(fd.as_fd()).map_err(err)?;
        if st.st_mode & libc::S_IFMT != libc::S_IFREG {
            return Err(err(
                Refusal::NotRegular(confine::kind_name(st.st_mode)).into()
            ));
        }
        File::from(fd).write_all(value.as_bytes()).map_err(err)
    }

    /// Removes what a killed run left of its temporary files for `host_path`; a missing
    /// directory is fine.
    pub(crate) fn remove_stale_temps(&self, host_path: &str) -> Result<usize, HostError> {
        let Some((dir, name)) = self.existing_parent(host_path)? else {
            return Ok(0);
        };
        atomic::remove_stale_temps(dir.as_fd(), OsStr::from_bytes(&name))
            .map_err(|e| HostError::new(self.path(host_path), e))
    }
}

/// True when the error says a path component does not exist (`ENOENT`), or is not a
/// directory where one was needed (`ENOTDIR`): either way, nothing is there.
fn is_missing(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ENOENT | libc::ENOTDIR))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_host_name_is_the_kernels_or_localhost() {
        let tree = crate::testing::Tree::with(&[("proc/sys/kernel/hostname", "gpu-07\n")]);
        assert_eq!(tree.root().hostname(), "gpu-07");
        tree.file("proc/sys/kernel/hostname", " \n");
        assert_eq!(tree.root().hostname(), "localhost");
        assert_eq!(Root::new("/nonexistent/gputune").hostname(), "localhost");
    }

    #[test]
    fn paths_resolve_under_the_root() {
        let root = Root::new("/tmp/node");
        assert_eq!(root.path("/proc/swaps"), Path::new("/tmp/node/proc/swaps"));
        assert_eq!(Root::live().path("/proc/swaps"), Path::new("/proc/swaps"));
        assert!(Root::live().is_live());
        assert!(!root.is_live());
    }

    #[test]
    fn missing_files_are_absent_not_errors() {
        let dir = tempfile::tempdir().unwrap();
        let root = Root::new(dir.path());
        assert_eq!(root.read_optional("/proc/nothing").unwrap(), None);
        assert_eq!(root.list_dir("/sys/class/net").unwrap(), None);
        assert!(root.read("/proc/nothing").is_err());
    }

    #[test]
    fn canonical_paths_stay_inside_the_root() {
        let dir = tempfile::tempdir().unwrap();
        let real = std::fs::canonicalize(dir.path()).unwrap();
        std::fs::create_dir_all(real.join("sys/devices/pci0000:00/0000:00:01.0")).unwrap();
        std::fs::create_dir_all(real.join("sys/class/net")).unwrap();
        std::os::unix::fs::symlink(
            "/sys/devices/pci0000:00/0000:00:01.0",
            real.join("sys/class/net/eth0"),
        )
        .unwrap();
        let root = Root::new(&real);
        assert_eq!(
            root.canonicalize("/sys/class/net/eth0"),
            Some(real.join("sys/devices/pci0000:00/0000:00:01.0"))
        );
        assert_eq!(root.canonicalize("/sys/class/net/none"), None);
    }

    #[test]
    fn special_and_huge_files_are_refused_with_their_reason() {
        let dir = tempfile::tempdir().unwrap();
        let root = Root::new(dir.path());
        std::fs::create_dir_all(dir.path().join("etc")).unwrap();
        nix::unistd::mkfifo(
            &dir.path().join("etc/fifo"),
            nix::sys::stat::Mode::from_bits_truncate(0o600),
        )
        .unwrap();
        std::os::unix::fs::symlink("/dev/zero", dir.path().join("etc/zero")).unwrap();
        let err = root.read_optional("/etc/fifo").unwrap_err();
        assert_eq!(err.refusal(), Some(&Refusal::NotRegular("FIFO")));
        // An absolute link resolves inside the root: there is no /dev/zero in it.
        assert_eq!(root.read_optional("/etc/zero").unwrap(), None);
        let live = Root::live().read_optional("/dev/zero").unwrap_err();
        assert_eq!(
            live.refusal(),
            Some(&Refusal::NotRegular("character device"))
        );
        std::fs::write(dir.path().join("etc/big"), vec![b'x'; 4096]).unwrap();
        let err = root.read_capped("/etc/big", 100).unwrap_err();
        assert_eq!(err.refusal(), Some(&Refusal::TooLarge { cap: 100 }));
        let err = root.read_optional("/../etc/big").unwrap_err();
        assert_eq!(err.refusal(), Some(&Refusal::Escapes));
    }

    #[test]
    fn writes_stay_inside_the_root_and_never_follow_a_final_link() {
        let outer = tempfile::tempdir().unwrap();
        let sentinel = outer.path().join("sentinel");
        std::fs::write(&sentinel, "keep\n").unwrap();
        let r = outer.path().join("root");
        std::fs::create_dir_all(r.join("etc")).unwrap();
        std::fs::create_dir_all(r.join("proc/sys/vm")).unwrap();
        // A directory link out of the root, and a knob that is a link to the sentinel.
        std::os::unix::fs::symlink(outer.path(), r.join("etc/sysctl.d")).unwrap();
        std::os::unix::fs::symlink(&sentinel, r.join("proc/sys/vm/swappiness")).unwrap();
        let root = Root::new(&r);
        // Inside the root the link dangles: the write fails rather than land outside.
        assert!(root.write_file("/etc/sysctl.d/sentinel", b"x\n").is_err());
        std::fs::create_dir_all(r.join(outer.path().strip_prefix("/").unwrap())).unwrap();
        root.write_file("/etc/sysctl.d/sentinel", b"x\n").unwrap();
        let err = root
            .write_knob("/proc/sys/vm/swappiness", "10")
            .unwrap_err();
        assert!(
            err.refusal().is_some() || err.source.raw_os_error() == Some(libc::ENOENT),
            "{err}"
        );
        root.remove_file("/etc/sysctl.d/sentinel").unwrap();
        assert_eq!(std::fs::read_to_string(&sentinel).unwrap(), "keep\n");
    }
}
