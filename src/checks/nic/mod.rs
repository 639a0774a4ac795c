//! NICs that carry training traffic: link up, speed and MTU against the profile, NUMA
//! placement against the GPUs, interrupt placement, and the `NCCL_SOCKET_IFNAME` NCCL
//! should use. Which NICs are judged: the one routing to `--peer`, else the RDMA-capable
//! ones, else the default route's, else the fastest one that is up.

pub mod ethtool;
pub mod hcacount;
pub mod irq;
pub mod irqbalance;
pub mod ncclconf;
pub mod ncclenv;
pub mod peer;
pub mod rdma;
pub mod select;
pub mod versions;

use crate::finding::{Area, Check, Finding};
use crate::inventory::Inventory;
use crate::inventory::nic::Nic;
use crate::profile::setting::{
    KeySpec, Setting,
    ValueKind::{Number, Text, Version},
};

use super::Context;
use super::judged::{Judged, judge_of, specs};
use crate::host::ethtool::Knob;
use rdma::Port;

const JUDGED: &[Judged<Judge>] = &[
    Judged {
        judge: Judge::Speed,
        spec: KeySpec {
            key: "link.speed_mbps",
            kind: Number,
            why: "Inter-node all-reduce runs at most at the NIC's line rate; a slower link (or one that negotiated down) caps every step.",
        },
    },
    Judged {
        judge: Judge::Mtu,
        spec: KeySpec {
            key: "link.mtu",
            kind: Number,
            why: "Jumbo frames (9000) cut per-packet CPU cost by six at high link speeds; NCCL's socket transport is CPU-bound without them.",
        },
    },
    Judged {
        judge: Judge::IrqNumaLocal,
        spec: KeySpec {
            key: "irq.numa_local",
            kind: Number,
            why: "NIC interrupts handled on the other socket add a cross-socket hop to every packet; 1 asks for them on the NIC's own NUMA node.",
        },
    },
    Judged {
        judge: Judge::Port(Port::Rate),
        spec: KeySpec {
            key: "rdma.rate_mbps",
            kind: Number,
            why: "NCCL's IB transport runs at the HCA port's rate; a port that trained down (4X SDR instead of 4X HDR, a bad cable or a narrower width) caps every inter-node step.",
        },
    },
    Judged {
        judge: Judge::HcaCount,
        spec: KeySpec {
            key: "rdma.hca_count",
            kind: Number,
            why: "NCCL stripes inter-node traffic over every HCA (one rail per GPU on HGX nodes); a node that lost one runs its collectives on fewer rails, and the whole job at that node's pace.",
        },
    },
    Judged {
        judge: Judge::Port(Port::ActiveMtu),
        spec: KeySpec {
            key: "rdma.active_mtu",
            kind: Number,
            why: "RoCE carries at most the IB MTU that fits its Ethernet MTU: 1024 bytes per packet at MTU 1500, 4096 at 9000; a quarter of the payload per packet costs bandwidth and message rate.",
        },
    },
    Judged {
        judge: Judge::Port(Port::LinkLayer),
        spec: KeySpec {
            key: "rdma.link_layer",
            kind: Text,
            why: "The profile's figures hold for one fabric: InfiniBand (subnet manager, credit flow control) or Ethernet/RoCE (lossless only with PFC/ECN configured).",
        },
    },
    Judged {
        judge: Judge::Peer,
        spec: KeySpec {
            key: "peer.rtt_ms",
            kind: Number,
            why: "Every rendezvous and NCCL bootstrap message pays the round trip, and all-reduce latency grows with it; the DDP tuning checklist wants multi-node latency under 5-10 ms.",
        },
    },
    Judged {
        judge: Judge::Peer,
        spec: KeySpec {
            key: "peer.path_mtu",
            kind: Number,
            why: "A path that carries smaller packets than the NICs are set for (a switch port left at 1500) fragments or black-holes jumbo frames; RoCE and NCCL sockets stall.",
        },
    },
    Judged {
        judge: Judge::Ethtool(Knob::RxRing),
        spec: KeySpec {
            key: "ring.rx",
            kind: Text,
            why: "A burst from several all-reduce peers fills a default-sized rx ring (1024 descriptors) in microseconds at 100 Gb/s; what does not fit is dropped (rx_out_of_buffer) and TCP backs off. NVIDIA's ConnectX tuning guide raises it to the maximum (8192). `max` asks for the NIC's maximum, a number for that many descriptors (capped at the maximum).",
        },
    },
    Judged {
        judge: Judge::Ethtool(Knob::TxRing),
        spec: KeySpec {
            key: "ring.tx",
            kind: Text,
            why: "A deeper tx ring lets NCCL's socket threads queue whole chunks without waiting for the NIC to drain; NVIDIA's ConnectX tuning guide raises it with the rx ring. `max` or a number of descriptors, as for ring.rx.",
        },
    },
    Judged {
        judge: Judge::Ethtool(Knob::Gro),
        spec: KeySpec {
            key: "offload.gro",
            kind: Number,
            why: "GRO merges a TCP stream's packets before the stack sees them; without it NCCL's socket transport spends a CPU core per few Gb/s on per-packet work. 1 asks for it on.",
        },
    },
    Judged {
        judge: Judge::Ethtool(Knob::Lro),
        spec: KeySpec {
            key: "offload.lro",
            kind: Number,
            why: "LRO merges packets in the NIC but mangles forwarded traffic (bridges, container networks, routing) and is ignored by some drivers in favour of hardware GRO; 0 asks for it off on nodes that forward.",
        },
    },
    Judged {
        judge: Judge::Ethtool(Knob::Tso),
        spec: KeySpec {
            key: "offload.tso",
            kind: Number,
            why: "TSO lets the NIC cut 64 KiB sends into MTU-sized packets; without it the CPU segments every NCCL send. 1 asks for it on.",
        },
    },
    Judged {
        judge: Judge::Ethtool(Knob::Gso),
        spec: KeySpec {
            key: "offload.gso",
            kind: Number,
            why: "GSO segments in software just before the driver when the NIC cannot, which still saves a trip through the stack per packet; 1 asks for it on.",
        },
    },
    Judged {
        judge: Judge::Ethtool(Knob::AdaptiveRx),
        spec: KeySpec {
            key: "coalesce.adaptive_rx",
            kind: Number,
            why: "Adaptive interrupt moderation lengthens the interrupt interval under bulk all-reduce traffic and shortens it for small messages (mlx5's default, which NVIDIA recommends for throughput); 1 asks for it on.",
        },
    },
    Judged {
        judge: Judge::Ethtool(Knob::AdaptiveTx),
        spec: KeySpec {
            key: "coalesce.adaptive_tx",
            kind: Number,
            why: "Adaptive moderation of transmit-completion interrupts frees CPU under bulk sends; 1 asks for it on.",
        },
    },
    Judged {
        judge: Judge::Ethtool(Knob::RxUsecs),
        spec: KeySpec {
            key: "coalesce.rx_usecs",
            kind: Number,
            why: "A fixed receive-interrupt delay: too short costs an interrupt per few packets at 100 Gb/s, too long adds latency to every small NCCL message (it only holds with adaptive-rx off).",
        },
    },
    Judged {
        judge: Judge::Ethtool(Knob::PauseRx),
        spec: KeySpec {
            key: "pause.rx",
            kind: Number,
            why: "802.3x pause frames stop the link when a receiver's buffer fills: RoCE without PFC needs them for a lossless fabric, while on a TCP fabric one slow receiver pausing a switch port stalls every flow behind it. 1 asks for them honoured, 0 ignored.",
        },
    },
    Judged {
        judge: Judge::Ethtool(Knob::PauseTx),
        spec: KeySpec {
            key: "pause.tx",
            kind: Number,
            why: "Whether the NIC sends 802.3x pause frames when its own buffers fill: lossless RoCE without PFC needs it, a TCP fabric is better off dropping and letting TCP back off. 1 asks for it on, 0 off.",
        },
    },
    Judged {
        judge: Judge::Ethtool(Knob::CombinedChannels),
        spec: KeySpec {
            key: "channels.combined",
            kind: Text,
            why: "Each queue has its own interrupt and CPU: one queue per CPU of the NIC's NUMA node (local_cpus) spreads NCCL's socket streams (RSS) over the CPUs next to the NIC, neither crowding a few of them nor spilling onto the far socket. `local_cpus` or a number of queues (capped at the driver's maximum; rx/tx queue pairs where the driver has no combined ones).",
        },
    },
    Judged {
        judge: Judge::Version,
        spec: KeySpec {
            key: "driver_version.*",
            kind: Version,
            why: "NIC and HCA drivers fix GPUDirect RDMA and RoCE bugs release by release; nodes of one fleet should run the version it was qualified with.",
        },
    },
    Judged {
        judge: Judge::Version,
        spec: KeySpec {
            key: "firmware.*",
            kind: Version,
            why: "Adapter firmware fixes link training, adaptive routing and RDMA bugs; nodes with different firmware behave differently under the same job.",
        },
    },
];

