//! The preflight report three ways: a table (problems first, grouped by cause, nodes as
//! Slurm hostlists, the matrix only when it fits a terminal), one JSON document, and one
//! self-contained HTML page (no network, no scripts) with the reachability matrix and, given
//! `bench --pairs` JSON, the bandwidth matrix as heat maps.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Read;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::bench::control::hostlist;
use crate::report::table::clean;

use super::facts::JobPorts;
use super::judge::{Probed, Problem};
use super::wire::Facts;

/// The most nodes whose matrix the table prints.
pub(crate) const TABLE_MATRIX_MAX: usize = 32;
/// The largest `--pairs-report` read.
const PAIRS_LIMIT: u64 = 64 << 20;

/// One probed cell, with host names.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Pair {
    pub from: usize,
    pub from_host: String,
    pub to: usize,
    pub to_host: String,
    pub port: u16,
    pub kind: String,
    pub ms: Option<f64>,
    pub error: Option<String>,
    pub firewall: Option<String>,
}

/// One node's line in the report.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Node {
    pub rank: usize,
    pub host: String,
    pub interface: Option<String>,
    pub address: Option<String>,
    pub mtu: Option<u32>,
    pub rule: String,
    /// `MASTER_ADDR` and this node's own name as it resolves them (or why not).
    pub master_addr: String,
    pub own_name: String,
    pub clock_offset_ms: Option<f64>,
}

/// The whole report, as JSON writes it.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Report {
    pub schema_version: u32,
    pub world: usize,
    pub joined: usize,
    pub missing: Vec<usize>,
    /// Ranks that joined but sent no results before the deadline.
    pub silent: Vec<usize>,
    pub coverage: String,
    pub ports: String,
    pub problems: Vec<Problem>,
    pub pairs: Vec<Pair>,
    /// Each version's values and the nodes (hostlist) that have each.
    pub versions: BTreeMap<String, BTreeMap<String, String>>,
    pub nccl_env: BTreeMap<String, BTreeMap<String, String>>,
    pub nodes: Vec<Node>,
}

fn grouped(
    all: &[Option<Facts>],
    values: impl Fn(&Facts) -> BTreeMap<String, String>,
) -> BTreeMap<String, BTreeMap<String, String>> {
    let mut by: BTreeMap<String, BTreeMap<String, Vec<String>>> = BTreeMap::new();
    let facts: Vec<&Facts> = all.iter().flatten().collect();
    let mut keys: Vec<String> = facts.iter().flat_map(|f| values(f).into_keys()).collect();
    keys.sort();
    keys.dedup();
    for f in &facts {
        let v = values(f);
        for k in &keys {
            let value = v.get(k).cloned().unwrap_or_else(|| "(unset)".into());
            by.entry(k.clone())
                .or_default()
                .entry(value)
                .or_default()
                .push(f.host.clone());
        }
    }
    by.into_iter()
        .map(|(k, m)| {
            (
                k,
                m.into_iter()
                    .map(|(v, hosts)| (v, hostlist::compress(hosts.iter().map(String::as_str))))
                    .collect(),
            )
        })
        .collect()
}

