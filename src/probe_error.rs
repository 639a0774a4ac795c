//! Why a live probe (NVML, libcuda, ethtool, netlink routes) gave no answer, as a kind
//! the caller can decide on rather than text it can only show. The text each kind
//! displays is the reason the audit prints, unchanged from when it was a `String`.

use crate::finding::{Check, Finding, Status};

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

    /// The finding `check` becomes when `probe` failed this way: the one place a probe
    /// failure turns into a verdict, with `reason` (which quotes the failure) as the message.
    pub(crate) fn finding(
        &self,
        probe: Probe,
        check: &Check,
        reason: impl Into<String>,
    ) -> Finding {
        match self.verdict(probe) {
            Status::Skip => check.skip(reason),
            _ => check.error(reason),
        }
    }

    /// The finding `check` becomes when I/O probe `probe` failed with `error` in the call
    /// `what` names (`getrlimit(nofile)`): its errno gives the kind.
    pub(crate) fn io_finding(
        probe: Probe,
        check: &Check,
        what: &str,
        error: &std::io::Error,
    ) -> Finding {
        let e = ProbeError::of_io(format!("{what}: {error}"), error);
        e.finding(probe, check, e.to_string())
    }

    /// Skip or error, by the probe and the kind of failure:
    /// - what is asked only of a running node is skipped off one (`--root`, an image);
    /// - NVML, libcuda and the routes describe things a sound node may lack (no driver, no
    ///   GPU, no route to the peer): the fact just could not be asked, so the check is
    ///   skipped whatever the kind;
    /// - a NIC's ethtool settings are skipped where its driver does not implement them;
    ///   the firewall is skipped where reading it needs root;
    /// - anything else is an error: getrlimit, statvfs, the firewall tools and ethtool
    ///   netlink ask what every live node answers, so their failure leaves the fact unread.
    pub(crate) fn verdict(&self, probe: Probe) -> Status {
        match (probe, self) {
            (_, ProbeError::NotLive(_))
            | (Probe::Nvml | Probe::Cuda | Probe::Routes, _)
            | (Probe::NicSettings, ProbeError::Absent(_))
            | (Probe::Firewall, ProbeError::Denied(_)) => Status::Skip,
            (Probe::NicSettings | Probe::Limits | Probe::Firewall, _) => Status::Error,
        }
    }
}

/// The live probes of [`crate::probe::Probes`] whose failure becomes a finding (a NIC's
/// driver info, when unreadable, only leaves its driver and firmware unknown).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Probe {
    Nvml,
    Cuda,
    Routes,
    /// Rings, offloads, coalescing, pause and channels over ethtool netlink.
    NicSettings,
    /// getrlimit and statvfs.
    Limits,
    /// `nft`, `iptables-save` and the kernel's legacy tables.
    Firewall,
}

impl From<&crate::host::ethtool::EthtoolError> for ProbeError {
    /// A driver without the group is an absence of it; a vanished interface, like any
    /// other refusal, a failure of the read.
    fn from(e: &crate::host::ethtool::EthtoolError) -> ProbeError {
        use crate::host::ethtool::EthtoolError;
        match e {
            EthtoolError::NotLive(why) => ProbeError::NotLive(why.clone()),
            EthtoolError::Unsupported { .. } => ProbeError::Absent(e.to_string()),
            EthtoolError::NoDevice(_) | EthtoolError::Failed(_) => {
                ProbeError::Failed(e.to_string())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::finding::Area;

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
    fn a_probe_of_what_a_node_may_lack_skips_one_every_node_answers_errs() {
        let check = Check::new("gpu.nvml", Area::Gpu);
        let kinds = [
            ProbeError::NotLive("a".into()),
            ProbeError::Absent("a".into()),
            ProbeError::Denied("a".into()),
            ProbeError::Failed("a".into()),
        ];
        for e in &kinds {
            for probe in [Probe::Nvml, Probe::Cuda, Probe::Routes] {
                let f = e.finding(probe, &check, format!("skipped: {e}"));
                assert_eq!(f.status, Status::Skip, "{probe:?} {e:?}");
                assert_eq!(f.message, "skipped: a");
            }
        }
        let verdicts = |probe| kinds.iter().map(|e| e.verdict(probe)).collect::<Vec<_>>();
        use Status::{Error, Skip};
        assert_eq!(verdicts(Probe::Limits), [Skip, Error, Error, Error]);
        assert_eq!(verdicts(Probe::Firewall), [Skip, Error, Skip, Error]);
        assert_eq!(verdicts(Probe::NicSettings), [Skip, Skip, Error, Error]);
        let f = ProbeError::Failed("b".into()).finding(Probe::Limits, &check, "b");
        assert_eq!(
            (f.status, f.actual.as_str(), f.message.as_str()),
            (Error, "?", "b")
        );
    }

    #[test]
    fn an_ethtool_failure_keeps_its_kind_and_text() {
        use crate::host::ethtool::EthtoolError;
        let unsupported = EthtoolError::Unsupported {
            iface: "eth0".into(),
            what: "rings".into(),
        };
        let e = ProbeError::from(&unsupported);
        assert_eq!(e, ProbeError::Absent(unsupported.to_string()));
        let gone = ProbeError::from(&EthtoolError::NoDevice("eth9".into()));
        assert_eq!(gone, ProbeError::Failed("no interface eth9".into()));
        let off = ProbeError::from(&EthtoolError::NotLive("not live".into()));
        assert_eq!(off, ProbeError::NotLive("not live".into()));
    }
}
