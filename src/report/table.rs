//! The human-readable table: one small table per area, then the summary line.

use comfy_table::{Cell, Table};

use super::Report;
use super::terminal::TableStyle;
use crate::finding::Finding;

pub fn render(report: &Report) -> String {
    let mut out = format!(
        "gputune audit of {} (kernel {}, mode {}) against profile {} ({})\n",
        clean(&report.host.hostname),
        clean(&report.host.kernel),
        report.mode.name(),
        clean(&report.profile.name),
        clean(&report.profile.source)
    );
    if let Some(reason) = &report.chosen_by {
        out.push_str(&format!(
            "profile chosen from the node: {}\n",
            clean(reason)
        ));
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

/// Host strings without control characters: the crate's one sanitiser (see [`crate::say`]).
pub use crate::say::clean;

fn area_table(findings: &[&Finding], style: &TableStyle) -> Table {
    let mut table = style.table([
        "Status",
        "Check",
        "Expected",
        "Actual",
        "Why it matters / fix",
    ]);
    for f in findings {
        let mut details = clean(&f.message);
        if !f.fix.is_empty() {
            details.push_str(&format!("\nfix: {}", clean(&f.fix)));
        }
        table.add_row([
            style.status_cell(f.status),
            Cell::new(clean(&f.id)),
            Cell::new(clean(&f.expected)),
            Cell::new(clean(&f.actual)),
            Cell::new(details),
        ]);
    }
    table
}

#[cfg(test)]
mod tests {
    #[test]
    fn control_characters_never_reach_the_terminal() {
        assert_eq!(
            super::clean("eth0\u{1b}[31mRED\u{1b}[0m\u{7}\u{9b}2J"),
            "eth0[31mRED[0m2J"
        );
        assert_eq!(super::clean("a\nb\tc"), "a\nb c");
    }
}
