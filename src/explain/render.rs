//! `explain`'s two formats: text for a person and JSON for programs. Every string in them
//! came through [`super::clean`] (log lines, host and interface names) or from the rules.

use std::fmt::Write;

use serde_json::json;

use super::verify::{Check, Verdict, Verdicts};
use super::{Analysis, Problem};
use crate::finding::Status;

/// Version of the JSON document's shape.
pub const SCHEMA_VERSION: u32 = 1;

/// One sentence saying what was found.
pub fn summary(a: &Analysis) -> String {
    let mut s = match a.problems.len() {
        0 if a.not_understood_total > 0 => "no rule explains this log".to_string(),
        0 => "no known problem".to_string(),
        1 => format!("1 problem: {}", a.problems[0].category),
        n => format!(
            "{n} problems, most likely root cause first: {}",
            categories(&a.problems)
        ),
    };
    if a.not_understood_total > 0 {
        let _ = write!(
            s,
            "; {} error line(s) not understood",
            a.not_understood_total
        );
    }
    if !a.candidates.is_empty() {
        let _ = write!(s, "; possible causes: {}", categories(&a.candidates));
    }
    let _ = write!(s, " ({} lines read)", a.lines);
    s
}

/// The problems' categories, in their order.
fn categories(problems: &[Problem]) -> String {
    problems
        .iter()
        .map(|p| p.category)
        .collect::<Vec<_>>()
        .join(", ")
}

/// Problems (or possible causes) as JSON, each with the node's verdict where `--check` ran.
fn problems_json(problems: &[Problem], checks: Option<&[Check]>) -> Vec<serde_json::Value> {
    problems
        .iter()
        .enumerate()
        .map(|(i, p)| problem_json(p, checks.and_then(|c| c.get(i))))
        .collect()
}

/// One problem (or possible cause) as JSON, with the node's verdict where `--check` ran.
fn problem_json(p: &Problem, check: Option<&Check>) -> serde_json::Value {
    let mut v = json!({
        "category": p.category,
        "node_config": p.node_config,
        "cause": p.cause,
        "fix": p.fix,
        "evidence": p.evidence,
        "checks": p.checks,
        "rule": p.rule,
        "matched_lines": p.matched_lines,
        "sources": p.sources,
    });
    if let Some(check) = check {
        v["check"] = json!(check);
    }
    v
}

/// The JSON document (issue 23's shape, plus what NCCL did, the possible causes of a failure
/// no rule names, and the `--check` verdicts).
pub fn json(a: &Analysis, checks: Option<&Verdicts>) -> serde_json::Value {
    let problems = problems_json(&a.problems, checks.map(|c| c.problems.as_slice()));
    let candidates = problems_json(&a.candidates, checks.map(|c| c.candidates.as_slice()));
    json!({
        "schema_version": SCHEMA_VERSION,
        "summary": summary(a),
        "problems": problems,
        "not_understood": a.not_understood,
        "not_understood_total": a.not_understood_total,
        "candidates": candidates,
        "lines": a.lines,
        "long_lines": a.long_lines,
        "nccl": a.nccl,
    })
}

fn list<'a>(values: impl IntoIterator<Item = &'a String>, truncated: bool) -> String {
    let mut v: Vec<&str> = values.into_iter().map(String::as_str).collect();
    if v.is_empty() {
        return "-".into();
    }
    if v.len() > 8 {
        let more = v.len() - 8;
        v.truncate(8);
        return format!("{} and {more} more", v.join(", "));
    }
    let mut s = v.join(", ");
    if truncated {
        s.push_str(", ...");
    }
    s
}