/// `name -> a, b` or the lookup's error.
fn answer(name: &str, resolved: &Result<Vec<std::net::IpAddr>, String>) -> String {
    match resolved {
        Ok(ips) => format!(
            "{name} -> {}",
            ips.iter()
                .map(|i| i.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Err(e) => e.clone(),
    }
}

impl Report {
    pub(crate) fn build(
        all: &[Option<Facts>],
        probed: &BTreeMap<usize, Probed>,
        problems: &[Problem],
        nodes: &[usize],
        ports: &JobPorts,
        silent: &[usize],
    ) -> Report {
        let host = |r: usize| {
            all.get(r)
                .and_then(|f| f.as_ref())
                .map_or_else(|| format!("rank{r}"), |f| f.host.clone())
        };
        let mut pairs = Vec::new();
        for p in probed.values() {
            for c in &p.cells {
                let listen = all
                    .get(c.to)
                    .and_then(|f| f.as_ref())
                    .and_then(|f| f.listens.iter().find(|l| l.port == c.port));
                pairs.push(Pair {
                    from: c.from,
                    from_host: host(c.from),
                    to: c.to,
                    to_host: host(c.to),
                    port: c.port,
                    kind: listen.map_or("rendezvous".into(), |l| l.kind.clone()),
                    ms: c.ms,
                    error: c.error.clone(),
                    firewall: if c.error.is_some() {
                        listen.and_then(|l| l.firewall.clone())
                    } else {
                        None
                    },
                });
            }
        }
        pairs.sort_by_key(|p| (p.from, p.to, p.port));
        Report {
            schema_version: 1,
            world: all.len(),
            joined: all.iter().flatten().count(),
            missing: (0..all.len()).filter(|r| all[*r].is_none()).collect(),
            silent: silent.to_vec(),
            coverage: super::plan::coverage(nodes.len()),
            ports: ports.source.clone(),
            problems: problems.to_vec(),
            pairs,
            versions: grouped(all, |f| f.versions.clone()),
            nccl_env: grouped(all, |f| f.nccl_env.clone()),
            nodes: all
                .iter()
                .flatten()
                .map(|f| Node {
                    rank: f.rank,
                    host: f.host.clone(),
                    interface: f.nccl.chosen.as_ref().map(|c| c.name.clone()),
                    address: f.nccl.chosen.as_ref().map(|c| c.addr.to_string()),
                    mtu: f.mtu,
                    rule: f.nccl.rule.clone(),
                    master_addr: answer(&f.master_addr, &f.master_resolved),
                    own_name: answer(&f.host, &f.own_name),
                    clock_offset_ms: probed.get(&f.rank).and_then(|p| p.clock_offset_ms),
                })
                .collect(),
        }
    }

    /// Hosts of the probing nodes, in rank order (the matrix's rows and columns).
    fn matrix_hosts(&self) -> Vec<(usize, String)> {
        let mut seen: BTreeMap<usize, String> = BTreeMap::new();
        for p in &self.pairs {
            seen.insert(p.from, p.from_host.clone());
            seen.insert(p.to, p.to_host.clone());
        }
        seen.into_iter().collect()
    }

    /// The worst outcome of each (from, to): the failed ports, or the slowest connect.
    fn cells(&self) -> BTreeMap<(usize, usize), (Vec<&Pair>, f64)> {
        let mut out: BTreeMap<(usize, usize), (Vec<&Pair>, f64)> = BTreeMap::new();
        for p in &self.pairs {
            let e = out.entry((p.from, p.to)).or_insert((Vec::new(), 0.0));
            if p.error.is_some() {
                e.0.push(p);
            } else if let Some(ms) = p.ms {
                e.1 = e.1.max(ms);
            }
        }
        out
    }
}

/// The JSON document.
pub(crate) fn json(report: &Report) -> String {
    let mut text = serde_json::to_string_pretty(report).unwrap_or_else(|_| "{}".into());
    text.push('\n');
    text
}

/// The table: a header, problems grouped by category with their nodes, then the matrix.
pub(crate) fn table(r: &Report) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "gputune preflight: {} of {} ranks joined; {}; ports from {}",
        r.joined,
        r.world,
        r.coverage,
        clean(&r.ports)
    );
    let mut by: BTreeMap<&str, Vec<&Problem>> = BTreeMap::new();
    for p in &r.problems {
        by.entry(p.category).or_default().push(p);
    }
    for (cat, problems) in &by {
        let hosts: Vec<String> = problems.iter().map(|p| p.host.clone()).collect();
        let _ = writeln!(
            out,
            "\n{cat}: {} problem{} on {}",
            problems.len(),
            if problems.len() == 1 { "" } else { "s" },
            clean(&hostlist::compress(hosts.iter().map(String::as_str)))
        );
        for (hosts, message) in by_cause(problems) {
            let _ = writeln!(out, "  {}: {}", clean(&hosts), clean(&message));
        }
    }
    if !r.silent.is_empty() {
        let _ = writeln!(
            out,
            "\nranks that joined but sent no results in time: {}",
            crate::bench::control::rendezvous::rank_ranges(&r.silent)
        );
    }
    let hosts = r.matrix_hosts();
    if !hosts.is_empty() && hosts.len() <= TABLE_MATRIX_MAX {
        let cells = r.cells();
        let width = hosts
            .iter()
            .map(|(_, h)| h.chars().count())
            .max()
            .unwrap_or(4);
        let _ = writeln!(
            out,
            "\nreachability (row connects to column; . ok, X a port failed, - not probed):"
        );
        let _ = write!(out, "{:width$} ", "");
        for (i, _) in hosts.iter().enumerate() {
            let _ = write!(out, "{:>3}", i);
        }
        out.push('\n');
        for (i, (from, h)) in hosts.iter().enumerate() {
            let _ = write!(out, "{:width$} ", clean(h));
            for (to, _) in &hosts {
                let mark = if from == to {
                    " "
                } else {
                    match cells.get(&(*from, *to)) {
                        Some((failed, _)) if !failed.is_empty() => "X",
                        Some(_) => ".",
                        None => "-",
                    }
                };
                let _ = write!(out, "{:>3}", mark);
            }
            let _ = writeln!(out, "   {i}");
        }
    }
    let _ = writeln!(
        out,
        "\n{} problem{} found",
        r.problems.len(),
        if r.problems.len() == 1 { "" } else { "s" }
    );
    out
}

