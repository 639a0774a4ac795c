//! Apply's and rollback's policy, beside the transaction it drives: who may write, which
//! findings become changes, when to refuse (unreadable checks, an interrupted apply, no one
//! to confirm), and what to restore when a write fails. The command line only turns flags
//! into a [`Request`] and maps the outcome to an exit code.

use super::created_dirs;
use super::error::Refusal;
use super::io::{HostIo, has_live_kernel};
use super::journal::{self, Applied, Event, Journal, Phase};
use super::lock;
use super::nft::Nft;
use super::operator::Operator;
use super::plan::{self, PlanOptions};
use super::render;
use super::transaction::{self, Restored};
use crate::checks::{self, AuditOptions, Context};
use crate::error::{Error, ExitCode, Result};
use crate::finding::{Area, Finding, Status};
use crate::host::Root;
use crate::image::Mode;

/// What `gputune apply` was asked to do (its flags, once parsed).
#[derive(Debug, Clone, Default)]
pub struct Request {
    /// Profile name or TOML file.
    pub profile: String,
    /// Show the plan and change nothing.
    pub dry_run: bool,
    /// Apply without asking.
    pub yes: bool,
    /// Write live values only.
    pub no_persist: bool,
    /// Only the changes of these areas.
    pub only: Vec<Area>,
    /// Write live values even under a mounted procfs.
    pub live: bool,
    /// Check ids whose changes are left alone.
    pub skip: Vec<String>,
}

