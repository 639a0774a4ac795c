//! The human-readable table: one small table per area, then the summary line.

use comfy_table::{Cell, Table};

use super::Report;
use super::terminal::TableStyle;
use crate::finding::Finding;

pub fn render(report: &Report) -> String {
    let mut out = format!(
        "gputune audit of {} (kernel {}) against profile {} ({})\n",
        report.host.hostname, report.host.kernel, report.profile.name, report.profile.source
    );
    if let Some(reason) = &report.chosen_by {
        out.push_str(&format!("profile chosen from the node: {reason}\n"));
    }
    let style = TableStyle::detect();
    for (area, findings) in report.by_area() {
        out.push_str(&format!("\n{area}\n"));
        out.push_str(&area_table(&findings, &style).to_string());
        out.push('\n');
    }
    out.push('\n');
    out.push_str(&report.summary().line());
    out.push('\n');
    out
}

fn area_table(findings: &[&Finding], style: &TableStyle) -> Table {
    let mut table = style.table([
        "Status",
        "Check",
        "Expected",
        "Actual",
        "Why it matters / fix",
    ]);
    for f in findings {
        let mut details = f.message.clone();
        if !f.fix.is_empty() {
            details.push_str(&format!("\nfix: {}", f.fix));
        }
        table.add_row([
            style.status_cell(f.status),
            Cell::new(&f.id),
            Cell::new(&f.expected),
            Cell::new(&f.actual),
            Cell::new(details),
        ]);
    }
    table
}
