//! The engine against fixture roots: every Change variant planned, applied, verified and
//! restored; a failure at every position of the plan leaves the node as it started.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

use super::error::ApplyError;
use super::io::{HostIo, Io};
use super::nft::Nft;
use super::plan::{self, Plan, PlanOptions};
use super::target::{State, Target, knob_value};
use super::{firewall, transaction};
use crate::finding::Change;
use crate::host::Root;
use crate::testing::Tree;

/// An nftables that keeps the table in memory, interpreting the scripts apply sends.
#[derive(Default)]
pub(super) struct MemoryNft {
    table: RefCell<Option<String>>,
}

impl Nft for MemoryNft {
    fn list_table(&self) -> Result<Option<String>, ApplyError> {
        Ok(self.table.borrow().clone())
    }
    fn run_script(&self, script: &str) -> Result<(), ApplyError> {
        let def = script
            .find("table inet gputune {")
            .map(|i| script[i..].to_string());
        *self.table.borrow_mut() = def;
        Ok(())
    }
}

/// Fails the `k`-th write (0-based) and passes every other one through.
struct FailAt<'a> {
    inner: &'a dyn Io,
    k: usize,
    writes: Cell<usize>,
}

impl Io for FailAt<'_> {
    fn read(&self, target: &Target) -> Result<State, ApplyError> {
        self.inner.read(target)
    }
    fn write(&self, target: &Target, state: &State) -> Result<(), ApplyError> {
        let n = self.writes.get();
        self.writes.set(n + 1);
        if n == self.k {
            return Err(ApplyError::Refused(format!(
                "injected failure at write {n}"
            )));
        }
        self.inner.write(target, state)
    }
}

/// A node with a knob for every live change and systemd managing cgroups.
fn node() -> Tree {
    let tree = Tree::new();
    tree.file("/proc/sys/net/core/somaxconn", "128\n")
        .file("/proc/sys/net/ipv4/tcp_rmem", "4096\t131072\t6291456\n")
        .file("/proc/sys/vm/swappiness", "60\n")
        .file(
            "/sys/kernel/mm/transparent_hugepage/enabled",
            "[always] madvise never\n",
        )
        .file("/proc/irq/42/smp_affinity_list", "0-3\n")
        .file("/sys/fs/cgroup/training.slice/memory.max", "max\n")
        .file("/run/systemd/system/.keep", "")
        .file("/etc/sysctl.d/10-early.conf", "vm.swappiness = 30\n");
    tree
}

/// Host I/O on `root` with no nftables.
fn without_nft(root: &Root) -> HostIo<'_> {
    HostIo { root, nft: None }
}

/// Host I/O on `root` with `nft` as its nftables.
fn with_nft<'a>(root: &'a Root, nft: &'a MemoryNft) -> HostIo<'a> {
    HostIo {
        root,
        nft: Some(nft),
    }
}

const fn options(persist: bool, live_kernel: bool, image: bool) -> PlanOptions {
    PlanOptions {
        persist,
        live_kernel,
        image,
    }
}

/// Asserts that one of `plan`'s notes contains `part`, showing the notes when none does.
#[track_caller]
fn assert_noted(plan: &Plan, part: &str) {
    assert!(
        plan.notes.iter().any(|n| n.contains(part)),
        "no note contains {part:?}: {:?}",
        plan.notes
    );
}

fn every_change() -> Vec<Change> {
    vec![
        Change::Sysctl {
            key: "net.core.somaxconn".into(),
            value: "4096".into(),
        },
        Change::Sysctl {
            key: "net.ipv4.tcp_rmem".into(),
            value: "4096 131072 16777216".into(),
        },
        Change::Sysctl {
            key: "vm.swappiness".into(),
            value: "10".into(),
        },
        Change::Sysfs {
            path: "/sys/kernel/mm/transparent_hugepage/enabled".into(),
            value: "madvise".into(),
        },
        Change::Limit {
            domain: "*".into(),
            kind: "soft".into(),
            item: "memlock".into(),
            value: "unlimited".into(),
        },
        Change::Limit {
            domain: "*".into(),
            kind: "hard".into(),
            item: "memlock".into(),
            value: "unlimited".into(),
        },
        Change::NcclEnv {
            key: "NCCL_SOCKET_IFNAME".into(),
            value: "eth0".into(),
        },
        Change::FirewallAccept {
            ports: vec![(29500, 29550)],
        },
        Change::IrqAffinity {
            irq: 42,
            cpus: "0,1".into(),
        },
        Change::Cgroup {
            slice: "training".into(),
            key: "memory.max".into(),
            value: "1073741824".into(),
        },
    ]
}

