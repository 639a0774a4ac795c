//! Ranks that did not make the same collective call: NCCL's own record of each call
//! (NCCL_DEBUG_SUBSYS=COLL) and PyTorch's watchdog timeouts, compared across processes.
//! Bounded like the other facts: at most [`MAX_CALLS`] calls and [`MAX_CALL_PROCESSES`]
//! processes per call are remembered.

use std::collections::BTreeMap;

use super::Evidence;

/// What the log showed of collective calls, rank by rank.
#[derive(Debug, Default, Clone)]
pub struct Collectives {
    /// Collectives NCCL_DEBUG_SUBSYS=COLL logged, by name, opCount and communicator size:
    /// the first process's arguments, and which processes logged one (see [`Call`]).
    calls: BTreeMap<String, CallSeen>,
    /// PyTorch's watchdog timeouts (`WorkNCCL(SeqNum=5, OpType=ALLREDUCE, ...)`) by sequence
    /// number: see [`WatchdogSeen`].
    watchdog_ops: BTreeMap<u64, WatchdogSeen>,
    /// Whether the log names process group 0 (`[PG 0 (default_pg) Rank 7]`, `[PG ID 0 ...`)
    /// and whether it names another: sequence numbers count per process group, so two ranks'
    /// timeouts at one number are one call only where group 0 is the only group named.
    default_pg_named: bool,
    other_pg_named: bool,
    /// TORCH_DISTRIBUTED_DEBUG=DETAIL's fingerprints of each call, by sequence number: see
    /// [`FingerprintSeen`].
    fingerprints: BTreeMap<u64, FingerprintSeen>,
}

