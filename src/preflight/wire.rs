//! What ranks tell each other during a preflight, carried in the bench's authenticated frames
//! (`Message::Preflight`) after the token handshake. Everything here comes from the network:
//! rank 0 bounds what it keeps and strips control characters before printing any of it.

use std::collections::BTreeMap;
use std::net::IpAddr;

use serde::{Deserialize, Serialize};

use super::ifaces::Pick;

/// One port a node listens on for the reachability matrix.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Listen {
    pub port: u16,
    /// `rendezvous` (the profile's `[job]` range) or `nccl` (a sample of the ephemeral range).
    pub kind: String,
    /// Why it could not be opened (in use, permission), when it could not.
    pub error: Option<String>,
    /// This node's own firewall verdict for a new connection to it, when it drops it: the
    /// deciding rule, as the firewall area names it.
    pub firewall: Option<String>,
}

/// What one node learns about itself before meeting the others.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Facts {
    pub rank: usize,
    pub host: String,
    pub launcher: String,
    /// `MASTER_ADDR` as given, and what it resolves to here (or why it does not).
    pub master_addr: String,
    pub master_resolved: Result<Vec<IpAddr>, String>,
    /// This node's own host name, resolved here.
    pub own_name: Result<Vec<IpAddr>, String>,
    /// Every address of every interface (loopback included).
    pub addresses: Vec<IpAddr>,
    pub nccl: Pick,
    /// MTU of the interface NCCL picks.
    pub mtu: Option<u32>,
    /// Versions that must agree across the job, by name (`nccl`, `driver`, ...).
    pub versions: BTreeMap<String, String>,
    /// The `NCCL_*` variables of this rank's environment.
    pub nccl_env: BTreeMap<String, String>,
    /// The TCP ports this node listens on for the others' probes, at `probe_addr`.
    pub listens: Vec<Listen>,
    pub probe_addr: Option<IpAddr>,
    /// The UDP port answering path-MTU probes.
    pub echo_port: Option<u16>,
    /// Why the firewall could not be judged here, when it could not.
    pub firewall_note: Option<String>,
}

/// A node another node must probe: where and on which ports.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Target {
    pub rank: usize,
    pub host: String,
    pub addr: IpAddr,
    pub ports: Vec<u16>,
    pub echo_port: Option<u16>,
    pub mtu: Option<u32>,
}

/// One probe's outcome.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Cell {
    pub from: usize,
    pub to: usize,
    pub port: u16,
    /// Connect time in milliseconds, when it connected.
    pub ms: Option<f64>,
    /// `refused`, `timed out`, `reset`, `unreachable`, `not probed` or the error's words.
    pub error: Option<String>,
}

/// Path MTU to one peer: the largest datagram that arrived, of those tried.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Mtu {
    pub to: usize,
    /// The sizes tried (IP packet bytes) and whether each was answered.
    pub tried: Vec<(u32, bool)>,
}

/// Messages after the handshake.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub(crate) enum Wire {
    /// A rank's facts, right after its handshake.
    Facts(Box<Facts>),
    /// A clock sample: the sender's wall clock in ns since the epoch.
    Ping { t1: i64 },
    /// Rank 0's answer: the ping's time and rank 0's clock when it read the ping.
    Pong { t1: i64, t0: i64 },
    /// Rank 0's plan: whom to probe, which names to resolve, and for how long.
    Plan {
        targets: Vec<Target>,
        names: Vec<String>,
        budget_ms: u64,
    },
    /// A rank's results.
    Results {
        cells: Vec<Cell>,
        mtus: Vec<Mtu>,
        /// Each peer name and what it resolved to here (or why not).
        names: Vec<(String, Result<Vec<IpAddr>, String>)>,
        /// This clock minus rank 0's, in ms.
        clock_offset_ms: Option<f64>,
    },
    /// Rank 0's last word: the exit code and this rank's one-line verdict.
    Verdict { exit_code: u8, line: String },
}

impl Wire {
    pub(crate) fn to_message(&self) -> crate::bench::control::frame::Message {
        crate::bench::control::frame::Message::Preflight {
            body: serde_json::to_value(self).unwrap_or(serde_json::Value::Null),
        }
    }

    /// The preflight message inside a frame, or `None` for anything else.
    pub(crate) fn from_message(m: crate::bench::control::frame::Message) -> Option<Wire> {
        match m {
            crate::bench::control::frame::Message::Preflight { body } => {
                serde_json::from_value(body).ok()
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn facts_cross_the_wire_intact() {
        let facts = Facts {
            rank: 3,
            host: "node3".into(),
            launcher: "torchrun".into(),
            master_addr: "node0".into(),
            master_resolved: Ok(vec!["10.0.0.1".parse().unwrap()]),
            own_name: Err("does not resolve".into()),
            addresses: vec!["10.0.0.4".parse().unwrap()],
            nccl: Pick {
                chosen: None,
                rule: "none".into(),
            },
            mtu: Some(1500),
            versions: BTreeMap::from([("nccl".to_string(), "2.21.5".to_string())]),
            nccl_env: BTreeMap::new(),
            listens: vec![Listen {
                port: 29500,
                kind: "rendezvous".into(),
                error: None,
                firewall: Some("dropped by policy drop".into()),
            }],
            probe_addr: None,
            echo_port: Some(4000),
            firewall_note: None,
        };
        for w in [
            Wire::Facts(Box::new(facts)),
            Wire::Ping { t1: -5 },
            Wire::Results {
                cells: vec![],
                mtus: vec![Mtu {
                    to: 1,
                    tried: vec![(9000, false), (1500, true)],
                }],
                names: vec![("node1".into(), Ok(vec!["10.0.0.2".parse().unwrap()]))],
                clock_offset_ms: Some(1.5),
            },
        ] {
            let m = w.to_message();
            let bytes = crate::bench::control::frame::body(&m);
            let back = crate::bench::control::frame::parse_body(&bytes).unwrap();
            assert_eq!(Wire::from_message(back), Some(w));
        }
    }
}
