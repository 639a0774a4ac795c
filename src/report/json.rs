//! One JSON document per audit, with stable field names and a `schema_version`.

use std::borrow::Cow;
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{HostFacts, Report, Summary};
use crate::finding::Finding;

/// Bumped whenever a field is renamed or removed, or a field scripts should know about is
/// added; every field of an older version keeps its name and meaning.
/// 2: each finding's `severity`, `expected_value` and `actual_value` (typed, base units).
pub(crate) const SCHEMA_VERSION: u32 = 2;

#[derive(Serialize)]
struct Document<'a> {
    schema_version: u32,
    tool: Tool,
    profile: ProfileInfo<'a>,
    host: &'a HostFacts,
    /// `live`, `persisted` or `image`: what was judged.
    mode: crate::image::Mode,
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    persisted: &'a [super::PersistedValue],
    strict: bool,
    passed: bool,
    summary: Summary,
    findings: Vec<Finding>,
}

#[derive(Serialize)]
struct Tool {
    name: &'static str,
    version: &'static str,
}

#[derive(Serialize)]
struct ProfileInfo<'a> {
    name: &'a str,
    source: &'a str,
    chain: &'a [String],
    chosen_by: Option<&'a str>,
}

pub(crate) fn render(report: &Report) -> String {
    let doc = Document {
        schema_version: SCHEMA_VERSION,
        tool: Tool {
            name: "gputune",
            version: env!("CARGO_PKG_VERSION"),
        },
        profile: ProfileInfo {
            name: &report.profile.name,
            source: &report.profile.source,
            chain: &report.profile.chain,
            chosen_by: report.chosen_by.as_deref(),
        },
        host: &report.host,
        mode: report.mode,
        persisted: &report.persisted,
        strict: report.strict,
        passed: !report.failed(),
        summary: report.summary(),
        findings: report.findings.iter().map(with_severity).collect(),
    };
    let mut text =
        serde_json::to_string_pretty(&doc).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"));
    text.push('\n');
    text
}

/// A finding with its severity said: one made outside the checks (an area that hung) has
/// none of its own, and gets what its status implies.
fn with_severity(f: &Finding) -> Finding {
    use crate::profile::setting::Severity;
    let mut f = f.clone();
    f.severity = f.severity.or(Some(match f.status {
        crate::finding::Status::Warn => Severity::Warn,
        _ => Severity::Fail,
    }));
    f
}

/// An audit document as a reader (`fleet`) takes it back: the field names [`render`] writes,
/// only the fields a comparison needs, borrowed from the text where it has no escapes (a
/// fleet's worth of reports is read without copying every string). Fields it does not name,
/// and any a newer writer adds, are passed over, so readers keep working as the schema grows.
#[derive(Debug, Deserialize)]
pub(crate) struct Parsed<'a> {
    pub schema_version: u32,
    #[serde(borrow)]
    pub host: ParsedHost<'a>,
    #[serde(borrow, default)]
    pub profile: Option<ParsedProfile<'a>>,
    #[serde(borrow)]
    pub findings: Vec<ParsedFinding<'a>>,
}

/// [`HostFacts`] as read back.
#[derive(Debug, Deserialize)]
pub(crate) struct ParsedHost<'a> {
    #[serde(borrow)]
    pub hostname: Cow<'a, str>,
    #[serde(borrow, default)]
    pub kernel: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub facts: BTreeMap<Cow<'a, str>, Cow<'a, str>>,
}

/// The profile a report was judged against, as read back.
#[derive(Debug, Deserialize)]
pub(crate) struct ParsedProfile<'a> {
    #[serde(borrow)]
    pub name: Cow<'a, str>,
}

/// A [`Finding`] as read back: its verdict and the values it was reached on.
#[derive(Debug, Deserialize)]
pub(crate) struct ParsedFinding<'a> {
    #[serde(borrow)]
    pub id: Cow<'a, str>,
    #[serde(borrow)]
    pub area: Cow<'a, str>,
    pub status: crate::finding::Status,
    #[serde(borrow)]
    pub expected: Cow<'a, str>,
    #[serde(borrow)]
    pub actual: Cow<'a, str>,
}

impl<'a> Parsed<'a> {
    /// Reads one document; the error is serde's (line and column inside `text`).
    pub(crate) fn from_slice(text: &'a [u8]) -> Result<Self, serde_json::Error> {
        serde_json::from_slice(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::finding::{Area, Check, Status};

    /// What the writer writes, the reader reads: one schema on both sides.
    #[test]
    fn reads_back_what_it_writes() {
        let root = crate::host::Root::new(std::path::PathBuf::from("/nonexistent-gputune"));
        let profile = crate::profile::Loader::new(&root, &crate::checks::keys)
            .load("ddp-10gbe")
            .unwrap();
        let mut host = HostFacts {
            hostname: "gpu\"01".into(),
            kernel: "6.8.0".into(),
            root: "/".into(),
            audited_at: 1.0,
            facts: BTreeMap::new(),
        };
        host.facts.insert("nic.eth0.mtu".into(), "9000".into());
        let check = Check::new("net.core.rmem_max", Area::Network).expected(">= 16777216");
        let report = Report {
            profile: &profile,
            chosen_by: None,
            host,
            mode: crate::image::Mode::Live,
            persisted: Vec::new(),
            findings: vec![check.fail("212992", "sysctl -w x=1"), check.skip("no")],
            strict: false,
            verbose: false,
        };
        let text = render(&report);
        let parsed = Parsed::from_slice(text.as_bytes()).unwrap();
        assert_eq!(parsed.schema_version, SCHEMA_VERSION);
        assert_eq!(parsed.host.hostname, "gpu\"01");
        assert_eq!(parsed.host.kernel.as_deref(), Some("6.8.0"));
        assert_eq!(parsed.host.facts["nic.eth0.mtu"], "9000");
        assert_eq!(parsed.profile.unwrap().name, "ddp-10gbe");
        let f = &parsed.findings[0];
        assert_eq!(
            (&*f.id, &*f.area, f.status, &*f.expected, &*f.actual),
            (
                "net.core.rmem_max",
                "network",
                Status::Fail,
                ">= 16777216",
                "212992"
            )
        );
        assert_eq!(parsed.findings[1].status, Status::Skip);
    }
}