/// The text report.
pub fn text(a: &Analysis, checks: Option<&Verdicts>) -> String {
    let mut out = String::new();
    let f = &a.nccl;
    if f.any() {
        out.push_str("What NCCL did\n");
        if !f.nccl_versions.is_empty() {
            let versions: Vec<String> = f
                .nccl_versions
                .iter()
                .map(|(v, hosts)| {
                    let named: Vec<&String> = hosts.values.iter().filter(|h| *h != "?").collect();
                    if named.is_empty() {
                        v.clone()
                    } else {
                        format!("{v} on {}", list(named, hosts.truncated))
                    }
                })
                .collect();
            let disagree = if f.nccl_versions.len() > 1 {
                " (ranks disagree: they must all run one NCCL version)"
            } else {
                ""
            };
            let _ = writeln!(out, "  NCCL:        {}{disagree}", versions.join("; "));
        }
        if !f.cuda_runtimes.values.is_empty() || !f.cuda_drivers.values.is_empty() {
            let _ = writeln!(
                out,
                "  CUDA:        runtime {}, driver {}",
                list(&f.cuda_runtimes.values, false),
                list(&f.cuda_drivers.values, false)
            );
        }
        let _ = writeln!(
            out,
            "  Hosts:       {}{}",
            list(&f.hosts.values, f.hosts.truncated),
            f.ranks.map(|r| format!(" ({r} ranks)")).unwrap_or_default()
        );
        if !f.gpus.values.is_empty() {
            let _ = writeln!(out, "  GPUs:        {}", list(&f.gpus.values, false));
        }
        let _ = writeln!(out, "  Network:     {}", list(&f.networks.values, false));
        let ifaces: Vec<String> = f
            .interfaces
            .iter()
            .map(|i| format!("{} {}", i.name, i.address))
            .collect();
        let _ = writeln!(out, "  Interfaces:  {}", list(&ifaces, false));
        if !f.hcas.values.is_empty() {
            let _ = writeln!(
                out,
                "  HCAs:        {}",
                list(&f.hcas.values, f.hcas.truncated)
            );
        }
        let gdr = match (
            f.net_channels_gdr,
            f.net_channels_no_gdr,
            f.gdr_disabled_lines,
        ) {
            (0, 0, 0) => "not seen".to_string(),
            (g, 0, 0) => format!("on ({g} connections)"),
            (0, n, _) if n > 0 => format!("off ({n} NET/IB connections without it)"),
            (g, n, d) => format!("{g} connections with, {n} without, {d} 'Disabled' lines"),
        };
        let _ = writeln!(out, "  GPUDirect:   {gdr}");
        let transports: Vec<String> = f
            .transports
            .iter()
            .map(|(t, n)| format!("{t} {n}"))
            .collect();
        let _ = writeln!(out, "  Transports:  {}", list(&transports, false));
        let paths = &f.gpu_paths.between_gpus;
        if !paths.values.is_empty() {
            let _ = writeln!(
                out,
                "  GPU paths:   {} (NCCL's graphs: NVL is NVLink; PIX, PXB, PHB, SYS cross PCIe)",
                list(&paths.values, paths.truncated)
            );
        }
        let mut algos = Vec::new();
        if f.rings {
            algos.push("ring".to_string());
        }
        if f.trees {
            algos.push("tree".to_string());
        }
        let _ = writeln!(
            out,
            "  Channels:    {}; algorithms: {}",
            f.channels.map_or("-".into(), |c| c.to_string()),
            list(&algos, false)
        );
        if let Some(init) = f.init.summary() {
            let _ = writeln!(out, "  Init:        {init}");
        }
        if !f.environment.is_empty() {
            let env: Vec<String> = f
                .environment
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            let _ = writeln!(out, "  Environment: {}", list(&env, false));
        }
        if !f.slowdowns.is_empty() {
            out.push_str("  Slowing NCCL down:\n");
            for s in &f.slowdowns {
                let _ = writeln!(out, "    line {}: {}", s.line, s.what);
            }
        }
        out.push('\n');
    }
    if a.problems.is_empty() && a.not_understood_total == 0 {
        out.push_str("No known problem found.\n");
        if let Some(hint) = a.nccl.init.hang_hint() {
            let _ = writeln!(out, "{hint}");
        }
    } else if a.problems.is_empty() {
        out.push_str("No rule explains this log.\n");
        if a.nccl.nccl_lines == 0 {
            out.push_str(
                "NCCL's own messages are missing: run the job again with NCCL_DEBUG=INFO (or WARN) and explain that log.\n",
            );
        }
    } else {
        let _ = writeln!(out, "Problems (most likely root cause first)");
    }
    for (i, p) in a.problems.iter().enumerate() {
        problem_text(&mut out, i + 1, p, checks.and_then(|c| c.problems.get(i)));
    }
    if a.not_understood_total > 0 {
        let _ = writeln!(
            out,
            "\nNot understood ({} line(s); no rule explains them, so no guess is made):",
            a.not_understood_total
        );
        for e in &a.not_understood {
            let _ = writeln!(out, "  line {}: {}", e.line, e.text);
        }
    }
    if !a.candidates.is_empty() {
        let test = if checks.is_some() {
            ""
        } else {
            "; `--check` tests them on this node"
        };
        let _ = writeln!(
            out,
            "\nPossible causes (the log does not say which; each was the cause in public issue reports that show these lines; not a complete list{test}):"
        );
        for (i, p) in a.candidates.iter().enumerate() {
            problem_text(&mut out, i + 1, p, checks.and_then(|c| c.candidates.get(i)));
        }
    }
    let _ = writeln!(out, "\nSummary: {}", summary(a));
    out
}

/// One problem (or possible cause), numbered `n`, with the node's verdict where `--check` ran.
fn problem_text(out: &mut String, n: usize, p: &Problem, check: Option<&Check>) {
    let _ = writeln!(
        out,
        "{n}. {} ({})",
        p.category,
        if p.node_config {
            "node configuration"
        } else {
            "not node configuration"
        }
    );
    let _ = writeln!(out, "   Cause:    {}", p.cause);
    let _ = writeln!(out, "   Fix:      {}", p.fix);
    out.push_str("   Evidence:\n");
    for e in &p.evidence {
        let _ = writeln!(out, "     line {}: {}", e.line, e.text);
    }
    if p.matched_lines > p.evidence.len() as u64 {
        let _ = writeln!(out, "     ... {} matching lines in all", p.matched_lines);
    }
    if !p.checks.is_empty() {
        let _ = writeln!(out, "   Checks:   {}", p.checks.join(", "));
    }
    if let Some(check) = check {
        let verdict = match check.verdict {
            Verdict::Confirmed => "confirmed",
            Verdict::Refuted => "refuted",
            Verdict::Unknown => "unknown",
        };
        let shown: Vec<String> = check
            .findings
            .iter()
            .filter(|s| s.status != Status::Skip)
            .take(4)
            .map(|s| format!("{} is {} ({})", s.id, s.actual, s.status.name()))
            .collect();
        let why = if p.checks.is_empty() {
            "no node check applies".to_string()
        } else if shown.is_empty() {
            format!(
                "none of its checks is in profile {} or could run here",
                check.profile
            )
        } else {
            shown.join("; ")
        };
        let _ = writeln!(out, "   Here:     {verdict}: {why}");
    }
}
