//! What the folded groups mean: the profile's verdict decides what is wrong (a group that
//! fails or errs), never the majority; a skip is no value at all (a node that could not
//! measure a check does not make the one that did the odd one out); and facts that must be
//! alike on every node of a job (kernel, the `gpu` and `nic` values, the report's
//! `host.facts`) fail the fleet when they differ, even where every node passes.

use std::cmp::Reverse;

use serde::Serialize;

use super::groups::{Fleet, Group, Key, NodeSet};
use crate::bench::control::hostlist;
use crate::finding::Status;

/// Areas whose values (driver, CUDA, NCCL, cuDNN versions; NICs, speeds, GID index) must be
/// alike across a job's nodes: a node that differs there fails the fleet even if it passes.
const ALIKE_AREAS: &[&str] = &["gpu", "nic"];

/// What a check or fact across the fleet comes to, worst first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum KeyVerdict {
    /// Some nodes fail or err on it: the profile says they are wrong.
    Fail,
    /// Its value differs between nodes where it must be alike: fails the fleet.
    Differs,
    /// Nodes pass with different values, or some warn: shown, does not fail the fleet.
    Varies,
    /// One value (or verdict) on every node that measured it.
    Alike,
}

/// One check or fact, judged.
#[derive(Debug)]
pub(crate) struct KeyView<'a> {
    pub key: &'a Key,
    pub verdict: KeyVerdict,
    /// Its groups, failing first, then by node count.
    pub groups: Vec<&'a Group>,
    /// Nodes whose report does not have it: for a fact a value of its own (`(absent)`), for
    /// a check no value, like a skip.
    pub absent: NodeSet,
    /// Nodes in groups that fail or err.
    pub failing_nodes: usize,
}

/// The whole fleet, judged.
#[derive(Debug)]
pub(crate) struct Analysis<'a> {
    pub fleet: &'a Fleet,
    pub checks: Vec<KeyView<'a>>,
    pub facts: Vec<KeyView<'a>>,
    /// Nodes that fail or err on at least one check.
    pub failing: NodeSet,
    /// True when nothing fails and nothing that must be alike differs.
    pub passed: bool,
    names: Names,
}

/// Node names in hostlist order, so any set of nodes becomes a hostlist with one sort of
/// numbers.
#[derive(Debug)]
struct Names {
    /// Node numbers by hostlist order, and each node's place in it.
    sorted: Vec<u32>,
    rank: Vec<u32>,
}

fn failing(status: Option<Status>) -> bool {
    matches!(status, Some(Status::Fail | Status::Error))
}

/// Groups in reading order: fail and error first, then warn, pass, skip; facts by size.
fn group_order(g: &Group) -> (u8, Reverse<usize>, &str) {
    let rank = match g.status {
        Some(Status::Fail) => 0,
        Some(Status::Error) => 1,
        Some(Status::Warn) => 2,
        Some(Status::Pass) | None => 3,
        Some(Status::Skip) => 4,
    };
    (rank, Reverse(g.nodes.len()), &g.value)
}

fn judge<'a>(key: &'a Key, fact: bool, nodes: u32) -> KeyView<'a> {
    let mut groups: Vec<&Group> = key.groups.iter().collect();
    groups.sort_by(|a, b| group_order(a).cmp(&group_order(b)));
    let absent = NodeSet::complement(key.groups.iter().map(|g| &g.nodes), nodes);
    let failing_nodes = groups
        .iter()
        .filter(|g| failing(g.status))
        .map(|g| g.nodes.len())
        .sum();
    // Values measured: a skip is none, and for a check neither is a missing report.
    // (Two profiles' expectations of one value are one value.)
    let mut measured: Vec<(Option<Status>, &str)> = groups
        .iter()
        .filter(|g| g.status != Some(Status::Skip))
        .map(|g| (g.status, g.value.as_str()))
        .collect();
    measured.sort_unstable();
    measured.dedup();
    let values = measured.len() + usize::from(fact && !absent.is_empty());
    let verdict = if failing_nodes > 0 {
        KeyVerdict::Fail
    } else if values > 1 && (fact || ALIKE_AREAS.contains(&key.of.name())) {
        KeyVerdict::Differs
    } else if values > 1 {
        KeyVerdict::Varies
    } else {
        KeyVerdict::Alike
    };
    KeyView {
        key,
        verdict,
        groups,
        absent,
        failing_nodes,
    }
}

/// Judges every check and fact of `fleet`.
pub(crate) fn analyse(fleet: &Fleet) -> Analysis<'_> {
    let nodes = fleet.nodes();
    let order = |views: &mut Vec<KeyView>| {
        views.sort_by(|a, b| {
            (a.verdict, Reverse(a.failing_nodes), &a.key.name).cmp(&(
                b.verdict,
                Reverse(b.failing_nodes),
                &b.key.name,
            ))
        })
    };
    let mut checks: Vec<KeyView> = fleet
        .checks
        .iter()
        .map(|k| judge(k, false, nodes))
        .collect();
    order(&mut checks);
    let mut facts: Vec<KeyView> = fleet.facts.iter().map(|k| judge(k, true, nodes)).collect();
    order(&mut facts);
    let mut bad = vec![false; nodes as usize];
    for view in &checks {
        for g in view.groups.iter().filter(|g| failing(g.status)) {
            for n in g.nodes.iter() {
                bad[n as usize] = true;
            }
        }
    }
    let mut failing_set = NodeSet::default();
    for (n, bad) in bad.iter().enumerate() {
        if *bad {
            failing_set.push(n as u32);
        }
    }
    let passed = failing_set.is_empty()
        && checks
            .iter()
            .chain(&facts)
            .all(|v| v.verdict != KeyVerdict::Differs);
    let mut sorted: Vec<u32> = (0..nodes).collect();
    sorted.sort_by(|&a, &b| hostlist::order(&fleet.hosts[a as usize], &fleet.hosts[b as usize]));
    let mut rank = vec![0u32; nodes as usize];
    for (place, &node) in sorted.iter().enumerate() {
        rank[node as usize] = place as u32;
    }
    Analysis {
        fleet,
        checks,
        facts,
        failing: failing_set,
        passed,
        names: Names { sorted, rank },
    }
}

