//! The judged fleet for people (a table that reads at ten thousand nodes: only what fails,
//! differs or varies, each value group once with its hostlist), for scripts (JSON with every
//! group), for a dashboard (Prometheus text) and for `scontrol`/`pdsh -w` (the failing
//! hostlist alone). Every string in them was cleaned when it was read.

use serde::Serialize;

use super::Reading;
use super::groups::{Group, Of};
use super::verdict::{Analysis, KeyVerdict, KeyView};
use crate::finding::Status;
use crate::report::prometheus::label;

/// The fleet JSON's own version: 2 replaced version 1's `drift` and `failures` lists with
/// value groups and hostlists.
pub(crate) const SCHEMA_VERSION: u32 = 2;

/// Value groups shown per check in the table; the rest are counted (JSON lists them all).
const GROUPS_SHOWN: usize = 6;
/// Duplicates named in the table; the rest are counted.
const DUPLICATES_SHOWN: usize = 5;
/// Values longer than this are cut in the table (JSON keeps them whole).
const VALUE_WIDTH: usize = 48;

/// A group's value as the table shows it.
fn shown_value(g: &Group) -> String {
    let value = match g.status {
        Some(Status::Skip) => "(skipped)".to_string(),
        Some(Status::Fail | Status::Warn | Status::Error) if !g.expected.is_empty() => {
            format!("{} (want {})", g.value, g.expected)
        }
        _ => g.value.clone(),
    };
    if value.chars().count() > VALUE_WIDTH {
        let cut: String = value.chars().take(VALUE_WIDTH - 1).collect();
        format!("{cut}…")
    } else {
        value
    }
}

fn plural(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// The table: a summary line, the failing hostlist, then each check or fact that fails,
/// differs or varies, with its value groups (failing first).
pub(crate) fn table(a: &Analysis, reading: &Reading) -> String {
    let count = |v: KeyVerdict, views: &[KeyView]| views.iter().filter(|k| k.verdict == v).count();
    let mut out = format!(
        "gputune fleet: {}, {} failing",
        plural(a.nodes(), "node", "nodes"),
        a.failing.len()
    );
    let failing_checks = count(KeyVerdict::Fail, &a.checks);
    if failing_checks > 0 {
        out.push_str(&format!(
            "; {} fail",
            plural(failing_checks, "check", "checks")
        ));
    }
    let differing = count(KeyVerdict::Differs, &a.checks) + count(KeyVerdict::Differs, &a.facts);
    if differing > 0 {
        out.push_str(&format!(
            "; {} that must be alike {}",
            plural(differing, "value", "values"),
            if differing == 1 { "differs" } else { "differ" }
        ));
    }
    out.push('\n');
    if !a.failing.is_empty() {
        out.push_str(&format!("failing: {}\n", a.hostlist(&a.failing)));
    }
    let width = a.nodes().to_string().len();
    let shown: Vec<&KeyView> = a
        .checks
        .iter()
        .chain(&a.facts)
        .filter(|v| v.verdict != KeyVerdict::Alike)
        .collect();
    let mut shown_sorted = shown.clone();
    shown_sorted.sort_by_key(|v| v.verdict);
    for view in shown_sorted {
        let fact = view.key.of == Of::Fact;
        let tag = match view.verdict {
            KeyVerdict::Fail => "FAIL",
            KeyVerdict::Differs => "DIFFERS",
            KeyVerdict::Varies => "VARIES",
            KeyVerdict::Alike => "ALIKE",
        };
        out.push_str(&format!(
            "\n{tag} {} ({})\n",
            view.key.name,
            view.key.of.name()
        ));
        let mut rows: Vec<(String, &str, String, String)> = view
            .groups
            .iter()
            .map(|g| {
                let status = g.status.map_or("", Status::name);
                (
                    g.nodes.len().to_string(),
                    status,
                    shown_value(g),
                    a.hostlist(&g.nodes),
                )
            })
            .collect();
        if !view.absent.is_empty() {
            let what = if fact { "(absent)" } else { "(not reported)" };
            rows.push((
                view.absent.len().to_string(),
                "",
                what.into(),
                a.hostlist(&view.absent),
            ));
        }
        let value_width = rows
            .iter()
            .take(GROUPS_SHOWN)
            .map(|r| r.2.chars().count())
            .max()
            .unwrap_or(0);
        for (n, status, value, hosts) in rows.iter().take(GROUPS_SHOWN) {
            let status = if fact {
                String::new()
            } else {
                format!("{status:<5}  ")
            };
            let pad = value_width - value.chars().count();
            out.push_str(&format!(
                "  {n:>width$}  {status}{value}{:pad$}  {hosts}\n",
                ""
            ));
        }
        if rows.len() > GROUPS_SHOWN {
            let rest = &rows[GROUPS_SHOWN..];
            let nodes: usize = rest.iter().filter_map(|r| r.0.parse::<usize>().ok()).sum();
            out.push_str(&format!(
                "  … {} more on {} (--format json lists them all)\n",
                plural(rest.len(), "value", "values"),
                plural(nodes, "node", "nodes"),
            ));
        }
    }
    let alike = |views: &[KeyView]| {
        views
            .iter()
            .filter(|v| v.verdict == KeyVerdict::Alike)
            .count()
    };
    out.push('\n');
    if shown.is_empty() {
        out.push_str("Every node has the same verdict and value for every check and fact.\n");
    } else {
        out.push_str(&format!(
            "{} and {} alike on every node.\n",
            plural(alike(&a.checks), "check", "checks"),
            plural(alike(&a.facts), "fact", "facts"),
        ));
    }
    let dups = &a.fleet.duplicates;
    if !dups.is_empty() {
        out.push_str(&format!(
            "{} reported more than once, counted once:\n",
            plural(dups.len(), "report names a node", "reports name a node")
        ));
        for d in dups.iter().take(DUPLICATES_SHOWN) {
            out.push_str(&format!(
                "  {}: counted {}, not {}\n",
                d.host, d.counted, d.ignored
            ));
        }
        if dups.len() > DUPLICATES_SHOWN {
            out.push_str(&format!("  … and {} more\n", dups.len() - DUPLICATES_SHOWN));
        }
    }
    if reading.skipped > 0 {
        out.push_str(&format!(
            "{} skipped: not readable audit reports (named on standard error).\n",
            plural(reading.skipped, "document or file", "documents or files")
        ));
    }
    out
}

/// `--failing`: the hostlist of the nodes that fail or err on a check, for `scontrol update
/// nodename=…` or `pdsh -w`; nothing when none does.
pub(crate) fn failing(a: &Analysis) -> String {
    if a.failing.is_empty() {
        String::new()
    } else {
        format!("{}\n", a.hostlist(&a.failing))
    }
}

#[derive(Serialize)]
struct JsonFleet<'a> {
    schema_version: u32,
    passed: bool,
    nodes: usize,
    failing: Nodes,
    checks: Vec<JsonKey<'a>>,
    facts: Vec<JsonKey<'a>>,
    duplicates: Vec<JsonDuplicate<'a>>,
    skipped_documents: usize,
    /// The first problems, by file and byte.
    problems: &'a [String],
}

