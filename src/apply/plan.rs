//! From changes to a plan: every [`Change`] becomes the writes it needs (live knobs, the
//! nftables table, gputune's own files), each with the target's current state. Writes
//! that would change nothing are left out, which is what makes a second apply a no-op.

use crate::checks::sysctl::boot::{self, GPUTUNE_CONF};
use crate::finding::Change;
use crate::host::{Root, cmdline, sysctl};

use super::error::ApplyError;
use super::io::{Io, holds};
use super::owned::{self, KeyOf};
use super::target::{State, Step, Target};
use super::{cgroup, firewall, nft};
use crate::host::cpulist::CpuList;

/// Persisted limits.
pub(crate) const LIMITS_CONF: &str = "/etc/security/limits.d/90-gputune.conf";
/// System-wide NCCL settings (NCCL reads it at initialisation).
pub(crate) const NCCL_CONF: &str = "/etc/nccl.conf";

/// The writes of one apply, in order, and what people should know about them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    pub steps: Vec<Step>,
    pub notes: Vec<String>,
    /// Changes this node will not let apply make (a read-only sysctl), each with why.
    pub left_out: Vec<String>,
}

/// How apply writes: whether to persist, and whether the root's kernel is the running one.
#[derive(Debug, Clone, Copy)]
pub struct PlanOptions {
    pub persist: bool,
    pub live_kernel: bool,
    /// The root is an image: write only persisted files, never a live value.
    pub image: bool,
}

/// systemd-logind's drop-in for the `[Login]` settings gputune persists.
pub(crate) const LOGIND_CONF: &str = "/etc/systemd/logind.conf.d/90-gputune.conf";

/// Changes in first-seen order with duplicates removed (two checks may ask for the same).
pub(crate) fn dedup(changes: impl IntoIterator<Item = Change>) -> Vec<Change> {
    let mut out: Vec<Change> = Vec::new();
    for c in changes {
        if !out.contains(&c) {
            out.push(c);
        }
    }
    out
}

struct FileEdit {
    path: String,
    preamble: &'static str,
    key_of: KeyOf,
    entries: Vec<(String, String)>,
}

#[derive(Default)]
struct Builder {
    live: Vec<(String, Target, String)>,
    files: Vec<FileEdit>,
    ports: Vec<(u16, u16)>,
    /// Kernel command-line parameters to persist where the boot loader reads them.
    cmdline: Vec<(String, String)>,
    notes: Vec<String>,
    left_out: Vec<String>,
    nic: super::nic::NicChanges,
}

impl Builder {
    fn file(
        &mut self,
        path: &str,
        preamble: &'static str,
        key_of: KeyOf,
        key: String,
        line: String,
    ) {
        let edit = match self.files.iter_mut().position(|f| f.path == path) {
            Some(i) => &mut self.files[i],
            None => {
                self.files.push(FileEdit {
                    path: path.to_string(),
                    preamble,
                    key_of,
                    entries: Vec::new(),
                });
                let last = self.files.len() - 1;
                &mut self.files[last]
            }
        };
        edit.entries.retain(|(k, _)| *k != key);
        edit.entries.push((key, line));
    }

    fn note(&mut self, note: String) {
        if !self.notes.contains(&note) {
            self.notes.push(note);
        }
    }

    /// `key=value` in `path`, a file that only persists (`what` names its settings): with
    /// `--no-persist` a note says it is skipped instead. Whether the line was planned.
    fn key_line(
        &mut self,
        persist: bool,
        path: &str,
        preamble: &'static str,
        what: &str,
        key: &str,
        value: &str,
    ) -> bool {
        if !persist {
            self.note(format!(
                "{key} skipped: {what} exist only in {path}, which --no-persist does not write"
            ));
            return false;
        }
        let line = format!("{key}={value}");
        self.file(
            path,
            preamble,
            owned::key_before_equals,
            key.to_string(),
            line,
        );
        true
    }
}

/// The kernel command-line parameter that sets a `/sys` knob at boot, for the knobs that
/// have one (`transparent_hugepage=` for THP `enabled`; `defrag` has none).
pub(crate) fn boot_param(path: &str) -> Option<&'static str> {
    (path == "/sys/kernel/mm/transparent_hugepage/enabled").then_some("transparent_hugepage")
}

