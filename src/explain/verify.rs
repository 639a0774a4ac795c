//! `explain --check`: the checks each problem names, run on this node (or `--root`), and
//! whether what they find confirms or refutes the problem here.

use serde::Serialize;

use super::Problem;
use super::rules::check_matches;
use crate::finding::{Finding, Status};

/// What the node says about one problem.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// A named check fails or warns here: the node has the cause.
    Confirmed,
    /// Every named check that ran passes: the cause is not on this node.
    Refuted,
    /// No check applies (user code, launcher) or none could run here.
    Unknown,
}

/// One check's finding as it bears on a problem.
#[derive(Debug, Clone, Serialize)]
pub struct Seen {
    pub id: String,
    /// Serialised as its name (`pass`, `skip`, ...).
    pub status: Status,
    pub actual: String,
    pub expected: String,
}

/// The verdict on one problem and the findings behind it.
#[derive(Debug, Clone, Serialize)]
pub struct Check {
    pub verdict: Verdict,
    /// The profile the checks were judged against (the node's default).
    pub profile: String,
    pub findings: Vec<Seen>,
}

/// The node's word on each problem and each possible cause, in the analysis's order.
#[derive(Debug, Clone)]
pub struct Verdicts {
    /// One per [`super::Analysis::problems`], in its order.
    pub problems: Vec<Check>,
    /// One per [`super::Analysis::candidates`], in its order.
    pub candidates: Vec<Check>,
}

/// Judges `problem` by the audit `findings` of this node.
pub fn judge(problem: &Problem, findings: &[Finding], profile: &str) -> Check {
    let clean = |s: &str| super::clean(s.as_bytes());
    let seen: Vec<Seen> = findings
        .iter()
        .filter(|f| problem.checks.iter().any(|c| check_matches(c, &f.id)))
        .map(|f| Seen {
            id: clean(&f.id),
            status: f.status,
            actual: clean(&f.actual),
            expected: clean(&f.expected),
        })
        .collect();
    let ran: Vec<&Finding> = findings
        .iter()
        .filter(|f| problem.checks.iter().any(|c| check_matches(c, &f.id)))
        .filter(|f| matches!(f.status, Status::Pass | Status::Warn | Status::Fail))
        .collect();
    let verdict = if ran
        .iter()
        .any(|f| matches!(f.status, Status::Warn | Status::Fail))
    {
        Verdict::Confirmed
    } else if ran.is_empty() {
        Verdict::Unknown
    } else {
        Verdict::Refuted
    };
    Check {
        verdict,
        profile: super::clean(profile.as_bytes()),
        findings: seen,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::finding::{Area, Check as C};

    fn problem(checks: &[&str]) -> Problem {
        Problem {
            category: "shm_too_small",
            node_config: true,
            cause: String::new(),
            fix: String::new(),
            evidence: Vec::new(),
            checks: checks.iter().map(|s| s.to_string()).collect(),
            rule: "r".into(),
            matched_lines: 1,
            sources: Vec::new(),
            priority: 1,
            kind: crate::explain::rules::Kind::Cause,
        }
    }

    #[test]
    fn verdicts() {
        let size = C::new("dev_shm.size", Area::Limits);
        let fail = vec![size.fail("64 MiB", "mount")];
        let pass = vec![size.pass("8 GiB")];
        let skip = vec![size.skip("image")];
        assert_eq!(
            judge(&problem(&["dev_shm.size"]), &fail, "p").verdict,
            Verdict::Confirmed
        );
        assert_eq!(
            judge(&problem(&["dev_shm.size"]), &pass, "p").verdict,
            Verdict::Refuted
        );
        assert_eq!(
            judge(&problem(&["dev_shm.size"]), &skip, "p").verdict,
            Verdict::Unknown
        );
        assert_eq!(judge(&problem(&[]), &fail, "p").verdict, Verdict::Unknown);
        assert_eq!(
            judge(&problem(&["dev_shm.*"]), &fail, "p").findings[0].actual,
            "64 MiB"
        );
    }
}
