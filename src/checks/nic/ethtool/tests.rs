//! The ethtool checks against captured outputs of real NICs (mlx5, ice, bnxt), and apply's
//! plan, verify and rollback of what they ask for.

use std::collections::BTreeMap;

use super::*;
use crate::apply::io::{HostIo, Io, read_nic, write_nic};
use crate::apply::plan::{self, PlanOptions};
use crate::apply::target::{State, Target};
use crate::apply::transaction;
use crate::checks::AuditOptions;
use crate::finding::Status;
use crate::host::ethtool::captured::Captured;
use crate::probe::Probes;
use crate::testing::Tree;

/// One PCI NIC `eth1` (100 GbE, up, NUMA-local CPUs 0-15, MSI vectors 98 and 99).
fn node() -> Tree {
    let tree = Tree::new();
    let bdf = "0000:17:00.0";
    let net = format!("/sys/devices/pci0000:00/{bdf}/net/eth1");
    for (f, v) in [
        ("speed", "100000"),
        ("mtu", "9000"),
        ("operstate", "up"),
        ("ifindex", "3"),
        ("address", "0c:42:a1:00:00:01"),
    ] {
        tree.file(&format!("{net}/{f}"), &format!("{v}\n"));
    }
    tree.file(
        &format!("/sys/devices/pci0000:00/{bdf}/local_cpulist"),
        "0-15\n",
    )
    .file(
        &format!("/sys/devices/pci0000:00/{bdf}/msi_irqs/98"),
        "msix\n",
    )
    .file(
        &format!("/sys/devices/pci0000:00/{bdf}/msi_irqs/99"),
        "msix\n",
    )
    .link(&format!("{net}/device"), "../..")
    .link(
        "/sys/class/net/eth1",
        &format!("../../devices/pci0000:00/{bdf}/net/eth1"),
    );
    tree
}

const PROFILE: &str = r#"
[nic]
"ring.rx" = { equals = "max" }
"ring.tx" = { equals = 4096, severity = "warn" }
"offload.gro" = { equals = 1 }
"offload.lro" = { equals = 0 }
"offload.tso" = { equals = 1 }
"coalesce.adaptive_rx" = { equals = 1 }
"coalesce.rx_usecs" = { max = 4, severity = "warn" }
"pause.rx" = { equals = 0 }
"pause.tx" = { equals = 0 }
"channels.combined" = { equals = "local_cpus" }
"#;

fn audit_with(
    tree: &Tree,
    e: Box<dyn Ethtool>,
    options: AuditOptions,
) -> BTreeMap<String, Finding> {
    let profile = tree.profile("/p/nic.toml", PROFILE);
    let mut probes = Probes::absent("in a test");
    probes.nic_settings = e;
    crate::testing::audit(&tree.root(), &profile, &options, probes, Area::Nic)
}

fn audit(tree: &Tree, driver: &str) -> BTreeMap<String, Finding> {
    audit_with(
        tree,
        Box::new(Captured::of(driver)),
        AuditOptions::default(),
    )
}

fn change(iface: &str, knob: &str, value: u32) -> Option<Change> {
    Some(Change::Ethtool {
        iface: iface.into(),
        knob: knob.into(),
        value,
    })
}