/// The plan for `changes` on the node behind `io`; an error names the change or file that
/// cannot be planned (nothing has been written then).
pub fn build(
    changes: &[Change],
    root: &Root,
    io: &dyn Io,
    options: PlanOptions,
) -> Result<Plan, ApplyError> {
    let mut b = Builder::default();
    for change in changes {
        add(&mut b, change, root, options)?;
    }
    finish(b, root, io, options)
}

fn add(
    b: &mut Builder,
    change: &Change,
    root: &Root,
    options: PlanOptions,
) -> Result<(), ApplyError> {
    let persist = options.persist;
    match change {
        Change::Sysctl { key, value } => {
            check_word(key, "sysctl key")?;
            check_line(value, key)?;
            if !options.image
                && let Some(why) = crate::checks::sysctl::writable::read_only(root, key)
            {
                b.left_out.push(format!("{key} = {value}: {why}"));
                return Ok(());
            }
            if !options.image {
                b.live.push((
                    key.clone(),
                    Target::Knob(sysctl::host_path(key)),
                    value.clone(),
                ));
            }
            if persist {
                let line = format!("{key} = {}", sysctl::normalize(value));
                b.file(
                    GPUTUNE_CONF,
                    "",
                    owned::key_before_equals,
                    key.clone(),
                    line,
                );
            }
        }
        Change::Sysfs { path, value } => {
            if !path.starts_with("/sys/") || path.contains("..") {
                return Err(ApplyError::Refused(format!(
                    "refusing sysfs change outside /sys: `{path}`"
                )));
            }
            check_line(value, path)?;
            let param = boot_param(path);
            if let Some(param) = param {
                check_word(value, param)?;
            }
            if !options.image {
                b.live
                    .push((path.clone(), Target::Knob(path.clone()), value.clone()));
            }
            match param {
                Some(param) if persist => b.cmdline.push((param.to_string(), value.clone())),
                Some(param) => b.note(format!(
                    "{path} is set live only: the kernel resets it at boot, and {param}= on the kernel command line is what --no-persist does not write"
                )),
                None if options.image => b.note(format!("{path} = {value} is not written: an image has no running kernel and it has no kernel command-line form; set it with a systemd-tmpfiles rule")),
                None => b.note(format!(
                    "{path} is set live only: the kernel resets it at boot (persist it with a systemd-tmpfiles rule)"
                )),
            }
        }
        Change::Limit {
            domain,
            kind,
            item,
            value,
        } => {
            for (field, name) in [
                (domain, "domain"),
                (kind, "type"),
                (item, "item"),
                (value, "value"),
            ] {
                check_word(field, &format!("limits {name}"))?;
            }
            if !persist {
                b.note(format!("limit {domain} {kind} {item} skipped: limits exist only in {LIMITS_CONF}, which --no-persist does not write"));
                return Ok(());
            }
            let key = format!("{domain} {kind} {item}");
            b.file(
                LIMITS_CONF,
                "",
                owned::limits_key,
                key.clone(),
                format!("{key} {value}"),
            );
            b.note("limits apply to sessions started from now on (pam_limits reads limits.d at login); running jobs keep theirs".into());
        }
        Change::NcclEnv { key, value } => {
            if key.is_empty()
                || !key
                    .chars()
                    .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
            {
                return Err(ApplyError::Refused(format!(
                    "`{key}` is not an NCCL variable name"
                )));
            }
            check_line(value, key)?;
            if b.key_line(persist, NCCL_CONF, "", "NCCL settings", key, value) {
                b.note(format!(
                    "NCCL reads {NCCL_CONF} when a job starts; a job's own environment overrides it"
                ));
            }
        }
        Change::FirewallAccept { ports } => b.ports.extend(ports.iter().copied()),
        Change::IrqAffinity { irq, cpus } => {
            // An empty list would take the interrupt away from every CPU.
            if CpuList::parse(cpus).map_or(true, |c| c.is_empty()) {
                return Err(ApplyError::Refused(format!(
                    "`{cpus}` is not a CPU list (irq {irq})"
                )));
            }
            if options.image {
                b.note(format!("irq {irq} affinity is not written: an image has no running kernel and interrupt steering is live only"));
                return Ok(());
            }
            let path = format!("/proc/irq/{irq}/smp_affinity_list");
            b.live
                .push((format!("irq {irq}"), Target::Knob(path), cpus.clone()));
            b.note(
                "interrupt affinity is live only: it is lost at reboot, reapply after boot".into(),
            );
            if irqbalance_active(root) {
                b.note("irqbalance is enabled on this node and will move the steered interrupts again; ban them (IRQBALANCE_BANNED_CPULIST or --banirq) or stop irqbalance".into());
            }
        }
        Change::Logind { key, value } => {
            check_word(key, "logind setting")?;
            check_word(value, key)?;
            let logind = "logind settings";
            if b.key_line(persist, LOGIND_CONF, "[Login]\n", logind, key, value) && !options.image {
                b.note(format!(
                    "systemd-logind reads {LOGIND_CONF} when it restarts (`systemctl restart systemd-logind`) or at boot"
                ));
            }
        }
        Change::Cgroup { slice, key, value } => add_cgroup(b, slice, key, value, root, options)?,
        Change::Ethtool { iface, knob, value } => b.nic.add(iface, knob, *value)?,
    }
    Ok(())
}