pub const KEYS: &[KeySpec] = &specs::<_, { JUDGED.len() }>(JUDGED);

/// What reads a NIC key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Judge {
    /// Each NIC's link speed.
    Speed,
    /// Each NIC's MTU.
    Mtu,
    /// Each NIC's interrupts ([`irq`] and [`irqbalance`]).
    IrqNumaLocal,
    /// A port attribute of each HCA ([`rdma::audit`]).
    Port(Port),
    /// The number of HCAs, judged once for the node ([`hcacount::count`]).
    HcaCount,
    /// The path to the profile's peers ([`peer::audit`]).
    Peer,
    /// An ethtool setting of each NIC ([`ethtool::audit`]).
    Ethtool(Knob),
    /// Driver and firmware versions of the chosen NICs ([`versions::audit`]).
    Version,
}

pub fn audit(ctx: &Context, inv: &Inventory) -> Vec<Finding> {
    let probes = &ctx.probes;
    let mut findings = peer::audit(ctx);
    if let Some(setting) = ctx.profile.get(Area::Nic, "rdma.hca_count") {
        findings.push(hcacount::count(ctx, inv, setting));
    }
    let chosen = select::training(ctx, inv, probes, &mut findings);
    let nccl = ncclenv::NcclConfig::read(ctx.root);
    if chosen.nics.is_empty() && chosen.hcas.is_empty() {
        findings.push(
            Check::new("nic.count", Area::Nic)
                .expected(">= 1 physical NIC")
                .skip(format!(
                    "no physical network interface in /sys/class/net ({} virtual ones skipped)",
                    inv.skipped_nics.len()
                )),
        );
        findings.extend(ncclenv::validate(&nccl));
        return findings;
    }
    for nic in &chosen.nics {
        findings.push(link_up(nic, &chosen.why));
        for (key, setting) in ctx.profile.area(Area::Nic) {
            match judge_of(JUDGED, key) {
                Some(Judge::Speed) => findings.push(speed(ctx, nic, setting)),
                Some(Judge::Mtu) => findings.push(mtu(ctx, nic, setting)),
                Some(Judge::IrqNumaLocal) => {
                    findings.extend(irq::audit(ctx, inv, nic, setting));
                    findings.extend(irqbalance::audit(ctx, nic, setting));
                }
                // Judged below, or once for the node.
                Some(
                    Judge::Port(_)
                    | Judge::HcaCount
                    | Judge::Peer
                    | Judge::Ethtool(_)
                    | Judge::Version,
                )
                | None => {}
            }
        }
        findings.extend(ethtool::audit(ctx, nic));
        if let Some(f) = numa_placement(inv, nic) {
            findings.push(f);
        }
    }
    for hca in &chosen.hcas {
        findings.extend(rdma::audit(ctx, hca, &chosen.why, &nccl));
    }
    findings.extend(versions::audit(ctx, &chosen));
    findings.extend(select::unjudged(inv, &chosen));
    findings.push(ncclconf::socket_ifname(ctx, &chosen.nics));
    findings.extend(ncclenv::validate(&nccl));
    findings.extend(ncclenv::against_node(ctx.root, &nccl, inv));
    findings.extend(rdma::net_plugin(ctx, inv, &nccl));
    findings
}