#[test]
fn an_mlx5_at_driver_defaults_is_judged_against_its_maxima_and_local_cpus() {
    let tree = node();
    let f = audit(&tree, "mlx5");
    let rx = &f["ring.rx.eth1"];
    assert_eq!(rx.status, Status::Fail, "{rx:?}");
    assert_eq!(rx.expected, "the NIC's maximum (8192)");
    assert_eq!(rx.actual, "1024 (max 8192)");
    assert_eq!(rx.fix, "ethtool -G eth1 rx 8192");
    assert_eq!(rx.change, change("eth1", "ring.rx", 8192));
    assert!(
        rx.message.contains("1024 of at most 8192"),
        "{}",
        rx.message
    );
    let tx = &f["ring.tx.eth1"];
    assert_eq!(
        (tx.status, tx.fix.as_str()),
        (Status::Warn, "ethtool -G eth1 tx 4096")
    );
    for id in [
        "offload.gro.eth1",
        "offload.lro.eth1",
        "offload.tso.eth1",
        "coalesce.adaptive_rx.eth1",
    ] {
        assert_eq!(f[id].status, Status::Pass, "{:?}", f[id]);
        assert_eq!(f[id].change, None);
    }
    let usecs = &f["coalesce.rx_usecs.eth1"];
    assert_eq!((usecs.status, usecs.actual.as_str()), (Status::Warn, "8"));
    assert_eq!(usecs.fix, "ethtool -C eth1 rx-usecs 4");
    assert!(
        usecs.message.contains("adaptive-rx is on"),
        "{}",
        usecs.message
    );
    let pause = &f["pause.rx.eth1"];
    assert_eq!((pause.status, pause.actual.as_str()), (Status::Fail, "on"));
    assert_eq!(pause.fix, "ethtool -A eth1 rx off");
    assert_eq!(pause.change, change("eth1", "pause.rx", 0));
    let ch = &f["channels.combined.eth1"];
    assert_eq!(ch.status, Status::Fail, "{ch:?}");
    assert_eq!(ch.expected, "its 16 NUMA-local CPUs (0-15)");
    assert_eq!(ch.actual, "63 combined (max 63)");
    assert_eq!(ch.fix, "ethtool -L eth1 combined 16");
    assert_eq!(ch.change, change("eth1", "channels.combined", 16));
}

#[test]
fn fixed_features_caps_and_missing_groups_say_so() {
    let tree = node();
    // ice: LRO is [fixed] off, so asking for it on has no change apply could make.
    let profile = tree.profile(
        "/p/ice.toml",
        "[nic]\n\"offload.lro\" = { equals = 1 }\n\"ring.rx\" = { equals = 16384 }\n",
    );
    let mut probes = Probes::absent("in a test");
    probes.nic_settings = Box::new(Captured::of("ice"));
    let f = crate::testing::audit(
        &tree.root(),
        &profile,
        &AuditOptions::default(),
        probes,
        Area::Nic,
    );
    let lro = &f["offload.lro.eth1"];
    assert_eq!(lro.status, Status::Fail);
    assert!(lro.fix.contains("[fixed]"), "{}", lro.fix);
    assert_eq!(lro.change, None);
    let rx = &f["ring.rx.eth1"];
    assert_eq!(rx.expected, "16384, capped at the NIC's maximum 8160");
    assert_eq!(rx.fix, "ethtool -G eth1 rx 8160");

    // bnxt: a count within its maximum; no pause capture = the driver refuses -a.
    let f = audit(&tree, "bnxt");
    assert_eq!(f["ring.rx.eth1"].fix, "ethtool -G eth1 rx 2047");
    assert_eq!(
        f["channels.combined.eth1"].fix,
        "ethtool -L eth1 combined 16"
    );
    let none = audit(&tree, "none");
    let skip = &none["pause.rx.eth1"];
    assert_eq!(skip.status, Status::Skip);
    assert!(
        skip.message.contains("does not support pause frames"),
        "{}",
        skip.message
    );
}

#[test]
fn without_a_live_kernel_or_with_persisted_every_setting_is_skipped_with_the_reason() {
    let tree = node();
    let f = audit_with(
        &tree,
        Box::new(crate::host::ethtool::NoNic(
            "ethtool netlink describes the running node only, not --root /x".into(),
        )),
        AuditOptions::default(),
    );
    let rx = &f["ring.rx.eth1"];
    assert_eq!(rx.status, Status::Skip);
    assert!(rx.message.contains("running node only"), "{}", rx.message);
    let persisted = AuditOptions {
        persisted: true,
        ..Default::default()
    };
    let f = audit_with(&tree, Box::new(Captured::of("mlx5")), persisted);
    assert_eq!(f["offload.gro.eth1"].status, Status::Skip);
    assert!(f["offload.gro.eth1"].message.contains(".link"));
}

/// apply's I/O with the NIC settings going to a captured NIC instead of the kernel.
struct CapturedIo<'a> {
    host: HostIo<'a>,
    nic: &'a Captured,
}

impl<'a> CapturedIo<'a> {
    /// The host's files under `root` (no nftables), and the NIC settings through `nic`.
    fn over(root: &'a crate::host::Root, nic: &'a Captured) -> Self {
        CapturedIo {
            host: HostIo { root, nft: None },
            nic,
        }
    }
}

