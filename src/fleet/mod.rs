//! The odd node out: many nodes' audit reports compared check by check and fact by fact,
//! naming the value most nodes have and the nodes that differ, even when each one passes on
//! its own (two NCCL versions in one job hang it).

pub mod facts;
pub mod input;

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::Value;

use input::Document;

/// The audit JSON versions this reader understands.
pub const SCHEMA_VERSIONS: std::ops::RangeInclusive<u64> = 1..=2;

/// Areas whose facts (driver, CUDA, NCCL, cuDNN versions; NICs, speeds, GID index) must be
/// alike across a job's nodes: a node that differs there fails the fleet even if it passes.
const FACT_AREAS: &[&str] = &["gpu", "nic"];

/// A report that is not an audit report; names the document.
#[derive(Debug, thiserror::Error)]
pub enum FleetError {
    #[error("{origin}: not a gputune audit report: {problem}")]
    NotAReport { origin: String, problem: String },
    #[error("host {host} appears twice: {first} and {second}")]
    Duplicate {
        host: String,
        first: String,
        second: String,
    },
}

/// One check of one node, as its report says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Item {
    pub id: String,
    pub area: String,
    pub status: String,
    pub expected: String,
    pub actual: String,
}

/// One node's report, reduced to what is compared.
#[derive(Debug, Clone)]
pub struct NodeReport {
    pub host: String,
    pub origin: String,
    pub items: Vec<Item>,
    /// Facts outside the findings: `kernel`, and the report's `host.facts`.
    pub facts: BTreeMap<String, String>,
}

impl NodeReport {
    pub fn from_document(doc: &Document) -> Result<NodeReport, FleetError> {
        let bad = |problem: String| FleetError::NotAReport {
            origin: doc.origin.clone(),
            problem,
        };
        let v = &doc.value;
        let version = v["schema_version"]
            .as_u64()
            .ok_or_else(|| bad("no schema_version".into()))?;
        if !SCHEMA_VERSIONS.contains(&version) {
            return Err(bad(format!(
                "schema_version {version} is newer than this gputune reads ({})",
                SCHEMA_VERSIONS.end()
            )));
        }
        let host = v["host"]["hostname"]
            .as_str()
            .filter(|h| !h.is_empty())
            .ok_or_else(|| bad("no host.hostname".into()))?
            .to_string();
        let findings = v["findings"]
            .as_array()
            .ok_or_else(|| bad("no findings array".into()))?;
        let mut items = Vec::with_capacity(findings.len());
        for (n, f) in findings.iter().enumerate() {
            let field = |name: &str| {
                f[name]
                    .as_str()
                    .map(str::to_string)
                    .ok_or_else(|| bad(format!("findings[{n}] has no string {name:?}")))
            };
            items.push(Item {
                id: field("id")?,
                area: field("area")?,
                status: field("status")?,
                expected: field("expected")?,
                actual: field("actual")?,
            });
        }
        let mut facts = BTreeMap::new();
        if let Some(kernel) = v["host"]["kernel"].as_str() {
            facts.insert("kernel".to_string(), kernel.to_string());
        }
        for extra in [&v["host"]["facts"], &v["facts"]] {
            if let Some(extra) = extra.as_object() {
                flatten("", extra, &mut facts);
            }
        }
        Ok(NodeReport {
            host,
            origin: doc.origin.clone(),
            items,
            facts,
        })
    }

    /// Failing checks: `fail` and `error`.
    pub fn failures(&self) -> Vec<&Item> {
        self.items
            .iter()
            .filter(|i| i.status == "fail" || i.status == "error")
            .collect()
    }
}

/// Nested facts as dotted keys (`nics.eth0.speed_mbps`), arrays as their JSON text.
fn flatten(prefix: &str, map: &serde_json::Map<String, Value>, out: &mut BTreeMap<String, String>) {
    for (k, v) in map {
        let key = if prefix.is_empty() {
            k.clone()
        } else {
            format!("{prefix}.{k}")
        };
        match v {
            Value::Object(inner) => flatten(&key, inner, out),
            Value::String(s) => {
                out.insert(key, s.clone());
            }
            other => {
                out.insert(key, other.to_string());
            }
        }
    }
}

/// One check or fact on which some nodes differ from the others.
#[derive(Debug, Clone, Serialize)]
pub struct Drift {
    /// The check id, or `fact:<name>`.
    pub key: String,
    pub area: String,
    /// The value most nodes have (`actual [status]` for checks).
    pub majority: String,
    pub majority_nodes: Vec<String>,
    /// True when another value has as many nodes: the majority is then the first in order.
    pub tie: bool,
    /// The other nodes and their values.
    pub differ: Vec<NodeValue>,
    /// True when this drift fails the fleet (see [`Analysis::failed`]).
    pub failing: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct NodeValue {
    pub node: String,
    pub value: String,
}

/// One node's failing checks.
#[derive(Debug, Clone, Serialize)]
pub struct NodeFailures<'a> {
    pub node: String,
    pub origin: String,
    pub failures: Vec<&'a Item>,
}

