//! `/run/gputune.lock`: an exclusive flock so two applies (or an apply and a rollback)
//! never interleave. The kernel drops it when the process dies, even by kill -9.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use super::error::ApplyError;
use crate::host::{HostError, Root};

/// The lock file (under the root).
pub const PATH: &str = "/run/gputune.lock";

/// How long a second apply waits for the first before giving up.
pub const WAIT: Duration = Duration::from_secs(5);

/// A held lock; released when dropped.
#[derive(Debug)]
pub struct Lock {
    _file: File,
}

/// Takes the lock, retrying until `wait` has passed; the error says who to wait for.
pub fn acquire(root: &Root, wait: Duration) -> Result<Lock, ApplyError> {
    let path = root.path(PATH);
    if let Some(dir) = std::path::Path::new(PATH).parent().and_then(|d| d.to_str()) {
        root.create_dirs(dir)?;
    }
    // O_NOFOLLOW: a link planted at the lock's name is refused, not followed and created.
    let file = File::from(root.open(
        PATH,
        libc::O_RDWR | libc::O_CREAT | libc::O_NOFOLLOW | libc::O_NONBLOCK,
    )?);
    let start = Instant::now();
    loop {
        // SAFETY: flock on a file descriptor this function owns; no memory is involved.
        let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        if rc == 0 {
            return Ok(Lock { _file: file });
        }
        let err = std::io::Error::last_os_error();
        if err.raw_os_error() != Some(libc::EWOULDBLOCK) {
            return Err(HostError::new(path, err).into());
        }
        if start.elapsed() >= wait {
            return Err(ApplyError::Lock(format!(
                "another gputune apply or rollback holds {} (waited {} s); wait for it to finish and run again",
                path.display(),
                wait.as_secs()
            )));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_holder_waits_then_gives_up() {
        let dir = tempfile::tempdir().unwrap();
        let root = Root::new(dir.path());
        let first = acquire(&root, WAIT).unwrap();
        let err = acquire(&root, Duration::from_millis(300)).unwrap_err();
        assert!(err.to_string().contains("gputune.lock"), "{err}");
        drop(first);
        assert!(acquire(&root, Duration::ZERO).is_ok());
    }
}
