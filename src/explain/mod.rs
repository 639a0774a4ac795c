//! `gputune explain`: a failing job's log (NCCL `NCCL_DEBUG=INFO|WARN` lines, PyTorch c10d,
//! torchrun and elastic errors, nccl-tests output, Slurm output of many ranks at once) read
//! once, streaming, into what NCCL did, the problems it shows (each with one category, its
//! cause, fix, evidence lines and the gputune checks that detect it) and the error lines it
//! did not understand, which it shows rather than guess about.
//!
//! Logs are hostile input: every line is stripped of control characters before it is kept,
//! no line is held beyond [`MAX_LINE_BYTES`], and everything kept is bounded.

mod collectives;
pub mod facts;
pub mod gpu_paths;
pub mod hangs;
mod lines;
pub mod node;
pub mod progress;
pub mod render;
pub mod rules;
mod unsettled;
pub mod verify;

use std::collections::{BTreeSet, VecDeque};
use std::io::{self, BufRead};

use serde::Serialize;

use facts::Facts;
use lines::{is_error_trace, looks_like_error};
use rules::{Kind, Rule, RuleSet};

/// The most of one line that is looked at; the rest of a longer line is skipped unread
/// into memory (a log that is one 10 GB line costs 64 KiB).
pub const MAX_LINE_BYTES: usize = 64 * 1024;

/// The most characters of a line kept as evidence.
const MAX_EVIDENCE_CHARS: usize = 400;

/// The most evidence lines kept per problem.
const MAX_EVIDENCE: usize = 5;

/// The most not-understood lines kept (all are counted).
const MAX_NOT_UNDERSTOOD: usize = 20;

/// Rules of this priority or less report a slowdown (GPUDirect RDMA off), not a failure.
pub const HINT_PRIORITY: u8 = 5;

/// A log line: its number (from 1) and its text, without control characters.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Evidence {
    pub line: u64,
    pub text: String,
}

/// One problem the log shows.
#[derive(Debug, Clone, Serialize)]
pub struct Problem {
    pub category: &'static str,
    pub node_config: bool,
    pub cause: String,
    pub fix: String,
    pub evidence: Vec<Evidence>,
    pub checks: Vec<String>,
    /// A cause, an echo, a usual cause or a possible cause (see [`rules::Kind`]).
    #[serde(skip)]
    pub kind: Kind,
    /// The rule that found it, and how many lines matched in all.
    pub rule: String,
    pub matched_lines: u64,
    pub sources: Vec<String>,
    #[serde(skip)]
    pub priority: u8,
}

/// Everything `explain` found in one log.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Analysis {
    pub lines: u64,
    /// Lines longer than [`MAX_LINE_BYTES`], judged by their beginning.
    pub long_lines: u64,
    pub nccl: Facts,
    pub problems: Vec<Problem>,
    pub not_understood: Vec<Evidence>,
    pub not_understood_total: u64,
    /// Where no problem is named: the causes public reports settled for the lines not
    /// understood (see [`rules::Kind::Candidate`]), most likely first.
    pub candidates: Vec<Problem>,
}

/// Text safe for a terminal or another program: control characters dropped, tabs as
/// spaces, invalid UTF-8 replaced.
pub fn clean(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes)
        .chars()
        .filter_map(|c| match c {
            '\t' => Some(' '),
            c if c.is_control() => None,
            // Bidirectional overrides reorder what a terminal shows.
            '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' => None,
            c => Some(c),
        })
        .collect()
}

fn shorten(text: &str) -> String {
    if text.chars().count() <= MAX_EVIDENCE_CHARS {
        return text.to_string();
    }
    let mut out: String = text.chars().take(MAX_EVIDENCE_CHARS).collect();
    out.push('…');
    out
}

