//! The knowledge `explain` applies, as data: each rule says which log lines (or which fact
//! about what NCCL did) reveal a cause, the cause in one sentence, the fix, the gputune
//! checks that detect it on a node, and the threads it was learnt from. The shipped rules
//! are `rules/explain/*.toml`, one file per area, embedded; a site adds or overrides rules
//! (by `id`) with
//! `/etc/gputune/explain/*.toml` under the root, next to its profiles.

use std::collections::BTreeSet;
use std::fmt;

use serde::Deserialize;
use toml::Spanned;

use crate::host::Root;

/// The rules shipped inside the binary, one file per area of the node, in the order they
/// are read.
pub const BUILTIN: &[(&str, &str)] = &[
    (
        "rules/explain/00-context.toml",
        include_str!("../../rules/explain/00-context.toml"),
    ),
    (
        "rules/explain/10-libraries.toml",
        include_str!("../../rules/explain/10-libraries.toml"),
    ),
    (
        "rules/explain/20-known-nccl-bugs.toml",
        include_str!("../../rules/explain/20-known-nccl-bugs.toml"),
    ),
    (
        "rules/explain/30-hardware.toml",
        include_str!("../../rules/explain/30-hardware.toml"),
    ),
    (
        "rules/explain/40-user-code-and-launchers.toml",
        include_str!("../../rules/explain/40-user-code-and-launchers.toml"),
    ),
    (
        "rules/explain/45-llm-stacks.toml",
        include_str!("../../rules/explain/45-llm-stacks.toml"),
    ),
    (
        "rules/explain/50-memory-and-limits.toml",
        include_str!("../../rules/explain/50-memory-and-limits.toml"),
    ),
    (
        "rules/explain/60-rdma.toml",
        include_str!("../../rules/explain/60-rdma.toml"),
    ),
    (
        "rules/explain/70-pcie-and-p2p.toml",
        include_str!("../../rules/explain/70-pcie-and-p2p.toml"),
    ),
    (
        "rules/explain/80-sockets-and-names.toml",
        include_str!("../../rules/explain/80-sockets-and-names.toml"),
    ),
    (
        "rules/explain/85-containers-and-clusters.toml",
        include_str!("../../rules/explain/85-containers-and-clusters.toml"),
    ),
    (
        "rules/explain/90-hangs.toml",
        include_str!("../../rules/explain/90-hangs.toml"),
    ),
    (
        "rules/explain/95-fallbacks.toml",
        include_str!("../../rules/explain/95-fallbacks.toml"),
    ),
    (
        "rules/explain/97-possible-causes.toml",
        include_str!("../../rules/explain/97-possible-causes.toml"),
    ),
    (
        "rules/explain/99-symptoms.toml",
        include_str!("../../rules/explain/99-symptoms.toml"),
    ),
];

/// Where site rules live on the node (under the root), beside `/etc/gputune/profiles`.
pub const SITE_DIR: &str = "/etc/gputune/explain";

/// The most a rules file may hold; the shipped one is a few dozen KiB.
const MAX_RULES_BYTES: u64 = 1 << 20;

/// How far an `unless` line reaches when a rule does not say: the few lines around one
/// error that NCCL prints for it (the WARN, the `-> N` trace, the wrapper).
pub const UNLESS_WITHIN: u64 = 5;

/// The farthest an `unless` line may reach: beyond this it is no longer about the same
/// failure.
const MAX_UNLESS_WITHIN: i64 = 1000;

/// The longest pattern a rule may use: patterns are matched against every line of logs that
/// can be gigabytes long, so they are short literal phrases, not documents.
const MAX_PATTERN_CHARS: usize = 200;

/// The `category` vocabulary (issue 23): exactly one per problem.
pub const CATEGORIES: &[&str] = &[
    "firewall_port_blocked",
    "wrong_socket_interface",
    "rdma_device_unavailable",
    "ib_port_or_gid_misconfig",
    "shm_too_small",
    "shm_permission",
    "memlock_ulimit",
    "pcie_acs_iommu_p2p",
    "consumer_gpu_p2p_broken",
    "nccl_version_mismatch",
    "driver_cuda_mismatch",
    "gpu_oom_during_init",
    "straggler_or_dead_rank_timeout",
    "hostname_resolution",
    "ipv6_ipv4_mismatch",
    "container_networking",
    "gpudirect_rdma_missing",
    "net_plugin_missing_or_mismatch",
    "gpu_hardware_fault",
    "launcher_misconfig",
    "user_code_mismatched_collectives",
    "user_code_device_mapping",
    "library_bug",
];