/// Problems with the same cause folded into one line: the same message once its own host
/// and port are set aside, its nodes as a hostlist and its ports listed.
fn by_cause(problems: &[&Problem]) -> Vec<(String, String)> {
    let mut groups: Vec<(String, Vec<String>, Vec<u16>)> = Vec::new();
    for p in problems {
        let mut key = p.message.replace(&p.host, "\u{1}");
        if let Some(port) = p.port {
            key = key.replace(&format!("port {port}"), "port \u{2}");
        }
        match groups.iter_mut().find(|(k, _, _)| *k == key) {
            Some((_, hosts, ports)) => {
                hosts.push(p.host.clone());
                ports.extend(p.port);
            }
            None => groups.push((key, vec![p.host.clone()], p.port.into_iter().collect())),
        }
    }
    groups
        .into_iter()
        .map(|(key, hosts, mut ports)| {
            let hosts = hostlist::compress(hosts.iter().map(String::as_str));
            ports.sort_unstable();
            ports.dedup();
            let ports_text = match ports.len() {
                0 | 1 => format!(
                    "port {}",
                    ports.first().map(u16::to_string).unwrap_or_default()
                ),
                _ => format!(
                    "ports {}",
                    ports
                        .iter()
                        .map(u16::to_string)
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            };
            let message = key
                .replace('\u{1}', &hosts)
                .replace("port \u{2}", &ports_text);
            (hosts, message)
        })
        .collect()
}

/// `bench --pairs --format json`: the measured pairs.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct PairsReport {
    pub pairs: Vec<MeasuredPair>,
}

#[derive(Debug, Clone, Deserialize)]
pub(crate) struct MeasuredPair {
    pub hosts: (String, String),
    pub bus_bw: f64,
}

/// Why `--pairs-report` cannot be drawn; every message names the file.
#[derive(Debug, thiserror::Error)]
pub(crate) enum PairsError {
    #[error("--pairs-report {}: {source}", path.display())]
    Read {
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("--pairs-report {}: not a regular file", .0.display())]
    NotFile(std::path::PathBuf),
    #[error(
        "--pairs-report {}: line {}: not `bench --pairs --format json` output: {source}",
        path.display(),
        source.line()
    )]
    NotPairs {
        path: std::path::PathBuf,
        #[source]
        source: serde_json::Error,
    },
}

