//! What a check concludes: one [`Finding`] per check, and the [`Change`] that would fix it.

use serde::{Deserialize, Serialize};

/// Declares [`Area`] with its list and names from one line per area, so a new area is one
/// line here, its module, and its entry in [`crate::checks::AREAS`].
macro_rules! areas {
    ($($(#[doc = $doc:literal])* $variant:ident => $name:literal,)*) => {
        /// The part of the node a check belongs to; the names `--only` takes.
        #[derive(
            Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, clap::ValueEnum,
        )]
        #[serde(rename_all = "lowercase")]
        pub enum Area {
            $($(#[doc = $doc])* $variant,)*
        }

        impl Area {
            /// Every area, in report order.
            pub(crate) const ALL: &'static [Area] = &[$(Area::$variant),*];

            pub(crate) fn name(self) -> &'static str {
                match self {
                    $(Area::$variant => $name,)*
                }
            }
        }
    };
}

areas! {
    /// Kernel network sysctls.
    Network => "network",
    /// Swap, swappiness, transparent huge pages, NUMA balancing, file-max.
    Memory => "memory",
    /// NUMA topology and placement.
    Numa => "numa",
    /// Network interfaces: speed, MTU, driver, firmware.
    Nic => "nic",
    /// GPUs, NVIDIA driver, CUDA and NCCL.
    Gpu => "gpu",
    /// PCIe ACS, IOMMU, peer memory.
    Platform => "platform",
    /// ulimits, /dev/shm, logind.
    Limits => "limits",
    /// cgroup limits.
    Cgroup => "cgroup",
    /// Firewall rules for rendezvous and NCCL ports.
    Firewall => "firewall",
}

impl std::fmt::Display for Area {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// How a check came out. `Error` means the fact could not be read or parsed. Read back from
/// reports by `fleet`, so it deserialises from the same names it is written as.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Pass,
    Warn,
    Fail,
    Skip,
    Error,
}

impl Status {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Status::Pass => "pass",
            Status::Warn => "warn",
            Status::Fail => "fail",
            Status::Skip => "skip",
            Status::Error => "error",
        }
    }
}

/// A modification of the node that makes a failing check pass. `apply` journals, executes,
/// verifies and persists these; `audit` only shows them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Change {
    /// A `/proc/sys` key: written live, persisted in `/etc/sysctl.d/90-gputune.conf`.
    Sysctl { key: String, value: String },
    /// A `/sys` knob written live (e.g. transparent huge pages). One with a kernel
    /// command-line form (THP `enabled`) is also persisted there, and in an image only there.
    Sysfs { path: String, value: String },
    /// A line of `/etc/security/limits.d/90-gputune.conf`.
    Limit {
        domain: String,
        kind: String,
        item: String,
        value: String,
    },
    /// A `KEY=VALUE` line of `/etc/nccl.conf`.
    NcclEnv { key: String, value: String },
    /// Accept inbound TCP to these port ranges in the nftables table `inet gputune`.
    FirewallAccept { ports: Vec<(u16, u16)> },
    /// Steer an interrupt to CPUs (`/proc/irq/N/smp_affinity_list`), e.g. a NIC's queues to
    /// its local NUMA node. Live only: irqbalance may undo it.
    IrqAffinity { irq: u32, cpus: String },
    /// A NIC setting through the kernel's ethtool netlink family (`ethtool -G/-K/-C/-A/-L`),
    /// `knob` being its profile key (`ring.rx`, `offload.gro`; booleans are 0 or 1);
    /// persisted in a systemd `.link` file for the interface.
    Ethtool {
        iface: String,
        knob: String,
        value: u32,
    },
    /// A `[Login]` setting of systemd-logind, in `/etc/systemd/logind.conf.d/90-gputune.conf`
    /// (logind reads it when it restarts or the node boots).
    Logind { key: String, value: String },
    /// A cgroup limit: a systemd slice drop-in when systemd manages cgroups, else cgroupfs.
    Cgroup {
        slice: String,
        key: String,
        value: String,
    },
}

