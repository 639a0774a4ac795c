//! How far each process got through NCCL's communicator set-up, from its INFO lines: the
//! network chosen, the rings and trees planned, channels connecting, all connected, init
//! complete. A log that stops without an error line is a hang, and where each process
//! stopped says which step hung (bootstrap and connections: the network between nodes;
//! connecting GPUs of one node: peer-to-peer; after init: a collective).

use std::collections::BTreeMap;

use serde::Serialize;

/// The most processes followed; later ones are counted as seen but not followed.
const MAX_PROCESSES: usize = 4096;

/// The most stalled processes listed.
const MAX_STALLED: usize = 8;

/// A step of communicator set-up, in the order NCCL takes them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Step {
    /// NCCL printed something for the process (its version, bootstrap interface).
    Started,
    /// The network transport is chosen (`Using network IB`, `NET/Socket : Using`).
    Network,
    /// Rings and trees are planned (`Channel 00/04 :`, `Trees [0]`, `Pattern 4`).
    Planned,
    /// Channels are being connected (`Channel 00/0 : 0[0] -> 1[1] via P2P/IPC`).
    Connecting,
    /// Every ring or tree is connected (`Connected all rings`).
    Connected,
    /// The communicator is ready (`Init COMPLETE`, `Launch mode`).
    Complete,
}

impl Step {
    /// The step an INFO line (its text after `NCCL INFO`) shows, if any.
    fn of(body: &str) -> Step {
        let has = |s: &str| body.contains(s);
        if has("Init COMPLETE") || has("Launch mode") {
            Step::Complete
        } else if has("Connected all ") || has("Connected NVLS") {
            Step::Connected
        } else if has(" via ") {
            Step::Connecting
        } else if has("Trees [")
            || body.trim_start().starts_with("Pattern ")
            || has("threadThresholds")
            || is_ring_plan(body)
        {
            Step::Planned
        } else if has("Using network ") || has("NET/IB : Using") || has("NET/Socket : Using") {
            Step::Network
        } else {
            Step::Started
        }
    }

    pub fn describe(self) -> &'static str {
        match self {
            Step::Started => "started (bootstrap)",
            Step::Network => "network chosen",
            Step::Planned => "rings and trees planned",
            Step::Connecting => "connecting channels",
            Step::Connected => "all channels connected",
            Step::Complete => "init complete",
        }
    }
}

/// `Channel 00/04 :    0   1   2   3` or `Ring 00 : 0 1 2 3`: the ring order, before any
/// connection (those name a transport, ` via `).
fn is_ring_plan(body: &str) -> bool {
    let body = body.trim_start();
    let Some(rest) = body
        .strip_prefix("Channel ")
        .or_else(|| body.strip_prefix("Ring "))
    else {
        return false;
    };
    rest.split_once(" : ")
        .is_some_and(|(_, order)| order.split_whitespace().all(|t| t.parse::<u32>().is_ok()))
}

/// Where one process stopped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Stalled {
    /// `host:pid` from NCCL's line prefix.
    pub process: String,
    pub step: Step,
    /// The last NCCL line of the process.
    pub line: u64,
}

/// How far the processes got.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Progress {
    /// Processes whose NCCL lines carry a `host:pid:tid` prefix.
    pub processes: u64,
    /// Of those, how many completed communicator init.
    pub complete: u64,
    /// Processes that never completed init: the furthest step each reached and its last line
    /// (the first few, furthest behind first).
    pub stalled: Vec<Stalled>,
    /// Processes seen beyond those followed.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub truncated: bool,
    #[serde(skip)]
    seen: BTreeMap<String, (Step, u64)>,
}

impl Progress {
    /// Takes in an INFO line of process `process` (`host:pid`); `body` follows `NCCL INFO`.
    pub fn observe(&mut self, line: u64, process: &str, body: &str) {
        let step = Step::of(body);
        if let Some((furthest, last)) = self.seen.get_mut(process) {
            *furthest = (*furthest).max(step);
            *last = line;
        } else if self.seen.len() < MAX_PROCESSES {
            self.seen.insert(process.to_string(), (step, line));
        } else {
            self.truncated = true;
        }
    }

    /// Sums up the processes followed.
    pub fn conclude(&mut self) {
        self.processes = self.seen.len() as u64;
        self.complete = self
            .seen
            .values()
            .filter(|(step, _)| *step == Step::Complete)
            .count() as u64;
        let mut stalled: Vec<Stalled> = self
            .seen
            .iter()
            .filter(|(_, (step, _))| *step != Step::Complete)
            .map(|(process, (step, line))| Stalled {
                process: process.clone(),
                step: *step,
                line: *line,
            })
            .collect();
        stalled.sort_by_key(|s| (s.step, s.line));
        stalled.truncate(MAX_STALLED);
        self.stalled = stalled;
    }

