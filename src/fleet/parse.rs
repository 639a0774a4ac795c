//! One document read as an audit report, through the typed structs the audit JSON writer
//! shares ([`crate::report::json::Parsed`]), reduced to what the fleet compares: the node's
//! canonical name, each check's verdict and values, and the facts that must be alike. Every
//! string is cleaned of control characters here, once, so no output format can carry them.

use crate::finding::Status;
use crate::report::json::{Parsed, SCHEMA_VERSION};
use crate::say::cleaned_line as clean;

/// One check of one node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Verdict {
    pub id: String,
    pub area: String,
    pub status: Status,
    pub expected: String,
    pub actual: String,
}

/// One node's report, as compared.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NodeDoc {
    /// Canonical: see [`canonical_host`].
    pub host: String,
    /// `FILE: byte N` (with the pdsh host when the stream was prefixed).
    pub origin: String,
    pub checks: Vec<Verdict>,
    /// `kernel`, `profile` and the report's `host.facts`.
    pub facts: Vec<(String, String)>,
}

/// The name a node is known by across reports: one node written `GPU01.`, ` gpu01` or
/// `gpu01` is one node. `None` when it is no host name (empty, or holding what a hostlist
/// or a terminal would take for something else).
pub(crate) fn canonical_host(raw: &str) -> Option<String> {
    let host = raw.trim().trim_end_matches('.').to_ascii_lowercase();
    let valid = !host.is_empty()
        && host.len() <= 253
        && host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_'));
    valid.then_some(host)
}

/// A document fleet passes over: `ORIGIN: byte N: why`.
#[derive(Debug, thiserror::Error)]
#[error("{origin}: byte {offset}: {why}")]
pub(crate) struct Unread {
    pub origin: String,
    pub offset: u64,
    pub why: Why,
}

/// Why a document is not read; texts from the document are cleaned for the terminal.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Why {
    /// Valid JSON, but not shaped as a report: serde's words.
    #[error("not a gputune audit report: {0}")]
    NotReport(String),
    #[error("not a JSON document: {0}")]
    NotJson(String),
    #[error("schema_version {0} is not one this gputune reads (1 to {SCHEMA_VERSION})")]
    Schema(u32),
    #[error("host.hostname {0:?} is not a host name")]
    Host(String),
}

/// Reads one document; the error names it by origin and byte.
pub(crate) fn node_doc(origin: &str, offset: u64, bytes: &[u8]) -> Result<NodeDoc, Unread> {
    let at = format!("{origin}: byte {offset}");
    let unread = |offset, why| Unread {
        origin: origin.to_string(),
        offset,
        why,
    };
    let parsed = Parsed::from_slice(bytes).map_err(|e| {
        let inner = byte_of(bytes, e.line(), e.column());
        let text = clean(&e.to_string()).into_owned();
        let why = if e.is_data() {
            Why::NotReport(text)
        } else {
            Why::NotJson(text)
        };
        unread(offset + inner, why)
    })?;
    if !(1..=SCHEMA_VERSION).contains(&parsed.schema_version) {
        return Err(unread(offset, Why::Schema(parsed.schema_version)));
    }
    let host = canonical_host(&parsed.host.hostname)
        .ok_or_else(|| unread(offset, Why::Host(clean(&parsed.host.hostname).into_owned())))?;
    let checks = parsed
        .findings
        .iter()
        .map(|f| Verdict {
            id: clean(&f.id).into_owned(),
            area: clean(&f.area).into_owned(),
            status: f.status,
            expected: clean(&f.expected).into_owned(),
            actual: clean(&f.actual).into_owned(),
        })
        .collect();
    let mut facts = Vec::with_capacity(parsed.host.facts.len() + 2);
    if let Some(kernel) = &parsed.host.kernel {
        facts.push(("kernel".to_string(), clean(kernel).into_owned()));
    }
    if let Some(profile) = &parsed.profile {
        facts.push(("profile".to_string(), clean(&profile.name).into_owned()));
    }
    for (name, value) in &parsed.host.facts {
        facts.push((clean(name).into_owned(), clean(value).into_owned()));
    }
    Ok(NodeDoc {
        host,
        origin: at,
        checks,
        facts,
    })
}

/// The byte inside `bytes` at serde's 1-based line and column.
fn byte_of(bytes: &[u8], line: usize, column: usize) -> u64 {
    let line_start = if line <= 1 {
        0
    } else {
        bytes
            .iter()
            .enumerate()
            .filter(|(_, b)| **b == b'\n')
            .nth(line - 2)
            .map_or(bytes.len(), |(i, _)| i + 1)
    };
    (line_start + column.saturating_sub(1)).min(bytes.len()) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(host: &str, findings: &str) -> String {
        format!(
            "{{\"schema_version\": 1, \"host\": {{\"hostname\": {host:?}, \"kernel\": \"6.1\", \
             \"facts\": {{\"nic.eth0.mtu\": \"9000\"}}}}, \"findings\": [{findings}]}}"
        )
    }

    #[test]
    fn host_names_are_canonical() {
        for (raw, want) in [
            ("gpu01", Some("gpu01")),
            ("GPU01.", Some("gpu01")),
            ("  gpu01.cluster.  \n", Some("gpu01.cluster")),
            ("", None),
            (" . ", None),
            ("gpu[01-02]", None),
            ("a,b", None),
            ("gpu\u{1b}[2J01", None),
            ("two words", None),
        ] {
            assert_eq!(canonical_host(raw).as_deref(), want, "{raw:?}");
        }
    }

    #[test]
    fn reads_a_report_cleaning_every_string() {
        let f = r#"{"id": "net.core.rmem_max", "area": "network", "status": "fail",
            "expected": ">= 16777216", "actual": "21\u001b[2J2992", "message": "m", "fix": "f",
            "a_field_from_a_newer_writer": {"x": [1, 2]}}"#;
        let doc = node_doc("r.json", 7, report("GPU01.", f).as_bytes()).unwrap();
        assert_eq!(doc.host, "gpu01");
        assert_eq!(doc.origin, "r.json: byte 7");
        assert_eq!(doc.checks[0].status, Status::Fail);
        assert_eq!(doc.checks[0].actual, "21[2J2992");
        assert!(doc.facts.contains(&("kernel".into(), "6.1".into())));
        assert!(doc.facts.contains(&("nic.eth0.mtu".into(), "9000".into())));
    }

    #[test]
    fn what_is_not_a_report_is_named_with_its_byte() {
        let err = |text: &str| {
            node_doc("r.json", 100, text.as_bytes())
                .unwrap_err()
                .to_string()
        };
        assert_eq!(
            err("{}"),
            "r.json: byte 101: not a gputune audit report: missing field `schema_version` at line 1 column 2"
        );
        let e = err("{\n\"a\": tru }");
        assert!(
            e.starts_with("r.json: byte 110: not a JSON document"),
            "{e}"
        );
        assert!(err(&report("n1", "{\"id\": 1}")).contains("not a gputune audit report"));
        let bad = report("n1", "").replace("\"schema_version\": 1", "\"schema_version\": 99");
        assert!(
            err(&bad).contains("schema_version 99 is not one"),
            "{}",
            err(&bad)
        );
        assert!(err(&report("a[1]", "")).contains("\"a[1]\" is not a host name"));
        let status =
            r#"{"id": "x", "area": "network", "status": "maybe", "expected": "", "actual": ""}"#;
        assert!(err(&report("n1", status)).contains("unknown variant `maybe`"));
    }
}