/// The whole comparison.
#[derive(Debug, Serialize)]
pub struct Analysis<'a> {
    pub nodes: usize,
    pub drift: Vec<Drift>,
    pub failures: Vec<NodeFailures<'a>>,
    /// Any node fails a check, or drifts on a failing drift.
    pub failed: bool,
}

/// Reads the reports and refuses a host that appears twice (two runs of one node would
/// make it its own majority).
pub fn reports(docs: &[Document]) -> Result<Vec<NodeReport>, FleetError> {
    let mut seen: BTreeMap<String, String> = BTreeMap::new();
    let mut out = Vec::new();
    for doc in docs {
        let report = NodeReport::from_document(doc)?;
        if let Some(first) = seen.insert(report.host.clone(), report.origin.clone()) {
            return Err(FleetError::Duplicate {
                host: report.host,
                first,
                second: doc.origin.clone(),
            });
        }
        out.push(report);
    }
    out.sort_by(|a, b| a.host.cmp(&b.host));
    Ok(out)
}

/// Each node's `(value, status)` for one check or fact.
type PerNode<'a> = BTreeMap<&'a str, (String, String)>;

/// Compares every check and fact across `nodes`.
///
/// A drift fails the fleet when a node's status differs from the majority's on that check
/// (it fails, errs or skips where most pass, or the reverse), or when it is a fact that must
/// be alike across a job: `kernel`, any reported fact, and the actual values of the `gpu` and
/// `nic` checks (driver, CUDA, NCCL, cuDNN versions, NICs and their speeds, GID index). Other
/// value differences (two passing sysctl values) are shown but do not fail it.
pub fn analyse(nodes: &[NodeReport]) -> Analysis<'_> {
    let mut table: BTreeMap<String, (String, PerNode)> = BTreeMap::new();
    for node in nodes {
        for item in &node.items {
            let entry = table
                .entry(item.id.clone())
                .or_insert_with(|| (item.area.clone(), BTreeMap::new()));
            entry.1.insert(
                &node.host,
                (
                    format!("{} [{}]", item.actual, item.status),
                    item.status.clone(),
                ),
            );
        }
        for (fact, value) in &node.facts {
            let entry = table
                .entry(format!("fact:{fact}"))
                .or_insert_with(|| ("facts".to_string(), BTreeMap::new()));
            entry.1.insert(&node.host, (value.clone(), String::new()));
        }
    }
    let mut drift = Vec::new();
    for (key, (area, values)) in &table {
        let value_of = |host: &str| {
            values
                .get(host)
                .cloned()
                .unwrap_or_else(|| ("(absent)".to_string(), "absent".to_string()))
        };
        let mut groups: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for node in nodes {
            groups
                .entry(value_of(&node.host).0)
                .or_default()
                .push(node.host.clone());
        }
        if groups.len() < 2 {
            continue;
        }
        let most = groups.values().map(Vec::len).max().unwrap_or(0);
        let tie = groups.values().filter(|g| g.len() == most).count() > 1;
        let Some((majority, majority_nodes)) = groups.iter().find(|(_, g)| g.len() == most) else {
            continue;
        };
        let majority_status = value_of(&majority_nodes[0]).1;
        let fact = key.starts_with("fact:") || FACT_AREAS.contains(&area.as_str());
        let differ: Vec<NodeValue> = nodes
            .iter()
            .map(|n| (n, value_of(&n.host)))
            .filter(|(_, (v, _))| v != majority)
            .map(|(n, (value, _))| NodeValue {
                node: n.host.clone(),
                value,
            })
            .collect();
        let status_differs = nodes.iter().any(|n| value_of(&n.host).1 != majority_status);
        drift.push(Drift {
            key: key.clone(),
            area: area.clone(),
            majority: majority.clone(),
            majority_nodes: majority_nodes.clone(),
            tie,
            differ,
            failing: fact || status_differs,
        });
    }
    let failures: Vec<NodeFailures> = nodes
        .iter()
        .map(|n| NodeFailures {
            node: n.host.clone(),
            origin: n.origin.clone(),
            failures: n.failures(),
        })
        .filter(|f| !f.failures.is_empty())
        .collect();
    let failed = !failures.is_empty() || drift.iter().any(|d| d.failing);
    Analysis {
        nodes: nodes.len(),
        drift,
        failures,
        failed,
    }
}