/// `gputune apply`: audit, plan, confirm, journal, execute, with the operator and nftables
/// given, so tests can stand in for both.
pub fn apply_with(
    args: &Request,
    root: &Root,
    operator: &dyn Operator,
    nft: &dyn Nft,
) -> Result<ExitCode> {
    crate::image::check_root(root)?;
    let mode = Mode::detect(root, false);
    let image = mode == Mode::Image;
    if image && args.no_persist {
        return Err(Error::Usage(format!(
            "--no-persist writes live values only, and the image {} has no running kernel: leave it out to write the image's files",
            root.dir().display()
        )));
    }
    if crate::image::has_mounted_proc(root) && !args.live {
        return Err(Refusal::MountedProc {
            proc: root.path("/proc"),
        }
        .into());
    }
    let (profile, _) = crate::checks::chosen::load_profile(Some(&args.profile), root)?;
    if !args.dry_run {
        may_write(root, image, operator)?;
    }
    let state = state_root(root, image, operator);
    if image && !args.dry_run {
        make_state_dir(&state)?;
    }
    // The lock comes before the audit, so the plan is made from facts no other apply
    // is changing.
    let _lock = if args.dry_run {
        None
    } else {
        Some(lock::acquire(&state, lock::WAIT)?)
    };
    let options = AuditOptions {
        persisted: image,
        mode,
        skip: args.skip.clone(),
        ..AuditOptions::default()
    };
    let ctx = Context::new(root, &profile, &options);
    let findings = checks::run(&ctx, &args.only);
    crate::checks::chosen::warn_unmatched_skips(&args.skip, &findings);
    // A check that could not be read might hide a change: refuse rather than half-apply.
    let unjudged: Vec<String> = findings
        .iter()
        .filter(|f| f.status == Status::Error)
        .map(|f| format!("{}: {}", f.id, f.message))
        .collect();
    if !unjudged.is_empty() {
        return Err(Refusal::Unjudged(unjudged).into());
    }
    // A skip that keeps its change is a setting read-only here: the plan says it is left out.
    let (fixable, manual): (Vec<_>, Vec<_>) = findings
        .into_iter()
        .filter(|f| {
            matches!(f.status, Status::Fail | Status::Warn)
                || (f.status == Status::Skip && f.change.is_some())
        })
        .partition(|f| f.change.is_some());
    let changes = plan::dedup(fixable.into_iter().filter_map(|f| f.change));

    let live_kernel = has_live_kernel(root);
    let io = HostIo {
        root,
        nft: live_kernel.then_some(nft),
    };
    let previous = journal::load(&state)?;
    if !args.dry_run
        && previous
            .as_ref()
            .is_some_and(|j| j.phase == Phase::Applying)
    {
        return Err(Refusal::Interrupted {
            journal: state.path(journal::PATH),
        }
        .into());
    }
    let plan_options = PlanOptions {
        persist: !args.no_persist,
        live_kernel,
        image,
    };
    let plan = plan::build(&changes, root, &io, plan_options)?;
    crate::say::write(&render::plan(&profile.name, &plan));

    if plan.steps.is_empty() {
        if manual.is_empty() && plan.left_out.is_empty() {
            crate::say!(
                "nothing to change: the node already matches profile {}",
                profile.name
            );
        } else {
            crate::say!("nothing gputune can change");
        }
        return Ok(report_manual(&manual));
    }
    if args.dry_run {
        crate::say!("dry run: nothing was changed");
        return Ok(report_manual(&manual));
    }
    if !args.yes {
        if !operator.can_ask() {
            return Err(Error::Usage(
                "standard input is not a terminal, so apply cannot ask for confirmation: pass --yes to apply, or --dry-run to only see the plan".into(),
            ));
        }
        let question = format!("Apply these {} changes?", plan.steps.len());
        let yes = operator.confirm(&question).map_err(Refusal::Answer)?;
        if !yes {
            crate::say!("not applied: nothing was changed");
            return Ok(ExitCode::Ok);
        }
    }

    created_dirs::remember(&state, root, &plan.steps).map_err(Refusal::CreatedDirs)?;
    let mut record = Journal::begin(previous.as_ref(), &profile.name, &plan.steps);
    record.applies.push(Applied {
        profile: profile.name.clone(),
        changes: plan.steps.len(),
        by: Event::now(),
    });
    journal::save(&state, &record).map_err(Refusal::Begin)?;
    match transaction::execute(&plan.steps, &io) {
        Ok(()) => {
            record.phase = Phase::Applied;
            journal::save(&state, &record).map_err(Refusal::Mark)?;
            crate::say!(
                "applied and verified {} changes of profile {}; the previous values are in {}; undo with `gputune rollback{}`",
                plan.steps.len(),
                profile.name,
                state.path(journal::PATH).display(),
                if image {
                    format!(" --root {}", root.dir().display())
                } else {
                    String::new()
                }
            );
            Ok(report_manual(&manual))
        }
        Err(failure) => {
            if failure.unrestored.is_empty() {
                journal::restore(&state, previous.as_ref())?;
                Err(Refusal::Restored {
                    step: failure.step,
                    of: plan.steps.len(),
                    error: failure.error,
                }
                .into())
            } else {
                Err(Refusal::Unrestored {
                    step: failure.step,
                    of: plan.steps.len(),
                    error: failure.error,
                    unrestored: failure.unrestored,
                    journal: state.path(journal::PATH),
                }
                .into())
            }
        }
    }
}

/// Lists what apply cannot fix (no mechanical change, or a file gputune may not write);
/// exit 1 when any of it fails the profile, as audit would.
fn report_manual(manual: &[Finding]) -> ExitCode {
    if manual.is_empty() {
        return ExitCode::Ok;
    }
    crate::say!("still to fix by hand ({}):", manual.len());
    for f in manual {
        crate::say!("  {} {}: {}", f.status.name(), f.id, f.fix);
    }
    if manual.iter().any(|f| f.status == Status::Fail) {
        ExitCode::Findings
    } else {
        ExitCode::Ok
    }
}

