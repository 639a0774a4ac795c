//! Which cgroup is judged: a path (`--cgroup`, a profile's slice) or a process's membership
//! per hierarchy.

use super::*;

/// The cgroup being judged.
pub(super) struct Target {
    /// Appended to finding ids (`@training.slice`) so several targets stay apart.
    pub(super) suffix: String,
    pub(super) label: String,
    pub(super) kind: TargetKind,
    /// A profile's slice may not exist until a job starts: absent is a skip, not an error.
    pub(super) optional: bool,
}

/// Where a key is judged: one target cgroup, on this node's cgroup layout.
pub(super) struct Scope<'a> {
    pub(super) ctx: &'a Context<'a>,
    pub(super) layout: &'a Layout,
    pub(super) target: &'a Target,
}

pub(super) enum TargetKind {
    /// One cgroup path for every controller.
    Path(String),
    /// A process's membership, per hierarchy.
    Process(Vec<Membership>),
}

impl Target {
    /// The check of setting `key` for this target: its id carries the target's suffix.
    pub(super) fn check(&self, ctx: &Context, key: &str, setting: &Setting) -> Check {
        crate::checks::setting_check(ctx, Area::Cgroup, key, setting).suffixed(&self.suffix)
    }

    /// The finding when the target's cgroup does not exist: a skip for a slice not active
    /// yet, an error for the cgroup the user named or the process is in.
    pub(super) fn absent(&self, check: &Check, problem: impl std::fmt::Display) -> Finding {
        if self.optional {
            check.skip(format!("{problem}: {} is not active", self.label))
        } else {
            check.error(problem.to_string())
        }
    }

    pub(super) fn path(&self, layout: &Layout, controller: &str) -> Option<String> {
        match &self.kind {
            TargetKind::Path(p) => Some(p.clone()),
            TargetKind::Process(lines) => {
                hierarchy::path_of(layout, lines, controller).map(str::to_string)
            }
        }
    }
}
