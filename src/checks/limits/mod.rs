//! Limits that break NCCL jobs at start-up: resource limits (live, and what a new login
//! session gets from limits.conf and limits.d), `/dev/shm` size and free space, and
//! systemd-logind's `RemoveIPC=`.

pub(crate) mod job;
pub mod logind;
pub mod pam;
pub mod shm;
pub(crate) mod slurm_conf;

use crate::finding::{Area, Change, Check, Finding, Remedy, Status};
use crate::probe_error::{Probe, ProbeError};
use crate::profile::amount::Amount;
use crate::profile::setting::{KeySpec, Setting, ValueKind::Number, ValueKind::Text};

use super::{Context, by_rule, setting_check};
use crate::probe::limits::{LimitsProbe, Resource, Rlimit};
pub(crate) use job::LimitsOf;

/// The file `apply` writes limits to (DESIGN.md).
pub(crate) const GPUTUNE_LIMITS_FILE: &str = "/etc/security/limits.d/90-gputune.conf";

/// Keys a profile may set in `[limits]`.
pub(crate) const KEYS: &[KeySpec] = &[
    KeySpec {
        key: "ulimit.memlock",
        kind: Number,
        why: "RDMA registers (pins) NCCL's buffers; a small RLIMIT_MEMLOCK makes ibv_reg_mr fail and NCCL fall back to sockets or abort (NCCL troubleshooting guide).",
    },
    KeySpec {
        key: "ulimit.nofile",
        kind: Number,
        why: "Every NCCL socket, data-loader worker pipe and checkpoint shard takes a file descriptor; running out fails the job at start-up.",
    },
    KeySpec {
        key: "ulimit.stack",
        kind: Number,
        why: "An unlimited stack makes every thread reserve a huge stack, which crashes NCCL's threads (NCCL troubleshooting guide: keep 8192 KB).",
    },
    KeySpec {
        key: "dev_shm.size",
        kind: Number,
        why: "NCCL puts its intra-node buffers in /dev/shm; container defaults of 64 MiB fail with `failed to extend /dev/shm/nccl-...` (NCCL troubleshooting guide).",
    },
    KeySpec {
        key: "dev_shm.free",
        kind: Number,
        why: "A /dev/shm filled by stale segments or data loaders fails NCCL's shared-memory transport the same way a small one does.",
    },
    KeySpec {
        key: "logind.RemoveIPC",
        kind: Text,
        why: "With RemoveIPC=yes (systemd's default) logind deletes a user's shared memory when their last session closes, under a job still running (NCCL troubleshooting guide: set RemoveIPC=no).",
    },
];

/// Judges the limits with the live facts of this process and node (`ctx.probes.limits`):
/// this process's resource limits, or a Slurm job's when slurmd runs gputune
/// ([`LimitsOf`]).
pub(crate) fn audit(ctx: &Context) -> Vec<Finding> {
    let probe = ctx.probes.limits.as_ref();
    let mut findings = Vec::new();
    let limits_files = read_limits_files(ctx);
    // Only a live node has a job to judge; an image's limits are its files (`.login`).
    let propagation = match &ctx.options.limits_of {
        LimitsOf::SlurmJob { slurm_conf } if live_facts(ctx).is_none() => {
            Some(slurm_conf::read(ctx.root, slurm_conf.as_deref()))
        }
        _ => None,
    };
    for resource in Resource::ALL {
        let key = format!("ulimit.{}", resource.name());
        if let Some(setting) = ctx.profile.get(Area::Limits, &key) {
            let live = match &propagation {
                Some(propagation) => job::rlimit(
                    ctx,
                    probe,
                    &limits_files,
                    propagation,
                    resource,
                    &key,
                    setting,
                ),
                _ => live_rlimit(ctx, probe, resource, &key, setting),
            };
            findings.push(live);
            findings.push(login_rlimit(ctx, &limits_files, resource, &key, setting));
        }
    }
    if let Some(setting) = ctx.profile.get(Area::Limits, "dev_shm.size") {
        findings.push(shm::size(ctx, probe, setting));
    }
    if let Some(setting) = ctx.profile.get(Area::Limits, "dev_shm.free") {
        findings.push(shm::free(ctx, probe, setting));
    }
    if let Some(setting) = ctx.profile.get(Area::Limits, "logind.RemoveIPC") {
        findings.push(remove_ipc(ctx, setting));
    }
    findings
}

/// Bytes as people read them: `8 MiB`, `64 KiB`, `1536 B`, `unlimited`.
pub(crate) fn human(amount: Amount) -> String {
    match amount {
        Amount::Unlimited => "unlimited".into(),
        Amount::Finite(n) => {
            for (shift, unit) in [(40, "TiB"), (30, "GiB"), (20, "MiB"), (10, "KiB")] {
                let size = 1i128 << shift;
                if n >= size {
                    return if n % size == 0 {
                        format!("{} {unit}", n / size)
                    } else {
                        format!("{:.1} {unit}", n as f64 / size as f64)
                    };
                }
            }
            format!("{n} B")
        }
    }
}