/// Rollback with the operator and nftables given.
pub fn rollback_with(root: &Root, operator: &dyn Operator, nft: &dyn Nft) -> Result<ExitCode> {
    crate::image::check_root(root)?;
    let image = Mode::detect(root, false) == Mode::Image;
    may_write(root, image, operator)?;
    let state = state_root(root, image, operator);
    if image {
        // No state directory: no apply ever ran on this image from here.
        if std::fs::symlink_metadata(state.dir())
            .is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound)
        {
            crate::say!(
                "nothing to roll back: there is no {}",
                state.path(journal::PATH).display()
            );
            return Ok(ExitCode::Ok);
        }
        make_state_dir(&state)?;
    }
    let _lock = lock::acquire(&state, lock::WAIT)?;
    let Some(mut record) = to_roll_back(journal::load(&state)?, &state) else {
        return Ok(ExitCode::Ok);
    };
    let io = HostIo {
        root,
        nft: has_live_kernel(root).then_some(nft),
    };
    let mut failed = Vec::new();
    for result in transaction::restore(&record.steps, &io) {
        match result {
            Ok(Restored::Changed { target, from, to }) => {
                crate::say!("restored {target}: {from} -> {to}")
            }
            Ok(Restored::Unchanged { target }) => {
                crate::say!("unchanged {target}: already as before")
            }
            Ok(Restored::LeftAlone { target }) => crate::say!(
                "left alone {target}: it no longer carries gputune's header, so it is someone else's file now"
            ),
            Err(e) => failed.push(e.to_string()),
        }
    }
    if !failed.is_empty() {
        return Err(Refusal::Rollback(failed).into());
    }
    created_dirs::remove(&state, root);
    record.phase = Phase::RolledBack;
    record.rolled_back = Some(Event::now());
    journal::save(&state, &record)?;
    crate::say!(
        "rolled back {} targets changed by profile {}",
        record.steps.len(),
        record.profiles.join(", ")
    );
    Ok(ExitCode::Ok)
}

/// The journal rollback (or its preview) works from, or `None` after saying why there is
/// nothing to roll back: no journal, or the last apply already rolled back.
fn to_roll_back(record: Option<Journal>, state: &Root) -> Option<Journal> {
    let Some(record) = record else {
        crate::say!(
            "nothing to roll back: there is no {}",
            state.path(journal::PATH).display()
        );
        return None;
    };
    if record.phase == Phase::RolledBack {
        crate::say!("nothing to roll back: the last apply was already rolled back");
        return None;
    }
    Some(record)
}

/// `rollback --dry-run`: what rollback would do to each target, last applied first (the
/// order rollback restores in), and the directories it would remove; changes nothing, takes
/// no lock and needs no root, as `apply --dry-run`.
pub(crate) fn rollback_preview(
    root: &Root,
    operator: &dyn Operator,
    nft: &dyn Nft,
) -> Result<ExitCode> {
    use crate::apply::target::Target;
    use crate::say::clean_line;
    crate::image::check_root(root)?;
    let image = Mode::detect(root, false) == Mode::Image;
    let state = state_root(root, image, operator);
    let journal_path = state.path(journal::PATH);
    let record = if image
        && std::fs::symlink_metadata(state.dir())
            .is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound)
    {
        None
    } else {
        journal::load(&state)?
    };
    let Some(record) = to_roll_back(record, &state) else {
        return Ok(ExitCode::Ok);
    };
    let io = HostIo {
        root,
        nft: has_live_kernel(root).then_some(nft),
    };
    let mut out = format!(
        "rollback plan for profile {}: {} targets, from {}\n",
        clean_line(&record.profiles.join(", ")),
        record.steps.len(),
        journal_path.display()
    );
    let mut unreadable = Vec::new();
    for step in record.steps.iter().rev() {
        let label = clean_line(&step.target.label());
        let current = match crate::apply::io::Io::read(&io, &step.target) {
            Ok(state) => state,
            Err(e) => {
                unreadable.push(format!("{label}: {}", clean_line(&e.to_string())));
                out.push_str(&format!(
                    "  {label}: cannot read it ({})\n",
                    clean_line(&e.to_string())
                ));
                continue;
            }
        };
        let file = matches!(step.target, Target::File(_));
        match transaction::decide(step, &current) {
            Restored::Unchanged { .. } => {
                out.push_str(&format!("  unchanged {label}: already as before\n"))
            }
            Restored::LeftAlone { .. } => out.push_str(&format!(
                "  left alone {label}: it no longer carries gputune's header, so it is someone else's file now\n"
            )),
            Restored::Changed { from, to, .. } => {
                let verb = match (&step.before, file) {
                    (crate::apply::target::State::Absent, true) => "remove",
                    (_, true) => "restore file",
                    _ => "restore",
                };
                out.push_str(&format!(
                    "  {verb} {label}: {} -> {}\n",
                    clean_line(&from),
                    clean_line(&to)
                ));
                if file {
                    out.push_str(&render::clean_diff(&render::diff(&current, &step.before)));
                }
            }
        }
    }
    for dir in created_dirs::pending(&state, root) {
        out.push_str(&format!(
            "  remove directory {}: apply created it (kept if anything else is in it)\n",
            clean_line(&dir)
        ));
    }
    crate::say::write(&out);
    if !unreadable.is_empty() {
        return Err(Refusal::Unreadable(unreadable).into());
    }
    crate::say!("dry run: nothing was changed");
    Ok(ExitCode::Ok)
}