/// Causes no node audit can detect: a rule of one of these says `node_config = false`.
pub const NOT_NODE_CONFIG: &[&str] = &[
    "launcher_misconfig",
    "user_code_mismatched_collectives",
    "user_code_device_mapping",
    "library_bug",
];

/// Facts about what NCCL did that a rule may name instead of (or besides) line patterns;
/// each is worked out from the whole log (see [`super::facts`]).
pub const FACTS: &[&str] = &[
    "nccl_versions_differ",
    "cuda_driver_older_than_runtime",
    "socket_despite_hca",
    "virtual_interface_chosen",
    "docker_bridge_address",
    "gdr_partial",
    "nccl_tests_hung",
    "nccl_tests_hung_one_host",
    "collective_args_differ",
    "socket_on_ipoib_failed",
    "watchdog_ops_differ",
    "p2p_slower_than_host",
    "lightning_ranks_missing",
    "collective_fingerprints_differ",
    "net_plugin_on_some_hosts",
];

/// A rules file that cannot be used: its file and line, and what is wrong (exit 2).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct RuleError {
    pub file: String,
    pub line: Option<usize>,
    pub message: String,
}

impl fmt::Display for RuleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "explain rules {}", self.file)?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
        }
        write!(f, ": {}", self.message)
    }
}

/// A literal phrase matched against one log line; `*` stands for any text in between, so
/// `"ibv_reg_mr*Cannot allocate memory"` needs both parts, in that order, on one line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pattern {
    text: String,
    pieces: Vec<String>,
}

/// Why a phrase cannot be a [`Pattern`]; the phrase is quoted as written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadPattern {
    #[error("pattern {0:?} matches every line")]
    Everything(String),
    #[error("pattern {0:?} is longer than {MAX_PATTERN_CHARS} characters")]
    TooLong(String),
    #[error("pattern {0:?} holds a control character")]
    Control(String),
}

impl Pattern {
    fn new(text: &str) -> Result<Pattern, BadPattern> {
        let pieces: Vec<String> = text
            .split('*')
            .filter(|p| !p.is_empty())
            .map(str::to_string)
            .collect();
        if pieces.is_empty() {
            return Err(BadPattern::Everything(text.to_string()));
        }
        if text.chars().count() > MAX_PATTERN_CHARS {
            return Err(BadPattern::TooLong(text.to_string()));
        }
        if text.chars().any(char::is_control) {
            return Err(BadPattern::Control(text.to_string()));
        }
        Ok(Pattern {
            text: text.to_string(),
            pieces,
        })
    }

    /// True when every piece occurs in `line`, each after the one before.
    pub fn matches(&self, line: &str) -> bool {
        let mut rest = line;
        for piece in &self.pieces {
            match rest.find(piece.as_str()) {
                Some(at) => rest = &rest[at + piece.len()..],
                None => return false,
            }
        }
        true
    }

    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The longest piece: a line without it cannot match, so [`Index`] looks for it first.
    fn anchor(&self) -> &str {
        self.pieces
            .iter()
            .max_by_key(|p| p.len())
            .map_or("", String::as_str)
    }
}

/// Which patterns of a rule set may match a line, found in one pass over the line (an
/// Aho-Corasick automaton of every pattern's longest piece) instead of one search per
/// pattern: a log of millions of lines is read at the speed of that one pass.
pub struct Index {
    /// `None` if it could not be built: then every pattern is tried on every line.
    automaton: Option<aho_corasick::AhoCorasick>,
    /// Every pattern, in [`RuleSet::patterns`] order; anchor `i` belongs to pattern `i`.
    patterns: Vec<Pattern>,
}

impl Index {
    pub fn new(set: &RuleSet) -> Index {
        let patterns = set.patterns();
        let anchors: Vec<&str> = patterns.iter().map(|p| p.anchor()).collect();
        // A few hundred short literals stay far below the automaton's limits; should it
        // still refuse, every pattern is tried on every line (slower, same answers).
        let automaton = aho_corasick::AhoCorasick::new(&anchors).ok();
        Index {
            automaton,
            patterns: patterns.into_iter().cloned().collect(),
        }
    }