fn show(resource: Resource, amount: Amount) -> String {
    if resource.is_bytes() {
        human(amount)
    } else {
        amount.to_string()
    }
}

/// `target` in limits.conf's unit for `resource` (KiB for memory, rounded up).
fn file_value(resource: Resource, target: Amount) -> String {
    match target {
        Amount::Unlimited => "unlimited".to_string(),
        Amount::Finite(n) => {
            let unit = i128::from(resource.file_unit());
            ((n + unit - 1) / unit).to_string()
        }
    }
}

/// `target` as a systemd unit's `Limit*=` takes it (`infinity`, `64K`, `1048576`).
fn systemd_value(resource: Resource, target: Amount) -> String {
    match (target, file_value(resource, target)) {
        (Amount::Unlimited, _) => "infinity".to_string(),
        (_, value) if resource.is_bytes() => format!("{value}K"),
        (_, value) => value,
    }
}

/// A limits.conf value of `resource` in bytes or a count.
fn file_amount(resource: Resource, value: pam::Value) -> Amount {
    match value {
        pam::Value::Unlimited => Amount::Unlimited,
        pam::Value::Finite(n) => Amount::Finite(i128::from(n) * i128::from(resource.file_unit())),
    }
}

/// The fix shared by the live and the login finding: a line in gputune's limits file.
fn limit_fix(resource: Resource, setting: &Setting, judged: &str) -> Option<Remedy> {
    let target = Amount::parse(&setting.rule.target(judged)?).ok()?;
    let value = file_value(resource, target);
    let name = resource.name();
    let fix = format!(
        "add `* - {name} {value}` to {GPUTUNE_LIMITS_FILE} (new login sessions of every user but root; \
         for a systemd service set {}={} in its unit), then start a new session",
        resource.systemd_setting(),
        systemd_value(resource, target)
    );
    Some(Remedy::applied(
        fix,
        Change::Limit {
            domain: "*".into(),
            kind: "-".into(),
            item: name.into(),
            value,
        },
    ))
}

/// This process's `resource` limit, or the finding `check` becomes when it cannot be read.
fn read_rlimit(
    probe: &dyn LimitsProbe,
    resource: Resource,
    check: &Check,
) -> Result<Rlimit, Box<Finding>> {
    probe.rlimit(resource).map_err(|e| {
        let what = format!("getrlimit({})", resource.name());
        Box::new(ProbeError::io_finding(Probe::Limits, check, &what, &e))
    })
}

fn live_rlimit(
    ctx: &Context,
    probe: &dyn LimitsProbe,
    resource: Resource,
    key: &str,
    setting: &Setting,
) -> Finding {
    let check = setting_check(ctx, Area::Limits, key, setting);
    if let Some(reason) = live_facts(ctx) {
        return check.skip(reason);
    }
    let limit = match read_rlimit(probe, resource, &check) {
        Ok(limit) => limit,
        Err(finding) => return *finding,
    };
    let judged = limit.soft.to_string();
    let actual = format!(
        "soft {}, hard {} (this process)",
        show(resource, limit.soft),
        show(resource, limit.hard)
    );
    by_rule(&check, setting, &judged, actual, || {
        limit_fix(resource, setting, &judged)
    })
}

/// Why a process's limits cannot be read for this audit, when they cannot.
fn live_facts(ctx: &Context) -> Option<&'static str> {
    if !ctx.root.is_live() {
        return Some(
            "--root is not the running node: a process's limits can only be read live (see the .login check for the files)",
        );
    }
    if ctx.options.persisted {
        return Some("--persisted judges configuration files only (see the .login check)");
    }
    None
}

/// Every line of limits.conf and limits.d, in pam_limits' reading order, and the bad lines.
struct LimitsFiles {
    entries: Vec<pam::Entry>,
    problems: Vec<String>,
    error: Option<String>,
}

fn read_limits_files(ctx: &Context) -> LimitsFiles {
    let mut files = LimitsFiles {
        entries: Vec::new(),
        problems: Vec::new(),
        error: None,
    };
    let mut paths = vec![pam::MAIN_FILE.to_string()];
    match ctx.root.list_dir(pam::DROP_IN_DIR) {
        Ok(names) => paths.extend(
            names
                .unwrap_or_default()
                .into_iter()
                .filter(|n| n.ends_with(".conf"))
                .map(|n| format!("{}/{n}", pam::DROP_IN_DIR)),
        ),
        Err(e) => files.error = Some(e.to_string()),
    }
    for path in paths {
        match ctx.root.read_optional(&path) {
            Ok(Some(text)) => {
                let (entries, problems) = pam::parse(&path, &text);
                files.entries.extend(entries);
                files.problems.extend(problems);
            }
            Ok(None) => {}
            Err(e) => files.error = Some(e.to_string()),
        }
    }
    files
}

