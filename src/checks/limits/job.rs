//! The resource limits a Slurm job will get, judged when slurmd runs gputune (a
//! `HealthCheckProgram` or a `Prolog`): then this process's own limits are slurmd's, which
//! no job has unless slurm.conf stops propagation. A job's soft limit of a propagated
//! resource is the submitting session's (limits.conf and limits.d), lowered to slurmd's hard
//! limit; one that is not propagated is slurmd's own.

use crate::finding::{Area, Finding, Remedy, Status};
use crate::profile::amount::Amount;
use crate::profile::setting::Setting;

use super::slurm_conf::{Propagation, SlurmConfError};
use super::{LimitsFiles, file_amount, limit_fix, read_rlimit, show, systemd_value};
use crate::checks::{Context, by_rule, setting_check};
use crate::probe::limits::{LimitsProbe, Resource};

/// Whose resource limits the live limit checks judge.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum LimitsOf {
    /// This process's: right when it is the job (a task of `srun`, a batch script,
    /// `health --as-job`) or a person's shell outside Slurm.
    #[default]
    ThisProcess,
    /// A Slurm job's, when slurmd runs gputune: `slurm_conf` is `SLURM_CONF` when set.
    SlurmJob { slurm_conf: Option<String> },
}

/// The `ulimit.<resource>` finding for a Slurm job; `own` is read from this process, whose
/// limits are slurmd's since slurmd started it.
pub(super) fn rlimit(
    ctx: &Context,
    probe: &dyn LimitsProbe,
    files: &LimitsFiles,
    propagation: &Result<Propagation, SlurmConfError>,
    resource: Resource,
    key: &str,
    setting: &Setting,
) -> Finding {
    let check = setting_check(ctx, Area::Limits, key, setting);
    let propagation = match propagation {
        Ok(p) => p,
        Err(e) => return check.error(format!("slurm.conf: {e}")),
    };
    let own = match read_rlimit(probe, resource, &check) {
        Ok(limit) => limit,
        Err(finding) => return *finding,
    };
    let name = resource.name();
    if !propagation.carries(name) {
        let judged = own.soft.to_string();
        let actual = format!(
            "soft {}, hard {} (slurmd's, which a job keeps: {} is not propagated)",
            show(resource, own.soft),
            show(resource, own.hard),
            name.to_ascii_uppercase()
        );
        let check = check.noted(format!(
            "judged as a Slurm job gets it, by {}",
            propagation.source
        ));
        return by_rule(&check, setting, &judged, actual, || {
            slurmd_fix(resource, setting, &judged, "a job inherits slurmd's limit")
        });
    }
    let session = super::pam::resolve(
        &files.entries,
        &super::pam::Subject::ordinary(),
        resource.name(),
    );
    let check = check.noted(format!(
        "judged as a Slurm job gets it: the submitting session's soft limit, lowered to slurmd's hard limit ({}); the submitting hosts are taken to share this node's limits.conf and limits.d",
        propagation.source
    ));
    let Some(soft) = session.soft else {
        // Nothing known of the session but slurmd's hard limit, which caps every job.
        let cap = own.hard.to_string();
        let (status, _) = setting.status_for(&cap);
        if status == Status::Pass {
            return check.skip(format!(
                "a job gets the soft {name} limit of the session that submits it ({}), and no line of limits.conf or limits.d sets it here: see the .login check",
                propagation.source
            ));
        }
        let actual = format!(
            "at most {} (slurmd's hard limit caps every job's soft limit)",
            show(resource, own.hard)
        );
        return check.judge(status, actual, || {
            slurmd_fix(
                resource,
                setting,
                &cap,
                "slurmd's hard limit caps every job",
            )
        });
    };
    let session_soft = file_amount(resource, soft.value);
    let session_soft = session.hard.as_ref().map_or(session_soft, |h| {
        session_soft.min(file_amount(resource, h.value))
    });
    let job = session_soft.min(own.hard);
    let judged = job.to_string();
    let capped = own.hard < session_soft;
    let actual = if capped {
        format!(
            "soft {}: the submitting session's {} ({}) lowered to slurmd's hard limit",
            show(resource, job),
            show(resource, session_soft),
            soft.place
        )
    } else {
        format!(
            "soft {} (the submitting session's, {})",
            show(resource, job),
            soft.place
        )
    };
    by_rule(&check, setting, &judged, actual, || {
        if capped {
            slurmd_fix(
                resource,
                setting,
                &judged,
                "slurmd's hard limit caps every job",
            )
        } else {
            limit_fix(resource, setting, &judged)
        }
    })
}

/// The fix when slurmd's own limit is what a job gets: raise it in slurmd's unit.
fn slurmd_fix(resource: Resource, setting: &Setting, judged: &str, why: &str) -> Option<Remedy> {
    let target = Amount::parse(&setting.rule.target(judged)?).ok()?;
    Some(Remedy::by_hand(format!(
        "{why}: `systemctl edit slurmd`, add `[Service]` and `{}={}`, then `systemctl restart slurmd`",
        resource.systemd_setting(),
        systemd_value(resource, target),
    )))
}
