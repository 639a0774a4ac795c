//! Error lines that only rules with a condition (`also_any`: an NCCL version, a line from
//! Lightning) would explain. Whether such a rule holds is known only at the end of the log,
//! so its lines wait here: explained if one of their rules' conditions held, otherwise shown
//! as not understood, like any error line no rule explains.

use std::collections::BTreeMap;

use super::Evidence;

/// Lines kept per group, as many as the analysis shows (the rest are only counted).
const MAX_KEPT: usize = super::MAX_NOT_UNDERSTOOD;

/// The most groups remembered. Each distinct set of conditional rules a line matches is a
/// group, so site rules could make many; past this, a line with a new set is not understood
/// at once (it is shown, never silently explained), which bounds what a hostile log costs.
const MAX_GROUPS: usize = 1024;

/// Some lines: how many, and the first of them.
#[derive(Debug, Default)]
pub(crate) struct Lines {
    pub total: u64,
    pub first: Vec<Evidence>,
}

impl Lines {
    pub fn add(&mut self, line: u64, text: impl FnOnce() -> String) {
        self.total += 1;
        if self.first.len() < MAX_KEPT {
            self.first.push(Evidence { line, text: text() });
        }
    }

    pub fn append(&mut self, other: Lines) {
        self.total += other.total;
        self.first.extend(other.first);
    }
}

/// The waiting lines, grouped by the rules (their indexes) that would explain them: a log's
/// lines fall into a handful of groups, so a log of any length keeps little.
#[derive(Debug, Default)]
pub(crate) struct Unsettled {
    groups: BTreeMap<Vec<usize>, (Lines, Lines)>,
    /// Lines past [`MAX_GROUPS`]: not understood whatever holds.
    overflow: (Lines, Lines),
}

impl Unsettled {
    /// Line `line`, which rules `rules` alone match: a wrapper (it says something failed, not
    /// what) or a failure.
    pub fn add(
        &mut self,
        rules: &[usize],
        wrapper: bool,
        line: u64,
        text: impl FnOnce() -> String,
    ) {
        let (failures, wrappers) = if self.groups.contains_key(rules) {
            self.groups
                .get_mut(rules)
                .expect("the group was just found")
        } else if self.groups.len() < MAX_GROUPS {
            self.groups.entry(rules.to_vec()).or_default()
        } else {
            &mut self.overflow
        };
        if wrapper {
            wrappers.add(line, text);
        } else {
            failures.add(line, text);
        }
    }

    /// The lines none of whose rules held (`held[i]`: rule `i`'s condition was met), as
    /// (failures, wrappers).
    pub fn unexplained(self, held: &[bool]) -> (Lines, Lines) {
        let mut out = self.overflow;
        for (rules, (failures, wrappers)) in self.groups {
            if !rules.iter().any(|&i| held.get(i).copied().unwrap_or(false)) {
                out.0.append(failures);
                out.1.append(wrappers);
            }
        }
        out.0.first.sort_by_key(|e| e.line);
        out.1.first.sort_by_key(|e| e.line);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_stay_unexplained_only_when_none_of_their_rules_held() {
        let mut u = Unsettled::default();
        u.add(&[1], false, 7, || "a".into());
        u.add(&[1, 2], false, 3, || "b".into());
        u.add(&[2], true, 5, || "c".into());
        u.add(&[1], false, 9, || "d".into());
        let (failures, wrappers) = u.unexplained(&[false, false, true]);
        assert_eq!(failures.total, 2);
        let lines: Vec<u64> = failures.first.iter().map(|e| e.line).collect();
        assert_eq!(lines, [7, 9]);
        assert_eq!(wrappers.total, 0);

        let mut u = Unsettled::default();
        u.add(&[2], true, 5, || "c".into());
        let (failures, wrappers) = u.unexplained(&[false, true, false]);
        assert_eq!((failures.total, wrappers.total), (0, 1));
        assert_eq!(wrappers.first[0].text, "c");
    }

    #[test]
    fn past_the_group_limit_a_line_is_not_understood_whatever_holds() {
        let mut u = Unsettled::default();
        for i in 0..MAX_GROUPS {
            u.add(&[i], false, i as u64 + 1, || "kept".into());
        }
        u.add(&[0, 1], false, 5000, || "past the limit".into());
        u.add(&[0], false, 5001, || "an existing group".into());
        let held = vec![true; MAX_GROUPS];
        let (failures, _) = u.unexplained(&held);
        assert_eq!(failures.total, 1);
        assert_eq!(failures.first[0].text, "past the limit");
    }

    #[test]
    fn a_long_log_keeps_only_the_first_lines_but_counts_all() {
        let mut u = Unsettled::default();
        for n in 1..=1000 {
            u.add(&[0], false, n, || format!("line {n}"));
        }
        let (failures, _) = u.unexplained(&[false]);
        assert_eq!(failures.total, 1000);
        assert_eq!(failures.first.len(), MAX_KEPT);
        assert_eq!(failures.first[0].line, 1);
    }
}