    /// Sets `hits[i]` for every pattern `i` that matches `line`; `hits` is reused per line.
    pub fn scan(&self, line: &str, hits: &mut Vec<bool>) {
        hits.clear();
        hits.resize(self.patterns.len(), false);
        let patterns = &self.patterns;
        match &self.automaton {
            Some(automaton) => {
                for m in automaton.find_overlapping_iter(line) {
                    let i = m.pattern().as_usize();
                    if !hits[i] && patterns[i].matches(line) {
                        hits[i] = true;
                    }
                }
            }
            None => {
                for (hit, pattern) in hits.iter_mut().zip(patterns) {
                    *hit = pattern.matches(line);
                }
            }
        }
    }
}

/// One cause explain knows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    pub id: String,
    pub category: &'static str,
    /// True when a node audit can detect the cause; false for user code, launcher mistakes
    /// and library bugs.
    pub node_config: bool,
    /// Which problem comes first when a log shows several: root causes rank above the
    /// symptoms they produce (a timeout, a closed connection).
    pub priority: u8,
    /// A line matching any of these is evidence.
    pub any: Vec<Pattern>,
    /// The rule holds only if the log also has a line matching one of these (anywhere).
    pub also_any: Vec<Pattern>,
    /// A line matching one of these vetoes the evidence near it: the lines of the same rank
    /// (or of no known rank) at most [`Rule::unless_within`] lines before or after it. A
    /// veto is local because a multi-rank log mixes unrelated failures: a `Permission
    /// denied` of one rank must not hide another rank's full `/dev/shm`.
    pub unless: Vec<Pattern>,
    /// How far (in lines) an `unless` line reaches; 0 vetoes only its own line.
    pub unless_within: u64,
    /// What the rule's evidence is: a cause, an echo, a usual cause, a possible cause.
    pub kind: Kind,
    /// A fact about what NCCL did that is evidence by itself.
    pub fact: Option<&'static str>,
    pub cause: String,
    pub fix: String,
    /// gputune check ids that detect the cause; `*` matches any part of an id.
    pub checks: Vec<String>,
    pub sources: Vec<String>,
    /// Where the rule was defined, for messages.
    pub origin: String,
}

/// What a rule's evidence says (the rules file's `symptom`, `fallback` and `candidate`, of
/// which a rule is at most one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// The cause the evidence names.
    Cause,
    /// An echo of a failure elsewhere: alone it explains nothing.
    Symptom,
    /// The usual cause of a failure line that names none itself (a bare `unhandled system
    /// error`), as the threads established it: it stands only when nothing else in the log
    /// explains the failure or is left unexplained, never beside a cause a rule names.
    Fallback,
    /// One of several causes threads settled for a line that names none of them, none of
    /// which holds half: never a problem, its lines stay not understood; where nothing else
    /// names a problem it is listed as a possible cause, and `--check` judges it on the node.
    Candidate,
}

impl RuleSet {
    /// Every pattern, in a fixed order: each rule's `any`, `also_any`, `unless`, then the
    /// context phrases. [`Index::scan`] numbers its hits in this order.
    pub fn patterns(&self) -> Vec<&Pattern> {
        let mut out = Vec::new();
        for r in &self.rules {
            out.extend(r.any.iter());
            out.extend(r.also_any.iter());
            out.extend(r.unless.iter());
        }
        out.extend(self.context.iter());
        out
    }
}

