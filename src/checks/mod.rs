//! Checks, one module per area of the node. Each module owns its checks end to end: the
//! keys it understands, reading the facts, judging them against the profile and the
//! [`Change`](crate::finding::Change) that would fix a failure.

pub(crate) mod cgroup;
pub(crate) mod chosen;
pub mod firewall;
pub(crate) mod gpu;
mod judged;
pub mod limits;
pub(crate) mod memory;
pub(crate) mod network;
pub(crate) mod nic;
pub(crate) mod numa;
pub(crate) mod platform;
pub mod sysctl;
pub(crate) mod tuned;
mod typed;

use crate::finding::{Area, Check, Finding, Fixing};
use std::cell::OnceCell;
use std::collections::BTreeMap;
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use crate::host::{HostError, Root};
use crate::inventory::Inventory;
use crate::probe::Probes;
use crate::profile::Profile;
use crate::profile::setting::{KeySpec, Setting, Severity};
use sysctl::boot::{self, Assignment};

/// Options of `gputune audit` that some areas need.
#[derive(Debug, Clone, Default)]
pub struct AuditOptions {
    /// `--cgroup PATH`: the cgroup to judge instead of the current process's.
    pub cgroup: Option<String>,
    /// `--peer ADDR`: a peer node whose route picks the NIC to judge.
    pub peer: Option<String>,
    /// `--persisted`: judge what the node's configuration files would give after a reboot
    /// (always true in image mode).
    pub persisted: bool,
    /// What is judged: the running kernel, a node's files, or an image.
    pub mode: crate::image::Mode,
    /// Whose resource limits are judged: this process's, or a Slurm job's (`health` run by
    /// slurmd, whose own limits no job has).
    pub limits_of: limits::LimitsOf,
    /// `--skip ID,...`: checks reported as skipped whatever they find (an ID names its
    /// subjects too: `ulimit.nofile` skips `ulimit.nofile.login`).
    pub skip: Vec<String>,
    /// `--since`: Xids are judged from this time (seconds since the epoch), not from boot.
    pub since: Option<u64>,
}

/// A `--skip` value that names no check id; clap prints it after the value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum BadSkipId {
    #[error("an empty check id (ids look like net.core.rmem_max)")]
    Empty,
    /// White space or a control character inside the id.
    #[error("a check id has no spaces (ids look like net.core.rmem_max)")]
    Spaces,
}

/// Parses one `--skip` ID: a check id as reports print it, no spaces or control characters.
pub(crate) fn parse_skip_id(text: &str) -> Result<String, BadSkipId> {
    let id = text.trim();
    if id.is_empty() {
        return Err(BadSkipId::Empty);
    }
    if id.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(BadSkipId::Spaces);
    }
    Ok(id.to_string())
}

/// The `--skip` ids that named no check of `findings`, each with the closest id there is,
/// so a typo does not silently skip nothing.
pub(crate) fn unmatched_skips(
    skip: &[String],
    findings: &[Finding],
) -> Vec<(String, Option<String>)> {
    skip.iter()
        .filter(|p| {
            !findings
                .iter()
                .any(|f| crate::profile::names_check(p, &f.id))
        })
        .map(|p| {
            let ids = findings.iter().map(|f| f.id.as_str());
            (
                p.clone(),
                crate::profile::suggest::closest(p, ids).map(str::to_string),
            )
        })
        .collect()
}

impl AuditOptions {
    /// True when the root has no running kernel: live-only facts are skipped, never guessed.
    pub(crate) fn image(&self) -> bool {
        self.mode == crate::image::Mode::Image
    }
}

/// What every check reads from, for one audit.
pub struct Context<'a> {
    pub root: &'a Root,
    pub profile: &'a Profile,
    pub options: &'a AuditOptions,
    /// What is not a file (NVML, libcuda, ethtool, netlink): real on the live node,
    /// absent with the reason under `--root`, fixed in tests.
    pub probes: Probes,
    /// The hardware inventory, read once per audit by whichever area needs it first.
    inventory: OnceCell<Result<Inventory, HostError>>,
    /// What the sysctl configuration files set at boot, read once for network and memory.
    boot_sysctls: OnceCell<BootSysctls>,
    /// The tuned profile that applies, read once for network and memory.
    tuned: OnceCell<Result<Option<tuned::Tuned>, tuned::TunedError>>,
}

