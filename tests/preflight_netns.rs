//! `gputune preflight` across seven network namespaces on a bridge, each node with its own
//! host name (UTS namespace) and `/etc/hosts` (`/etc/netns/NAME/hosts`), started
//! torchrun-style. Five nodes carry one planted fault each; the report must name each fault
//! on its node and nothing on the clean ones. Needs root, iproute2, util-linux, nft and cc.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::Value;

use crate::common;

use common::{KillOnDrop, Namespaces, ip, text};

const NODES: usize = 7;
/// The planted faults, one node each; nodes 0 and 6 are clean.
const FIREWALLED: usize = 1;
const STALE_MASTER: usize = 2;
const DEBIAN_NAME: usize = 3;
const OTHER_NCCL: usize = 4;
const JUMBO: usize = 5;
pub const PORT: u16 = 29512;

pub fn addr(net: u8, node: usize) -> String {
    format!("10.233.{net}.{}", node + 1)
}

/// The namespaces (bridge first) and the `/etc/netns` directories, removed on drop.
pub struct Fabric {
    namespaces: Namespaces,
    etc: Vec<PathBuf>,
}

impl Drop for Fabric {
    fn drop(&mut self) {
        for dir in &self.etc {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

impl Fabric {
    pub fn node(&self, i: usize) -> &str {
        &self.namespaces.0[i + 1]
    }
}

/// `nodes` namespaces on one bridge, `/24` net `10.233.NET.0`, each with an /etc/hosts that
/// names every node, after the `extra` lines of that node (a stale entry replaces the
/// name's line; Debian's `127.0.1.1` own-name line comes before the real one).
pub fn fabric(tag: &str, net: u8, nodes: usize, extra: &dyn Fn(usize) -> String) -> Fabric {
    let id = std::process::id();
    let br = format!("gpf{tag}b{id}");
    let names: Vec<String> = (0..nodes).map(|i| format!("gpf{tag}{i}x{id}")).collect();
    let namespaces = Namespaces::add([vec![br.clone()], names.clone()].concat());
    let mut fabric = Fabric {
        namespaces,
        etc: Vec::new(),
    };
    ip(&format!("-n {br} link add br0 type bridge"));
    ip(&format!("-n {br} link set br0 up"));
    for (i, ns) in names.iter().enumerate() {
        // The extra lines come first; a name they give an address has no other line.
        let extra = extra(i);
        let mut hosts = format!("{extra}127.0.0.1 localhost\n");
        for j in (0..nodes).filter(|j| !extra.contains(&format!(" node{j}\n"))) {
            hosts.push_str(&format!("{} node{j}\n", addr(net, j)));
        }
        ip(&format!(
            "link add p{i} netns {br} type veth peer name eth0 netns {ns}"
        ));
        ip(&format!("-n {br} link set p{i} master br0 up"));
        ip(&format!("-n {ns} addr add {}/24 dev eth0", addr(net, i)));
        ip(&format!("-n {ns} link set eth0 up"));
        ip(&format!("-n {ns} link set lo up"));
        let dir = PathBuf::from(format!("/etc/netns/{ns}"));
        std::fs::create_dir_all(&dir).unwrap();
        fabric.etc.push(dir.clone());
        std::fs::write(dir.join("hosts"), hosts).unwrap();
    }
    fabric
}

/// An nftables table in `ns` that drops new connections to the ephemeral range (NCCL's
/// ports) and lets replies to the node's own connections through.
pub fn drop_ephemeral(ns: &str) {
    use std::io::Write;
    let rules = "add table inet gpf\n\
         add chain inet gpf input { type filter hook input priority 0; policy accept; }\n\
         add rule inet gpf input ct state established,related accept\n\
         add rule inet gpf input tcp dport 32768-60999 drop\n";
    let mut child = Command::new("ip")
        .args(["netns", "exec", ns, "nft", "-f", "-"])
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(rules.as_bytes())
        .unwrap();
    assert!(child.wait().unwrap().success(), "nft in {ns}");
}

/// tests/fixtures/fake_libnccl.c built into `dir/libnccl.so.2`.
fn fake_libnccl(dir: &Path) -> PathBuf {
    let lib = dir.join("libnccl.so.2");
    let src = common::fixture("fake_libnccl.c");
    let status = Command::new("cc")
        .args(["-shared", "-fPIC", "-o"])
        .arg(&lib)
        .arg(&src)
        .status()
        .expect("no C compiler (cc): run scripts/test, which installs gcc");
    assert!(status.success(), "cc failed on {}", src.display());
    lib
}

/// How a launcher tells a rank its place: torchrun's variables, or srun's (no `MASTER_*`:
/// rank 0's host is the node list's first, the port comes from the job id).
#[derive(Clone, Copy)]
pub enum Launcher<'a> {
    Torchrun { master: &'a str },
    Srun { nodelist: &'a str, job: u32 },
}

/// One rank, as the launcher would start it on node `i`: its namespace, its host name, the
/// launcher's variables, a fresh HOME and nothing else.
pub fn rank(
    ns: &str,
    i: usize,
    world: usize,
    launcher: Launcher,
    home: &Path,
    nccl: &Path,
    args: &str,
) -> KillOnDrop {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", ns, "unshare", "--uts", "sh", "-c"])
        .args([
            "hostname \"$0\" && exec \"$@\"",
            &format!("node{i}"),
            common::bin(),
        ])
        .arg("preflight")
        .args(args.split_whitespace())
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", home)
        .env("GPUTUNE_NCCL_LIB", nccl)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    match launcher {
        Launcher::Torchrun { master } => c
            .env("RANK", i.to_string())
            .env("WORLD_SIZE", world.to_string())
            .env("LOCAL_RANK", "0")
            .env("MASTER_ADDR", master)
            .env("MASTER_PORT", PORT.to_string()),
        Launcher::Srun { nodelist, job } => c
            .env("SLURM_PROCID", i.to_string())
            .env("SLURM_NTASKS", world.to_string())
            .env("SLURM_LOCALID", "0")
            .env("SLURM_JOB_ID", job.to_string())
            .env("SLURM_STEP_ID", "0")
            .env("SLURM_STEP_NODELIST", nodelist),
    };
    KillOnDrop::spawn(&mut c)
}

fn problems_of<'a>(doc: &'a Value, host: &str) -> Vec<&'a Value> {
    doc["problems"]
        .as_array()
        .expect("problems")
        .iter()
        .filter(|p| p["host"] == host)
        .collect()
}

fn categories(doc: &Value, host: &str) -> Vec<String> {
    let mut c: Vec<String> = problems_of(doc, host)
        .iter()
        .map(|p| p["category"].as_str().unwrap_or("").to_string())
        .collect();
    c.dedup();
    c
}

#[test]
fn each_planted_fault_is_named_on_its_node_and_nothing_on_the_clean_ones() {
    common::require(&["ip", "unshare", "nft", "cc"]);
    let real = common::real_nccl();
    let dir = tempfile::tempdir().unwrap();
    let fake = fake_libnccl(dir.path());
    let net = 40;
    let fabric = fabric("m", net, NODES, &|i| match i {
        STALE_MASTER => format!("10.233.{net}.99 node0\n"),
        DEBIAN_NAME => "127.0.1.1 node3.example node3\n".into(),
        _ => String::new(),
    });
    // NCCL's ephemeral ports dropped inbound (replies to its own connections still pass).
    drop_ephemeral(fabric.node(FIREWALLED));
    // Jumbo frames on one node's end of its link only.
    ip(&format!("-n {} link set eth0 mtu 9000", fabric.node(JUMBO)));

    let master = addr(net, 0);
    let ranks: Vec<KillOnDrop> = (0..NODES)
        .map(|i| {
            let home = dir.path().join(format!("home{i}"));
            let nccl = if i == OTHER_NCCL {
                &fake
            } else {
                Path::new(&real)
            };
            let args = if i == 0 {
                "--timeout 20 --format json"
            } else {
                "--timeout 20"
            };
            rank(
                fabric.node(i),
                i,
                NODES,
                Launcher::Torchrun { master: &master },
                &home,
                nccl,
                args,
            )
        })
        .collect();
    let outs: Vec<_> = ranks
        .into_iter()
        .map(|r| r.wait_with_output().unwrap())
        .collect();
    let doc: Value = serde_json::from_slice(&outs[0].stdout).unwrap_or_else(|e| {
        panic!(
            "rank 0 printed no JSON ({e}): {}\n{}",
            text(&outs[0].stdout),
            text(&outs[0].stderr)
        )
    });
    assert_eq!(outs[0].status.code(), Some(1), "{doc:#}");
    assert_eq!(doc["joined"], NODES, "{doc:#}");
    assert_eq!(doc["coverage"], "all pairs of 7 nodes");

    // Firewalled: every NCCL port probed there fails from every other node, and the
    // firewall's deciding rule is named; its rendezvous ports pass.
    let fw_problems = problems_of(&doc, "node1");
    assert!(!fw_problems.is_empty(), "{doc:#}");
    for p in &fw_problems {
        assert_eq!(p["category"], "port", "{p:#}");
        let port = p["port"].as_u64().unwrap();
        assert!((32768..=60999).contains(&port), "{p:#}");
        assert_eq!(p["peer"], "node[0,2-6]", "{p:#}");
        let m = p["message"].as_str().unwrap();
        assert!(
            m.contains("timed out") && m.contains("dport 32768-60999"),
            "{m}"
        );
    }
    assert_eq!(categories(&doc, "node2"), ["name-resolution"], "{doc:#}");
    let stale = problems_of(&doc, "node2")[0];
    assert_eq!(stale["peer"], "node0");
    assert!(
        stale["message"]
            .as_str()
            .unwrap()
            .contains(&format!("10.233.{net}.99")),
        "{stale:#}"
    );
    assert_eq!(categories(&doc, "node3"), ["own-name"], "{doc:#}");
    assert!(
        problems_of(&doc, "node3")[0]["message"]
            .as_str()
            .unwrap()
            .contains("127.0.1.1")
    );
    assert_eq!(categories(&doc, "node4"), ["version"], "{doc:#}");
    let versions: Vec<&str> = problems_of(&doc, "node4")
        .iter()
        .map(|p| p["message"].as_str().unwrap())
        .collect();
    assert!(
        versions
            .iter()
            .any(|m| m.starts_with("nccl is 2.19.3 on node4")),
        "{versions:?}"
    );
    assert!(versions.iter().any(|m| m.starts_with("nccl_path is")));
    assert_eq!(categories(&doc, "node5"), ["mtu"], "{doc:#}");
    let mtu = problems_of(&doc, "node5")[0];
    assert_eq!(mtu["peer"], "node[0-4,6]", "{mtu:#}");
    assert!(mtu["message"].as_str().unwrap().contains("9000"));
    for clean in ["node0", "node6"] {
        assert!(problems_of(&doc, clean).is_empty(), "{clean}: {doc:#}");
    }
    // The matrix: the only failing cells are into node1, on its NCCL ports.
    for pair in doc["pairs"].as_array().unwrap() {
        let failed = pair["error"].is_string();
        let expected = pair["to_host"] == "node1" && pair["kind"] == "nccl";
        assert_eq!(failed, expected, "{pair:#}");
    }
    // Every other rank printed its own one-line verdict and rank 0's exit code.
    for (i, out) in outs.iter().enumerate().skip(1) {
        let line = text(&out.stdout);
        assert_eq!(
            out.status.code(),
            Some(1),
            "rank {i}: {line}{}",
            text(&out.stderr)
        );
        assert_eq!(line.lines().count(), 1, "rank {i}: {line}");
        let clean = i == 6;
        assert_eq!(line.contains("ok here"), clean, "rank {i}: {line}");
    }
    assert!(text(&outs[3].stdout).contains("own-name"));
}

/// `MASTER_ADDR` given as a name (torchrun's variable, or srun's node list) that one node
/// resolves to a stale address: that rank says itself which address it tried, and rank 0
/// names it missing when the deadline comes (under srun with its host, from the node list).
#[test]
fn a_rank_that_cannot_reach_rank_0_says_so_and_rank_0_names_it() {
    common::require(&["ip", "unshare"]);
    let real = common::real_nccl();
    let dir = tempfile::tempdir().unwrap();
    let net = 41;
    let fabric = fabric("s", net, 3, &|i| match i {
        2 => format!("10.233.{net}.99 node0\n"),
        _ => String::new(),
    });
    for (launcher, missing) in [
        (
            Launcher::Torchrun { master: "node0" },
            "rank 2 did not join",
        ),
        (
            Launcher::Srun {
                nodelist: "node[0-2]",
                job: 4242,
            },
            "rank 2 (node2) did not join within 6s: node2 (10.233.41.3) is up and its \
             preflight listens",
        ),
    ] {
        let ranks: Vec<KillOnDrop> = (0..3)
            .map(|i| {
                let home = dir.path().join(format!("home{i}"));
                rank(
                    fabric.node(i),
                    i,
                    3,
                    launcher,
                    &home,
                    Path::new(&real),
                    "--timeout 6",
                )
            })
            .collect();
        let outs: Vec<_> = ranks
            .into_iter()
            .map(|r| r.wait_with_output().unwrap())
            .collect();
        let report = text(&outs[0].stdout);
        assert_eq!(
            outs[0].status.code(),
            Some(1),
            "{report}{}",
            text(&outs[0].stderr)
        );
        assert!(report.contains("missing-rank: 1 problem"), "{report}");
        assert!(report.contains(missing), "{report}");
        let own = text(&outs[2].stdout);
        assert_eq!(
            outs[2].status.code(),
            Some(1),
            "{own}{}",
            text(&outs[2].stderr)
        );
        assert!(
            own.contains("rank 2 (node2): cannot reach rank 0 at MASTER_ADDR=node0")
                && own.contains(&format!("resolves here to 10.233.{net}.99")),
            "{own}"
        );
        assert!(text(&outs[1].stdout).contains("rank 1 (node1): ok here"));
    }
}