/// Every rule in force, shipped ones overridden by site ones of the same id, and the line
/// phrases that are known and harmless.
#[derive(Debug, Clone, Default)]
pub struct RuleSet {
    pub rules: Vec<Rule>,
    /// Lines that look like errors but are known to be harmless or to be wrappers around a
    /// more specific message (`unhandled system error`): never shown as not understood.
    pub context: Vec<Pattern>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    #[serde(default)]
    context: Vec<Spanned<String>>,
    #[serde(default)]
    rule: Vec<Spanned<RawRule>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRule {
    id: String,
    category: String,
    node_config: bool,
    #[serde(default)]
    priority: i64,
    #[serde(default)]
    any: Vec<String>,
    #[serde(default)]
    also_any: Vec<String>,
    #[serde(default)]
    unless: Vec<String>,
    #[serde(default)]
    unless_within: Option<i64>,
    #[serde(default)]
    symptom: bool,
    #[serde(default)]
    fallback: bool,
    #[serde(default)]
    candidate: bool,
    #[serde(default)]
    fact: Option<String>,
    cause: String,
    fix: String,
    #[serde(default)]
    checks: Vec<String>,
    #[serde(default)]
    sources: Vec<String>,
}

fn line_of(text: &str, offset: usize) -> usize {
    text.as_bytes()[..offset.min(text.len())]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}

/// Parses and validates one rules file; `file` names it in messages.
pub fn parse(file: &str, text: &str) -> Result<RuleSet, RuleError> {
    let err = |line: Option<usize>, message: String| RuleError {
        file: file.to_string(),
        line,
        message,
    };
    let raw: RawFile = toml::from_str(text).map_err(|e| {
        let line = e.span().map(|s| line_of(text, s.start));
        err(line, e.message().to_string())
    })?;
    let mut set = RuleSet::default();
    for phrase in &raw.context {
        let line = line_of(text, phrase.span().start);
        set.context
            .push(Pattern::new(phrase.get_ref()).map_err(|e| err(Some(line), e.to_string()))?);
    }
    let mut seen = BTreeSet::new();
    for spanned in raw.rule {
        let line = line_of(text, spanned.span().start);
        let raw = spanned.into_inner();
        let at = |m: String| err(Some(line), format!("rule {:?}: {m}", raw.id));
        if raw.id.is_empty()
            || !raw
                .id
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        {
            return Err(at("id must be lower-case letters, digits and '-'".into()));
        }
        if !seen.insert(raw.id.clone()) {
            return Err(at("id is defined twice in this file".into()));
        }
        let category = CATEGORIES
            .iter()
            .find(|c| **c == raw.category)
            .ok_or_else(|| {
                at(format!(
                    "category {:?} is not one of: {}",
                    raw.category,
                    CATEGORIES.join(", ")
                ))
            })?;
        let priority = u8::try_from(raw.priority)
            .ok()
            .filter(|p| *p <= 100)
            .ok_or_else(|| at(format!("priority {} is not 0 to 100", raw.priority)))?;
        let unless_within = match raw.unless_within {
            None => UNLESS_WITHIN,
            Some(n) => u64::try_from(n)
                .ok()
                .filter(|_| n <= MAX_UNLESS_WITHIN)
                .ok_or_else(|| {
                    at(format!(
                        "unless_within {n} is not 0 to {MAX_UNLESS_WITHIN} lines"
                    ))
                })?,
        };
        let fact =
            match &raw.fact {
                None => None,
                Some(name) => Some(*FACTS.iter().find(|f| **f == name).ok_or_else(|| {
                    at(format!("fact {name:?} is not one of: {}", FACTS.join(", ")))
                })?),
            };
        let patterns = |list: &[String]| -> Result<Vec<Pattern>, RuleError> {
            list.iter()
                .map(|p| Pattern::new(p).map_err(|e| at(e.to_string())))
                .collect()
        };
        let any = patterns(&raw.any)?;
        if any.is_empty() && fact.is_none() {
            return Err(at("needs `any` patterns or a `fact`".into()));
        }
        if raw.node_config && NOT_NODE_CONFIG.contains(category) {
            return Err(at(format!(
                "node_config must be false for {category}: no node audit detects user code, a launcher mistake or a library bug"
            )));
        }
        let kind = match (raw.symptom, raw.fallback, raw.candidate) {
            (false, false, false) => Kind::Cause,
            (true, false, false) => Kind::Symptom,
            (false, true, false) => Kind::Fallback,
            (false, false, true) => Kind::Candidate,
            _ => {
                return Err(at(
                    "a rule is at most one of a symptom (an echo), a fallback (the usual cause) and a candidate (a possible cause)".into(),
                ));
            }
        };
        // A possible cause of a line not understood: a fact's lines are never such a line.
        if kind == Kind::Candidate && (fact.is_some() || any.is_empty()) {
            return Err(at(
                "a candidate (a possible cause) needs `any` patterns and no `fact`".into(),
            ));
        }
        if raw.cause.trim().is_empty() || raw.fix.trim().is_empty() {
            return Err(at("cause and fix must not be empty".into()));
        }
        if raw
            .cause
            .chars()
            .chain(raw.fix.chars())
            .any(char::is_control)
        {
            return Err(at("cause and fix must be one line each".into()));
        }
        if raw.sources.iter().any(|u| u.chars().any(char::is_control)) {
            return Err(at("sources must not hold control characters".into()));
        }
        for check in &raw.checks {
            if check.is_empty()
                || !check
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "._-*".contains(c))
            {
                return Err(at(format!("check id {check:?} is not a gputune check id")));
            }
        }
        set.rules.push(Rule {
            id: raw.id.clone(),
            category,
            node_config: raw.node_config,
            priority,
            any,
            also_any: patterns(&raw.also_any)?,
            unless: patterns(&raw.unless)?,
            unless_within,
            kind,
            fact,
            cause: raw.cause,
            fix: raw.fix,
            checks: raw.checks,
            sources: raw.sources,
            origin: format!("{file}:{line}"),
        });
    }
    Ok(set)
}