impl Collectives {
    /// Takes in any line of the log (PyTorch's, not only NCCL's): the process group it names
    /// (`[PG 0 (default_pg) Rank 7]`, `[PG ID 1 PG GUID 1 Rank 0]`), a watchdog timeout
    /// (`Watchdog caught collective operation timeout: WorkNCCL(SeqNum=80078,
    /// OpType=BROADCAST`), a ProcessGroupWrapper fingerprint.
    pub fn observe(&mut self, line: u64, text: &str) {
        if text.contains("CollectiveFingerPrint(") {
            self.fingerprint(line, text);
        }
        if let Some(at) = text.find("[PG ") {
            let rest = &text[at + "[PG ".len()..];
            let rest = rest.strip_prefix("ID ").unwrap_or(rest);
            let id: String = rest.chars().take_while(char::is_ascii_digit).collect();
            match id.as_str() {
                "" => {}
                "0" => self.default_pg_named = true,
                _ => self.other_pg_named = true,
            }
        }
        if !text.contains("Watchdog caught collective operation timeout") {
            return;
        }
        let Some(at) = text.find("WorkNCCL(SeqNum=") else {
            return;
        };
        let rest = &text[at + "WorkNCCL(SeqNum=".len()..];
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        let Ok(seq) = digits.parse::<u64>() else {
            return;
        };
        let Some(op_at) = rest.find("OpType=") else {
            return;
        };
        let op: String = rest[op_at + "OpType=".len()..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        if op.is_empty() {
            return;
        }
        let numel = rest.find("NumelIn=").map(|at| {
            rest[at + "NumelIn=".len()..]
                .chars()
                .take_while(char::is_ascii_digit)
                .collect::<String>()
        });
        let evidence = Evidence {
            line,
            text: text.to_string(),
        };
        if let Some(seen) = self.watchdog_ops.get_mut(&seq) {
            let sizes_differ = SAME_SIZE_ON_EVERY_RANK.contains(&op.as_str())
                && matches!((&seen.numel, &numel), (Some(a), Some(b)) if a != b);
            if (seen.op != op || sizes_differ) && seen.differ.is_none() {
                seen.differ = Some(evidence);
            }
        } else if self.watchdog_ops.len() < MAX_CALLS {
            self.watchdog_ops.insert(
                seq,
                WatchdogSeen {
                    op,
                    numel,
                    first: evidence,
                    differ: None,
                },
            );
        }
    }

    /// An NCCL line: `before_nccl` is what precedes `NCCL INFO` (the `host:pid:tid` prefix),
    /// `body` what follows it.
    pub fn observe_nccl(&mut self, line: u64, text: &str, before_nccl: &str, body: &str) {
        if let Some(call) = Call::parse(before_nccl, body) {
            self.call(call, line, text);
        }
    }

    /// One collective call of one process: a second communicator of that size in the same
    /// process at the same opCount makes the key ambiguous, so it is dropped rather than
    /// compared.
    fn call(&mut self, call: Call, line: u64, text: &str) {
        let key = call.key();
        if self.calls.len() >= MAX_CALLS && !self.calls.contains_key(&key) {
            return;
        }
        let seen = self.calls.entry(key).or_insert_with(|| CallSeen {
            args: call.args.map(str::to_string),
            first: Evidence {
                line,
                text: text.to_string(),
            },
            first_process: call.process.to_string(),
            comms: BTreeMap::new(),
            ambiguous: false,
            differ: None,
        });
        match seen.comms.get(call.process) {
            Some(comm) if comm != call.comm => seen.ambiguous = true,
            Some(_) => {}
            None if seen.comms.len() < MAX_CALL_PROCESSES => {
                seen.comms
                    .insert(call.process.to_string(), call.comm.to_string());
            }
            None => {}
        }
        if seen.differ.is_none() && seen.args != call.args && seen.first_process != call.process {
            seen.differ = Some(Evidence {
                line,
                text: text.to_string(),
            });
        }
    }

    /// `[Rank 2] Running collective: CollectiveFingerPrint(SequenceNumber=38, OpType=ALLREDUCE,
    /// TensorShape=[77, 1], TensorDtypes=Float, ...`: PyTorch's ProcessGroupWrapper
    /// (TORCH_DISTRIBUTED_DEBUG=DETAIL) logging each call before it runs. A rank logging two
    /// different fingerprints at one number is in two process groups (each numbers its own
    /// calls, and `[Rank N]` is the rank in that group), so that number is not compared. The
    /// latest [`MAX_CALLS`] numbers are kept: a mismatch is where a job stops.
    fn fingerprint(&mut self, line: u64, text: &str) {
        let Some((rank, seq, call)) = Fingerprint::parse(text) else {
            return;
        };
        let evidence = Evidence {
            line,
            text: text.to_string(),
        };
        if !self.fingerprints.contains_key(&seq) && self.fingerprints.len() >= MAX_CALLS {
            self.fingerprints.pop_first();
        }
        let seen = self
            .fingerprints
            .entry(seq)
            .or_insert_with(|| FingerprintSeen {
                first: evidence.clone(),
                first_call: call.clone(),
                by_rank: BTreeMap::new(),
                ambiguous: false,
                differ: None,
            });
        match seen.by_rank.get(&rank) {
            Some(earlier) => {
                seen.ambiguous |= *earlier != call;
                return;
            }
            None if seen.by_rank.len() < MAX_CALL_PROCESSES => {
                seen.by_rank.insert(rank, call.clone());
            }
            None => {}
        }
        if seen.differ.is_none() && call.differs_from(&seen.first_call) {
            seen.differ = Some(evidence);
        }
    }

    /// `collective_args_differ`, `watchdog_ops_differ` and `collective_fingerprints_differ`,
    /// where they hold.
    pub fn conclude(&self, evidence: &mut BTreeMap<&'static str, Vec<Evidence>>) {
        // Not where a process logged two communicators of one size at that opCount: then the
        // lines that differ may belong to different communicators.
        let calls = self.calls.values().filter(|c| !c.ambiguous);
        if let Some(lines) = earliest_differing(calls.map(|c| (&c.first, &c.differ))) {
            evidence.insert("collective_args_differ", lines);
        }
        // Two ranks timed out in one call of the default group's sequence (the same SeqNum)
        // waiting in different collectives: they did not call the same collective.
        let timeouts = self.watchdog_ops.values().map(|w| (&w.first, &w.differ));
        if self.default_pg_named
            && !self.other_pg_named
            && let Some(lines) = earliest_differing(timeouts)
        {
            evidence.insert("watchdog_ops_differ", lines);
        }
        // Two ranks' fingerprints at one sequence number name different calls; not where the
        // log names a process group other than the default, which numbers its own calls.
        let prints = self.fingerprints.values().filter(|f| !f.ambiguous);
        if !self.other_pg_named
            && let Some(lines) = earliest_differing(prints.map(|f| (&f.first, &f.differ)))
        {
            evidence.insert("collective_fingerprints_differ", lines);
        }
    }
}

/// Collectives whose input has one size on every rank (`NumelIn`): two ranks in one of them
/// at the same sequence number with different sizes did not make the same call. Not
/// all-to-all, gather/scatter or send/recv, whose sizes may differ by rank.
const SAME_SIZE_ON_EVERY_RANK: [&str; 7] = [
    "ALLREDUCE",
    "BROADCAST",
    "REDUCE",
    "ALLGATHER",
    "_ALLGATHER_BASE",
    "REDUCE_SCATTER",
    "_REDUCE_SCATTER_BASE",
];

/// The first watchdog timeout seen at one sequence number, and the first at that number
/// waiting in another collective, or in the same one with another size.
#[derive(Debug, Clone)]
struct WatchdogSeen {
    op: String,
    /// `NumelIn`, where the line gives it.
    numel: Option<String>,
    first: Evidence,
    differ: Option<Evidence>,
}

/// One call as ProcessGroupWrapper fingerprints it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Fingerprint {
    op: String,
    shape: Option<String>,
}