/// The fastest physical NIC that is up (unknown speed counts as slowest), never `lo` or
/// `docker*` (those are virtual and never in the list).
pub fn fastest_up(nics: &[Nic]) -> Option<&Nic> {
    nics.iter().filter(|n| n.is_up()).max_by(|a, b| {
        a.speed_mbps
            .unwrap_or(0)
            .cmp(&b.speed_mbps.unwrap_or(0))
            .then_with(|| b.name.cmp(&a.name))
    })
}

fn link_up(nic: &Nic, why_judged: &str) -> Finding {
    let check = Check::new(format!("nic.{}.up", nic.name), Area::Nic)
        .expected("up")
        .why(format!(
            "{} ({}, driver {}, firmware {}) is judged because {why_judged}",
            nic.name,
            nic.pci_address.as_deref().unwrap_or("no PCI address"),
            nic.driver.as_deref().unwrap_or("?"),
            nic.firmware.as_deref().unwrap_or("unknown"),
        ));
    if nic.is_up() {
        return check.pass(nic.operstate.clone());
    }
    check.fail(
        nic.operstate.clone(),
        format!(
            "ip link set {} up, and check the cable/transceiver and the switch port (`ethtool {}`)",
            nic.name, nic.name
        ),
    )
}

/// The check of `key` for one NIC: its id is `key.NIC`.
fn nic_check(ctx: &Context, nic: &Nic, key: &str, setting: &Setting) -> Check {
    super::setting_check(ctx, Area::Nic, key, setting).suffixed(&format!(".{}", nic.name))
}