/// What makes a failing check pass: the fix people follow and, where `apply` can make it, the
/// [`Change`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Remedy {
    pub fix: String,
    pub change: Option<Change>,
}

impl Remedy {
    /// A fix people make by hand: `apply` has no change for it.
    pub(crate) fn by_hand(fix: impl Into<String>) -> Self {
        Remedy {
            fix: fix.into(),
            change: None,
        }
    }

    /// A fix `apply` makes with `change`.
    pub(crate) fn applied(fix: impl Into<String>, change: Change) -> Self {
        Remedy {
            fix: fix.into(),
            change: Some(change),
        }
    }
}

/// What a judged check shows as its fix, given its verdict: a text (or a [`Remedy`] with
/// its change) is shown for every verdict but a pass; a remedy worked out from the verdict
/// (a closure) is asked only when the check fails or warns, and gives `None` when no one
/// value makes it pass.
pub(crate) trait Fixing {
    fn remedy(self, status: Status) -> Option<Remedy>;
}

impl Fixing for String {
    fn remedy(self, status: Status) -> Option<Remedy> {
        (status != Status::Pass).then(|| Remedy::by_hand(self))
    }
}

impl Fixing for &str {
    fn remedy(self, status: Status) -> Option<Remedy> {
        self.to_string().remedy(status)
    }
}

impl Fixing for Remedy {
    fn remedy(self, status: Status) -> Option<Remedy> {
        (status != Status::Pass).then_some(self)
    }
}

impl Fixing for &String {
    fn remedy(self, status: Status) -> Option<Remedy> {
        self.clone().remedy(status)
    }
}

impl<F: FnOnce() -> Option<Remedy>> Fixing for F {
    fn remedy(self, status: Status) -> Option<Remedy> {
        matches!(status, Status::Fail | Status::Warn)
            .then(self)
            .flatten()
    }
}

/// One check's verdict, with everything a person needs to act on it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Finding {
    /// Stable identifier, usually the profile key (`net.core.rmem_max`).
    pub id: String,
    pub area: Area,
    pub status: Status,
    pub expected: String,
    pub actual: String,
    /// Why it matters, or why the check was skipped or could not run.
    pub message: String,
    /// The exact command or edit that fixes it; empty when it passes.
    pub fix: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub change: Option<Change>,
    /// What a miss of this check costs: a failure's or warning's own status, else the
    /// profile setting's severity (`off` when a profile or `--skip` turned it off).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub severity: Option<crate::profile::setting::Severity>,
    /// What the profile wants, typed for scripts: `{"min": 16777216}`, `{"one_of": [..]}`,
    /// numbers in base units (bytes, counts, bits per second, seconds).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub expected_value: Option<serde_json::Value>,
    /// The value judged, typed: a number in base units, a boolean, or text.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub actual_value: Option<serde_json::Value>,
}

/// One check's fixed facts, said once; each verdict method makes the [`Finding`].
///
/// ```
/// use gputune::finding::{Area, Check, Status};
/// let check = Check::new("vm.swappiness", Area::Memory)
///     .expected("<= 10")
///     .why("swapping stalls training steps");
/// let finding = check.fail("60", "sysctl -w vm.swappiness=10");
/// assert_eq!(finding.status, Status::Fail);
/// assert_eq!(finding.message, "swapping stalls training steps");
/// assert_eq!(check.pass("1").fix, "");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Check {
    id: String,
    area: Area,
    expected: String,
    why: String,
}

impl Check {
    /// A check with nothing expected (`-`) and no reason yet.
    pub(crate) fn new(id: impl Into<String>, area: Area) -> Self {
        Check {
            id: id.into(),
            area,
            expected: "-".into(),
            why: String::new(),
        }
    }

