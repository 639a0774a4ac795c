//! A real two-host run: two network namespaces joined by a veth pair, each rank in its own
//! namespace (and UTS namespace, so each has its own host name), rendezvous and ring over the
//! veth link. Needs root and iproute2/util-linux, which scripts/test installs.

use crate::common;

use std::time::Duration;

use common::*;

const ADDR_A: &str = "10.231.6.1";
const ADDR_B: &str = "10.231.6.2";

/// Rank `rank` of the two, on host `host` inside namespace `ns`.
fn rank<'a>(ns: &'a str, host: &'a str, rank: usize) -> NetnsRank<'a> {
    NetnsRank {
        ns,
        host,
        rank,
        world: 2,
        master: ADDR_A,
        port: 29517,
    }
}

#[test]
fn two_hosts_over_a_veth_pair_reduce_every_type_and_op_exactly() {
    let id = std::process::id();
    let pair = VethPair::new(
        format!("gt6a{id}"),
        format!("gt6b{id}"),
        End {
            dev: &format!("va{id}"),
            addr: ADDR_A,
        },
        End {
            dev: &format!("vb{id}"),
            addr: ADDR_B,
        },
    );
    for dtype in TYPES {
        for op in OPS {
            let args =
                format!("-b 8 -e 1M -f 32 -n 2 -d {dtype} -o {op} --format json --timeout 20");
            let r0 = rank(&pair.a, "host-a", 0).command(&args).spawn().unwrap();
            let r1 = rank(&pair.b, "host-b", 1).command(&args).spawn().unwrap();
            let case = format!("{dtype} {op}");
            let (o0, _) = both_succeed(r0, r1, Duration::from_secs(60), &case);
            let doc: serde_json::Value = serde_json::from_slice(&o0.stdout).unwrap();
            assert_eq!(json_rows_all_right(&doc), 4, "{case}");
            assert_eq!(
                doc["hosts"],
                serde_json::json!(["host-a", "host-b"]),
                "{case}"
            );
        }
    }
}