const LIVE: PlanOptions = options(true, true, false);

/// Every file and link under the root with its content, and the firewall table.
/// Directories are left out: those apply creates for its files stay, empty, after a restore.
/// Fixture knobs are plain files, which do not echo a write back the way the kernel does
/// (`madvise` is not `always [madvise] never`), so knobs compare by their writable value;
/// the end-to-end tests check the real kernel byte for byte.
fn snapshot(tree: &Tree, nft: &MemoryNft) -> BTreeMap<String, String> {
    fn walk(base: &Path, dir: &Path, out: &mut BTreeMap<String, String>) {
        for entry in fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            let rel = path.strip_prefix(base).unwrap().display().to_string();
            let meta = fs::symlink_metadata(&path).unwrap();
            if meta.file_type().is_symlink() {
                out.insert(
                    rel,
                    format!("-> {}", fs::read_link(&path).unwrap().display()),
                );
            } else if meta.is_dir() {
                walk(base, &path, out);
            } else if rel.starts_with("proc") || rel.starts_with("sys") {
                out.insert(rel, knob_value(&fs::read_to_string(&path).unwrap()));
            } else {
                out.insert(rel, fs::read_to_string(&path).unwrap());
            }
        }
    }
    let mut out = BTreeMap::new();
    let top = tree.path("/");
    walk(&top, &top, &mut out);
    out.insert("nft".into(), format!("{:?}", nft.table.borrow()));
    out
}

#[test]
fn every_change_variant_applies_verifies_and_restores() {
    let tree = node();
    let root = tree.root();
    let nft_view = MemoryNft::default();
    let io = with_nft(&root, &nft_view);
    let nft_view = &nft_view;
    let start = snapshot(&tree, nft_view);

    let changes = plan::dedup(every_change().into_iter().chain(every_change()));
    assert_eq!(changes.len(), every_change().len());
    let plan = plan::build(&changes, &root, &io, LIVE).unwrap();
    transaction::execute(&plan.steps, &io).unwrap();

    let read = |p: &str| fs::read_to_string(tree.path(p)).unwrap();
    assert_eq!(read("/proc/sys/net/core/somaxconn"), "4096");
    assert_eq!(
        read("/sys/kernel/mm/transparent_hugepage/enabled"),
        "madvise"
    );
    assert_eq!(read("/proc/irq/42/smp_affinity_list"), "0,1");
    assert_eq!(
        read("/sys/fs/cgroup/training.slice/memory.max"),
        "1073741824"
    );
    let sysctl_conf = read("/etc/sysctl.d/90-gputune.conf");
    assert!(
        sysctl_conf.contains("net.ipv4.tcp_rmem = 4096 131072 16777216\n"),
        "{sysctl_conf}"
    );
    assert!(
        read(plan::LIMITS_CONF).contains("* soft memlock unlimited\n* hard memlock unlimited\n")
    );
    assert!(read(plan::NCCL_CONF).ends_with("NCCL_SOCKET_IFNAME=eth0\n"));
    assert!(
        read("/etc/systemd/system/training.slice.d/90-gputune.conf")
            .ends_with("[Slice]\nMemoryMax=1073741824\n")
    );
    assert!(read(firewall::RULES_FILE).contains("tcp dport { 29500-29550 } accept"));
    assert!(
        nft_view
            .table
            .borrow()
            .as_deref()
            .unwrap()
            .contains("29500-29550")
    );
    assert_eq!(
        fs::read_link(tree.path(firewall::UNIT_LINK)).unwrap(),
        Path::new(firewall::UNIT_FILE)
    );
    // THP is live now and on the kernel command line at the next boot.
    assert!(
        read("/etc/default/grub.d/90-gputune.cfg")
            .ends_with("\"$GRUB_CMDLINE_LINUX_DEFAULT transparent_hugepage=madvise\"\n")
    );
    assert_noted(&plan, "applies after a reboot");

    // A second plan has nothing left to do.
    let again = plan::build(&changes, &root, &io, LIVE).unwrap();
    assert_eq!(again.steps, vec![], "second apply plans nothing");

    // Restoring puts every byte back and removes what was persisted.
    let restored = transaction::restore(&plan.steps, &io);
    assert!(restored.iter().all(Result::is_ok), "{restored:?}");
    assert_eq!(snapshot(&tree, nft_view), start);
}