/// The shipped rules: every file of [`BUILTIN`] in order. An id may be defined in one of
/// them only, so no shipped rule silently replaces another.
pub fn builtin() -> Result<RuleSet, RuleError> {
    parse_shipped(BUILTIN)
}

fn parse_shipped(files: &[(&str, &str)]) -> Result<RuleSet, RuleError> {
    let mut set = RuleSet::default();
    for (name, text) in files {
        let file = format!("(built-in) {name}");
        let part = parse(&file, text)?;
        for rule in &part.rules {
            if let Some(first) = set.rules.iter().find(|r| r.id == rule.id) {
                return Err(RuleError {
                    file,
                    line: None,
                    message: format!(
                        "rule {:?} is defined again at {}, after {}",
                        rule.id, rule.origin, first.origin
                    ),
                });
            }
        }
        set.context.extend(part.context);
        set.rules.extend(part.rules);
    }
    Ok(set)
}

/// The shipped rules, then every `*.toml` in [`SITE_DIR`] under the root in name order; a
/// site rule replaces the shipped (or earlier) rule with its id.
pub fn load(root: &Root) -> Result<RuleSet, RuleError> {
    let mut set = builtin()?;
    let names = root.list_dir(SITE_DIR).map_err(|e| RuleError {
        file: root.path(SITE_DIR).display().to_string(),
        line: None,
        message: e.to_string(),
    })?;
    let mut names: Vec<String> = names
        .unwrap_or_default()
        .into_iter()
        .filter(|n| n.ends_with(".toml"))
        .collect();
    names.sort();
    for name in names {
        let host = format!("{SITE_DIR}/{name}");
        let display = root.path(&host).display().to_string();
        let bytes = root
            .read_capped(&host, MAX_RULES_BYTES)
            .map_err(|e| RuleError {
                file: display.clone(),
                line: None,
                message: e.to_string(),
            })?
            .unwrap_or_default();
        let text = String::from_utf8(bytes).map_err(|_| RuleError {
            file: display.clone(),
            line: None,
            message: "not UTF-8 text".into(),
        })?;
        let site = parse(&display, &text)?;
        set.context.extend(site.context);
        for rule in site.rules {
            match set.rules.iter_mut().find(|r| r.id == rule.id) {
                Some(old) => *old = rule,
                None => set.rules.push(rule),
            }
        }
    }
    Ok(set)
}

