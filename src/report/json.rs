//! One JSON document per audit, with stable field names and a `schema_version`.

use serde::Serialize;

use super::{HostFacts, Report, Summary};
use crate::finding::Finding;

/// Bumped whenever a field is renamed or removed, or a field scripts should know about is
/// added; every field of an older version keeps its name and meaning.
/// 2: each finding's `severity`, `expected_value` and `actual_value` (typed, base units).
pub const SCHEMA_VERSION: u32 = 2;

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

pub fn render(report: &Report) -> String {
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
