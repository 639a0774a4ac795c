//! A real two-host run: two network namespaces joined by a veth pair, each rank in its own
//! namespace (and UTS namespace, so each has its own host name), rendezvous and ring over the
//! veth link. Needs root and iproute2/util-linux, which scripts/test installs.

use crate::common;

use std::process::{Command, Stdio};
use std::time::Duration;

use common::*;

/// Two namespaces and the veth pair between them, removed on drop.
struct Pair {
    a: String,
    b: String,
}

const ADDR_A: &str = "10.231.6.1";
const ADDR_B: &str = "10.231.6.2";

fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().unwrap_or_else(|e| {
        panic!("cannot run `ip` ({e}): run the tests with scripts/test as root, which installs iproute2")
    });
    assert!(
        out.status.success(),
        "ip {args:?}: {} (network namespaces need root: run scripts/test as root)",
        text(&out.stderr)
    );
}

impl Pair {
    fn new() -> Pair {
        let id = std::process::id();
        let pair = Pair {
            a: format!("gt6a{id}"),
            b: format!("gt6b{id}"),
        };
        ip(&["netns", "add", &pair.a]);
        ip(&["netns", "add", &pair.b]);
        let (va, vb) = (format!("va{id}"), format!("vb{id}"));
        ip(&[
            "link", "add", &va, "netns", &pair.a, "type", "veth", "peer", "name", &vb, "netns",
            &pair.b,
        ]);
        for (ns, dev, addr) in [(&pair.a, &va, ADDR_A), (&pair.b, &vb, ADDR_B)] {
            ip(&["-n", ns, "addr", "add", &format!("{addr}/24"), "dev", dev]);
            ip(&["-n", ns, "link", "set", dev, "up"]);
            ip(&["-n", ns, "link", "set", "lo", "up"]);
        }
        pair
    }

    /// A rank inside `ns`, with its own host name.
    fn rank(&self, ns: &str, host: &str, rank: usize, args: &[&str]) -> Command {
        let mut c = Command::new("ip");
        c.args([
            "netns",
            "exec",
            ns,
            "unshare",
            "--uts",
            "sh",
            "-c",
            "hostname \"$0\" && exec \"$@\"",
            host,
            bin(),
        ])
        .args(["bench", "allreduce", "--backend", "tcp"])
        .args(args)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("RANK", rank.to_string())
        .env("WORLD_SIZE", "2")
        .env("MASTER_ADDR", ADDR_A)
        .env("MASTER_PORT", "29517")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
        c
    }
}

impl Drop for Pair {
    fn drop(&mut self) {
        for ns in [&self.a, &self.b] {
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
    }
}

#[test]
fn two_hosts_over_a_veth_pair_reduce_every_type_and_op_exactly() {
    let pair = Pair::new();
    for dtype in ["f32", "f16", "bf16", "f64", "i32"] {
        for op in ["sum", "prod", "min", "max", "avg"] {
            let args = [
                "-b",
                "8",
                "-e",
                "1M",
                "-f",
                "32",
                "-n",
                "2",
                "-d",
                dtype,
                "-o",
                op,
                "--format",
                "json",
                "--timeout",
                "20",
            ];
            let r0 = pair.rank(&pair.a, "host-a", 0, &args).spawn().unwrap();
            let r1 = pair.rank(&pair.b, "host-b", 1, &args).spawn().unwrap();
            let (o0, _) = wait_within(r0, Duration::from_secs(60), "rank 0");
            let (o1, _) = wait_within(r1, Duration::from_secs(60), "rank 1");
            assert!(o0.status.success(), "{dtype} {op}: {}", text(&o0.stderr));
            assert!(o1.status.success(), "{dtype} {op}: {}", text(&o1.stderr));
            let doc: serde_json::Value = serde_json::from_slice(&o0.stdout).unwrap();
            assert_eq!(json_rows_all_right(&doc), 4, "{dtype} {op}");
            assert_eq!(
                doc["hosts"],
                serde_json::json!(["host-a", "host-b"]),
                "{dtype} {op}"
            );
        }
    }
}
