//! Why a live probe (NVML, libcuda, ethtool, netlink routes) gave no answer, as a kind
//! the caller can decide on rather than text it can only show. The text each kind
//! displays is the reason the audit prints, unchanged from when it was a `String`.

use crate::finding::{Check, Finding};

/// A probe's failure, by kind; each carries the reason shown to the user.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProbeError {
    /// The probe describes the running node only (`--root`, or a test handed in none).
    #[error("{0}")]
    NotLive(String),
    /// What the probe asks is not on this node: no driver, library, GPU or interface.
    #[error("{0}")]
    Absent(String),
    /// The kernel or library refused for lack of permission.
    #[error("{0}")]
    Denied(String),
    /// The call was made and failed (a driver error, a netlink refusal, a timeout).
    #[error("{0}")]
    Failed(String),
}

impl ProbeError {
    /// The kind of a failed system call, by its errno: no such device or file is
    /// [`Absent`](ProbeError::Absent), a refusal for permission is
    /// [`Denied`](ProbeError::Denied), anything else [`Failed`](ProbeError::Failed).
    pub(crate) fn of_io(reason: String, error: &std::io::Error) -> ProbeError {
        match error.raw_os_error() {
            Some(libc::ENODEV | libc::ENOENT | libc::ENXIO) => ProbeError::Absent(reason),
            Some(libc::EPERM | libc::EACCES) => ProbeError::Denied(reason),
            _ => ProbeError::Failed(reason),
        }
    }

    /// The same kind with its reason rewritten by `f` (to name the peer or interface).
    pub(crate) fn reworded(self, f: impl FnOnce(String) -> String) -> ProbeError {
        match self {
            ProbeError::NotLive(r) => ProbeError::NotLive(f(r)),
            ProbeError::Absent(r) => ProbeError::Absent(f(r)),
            ProbeError::Denied(r) => ProbeError::Denied(f(r)),
            ProbeError::Failed(r) => ProbeError::Failed(f(r)),
        }
    }

    /// The finding `check` becomes when its probe failed: the one place a probe failure
    /// turns into a verdict. Every kind is a skip today (the node may still be sound; the
    /// fact just could not be asked), with `reason` (which quotes the failure) as the
    /// message.
    pub(crate) fn finding(&self, check: &Check, reason: impl Into<String>) -> Finding {
        match self {
            ProbeError::NotLive(_)
            | ProbeError::Absent(_)
            | ProbeError::Denied(_)
            | ProbeError::Failed(_) => check.skip(reason),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::finding::{Area, Status};

    #[test]
    fn an_errno_names_the_kind_and_the_reason_is_shown_unchanged() {
        let kind =
            |errno| ProbeError::of_io("why".into(), &std::io::Error::from_raw_os_error(errno));
        assert_eq!(kind(libc::ENODEV), ProbeError::Absent("why".into()));
        assert_eq!(kind(libc::EACCES), ProbeError::Denied("why".into()));
        assert_eq!(kind(libc::ETIMEDOUT), ProbeError::Failed("why".into()));
        let e = ProbeError::NotLive("NVML describes the running node only".into());
        assert_eq!(e.to_string(), "NVML describes the running node only");
        let e = e.reworded(|r| format!("no route to 10.0.0.1: {r}"));
        assert!(
            matches!(&e, ProbeError::NotLive(r) if r.starts_with("no route to 10.0.0.1: NVML"))
        );
    }

    #[test]
    fn every_kind_is_a_skip_with_the_reason_given() {
        let check = Check::new("gpu.nvml", Area::Gpu);
        for e in [
            ProbeError::NotLive("a".into()),
            ProbeError::Absent("a".into()),
            ProbeError::Denied("a".into()),
            ProbeError::Failed("a".into()),
        ] {
            let f = e.finding(&check, format!("skipped: {e}"));
            assert_eq!(f.status, Status::Skip, "{e:?}");
            assert_eq!(f.message, "skipped: a");
        }
    }
}