fn login_rlimit(
    ctx: &Context,
    files: &LimitsFiles,
    resource: Resource,
    key: &str,
    setting: &Setting,
) -> Finding {
    let check = setting_check(ctx, Area::Limits, key, setting).suffixed(".login");
    if let Some(e) = &files.error {
        return check.error(e.clone());
    }
    let session = pam::resolve(&files.entries, &pam::Subject::ordinary(), resource.name());
    let to_amount = |v: pam::Value| file_amount(resource, v);
    let mut notes = Vec::new();
    let specific: Vec<String> = pam::specific_entries(&files.entries, resource.name())
        .iter()
        .map(|e| format!("{} ({})", e.place(), e.value))
        .collect();
    if !specific.is_empty() {
        notes.push(format!(
            "lines for specific users or groups, not judged here: {}",
            specific.join(", ")
        ));
    }
    if !files.problems.is_empty() {
        notes.push(format!(
            "pam_limits skips these bad lines: {}",
            files.problems.join("; ")
        ));
    }
    notes.extend(
        files
            .entries
            .iter()
            .filter(|e| e.item == resource.name())
            .filter_map(|e| e.note.clone()),
    );
    // Only a ceiling (`max`) holds whatever the login service passes on below it; a floor,
    // an exact value or a list needs the files to set the value the session really gets.
    let only_max = setting.rule.max.is_some()
        && setting.rule.min.is_none()
        && setting.rule.equals.is_none()
        && setting.rule.one_of.is_none();
    let (status, actual, judged, problem) = match &session.soft {
        Some(soft) => {
            let soft_amount = to_amount(soft.value);
            let hard_amount = session.hard.as_ref().map(|h| to_amount(h.value));
            // pam_limits (setup_limits in pam_limits.c) lowers the soft limit to the hard one
            // before setrlimit (`if (rlim_cur > rlim_max) rlim_cur = rlim_max`), and the hard
            // one is what the files set or, when they set none, what the session inherited
            // (init_limits starts from getrlimit). So the session gets min(soft, hard).
            let effective = hard_amount.map_or(soft_amount, |h| soft_amount.min(h));
            let mut judged = effective.to_string();
            let (mut status, problem) = setting.status_for(&judged);
            let hard = session.hard.as_ref().map_or("not set".to_string(), |h| {
                format!("{} ({})", show(resource, to_amount(h.value)), h.place)
            });
            let mut actual = format!(
                "soft {} ({}), hard {hard}",
                show(resource, soft_amount),
                soft.place
            );
            if effective != soft_amount {
                actual.push_str(&format!(
                    "; a session gets soft {}",
                    show(resource, effective)
                ));
                notes.insert(
                    0,
                    "pam_limits lowers a soft limit above the hard limit to the hard limit".into(),
                );
            }
            if hard_amount.is_none() && !only_max && status == Status::Pass {
                status = Status::Warn;
                notes.insert(
                    0,
                    format!(
                        "no line sets the hard limit, so the session keeps the hard limit its login service (sshd, slurmd, systemd) passes on, and that caps the soft {}: a soft value above the inherited hard limit is not granted; set both with `-`",
                        show(resource, soft_amount)
                    ),
                );
                // Nothing is known of the real value: the fix sets the rule's own target.
                judged = String::new();
            }
            (status, actual, judged, problem)
        }
        None => {
            // Nothing in the files: the session keeps what its login service passes on.
            let status = if only_max { Status::Pass } else { Status::Warn };
            notes.insert(
                0,
                "no line sets it for every user: a new session keeps what its login service (sshd, slurmd, systemd) passes on".into(),
            );
            (
                status,
                "not set in limits.conf or limits.d".to_string(),
                String::new(),
                None,
            )
        }
    };
    let check = match problem {
        Some(problem) => check.why(problem),
        None => check,
    };
    let check = notes.into_iter().fold(check, Check::noted);
    check.judge(status, actual, || limit_fix(resource, setting, &judged))
}

fn remove_ipc(ctx: &Context, setting: &Setting) -> Finding {
    let check = setting_check(ctx, Area::Limits, "logind.RemoveIPC", setting);
    let value = match logind::read(ctx.root) {
        Ok(value) => value,
        Err(e) => return check.error(e.to_string()),
    };
    let (remove, place) = match value {
        logind::RemoveIpc::NoLogind => {
            return check
                .skip("systemd-logind is not installed, so nothing removes IPC objects at logout");
        }
        logind::RemoveIpc::Set { remove, place } => (remove, place),
    };
    let word = if remove { "yes" } else { "no" };
    let actual = format!(
        "{word} ({})",
        place.unwrap_or_else(|| "systemd default".into())
    );
    by_rule(&check, setting, word, actual, || {
        let target = setting.rule.target(word).unwrap_or_else(|| "no".into());
        Some(Remedy::applied(
            format!(
                "`gputune apply`, or create /etc/systemd/logind.conf.d/90-gputune.conf with `[Login]` and `RemoveIPC={target}`, then `systemctl restart systemd-logind`"
            ),
            Change::Logind {
                key: "RemoveIPC".into(),
                value: target,
            },
        ))
    })
}

#[cfg(test)]
mod tests;