/// Reads one line into `buf` (at most [`MAX_LINE_BYTES`], the rest skipped); `Ok(None)` at
/// the end, `Ok(Some(long))` otherwise.
fn read_line(reader: &mut dyn BufRead, buf: &mut Vec<u8>) -> io::Result<Option<bool>> {
    buf.clear();
    let mut long = false;
    let mut any = false;
    loop {
        let available = match reader.fill_buf() {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if available.is_empty() {
            return Ok(any.then_some(long));
        }
        any = true;
        let (chunk, done) = match available.iter().position(|&b| b == b'\n') {
            Some(at) => (&available[..at], Some(at + 1)),
            None => (available, None),
        };
        let room = MAX_LINE_BYTES.saturating_sub(buf.len());
        if chunk.len() > room {
            long = true;
        }
        buf.extend_from_slice(&chunk[..chunk.len().min(room)]);
        let used = done.unwrap_or(available.len());
        reader.consume(used);
        if done.is_some() {
            if buf.last() == Some(&b'\r') {
                buf.pop();
            }
            return Ok(Some(long));
        }
    }
}

/// What one rule has seen so far.
#[derive(Default)]
struct Tally {
    evidence: Vec<Evidence>,
    matched: u64,
    /// The first line matching one of the rule's `also_any` patterns: the condition's evidence.
    also: Option<Evidence>,
    /// Matched lines a later `unless` line may still veto (within reach of it).
    recent: VecDeque<(u64, Option<Rank>)>,
    /// `unless` lines still in reach of the lines that follow.
    vetoes: VecDeque<(u64, Option<Rank>)>,
}

/// Which process wrote a line, as far as its prefix tells: a launcher's task label
/// (`srun --label`'s `3: `), PyTorch's `[rank3]:`, or NCCL's `host:pid:tid`.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Rank {
    Task(String),
    Torch(String),
    Process(String),
}

/// The rank a line belongs to, from its prefix; `None` when it has no recognisable one.
fn rank_of(text: &str) -> Option<Rank> {
    let t = text.trim_start();
    let digits = t.bytes().take_while(u8::is_ascii_digit).count();
    if digits > 0 && t[digits..].starts_with(": ") {
        return Some(Rank::Task(t[..digits].to_string()));
    }
    if let Some(at) = t.find("[rank").filter(|at| *at < 40) {
        let rest = &t[at + 1..];
        let end = rest.find(']')?;
        return Some(Rank::Torch(rest[..end].to_string()));
    }
    // `host:pid:tid [dev]`, perhaps after a timestamp or a launcher's `[name]:` label.
    let before = &t[..t.find(" NCCL ")?];
    before.split_whitespace().find_map(|token| {
        let mut parts = token.rsplitn(3, ':');
        let (tid, pid, host) = (parts.next()?, parts.next()?, parts.next()?);
        let numeric = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
        if !numeric(tid) || !numeric(pid) {
            return None;
        }
        let host = host.rsplit(':').next().unwrap_or(host);
        Some(Rank::Process(format!("{host}:{pid}")))
    })
}

/// True unless both lines name their rank the same way and the names differ: lines
/// without a rank, or named in different ways, may belong to one process.
fn same_rank(a: &Option<Rank>, b: &Option<Rank>) -> bool {
    match (a, b) {
        (Some(Rank::Task(x)), Some(Rank::Task(y)))
        | (Some(Rank::Torch(x)), Some(Rank::Torch(y)))
        | (Some(Rank::Process(x)), Some(Rank::Process(y))) => x == y,
        _ => true,
    }
}

/// The most `unless` lines a rule keeps in reach at once; more are merged into the newest.
const MAX_VETOES: usize = 64;

impl Tally {
    /// An `unless` line at `line`: the evidence of the same rank within `within` lines
    /// before it is withdrawn, and the lines after it are vetoed as they come.
    fn veto(&mut self, line: u64, rank: Option<Rank>, within: u64) {
        let from = line.saturating_sub(within);
        let mut withdrawn = Vec::new();
        self.recent.retain(|(l, r)| {
            let hit = *l >= from && same_rank(r, &rank);
            if hit {
                withdrawn.push(*l);
            }
            !hit
        });
        self.matched -= withdrawn.len() as u64;
        self.evidence.retain(|e| !withdrawn.contains(&e.line));
        if self.vetoes.len() >= MAX_VETOES {
            self.vetoes.pop_front();
        }
        self.vetoes.push_back((line, rank));
    }