    /// One line for people: how many completed init, and where the others stopped.
    pub fn summary(&self) -> Option<String> {
        if self.processes == 0 {
            return None;
        }
        let all = if self.truncated {
            format!("{}+", self.processes)
        } else {
            self.processes.to_string()
        };
        let Some(behind) = self.stalled.first() else {
            return Some(format!("init complete on all {all} processes seen"));
        };
        Some(format!(
            "init complete on {} of {all} processes; furthest behind: {} at \"{}\" (its last NCCL line: {})",
            self.complete,
            behind.process,
            behind.step.describe(),
            behind.line
        ))
    }
}

impl Progress {
    /// For a log with no failure in it: where a hang would have been, if the job hung.
    pub fn hang_hint(&self) -> Option<String> {
        let behind = self.stalled.first()?;
        let look = match behind.step {
            Step::Started | Step::Network => {
                "bootstrap and the network between the ranks (a firewall, the interface NCCL chose: `gputune preflight` checks every pair the way the job runs)"
            }
            Step::Planned | Step::Connecting => {
                "connecting channels (GPU peer-to-peer within a node: PCIe ACS and the IOMMU; NIC connections between nodes)"
            }
            Step::Connected | Step::Complete => {
                "the end of init or the first collective (a rank that stopped, or GPU peer-to-peer that connects but never delivers: PCIe ACS and the IOMMU)"
            }
        };
        Some(format!(
            "NCCL never reported init complete for {} of {} processes: if the job hung, it hung at \"{}\"; look at {look}.",
            self.processes - self.complete,
            self.processes,
            behind.step.describe()
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_in_the_order_nccl_takes_them() {
        for (body, step) in [
            (" NCCL version 2.21.5+cuda12.4", Step::Started),
            (" Bootstrap : Using eth0:10.0.0.1<0>", Step::Started),
            (" NET/Socket : Using [0]eth0:10.0.0.1<0>", Step::Network),
            (" Using network IB", Step::Network),
            (" Channel 00/02 :    0   1", Step::Planned),
            (" Ring 00 : 0 1", Step::Planned),
            (" Trees [0] 1/-1/-1->0->-1", Step::Planned),
            (
                " Pattern 4, crossNic 0, nChannels 2, bw 24.0/24.0, type PHB/PIX, sameChannels 1",
                Step::Planned,
            ),
            (
                " threadThresholds 8/8/64 | 16/8/64 | 512 | 512",
                Step::Planned,
            ),
            (
                " Channel 00/0 : 0[0] -> 1[1] via P2P/IPC/read",
                Step::Connecting,
            ),
            (" Ring 00 : 3 -> 4 [receive] via NET/IB/0", Step::Connecting),
            (" Connected all rings", Step::Connected),
            (" Connected NVLS", Step::Connected),
            (
                " comm 0x1 rank 0 nranks 2 cudaDev 0 busId 47000 - Init COMPLETE",
                Step::Complete,
            ),
            (" Launch mode Parallel", Step::Complete),
        ] {
            assert_eq!(Step::of(body), step, "{body}");
        }
    }

    #[test]
    fn the_process_furthest_behind_is_named() {
        let mut p = Progress::default();
        p.observe(1, "a:1", " Bootstrap : Using eth0:10.0.0.1<0>");
        p.observe(2, "b:2", " Bootstrap : Using eth0:10.0.0.2<0>");
        p.observe(3, "a:1", " Channel 00/0 : 0[0] -> 1[1] via NET/Socket/0");
        p.observe(4, "a:1", " Connected all rings");
        p.observe(5, "b:2", " Using network Socket");
        p.observe(6, "c:3", " Init COMPLETE");
        // A later line of an earlier step does not move a process back.
        p.observe(7, "a:1", " NET/Plugin: No plugin found");
        p.conclude();
        assert_eq!((p.processes, p.complete), (3, 1));
        let stalled: Vec<(&str, Step, u64)> = p
            .stalled
            .iter()
            .map(|s| (s.process.as_str(), s.step, s.line))
            .collect();
        assert_eq!(
            stalled,
            [("b:2", Step::Network, 5), ("a:1", Step::Connected, 7)]
        );
        assert_eq!(
            p.summary().as_deref(),
            Some(
                "init complete on 1 of 3 processes; furthest behind: b:2 at \"network chosen\" (its last NCCL line: 5)"
            )
        );
        let hint = p.hang_hint().unwrap();
        assert!(
            hint.starts_with("NCCL never reported init complete for 2 of 3 processes: if the job hung, it hung at \"network chosen\"; look at bootstrap"),
            "{hint}"
        );
    }

    #[test]
    fn all_complete_and_bounded() {
        let mut p = Progress::default();
        assert_eq!(p.summary(), None);
        for i in 0..MAX_PROCESSES + 10 {
            p.observe(i as u64, &format!("h:{i}"), " Init COMPLETE");
        }
        p.conclude();
        assert!(p.truncated);
        assert_eq!(p.hang_hint(), None);
        assert_eq!(
            p.summary().as_deref(),
            Some("init complete on all 4096+ processes seen")
        );
    }
}
