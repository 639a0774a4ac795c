//! The human-readable table: one small table per area, then the summary line.

use comfy_table::{ContentArrangement, Table, presets::UTF8_FULL_CONDENSED};

use super::Report;
use crate::finding::Finding;

pub fn render(report: &Report) -> String {
    let mut out = format!(
        "gputune audit of {} (kernel {}, mode {}) against profile {} ({})\n",
        report.host.hostname,
        report.host.kernel,
        report.mode.name(),
        report.profile.name,
        report.profile.source
    );
    if let Some(reason) = &report.chosen_by {
        out.push_str(&format!("profile chosen from the node: {reason}\n"));
    }
    for (area, findings) in report.by_area() {
        out.push_str(&format!("\n{area}\n"));
        out.push_str(&area_table(&findings).to_string());
        out.push('\n');
    }
    out.push('\n');
    out.push_str(&report.summary().line());
    out.push('\n');
    out
}

fn area_table(findings: &[&Finding]) -> Table {
    let mut table = Table::new();
    table
        .load_style(UTF8_FULL_CONDENSED)
        .set_content_arrangement(ContentArrangement::Dynamic)
        .set_header([
            "Status",
            "Check",
            "Expected",
            "Actual",
            "Why it matters / fix",
        ]);
    if !std::io::IsTerminal::is_terminal(&std::io::stdout()) {
        table.set_width(160);
    }
    for f in findings {
        let mut details = f.message.clone();
        if !f.fix.is_empty() {
            details.push_str(&format!("\nfix: {}", f.fix));
        }
        table.add_row([
            f.status.name().to_uppercase(),
            f.id.clone(),
            f.expected.clone(),
            f.actual.clone(),
            details,
        ]);
    }
    table
}