/// An IPoIB link's speed and MTU are not what NCCL's InfiniBand transport runs on: their
/// checks are skipped, saying what applies instead.
fn skip_ipoib(check: &Check, nic: &Nic, instead: &str) -> Option<Finding> {
    (nic.kind == crate::inventory::nic::LinkKind::Infiniband)
        .then(|| check.skip(format!("{} is IPoIB: {instead}", nic.name)))
}

fn speed(ctx: &Context, nic: &Nic, setting: &Setting) -> Finding {
    let check = nic_check(ctx, nic, "link.speed_mbps", setting);
    let instead = "its HCA port's rate is judged instead (rdma.*.rate_mbps)";
    if let Some(skipped) = skip_ipoib(&check, nic, instead) {
        return skipped;
    }
    let Some(mbps) = nic.speed_mbps else {
        return check.skip(format!(
            "{} reports no speed ({}): virtio and most cloud NICs do not, and a link that is down has none",
            nic.name,
            nic.driver.as_deref().unwrap_or("unknown driver")
        ));
    };
    super::value_by_rule(
        &check,
        setting,
        mbps,
        format!(
            "check the negotiated speed with `ethtool {}` (cable, transceiver, switch port), or pick the profile for this fabric",
            nic.name
        ),
    )
}

fn mtu(ctx: &Context, nic: &Nic, setting: &Setting) -> Finding {
    let check = nic_check(ctx, nic, "link.mtu", setting);
    let instead = "NCCL's InfiniBand transport does not use the IP MTU";
    if let Some(skipped) = skip_ipoib(&check, nic, instead) {
        return skipped;
    }
    let Some(mtu) = nic.mtu else {
        return check.error(format!("/sys/class/net/{}/mtu is unreadable", nic.name));
    };
    let target = setting
        .rule
        .target(&mtu.to_string())
        .unwrap_or_else(|| "9000".into());
    super::value_by_rule(
        &check,
        setting,
        mtu,
        format!(
            "ip link set {} mtu {target}, persist it in the interface's network configuration, and set the same MTU on the switch ports and every peer",
            nic.name
        ),
    )
}