/// Root may write anywhere; in an image, so may the user who owns the tree (rootless image
/// builds), since apply writes only files there.
fn may_write(root: &Root, image: bool, operator: &dyn Operator) -> Result<()> {
    if operator.is_root() {
        return Ok(());
    }
    if image {
        use std::os::unix::fs::MetadataExt;
        let euid = nix::unistd::geteuid().as_raw();
        let owner = std::fs::metadata(root.dir()).map(|m| m.uid()).ok();
        if owner == Some(euid) {
            return Ok(());
        }
        return Err(Refusal::NotOwner(root.dir().to_path_buf()).into());
    }
    Err(Refusal::NotRoot.into())
}

/// Where the journal and lock live: the node's own `/var/lib/gputune` and `/run`, or, for an
/// image, a directory outside it keyed by the image path, so nothing of gputune's state is
/// baked into the image and rolled back on every node booted from it.
pub(crate) fn state_root(root: &Root, image: bool, operator: &dyn Operator) -> Root {
    if image {
        Root::new(crate::image::state_dir(root.dir(), operator.is_root()))
    } else {
        root.clone()
    }
}

/// Creates an image's state directory (the caller's own, 0700) or refuses one that another
/// user could change: a host that never ran gputune has none.
fn make_state_dir(state: &Root) -> Result<()> {
    Ok(crate::image::state::ensure(state.dir())?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apply::tests::MemoryNft;
    use crate::testing::{Tree, assert_contains};

    /// Root at a script: may write, cannot be asked.
    struct Admin;

    impl Operator for Admin {
        fn is_root(&self) -> bool {
            true
        }
        fn can_ask(&self) -> bool {
            false
        }
        fn confirm(&self, _: &str) -> std::io::Result<bool> {
            Ok(false)
        }
    }

    #[test]
    fn an_interrupted_apply_is_refused_until_rolled_back_but_may_be_previewed() {
        let tree = Tree::with(&[("/proc/sys/vm/swappiness", "60\n")]);
        let profile = tree.profile(
            "/profile.toml",
            "description = \"t\"\n[memory]\n\"vm.swappiness\" = { max = 10 }\n",
        );
        let root = tree.root();
        tree.dir("/var/lib/gputune");
        // An earlier apply that died between its journal and its last write.
        journal::save(&root, &Journal::begin(None, "earlier", &[])).unwrap();
        let nft = MemoryNft::default();
        let request = Request {
            profile,
            yes: true,
            ..Request::default()
        };

        let err = apply_with(&request, &root, &Admin, &nft).unwrap_err();
        assert_eq!(err.exit_code(), ExitCode::Runtime, "{err}");
        assert_contains(&err.to_string(), "an earlier apply was interrupted");
        assert_contains(&err.to_string(), "run `gputune rollback` first");
        let swappiness = std::fs::read_to_string(tree.path("/proc/sys/vm/swappiness")).unwrap();
        assert_eq!(swappiness, "60\n", "nothing is written");
        assert_eq!(journal::load(&root).unwrap().unwrap().profiles, ["earlier"]);

        // A dry run changes nothing, so it may still show what apply would do.
        let preview = Request {
            dry_run: true,
            ..request
        };
        assert_eq!(
            apply_with(&preview, &root, &Admin, &nft).unwrap(),
            ExitCode::Ok
        );
    }
}