impl Fingerprint {
    /// `[Rank 2] Running collective: CollectiveFingerPrint(SequenceNumber=38, OpType=ALLREDUCE,
    /// TensorShape=[77, 1], TensorDtypes=Float, ...` -> (2, 38, the call).
    fn parse(text: &str) -> Option<(u64, u64, Fingerprint)> {
        let rank = integer_after(text, "[Rank ")?;
        let seq = integer_after(text, "SequenceNumber=")?;
        let op_at = text.find("OpType=")?;
        let call = Fingerprint {
            op: text[op_at + "OpType=".len()..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect(),
            shape: text.find("TensorShape=").map(|at| {
                let rest = &text[at + "TensorShape=".len()..];
                rest[..rest.find(", TensorDtypes").unwrap_or(rest.len())].to_string()
            }),
        };
        Some((rank, seq, call))
    }

    /// Another collective, or the same one with another shape where every rank's is the same.
    fn differs_from(&self, other: &Fingerprint) -> bool {
        self.op != other.op
            || (SAME_SIZE_ON_EVERY_RANK.contains(&self.op.as_str()) && self.shape != other.shape)
    }
}

/// The fingerprints logged at one sequence number: the first, each rank's, and the first of
/// another rank that names another call.
#[derive(Debug, Clone)]
struct FingerprintSeen {
    first: Evidence,
    first_call: Fingerprint,
    by_rank: BTreeMap<u64, Fingerprint>,
    /// Some rank logged two different fingerprints at this number (two process groups).
    ambiguous: bool,
    differ: Option<Evidence>,
}

/// Of calls seen (each its first line and the first line that differs from it, if any), the
/// earliest that has one: both lines.
fn earliest_differing<'a>(
    calls: impl Iterator<Item = (&'a Evidence, &'a Option<Evidence>)>,
) -> Option<Vec<Evidence>> {
    calls
        .filter_map(|(first, differ)| Some((first, differ.as_ref()?)))
        .min_by_key(|(first, _)| first.line)
        .map(|(first, other)| vec![first.clone(), other.clone()])
}