    /// What the profile wants, as shown in the report.
    pub(crate) fn expected(mut self, expected: impl Into<String>) -> Self {
        self.expected = expected.into();
        self
    }

    /// Why it matters: the message of a judged finding.
    pub(crate) fn why(mut self, why: impl Into<String>) -> Self {
        self.why = why.into();
        self
    }

    /// Puts what the check found before its reason, `sep` between them: `eth0 runs at 25000
    /// Mb/s; <why>`.
    pub(crate) fn found(mut self, found: impl std::fmt::Display, sep: &str) -> Self {
        self.why = format!("{found}{sep}{}", self.why);
        self
    }

    /// Adds a note after the reason: `<why> Note: <note>.`
    pub(crate) fn noted(mut self, note: impl std::fmt::Display) -> Self {
        self.why = format!("{} Note: {note}.", self.why);
        self
    }

    /// The same check of one more subject (`.login`, `@training.slice`): the id gains `suffix`.
    pub(crate) fn suffixed(mut self, suffix: &str) -> Self {
        self.id.push_str(suffix);
        self
    }

    pub(crate) fn id(&self) -> &str {
        &self.id
    }

    /// The check holds: [`judge`](Check::judge) with its own verdict.
    pub(crate) fn pass(&self, actual: impl Into<String>) -> Finding {
        self.judge(Status::Pass, actual, "")
    }

    /// The check holds, but something deserves attention; `fix` says what.
    pub(crate) fn warn(&self, actual: impl Into<String>, fix: impl Fixing) -> Finding {
        self.judge(Status::Warn, actual, fix)
    }

    /// The check fails; `fix` is the exact command or edit that makes it pass.
    pub(crate) fn fail(&self, actual: impl Into<String>, fix: impl Fixing) -> Finding {
        self.judge(Status::Fail, actual, fix)
    }

    /// A verdict reached elsewhere (a profile setting's rule or severity, a worst case):
    /// the one way a judged check concludes. What it shows as its fix is `fix`'s to say
    /// (see [`Fixing`]).
    pub(crate) fn judge(
        &self,
        status: Status,
        actual: impl Into<String>,
        fix: impl Fixing,
    ) -> Finding {
        let (fix, change) = fix
            .remedy(status)
            .map_or_else(Default::default, |r| (r.fix, r.change));
        Finding {
            change,
            ..self.judged(status, actual.into(), fix)
        }
    }

    /// It could not be judged on this node; `reason` says why.
    pub(crate) fn skip(&self, reason: impl Into<String>) -> Finding {
        self.unjudged(Status::Skip, "-", reason.into())
    }

    /// The fact could not be read or parsed: never a panic, always a finding; `problem` says
    /// which and why.
    pub(crate) fn error(&self, problem: impl Into<String>) -> Finding {
        self.unjudged(Status::Error, "?", problem.into())
    }

    fn judged(&self, status: Status, actual: String, fix: String) -> Finding {
        self.finding(status, actual, self.why.clone(), fix)
    }

    fn unjudged(&self, status: Status, actual: &str, message: String) -> Finding {
        self.finding(status, actual.into(), message, String::new())
    }

    fn finding(&self, status: Status, actual: String, message: String, fix: String) -> Finding {
        Finding {
            id: self.id.clone(),
            area: self.area,
            status,
            expected: self.expected.clone(),
            actual,
            message,
            fix,
            change: None,
            severity: None,
            expected_value: None,
            actual_value: None,
        }
    }
}

impl Finding {
    /// Not judged after all: a skip saying why (`skipped by --skip`), with nothing to fix.
    pub(crate) fn skipped(self, reason: impl Into<String>) -> Self {
        Finding {
            status: Status::Skip,
            actual: "-".into(),
            message: reason.into(),
            fix: String::new(),
            change: None,
            severity: Some(crate::profile::setting::Severity::Off),
            actual_value: None,
            ..self
        }
    }
}