    /// A line that matched the rule's `any`: evidence unless an `unless` line near it, of
    /// the same rank, vetoed it.
    fn evidence(&mut self, line: u64, rank: Option<Rank>, within: u64, text: &str) {
        let from = line.saturating_sub(within);
        while self.vetoes.front().is_some_and(|(l, _)| *l < from) {
            self.vetoes.pop_front();
        }
        if self.vetoes.iter().any(|(_, r)| same_rank(r, &rank)) {
            return;
        }
        self.matched += 1;
        if self.evidence.len() < MAX_EVIDENCE {
            self.evidence.push(Evidence {
                line,
                text: shorten(text.trim()),
            });
        }
        while self.recent.front().is_some_and(|(l, _)| *l < from) {
            self.recent.pop_front();
        }
        if within > 0 {
            self.recent.push_back((line, rank));
        }
    }
}

/// Reads the whole log once and explains it with `rules`.
pub fn analyse(reader: &mut dyn BufRead, rules: &RuleSet) -> io::Result<Analysis> {
    let mut analysis = Analysis::default();
    let mut tallies: Vec<Tally> = rules.rules.iter().map(|_| Tally::default()).collect();
    let index = rules::Index::new(rules);
    let mut hits = Vec::new();
    let mut buf = Vec::new();
    let mut wrappers = unsettled::Lines::default();
    let mut unsettled = unsettled::Unsettled::default();
    let mut conditional = Vec::new();
    while let Some(long) = read_line(reader, &mut buf)? {
        analysis.lines += 1;
        if long {
            analysis.long_lines += 1;
        }
        let n = analysis.lines;
        let text = clean(&buf);
        analysis.nccl.observe_any(n, &text);
        // Only NCCL's own lines, nccl-tests' device lines and transport fragments carry facts.
        if text.contains("NCCL") || text.contains(" via ") || text.starts_with('#') {
            analysis.nccl.observe(n, &text);
        }
        index.scan(&text, &mut hits);
        let mut understood = false;
        conditional.clear();
        let mut at = 0;
        for (i, (rule, tally)) in rules.rules.iter().zip(tallies.iter_mut()).enumerate() {
            let any = at..at + rule.any.len();
            let also = any.end..any.end + rule.also_any.len();
            let unless = also.end..also.end + rule.unless.len();
            at = unless.end;
            let matched = hits[any].iter().any(|h| *h);
            let vetoed = hits[unless].iter().any(|h| *h);
            // A line that is its own rule's exception is not explained by it; one vetoed by
            // a line nearby is, as the echo of what that line says.
            // A rule with a condition explains the line only if the condition holds, which
            // is known at the end of the log.
            // A possible cause leaves its line not understood: it names no cause by itself.
            if matched && !vetoed && rule.kind != Kind::Candidate {
                if rule.also_any.is_empty() {
                    understood = true;
                } else {
                    conditional.push(i);
                }
            }
            if tally.also.is_none() && hits[also].iter().any(|h| *h) {
                tally.also = Some(Evidence {
                    line: n,
                    text: shorten(text.trim()),
                });
            }
            if matched && rule.unless.is_empty() {
                // Nothing can veto it: no rank to work out, nothing to remember.
                tally.evidence(n, None, 0, &text);
            } else if vetoed || matched {
                let rank = rank_of(&text);
                // The veto first: a line that is both evidence and exception is no evidence.
                if vetoed {
                    tally.veto(n, rank.clone(), rule.unless_within);
                }
                if matched {
                    tally.evidence(n, rank, rule.unless_within, &text);
                }
            }
        }
        let context = hits[at..].iter().any(|h| *h);
        if understood {
            continue;
        }
        let wrapper = (context && looks_like_error(&text)) || is_error_trace(&text);
        if !conditional.is_empty() && (wrapper || looks_like_error(&text)) {
            unsettled.add(&conditional, wrapper, n, || shorten(text.trim()));
        } else if wrapper {
            // A wrapper ("unhandled system error") says that something failed but not what:
            // shown as not understood if nothing else in the log explains it.
            wrappers.add(n, || shorten(text.trim()));
        } else if !context && looks_like_error(&text) {
            analysis.not_understood_total += 1;
            if analysis.not_understood.len() < MAX_NOT_UNDERSTOOD {
                analysis.not_understood.push(Evidence {
                    line: n,
                    text: shorten(text.trim()),
                });
            }
        }
    }
    analysis.nccl.conclude();
    let held: Vec<bool> = tallies.iter().map(|t| t.also.is_some()).collect();
    let (failures, wrapping) = unsettled.unexplained(&held);
    add_not_understood(&mut analysis, failures);
    wrappers.append(wrapping);
    let mut problems: Vec<Problem> = Vec::new();
    for (rule, tally) in rules.rules.iter().zip(tallies) {
        if let Some(problem) = judge(rule, tally, &analysis.nccl) {
            problems.push(problem);
        }
    }
    let mut candidates: Vec<Problem> = problems
        .extract_if(.., |p| p.kind == Kind::Candidate)
        .collect();
    // A fallback stands only alone: beside a cause a rule names, or a failure no rule
    // explains (which may be that cause), it is no explanation. Echoes and slowdowns leave it
    // standing; they name no cause of the failure.
    let named = problems
        .iter()
        .any(|p| p.kind == Kind::Cause && p.priority > HINT_PRIORITY);
    if named || analysis.not_understood_total > 0 {
        let fallbacks: Vec<Problem> = problems
            .extract_if(.., |p| p.kind == Kind::Fallback)
            .collect();
        // Beside lines no rule explains, the failure it would have explained is one of them.
        if !named {
            admit(&mut analysis, fallbacks);
        }
    }
    problems.sort_by(|a, b| {
        b.priority.cmp(&a.priority).then(
            a.evidence
                .first()
                .map(|e| e.line)
                .cmp(&b.evidence.first().map(|e| e.line)),
        )
    });
    // A slowdown is no explanation of a failure: with error lines no rule explains, the
    // failure is not understood, whatever slowed the job down too.
    if analysis.not_understood_total > 0 && problems.iter().all(|p| p.priority <= HINT_PRIORITY) {
        problems.clear();
    }
    // An echo (a peer closed the connection) names no cause by itself: its lines are what
    // the log does not explain.
    if !problems.is_empty() && problems.iter().all(|p| p.kind == Kind::Symptom) {
        admit(&mut analysis, std::mem::take(&mut problems));
    }
    one_per_category(&mut problems);
    analysis.problems = problems;
    if analysis.problems.is_empty() {
        add_not_understood(&mut analysis, wrappers);
    }
    // Possible causes are for a failure nothing names: not beside a problem, nor for a log
    // with nothing wrong, nor one alone (a list of one reads as the answer).
    candidates.sort_by_key(|p| std::cmp::Reverse(p.priority));
    one_per_category(&mut candidates);
    if analysis.problems.is_empty() && analysis.not_understood_total > 0 && candidates.len() > 1 {
        analysis.candidates = candidates;
    }
    Ok(analysis)
}