/// The digits right after `key`, as a number.
fn integer_after(text: &str, key: &str) -> Option<u64> {
    let at = text.find(key)?;
    let digits: String = text[at + key.len()..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
}

/// The most collective calls remembered, and processes per call.
const MAX_CALLS: usize = 1024;
const MAX_CALL_PROCESSES: usize = 64;

#[derive(Debug, Clone)]
struct CallSeen {
    /// count, datatype, op and root of the first line seen.
    args: [String; 4],
    first: Evidence,
    first_process: String,
    /// process -> the communicator it logged this call on.
    comms: BTreeMap<String, String>,
    ambiguous: bool,
    /// The first line of another process whose arguments differ from `first`'s.
    differ: Option<Evidence>,
}

/// `host:pid:tid [0] NCCL INFO Broadcast: opCount 0 sendbuff 0x.. recvbuff 0x.. count 53
/// datatype 4 op 0 root 0 comm 0x.. [nranks=8] stream 0x..` (NCCL_DEBUG_SUBSYS=COLL).
struct Call<'a> {
    name: &'a str,
    op_count: &'a str,
    /// The communicator's size.
    nranks: &'a str,
    /// count, datatype, op and root.
    args: [&'a str; 4],
    /// `host:pid` of the line's prefix.
    process: &'a str,
    comm: &'a str,
}

impl<'a> Call<'a> {
    fn parse(before_nccl: &'a str, body: &'a str) -> Option<Call<'a>> {
        let (name, rest) = body.trim_start().split_once(": opCount ")?;
        // Send and Recv name their peer as root and may move different sizes per peer.
        if ![
            "AllReduce",
            "Broadcast",
            "Reduce",
            "AllGather",
            "ReduceScatter",
        ]
        .contains(&name)
        {
            return None;
        }
        let mut tokens = rest.split_whitespace();
        let op_count = tokens.next()?;
        let (mut args, mut comm, mut nranks) = ([None; 4], None, None);
        while let Some(token) = tokens.next() {
            let slot = match token {
                "count" => 0,
                "datatype" => 1,
                "op" => 2,
                "root" => 3,
                "comm" => {
                    comm = tokens.next();
                    continue;
                }
                _ => {
                    if let Some(n) = token.strip_prefix("[nranks=") {
                        nranks = Some(n.trim_end_matches(']'));
                    }
                    continue;
                }
            };
            args[slot] = tokens.next();
        }
        let [Some(count), Some(datatype), Some(op), Some(root)] = args else {
            return None;
        };
        // `host:pid:tid`: the process is all but the thread id.
        let process = before_nccl.split_whitespace().rev().find_map(|t| {
            let cut = t.rfind(':')?;
            t[..cut].contains(':').then_some(&t[..cut])
        })?;
        Some(Call {
            name,
            op_count,
            nranks: nranks?,
            args: [count, datatype, op, root],
            process,
            comm: comm?,
        })
    }

    /// Which collective: its name, opCount and communicator size.
    fn key(&self) -> String {
        format!("{} {} {}", self.name, self.op_count, self.nranks)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(lines: &[&str]) -> BTreeMap<&'static str, Vec<Evidence>> {
        let mut collectives = Collectives::default();
        for (n, l) in lines.iter().enumerate() {
            let line = n as u64 + 1;
            collectives.observe(line, l);
            if let Some(at) = l.find("NCCL INFO") {
                collectives.observe_nccl(line, l, &l[..at], &l[at + "NCCL INFO".len()..]);
            }
        }
        let mut evidence = BTreeMap::new();
        collectives.conclude(&mut evidence);
        evidence
    }

    #[test]
    fn one_collective_called_with_different_arguments_on_two_ranks() {
        let call = |pid: u32, comm: &str, count: u32, datatype: u32| {
            format!(
                "h:{pid}:{pid} [0] NCCL INFO Broadcast: opCount 0 sendbuff 0x1 recvbuff 0x1 count {count} datatype {datatype} op 0 root 0 comm {comm} [nranks=2] stream 0x2"
            )
        };
        let same = [call(1, "0xa", 53, 4), call(2, "0xb", 53, 4)];
        let same: Vec<&str> = same.iter().map(String::as_str).collect();
        assert!(!facts(&same).contains_key("collective_args_differ"));
        // One process logging the same call twice on one communicator is still one call.
        let again = [
            call(1, "0xa", 25503912, 6),
            call(1, "0xa", 25503912, 6),
            call(2, "0xb", 53, 4),
        ];
        let again: Vec<&str> = again.iter().map(String::as_str).collect();
        assert!(facts(&again).contains_key("collective_args_differ"));
        let differ = [call(1, "0xa", 25503912, 6), call(2, "0xb", 53, 4)];
        let differ: Vec<&str> = differ.iter().map(String::as_str).collect();
        let f = facts(&differ);
        let lines: Vec<u64> = f["collective_args_differ"].iter().map(|e| e.line).collect();
        assert_eq!(lines, [1, 2]);
        // Two communicators of one size in one process: the lines may be different ones.
        let two_comms = [
            call(1, "0xa", 25503912, 6),
            call(1, "0xc", 53, 4),
            call(2, "0xb", 53, 4),
        ];
        let two_comms: Vec<&str> = two_comms.iter().map(String::as_str).collect();
        assert!(!facts(&two_comms).contains_key("collective_args_differ"));
        // Send and Recv name their peer as root: never compared.
        let sends = [
            call(1, "0xa", 8, 4).replace("Broadcast", "Send"),
            call(2, "0xb", 9, 4).replace("Broadcast", "Send"),
        ];
        let sends: Vec<&str> = sends.iter().map(String::as_str).collect();
        assert!(!facts(&sends).contains_key("collective_args_differ"));
    }

    #[test]
    fn a_coll_line_is_read_only_when_whole() {
        let body = " AllReduce: opCount 3 sendbuff 0x1 recvbuff 0x1 count 8 datatype 7 op 0 root 0 comm 0xa [nranks=2] stream 0x2";
        let call = Call::parse("[1,0]<stdout>:h:12:34 [0]", body).unwrap();
        assert_eq!(call.key(), "AllReduce 3 2");
        assert_eq!(call.args, ["8", "7", "0", "0"]);
        assert_eq!((call.process, call.comm), ("[1,0]<stdout>:h:12", "0xa"));
        for (prefix, body) in [
            ("h:12:34 [0]", body.replace(" count 8", "").as_str()),
            ("h:12:34 [0]", body.replace(" comm 0xa", "").as_str()),
            ("h:12:34 [0]", body.replace(" [nranks=2]", "").as_str()),
            (
                "h:12:34 [0]",
                body.replace(" op 0 root 0", " op 0 root").as_str(),
            ),
            ("no process", body),
            (
                "h:12:34 [0]",
                " Send: opCount 3 count 8 datatype 7 op 0 root 1 comm 0xa [nranks=2]",
            ),
            ("h:12:34 [0]", " AllReduce: opCount"),
            ("h:12:34 [0]", ""),
        ] {
            assert!(Call::parse(prefix, body).is_none(), "{prefix} {body}");
        }
    }

    #[test]
    fn two_ranks_timing_out_in_different_collectives_at_one_seqnum() {
        let timeout = |rank: u32, seq: u32, op: &str| {
            format!(
                "[rank{rank}]:[E816 ProcessGroupNCCL.cpp:607] [Rank {rank}] Watchdog caught \
                 collective operation timeout: WorkNCCL(SeqNum={seq}, OpType={op}, NumelIn=1, \
                 NumelOut=1, Timeout(ms)=600000) ran for 600026 milliseconds before timing out."
            )
        };
        let pg = |id: &str| {
            format!("[rank7]:[E816 ProcessGroupNCCL.cpp:1664] [PG {id} Rank 7] Exception")
        };
        let differ = [
            timeout(7, 8, "BROADCAST"),
            pg("0 (default_pg)"),
            timeout(3, 8, "ALLREDUCE"),
        ];
        let differ: Vec<&str> = differ.iter().map(String::as_str).collect();
        let f = facts(&differ);
        let lines: Vec<u64> = f["watchdog_ops_differ"].iter().map(|e| e.line).collect();
        assert_eq!(lines, [1, 3]);
        let cases = [
            // One collective, or different positions of the sequence: a rank behind.
            [
                timeout(7, 8, "ALLREDUCE"),
                pg("0 (default_pg)"),
                timeout(3, 8, "ALLREDUCE"),
            ],
            [
                timeout(7, 8, "BROADCAST"),
                pg("0 (default_pg)"),
                timeout(3, 9, "ALLREDUCE"),
            ],
            // Another process group numbers its own calls; no group named: cannot tell.
            [
                timeout(7, 8, "BROADCAST"),
                pg("ID 1 PG GUID 1"),
                timeout(3, 8, "ALLREDUCE"),
            ],
            [
                timeout(7, 8, "BROADCAST"),
                String::new(),
                timeout(3, 8, "ALLREDUCE"),
            ],
        ];
        for case in &cases {
            let lines: Vec<&str> = case.iter().map(String::as_str).collect();
            assert!(
                !facts(&lines).contains_key("watchdog_ops_differ"),
                "{lines:?}"
            );
        }
    }

    #[test]
    fn two_ranks_in_one_collective_of_different_sizes_at_one_seqnum() {
        let timeout = |rank: u32, op: &str, numel: u64| {
            format!(
                "[rank{rank}]:[E918 ProcessGroupNCCL.cpp:689] [Rank {rank}] Watchdog caught \
                 collective operation timeout: WorkNCCL(SeqNum=7219, OpType={op}, NumelIn={numel}, \
                 NumelOut={numel}, Timeout(ms)=3000000) ran for 3000097 milliseconds before timing out."
            )
        };
        let pg = "[rank3]:[E918 ProcessGroupNCCL.cpp:2303] [PG ID 0 PG GUID 0(default_pg) Rank 3] failure detected by watchdog";
        let differ = |op: &str, a: u64, b: u64| {
            let lines = [timeout(3, op, a), pg.to_string(), timeout(2, op, b)];
            let lines: Vec<&str> = lines.iter().map(String::as_str).collect();
            facts(&lines).contains_key("watchdog_ops_differ")
        };
        assert!(differ("BROADCAST", 64, 24084544));
        assert!(differ("ALLREDUCE", 1, 2));
        assert!(!differ("BROADCAST", 64, 64));
        // All-to-all and point-to-point sizes differ by rank in one correct call.
        assert!(!differ("ALLTOALL_BASE", 64, 128));
        assert!(!differ("SEND", 64, 0));
    }

    #[test]
    fn two_ranks_fingerprinting_different_calls_at_one_seqnum() {
        let print = |rank: u32, seq: u32, op: &str, shape: &str| {
            format!(
                "[rank{rank}]:[I1017 ProcessGroupWrapper.cpp:587] [Rank {rank}] Running collective: \
                 CollectiveFingerPrint(SequenceNumber={seq}, OpType={op}, TensorShape={shape}, \
                 TensorDtypes=Float, TensorDeviceTypes=TensorOptions(dtype=float (default)))"
            )
        };
        let differ = |lines: &[String]| {
            let lines: Vec<&str> = lines.iter().map(String::as_str).collect();
            facts(&lines)
                .get("collective_fingerprints_differ")
                .map(|e| e.iter().map(|e| e.line).collect::<Vec<_>>())
        };
        let shapes = [
            print(2, 38, "ALLREDUCE", "[77, 1]"),
            print(1, 38, "ALLREDUCE", "[100, 1]"),
        ];
        assert_eq!(differ(&shapes), Some(vec![1, 2]));
        let ops = [
            print(2, 38, "ALLREDUCE", "[1]"),
            print(1, 38, "BROADCAST", "[1]"),
        ];
        assert_eq!(differ(&ops), Some(vec![1, 2]));
        for same in [
            // The same call, or different numbers: a rank behind, not a mismatch.
            [
                print(2, 38, "ALLREDUCE", "[1]"),
                print(1, 38, "ALLREDUCE", "[1]"),
            ],
            [
                print(2, 38, "ALLREDUCE", "[1]"),
                print(1, 39, "BROADCAST", "[1]"),
            ],
            // All-to-all sizes differ by rank in one correct call.
            [
                print(2, 38, "ALLTOALL_BASE", "[4]"),
                print(1, 38, "ALLTOALL_BASE", "[8]"),
            ],
        ] {
            assert_eq!(differ(&same), None, "{same:?}");
        }
        // Ops whose names hold underscores are read whole.
        let ops = [
            print(2, 38, "_ALLGATHER_BASE", "[1]"),
            print(1, 38, "_REDUCE_SCATTER_BASE", "[1]"),
        ];
        assert_eq!(differ(&ops), Some(vec![1, 2]));
        // One rank with two calls at one number is in two groups: cannot tell.
        let groups = [
            print(2, 38, "ALLREDUCE", "[1]"),
            print(2, 38, "BROADCAST", "[1]"),
            print(1, 38, "BROADCAST", "[1]"),
        ];
        assert_eq!(differ(&groups), None);
        // Any rank with two calls at one number, not only the first to log one.
        let second_rank_in_two_groups = [
            print(2, 3, "ALLREDUCE", "[1]"),
            print(0, 3, "BROADCAST", "[1]"),
            print(0, 3, "ALLREDUCE", "[1]"),
        ];
        assert_eq!(differ(&second_rank_in_two_groups), None);
        // The mismatch where the job stops, after more calls than are kept.
        let mut long: Vec<String> = (0..MAX_CALLS as u32 + 200)
            .flat_map(|seq| {
                [
                    print(0, seq, "ALLREDUCE", "[1]"),
                    print(1, seq, "ALLREDUCE", "[1]"),
                ]
            })
            .collect();
        let last = MAX_CALLS as u32 + 200;
        long.push(print(0, last, "ALLREDUCE", "[77, 1]"));
        long.push(print(1, last, "ALLREDUCE", "[100, 1]"));
        let n = long.len() as u64;
        assert_eq!(differ(&long), Some(vec![n - 1, n]));
        let other_group = [
            print(2, 38, "ALLREDUCE", "[1]"),
            "[rank1]:[E ProcessGroupNCCL.cpp:1664] [PG ID 1 PG GUID 1 Rank 1] x".to_string(),
            print(1, 38, "BROADCAST", "[1]"),
        ];
        assert_eq!(differ(&other_group), None);
    }

    #[test]
    fn a_fingerprint_is_read_whole_or_not_at_all() {
        let line = "[rank2]:[I1017 ProcessGroupWrapper.cpp:587] [Rank 2] Running collective: CollectiveFingerPrint(SequenceNumber=38, OpType=_ALLGATHER_BASE, TensorShape=[77, 1], TensorDtypes=Float, TensorDeviceTypes=TensorOptions())";
        let (rank, seq, call) = Fingerprint::parse(line).unwrap();
        assert_eq!((rank, seq), (2, 38));
        assert_eq!(call.op, "_ALLGATHER_BASE");
        assert_eq!(call.shape.as_deref(), Some("[77, 1]"));
        for cut in ["[Rank 2]", "SequenceNumber=38", "OpType="] {
            assert!(
                Fingerprint::parse(&line.replace(cut, "")).is_none(),
                "{cut}"
            );
        }
    }

    #[test]
    fn fingerprints_kept_are_bounded_and_the_latest() {
        let print = |rank: usize, seq: usize| {
            format!(
                "[Rank {rank}] Running collective: CollectiveFingerPrint(SequenceNumber={seq}, OpType=ALLREDUCE, TensorShape=[1], TensorDtypes=Float)"
            )
        };
        let mut collectives = Collectives::default();
        for seq in 0..MAX_CALLS + 200 {
            collectives.observe(seq as u64 + 1, &print(0, seq));
        }
        assert_eq!(collectives.fingerprints.len(), MAX_CALLS);
        assert_eq!(collectives.fingerprints.keys().next(), Some(&200));
        // A number seen again is no new one: nothing is dropped for it.
        collectives.observe(1, &print(1, MAX_CALLS + 199));
        assert_eq!(collectives.fingerprints.keys().next(), Some(&200));
        for rank in 0..MAX_CALL_PROCESSES + 10 {
            collectives.observe(1, &print(rank, 500));
        }
        assert_eq!(
            collectives.fingerprints[&500].by_rank.len(),
            MAX_CALL_PROCESSES
        );
    }

    #[test]
    fn calls_kept_are_bounded() {
        let call = |pid: usize, op_count: usize| {
            format!(
                "h:{pid}:{pid} [0] NCCL INFO AllReduce: opCount {op_count} sendbuff 0x1 recvbuff 0x1 count 8 datatype 7 op 0 root 0 comm 0x{pid} [nranks=2] stream 0x2"
            )
        };
        let mut collectives = Collectives::default();
        let mut observe = |text: &str| {
            let at = text.find("NCCL INFO").unwrap();
            collectives.observe_nccl(1, text, &text[..at], &text[at + "NCCL INFO".len()..]);
        };
        for op_count in 0..MAX_CALLS + 10 {
            observe(&call(1, op_count));
        }
        // A call already seen is still followed once the table is full.
        for pid in 2..MAX_CALL_PROCESSES + 10 {
            observe(&call(pid, 0));
        }
        assert_eq!(collectives.calls.len(), MAX_CALLS);
        assert_eq!(
            collectives.calls["AllReduce 0 2"].comms.len(),
            MAX_CALL_PROCESSES
        );
    }

    #[test]
    fn a_process_group_is_named_only_by_its_number() {
        let mut collectives = Collectives::default();
        collectives.observe(
            1,
            "[rank0]:[W ProcessGroupNCCL.cpp:1] [PG (default_pg) Rank 0] x",
        );
        assert!(!collectives.default_pg_named && !collectives.other_pg_named);
        collectives.observe(
            2,
            "[rank0]:[W ProcessGroupNCCL.cpp:1] [PG ID 0 PG GUID 0 Rank 0] x",
        );
        assert!(collectives.default_pg_named && !collectives.other_pg_named);
        collectives.observe(3, "[rank0]:[W ProcessGroupNCCL.cpp:1] [PG 3 Rank 0] x");
        assert!(collectives.other_pg_named);
    }
}
