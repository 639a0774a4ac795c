//! Logs that stop without an error line: what the output of a run that hung or crawled still
//! shows. Two shapes are read here, each because the threads that established a cause for it
//! agree on one:
//!
//! - CUDA's `p2pBandwidthLatencyTest` measuring GPU peer-to-peer writes slower than copies
//!   through host memory between the same two GPUs: P2P is offered but redirected through
//!   the root complex by PCIe ACS or the IOMMU (`p2p_slower_than_host`);
//! - PyTorch Lightning's `initializing ddp: GLOBAL_RANK: r, MEMBER: m/N` lines that end the
//!   log with fewer ranks than N, or one rank twice, and no `processes registered` line: the
//!   ranks wait at DDP set-up for ranks the launcher never started (`lightning_ranks_missing`).
//!
//! Everything kept is bounded, whatever the log holds.

use std::collections::{BTreeMap, BTreeSet};

use super::Evidence;

/// GPUs per matrix that are compared; rows and columns beyond are skipped.
const MAX_GPUS: usize = 64;

/// The most ranks remembered from Lightning's lines.
const MAX_RANKS: usize = 4096;

/// A P2P write slower than this share of the copy through host memory is a redirected path:
/// on a sound PCIe path P2P is at least as fast as the copy, over NVLink many times faster.
const SLOW_SHARE: f64 = 0.5;

/// Which bandwidth matrix of `p2pBandwidthLatencyTest` a row belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Matrix {
    bidirectional: bool,
    p2p: bool,
}

/// What `p2pBandwidthLatencyTest` measured.
#[derive(Debug, Clone, Default)]
struct P2pTest {
    /// The matrix whose rows the next lines are, and its title line.
    current: Option<(Matrix, Evidence)>,
    /// (bidirectional, from, to) -> GB/s with P2P disabled, and the row's title and line.
    host: BTreeMap<(bool, usize, usize), f64>,
    host_rows: BTreeMap<(bool, usize), [Evidence; 2]>,
    /// The first pair slower with P2P than without: both matrices' titles and rows.
    slow: Option<[Evidence; 4]>,
}

impl P2pTest {
    fn observe(&mut self, line: u64, text: &str) {
        if text.contains("Bandwidth Matrix") || text.contains("Bandwidth (P2P") {
            let matrix = Matrix {
                bidirectional: text.contains("Bidirectional"),
                p2p: text.contains("P2P=Enabled"),
            };
            let title = Evidence {
                line,
                text: text.to_string(),
            };
            self.current = Some((matrix, title))
                .filter(|_| text.contains("P2P=Enabled") || text.contains("P2P=Disabled"));
            return;
        }
        let Some((matrix, title)) = &self.current else {
            return;
        };
        let (matrix, title) = (*matrix, title.clone());
        let mut tokens = text.split_whitespace();
        let Some(first) = tokens.next() else {
            self.current = None;
            return;
        };
        // The column header (`D\D 0 1 2`) precedes the rows.
        if first == "D\\D" {
            return;
        }
        let Ok(from) = first.parse::<usize>() else {
            self.current = None;
            return;
        };
        if from >= MAX_GPUS {
            return;
        }
        let evidence = || Evidence {
            line,
            text: text.to_string(),
        };
        for (to, token) in tokens.take(MAX_GPUS).enumerate() {
            let Ok(value) = token.parse::<f64>() else {
                self.current = None;
                return;
            };
            if to == from || !value.is_finite() {
                continue;
            }
            let key = (matrix.bidirectional, from, to);
            if !matrix.p2p {
                self.host.insert(key, value);
                self.host_rows
                    .entry((matrix.bidirectional, from))
                    .or_insert_with(|| [title.clone(), evidence()]);
            } else if self.slow.is_none()
                && let Some(host) = self.host.get(&key)
                && value < host * SLOW_SHARE
                && let Some([host_title, host_row]) =
                    self.host_rows.get(&(matrix.bidirectional, from))
            {
                self.slow = Some([
                    host_title.clone(),
                    host_row.clone(),
                    title.clone(),
                    evidence(),
                ]);
            }
        }
    }
}

/// What Lightning's DDP set-up lines said.
#[derive(Debug, Clone, Default)]
struct LightningInit {
    ranks: BTreeSet<u64>,
    /// The world size the lines name (`MEMBER: 3/8` -> 8); `None` once two disagree.
    world: Option<u64>,
    worlds_differ: bool,
    /// A rank that initialised twice in one run of member lines: two processes took one rank.
    /// A rank seen again after other output is a later attempt (a requeued job), not this.
    duplicate: bool,
    /// The ranks of the current run of consecutive member lines (emptied by any other line
    /// that is not blank).
    block: BTreeSet<u64>,
    /// Rank 0's `All distributed processes registered`: set-up completed.
    registered: bool,
    first: Option<Evidence>,
    last: Option<Evidence>,
    /// The last line that was not blank.
    last_text_line: u64,
}

