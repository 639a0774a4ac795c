//! The host root: every read and write of `/proc`, `/sys`, `/etc`, `/dev`, `/run` and
//! `/var/lib` goes through one [`Root`], so `--root DIR` and tests see the same code paths
//! as a live node.

pub mod atomic;
pub mod bind;
pub mod cpulist;
pub mod cudnn;
pub mod exec;
pub mod ldcache;
pub mod libsearch;
pub mod mounts;
pub mod nccl;
pub mod net;
pub mod sysctl;
pub mod torch;

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

/// An I/O failure on a host path, carrying the path it happened on.
#[derive(Debug, thiserror::Error)]
#[error("{}: {source}", path.display())]
pub struct HostError {
    pub path: PathBuf,
    #[source]
    pub source: io::Error,
}

impl HostError {
    pub fn new(path: impl Into<PathBuf>, source: io::Error) -> Self {
        HostError {
            path: path.into(),
            source,
        }
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
    pub fn is_live(&self) -> bool {
        self.dir == Path::new("/")
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The real path of a host path such as `/proc/swaps` under this root.
    pub fn path(&self, host_path: &str) -> PathBuf {
        self.dir.join(host_path.trim_start_matches('/'))
    }

    /// Reads a whole text file; a missing file is `Ok(None)`, not an error.
    pub fn read_optional(&self, host_path: &str) -> Result<Option<String>, HostError> {
        let path = self.path(host_path);
        match fs::read(&path) {
            Ok(bytes) => Ok(Some(String::from_utf8_lossy(&bytes).into_owned())),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(HostError::new(path, e)),
        }
    }

    /// Reads a whole binary file; a missing file is `Ok(None)`.
    pub fn read_optional_bytes(&self, host_path: &str) -> Result<Option<Vec<u8>>, HostError> {
        let path = self.path(host_path);
        match fs::read(&path) {
            Ok(bytes) => Ok(Some(bytes)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(HostError::new(path, e)),
        }
    }

    /// Reads a whole text file that must exist.
    pub fn read(&self, host_path: &str) -> Result<String, HostError> {
        let path = self.path(host_path);
        fs::read(&path)
            .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
            .map_err(|e| HostError::new(path, e))
    }

    /// Names in a directory, sorted; a missing directory is `Ok(None)`.
    pub fn list_dir(&self, host_path: &str) -> Result<Option<Vec<String>>, HostError> {
        let path = self.path(host_path);
        let entries = match fs::read_dir(&path) {
            Ok(entries) => entries,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(HostError::new(path, e)),
        };
        let mut names = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| HostError::new(&path, e))?;
            names.push(entry.file_name().to_string_lossy().into_owned());
        }
        names.sort();
        Ok(Some(names))
    }

    /// True when the host path exists (following links, as sysfs users expect).
    pub fn exists(&self, host_path: &str) -> bool {
        self.path(host_path).exists()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