impl Analysis<'_> {
    /// The Slurm hostlist of `set`.
    pub(crate) fn hostlist(&self, set: &NodeSet) -> String {
        let mut places: Vec<u32> = set.iter().map(|n| self.names.rank[n as usize]).collect();
        places.sort_unstable();
        hostlist::compress_sorted(
            places
                .iter()
                .map(|&p| self.fleet.hosts[self.names.sorted[p as usize] as usize].as_str()),
        )
    }

    pub(crate) fn nodes(&self) -> usize {
        self.fleet.hosts.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fleet::parse::{NodeDoc, Verdict};

    fn node(host: &str, checks: &[(&str, &str, Status, &str)], kernel: &str) -> NodeDoc {
        NodeDoc {
            host: host.into(),
            origin: host.into(),
            checks: checks
                .iter()
                .map(|(id, area, status, actual)| Verdict {
                    id: id.to_string(),
                    area: area.to_string(),
                    status: *status,
                    expected: "x".into(),
                    actual: actual.to_string(),
                })
                .collect(),
            facts: vec![("kernel".into(), kernel.into())],
        }
    }

    fn view<'a>(a: &'a Analysis, name: &str) -> &'a KeyView<'a> {
        a.checks
            .iter()
            .chain(&a.facts)
            .find(|v| v.key.name == name)
            .unwrap()
    }

    #[test]
    fn the_profile_decides_not_the_majority() {
        let mut fleet = Fleet::default();
        for n in 1..=12 {
            let (status, value) = if n == 7 {
                (Status::Pass, "16777216")
            } else {
                (Status::Fail, "212992")
            };
            fleet.fold(node(
                &format!("gpu{n:02}"),
                &[("net.core.rmem_max", "network", status, value)],
                "6.1",
            ));
        }
        let a = analyse(&fleet);
        let rmem = view(&a, "net.core.rmem_max");
        assert_eq!(rmem.verdict, KeyVerdict::Fail);
        // The eleven failing nodes are what is wrong, the one passing node is not.
        assert_eq!(rmem.groups[0].status, Some(Status::Fail));
        assert_eq!(a.hostlist(&rmem.groups[0].nodes), "gpu[01-06,08-12]");
        assert_eq!(a.hostlist(&a.failing), "gpu[01-06,08-12]");
        assert!(!a.passed);
    }

    /// Issue 21: one node measured, two skipped: nothing drifts, the fleet passes.
    #[test]
    fn a_skip_is_not_a_value() {
        let mut fleet = Fleet::default();
        let nccl = |status, actual| ("gpu.nccl_version", "gpu", status, actual);
        fleet.fold(node("n1", &[nccl(Status::Pass, "2.21.5")], "6.1"));
        fleet.fold(node("n2", &[nccl(Status::Skip, "-")], "6.1"));
        fleet.fold(node("n3", &[nccl(Status::Skip, "-")], "6.1"));
        let a = analyse(&fleet);
        assert_eq!(view(&a, "gpu.nccl_version").verdict, KeyVerdict::Alike);
        assert!(a.passed);
        // Two measured versions do differ, and fail the fleet though each passes.
        fleet.fold(node("n4", &[nccl(Status::Pass, "2.18.1")], "6.1"));
        let a = analyse(&fleet);
        assert_eq!(view(&a, "gpu.nccl_version").verdict, KeyVerdict::Differs);
        assert!(!a.passed && a.failing.is_empty());
    }

    #[test]
    fn facts_differ_and_absence_is_a_value() {
        let mut fleet = Fleet::default();
        fleet.fold(node("n1", &[], "6.1"));
        fleet.fold(node("n2", &[], "6.2"));
        let mut n3 = node("n3", &[], "6.1");
        n3.facts
            .push(("nccl_conf.NCCL_IB_GID_INDEX".into(), "5".into()));
        fleet.fold(n3);
        let a = analyse(&fleet);
        assert_eq!(view(&a, "kernel").verdict, KeyVerdict::Differs);
        let gid = view(&a, "nccl_conf.NCCL_IB_GID_INDEX");
        assert_eq!(gid.verdict, KeyVerdict::Differs);
        assert_eq!(a.hostlist(&gid.absent), "n[1-2]");
        // Passing values that differ outside gpu/nic are shown, not failing.
        let mut fleet = Fleet::default();
        let swap = |v| [("vm.swappiness", "memory", Status::Pass, v)];
        fleet.fold(node("n1", &swap("1"), "6.1"));
        fleet.fold(node("n2", &swap("10"), "6.1"));
        let a = analyse(&fleet);
        assert_eq!(view(&a, "vm.swappiness").verdict, KeyVerdict::Varies);
        assert!(a.passed);
    }
}
