//! `/run/gputune.lock`: an exclusive flock so two applies (or an apply and a rollback)
//! never interleave. The kernel drops it when the process dies, even by kill -9.

use std::fs::File;

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};
use std::time::{Duration, Instant};

use super::error::ApplyError;
use crate::host::{HostError, Root};

/// The lock file (under the root).
pub(crate) const PATH: &str = "/run/gputune.lock";

/// How long a second apply waits for the first before giving up.
pub(crate) const WAIT: Duration = Duration::from_secs(5);

/// A held lock; released when dropped.
#[derive(Debug)]
pub(crate) struct Lock {
    _held: Flock<File>,
}

/// Takes the lock, retrying until `wait` has passed; the error says who to wait for.
pub(crate) fn acquire(root: &Root, wait: Duration) -> Result<Lock, ApplyError> {
    let path = root.path(PATH);
    if let Some(dir) = std::path::Path::new(PATH).parent().and_then(|d| d.to_str()) {
        root.create_dirs(dir)?;
    }
    // O_NOFOLLOW: a link planted at the lock's name is refused, not followed and created.
    let mut file = File::from(root.open(
        PATH,
        libc::O_RDWR | libc::O_CREAT | libc::O_NOFOLLOW | libc::O_NONBLOCK,
    )?);
    let start = Instant::now();
    loop {
        match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            Ok(held) => {
                remove_stale_temps(root)?;
                return Ok(Lock { _held: held });
            }
            Err((back, Errno::EWOULDBLOCK)) => file = back,
            Err((_, errno)) => return Err(HostError::new(path, errno.into()).into()),
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

/// With the lock held no other apply or rollback runs, so a temporary file of ours beside
/// a file gputune writes was left by a run that was killed between create and rename.
fn remove_stale_temps(root: &Root) -> Result<(), ApplyError> {
    let paths = super::validate::OWNED
        .iter()
        .chain([super::journal::PATH, super::firewall::UNIT_LINK].iter());
    for path in paths {
        root.remove_stale_temps(path)?;
    }
    Ok(())
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

    #[test]
    fn taking_the_lock_removes_what_a_killed_run_left() {
        let dir = tempfile::tempdir().unwrap();
        let etc = dir.path().join("etc");
        std::fs::create_dir_all(&etc).unwrap();
        std::fs::write(etc.join(".nccl.conf.4242.tmp"), "half").unwrap();
        std::fs::write(etc.join(".nccl.conf.gputune-00ff00ff00ff00ff.tmp"), "half").unwrap();
        std::fs::write(etc.join(".nccl.conf.keep"), "someone else's").unwrap();
        let _lock = acquire(&Root::new(dir.path()), WAIT).unwrap();
        let left: Vec<_> = std::fs::read_dir(&etc)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(left, [".nccl.conf.keep"]);
    }
}