fn add_cgroup(
    b: &mut Builder,
    slice: &str,
    key: &str,
    value: &str,
    root: &Root,
    options: PlanOptions,
) -> Result<(), ApplyError> {
    let persist = options.persist;
    check_word(slice, "slice")?;
    check_word(key, "cgroup key")?;
    check_line(value, key)?;
    if slice.contains('/') || key.contains('/') || slice.contains("..") {
        return Err(ApplyError::Refused(format!(
            "refusing cgroup change `{slice}` `{key}`: not a slice name and file"
        )));
    }
    let what = format!("{slice} {key}");
    if slice.ends_with(".scope") {
        b.note(format!("{what} is not written: a scope lives only as long as its job and cannot be persisted; set the limit on its slice or in the job's launcher"));
        return Ok(());
    }
    // An image runs no systemd now; it has systemd when the binary is installed.
    let systemd = if options.image {
        root.exists("/usr/lib/systemd/systemd") || root.exists("/lib/systemd/systemd")
    } else {
        root.exists("/run/systemd/system")
    };
    if options.image {
        if !systemd {
            b.note(format!(
                "{what} is not persisted: the image has no systemd to read a slice drop-in"
            ));
            return Ok(());
        }
        return persist_unit(b, slice, key, value, persist);
    }
    let dir = if systemd {
        cgroup::slice_dir(slice)
    } else {
        slice.to_string()
    };
    let knob = format!("/sys/fs/cgroup/{dir}/{key}");
    if cgroup::is_cgroupfs_key(key) && root.exists(&knob) {
        b.live
            .push((what.clone(), Target::Knob(knob.clone()), value.to_string()));
    } else if !systemd {
        b.note(format!("{what} is not set: the cgroup {knob} does not exist and there is no systemd here, so nothing would persist it (create the cgroup, or set it where the job starts)"));
        return Ok(());
    }
    if !systemd {
        b.note(format!("{what} is set in cgroupfs only: no systemd here, so it is not persisted and is lost when the cgroup is removed or the node reboots"));
        return Ok(());
    }
    persist_unit(b, slice, key, value, persist)
}

/// The drop-in of the slice or service `slice` that sets `key` at every start of the unit.
fn persist_unit(
    b: &mut Builder,
    slice: &str,
    key: &str,
    value: &str,
    persist: bool,
) -> Result<(), ApplyError> {
    if persist {
        let (unit, section) = if slice.ends_with(".service") {
            (slice.to_string(), "[Service]\n")
        } else {
            (cgroup::unit_name(slice), "[Slice]\n")
        };
        let path = format!("/etc/systemd/system/{unit}.d/90-gputune.conf");
        let directives = cgroup::directives(key, value).ok_or_else(|| {
            ApplyError::Refused(format!("cgroup key `{key}` has no systemd slice directive"))
        })?;
        for (name, v) in directives {
            b.file(
                &path,
                section,
                owned::key_before_equals,
                name.clone(),
                format!("{name}={v}"),
            );
        }
        b.note(format!(
            "systemd reads {path} at the next `systemctl daemon-reload` or boot"
        ));
    }
    Ok(())
}