impl Io for CapturedIo<'_> {
    fn read(&self, target: &Target) -> Result<State, crate::apply::error::ApplyError> {
        match target {
            Target::Ethtool(p) => read_nic(self.nic, p),
            other => self.host.read(other),
        }
    }
    fn write(&self, target: &Target, state: &State) -> Result<(), crate::apply::error::ApplyError> {
        match (target, state) {
            (Target::Ethtool(p), State::Present(v)) => write_nic(self.nic, p, v),
            _ => self.host.write(target, state),
        }
    }
}

const LIVE: PlanOptions = PlanOptions {
    persist: true,
    live_kernel: true,
    image: false,
};

#[test]
fn apply_sets_verifies_persists_and_rollback_restores_both() {
    let tree = node();
    let findings = audit(&tree, "mlx5");
    let changes: Vec<Change> = findings
        .values()
        .filter_map(|f| f.change.clone())
        .filter(|c| matches!(c, Change::Ethtool { .. }))
        .collect();
    assert_eq!(changes.len(), 6, "{changes:?}");
    let root = tree.root();
    let nic = Captured::of("mlx5");
    let io = CapturedIo::over(&root, &nic);
    let plan = plan::build(&changes, &root, &io, LIVE).unwrap();
    let labels: Vec<String> = plan.steps.iter().map(|s| s.target.label()).collect();
    assert!(
        labels.contains(&"ethtool eth1 ring.rx".to_string()),
        "{labels:?}"
    );
    let link = "/etc/systemd/network/70-gputune-eth1.link";
    assert_eq!(labels.last().map(String::as_str), Some(link));
    assert!(
        plan.notes.iter().any(|n| n.contains("udevadm trigger")),
        "{:?}",
        plan.notes
    );
    // Journal validation accepts every target apply planned.
    crate::apply::validate::steps(&plan.steps).unwrap();
    transaction::execute(&plan.steps, &io).unwrap();
    assert_eq!(nic.rings("eth1").unwrap().rx, Some(8192));
    assert_eq!(nic.channels("eth1").unwrap().combined, Some(16));
    let text = std::fs::read_to_string(tree.path(link)).unwrap();
    assert!(crate::apply::owned::is_ours(&text));
    assert!(
        text.contains("[Match]\nMACAddress=0c:42:a1:00:00:01\n\n[Link]\nName=eth1\n"),
        "{text}"
    );
    for line in [
        "RxBufferSize=8192",
        "TxBufferSize=4096",
        "RxFlowControl=no",
        "TxFlowControl=no",
        "CombinedChannels=16",
        "RxCoalesceSec=4us",
    ] {
        assert!(text.lines().any(|l| l == line), "{line} in {text}");
    }
    // The node now passes, and a second apply has nothing to do.
    let again: Vec<Change> = changes.clone();
    assert!(
        plan::build(&again, &root, &io, LIVE)
            .unwrap()
            .steps
            .is_empty()
    );

    let restored = transaction::restore(&plan.steps, &io);
    assert!(restored.iter().all(Result::is_ok), "{restored:?}");
    assert_eq!(nic.rings("eth1").unwrap().rx, Some(1024));
    assert_eq!(nic.pause("eth1").unwrap().rx, Some(true));
    assert_eq!(nic.channels("eth1").unwrap().combined, Some(63));
    assert!(!tree.path(link).exists());
}

#[test]
fn a_refused_setting_mid_way_puts_back_every_earlier_one() {
    let tree = node();
    let root = tree.root();
    let nic = Captured::of("bnxt");
    let io = CapturedIo::over(&root, &nic);
    // The gro step comes first; 9000 rx descriptors is more than bnxt's 2047.
    let changes = [
        Change::Ethtool {
            iface: "eth1".into(),
            knob: "offload.gro".into(),
            value: 0,
        },
        Change::Ethtool {
            iface: "eth1".into(),
            knob: "ring.tx".into(),
            value: 9000,
        },
    ];
    let plan = plan::build(&changes, &root, &io, LIVE).unwrap();
    let failure = transaction::execute(&plan.steps, &io).unwrap_err();
    assert!(
        failure
            .error
            .to_string()
            .contains("ethtool -G eth1 tx 9000"),
        "{}",
        failure.error
    );
    assert!(failure.unrestored.is_empty(), "{:?}", failure.unrestored);
    assert!(nic.features("eth1").unwrap().active.contains("rx-gro"));
    assert!(
        !tree
            .path("/etc/systemd/network/70-gputune-eth1.link")
            .exists()
    );
}