/// `initializing ddp: GLOBAL_RANK: 1, MEMBER: 2/8` (Lightning 1.x) or `Initializing
/// distributed: GLOBAL_RANK: 1, MEMBER: 2/8` (2.x) -> (1, 8).
fn member_of(text: &str) -> Option<(u64, u64)> {
    let at = text.find("GLOBAL_RANK: ")?;
    let rest = &text[at + "GLOBAL_RANK: ".len()..];
    let rank: String = rest.chars().take_while(char::is_ascii_digit).collect();
    let member = &rest[rest.find("MEMBER: ")? + "MEMBER: ".len()..];
    let (_, world) = member.split_once('/')?;
    let world: String = world.chars().take_while(char::is_ascii_digit).collect();
    Some((rank.parse().ok()?, world.parse().ok()?))
}

impl LightningInit {
    fn observe(&mut self, line: u64, text: &str) {
        if text.trim().is_empty() {
            return;
        }
        self.last_text_line = line;
        if text.contains("processes registered") {
            self.registered = true;
        }
        let Some((rank, world)) = member_of(text) else {
            self.block.clear();
            return;
        };
        match self.world {
            None if !self.worlds_differ => self.world = Some(world),
            Some(w) if w != world => {
                self.world = None;
                self.worlds_differ = true;
            }
            _ => {}
        }
        if self.block.contains(&rank) {
            self.duplicate = true;
        } else if self.block.len() < MAX_RANKS {
            self.block.insert(rank);
        }
        if self.ranks.len() < MAX_RANKS {
            self.ranks.insert(rank);
        }
        let evidence = Evidence {
            line,
            text: text.to_string(),
        };
        if self.first.is_none() {
            self.first = Some(evidence.clone());
        }
        self.last = Some(evidence);
    }

    /// The first and last member lines when the log stops at them with ranks missing, or
    /// shows a rank twice.
    fn stuck(&self) -> Option<Vec<Evidence>> {
        let (first, last) = (self.first.as_ref()?, self.last.as_ref()?);
        let world = self.world?;
        let missing = (self.ranks.len() as u64) < world && self.ranks.len() < MAX_RANKS;
        let ends_here = last.line == self.last_text_line;
        // A rank started twice is the launcher's mistake wherever the log goes on (a traceback
        // cut short, the ranks' own errors); ranks missing, only where it stops there.
        (!self.registered && ((ends_here && missing) || self.duplicate)).then(|| {
            let mut lines = vec![first.clone()];
            if last.line != first.line {
                lines.push(last.clone());
            }
            lines
        })
    }
}

/// What a log that stops without an error line shows.
#[derive(Debug, Clone, Default)]
pub struct Hangs {
    p2p: P2pTest,
    lightning: LightningInit,
}

impl Hangs {
    /// Takes in one (already cleaned) line, any line of the log.
    pub fn observe(&mut self, line: u64, text: &str) {
        self.p2p.observe(line, text);
        self.lightning.observe(line, text);
    }