/// Reads `--pairs-report` (a regular file, bounded), naming the file in every error.
pub(crate) fn read_pairs(path: &Path) -> Result<PairsReport, PairsError> {
    let unreadable = |source| PairsError::Read {
        path: path.to_path_buf(),
        source,
    };
    let file = std::fs::File::open(path).map_err(unreadable)?;
    let meta = file.metadata().map_err(unreadable)?;
    if !meta.is_file() {
        return Err(PairsError::NotFile(path.to_path_buf()));
    }
    let mut text = String::new();
    file.take(PAIRS_LIMIT)
        .read_to_string(&mut text)
        .map_err(unreadable)?;
    serde_json::from_str(&text).map_err(|source| PairsError::NotPairs {
        path: path.to_path_buf(),
        source,
    })
}

/// Text safe inside HTML.
fn esc(text: &str) -> String {
    clean(text)
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\'', "&#39;")
}

const STYLE: &str = "body{font:14px sans-serif;margin:1.5em;color:#222}\
table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #bbb;padding:3px 6px;\
text-align:center}th{background:#eee}td.ok{background:#9be39b}td.fail{background:#e85d5d;\
color:#fff;font-weight:bold}td.self{background:#ddd}td.none{background:#fff}\
.problems td{text-align:left}";

/// The self-contained page.
pub(crate) fn html(r: &Report, pairs: Option<&PairsReport>) -> String {
    let mut out = String::new();
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>gputune preflight</title>\
         <style>{STYLE}</style></head><body>\n<h1>gputune preflight</h1>\n<p id=\"summary\">{} \
         of {} ranks joined; {}; {} problem{}.</p>\n",
        r.joined,
        r.world,
        esc(&r.coverage),
        r.problems.len(),
        if r.problems.len() == 1 { "" } else { "s" }
    );
    if !r.problems.is_empty() {
        out.push_str("<h2>Problems</h2>\n<table class=\"problems\" id=\"problems\"><tr><th>category</th><th>host</th><th>peer</th><th>port</th><th>message</th></tr>\n");
        for p in &r.problems {
            let _ = writeln!(
                out,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                esc(p.category),
                esc(&p.host),
                esc(p.peer.as_deref().unwrap_or("")),
                p.port.map(|p| p.to_string()).unwrap_or_default(),
                esc(&p.message)
            );
        }
        out.push_str("</table>\n");
    }
    let hosts = r.matrix_hosts();
    let cells = r.cells();
    out.push_str("<h2>Reachability</h2>\n<p>Row connects to column.</p>\n<table id=\"reachability\"><tr><th></th>");
    for (_, h) in &hosts {
        let _ = write!(out, "<th>{}</th>", esc(h));
    }
    out.push_str("</tr>\n");
    for (from, fh) in &hosts {
        let _ = write!(out, "<tr><th>{}</th>", esc(fh));
        for (to, th) in &hosts {
            let id = format!(
                "id=\"cell-{from}-{to}\" data-from=\"{}\" data-to=\"{}\"",
                esc(fh),
                esc(th)
            );
            if from == to {
                let _ = write!(out, "<td class=\"self\" {id}></td>");
                continue;
            }
            match cells.get(&(*from, *to)) {
                Some((failed, _)) if !failed.is_empty() => {
                    let ports: Vec<String> = failed.iter().map(|p| p.port.to_string()).collect();
                    let title: Vec<String> = failed
                        .iter()
                        .map(|p| {
                            format!(
                                "{} port {}: {}{}",
                                p.kind,
                                p.port,
                                p.error.as_deref().unwrap_or(""),
                                p.firewall
                                    .as_deref()
                                    .map(|f| format!(" ({f})"))
                                    .unwrap_or_default()
                            )
                        })
                        .collect();
                    let _ = write!(
                        out,
                        "<td class=\"fail\" {id} data-ports=\"{}\" title=\"{}\">&#10007; {}</td>",
                        ports.join(","),
                        esc(&title.join("; ")),
                        ports.len()
                    );
                }
                Some((_, ms)) => {
                    let _ = write!(out, "<td class=\"ok\" {id}>{ms:.1} ms</td>");
                }
                None => {
                    let _ = write!(out, "<td class=\"none\" {id}>&ndash;</td>");
                }
            }
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</table>\n");
    if let Some(pairs) = pairs {
        heat_map(&mut out, pairs);
    }
    out.push_str("<h2>Versions</h2>\n<table id=\"versions\"><tr><th>component</th><th>value</th><th>nodes</th></tr>\n");
    for (k, values) in &r.versions {
        for (v, nodes) in values {
            let _ = writeln!(
                out,
                "<tr><td>{}</td><td>{}</td><td>{}</td></tr>",
                esc(k),
                esc(v),
                esc(nodes)
            );
        }
    }
    out.push_str("</table>\n</body></html>\n");
    out
}

/// The bandwidth matrix of `bench --pairs`, colour by fraction of the best pair.
fn heat_map(out: &mut String, pairs: &PairsReport) {
    let mut hosts: Vec<String> = pairs
        .pairs
        .iter()
        .flat_map(|p| [p.hosts.0.clone(), p.hosts.1.clone()])
        .collect();
    hosts.sort();
    hosts.dedup();
    let best = pairs.pairs.iter().map(|p| p.bus_bw).fold(0.0_f64, f64::max);
    let bw = |a: &str, b: &str| {
        pairs
            .pairs
            .iter()
            .find(|p| (p.hosts.0 == a && p.hosts.1 == b) || (p.hosts.0 == b && p.hosts.1 == a))
            .map(|p| p.bus_bw)
    };
    out.push_str("<h2>Bandwidth (bench --pairs, GB/s)</h2>\n<table id=\"bandwidth\"><tr><th></th>");
    for h in &hosts {
        let _ = write!(out, "<th>{}</th>", esc(h));
    }
    out.push_str("</tr>\n");
    for a in &hosts {
        let _ = write!(out, "<tr><th>{}</th>", esc(a));
        for b in &hosts {
            match bw(a, b).filter(|_| a != b) {
                Some(v) if v.is_finite() => {
                    let f = if best > 0.0 {
                        (v / best).clamp(0.0, 1.0)
                    } else {
                        0.0
                    };
                    // Red (slow) to green (as fast as the best pair).
                    let hue = (f * 120.0).round();
                    let _ = write!(
                        out,
                        "<td class=\"bw\" style=\"background:hsl({hue},70%,60%)\" data-from=\"{}\" data-to=\"{}\">{v:.2}</td>",
                        esc(a),
                        esc(b)
                    );
                }
                _ => out.push_str("<td class=\"none\"></td>"),
            }
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</table>\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(host: &str, port: Option<u16>, message: &str) -> Problem {
        Problem {
            rank: None,
            host: host.into(),
            peer: None,
            port,
            category: "port",
            message: message.into(),
        }
    }

    #[test]
    fn one_cause_is_one_line_with_its_nodes_and_ports() {
        let problems = [
            p(
                "node2",
                Some(32768),
                "node2 does not accept nccl port 32768 from node[0-1]: timed out",
            ),
            p(
                "node2",
                Some(40000),
                "node2 does not accept nccl port 40000 from node[0-1]: timed out",
            ),
            p("node3", None, "host name node3 resolves to 127.0.1.1"),
            p("node4", None, "host name node4 resolves to 127.0.1.1"),
            p("node5", None, "host name node5 resolves to 10.0.0.9"),
        ];
        let refs: Vec<&Problem> = problems.iter().collect();
        assert_eq!(
            by_cause(&refs),
            vec![
                (
                    "node2".to_string(),
                    "node2 does not accept nccl ports 32768, 40000 from node[0-1]: timed out"
                        .to_string()
                ),
                (
                    "node[3-4]".to_string(),
                    "host name node[3-4] resolves to 127.0.1.1".to_string()
                ),
                (
                    "node5".to_string(),
                    "host name node5 resolves to 10.0.0.9".to_string()
                ),
            ]
        );
    }

    #[test]
    fn html_escapes_what_hosts_sent() {
        assert_eq!(
            esc("<b>\u{1b}[31m\"x\"&'"),
            "&lt;b&gt;[31m&quot;x&quot;&amp;&#39;"
        );
    }
}
