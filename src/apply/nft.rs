//! The nftables table `inet gputune`: rendering it from port ranges, reading the ranges
//! back from a listing, and the [`Nft`] boundary that runs the real `nft`.

use std::io::Write;
use std::process::{Command, Stdio};

use super::error::ApplyError;

/// The table gputune owns; it never touches another table.
pub(crate) const TABLE: &str = "inet gputune";

/// Runs nftables commands. The real one is [`NftCommand`]; tests use an in-memory table.
pub trait Nft {
    /// `nft list table inet gputune`, or `None` when the table does not exist.
    fn list_table(&self) -> Result<Option<String>, ApplyError>;
    /// Runs an nft script (`nft -f -`) as one atomic transaction.
    fn run_script(&self, script: &str) -> Result<(), ApplyError>;
}

/// The real `nft` binary found on `PATH`.
#[derive(Debug, Default)]
pub struct NftCommand;

impl Nft for NftCommand {
    fn list_table(&self) -> Result<Option<String>, ApplyError> {
        // Whether the table exists is read from nft's JSON list of tables, not from the
        // wording of its error for a missing one.
        let tables = nft(&["-j", "list", "tables", "inet"])?;
        if !has_own_table(&tables)? {
            return Ok(None);
        }
        nft(&["list", "table", "inet", "gputune"]).map(Some)
    }

    fn run_script(&self, script: &str) -> Result<(), ApplyError> {
        let mut child = Command::new("nft")
            .args(["-f", "-"])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| ApplyError::Nft(format!("cannot run nft (install nftables): {e}")))?;
        if let Some(mut stdin) = child.stdin.take() {
            stdin
                .write_all(script.as_bytes())
                .map_err(|e| ApplyError::Nft(format!("nft -f -: {e}")))?;
        }
        let out = child
            .wait_with_output()
            .map_err(|e| ApplyError::Nft(format!("nft -f -: {e}")))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(ApplyError::Nft(format!(
                "nft -f - failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            )))
        }
    }
}

/// How long one `nft` listing may take before it counts as hung.
const NFT_LIMIT: std::time::Duration = std::time::Duration::from_secs(20);

/// Runs `nft ARGS` and returns what it printed, or why it failed.
fn nft(args: &[&str]) -> Result<String, ApplyError> {
    let mut command = Command::new("nft");
    command.args(args);
    let shown = format!("nft {}", args.join(" "));
    match crate::host::exec::run(command, NFT_LIMIT) {
        Ok(out) if out.success => Ok(out.stdout),
        Ok(out) => Err(ApplyError::Nft(format!("{shown}: {}", out.stderr.trim()))),
        Err(e @ crate::host::exec::ExecError::NotInstalled { .. }) => Err(ApplyError::Nft(
            format!("cannot run nft (install nftables): {e}"),
        )),
        Err(e) => Err(ApplyError::Nft(format!("{shown}: {e}"))),
    }
}

/// True when `nft -j list tables` output lists the table `inet gputune`.
fn has_own_table(json: &str) -> Result<bool, ApplyError> {
    let doc: serde_json::Value = serde_json::from_str(json)
        .map_err(|e| ApplyError::Nft(format!("nft -j list tables: not JSON: {e}")))?;
    Ok(doc["nftables"].as_array().is_some_and(|items| {
        items
            .iter()
            .any(|item| item["table"]["family"] == "inet" && item["table"]["name"] == "gputune")
    }))
}

/// The script that makes the table exactly `definition` (or removes it when `None`) in
/// one transaction: declaring the table first lets `delete` succeed when it is absent.
pub(crate) fn replace_script(definition: Option<&str>) -> String {
    let mut script = format!("table {TABLE}\ndelete table {TABLE}\n");
    if let Some(def) = definition {
        script.push_str(def);
    }
    script
}

/// The table accepting inbound TCP to `ports`, in the form `nft list table` prints. Its
/// input chain runs just before the usual filter priority; note that in nftables an accept
/// ends only this table's chain, so a drop in another table at the same hook still drops.
pub(crate) fn render_table(ports: &[(u16, u16)]) -> String {
    let set = crate::profile::job::format_ports(&normalize_ports(ports));
    let mut out = format!(
        "table {TABLE} {{\n\tchain input {{\n\t\ttype filter hook input priority filter - 1; policy accept;\n"
    );
    if !set.is_empty() {
        out.push_str(&format!("\t\ttcp dport {{ {set} }} accept\n"));
    }
    out.push_str("\t}\n}\n");
    out
}

/// Sorted, merged port ranges, so the same ports always render and compare the same.
pub(crate) fn normalize_ports(ports: &[(u16, u16)]) -> Vec<(u16, u16)> {
    let mut sorted: Vec<(u16, u16)> = ports.iter().map(|&(a, b)| (a.min(b), a.max(b))).collect();
    sorted.sort_unstable();
    let mut merged: Vec<(u16, u16)> = Vec::new();
    for (lo, hi) in sorted {
        match merged.last_mut() {
            Some(last) if u32::from(lo) <= u32::from(last.1) + 1 => last.1 = last.1.max(hi),
            _ => merged.push((lo, hi)),
        }
    }
    merged
}

/// A line of gputune's own table that [`accepted_ports`] cannot read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ListingError {
    #[error("unexpected rule `{line}` in table {TABLE}")]
    Rule { line: String },
    #[error("unreadable port `{item}` in rule `{line}` of table {TABLE}")]
    Port { item: String, line: String },
}