#[test]
fn someone_elses_link_file_is_refused_and_a_tampered_journal_entry_too() {
    let tree = node();
    tree.file(
        "/etc/systemd/network/70-gputune-eth1.link",
        "[Match]\nName=eth1\n",
    );
    let root = tree.root();
    let nic = Captured::of("mlx5");
    let io = CapturedIo::over(&root, &nic);
    let changes = [Change::Ethtool {
        iface: "eth1".into(),
        knob: "ring.rx".into(),
        value: 8192,
    }];
    let err = plan::build(&changes, &root, &io, LIVE).unwrap_err();
    assert!(err.to_string().contains("not written by gputune"), "{err}");
    for bad in ["../eth1/ring.rx", "eth1/ring.jumbo", "eth1"] {
        assert!(
            crate::apply::validate::target(&Target::Ethtool(bad.into())).is_err(),
            "{bad}"
        );
    }
    assert!(
        crate::apply::validate::target(&Target::File(
            "/etc/systemd/network/70-gputune-../x.link".into()
        ))
        .is_err()
    );
    assert!(
        crate::apply::validate::target(&Target::File("/etc/systemd/network/10-site.link".into()))
            .is_err()
    );
    assert!(
        crate::apply::validate::target(&Target::File(
            "/etc/systemd/network/70-gputune-eth1.link".into()
        ))
        .is_ok()
    );
}

#[test]
fn under_root_the_real_probes_say_the_nic_is_not_live() {
    let tree = node();
    let profile = tree.profile("/p/nic.toml", PROFILE);
    let root = tree.root();
    let f = crate::testing::audit(
        &root,
        &profile,
        &AuditOptions::default(),
        Probes::for_root(&root),
        Area::Nic,
    );
    for id in [
        "ring.rx.eth1",
        "offload.gro.eth1",
        "channels.combined.eth1",
        "pause.tx.eth1",
    ] {
        assert_eq!(f[id].status, Status::Skip, "{:?}", f[id]);
        assert!(f[id].message.contains("not --root"), "{}", f[id].message);
    }
}

/// `eth1`'s IRQs 98 and 99, and an irqbalance (pid 4242) started with `args`.
fn irqbalance_node(args: Option<&str>) -> BTreeMap<String, Finding> {
    let tree = node();
    if let Some(args) = args {
        tree.file("/proc/4242/comm", "irqbalance\n")
            .file("/proc/4242/cmdline", args)
            .file("/proc/4242/environ", "PATH=/usr/bin\0");
    }
    tree.file("/proc/irq/98/smp_affinity_list", "0-3\n")
        .file("/proc/irq/99/smp_affinity_list", "0-3\n");
    let profile = tree.profile(
        "/p/irq.toml",
        "[nic]\n\"irq.numa_local\" = { equals = 1, severity = \"warn\" }\n",
    );
    crate::testing::audit(
        &tree.root(),
        &profile,
        &AuditOptions::default(),
        Probes::absent("in a test"),
        Area::Nic,
    )
}

#[test]
fn irqbalance_is_judged_against_the_nics_pinned_interrupts() {
    let id = "irq.numa_local.eth1.irqbalance";
    let none = irqbalance_node(None);
    assert_eq!(none[id].status, Status::Pass, "{:?}", none[id]);
    assert_eq!(none[id].actual, "not running");
    let free = irqbalance_node(Some("/usr/sbin/irqbalance\0--foreground\0--banirq=98\0"));
    let f = &free[id];
    assert_eq!(f.status, Status::Warn, "{f:?}");
    assert_eq!(f.actual, "running, free to move 1 of 2 IRQs (99)");
    assert!(f.message.contains("pid 4242"), "{}", f.message);
    assert!(f.fix.contains("--banirq"), "{}", f.fix);
    let banned = irqbalance_node(Some("irqbalance\0--banirq=98\0-i\x0099\0"));
    assert_eq!(banned[id].status, Status::Pass, "{:?}", banned[id]);
}