/// The table people read: drift first (the odd node out), then each node's failures.
pub fn render_text(a: &Analysis) -> String {
    let mut out = format!("gputune fleet: {} nodes\n", a.nodes);
    if a.drift.is_empty() {
        out.push_str("\nNo drift: every node has the same value for every check and fact.\n");
    } else {
        out.push_str("\nDrift (the value most nodes have, then the nodes that differ):\n");
        for d in &a.drift {
            let mark = if d.failing { "!" } else { " " };
            let tie = if d.tie { ", tie" } else { "" };
            out.push_str(&format!(
                "{mark} {} ({}): {} on {} node(s){tie}\n",
                d.key,
                d.area,
                d.majority,
                d.majority_nodes.len()
            ));
            for v in &d.differ {
                out.push_str(&format!("      {}: {}\n", v.node, v.value));
            }
        }
    }
    if !a.failures.is_empty() {
        out.push_str("\nFailures per node:\n");
        for n in &a.failures {
            out.push_str(&format!("  {} ({}):\n", n.node, n.origin));
            for f in &n.failures {
                out.push_str(&format!(
                    "    {} {}: {} (want {})\n",
                    f.status, f.id, f.actual, f.expected
                ));
            }
        }
    }
    out.push_str(&format!(
        "\n{} nodes, {} failing, {} drifting checks or facts ({} that fail the fleet)\n",
        a.nodes,
        a.failures.len(),
        a.drift.len(),
        a.drift.iter().filter(|d| d.failing).count()
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn doc(host: &str, kernel: &str, findings: &[(&str, &str, &str, &str)]) -> Document {
        let findings: Vec<Value> = findings
            .iter()
            .map(|(id, area, status, actual)| {
                json!({"id": id, "area": area, "status": status, "expected": "x", "actual": actual})
            })
            .collect();
        Document {
            origin: format!("{host}.json"),
            value: json!({"schema_version": 1, "host": {"hostname": host, "kernel": kernel},
                          "findings": findings}),
        }
    }

    #[test]
    fn names_the_odd_node_out() {
        let rmem = |status, v| ("net.core.rmem_max", "network", status, v);
        let pass = rmem("pass", "16777216");
        let nccl = |v| ("gpu.nccl_version", "gpu", "pass", v);
        let docs = [
            doc("n1", "6.1", &[pass, nccl("2.21.5")]),
            doc("n2", "6.1", &[pass, nccl("2.21.5")]),
            doc("n3", "6.1", &[pass, nccl("2.18.1")]),
        ];
        let nodes = reports(&docs).unwrap();
        let a = analyse(&nodes);
        assert_eq!(a.drift.len(), 1);
        let d = &a.drift[0];
        assert_eq!(d.key, "gpu.nccl_version");
        assert_eq!(d.majority, "2.21.5 [pass]");
        assert_eq!(d.differ[0].node, "n3");
        // Each node passes, but two NCCL versions fail the fleet.
        assert!(a.failures.is_empty() && a.failed);

        let docs = [
            doc("n1", "6.1", &[pass]),
            doc("n2", "6.1", &[pass]),
            doc("n3", "6.2", &[rmem("fail", "212992")]),
            doc("n4", "6.1", &[rmem("pass", "33554432")]),
        ];
        let nodes = reports(&docs).unwrap();
        let a = analyse(&nodes);
        let keys: Vec<&str> = a.drift.iter().map(|d| d.key.as_str()).collect();
        assert_eq!(keys, ["fact:kernel", "net.core.rmem_max"]);
        assert_eq!(a.drift[1].differ.len(), 2);
        assert_eq!(a.failures.len(), 1);
        assert_eq!(a.failures[0].node, "n3");
        assert!(a.failed);
        let text = render_text(&a);
        assert!(text.contains("n3: 212992 [fail]"), "{text}");

        // Only a passing value difference: shown, not failing.
        let docs = [
            doc("n1", "6.1", &[pass]),
            doc("n2", "6.1", &[rmem("pass", "33554432")]),
        ];
        let nodes = reports(&docs).unwrap();
        let a = analyse(&nodes);
        assert_eq!(a.drift.len(), 1);
        assert!(a.drift[0].tie && !a.failed);
    }

    #[test]
    fn refuses_what_is_not_a_report() {
        let bad = |value: Value| {
            let d = Document {
                origin: "r.json:1".into(),
                value,
            };
            NodeReport::from_document(&d).unwrap_err().to_string()
        };
        assert!(
            bad(json!({"a": 1}))
                .contains("r.json:1: not a gputune audit report: no schema_version")
        );
        assert!(bad(json!({"schema_version": 9})).contains("newer"));
        assert!(bad(json!({"schema_version": 1, "host": {}})).contains("no host.hostname"));
        assert!(
            bad(json!({"schema_version": 1, "host": {"hostname": "n"}, "findings": [{"id": 1}]}))
                .contains("findings[0]")
        );
        let twice = reports(&[doc("n1", "6", &[]), doc("n1", "6", &[])]).unwrap_err();
        assert!(
            twice.to_string().contains("host n1 appears twice"),
            "{twice}"
        );
    }
}