/// The sysctl each key gets at boot and where from (systemd-sysctl order), or why the files
/// could not be read.
pub(crate) type BootSysctls = Result<BTreeMap<String, Assignment>, HostError>;

/// Reads what the sysctl configuration files under `root` set at boot.
pub(crate) fn read_boot_sysctls(root: &Root) -> BootSysctls {
    boot::assignments(root).map(|a| boot::effective(&a))
}

impl<'a> Context<'a> {
    pub fn new(root: &'a Root, profile: &'a Profile, options: &'a AuditOptions) -> Self {
        Context::with_probes(root, profile, options, Probes::for_root(root))
    }

    /// A context whose non-file facts come from `probes` (tests hand in fixed ones).
    pub(crate) fn with_probes(
        root: &'a Root,
        profile: &'a Profile,
        options: &'a AuditOptions,
        probes: Probes,
    ) -> Self {
        Context {
            root,
            profile,
            options,
            probes,
            inventory: OnceCell::new(),
            boot_sysctls: OnceCell::new(),
            tuned: OnceCell::new(),
        }
    }

    /// The inventory, read with this context's probes the first time it is asked for, so
    /// every area sees the same facts.
    pub(crate) fn inventory(&self) -> &Result<Inventory, HostError> {
        self.inventory
            .get_or_init(|| Inventory::read(self.root, &self.probes))
    }

    /// The sysctl each key gets at boot and where from (systemd-sysctl order), or why the
    /// files could not be read; read once per audit.
    pub(crate) fn boot_sysctls(&self) -> &BootSysctls {
        self.boot_sysctls
            .get_or_init(|| read_boot_sysctls(self.root))
    }

    /// The tuned profile that applies (running, on the live node; enabled at boot with
    /// `--persisted`), or why it could not be read; read once per audit.
    pub(crate) fn tuned(&self) -> &Result<Option<tuned::Tuned>, tuned::TunedError> {
        self.tuned
            .get_or_init(|| tuned::read(self.root, !self.options.persisted))
    }
}

/// One area's checks: the keys a profile may set for it, and the function that runs them.
pub(crate) struct AreaChecks {
    pub area: Area,
    pub keys: &'static [KeySpec],
    pub audit: Audit,
}

/// The function that runs an area's checks.
pub(crate) enum Audit {
    /// Reads what it judges itself.
    Node(fn(&Context) -> Vec<Finding>),
    /// Judges the hardware inventory, read once per audit; when a file of it cannot be
    /// read, the area reports that as its one finding.
    Hardware(fn(&Context, &Inventory) -> Vec<Finding>),
}

impl AreaChecks {
    /// The area's findings on the node `ctx` describes.
    pub(crate) fn run(&self, ctx: &Context) -> Vec<Finding> {
        match self.audit {
            Audit::Node(audit) => audit(ctx),
            Audit::Hardware(audit) => match ctx.inventory() {
                Ok(inv) => audit(ctx, inv),
                Err(e) => {
                    let check = Check::new(format!("{}.inventory", self.area), self.area);
                    vec![check.error(e.to_string())]
                }
            },
        }
    }
}

/// Every area that has checks, in report order.
pub(crate) const AREAS: &[AreaChecks] = &[
    AreaChecks {
        area: Area::Network,
        keys: network::KEYS,
        audit: Audit::Node(network::audit),
    },
    AreaChecks {
        area: Area::Memory,
        keys: memory::KEYS,
        audit: Audit::Node(memory::audit),
    },
    AreaChecks {
        area: Area::Numa,
        keys: numa::KEYS,
        audit: Audit::Hardware(numa::audit),
    },
    AreaChecks {
        area: Area::Nic,
        keys: nic::KEYS,
        audit: Audit::Hardware(nic::audit),
    },
    AreaChecks {
        area: Area::Gpu,
        keys: gpu::KEYS,
        audit: Audit::Hardware(gpu::audit),
    },
    AreaChecks {
        area: Area::Platform,
        keys: platform::KEYS,
        audit: Audit::Hardware(platform::audit),
    },
    AreaChecks {
        area: Area::Limits,
        keys: limits::KEYS,
        audit: Audit::Node(limits::audit),
    },
    AreaChecks {
        area: Area::Cgroup,
        keys: cgroup::KEYS,
        audit: Audit::Node(cgroup::audit),
    },
    AreaChecks {
        area: Area::Firewall,
        keys: firewall::KEYS,
        audit: Audit::Node(firewall::audit),
    },
];