/// A NIC should sit on a NUMA node that has GPUs, or every GPU<->NIC transfer crosses the
/// socket interconnect.
fn numa_placement(inv: &Inventory, nic: &Nic) -> Option<Finding> {
    if inv.gpus.is_empty() || inv.single_numa_node() {
        return None;
    }
    let gpu_nodes: std::collections::BTreeSet<u32> =
        inv.gpus.iter().filter_map(|g| g.numa_node).collect();
    let shown: Vec<String> = gpu_nodes.iter().map(u32::to_string).collect();
    let check = Check::new(format!("nic.{}.numa", nic.name), Area::Nic)
        .expected(format!("a node with GPUs ({})", shown.join(",")));
    let Some(node) = nic.numa_node else {
        return Some(check.skip(format!(
            "{} reports no NUMA node (numa_node = -1)",
            nic.name
        )));
    };
    let check = check.why(format!(
        "{} is on NUMA node {node}; GPUDirect and staged copies between its GPUs and a NIC on another node cross the socket interconnect",
        nic.name
    ));
    if gpu_nodes.contains(&node) {
        return Some(check.pass(node.to_string()));
    }
    Some(check.warn(
        node.to_string(),
        "move the NIC to a slot wired to the GPUs' socket (see `gputune topo`), or use a NIC on that node",
    ))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    #[test]
    fn each_key_reaches_its_judge() {
        crate::checks::judged::assert_each_key_reaches_its_judge(JUDGED);
    }

    #[test]
    fn each_ethtool_key_is_its_knob() {
        for entry in JUDGED {
            if let Judge::Ethtool(knob) = entry.judge {
                assert_eq!(knob.key(), entry.spec.key);
            }
        }
    }
    use crate::checks::AuditOptions;
    use crate::finding::Status;
    use crate::probe::Probes;
    use crate::probe::route::FixedRoutes;
    use crate::testing::Tree;

    /// Two PCI NICs: eth0 (10 GbE, ifindex 2) and eth1 (100 GbE, ifindex 3).
    fn two_nics() -> Tree {
        let tree = Tree::new();
        for (name, bdf, speed, index) in [
            ("eth0", "0000:01:00.0", 10000, 2),
            ("eth1", "0000:02:00.0", 100000, 3),
        ] {
            let net = format!("/sys/devices/pci0000:00/{bdf}/net/{name}");
            for (f, v) in [
                ("speed", speed.to_string()),
                ("mtu", "1500".into()),
                ("operstate", "up".into()),
                ("ifindex", index.to_string()),
            ] {
                tree.file(&format!("{net}/{f}"), &format!("{v}\n"));
            }
            tree.link(&format!("{net}/device"), "../..").link(
                &format!("/sys/class/net/{name}"),
                &format!("../../devices/pci0000:00/{bdf}/net/{name}"),
            );
        }
        tree
    }

    /// The nic findings by id of `tree` under ddp-10gbe, routes as `routes` says.
    fn run(tree: &Tree, peer: Option<&str>, routes: FixedRoutes) -> BTreeMap<String, Finding> {
        let options = AuditOptions {
            peer: peer.map(str::to_string),
            ..Default::default()
        };
        let mut probes = Probes::absent("in a test");
        probes.routes = Box::new(routes);
        crate::testing::audit(&tree.root(), "ddp-10gbe", &options, probes, Area::Nic)
    }

    #[test]
    fn the_nic_routing_to_the_peer_is_judged_and_recommended() {
        let tree = two_nics();
        let routes = FixedRoutes {
            default: vec![3],
            peers: vec![("192.0.2.7".parse().unwrap(), 2)],
        };
        let f = run(&tree, Some("192.0.2.7"), routes);
        let up = f.get("nic.eth0.up").expect("eth0 judged");
        assert!(
            up.message.contains("routes to --peer 192.0.2.7"),
            "{}",
            up.message
        );
        assert!(!f.contains_key("nic.eth1.up"));
        let ifname = &f["nccl.NCCL_SOCKET_IFNAME"];
        assert_eq!(ifname.expected, "eth0");
    }

    #[test]
    fn without_a_route_to_the_peer_the_fastest_nic_is_judged() {
        let tree = two_nics();
        let routes = FixedRoutes {
            default: vec![],
            peers: vec![],
        };
        let f = run(&tree, Some("192.0.2.9"), routes);
        let skip = &f["nic.peer_route"];
        assert_eq!(skip.status, Status::Skip);
        assert!(skip.message.contains("no route to 192.0.2.9"));
        // Not the live node: the default route comes from /proc/net/route (absent here).
        let up = f.get("nic.eth1.up").expect("fastest judged");
        assert!(up.message.contains("fastest"), "{}", up.message);
        let speed = &f["link.speed_mbps.eth1"];
        assert_eq!(speed.status, Status::Pass);
        assert_eq!(speed.change, None);
    }

    #[test]
    fn the_fastest_nic_wins_over_the_default_routes_management_port() {
        let tree = two_nics();
        // eth0 (10 GbE) holds the default route; eth1 (100 GbE) is the training NIC.
        tree.file(
            "/proc/net/route",
            "Iface\tDestination\tGateway\tFlags\tRefCnt\tUse\tMetric\tMask\tMTU\tWindow\tIRTT\neth0\t00000000\t0102A8C0\t0003\t0\t0\t0\t00000000\t0\t0\t0\n",
        );
        let routes = FixedRoutes {
            default: vec![2],
            peers: vec![],
        };
        let f = run(&tree, None, routes);
        assert!(f.contains_key("nic.eth1.up"));
        assert!(!f.contains_key("link.speed_mbps.eth0"));
        let role = &f["nic.eth0.role"];
        assert_eq!(role.status, Status::Skip);
        assert!(
            role.message.contains("not the training fabric"),
            "{}",
            role.message
        );
        let ifname = &f["nccl.NCCL_SOCKET_IFNAME"];
        assert_eq!(ifname.expected, "eth1");
        assert_eq!(
            ifname.change,
            Some(crate::finding::Change::NcclEnv {
                key: "NCCL_SOCKET_IFNAME".into(),
                value: "eth1".into()
            })
        );
    }

    #[test]
    fn fastest_up_prefers_speed_then_name() {
        let tree = two_nics();
        let (nics, _) = crate::inventory::nic::nics(
            &tree.root(),
            &crate::probe::ethtool::NoEthtool("test".into()),
            &[],
        )
        .unwrap();
        assert_eq!(fastest_up(&nics).map(|n| n.name.as_str()), Some("eth1"));
        assert_eq!(fastest_up(&[]), None);
    }
}
