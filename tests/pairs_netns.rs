//! `bench allreduce --pairs` across four network namespaces on a bridge, each rank with its
//! own host name (UTS namespace), one node's link slowed with tc tbf: the verdict must name
//! that node and no other. Needs root, iproute2 and util-linux (scripts/test installs them).

use crate::common;

use std::process::{Command, Stdio};

use common::{bin, text};

const NODES: usize = 4;
const SLOW: usize = 2;

fn run(args: &[&str]) {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .unwrap_or_else(|e| {
            panic!("cannot run {args:?} ({e}): run the tests with scripts/test as root")
        });
    assert!(
        out.status.success(),
        "{args:?}: {} (network namespaces need root: run scripts/test as root)",
        text(&out.stderr)
    );
}

/// The bridge namespace and the four node namespaces, removed on drop.
struct Fabric {
    bridge: String,
    nodes: Vec<String>,
}

impl Drop for Fabric {
    fn drop(&mut self) {
        for ns in self.nodes.iter().chain([&self.bridge]) {
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
    }
}

fn addr(node: usize) -> String {
    format!("10.232.7.{}", node + 1)
}

impl Fabric {
    fn new() -> Fabric {
        let id = std::process::id();
        let fabric = Fabric {
            bridge: format!("gpbr{id}"),
            nodes: (0..NODES).map(|i| format!("gpn{i}x{id}")).collect(),
        };
        run(&["ip", "netns", "add", &fabric.bridge]);
        let br = fabric.bridge.as_str();
        run(&["ip", "-n", br, "link", "add", "br0", "type", "bridge"]);
        run(&["ip", "-n", br, "link", "set", "br0", "up"]);
        for (i, ns) in fabric.nodes.iter().enumerate() {
            run(&["ip", "netns", "add", ns]);
            let port = format!("p{i}");
            run(&[
                "ip", "link", "add", &port, "netns", br, "type", "veth", "peer", "name", "eth0",
                "netns", ns,
            ]);
            run(&["ip", "-n", br, "link", "set", &port, "master", "br0", "up"]);
            run(&[
                "ip",
                "-n",
                ns,
                "addr",
                "add",
                &format!("{}/24", addr(i)),
                "dev",
                "eth0",
            ]);
            run(&["ip", "-n", ns, "link", "set", "eth0", "up"]);
            run(&["ip", "-n", ns, "link", "set", "lo", "up"]);
        }
        // The slow node: 40 Mbit/s each way, on its own side and on the bridge's port.
        for (ns, dev) in [
            (fabric.nodes[SLOW].as_str(), "eth0".to_string()),
            (br, format!("p{SLOW}")),
        ] {
            run(&[
                "ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", &dev, "root", "tbf",
                "rate", "40mbit", "burst", "32kbit", "latency", "400ms",
            ]);
        }
        fabric
    }

    fn rank(&self, rank: usize, args: &[&str]) -> Command {
        let mut c = Command::new("ip");
        c.args([
            "netns",
            "exec",
            &self.nodes[rank],
            "unshare",
            "--uts",
            "sh",
            "-c",
            "hostname \"$0\" && exec \"$@\"",
            &format!("node{rank}"),
            bin(),
        ])
        .args(["bench", "allreduce", "--backend", "tcp", "--pairs"])
        .args(args)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("RANK", rank.to_string())
        .env("WORLD_SIZE", NODES.to_string())
        .env("MASTER_ADDR", addr(0))
        .env("MASTER_PORT", "29518")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
        c
    }
}

#[test]
fn pairs_name_the_node_behind_the_slow_link() {
    let fabric = Fabric::new();
    let args = [
        "-b",
        "2M",
        "-e",
        "2M",
        "-n",
        "4",
        "-w",
        "1",
        "--timeout",
        "90",
        "--format",
        "json",
    ];
    let children: Vec<_> = (0..NODES)
        .map(|r| fabric.rank(r, &args).spawn().expect("rank starts"))
        .collect();
    let outputs: Vec<_> = children
        .into_iter()
        .map(|c| c.wait_with_output().expect("rank ends"))
        .collect();
    let rank0 = &outputs[0];
    let verdict: serde_json::Value = serde_json::from_slice(&rank0.stdout).unwrap_or_else(|e| {
        panic!(
            "rank 0 printed no JSON ({e}): {}\n{}",
            text(&rank0.stdout),
            text(&rank0.stderr)
        )
    });
    // Exit 1 on every rank: a node is below the threshold.
    for (r, out) in outputs.iter().enumerate() {
        assert_eq!(
            out.status.code(),
            Some(1),
            "rank {r}: {}",
            text(&out.stderr)
        );
    }
    let slow: Vec<&str> = verdict["slow"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["host"].as_str().unwrap())
        .collect();
    assert_eq!(slow, [format!("node{SLOW}")], "{verdict:#}");
    // Every node met every other one (3 rounds of 2 disjoint pairs), results exact.
    let pairs = verdict["pairs"].as_array().unwrap();
    assert_eq!(pairs.len(), 6, "{verdict:#}");
    assert!(pairs.iter().all(|p| p["nwrong"] == 0));
    for p in pairs {
        let hosts = [
            p["hosts"][0].as_str().unwrap(),
            p["hosts"][1].as_str().unwrap(),
        ];
        let with_slow = hosts.contains(&format!("node{SLOW}").as_str());
        let bw = p["bus_bw"].as_f64().unwrap();
        let median = verdict["job_median_bus_bw"].as_f64().unwrap();
        assert_eq!(with_slow, bw < 0.8 * median, "{p}");
    }
    assert!(
        text(&rank0.stderr).contains("slow nodes: node2 (rank 2)"),
        "{}",
        text(&rank0.stderr)
    );
    drop(fabric);
}