/// The keys a profile may set in `area` (empty for areas without checks yet).
pub fn keys(area: Area) -> &'static [KeySpec] {
    AREAS
        .iter()
        .find(|a| a.area == area)
        .map_or(&[], |a| a.keys)
}

/// Runs the checks of the selected areas (all when `only` is empty).
pub fn run(ctx: &Context, only: &[Area]) -> Vec<Finding> {
    let mut findings: Vec<Finding> = AREAS
        .iter()
        .filter(|a| only.is_empty() || only.contains(&a.area))
        .flat_map(|a| a.run(ctx))
        .collect();
    for f in &mut findings {
        conclude(ctx, f);
    }
    findings
}

/// The last word on a finding, the one place every check's verdict passes after its area
/// judged it: in an image a skip says it is for want of a running node, `--skip` and a
/// profile's `severity = "off"` make it a skip saying who turned it off, and it carries the
/// severity of the setting behind it and, typed, what that setting wants and what was found.
fn conclude(ctx: &Context, f: &mut Finding) {
    // In an image every skip is for want of a running node: say so the same way everywhere.
    if ctx.options.image()
        && f.status == crate::finding::Status::Skip
        && !f.message.starts_with(crate::image::NO_KERNEL)
    {
        f.message = format!("{}: {}", crate::image::NO_KERNEL, f.message);
    }
    let setting = ctx.profile.governing(f.area, &f.id);
    if ctx
        .options
        .skip
        .iter()
        .any(|p| crate::profile::names_check(p, &f.id))
    {
        *f = f.clone().skipped("skipped by --skip");
    } else if let Some(s) = setting.filter(|s| s.severity == Severity::Off) {
        *f = f
            .clone()
            .skipped(format!("turned off by profile {} ({})", s.set_by, s.origin));
    } else {
        // A miss costs what it came to here (a check may warn where its setting would fail,
        // for want of a file, say); a pass or skip, what its setting says a miss would.
        f.severity = Some(match (f.status, setting) {
            (crate::finding::Status::Warn, _) => Severity::Warn,
            (crate::finding::Status::Fail, _) => Severity::Fail,
            (_, Some(s)) => s.severity,
            (_, None) => Severity::Fail,
        });
        if let Some(setting) = setting {
            if f.expected_value.is_none() {
                f.expected_value = typed::rule(&setting.rule, &f.id);
            }
            // A check that showed the value just as it judged it (a sysctl's `212992`).
            let judged = matches!(
                f.status,
                crate::finding::Status::Pass
                    | crate::finding::Status::Warn
                    | crate::finding::Status::Fail
            );
            if f.actual_value.is_none() && judged {
                f.actual_value = typed::bare(&f.actual, &f.id);
            }
        }
    }
}

/// How long a [`run_limited`] audit may take: a health check that hangs loses the node
/// without saying why (NHC's "Script timed out"), so each area and the whole run are bounded.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TimeLimits {
    pub per_area: Duration,
    pub total: Duration,
}

/// Runs the selected areas like [`run`], on a worker thread, each within `limits`. An area
/// that does not finish in time becomes an `error` finding naming it, and the areas after it
/// run on a fresh worker; once the total is spent, the areas not yet run are `error` findings
/// too. A hung worker is left behind (a thread stuck in a syscall cannot be killed); the
/// process exits soon after, which ends it.
pub(crate) fn run_limited(
    root: &Root,
    profile: &Profile,
    options: &AuditOptions,
    only: &[Area],
    limits: TimeLimits,
) -> Vec<Finding> {
    run_limited_with_boot(root, profile, options, only, limits).0
}

