//! JUnit XML: one testsuite per area, one testcase per check, so CI systems show each check.
//! Warnings pass (with the warning in `system-out`) unless `--strict` makes them failures.

use std::fmt::Write as _;

use super::{Report, Summary};
use crate::finding::{Finding, Status};

pub(crate) fn render(report: &Report) -> String {
    let total = report.summary();
    let mut out = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    let _ = writeln!(
        out,
        "<testsuites name=\"gputune audit ({})\" tests=\"{}\" failures=\"{}\" errors=\"{}\" skipped=\"{}\">",
        escape(&report.profile.name),
        report.findings.len(),
        failures(&total, report.strict),
        total.errors,
        total.skipped
    );
    for (area, findings) in report.by_area() {
        let s = Summary::of(findings.iter().copied());
        let _ = writeln!(
            out,
            "  <testsuite name=\"{area}\" tests=\"{}\" failures=\"{}\" errors=\"{}\" skipped=\"{}\" hostname=\"{}\">",
            findings.len(),
            failures(&s, report.strict),
            s.errors,
            s.skipped,
            escape(&report.host.hostname)
        );
        let _ = writeln!(
            out,
            "    <properties><property name=\"mode\" value=\"{}\"/></properties>",
            report.mode.name()
        );
        for f in findings {
            testcase(&mut out, f, report.strict);
        }
        out.push_str("  </testsuite>\n");
    }
    out.push_str("</testsuites>\n");
    out
}

fn failures(s: &Summary, strict: bool) -> usize {
    s.failed + if strict { s.warned } else { 0 }
}

fn testcase(out: &mut String, f: &Finding, strict: bool) {
    let _ = write!(
        out,
        "    <testcase classname=\"gputune.{}\" name=\"{}\"",
        f.area,
        escape(&f.id)
    );
    let summary = format!("expected {}, found {}", f.expected, f.actual);
    let mut body = f.message.clone();
    if !f.fix.is_empty() {
        body.push_str(&format!("\nfix: {}", f.fix));
    }
    match f.status {
        Status::Pass => out.push_str("/>\n"),
        Status::Fail => element(out, "failure", "fail", &summary, &body),
        Status::Warn if strict => element(out, "failure", "warn", &summary, &body),
        Status::Warn => {
            let _ = writeln!(
                out,
                ">\n      <system-out>warning: {}\n{}</system-out>\n    </testcase>",
                escape(&summary),
                escape(&body)
            );
        }
        Status::Error => element(out, "error", "error", &f.message, &body),
        Status::Skip => {
            let _ = writeln!(
                out,
                ">\n      <skipped message=\"{}\"/>\n    </testcase>",
                escape(&f.message)
            );
        }
    }
}

fn element(out: &mut String, name: &str, kind: &str, message: &str, body: &str) {
    let _ = writeln!(
        out,
        ">\n      <{name} type=\"{kind}\" message=\"{}\">{}</{name}>\n    </testcase>",
        escape(message),
        escape(body)
    );
}

/// Escapes text for XML attributes and content. Characters XML 1.0 forbids (controls
/// other than tab/newline/CR, U+FFFE and U+FFFF; surrogates cannot occur in a `str`) become
/// U+FFFD, so a hostname or file name from the node cannot make the file not well-formed.
pub(crate) fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\n' | '\t' | '\r' => out.push(c),
            c if xml_allowed(c) => out.push(c),
            _ => out.push('\u{FFFD}'),
        }
    }
    out
}

/// XML 1.0's `Char` production: #x9 | #xA | #xD | [#x20-#xD7FF] | [#xE000-#xFFFD] |
/// [#x10000-#x10FFFF].
fn xml_allowed(c: char) -> bool {
    matches!(c as u32, 0x9 | 0xA | 0xD | 0x20..=0xD7FF | 0xE000..=0xFFFD | 0x10000..=0x10FFFF)
}

#[cfg(test)]
mod tests {
    #[test]
    fn escaping() {
        assert_eq!(
            super::escape("a<b & \"c\"\u{1}"),
            "a&lt;b &amp; &quot;c&quot;\u{FFFD}"
        );
        assert_eq!(
            super::escape("node\u{FFFF}\u{FFFE}\u{1b}"),
            "node\u{FFFD}\u{FFFD}\u{FFFD}"
        );
        assert_eq!(super::escape("é\u{10000}"), "é\u{10000}");
    }
}