#[derive(Serialize)]
struct Nodes {
    nodes: usize,
    hostlist: String,
}

#[derive(Serialize)]
struct JsonKey<'a> {
    #[serde(rename = "id")]
    name: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    area: Option<&'a str>,
    verdict: KeyVerdict,
    groups: Vec<JsonGroup<'a>>,
    /// Checks: nodes whose report lacks the check. Facts: nodes without the fact (also a
    /// group of its own, with a null value).
    #[serde(skip_serializing_if = "Option::is_none")]
    not_reported: Option<Nodes>,
}

#[derive(Serialize)]
struct JsonGroup<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    status: Option<Status>,
    /// Null for a fact's nodes that lack it.
    value: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    expected: Option<&'a str>,
    nodes: usize,
    hostlist: String,
}

#[derive(Serialize)]
struct JsonDuplicate<'a> {
    host: &'a str,
    counted: &'a str,
    ignored: &'a str,
}

fn json_key<'a>(a: &Analysis, view: &KeyView<'a>) -> JsonKey<'a> {
    let fact = view.key.of == Of::Fact;
    let mut groups: Vec<JsonGroup> = view
        .groups
        .iter()
        .map(|g| JsonGroup {
            status: g.status,
            value: Some(&g.value),
            expected: (!fact).then_some(g.expected.as_str()),
            nodes: g.nodes.len(),
            hostlist: a.hostlist(&g.nodes),
        })
        .collect();
    let absent = (!view.absent.is_empty()).then(|| Nodes {
        nodes: view.absent.len(),
        hostlist: a.hostlist(&view.absent),
    });
    if fact && let Some(absent) = &absent {
        groups.push(JsonGroup {
            status: None,
            value: None,
            expected: None,
            nodes: absent.nodes,
            hostlist: absent.hostlist.clone(),
        });
    }
    JsonKey {
        name: &view.key.name,
        area: (!fact).then_some(view.key.of.name()),
        verdict: view.verdict,
        groups,
        not_reported: absent,
    }
}