/// [`run_limited`], handing back as well what the sysctl files set at boot when the worker
/// that ran the last area read them (`None` when it did not), so that the caller need not
/// read them again.
pub(crate) fn run_limited_with_boot(
    root: &Root,
    profile: &Profile,
    options: &AuditOptions,
    only: &[Area],
    limits: TimeLimits,
) -> (Vec<Finding>, Option<BootSysctls>) {
    let areas: Vec<Area> = AREAS
        .iter()
        .map(|a| a.area)
        .filter(|a| only.is_empty() || only.contains(a))
        .collect();
    let deadline = Instant::now() + limits.total;
    let mut findings = Vec::new();
    let mut boot_sysctls = None;
    let mut next = 0;
    while next < areas.len() {
        let (results, worker) = spawn_worker(root, profile, options, areas[next..].to_vec());
        let mut finished = false;
        while next < areas.len() {
            let area = areas[next];
            let left = deadline.saturating_duration_since(Instant::now());
            let wait = limits.per_area.min(left);
            match results.recv_timeout(wait) {
                Ok(found) => {
                    findings.extend(found);
                    next += 1;
                    finished = next == areas.len();
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    // The worker panicked inside this area: say so instead of losing it.
                    findings.push(
                        Check::new(area.name(), area)
                            .expected("the area's checks finish")
                            .error(format!("the {area} checks stopped unexpectedly")),
                    );
                    next += 1;
                    break;
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    // The hung area's external program (nft, scontrol...) dies with it.
                    crate::host::exec::kill_running();
                    let seconds = wait.as_secs_f64();
                    findings.push(
                        Check::new(area.name(), area)
                            .expected(format!("the {area} checks finish within {seconds:.1} s"))
                            .error(format!(
                                "the {area} checks did not finish within {seconds:.1} s (hung); they were abandoned"
                            )),
                    );
                    next += 1;
                    if Instant::now() >= deadline {
                        for &area in &areas[next..] {
                            findings.push(
                                Check::new(area.name(), area)
                                    .expected("the area's checks run")
                                    .error(format!(
                                        "not run: the whole run's limit of {:.1} s was spent",
                                        limits.total.as_secs_f64()
                                    )),
                            );
                        }
                        return (findings, None);
                    }
                    break;
                }
            }
        }
        if finished {
            // It has sent its last area and is returning: joining it does not wait.
            boot_sysctls = worker.join().ok().flatten();
        }
    }
    (findings, boot_sysctls)
}

/// A thread that audits `areas` in order with its own context, sending each area's findings;
/// it returns what its context read of the sysctl files, if anything.
fn spawn_worker(
    root: &Root,
    profile: &Profile,
    options: &AuditOptions,
    areas: Vec<Area>,
) -> (
    mpsc::Receiver<Vec<Finding>>,
    thread::JoinHandle<Option<BootSysctls>>,
) {
    let (tx, rx) = mpsc::channel();
    let (root, profile, options) = (root.clone(), profile.clone(), options.clone());
    let worker = thread::spawn(move || {
        let ctx = Context::new(&root, &profile, &options);
        for area in areas {
            if tx.send(run(&ctx, &[area])).is_err() {
                return None;
            }
        }
        ctx.boot_sysctls.into_inner()
    });
    (rx, worker)
}

/// The reason a key matters: the profile's own words, else the check's.
fn why(ctx: &Context, area: Area, key: &str) -> String {
    ctx.profile
        .get(area, key)
        .and_then(|s| s.why.clone())
        .or_else(|| {
            keys(area)
                .iter()
                .find(|k| k.matches(key))
                .map(|k| k.why.to_string())
        })
        .unwrap_or_default()
}

/// The check of profile setting `key`: the key as id, its rule as expected, and the
/// profile's reason for it (else the check's) as why.
pub(crate) fn setting_check(ctx: &Context, area: Area, key: &str, setting: &Setting) -> Check {
    Check::new(key, area)
        .expected(setting.rule.describe())
        .why(why(ctx, area, key))
}