/// The TCP port ranges a table listing accepts (`tcp dport { 29500-29550, 8080 } accept`
/// or `tcp dport 22 accept`), merged; an error names a line it cannot read.
pub fn accepted_ports(listing: &str) -> Result<Vec<(u16, u16)>, ListingError> {
    let mut ports = Vec::new();
    for line in listing.lines().map(str::trim) {
        let Some(rest) = line.strip_prefix("tcp dport ") else {
            continue;
        };
        let Some(spec) = rest.strip_suffix(" accept") else {
            return Err(ListingError::Rule {
                line: line.to_string(),
            });
        };
        let spec = spec.trim().trim_start_matches('{').trim_end_matches('}');
        for item in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            ports.push(parse_range(item).ok_or_else(|| ListingError::Port {
                item: item.to_string(),
                line: line.to_string(),
            })?);
        }
    }
    Ok(normalize_ports(&ports))
}

fn parse_range(item: &str) -> Option<(u16, u16)> {
    match item.split_once('-') {
        Some((lo, hi)) => Some((lo.trim().parse().ok()?, hi.trim().parse().ok()?)),
        None => item.parse().ok().map(|p| (p, p)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::assert_cases;

    /// Recorded from nft 1.0.6: `nft -j list tables` with `inet gputune` and `ip gputune`,
    /// then with only `ip gputune`, then with no table.
    #[test]
    fn the_own_table_is_found_in_nft_json_by_family_and_name() {
        let meta = r#"{"metainfo": {"version": "1.0.6", "release_name": "Lester Gooch #5", "json_schema_version": 1}}"#;
        let inet = r#"{"table": {"family": "inet", "name": "gputune", "handle": 1}}"#;
        let ip = r#"{"table": {"family": "ip", "name": "gputune", "handle": 2}}"#;
        let doc = |items: &[&str]| format!("{{\"nftables\": [{}]}}", items.join(", "));
        assert!(has_own_table(&doc(&[meta, inet, ip])).unwrap());
        assert!(!has_own_table(&doc(&[meta, ip])).unwrap());
        assert!(!has_own_table(&doc(&[meta])).unwrap());
        assert!(has_own_table("Error: not json").is_err());
    }

    #[test]
    fn ports_merge_and_sort() {
        let cases = [
            (vec![], vec![]),
            (vec![(29500, 29550)], vec![(29500, 29550)]),
            (
                vec![(50000, 51000), (29500, 29550)],
                vec![(29500, 29550), (50000, 51000)],
            ),
            (vec![(10, 20), (21, 30)], vec![(10, 30)]),
            (vec![(10, 20), (15, 25), (5, 5)], vec![(5, 5), (10, 25)]),
            (vec![(20, 10)], vec![(10, 20)]),
            (vec![(65535, 65535), (65534, 65535)], vec![(65534, 65535)]),
        ];
        assert_cases(cases, |input| normalize_ports(&input));
    }

    #[test]
    fn listings_give_their_ports() {
        let cases = [
            ("table inet gputune {\n}\n", Ok(vec![])),
            (
                "table inet gputune {\n\tchain input {\n\t\ttcp dport { 29500-29550, 50000-51000 } accept\n\t}\n}\n",
                Ok(vec![(29500, 29550), (50000, 51000)]),
            ),
            ("\t\ttcp dport 22 accept\n", Ok(vec![(22, 22)])),
            (
                "tcp dport { 80, 81 } accept\ntcp dport 82 accept",
                Ok(vec![(80, 82)]),
            ),
            ("tcp dport 22 drop\n", Err(())),
            ("tcp dport { eighty } accept\n", Err(())),
            ("tcp dport { 70000 } accept\n", Err(())),
        ];
        assert_cases(cases, |text| accepted_ports(text).map_err(|_| ()));
    }

    #[test]
    fn rendered_tables_read_back() {
        let ports = [(50000, 51000), (29500, 29550), (22, 22)];
        let table = render_table(&ports);
        assert!(table.starts_with("table inet gputune {"));
        assert_eq!(accepted_ports(&table).unwrap(), normalize_ports(&ports));
        assert_eq!(accepted_ports(&render_table(&[])).unwrap(), vec![]);
    }

    #[test]
    fn replacing_declares_before_deleting() {
        assert_eq!(
            replace_script(None),
            "table inet gputune\ndelete table inet gputune\n"
        );
        assert!(replace_script(Some("table inet gputune {\n}\n")).ends_with("{\n}\n"));
    }
}