    /// The named facts that hold, with their evidence lines.
    pub fn conclude(&self, evidence: &mut BTreeMap<&'static str, Vec<Evidence>>) {
        if let Some(rows) = &self.p2p.slow {
            evidence.insert("p2p_slower_than_host", rows.to_vec());
        }
        if let Some(lines) = self.lightning.stuck() {
            evidence.insert("lightning_ranks_missing", lines);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(lines: &[&str]) -> BTreeMap<&'static str, Vec<Evidence>> {
        let mut hangs = Hangs::default();
        for (n, l) in lines.iter().enumerate() {
            hangs.observe(n as u64 + 1, l);
        }
        let mut out = BTreeMap::new();
        hangs.conclude(&mut out);
        out
    }

    fn lines(facts: &BTreeMap<&'static str, Vec<Evidence>>, fact: &str) -> Vec<u64> {
        facts
            .get(fact)
            .map(|l| l.iter().map(|e| e.line).collect())
            .unwrap_or_default()
    }

    const HOST: &str = "Unidirectional P2P=Disabled Bandwidth Matrix (GB/s)";
    const P2P: &str = "Unidirectional P2P=Enabled Bandwidth (P2P Writes) Matrix (GB/s)";
    const HEAD: &str = "   D\\D     0      1";

    #[test]
    fn p2p_writes_slower_than_copies_through_the_host() {
        let slow = [
            HOST,
            HEAD,
            "     0 673.20  13.15",
            "     1  12.99 673.20",
            P2P,
            HEAD,
            "     0 673.49   2.60",
            "     1   2.12 672.33",
        ];
        assert_eq!(lines(&facts(&slow), "p2p_slower_than_host"), [1, 3, 5, 7]);
        // NVLink, or a sound PCIe path: P2P as fast as the copy or faster.
        for fast in ["     0 673.49  12.10", "     0 673.49  96.80"] {
            let mut log = slow;
            log[6] = fast;
            log[7] = "     1  12.50 672.33";
            assert!(facts(&log).is_empty(), "{fast}");
        }
        // Only the same matrix kind is compared, and only after the host copy was measured.
        let mut bidirectional = slow;
        bidirectional[4] = "Bidirectional P2P=Enabled Bandwidth Matrix (GB/s)";
        assert!(facts(&bidirectional).is_empty());
        let reversed = [
            slow[4], slow[5], slow[6], slow[7], slow[0], slow[1], slow[2],
        ];
        assert!(facts(&reversed).is_empty());
        // Latency matrices, and rows that are not numbers, end a matrix.
        let latency = [
            HOST,
            HEAD,
            "     0 673.20  13.15",
            "P2P=Enabled Latency (P2P Writes) Matrix (us)",
            "     0   1.50   2.60",
        ];
        assert!(facts(&latency).is_empty());
        let broken = [HOST, "     0 673.20  x", P2P, "     0 673.49   2.60"];
        assert!(facts(&broken).is_empty());
    }

    #[test]
    fn matrices_larger_than_kept_cost_nothing() {
        let row: String = (0..10_000).map(|i| format!(" {i}.0")).collect();
        let log = [HOST.to_string(), format!("0{row}"), format!("100000{row}")];
        let log: Vec<&str> = log.iter().map(String::as_str).collect();
        let mut hangs = Hangs::default();
        for (n, l) in log.iter().enumerate() {
            hangs.observe(n as u64 + 1, l);
        }
        assert_eq!(hangs.p2p.host.len(), MAX_GPUS - 1);
    }

    fn member(rank: u64, world: u64) -> String {
        format!(
            "initializing ddp: GLOBAL_RANK: {rank}, MEMBER: {}/{world}",
            rank + 1
        )
    }

    #[test]
    fn lightning_stopping_at_ddp_set_up_with_ranks_missing_or_doubled() {
        let half: Vec<String> = (0..4).map(|r| member(r, 8)).collect();
        let half: Vec<&str> = half.iter().map(String::as_str).collect();
        assert_eq!(lines(&facts(&half), "lightning_ranks_missing"), [1, 4]);
        let mut trailing_blank = half.clone();
        trailing_blank.push("  ");
        assert_eq!(
            lines(&facts(&trailing_blank), "lightning_ranks_missing"),
            [1, 4]
        );
        let doubled: Vec<String> = [0, 1, 0, 1].iter().map(|r| member(*r, 4)).collect();
        let doubled: Vec<&str> = doubled.iter().map(String::as_str).collect();
        assert_eq!(lines(&facts(&doubled), "lightning_ranks_missing"), [1, 4]);
        // A rank twice stays the launcher's mistake when the log goes on.
        let mut doubled_then_failed = doubled.clone();
        doubled_then_failed.push("Traceback (most recent call last):");
        assert_eq!(
            lines(&facts(&doubled_then_failed), "lightning_ranks_missing"),
            [1, 4]
        );
        // The same ranks again after other output: a later attempt (a requeued job).
        let (two, three) = (member(2, 4), member(3, 4));
        let requeued = [
            two.as_str(),
            three.as_str(),
            "Epoch 3: 40%",
            "slurmstepd: error: *** JOB 7 CANCELLED DUE TO PREEMPTION ***",
            two.as_str(),
            three.as_str(),
            "Epoch 3: 41%",
        ];
        assert!(facts(&requeued).is_empty());
        let v2 = "Initializing distributed: GLOBAL_RANK: 0, MEMBER: 1/2";
        assert_eq!(lines(&facts(&[v2]), "lightning_ranks_missing"), [1]);
        // Every rank came, set-up completed, or the run went on: no hang at set-up.
        let all: Vec<String> = (0..4).map(|r| member(r, 4)).collect();
        let all: Vec<&str> = all.iter().map(String::as_str).collect();
        assert!(facts(&all).is_empty());
        let mut registered = half.clone();
        registered.insert(
            0,
            "All distributed processes registered. Starting with 8 processes",
        );
        assert!(facts(&registered).is_empty());
        let mut went_on = half.clone();
        went_on.push("Epoch 0: 100%");
        assert!(facts(&went_on).is_empty());
        // Two runs of different sizes in one log: which rank belongs to which is unknown.
        let mixed = [member(0, 8), member(0, 2), member(1, 8)];
        let mixed: Vec<&str> = mixed.iter().map(String::as_str).collect();
        assert!(facts(&mixed).is_empty());
        for odd in [
            "GLOBAL_RANK: x, MEMBER: 1/8",
            "GLOBAL_RANK: 1, MEMBER: 2",
            "GLOBAL_RANK: 1, MEMBER: 2/",
            "GLOBAL_RANK: 99999999999999999999999, MEMBER: 1/8",
        ] {
            assert_eq!(member_of(odd), None, "{odd}");
        }
    }
}