/// Two rules of one category on one log are one problem, told by the first (the stronger).
fn one_per_category(problems: &mut Vec<Problem>) {
    let mut seen = BTreeSet::new();
    problems.retain(|p| seen.insert(p.category));
}

/// Counts `lines` as not understood and keeps the first of all such lines, in line order.
fn add_not_understood(analysis: &mut Analysis, lines: unsettled::Lines) {
    if lines.total == 0 {
        return;
    }
    analysis.not_understood_total += lines.total;
    analysis.not_understood.extend(lines.first);
    analysis.not_understood.sort_by_key(|e| e.line);
    analysis.not_understood.truncate(MAX_NOT_UNDERSTOOD);
}

/// Lists the lines of `problems` that explain nothing after all as not understood.
fn admit(analysis: &mut Analysis, problems: Vec<Problem>) {
    if problems.is_empty() {
        return;
    }
    for p in problems {
        analysis.not_understood_total += p.matched_lines;
        analysis.not_understood.extend(p.evidence);
    }
    analysis.not_understood.sort_by_key(|e| e.line);
    analysis.not_understood.dedup_by_key(|e| e.line);
    analysis.not_understood.truncate(MAX_NOT_UNDERSTOOD);
}

fn judge(rule: &Rule, tally: Tally, facts: &Facts) -> Option<Problem> {
    if !rule.also_any.is_empty() && tally.also.is_none() {
        return None;
    }
    let fact_evidence = rule.fact.and_then(|f| facts.evidence.get(f));
    let mut evidence = tally.evidence;
    let mut matched = tally.matched;
    // The line that meets the rule's condition (`also_any`: the NCCL version of a known bug)
    // is half the evidence.
    if let Some(also) = tally.also
        && matched > 0
        && evidence.len() < MAX_EVIDENCE
        && !evidence.iter().any(|x| x.line == also.line)
    {
        evidence.push(also);
        evidence.sort_by_key(|e| e.line);
    }
    if let Some(lines) = fact_evidence {
        matched += lines.len() as u64;
        for e in lines {
            if evidence.len() < MAX_EVIDENCE && !evidence.iter().any(|x| x.line == e.line) {
                evidence.push(Evidence {
                    line: e.line,
                    text: shorten(e.text.trim()),
                });
            }
        }
        evidence.sort_by_key(|e| e.line);
    }
    if matched == 0 {
        return None;
    }
    Some(Problem {
        category: rule.category,
        node_config: rule.node_config,
        cause: rule.cause.clone(),
        fix: rule.fix.clone(),
        evidence,
        checks: rule.checks.clone(),
        rule: rule.id.clone(),
        matched_lines: matched,
        sources: rule.sources.clone(),
        priority: rule.priority,
        kind: rule.kind,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(text: &[u8]) -> Analysis {
        let rules = rules::builtin().unwrap();
        analyse(&mut io::Cursor::new(text), &rules).unwrap()
    }

    #[test]
    fn the_line_that_meets_a_rules_condition_is_evidence_too() {
        let a = run(
            b"NCCL version 2.18.1+cuda12.1\nnoise\nLast error:\nCuda failure 'invalid argument'\n",
        );
        let p = &a.problems[0];
        assert_eq!(p.rule, "nccl-2-18-invalid-argument");
        let lines: Vec<u64> = p.evidence.iter().map(|e| e.line).collect();
        assert_eq!(lines, [1, 4]);
        // Without the version the condition fails and nothing is claimed.
        let a = run(b"NCCL version 2.18.6+cuda12.1\nCuda failure 'invalid argument'\n");
        assert!(
            a.problems
                .iter()
                .all(|p| p.rule != "nccl-2-18-invalid-argument")
        );
    }

    #[test]
    fn a_line_only_a_rule_whose_condition_fails_would_explain_is_not_understood() {
        let text = r#"
[[rule]]
id = "after-fit"
category = "user_code_mismatched_collectives"
node_config = false
any = ["collective timed out"]
also_any = ["fit stopped"]
cause = "c"
fix = "f"
"#;
        let rules = rules::parse("t.toml", text).unwrap();
        let read = |log: &[u8]| analyse(&mut io::Cursor::new(log), &rules).unwrap();
        let a = read(b"collective timed out\nerror: collective timed out\n");
        assert!(a.problems.is_empty());
        assert_eq!(a.not_understood_total, 2);
        let lines: Vec<u64> = a.not_understood.iter().map(|e| e.line).collect();
        assert_eq!(lines, [1, 2]);
        // The condition anywhere in the log, even after the line, makes it explained.
        let a = read(b"collective timed out\nfit stopped\n");
        assert_eq!(a.problems[0].rule, "after-fit");
        assert_eq!(a.not_understood_total, 0);
    }

    #[test]
    fn long_lines_are_cut_not_held() {
        let mut log = vec![b'x'; 3 * MAX_LINE_BYTES];
        log.extend_from_slice(b"\nsecond\r\nthird");
        let a = run(&log);
        assert_eq!((a.lines, a.long_lines), (3, 1));
    }

    #[test]
    fn control_characters_never_survive() {
        let a = run(b"h:1:1 [0] misc/shmutils.cc:71 NCCL WARN Error: failed to extend /dev/shm/nccl-x \x1b]0;pwned\x07\x1b[31m to 9637892 bytes\n");
        let text = &a.problems[0].evidence[0].text;
        assert!(!text.chars().any(char::is_control), "{text:?}");
        assert_eq!(a.problems[0].category, "shm_too_small");
    }

    #[test]
    fn unknown_error_lines_are_admitted_not_guessed() {
        let a = run(b"fine\nh:1:1 [0] foo.cc:1 NCCL WARN Frobnicator exploded\n");
        assert!(a.problems.is_empty());
        assert_eq!(a.not_understood_total, 1);
        assert_eq!(a.not_understood[0].line, 2);
    }

    #[test]
    fn a_failure_nothing_explains_is_not_understood_rather_than_fine() {
        let a = run(
            b"RuntimeError: NCCL error in: x.cpp:1, unhandled cuda error, NCCL version 2.7.8\n",
        );
        assert!(a.problems.is_empty());
        assert_eq!(a.not_understood_total, 1);
        let a = run(b"RuntimeError: NCCL error in: x.cpp:1, unhandled system error\nh:1:1 [0] NCCL WARN Duplicate GPU detected : rank 0 and rank 1 both on CUDA device 0\n");
        assert_eq!(a.problems[0].category, "user_code_device_mapping");
        assert_eq!(a.not_understood_total, 0);
    }

    #[test]
    fn possible_causes_are_listed_only_where_nothing_names_a_problem() {
        let bare = "RuntimeError: NCCL error: unhandled cuda error (run with NCCL_DEBUG=INFO for details)\n";
        let a = run(bare.as_bytes());
        // No guess: the line stays not understood, the causes are only listed.
        assert!(a.problems.is_empty(), "{:?}", a.problems);
        assert_eq!(a.not_understood_total, 1);
        let listed: Vec<&str> = a.candidates.iter().map(|p| p.category).collect();
        assert_eq!(
            listed,
            [
                "driver_cuda_mismatch",
                "library_bug",
                "nccl_version_mismatch"
            ]
        );
        assert!(render::summary(&a).contains("possible causes: driver_cuda_mismatch"));
        // Beside a cause a rule names, they are not listed.
        let a = run(format!("{bare}torch.OutOfMemoryError: CUDA out of memory.\n").as_bytes());
        let rules: Vec<&str> = a.problems.iter().map(|p| p.rule.as_str()).collect();
        assert_eq!(rules, ["cuda-oom"]);
        assert!(a.candidates.is_empty(), "{:?}", a.candidates);
        // Nor where nothing failed.
        let a = run(b"h:1:1 [0] NCCL INFO NCCL version 2.21.5+cuda12.4\n");
        assert!(a.problems.is_empty() && a.candidates.is_empty());
        // Nor one alone: a list of one reads as the answer.
        let one = |categories: &[&str]| {
            let text: String = categories
                .iter()
                .enumerate()
                .map(|(i, c)| {
                    format!(
                        "[[rule]]\nid = \"c{i}\"\ncategory = \"{c}\"\nnode_config = false\ncandidate = true\nany = [\"wrapped\"]\ncause = \"c\"\nfix = \"f\"\n"
                    )
                })
                .collect();
            let rules = rules::parse("site.toml", &text).unwrap();
            let a = analyse(&mut io::Cursor::new(b"Error: wrapped\n".to_vec()), &rules).unwrap();
            assert_eq!(a.not_understood_total, 1);
            a.candidates.len()
        };
        assert_eq!(one(&["library_bug"]), 0);
        assert_eq!(one(&["library_bug", "launcher_misconfig"]), 2);
    }

    #[test]
    fn a_fallback_stands_only_when_nothing_else_explains_the_failure() {
        let bare =
            "RuntimeError: NCCL error in: x.cpp:1, unhandled system error, NCCL version 2.7.8\n";
        let a = run(bare.as_bytes());
        assert_eq!(a.problems[0].rule, "bare-system-error", "{:?}", a.problems);
        assert_eq!(a.not_understood_total, 0);
        // NCCL's own messages around it say what failed, not the usual cause (the wrapper is
        // their echo).
        let a = run(format!("h:1:1 [0] NCCL INFO misc/socket.cc:567 -> 2\n{bare}").as_bytes());
        assert!(a.problems.is_empty(), "{:?}", a.problems);
        assert_eq!(a.not_understood_total, 1);
        assert_eq!(a.not_understood[0].line, 1);
        // A cause a rule names comes instead of it.
        let a = run(format!("{bare}torch.OutOfMemoryError: CUDA out of memory.\n").as_bytes());
        let rules: Vec<&str> = a.problems.iter().map(|p| p.rule.as_str()).collect();
        assert_eq!(rules, ["cuda-oom"]);
        // An error line no rule explains may be the cause: both are shown, no guess.
        let a = run(format!("{bare}FrobnicatorError: exploded\n").as_bytes());
        assert!(a.problems.is_empty(), "{:?}", a.problems);
        assert_eq!(a.not_understood_total, 2);
        assert_eq!(a.not_understood[0].line, 1);
        // A failed connection beside it points at the network, not at /dev/shm (the wrapper
        // is its echo), and that echo alone explains nothing: shown as not understood.
        let a = run(format!("{bare}ConnectionResetError: Connection reset by peer\n").as_bytes());
        assert!(a.problems.is_empty(), "{:?}", a.problems);
        assert_eq!(a.not_understood_total, 1);
        assert_eq!(a.not_understood[0].line, 2);
        // An echo (a peer closed) leaves the invalid-usage fallback standing, ahead of it: the
        // rank with the bad device mapping failed, its peers saw it go.
        let usage = "RuntimeError: NCCL error in: x.cpp:1, invalid usage, NCCL version 2.7.8\n";
        let a = run(
            format!("{usage}h:1:1 [0] NCCL WARN Call to recv failed : Broken pipe\n").as_bytes(),
        );
        let rules: Vec<&str> = a.problems.iter().map(|p| p.rule.as_str()).collect();
        assert_eq!(rules, ["bare-invalid-usage", "peer-closed"]);
    }

    #[test]
    fn root_causes_rank_above_their_symptoms() {
        let a = run(b"[rank0]:[E ProcessGroupNCCL.cpp:607] [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=5, OpType=ALLREDUCE) ran for 600013 milliseconds before timing out.\nh:1:1 [0] misc/shmutils.cc:71 NCCL WARN Error: failed to extend /dev/shm/nccl-x to 9637892 bytes\n");
        assert_eq!(a.problems[0].category, "shm_too_small");
        assert_eq!(a.problems[1].category, "straggler_or_dead_rank_timeout");
    }

    #[test]
    fn an_unless_line_vetoes_only_nearby_lines_of_its_own_rank() {
        // Rank A (pid 1) cannot open /dev/shm; rank B (pid 2), later, finds it full: the
        // permission problem must not hide B's full /dev/shm.
        let mut log = String::new();
        log.push_str("h:1:1 [0] NCCL WARN Error while creating shared memory segment /dev/shm/nccl-a (size 9637888)\n");
        log.push_str("h:1:1 [0] NCCL WARN shm_open failed : Permission denied\n");
        for i in 0..20 {
            log.push_str(&format!(
                "h:2:2 [1] NCCL INFO Channel {i:02} : 1[1] -> 0[0] via SHM\n"
            ));
        }
        log.push_str(
            "h:2:2 [1] NCCL WARN Error: failed to extend /dev/shm/nccl-b to 9637892 bytes\n",
        );
        let a = run(log.as_bytes());
        let categories: Vec<&str> = a.problems.iter().map(|p| p.category).collect();
        assert_eq!(
            categories,
            ["shm_permission", "shm_too_small"],
            "{:?}",
            a.problems
        );
        let full = &a.problems[1];
        assert_eq!(full.matched_lines, 1);
        assert_eq!(full.evidence[0].line, 23);
        // The same rank's segment error beside its permission error is that error's echo.
        let a = run(&log.as_bytes()[..log.find("h:2:2").unwrap()]);
        let categories: Vec<&str> = a.problems.iter().map(|p| p.category).collect();
        assert_eq!(categories, ["shm_permission"]);
    }

    #[test]
    fn an_unless_of_reach_zero_vetoes_only_its_own_line() {
        // c10d's IPv6 lookup of a name with only IPv4 addresses is no resolution failure;
        // the IPv4 lookup failing on the next line is.
        let a = run(b"[W socket.cpp:601] [c10d] The IPv6 network addresses of (node1, 29500) cannot be retrieved (gai error: -5 - No address associated with hostname).\n");
        assert!(a.problems.is_empty(), "{:?}", a.problems);
        let a = run(b"[W socket.cpp:601] [c10d] The IPv6 network addresses of (node1, 29500) cannot be retrieved (gai error: -5 - No address associated with hostname).\n[W socket.cpp:601] [c10d] The IPv4 network addresses of (node1, 29500) cannot be retrieved (gai error: -2 - Name or service not known).\n");
        assert_eq!(a.problems[0].category, "hostname_resolution");
        assert_eq!(a.problems[0].rule, "name-resolution");
        assert_eq!(a.problems[0].evidence[0].line, 2);
    }

    #[test]
    fn ranks_from_launcher_torch_and_nccl_prefixes() {
        let r = |t: &str| rank_of(t);
        assert_eq!(
            r("3: host:12:13 [0] NCCL WARN x"),
            Some(Rank::Task("3".into()))
        );
        assert_eq!(
            r("[rank5]: torch.distributed.DistBackendError"),
            Some(Rank::Torch("rank5".into()))
        );
        assert_eq!(
            r(
                "[2026-11-25 13:48:11] vm:9730:9731 [0] misc/cudawrap.cc:329 (initOnceFunc) NCCL WARN x"
            ),
            Some(Rank::Process("vm:9730".into()))
        );
        assert_eq!(
            r("[trainer0|0]:twshared1016:1958:1958 [3] NCCL INFO x"),
            Some(Rank::Process("twshared1016:1958".into()))
        );
        assert_eq!(r("RuntimeError: NCCL error"), None);
        assert_eq!(r("a:b:c NCCL WARN"), None);
        assert!(same_rank(&None, &Some(Rank::Task("1".into()))));
        assert!(same_rank(
            &Some(Rank::Torch("rank1".into())),
            &Some(Rank::Task("2".into()))
        ));
        assert!(!same_rank(
            &Some(Rank::Task("1".into())),
            &Some(Rank::Task("2".into()))
        ));
    }

    #[test]
    fn the_version_and_address_family_rules_fire_on_their_messages() {
        let a = run(b"h:1:1 [0] init.cc:1 NCCL WARN Mismatched NCCL version detected : rank 0 version 21803 rank 1 version 21903\n");
        assert_eq!(a.problems[0].category, "nccl_version_mismatch");
        let a = run(b"h:1:1 [0] NCCL INFO NCCL version 2.18.3+cuda12.2\ng:2:2 [0] NCCL INFO NCCL version 2.19.3+cuda12.2\n");
        assert_eq!(a.problems[0].category, "nccl_version_mismatch");
        // Setting the family is no failure by itself.
        let a = run(b"h:1:1 [0] NCCL INFO NCCL_SOCKET_FAMILY set by environment to AF_INET6\n");
        assert!(a.problems.is_empty(), "{:?}", a.problems);
        let a = run(b"h:1:1 [0] NCCL INFO NCCL_SOCKET_FAMILY set by environment to AF_INET6\nh:1:1 [0] bootstrap.cc:129 NCCL WARN Bootstrap : no socket interface found\n");
        assert_eq!(a.problems[0].category, "ipv6_ipv4_mismatch");
        assert_eq!(a.problems[1].category, "wrong_socket_interface");
    }

    #[test]
    fn a_chosen_loopback_outranks_the_refusals_it_causes() {
        let a = run(b"h:1:1 [0] NCCL INFO Bootstrap : Using lo:127.0.0.1<0>\ng:2:2 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.2<0>\ng:2:2 [0] NCCL WARN Net : Connect to 127.0.0.1<43211> failed : Connection refused\n");
        assert_eq!(a.problems[0].category, "wrong_socket_interface");
        assert_eq!(a.problems[1].category, "firewall_port_blocked");
    }

    #[test]
    fn a_slowdown_never_explains_a_failure() {
        let gdr = "h:1:1 [0] NCCL INFO NET/IB : GPU Direct RDMA Disabled for HCA 0 'mlx5_0' (no module)\n";
        let a = run(gdr.as_bytes());
        assert_eq!(a.problems[0].category, "gpudirect_rdma_missing");
        let a = run(format!("{gdr}h:1:1 [0] foo.cc:1 NCCL WARN Frobnicator exploded\n").as_bytes());
        assert!(a.problems.is_empty(), "{:?}", a.problems);
        assert_eq!(a.not_understood_total, 1);
    }

    #[test]
    fn a_download_that_cannot_reach_the_internet_is_not_the_jobs_network() {
        let a = run(b"requests.exceptions.ConnectionError: HTTPSConnectionPool(host='huggingface.co', port=443): Max retries exceeded with url: /x (Caused by NewConnectionError('Failed to establish a new connection: [Errno -3] Temporary failure in name resolution'))\n");
        assert!(a.problems.is_empty(), "{:?}", a.problems);
        assert_eq!(a.not_understood_total, 1);
    }

    #[test]
    fn error_traces_are_a_failure_not_understood_when_nothing_else_is_there() {
        let a = run(b"h:1:2 [2] NCCL INFO misc/socket.cc:567 -> 2\nh:1:2 [2] NCCL INFO bootstrap.cc:270 -> 2\n");
        assert!(a.problems.is_empty());
        assert_eq!(a.not_understood_total, 2);
    }
}
