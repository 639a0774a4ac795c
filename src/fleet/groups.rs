//! Reports folded, one at a time, into value groups per check and per fact: a group is one
//! verdict and value and the set of nodes that have it, kept as ranges of node numbers, so
//! memory grows with the number of distinct values, not with the number of nodes (ten
//! thousand nodes that agree are one range).

use std::collections::HashMap;
use std::hash::BuildHasher;

use super::parse::NodeDoc;
use crate::finding::Status;

/// Nodes as ascending ranges of their numbers (numbers are given in fold order, so a node is
/// always added after every node already in the set).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct NodeSet {
    ranges: Vec<(u32, u32)>,
}

impl NodeSet {
    /// Adds `node`, which is above every node already in the set.
    pub(crate) fn push(&mut self, node: u32) {
        match self.ranges.last_mut() {
            Some((_, hi)) if *hi + 1 == node => *hi = node,
            Some((_, hi)) if *hi >= node => {}
            _ => self.ranges.push((node, node)),
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.ranges
            .iter()
            .map(|(lo, hi)| (hi - lo) as usize + 1)
            .sum()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        self.ranges.iter().flat_map(|&(lo, hi)| lo..=hi)
    }

    /// The nodes `0..nodes` that are in none of `sets`.
    pub(crate) fn complement<'a>(
        sets: impl IntoIterator<Item = &'a NodeSet>,
        nodes: u32,
    ) -> NodeSet {
        let mut all: Vec<(u32, u32)> = sets
            .into_iter()
            .flat_map(|s| s.ranges.iter().copied())
            .collect();
        all.sort_unstable();
        let mut out = NodeSet::default();
        let mut next = 0u32;
        for (lo, hi) in all {
            if lo > next {
                out.ranges.push((next, lo - 1));
            }
            next = next.max(hi.saturating_add(1));
        }
        if next < nodes {
            out.ranges.push((next, nodes - 1));
        }
        out
    }
}

/// One value of one check or fact, and who has it.
#[derive(Debug, Clone)]
pub(crate) struct Group {
    /// The check's verdict; `None` for a fact.
    pub status: Option<Status>,
    pub value: String,
    /// What the profile wanted (checks only).
    pub expected: String,
    pub nodes: NodeSet,
}

/// What a key is: a check of the area its reports name, or a fact. (A check whose report
/// names its area `fact` is still a check.)
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Of {
    Check(String),
    Fact,
}

impl Of {
    /// The word the report shows in parentheses: the check's area, or `fact`.
    pub(crate) fn name(&self) -> &str {
        match self {
            Of::Check(area) => area,
            Of::Fact => "fact",
        }
    }
}

/// One check or fact across the fleet.
#[derive(Debug, Clone)]
pub(crate) struct Key {
    pub name: String,
    /// A check and its area, or a fact.
    pub of: Of,
    pub groups: Vec<Group>,
    /// Group numbers by the hash of their `(status, expected, value)`.
    index: HashMap<u64, Vec<usize>>,
    /// The last node folded in: a report naming one check twice counts it once.
    last_node: Option<u32>,
    /// The group the last node joined: most nodes join the same one, found without hashing.
    last_group: usize,
}

/// A node reported more than once: the first report is counted, the others named.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Duplicate {
    pub host: String,
    pub counted: String,
    pub ignored: String,
}

/// Every report folded so far.
#[derive(Debug, Default)]
pub(crate) struct Fleet {
    /// Node names by number, in fold order, and where each came from.
    pub hosts: Vec<String>,
    pub origins: Vec<String>,
    numbers: HashMap<String, u32>,
    pub checks: Vec<Key>,
    check_index: HashMap<String, usize>,
    pub facts: Vec<Key>,
    fact_index: HashMap<String, usize>,
    pub duplicates: Vec<Duplicate>,
    hasher: std::collections::hash_map::RandomState,
    /// The checks of the last report, by position: reports list them in the same order, so
    /// the next report's are found without hashing.
    check_order: Vec<usize>,
}

impl Fleet {
    /// Folds one node's report in; a node already folded is recorded as a duplicate instead.
    pub(crate) fn fold(&mut self, doc: NodeDoc) {
        if let Some(&first) = self.numbers.get(&doc.host) {
            self.duplicates.push(Duplicate {
                counted: self.origins[first as usize].clone(),
                host: doc.host,
                ignored: doc.origin,
            });
            return;
        }
        let Ok(node) = u32::try_from(self.hosts.len()) else {
            return;
        };
        self.numbers.insert(doc.host.clone(), node);
        self.hosts.push(doc.host);
        self.origins.push(doc.origin);
        for (i, c) in doc.checks.into_iter().enumerate() {
            let k = match self.check_order.get(i) {
                Some(&k) if self.checks[k].name == c.id => k,
                _ => {
                    let of = Of::Check(c.area.clone());
                    let k = entry(&mut self.checks, &mut self.check_index, &c.id, of);
                    match self.check_order.get_mut(i) {
                        Some(slot) => *slot = k,
                        None => self.check_order.push(k),
                    }
                    k
                }
            };
            add(
                &mut self.checks[k],
                &self.hasher,
                node,
                Some(c.status),
                &c.expected,
                c.actual,
            );
        }
        for (name, value) in doc.facts {
            let k = entry(&mut self.facts, &mut self.fact_index, &name, Of::Fact);
            add(&mut self.facts[k], &self.hasher, node, None, "", value);
        }
    }