#[test]
fn a_failure_at_any_step_leaves_the_node_as_it_started() {
    let n = {
        let tree = node();
        let root = tree.root();
        let nft = MemoryNft::default();
        let io = with_nft(&root, &nft);
        plan::build(&every_change(), &root, &io, LIVE)
            .unwrap()
            .steps
            .len()
    };
    assert!(n >= 14, "a plan touching every kind of target ({n} steps)");
    for k in 0..n {
        let tree = node();
        let root = tree.root();
        let nft_view = MemoryNft::default();
        let host = with_nft(&root, &nft_view);
        let nft_view = &nft_view;
        let start = snapshot(&tree, nft_view);
        let plan = plan::build(&every_change(), &root, &host, LIVE).unwrap();
        let io = FailAt {
            inner: &host,
            k,
            writes: Cell::new(0),
        };
        let failure = transaction::execute(&plan.steps, &io).unwrap_err();
        assert_eq!(failure.step, k);
        assert!(
            failure.error.to_string().contains("injected failure"),
            "{}",
            failure.error
        );
        assert_eq!(failure.unrestored, Vec::<String>::new());
        assert_eq!(
            snapshot(&tree, nft_view),
            start,
            "after a failure at step {k} of {n}"
        );
    }
}

#[test]
fn a_real_write_failure_restores_earlier_changes() {
    let tree = node();
    // /etc/security is a file, so limits.d cannot be created under it.
    tree.file("/etc/security", "not a directory\n");
    let root = tree.root();
    let nft = MemoryNft::default();
    let io = with_nft(&root, &nft);
    let start = snapshot(&tree, &MemoryNft::default());
    let plan = plan::build(&every_change()[..6], &root, &io, LIVE).unwrap();
    let failure = transaction::execute(&plan.steps, &io).unwrap_err();
    assert!(
        failure.error.to_string().contains("limits.d"),
        "{}",
        failure.error
    );
    assert!(failure.step > 0, "earlier steps were written first");
    assert_eq!(snapshot(&tree, &MemoryNft::default()), start);
}

#[test]
fn files_of_others_are_never_edited() {
    let tree = node();
    tree.file(plan::NCCL_CONF, "NCCL_DEBUG=INFO\n");
    let root = tree.root();
    let io = without_nft(&root);
    let change = Change::NcclEnv {
        key: "NCCL_SOCKET_IFNAME".into(),
        value: "eth0".into(),
    };
    let err = plan::build(&[change], &root, &io, LIVE)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("/etc/nccl.conf exists and was not written by gputune"),
        "{err}"
    );
}

#[test]
fn no_persist_writes_live_values_only() {
    let tree = node();
    let root = tree.root();
    let nft = MemoryNft::default();
    let io = with_nft(&root, &nft);
    let options = options(false, true, false);
    let plan = plan::build(&every_change(), &root, &io, options).unwrap();
    assert!(
        plan.steps
            .iter()
            .all(|s| matches!(s.target, Target::Knob(_) | Target::NftTable)),
        "{:?}",
        plan.steps
    );
    assert_noted(&plan, "NCCL_SOCKET_IFNAME skipped");
}

#[test]
fn a_mounted_image_gets_files_but_its_firewall_is_not_live() {
    let tree = node();
    let root = tree.root();
    let io = without_nft(&root);
    let options = options(true, false, false);
    let change = Change::FirewallAccept {
        ports: vec![(29500, 29550)],
    };
    let plan = plan::build(&[change], &root, &io, options).unwrap();
    let targets: Vec<&Target> = plan.steps.iter().map(|s| &s.target).collect();
    assert!(!targets.contains(&&Target::NftTable));
    assert!(targets.contains(&&Target::File(firewall::RULES_FILE.into())));
    assert_noted(&plan, "live firewall is left alone");
}