fn finish(
    mut b: Builder,
    root: &Root,
    io: &dyn Io,
    options: PlanOptions,
) -> Result<Plan, ApplyError> {
    let mut steps = Vec::new();
    let mut want = |what: &str, target: Target, after: State| -> Result<(), ApplyError> {
        let before = io.read(&target).map_err(|e| ApplyError::during(what, e))?;
        if !holds(&target, &after, &before) {
            steps.push(Step {
                what: what.to_string(),
                target,
                before,
                after,
            });
        }
        Ok(())
    };
    for (what, target, value) in std::mem::take(&mut b.live) {
        want(&what, target, State::Present(value))?;
    }
    let (nic_steps, nic_notes) = std::mem::take(&mut b.nic).steps(root, io, options)?;
    for (what, target, after) in nic_steps {
        want(&what, target, after)?;
    }
    b.notes.extend(nic_notes);
    if !b.ports.is_empty() {
        let table = firewall_table(&b.ports, io, options)?;
        if options.live_kernel {
            want(
                "firewall ports",
                Target::NftTable,
                State::Present(table.clone()),
            )?;
        } else {
            b.note("the live firewall is left alone: --root is not the running kernel's; only the rules file is written".into());
        }
        if options.persist {
            let rules = Target::File(firewall::RULES_FILE.into());
            refuse_foreign(io, &rules)?;
            want(
                "firewall rules at boot",
                rules,
                State::Present(firewall::rules_file(&table)),
            )?;
            let unit = Target::File(firewall::UNIT_FILE.into());
            refuse_foreign(io, &unit)?;
            want("firewall unit", unit, State::Present(firewall::unit_file()))?;
            want(
                "firewall unit enabled",
                Target::Link(firewall::UNIT_LINK.into()),
                State::Present(firewall::UNIT_FILE.into()),
            )?;
        }
        b.note("nftables ends an accept only in its own table: a drop rule in another table (firewalld, iptables-nft) still drops these ports".into());
    }
    if !b.cmdline.is_empty()
        && let Some(step) = boot_cmdline(&mut b, root, io, options)?
    {
        want(&step.what, step.target, step.after)?;
    }
    for edit in &b.files {
        let target = Target::File(edit.path.clone());
        let existing = match io.read(&target)? {
            State::Present(text) => Some(text),
            State::Absent => None,
        };
        let merged = owned::merge(
            &edit.path,
            existing.as_deref(),
            edit.preamble,
            &edit.entries,
            edit.key_of,
        )
        .map_err(|e| ApplyError::Refused(e.to_string()))?;
        want(
            &format!("persist in {}", edit.path),
            target,
            State::Present(merged),
        )?;
    }
    if options.persist {
        sysctl_overrides(&mut b, root);
    }
    Ok(Plan {
        steps,
        notes: b.notes,
        left_out: b.left_out,
    })
}

/// Persists the command-line parameters where the root's boot loader reads them: gputune's
/// GRUB drop-in (a file gputune owns, planned with the others), or an edit of
/// kernel-install's `/etc/kernel/cmdline` in place (the whole command line: it cannot carry
/// gputune's header, so rollback restores it only while it still holds what apply wrote).
/// A note says which, and what makes the boot use it.
fn boot_cmdline(
    b: &mut Builder,
    root: &Root,
    io: &dyn Io,
    options: PlanOptions,
) -> Result<Option<Step>, ApplyError> {
    let params = std::mem::take(&mut b.cmdline);
    let words: Vec<String> = params.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let words = words.join(" ");
    let when = if options.image {
        "when the image boots"
    } else {
        "after a reboot (the running kernel keeps its command line until then)"
    };
    match cmdline::loader(root) {
        cmdline::Loader::Manual(why) => {
            b.note(format!("{words} is not written: {why}"));
            Ok(None)
        }
        cmdline::Loader::KernelInstall => {
            let target = Target::File(cmdline::KERNEL_CMDLINE.into());
            let State::Present(text) = io.read(&target)? else {
                b.note(format!(
                    "{words} is not written: {} disappeared while planning",
                    cmdline::KERNEL_CMDLINE
                ));
                return Ok(None);
            };
            let after = cmdline::edit_kernel_cmdline(&text, &params);
            b.note(format!(
                "{words} goes on the kernel command line in {} (kernel-install: systemd-boot or UKI); it applies {when}, once `kernel-install add` (or your UKI build) has made the boot entry from it",
                cmdline::KERNEL_CMDLINE
            ));
            Ok(Some(Step {
                what: format!("kernel command line {words}"),
                target,
                before: State::Present(text),
                after: State::Present(after),
            }))
        }
        cmdline::Loader::Grub(why) => {
            let target = Target::File(cmdline::GRUB_DROP_IN.into());
            let mut all = match io.read(&target)? {
                State::Present(text) if owned::is_ours(&text) => cmdline::drop_in_params(&text),
                _ => Vec::new(),
            };
            for (k, v) in params {
                all.retain(|(old, _)| *old != k);
                all.push((k, v));
            }
            let (key, line) = cmdline::drop_in_line(&all);
            b.file(
                cmdline::GRUB_DROP_IN,
                "",
                owned::key_before_equals,
                key,
                line,
            );
            b.note(format!(
                "{words} goes on the kernel command line through GRUB's drop-in {} ({why}); it applies {when}, once `update-grub` (grub-mkconfig) has regenerated grub.cfg",
                cmdline::GRUB_DROP_IN
            ));
            Ok(None)
        }
    }
}

