//! One JSON document per audit, with stable field names and a `schema_version`.

use serde::Serialize;

use super::{HostFacts, Report, Summary};
use crate::finding::Finding;

/// Bumped whenever a field is renamed or removed; additions keep the version.
pub const SCHEMA_VERSION: u32 = 1;

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
    findings: &'a [Finding],
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
        findings: &report.findings,
    };
    let mut text =
        serde_json::to_string_pretty(&doc).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"));
    text.push('\n');
    text
}