/// `value` judged by `setting`'s rule, `actual` being what the report shows and `fix` what
/// makes it pass (a text, or a remedy worked out from the verdict: see [`Fixing`]): the
/// rule's verdict, with the rule's own complaint as the message when it cannot compare them.
pub(crate) fn by_rule(
    check: &Check,
    setting: &Setting,
    value: &str,
    actual: impl Into<String>,
    fix: impl Fixing,
) -> Finding {
    let (status, problem) = setting.status_for(value);
    let check = match problem {
        Some(problem) => check.clone().why(problem),
        None => check.clone(),
    };
    typed(check.judge(status, actual, fix), value)
}

/// The judged value, typed for scripts, beside the text the report shows.
fn typed(finding: Finding, value: &str) -> Finding {
    Finding {
        actual_value: typed::value(value, &finding.id),
        ..finding
    }
}

/// [`by_rule`] for a value whose reason starts with where it was `found` (`sep` after it),
/// shown as judged: when the rule cannot compare, its complaint replaces only the reason, so
/// the finding still says where the value came from.
pub(crate) fn by_rule_found(
    check: Check,
    setting: &Setting,
    found: impl std::fmt::Display,
    sep: &str,
    value: String,
    fix: impl Fixing,
) -> Finding {
    let (status, problem) = setting.status_for(&value);
    let check = match problem {
        Some(problem) => check.why(problem),
        None => check,
    };
    let finding = check.found(found, sep).judge(status, value.clone(), fix);
    typed(finding, &value)
}

/// [`by_rule`] for a value the report shows just as it was judged (a speed, an MTU).
pub(crate) fn value_by_rule(
    check: &Check,
    setting: &Setting,
    value: impl ToString,
    fix: impl Fixing,
) -> Finding {
    let value = value.to_string();
    by_rule(check, setting, &value, value.clone(), fix)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn skip_ids() {
        assert_eq!(parse_skip_id(" vm.swappiness "), Ok("vm.swappiness".into()));
        assert_eq!(parse_skip_id(" \t"), Err(BadSkipId::Empty));
        assert_eq!(parse_skip_id("vm swappiness"), Err(BadSkipId::Spaces));
        assert_eq!(parse_skip_id("vm.\u{7}x"), Err(BadSkipId::Spaces));
    }

    #[test]
    fn every_area_has_one_registry_entry_in_report_order() {
        let registered: Vec<Area> = AREAS.iter().map(|a| a.area).collect();
        assert_eq!(registered, Area::ALL);
    }

    #[test]
    fn a_limited_run_hands_back_the_boot_sysctls_its_areas_read() {
        let tree = crate::testing::Tree::with(&[(
            "/etc/sysctl.d/90-gputune.conf",
            "net.core.somaxconn = 4096\n",
        )]);
        let root = tree.root();
        let profile = crate::testing::profile(&root, "base");
        let options = AuditOptions {
            persisted: true,
            ..AuditOptions::default()
        };
        let limits = TimeLimits {
            per_area: Duration::from_secs(60),
            total: Duration::from_secs(60),
        };
        let run = |only| run_limited_with_boot(&root, &profile, &options, only, limits).1;
        let Some(Ok(boot)) = run(&[Area::Network]) else {
            panic!("the network area reads the sysctl files");
        };
        assert_eq!(boot["net.core.somaxconn"].value, "4096");
        assert!(
            run(&[Area::Limits]).is_none(),
            "limits reads no sysctl file"
        );
    }

    #[test]
    fn a_hardware_area_whose_inventory_is_unreadable_says_so_once() {
        let tree = crate::testing::Tree::new();
        tree.dir("/sys/devices/system/node/node0/cpulist");
        for area in [Area::Numa, Area::Nic, Area::Gpu, Area::Platform] {
            let options = AuditOptions::default();
            let probes = Probes::absent("in a test");
            let f = crate::testing::audit(&tree.root(), "base", &options, probes, area);
            let ids: Vec<&String> = f.keys().collect();
            assert_eq!(ids, [&format!("{area}.inventory")]);
            let only = &f[&format!("{area}.inventory")];
            assert_eq!(only.status, crate::finding::Status::Error);
            crate::testing::assert_contains(&only.message, "cpulist: is a directory");
        }
    }
}