/// The table with the ports it already accepts and the new ones.
fn firewall_table(
    new: &[(u16, u16)],
    io: &dyn Io,
    options: PlanOptions,
) -> Result<String, ApplyError> {
    let current = if options.live_kernel {
        io.read(&Target::NftTable)?
    } else {
        io.read(&Target::File(firewall::RULES_FILE.into()))?
    };
    let mut ports = new.to_vec();
    if let State::Present(text) = current {
        ports.extend(nft::accepted_ports(&text).map_err(|e| ApplyError::Nft(e.to_string()))?);
    }
    Ok(nft::render_table(&ports))
}

fn refuse_foreign(io: &dyn Io, target: &Target) -> Result<(), ApplyError> {
    match io.read(target)? {
        State::Present(text) if !owned::is_ours(&text) => Err(ApplyError::Refused(format!(
            "{} exists and was not written by gputune; gputune never edits files it did not create",
            target.label()
        ))),
        _ => Ok(()),
    }
}

/// Notes for sysctls a later configuration file would set back at boot.
fn sysctl_overrides(b: &mut Builder, root: &Root) {
    let Some(edit) = b.files.iter().find(|f| f.path == GPUTUNE_CONF) else {
        return;
    };
    let assignments = match boot::assignments(root) {
        Ok(a) => a,
        Err(e) => {
            b.notes.push(format!(
                "cannot check which sysctl.d files override {GPUTUNE_CONF}: {e}"
            ));
            return;
        }
    };
    let mut notes = Vec::new();
    for (key, line) in &edit.entries {
        let value = line.split_once('=').map_or("", |(_, v)| v);
        for other in boot::overriding(&assignments, key, value) {
            notes.push(format!(
                "{} sets {key} = {} and overrides {GPUTUNE_CONF} at boot; gputune does not edit files it did not create: change or remove that line",
                other.origin(),
                other.value
            ));
        }
    }
    for n in notes {
        b.note(n);
    }
}

fn check_word(text: &str, what: &str) -> Result<(), ApplyError> {
    if text.is_empty() || text.chars().any(|c| c.is_whitespace() || c.is_control()) {
        Err(ApplyError::Refused(format!(
            "{what} `{text}` must be one word"
        )))
    } else {
        Ok(())
    }
}

fn check_line(text: &str, what: &str) -> Result<(), ApplyError> {
    if text.contains(['\n', '\r']) {
        Err(ApplyError::Refused(format!(
            "the value for {what} must be one line"
        )))
    } else {
        Ok(())
    }
}

