//! node_exporter textfile-collector format: one gauge per check and totals by status.
//! No sample timestamps (the collector rejects them); the run time is its own gauge.

use std::fmt::Write as _;

use super::Report;
use crate::finding::Status;

/// The value `gputune_check_status` takes for each status.
pub(crate) fn status_value(status: Status) -> u8 {
    match status {
        Status::Pass => 0,
        Status::Warn => 1,
        Status::Fail => 2,
        Status::Skip => 3,
        Status::Error => 4,
    }
}

pub(crate) fn render(report: &Report) -> String {
    let mut out = String::new();
    out.push_str("# HELP gputune_check_status Result of one gputune audit check: 0 pass, 1 warn, 2 fail, 3 skip, 4 error.\n");
    out.push_str("# TYPE gputune_check_status gauge\n");
    for f in &report.findings {
        let _ = writeln!(
            out,
            "gputune_check_status{{area=\"{}\",id=\"{}\",mode=\"{}\",profile=\"{}\"}} {}",
            f.area,
            label(&f.id),
            report.mode.name(),
            label(&report.profile.name),
            status_value(f.status)
        );
    }
    let s = report.summary();
    out.push_str("# HELP gputune_checks Number of gputune audit checks by status.\n");
    out.push_str("# TYPE gputune_checks gauge\n");
    for (status, n) in [
        ("pass", s.passed),
        ("warn", s.warned),
        ("fail", s.failed),
        ("skip", s.skipped),
        ("error", s.errors),
    ] {
        let _ = writeln!(out, "gputune_checks{{status=\"{status}\"}} {n}");
    }
    out.push_str(
        "# HELP gputune_audit_passed 1 when the audit passed (warnings allowed unless --strict).\n",
    );
    out.push_str("# TYPE gputune_audit_passed gauge\n");
    let _ = writeln!(out, "gputune_audit_passed {}", u8::from(!report.failed()));
    out.push_str("# HELP gputune_audit_last_run_timestamp_seconds When the audit ran, in seconds since the epoch.\n");
    out.push_str("# TYPE gputune_audit_last_run_timestamp_seconds gauge\n");
    let _ = writeln!(
        out,
        "gputune_audit_last_run_timestamp_seconds {:.3}",
        report.host.audited_at
    );
    out
}

/// Escapes a label value: backslash, double quote and newline.
pub(crate) fn label(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    #[test]
    fn labels_are_escaped() {
        assert_eq!(super::label("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }
}