#[test]
fn sysctl_overrides_and_irqbalance_are_noted() {
    let tree = node();
    tree.file("/etc/sysctl.d/99-local.conf", "net.core.somaxconn = 1024\n");
    tree.file("/run/irqbalance.pid", "1\n");
    let root = tree.root();
    let io = without_nft(&root);
    let plan = plan::build(&every_change()[..1], &root, &io, LIVE).unwrap();
    assert!(
        plan.notes
            .iter()
            .any(|n| n.starts_with("/etc/sysctl.d/99-local.conf:1 sets net.core.somaxconn = 1024")),
        "{:?}",
        plan.notes
    );
    let irq = Change::IrqAffinity {
        irq: 42,
        cpus: "0-1".into(),
    };
    let plan = plan::build(&[irq], &root, &io, LIVE).unwrap();
    assert_noted(&plan, "irqbalance");
}

#[test]
fn cgroupfs_without_systemd_needs_the_cgroup() {
    let tree = node();
    fs::remove_dir_all(tree.path("/run/systemd")).unwrap();
    let root = tree.root();
    let io = without_nft(&root);
    let ok = Change::Cgroup {
        slice: "training.slice".into(),
        key: "memory.max".into(),
        value: "1073741824".into(),
    };
    let plan = plan::build(&[ok], &root, &io, LIVE).unwrap();
    assert_eq!(plan.steps.len(), 1);
    assert!(
        matches!(&plan.steps[0].target, Target::Knob(p) if p == "/sys/fs/cgroup/training.slice/memory.max")
    );
    let missing = Change::Cgroup {
        slice: "nothere".into(),
        key: "memory.max".into(),
        value: "1".into(),
    };
    // No systemd and no cgroup: nothing to write or persist, said in a note, not an abort.
    let plan = plan::build(&[missing], &root, &io, LIVE).unwrap();
    assert!(plan.steps.is_empty());
    assert_noted(&plan, "does not exist and there is no systemd here");
}

#[test]
fn malformed_changes_are_refused_before_anything_is_read() {
    let tree = node();
    let root = tree.root();
    let io = without_nft(&root);
    let bad = [
        Change::Sysfs {
            path: "/etc/passwd".into(),
            value: "x".into(),
        },
        Change::Sysctl {
            key: "vm.swappiness".into(),
            value: "1\nkernel.x = 2".into(),
        },
        Change::NcclEnv {
            key: "lower".into(),
            value: "x".into(),
        },
        Change::IrqAffinity {
            irq: 1,
            cpus: "all".into(),
        },
        Change::Limit {
            domain: "* soft".into(),
            kind: "soft".into(),
            item: "nofile".into(),
            value: "1".into(),
        },
        Change::Cgroup {
            slice: "../x".into(),
            key: "memory.max".into(),
            value: "1".into(),
        },
    ];
    for change in bad {
        assert!(
            plan::build(std::slice::from_ref(&change), &root, &io, LIVE).is_err(),
            "{change:?}"
        );
    }
}

#[test]
fn an_image_gets_persisted_files_and_never_a_live_value() {
    let tree = node();
    let root = tree.root();
    let io = without_nft(&root);
    let options = options(true, false, true);
    let mut changes = every_change();
    changes.push(Change::Logind {
        key: "RemoveIPC".into(),
        value: "no".into(),
    });
    changes.push(Change::Cgroup {
        slice: "job-1.scope".into(),
        key: "memory.high".into(),
        value: "max".into(),
    });
    let plan = plan::build(&changes, &root, &io, options).unwrap();
    assert!(
        plan.steps
            .iter()
            .all(|s| !matches!(s.target, Target::Knob(_) | Target::NftTable)),
        "{:?}",
        plan.steps
    );
    let files: Vec<String> = plan.steps.iter().map(|s| s.target.label()).collect();
    for want in [
        "/etc/sysctl.d/90-gputune.conf",
        "/etc/systemd/logind.conf.d/90-gputune.conf",
    ] {
        assert!(files.iter().any(|f| f.contains(want)), "{want}: {files:?}");
    }
    assert!(!files.iter().any(|f| f.contains("scope")), "{files:?}");
    assert_noted(&plan, "job-1.scope memory.high is not written");
}