/// Every check and fact with all its groups, hostlists and node counts.
pub(crate) fn json(a: &Analysis, reading: &Reading) -> String {
    let doc = JsonFleet {
        schema_version: SCHEMA_VERSION,
        passed: a.passed,
        nodes: a.nodes(),
        failing: Nodes {
            nodes: a.failing.len(),
            hostlist: a.hostlist(&a.failing),
        },
        checks: a.checks.iter().map(|v| json_key(a, v)).collect(),
        facts: a.facts.iter().map(|v| json_key(a, v)).collect(),
        duplicates: a
            .fleet
            .duplicates
            .iter()
            .map(|d| JsonDuplicate {
                host: &d.host,
                counted: &d.counted,
                ignored: &d.ignored,
            })
            .collect(),
        skipped_documents: reading.skipped,
        problems: &reading.problems,
    };
    let mut text = serde_json::to_string_pretty(&doc)
        .unwrap_or_else(|e| format!("{{\"error\": {:?}}}", e.to_string()));
    text.push('\n');
    text
}

/// node_exporter textfile format: per check the nodes in each verdict, per fact its number
/// of values, and the fleet's totals.
pub(crate) fn prometheus(a: &Analysis, reading: &Reading) -> String {
    let mut out = String::new();
    let mut gauge = |name: &str, help: &str, lines: Vec<String>| {
        out.push_str(&format!("# HELP {name} {help}\n# TYPE {name} gauge\n"));
        for line in lines {
            out.push_str(&format!("{name}{line}\n"));
        }
    };
    gauge(
        "gputune_fleet_nodes",
        "Nodes whose audit reports were read (a node reported twice counts once).",
        vec![format!(" {}", a.nodes())],
    );
    gauge(
        "gputune_fleet_failing_nodes",
        "Nodes that fail or err on at least one check.",
        vec![format!(" {}", a.failing.len())],
    );
    gauge(
        "gputune_fleet_passed",
        "1 when no node fails and nothing that must be alike differs.",
        vec![format!(" {}", u8::from(a.passed))],
    );
    let statuses = [
        Status::Pass,
        Status::Warn,
        Status::Fail,
        Status::Skip,
        Status::Error,
    ];
    let mut checks = Vec::new();
    for view in &a.checks {
        for status in statuses {
            let n: usize = view
                .groups
                .iter()
                .filter(|g| g.status == Some(status))
                .map(|g| g.nodes.len())
                .sum();
            checks.push(format!(
                "{{id=\"{}\",area=\"{}\",status=\"{}\"}} {n}",
                label(&view.key.name),
                label(view.key.of.name()),
                status.name()
            ));
        }
    }
    gauge(
        "gputune_fleet_check_nodes",
        "Nodes per check and verdict.",
        checks,
    );
    let facts = a
        .facts
        .iter()
        .map(|v| {
            let values = v.groups.len() + usize::from(!v.absent.is_empty());
            format!("{{name=\"{}\"}} {values}", label(&v.key.name))
        })
        .collect();
    gauge(
        "gputune_fleet_fact_values",
        "Distinct values of each fact across the nodes (absence counts as one); 1 when alike.",
        facts,
    );
    gauge(
        "gputune_fleet_duplicate_reports",
        "Reports of a node already read, not counted.",
        vec![format!(" {}", a.fleet.duplicates.len())],
    );
    gauge(
        "gputune_fleet_skipped_documents",
        "Files and documents that were not readable audit reports.",
        vec![format!(" {}", reading.skipped)],
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fleet::groups::Fleet;
    use crate::fleet::parse::{NodeDoc, Verdict};
    use crate::fleet::verdict::analyse;

    /// A report is foreign input: a check whose area is spelt `fact` is still a check, with
    /// its area and what the profile expected, not taken for one of the node's facts.
    #[test]
    fn a_check_whose_area_reads_fact_is_still_a_check() {
        let mut fleet = Fleet::default();
        for (host, value) in [("n1", "1"), ("n2", "2")] {
            fleet.fold(NodeDoc {
                host: host.into(),
                origin: host.into(),
                checks: vec![Verdict {
                    id: "x.y".into(),
                    area: "fact".into(),
                    status: Status::Pass,
                    expected: "any".into(),
                    actual: value.into(),
                }],
                facts: vec![],
            });
        }
        let a = analyse(&fleet);
        let view = a.checks.iter().find(|v| v.key.name == "x.y").unwrap();
        let key = json_key(&a, view);
        assert_eq!(key.area, Some("fact"));
        assert_eq!(key.groups[0].expected, Some("any"));
    }
}