/// True when check id `id` is named by `pattern`, where `*` matches any run of characters.
pub fn check_matches(pattern: &str, id: &str) -> bool {
    let pieces: Vec<&str> = pattern.split('*').collect();
    if pieces.len() == 1 {
        return pattern == id;
    }
    let (first, last) = (pieces[0], pieces[pieces.len() - 1]);
    if !id.starts_with(first) || id.len() < first.len() + last.len() || !id.ends_with(last) {
        return false;
    }
    let mut rest = &id[first.len()..id.len() - last.len()];
    for piece in &pieces[1..pieces.len() - 1] {
        match rest.find(piece) {
            Some(at) => rest = &rest[at + piece.len()..],
            None => return false,
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(body: &str) -> String {
        format!(
            "[[rule]]\nid = \"x\"\ncategory = \"shm_too_small\"\nnode_config = true\ncause = \"c\"\nfix = \"f\"\n{body}\n"
        )
    }

    #[test]
    fn the_shipped_rules_are_valid() {
        let set = builtin().unwrap();
        assert!(set.rules.len() >= 20, "{}", set.rules.len());
        let used: BTreeSet<&str> = set.rules.iter().map(|r| r.category).collect();
        // Every category of the vocabulary has a shipped rule, each backed by a real log
        // (tests/explain.rs).
        let missing: Vec<&str> = CATEGORIES
            .iter()
            .copied()
            .filter(|c| !used.contains(c))
            .collect();
        assert!(missing.is_empty(), "{missing:?}");
    }

    #[test]
    fn every_rule_file_of_the_tree_ships_in_name_order() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("rules/explain");
        let mut files: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".toml"))
            .map(|n| format!("rules/explain/{n}"))
            .collect();
        files.sort();
        let shipped: Vec<&str> = BUILTIN.iter().map(|(name, _)| *name).collect();
        assert_eq!(files, shipped);
    }

    #[test]
    fn a_shipped_id_defined_in_two_files_is_refused() {
        let (a, b) = (rule("any = [\"x\"]"), rule("any = [\"y\"]"));
        let e = parse_shipped(&[("a.toml", &a), ("b.toml", &b)]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "explain rules (built-in) b.toml: rule \"x\" is defined again at (built-in) b.toml:1, after (built-in) a.toml:1"
        );
        let b = b.replace("id = \"x\"", "id = \"y\"");
        let set = parse_shipped(&[("a.toml", &a), ("b.toml", &b)]).unwrap();
        assert_eq!(set.rules.len(), 2);
    }

    #[test]
    fn user_code_launcher_and_library_causes_are_never_node_configuration() {
        for category in NOT_NODE_CONFIG {
            let text = rule("any = [\"x\"]").replace("shm_too_small", category);
            let e = parse("site.toml", &text).unwrap_err();
            assert_eq!(
                e.to_string(),
                format!(
                    "explain rules site.toml:1: rule \"x\": node_config must be false for {category}: no node audit detects user code, a launcher mistake or a library bug"
                )
            );
            let text = text.replace("node_config = true", "node_config = false");
            assert!(parse("site.toml", &text).is_ok(), "{category}");
        }
        assert!(NOT_NODE_CONFIG.iter().all(|c| CATEGORIES.contains(c)));
    }

    #[test]
    fn bad_rules_name_the_file_line_and_field() {
        for (body, line, needle) in [
            ("any = [\"x\"]\nbogus = 1", Some(8), "unknown field `bogus`"),
            ("any = [\"*\"]", Some(1), "matches every line"),
            ("", Some(1), "needs `any` patterns or a `fact`"),
            ("any = [\"x\"]\nfact = \"nope\"", Some(1), "fact \"nope\""),
            ("any = [\"x\"]\npriority = 101", Some(1), "priority 101"),
            ("any = [\"x\"]\nchecks = [\"a b\"]", Some(1), "check id"),
            (
                "any = [\"x\"]\nunless_within = -1",
                Some(1),
                "unless_within -1",
            ),
            (
                "any = [\"x\"]\nunless_within = 5000",
                Some(1),
                "unless_within 5000",
            ),
            (
                "any = [\"x\"]\nsymptom = true\nfallback = true",
                Some(1),
                "at most one of",
            ),
            (
                "any = [\"x\"]\ncandidate = true\nfallback = true",
                Some(1),
                "at most one of",
            ),
            (
                "fact = \"nccl_versions_differ\"\ncandidate = true",
                Some(1),
                "needs `any` patterns and no `fact`",
            ),
        ] {
            let e = parse("site.toml", &rule(body)).unwrap_err();
            assert_eq!(e.line, line, "{body}: {e}");
            assert!(e.to_string().contains(needle), "{body}: {e}");
            assert!(e.to_string().starts_with("explain rules site.toml:"), "{e}");
        }
        let e = parse(
            "s.toml",
            &rule("any = [\"x\"]").replace("shm_too_small", "slow"),
        )
        .unwrap_err();
        assert!(
            e.to_string().contains("category \"slow\" is not one of"),
            "{e}"
        );
        let twice = format!("{}{}", rule("any = [\"x\"]"), rule("any = [\"y\"]"));
        let e = parse("s.toml", &twice).unwrap_err();
        assert_eq!(e.line, Some(8));
        assert!(e.to_string().contains("defined twice"));
        let e = parse("s.toml", "[[rule]\n").unwrap_err();
        assert_eq!(e.line, Some(1));
    }

    #[test]
    fn patterns_match_pieces_in_order() {
        let p = Pattern::new("ibv_reg_mr*Cannot allocate memory").unwrap();
        assert!(p.matches("x ibv_reg_mr_iova2 failed with error Cannot allocate memory"));
        assert!(!p.matches("Cannot allocate memory in ibv_reg_mr"));
        assert!(Pattern::new("a\u{1b}b").is_err());
    }

    #[test]
    fn check_globs() {
        assert!(check_matches("rdma.*.ports", "rdma.mlx5_0.ports"));
        assert!(check_matches("dev_shm.size", "dev_shm.size"));
        assert!(!check_matches("dev_shm.size", "dev_shm.sizes"));
        assert!(check_matches(
            "gpu*.ecc_uncorrected",
            "gpu3.ecc_uncorrected"
        ));
        assert!(!check_matches("rdma.*.ports", "rdma.ports"));
        assert!(check_matches("rdma.*.*.state", "rdma.mlx5_0.1.state"));
    }
}