/// True when irqbalance runs or starts at boot, so it would move steered interrupts.
fn irqbalance_active(root: &Root) -> bool {
    [
        "/run/irqbalance",
        "/run/irqbalance.pid",
        "/etc/systemd/system/multi-user.target.wants/irqbalance.service",
    ]
    .iter()
    .any(|p| root.exists(p))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apply::io::HostIo;
    use crate::apply::transaction::{self, Restored};
    use crate::testing::Tree;

    const IMAGE: PlanOptions = PlanOptions {
        persist: true,
        live_kernel: false,
        image: true,
    };

    fn thp(value: &str) -> Change {
        Change::Sysfs {
            path: "/sys/kernel/mm/transparent_hugepage/enabled".into(),
            value: value.into(),
        }
    }

    fn plan_for(tree: &Tree, changes: &[Change]) -> Plan {
        let root = tree.root();
        let io = HostIo {
            root: &root,
            nft: None,
        };
        build(changes, &root, &io, IMAGE).unwrap()
    }

    #[test]
    fn thp_goes_into_grubs_drop_in_and_keeps_earlier_parameters() {
        let tree = Tree::with(&[("/etc/default/grub", "GRUB_CMDLINE_LINUX=\"\"\n")]);
        let plan = plan_for(&tree, &[thp("madvise")]);
        assert_eq!(plan.steps.len(), 1, "{plan:?}");
        let step = &plan.steps[0];
        assert_eq!(step.target, Target::File(cmdline::GRUB_DROP_IN.into()));
        let State::Present(text) = &step.after else {
            panic!("{step:?}")
        };
        assert!(owned::is_ours(text), "{text}");
        assert!(text.ends_with("GRUB_CMDLINE_LINUX_DEFAULT=\"$GRUB_CMDLINE_LINUX_DEFAULT transparent_hugepage=madvise\"\n"), "{text}");
        assert!(
            plan.notes.iter().any(|n| n.contains("update-grub")),
            "{plan:?}"
        );
        // A later apply replaces its own value and keeps other parameters it wrote.
        tree.file(
            cmdline::GRUB_DROP_IN,
            &format!("{}GRUB_CMDLINE_LINUX_DEFAULT=\"$GRUB_CMDLINE_LINUX_DEFAULT iommu=pt transparent_hugepage=always\"\n", owned::HEADER),
        );
        let plan = plan_for(&tree, &[thp("never")]);
        let State::Present(text) = &plan.steps[0].after else {
            panic!("{plan:?}")
        };
        assert!(
            text.contains("\"$GRUB_CMDLINE_LINUX_DEFAULT iommu=pt transparent_hugepage=never\""),
            "{text}"
        );
        // Someone else's file at gputune's path is refused.
        tree.file(cmdline::GRUB_DROP_IN, "GRUB_CMDLINE_LINUX_DEFAULT=quiet\n");
        let root = tree.root();
        let io = HostIo {
            root: &root,
            nft: None,
        };
        assert!(build(&[thp("never")], &root, &io, IMAGE).is_err());
    }

    #[test]
    fn kernel_install_cmdline_is_edited_and_rolled_back_only_while_it_holds_ours() {
        let original = "root=UUID=abc ro quiet transparent_hugepage=always\n";
        let tree = Tree::with(&[(cmdline::KERNEL_CMDLINE, original)]);
        let root = tree.root();
        let io = HostIo {
            root: &root,
            nft: None,
        };
        let plan = build(&[thp("madvise")], &root, &io, IMAGE).unwrap();
        assert_eq!(plan.steps.len(), 1, "{plan:?}");
        assert!(
            plan.notes.iter().any(|n| n.contains("kernel-install")),
            "{plan:?}"
        );
        transaction::execute(&plan.steps, &io).unwrap();
        let edited = std::fs::read_to_string(tree.path(cmdline::KERNEL_CMDLINE)).unwrap();
        assert_eq!(
            edited,
            "root=UUID=abc ro quiet transparent_hugepage=madvise\n"
        );
        // Nothing left to do the second time.
        assert!(
            build(&[thp("madvise")], &root, &io, IMAGE)
                .unwrap()
                .steps
                .is_empty()
        );
        let restored = transaction::restore(&plan.steps, &io);
        assert!(
            matches!(restored[..], [Ok(Restored::Changed { .. })]),
            "{restored:?}"
        );
        assert_eq!(
            std::fs::read_to_string(tree.path(cmdline::KERNEL_CMDLINE)).unwrap(),
            original
        );
        // Changed by someone since: left alone.
        transaction::execute(&plan.steps, &io).unwrap();
        tree.file(cmdline::KERNEL_CMDLINE, "root=UUID=new ro\n");
        let restored = transaction::restore(&plan.steps, &io);
        assert!(
            matches!(restored[..], [Ok(Restored::LeftAlone { .. })]),
            "{restored:?}"
        );
    }

    #[test]
    fn systemd_boot_without_a_cmdline_file_is_a_note_not_a_new_file() {
        let tree = Tree::with(&[("/usr/lib/systemd/boot/efi/systemd-bootx64.efi", "")]);
        let plan = plan_for(&tree, &[thp("madvise")]);
        assert!(plan.steps.is_empty(), "{plan:?}");
        assert!(plan.notes.iter().any(|n| n.contains("root=")), "{plan:?}");
        assert!(!tree.path(cmdline::KERNEL_CMDLINE).exists());
    }
}
