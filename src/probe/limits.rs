//! The facts of the limits area that are not files: the running process's resource limits
//! (getrlimit) and a file system's size and free space (statvfs). Behind a trait so tests
//! can give any value; [`LiveLimits`] asks the kernel.

use std::io;
use std::path::Path;

use crate::profile::amount::Amount;

/// The resource limits the limits area judges.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resource {
    Memlock,
    Nofile,
    Stack,
}

impl Resource {
    pub(crate) const ALL: [Resource; 3] = [Resource::Memlock, Resource::Nofile, Resource::Stack];

    /// The item name in limits.conf and the end of the profile key `ulimit.<name>`.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Resource::Memlock => "memlock",
            Resource::Nofile => "nofile",
            Resource::Stack => "stack",
        }
    }

    /// Bytes per unit of limits.conf: memlock and stack are written in KiB there.
    pub(crate) fn file_unit(self) -> u64 {
        match self {
            Resource::Memlock | Resource::Stack => 1024,
            Resource::Nofile => 1,
        }
    }

    /// True when the limit is an amount of memory (shown and judged in bytes).
    pub(crate) fn is_bytes(self) -> bool {
        self.file_unit() > 1
    }

    /// The systemd unit setting that raises it for a service (`LimitNOFILE=`).
    pub(crate) fn systemd_setting(self) -> &'static str {
        match self {
            Resource::Memlock => "LimitMEMLOCK",
            Resource::Nofile => "LimitNOFILE",
            Resource::Stack => "LimitSTACK",
        }
    }

    fn kernel(self) -> nix::sys::resource::Resource {
        use nix::sys::resource::Resource as R;
        match self {
            Resource::Memlock => R::RLIMIT_MEMLOCK,
            Resource::Nofile => R::RLIMIT_NOFILE,
            Resource::Stack => R::RLIMIT_STACK,
        }
    }
}

/// Soft and hard limit of one resource (bytes or a count).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rlimit {
    pub soft: Amount,
    pub hard: Amount,
}

/// Size and space left of a mounted file system, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Space {
    pub size: u64,
    /// Space an unprivileged process can still use (statvfs `f_bavail`).
    pub free: u64,
}

/// Live facts of the limits area.
pub trait LimitsProbe {
    /// This process's limit of `resource`.
    fn rlimit(&self, resource: Resource) -> io::Result<Rlimit>;
    /// Size and free space of the file system mounted at `path`.
    fn space(&self, path: &Path) -> io::Result<Space>;
}

/// The running kernel, through getrlimit(2) and statvfs(3).
pub(crate) struct LiveLimits;

impl LimitsProbe for LiveLimits {
    fn rlimit(&self, resource: Resource) -> io::Result<Rlimit> {
        let (soft, hard) = nix::sys::resource::getrlimit(resource.kernel())?;
        let amount = |v: nix::libc::rlim_t| {
            if v == nix::sys::resource::RLIM_INFINITY {
                Amount::Unlimited
            } else {
                Amount::Finite(i128::from(v))
            }
        };
        Ok(Rlimit {
            soft: amount(soft),
            hard: amount(hard),
        })
    }

    fn space(&self, path: &Path) -> io::Result<Space> {
        let fs = nix::sys::statvfs::statvfs(path)?;
        let unit = fs.fragment_size();
        Ok(Space {
            size: fs.blocks().saturating_mul(unit),
            free: fs.blocks_available().saturating_mul(unit),
        })
    }
}

/// No live limits: every question answers why (`--root` is not the running node).
pub(crate) struct NoLimits(pub String);

impl LimitsProbe for NoLimits {
    fn rlimit(&self, _: Resource) -> io::Result<Rlimit> {
        Err(io::Error::other(self.0.clone()))
    }

    fn space(&self, _: &Path) -> io::Result<Space> {
        Err(io::Error::other(self.0.clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn live_rlimits_match_the_kernel_view_of_this_process() {
        let limits = std::fs::read_to_string("/proc/self/limits").unwrap();
        let line = limits
            .lines()
            .find(|l| l.starts_with("Max open files"))
            .unwrap();
        let fields: Vec<&str> = line.split_whitespace().collect();
        let parse = |s: &str| Amount::parse(s).unwrap();
        let got = LiveLimits.rlimit(Resource::Nofile).unwrap();
        assert_eq!(got.soft, parse(fields[3]));
        assert_eq!(got.hard, parse(fields[4]));
    }

    #[test]
    fn live_space_of_a_directory() {
        // statvfs of the test's own temp dir: size is non-zero and free never exceeds it.
        let dir = tempfile::tempdir().unwrap();
        let space = LiveLimits.space(dir.path()).unwrap();
        assert!(space.size > 0 && space.free <= space.size, "{space:?}");
        let missing = LiveLimits.space(&dir.path().join("nope")).unwrap_err();
        assert_eq!(missing.kind(), io::ErrorKind::NotFound);
    }
}