    pub(crate) fn nodes(&self) -> u32 {
        self.hosts.len() as u32
    }
}

/// The number of the key `name`, made when it is new.
fn entry(keys: &mut Vec<Key>, index: &mut HashMap<String, usize>, name: &str, of: Of) -> usize {
    match index.get(name) {
        Some(&n) => n,
        None => {
            keys.push(Key {
                name: name.to_string(),
                of,
                groups: Vec::new(),
                index: HashMap::new(),
                last_node: None,
                last_group: 0,
            });
            index.insert(name.to_string(), keys.len() - 1);
            keys.len() - 1
        }
    }
}

fn add(
    key: &mut Key,
    hasher: &impl BuildHasher,
    node: u32,
    status: Option<Status>,
    expected: &str,
    value: String,
) {
    if key.last_node == Some(node) {
        return;
    }
    key.last_node = Some(node);
    let same = |g: &Group| g.status == status && g.expected == expected && g.value == value;
    if let Some(g) = key.groups.get_mut(key.last_group)
        && same(g)
    {
        g.nodes.push(node);
        return;
    }
    let hash = hasher.hash_one((status, expected, value.as_str()));
    let bucket = key.index.entry(hash).or_default();
    let found = bucket.iter().copied().find(|&g| same(&key.groups[g]));
    let g = match found {
        Some(g) => g,
        None => {
            key.groups.push(Group {
                status,
                value,
                expected: expected.to_string(),
                nodes: NodeSet::default(),
            });
            bucket.push(key.groups.len() - 1);
            key.groups.len() - 1
        }
    };
    key.groups[g].nodes.push(node);
    key.last_group = g;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fleet::parse::Verdict;

    fn doc(host: &str, rmem: (Status, &str)) -> NodeDoc {
        NodeDoc {
            host: host.into(),
            origin: format!("{host}.json: byte 0"),
            checks: vec![Verdict {
                id: "net.core.rmem_max".into(),
                area: "network".into(),
                status: rmem.0,
                expected: ">= 16777216".into(),
                actual: rmem.1.into(),
            }],
            facts: vec![("kernel".into(), "6.1".into())],
        }
    }

    #[test]
    fn sets_are_ranges() {
        let mut s = NodeSet::default();
        for n in [0, 1, 2, 5, 6, 9] {
            s.push(n);
        }
        assert_eq!(s.ranges, [(0, 2), (5, 6), (9, 9)]);
        assert_eq!(s.len(), 6);
        let holes = NodeSet::complement([&s], 12);
        assert_eq!(holes.iter().collect::<Vec<_>>(), [3, 4, 7, 8, 10, 11]);
        assert!(NodeSet::complement([&s, &holes], 12).is_empty());
    }

    #[test]
    fn memory_follows_values_not_nodes() {
        let mut fleet = Fleet::default();
        for n in 0..10_000 {
            let value = if n == 997 { "16777216" } else { "212992" };
            let status = if n == 997 { Status::Pass } else { Status::Fail };
            fleet.fold(doc(&format!("gpu{n:05}"), (status, value)));
        }
        let rmem = &fleet.checks[0];
        assert_eq!(rmem.groups.len(), 2);
        assert_eq!(rmem.groups[0].nodes.ranges, [(0, 996), (998, 9999)]);
        assert_eq!(fleet.facts[0].groups[0].nodes.ranges, [(0, 9999)]);
    }

    #[test]
    fn a_node_twice_is_a_duplicate_not_two_nodes() {
        let mut fleet = Fleet::default();
        fleet.fold(doc("gpu01", (Status::Pass, "1")));
        let mut again = doc("gpu01", (Status::Fail, "2"));
        again.origin = "again.json: byte 9".into();
        fleet.fold(again);
        assert_eq!(fleet.nodes(), 1);
        assert_eq!(fleet.checks[0].groups.len(), 1);
        assert_eq!(
            fleet.duplicates,
            [Duplicate {
                host: "gpu01".into(),
                counted: "gpu01.json: byte 0".into(),
                ignored: "again.json: byte 9".into(),
            }]
        );
    }
}
