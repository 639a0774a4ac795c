//! The reference pages people look for beside the command pages: `gputune-profile(5)`, every
//! profile key, generated from the key declarations the loader validates profiles against
//! (`checks::keys`) and from the built-in profiles as the loader resolves them, so the page
//! cannot drift from the code; and `gputune-checks(7)`, every check id with what it reads,
//! from the same declarations plus [`CHECKS`] for the checks no profile key names.

mod checks;
mod profile;

pub use checks::{documented, matches};

use crate::finding::Area;

use super::roff_escape;

/// `(file name, content)` of the reference pages.
pub(crate) fn pages() -> Vec<(String, Vec<u8>)> {
    vec![
        ("gputune-profile.5".into(), profile::page().into_bytes()),
        ("gputune-checks.7".into(), checks::page().into_bytes()),
    ]
}

fn header(out: &mut String, name: &str, section: u8, title: &str) {
    out.push_str(&format!(
        ".ie \\n(.g .ds Aq \\(aq\n.el .ds Aq '\n.TH {} {section} \"\" gputune\n.SH NAME\n{} \\- {}\n",
        name.replace('-', "\\-"),
        name.replace('-', "\\-"),
        roff_escape(title)
    ));
}

fn para(out: &mut String, text: &str) {
    out.push_str(&format!(".PP\n{}\n", roff_escape(text)));
}

fn term(out: &mut String, term: &str, lines: &[String]) {
    out.push_str(&format!(".TP\n\\fB{}\\fR\n", roff_escape(term)));
    let body: Vec<String> = lines.iter().map(|l| roff_escape(l)).collect();
    out.push_str(&body.join("\n.br\n"));
    out.push('\n');
}

/// Whether a key of `area` is a kernel sysctl (its kernel default is worth naming).
fn area_is_sysctl(area: Area, key: &str) -> bool {
    matches!(area, Area::Network | Area::Memory)
        && (key.starts_with("net.")
            || key.starts_with("vm.")
            || key.starts_with("kernel.")
            || key.starts_with("fs."))
}
