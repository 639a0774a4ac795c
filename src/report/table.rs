//! The report people read: what needs attention first (each failing or warning check on
//! one line, its fix alone on the next so it can be copied), then the detail by area (what
//! is not a pass; everything with `--verbose`), then the counts. On a terminal or with
//! `COLUMNS` the text is wrapped at spaces to that width, and the detail is a table when
//! there is room for one; piped without `COLUMNS` it is plain lines, which `less` or an
//! editor wraps as it likes. A check id or a fix is never split.

use comfy_table::{Cell, ColumnConstraint, Table};

use super::Report;
use super::terminal::TableStyle;
use crate::finding::{Finding, Status};

/// Below this width a five-column table wraps every reason into a ribbon one word wide
/// (566 lines for 49 checks at 80 columns): narrower, the detail is lines wrapped at words.
const TABLE_MIN_WIDTH: u16 = 100;

pub(crate) fn render(report: &Report) -> String {
    render_with(report, &TableStyle::detect())
}

/// The report laid out in `style` (tests choose the width).
pub(crate) fn render_with(report: &Report, style: &TableStyle) -> String {
    let head = format!(
        "gputune audit of {} (kernel {}, mode {}) against profile {} ({})",
        one_line(&report.host.hostname),
        one_line(&report.host.kernel),
        report.mode.name(),
        one_line(&report.profile.name),
        one_line(&report.profile.source)
    );
    let mut out = wrap(&head, style.width, 2, 0);
    out.push('\n');
    if let Some(reason) = &report.chosen_by {
        let chosen = format!("profile chosen from the node: {}", one_line(reason));
        out.push_str(&wrap(&chosen, style.width, 2, 0));
        out.push('\n');
    }
    out.push_str(&attention(report, style));
    let mut hidden = 0;
    for (area, findings) in report.by_area() {
        let shown: Vec<&Finding> = findings
            .iter()
            .copied()
            .filter(|f| report.verbose || f.status != Status::Pass)
            .collect();
        hidden += findings.len() - shown.len();
        if shown.is_empty() {
            continue;
        }
        let passing = findings.len() - not_passing(&findings);
        out.push_str(&format!(
            "\n{area}: {} of {} checks pass\n",
            passing,
            findings.len()
        ));
        match style.width {
            Some(width) if width >= TABLE_MIN_WIDTH => {
                out.push_str(&area_table(&shown, style).to_string());
                out.push('\n');
            }
            width => out.push_str(&area_lines(&shown, style, width)),
        }
    }
    out.push('\n');
    if hidden > 0 {
        out.push_str(&format!(
            "{hidden} passing checks not shown (--verbose shows them)\n"
        ));
    }
    out.push_str(&report.summary().line());
    out.push('\n');
    out
}

fn not_passing(findings: &[&Finding]) -> usize {
    findings.iter().filter(|f| f.status != Status::Pass).count()
}

/// What to act on, worst first: errors and failures, then warnings. Each is
/// `STATUS id: actual -> wanted`, the fix on its own line, unwrapped.
fn attention(report: &Report, style: &TableStyle) -> String {
    let rank = |s: Status| match s {
        Status::Error => Some(0),
        Status::Fail => Some(1),
        Status::Warn => Some(2),
        _ => None,
    };
    let mut worst: Vec<(u8, &Finding)> = report
        .by_area()
        .into_iter()
        .flat_map(|(_, findings)| findings)
        .filter_map(|f| rank(f.status).map(|r| (r, f)))
        .collect();
    worst.sort_by_key(|(r, _)| *r);
    if worst.is_empty() {
        return String::new();
    }
    let s = report.summary();
    let mut out = format!(
        "\nNeeds attention ({}):\n",
        [
            (s.errors, "errors"),
            (s.failed, "failed"),
            (s.warned, "warned"),
        ]
        .iter()
        .filter(|(n, _)| *n > 0)
        .map(|(n, what)| format!("{n} {what}"))
        .collect::<Vec<_>>()
        .join(", ")
    );
    for (_, f) in worst {
        let status = style.status_word(f.status);
        let head = match f.status {
            Status::Error => format!("{}: {}", clean(&f.id), one_line(&f.message)),
            _ => format!(
                "{}: {} -> wanted {}",
                clean(&f.id),
                one_line(&f.actual),
                one_line(&f.expected)
            ),
        };
        out.push_str(&format!("{status}  "));
        out.push_str(&wrap(&head, style.width, 7, 7));
        out.push('\n');
        if !f.fix.is_empty() {
            out.push_str(&format!("       fix: {}\n", one_line(&f.fix)));
        }
    }
    out
}

