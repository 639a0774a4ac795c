//! `bench allreduce --pairs` across four network namespaces on a bridge, each rank with its
//! own host name (UTS namespace), one node's link slowed with tc tbf: the verdict must name
//! that node and no other. Needs root, iproute2 and util-linux (scripts/test installs them).

use crate::common;

use common::{Namespaces, NetnsRank, ip, text};

const NODES: usize = 4;
const SLOW: usize = 2;

fn addr(node: usize) -> String {
    format!("10.232.7.{}", node + 1)
}

/// The bridge namespace (first) and the four node namespaces, the slow node's link
/// limited to 40 Mbit/s each way, on its own side and on the bridge's port.
fn fabric() -> Namespaces {
    let id = std::process::id();
    let br = format!("gpbr{id}");
    let nodes: Vec<String> = (0..NODES).map(|i| format!("gpn{i}x{id}")).collect();
    let fabric = Namespaces::add([vec![br.clone()], nodes.clone()].concat());
    ip(&format!("-n {br} link add br0 type bridge"));
    ip(&format!("-n {br} link set br0 up"));
    for (i, ns) in nodes.iter().enumerate() {
        ip(&format!(
            "link add p{i} netns {br} type veth peer name eth0 netns {ns}"
        ));
        ip(&format!("-n {br} link set p{i} master br0 up"));
        ip(&format!("-n {ns} addr add {}/24 dev eth0", addr(i)));
        ip(&format!("-n {ns} link set eth0 up"));
        ip(&format!("-n {ns} link set lo up"));
    }
    for (ns, dev) in [
        (&nodes[SLOW], "eth0".to_string()),
        (&br, format!("p{SLOW}")),
    ] {
        ip(&format!(
            "netns exec {ns} tc qdisc add dev {dev} root tbf rate 40mbit burst 32kbit latency 400ms"
        ));
    }
    fabric
}

#[test]
fn pairs_name_the_node_behind_the_slow_link() {
    let fabric = fabric();
    let master = addr(0);
    let children: Vec<_> = (0..NODES)
        .map(|rank| {
            NetnsRank {
                ns: &fabric.0[rank + 1],
                host: &format!("node{rank}"),
                rank,
                world: NODES,
                master: &master,
                port: 29518,
            }
            .command("--pairs -b 2M -e 2M -n 4 -w 1 --timeout 90 --format json")
            .spawn()
            .expect("rank starts")
        })
        .collect();
    let outputs: Vec<_> = children
        .into_iter()
        .map(|c| c.wait_with_output().expect("rank ends"))
        .collect();
    let rank0 = &outputs[0];
    let verdict = common::stdout_json(rank0);
    // Exit 1 on every rank: a node is below the threshold.
    for (r, out) in outputs.iter().enumerate() {
        assert_eq!(
            out.status.code(),
            Some(1),
            "rank {r}: {}",
            text(&out.stderr)
        );
    }
    let slow = common::column(&verdict["slow"], "host");
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