/// Host strings without control characters: the crate's one sanitiser (see [`crate::say`]).
pub(crate) use crate::say::clean;

/// [`clean`], on one line: a newline becomes a space.
fn one_line(text: &str) -> String {
    clean(text).replace('\n', " ")
}

/// `text`, starting at column `start`, broken at spaces to fit `width` (none: one line),
/// continuation lines indented by `indent`; a word is never split, however long.
fn wrap(text: &str, width: Option<u16>, indent: usize, start: usize) -> String {
    let Some(width) = width.map(usize::from) else {
        return text.to_string();
    };
    let mut out = String::new();
    let mut column = start;
    for (i, word) in text.split(' ').filter(|w| !w.is_empty()).enumerate() {
        let len = word.chars().count();
        if i > 0 {
            if column + 1 + len > width {
                out.push('\n');
                out.push_str(&" ".repeat(indent));
                column = indent;
            } else {
                out.push(' ');
                column += 1;
            }
        }
        out.push_str(word);
        column += len;
    }
    out
}

/// One area as a table of the style's width. The status and id columns are as wide as their
/// content, so an id is never broken; fixes are in the list above, not here.
fn area_table(findings: &[&Finding], style: &TableStyle) -> Table {
    let mut table = style.table(["Status", "Check", "Expected", "Actual", "Why it matters"]);
    for f in findings {
        table.add_row([
            style.status_cell(f.status),
            Cell::new(clean(&f.id)),
            Cell::new(clean(&f.expected)),
            Cell::new(clean(&f.actual)),
            Cell::new(clean(&f.message)),
        ]);
    }
    for column in [0, 1] {
        if let Some(c) = table.column_mut(column) {
            c.set_constraint(ColumnConstraint::ContentWidth);
        }
    }
    table
}

/// One area as lines: `STATUS id: expected X, found Y`, then why, indented; wrapped at
/// spaces to `width` when there is one.
fn area_lines(findings: &[&Finding], style: &TableStyle, width: Option<u16>) -> String {
    let mut out = String::new();
    for f in findings {
        let head = format!(
            "{}: expected {}, found {}",
            clean(&f.id),
            one_line(&f.expected),
            one_line(&f.actual)
        );
        out.push_str(&format!(
            "  {} {}\n",
            style.status_word(f.status),
            wrap(&head, width, 8, 8)
        ));
        if !f.message.is_empty() {
            out.push_str(&format!(
                "        {}\n",
                wrap(&one_line(&f.message), width, 8, 8)
            ));
        }
    }
    out
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

    #[test]
    fn wrapping_breaks_only_between_words() {
        let wrap = super::wrap;
        assert_eq!(wrap("a bb ccc", None, 2, 2), "a bb ccc");
        assert_eq!(wrap("aaaa bbbb cccc", Some(11), 2, 2), "aaaa bbbb\n  cccc");
        assert_eq!(wrap("aaaa bbbb cccc", Some(9), 4, 0), "aaaa bbbb\n    cccc");
        assert_eq!(
            wrap("net.ipv4.tcp_slow_start_after_idle: 1", Some(10), 2, 2),
            "net.ipv4.tcp_slow_start_after_idle:\n  1"
        );
    }
}
