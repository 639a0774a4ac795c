//! Helpers for the bench tests: starting ranks as real processes of the built binary.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read};
use std::net::TcpListener;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use super::{KillOnDrop, bin, text};

/// Every element type and reduction the benchmark offers.
pub const TYPES: [&str; 5] = ["f32", "f16", "bf16", "f64", "i32"];
pub const OPS: [&str; 5] = ["sum", "prod", "min", "max", "avg"];

/// `gputune bench WORDS...` (a collective and its flags, split at spaces), bounded to a
/// minute.
pub fn bench(line: &str) -> assert_cmd::Command {
    let mut cmd = super::gputune_words(&format!("bench {line}"));
    cmd.timeout(Duration::from_secs(60));
    cmd
}

/// A port that was free a moment ago, below the kernel's ephemeral range (32768 and up by
/// default), so the outgoing connections of tests running in parallel cannot take it.
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU16, Ordering};
    static NEXT: AtomicU16 = AtomicU16::new(0);
    let base = 20000 + (std::process::id() % 400) as u16 * 20;
    loop {
        let port = base + NEXT.fetch_add(1, Ordering::SeqCst) % 2000;
        if TcpListener::bind(("0.0.0.0", port)).is_ok() {
            return port;
        }
    }
}

/// Gives `cmd` the environment a launcher gives a rank: RANK, WORLD_SIZE, MASTER_ADDR and
/// MASTER_PORT, PATH and nothing else; no stdin, stdout and stderr piped.
pub(super) fn rank_env(cmd: &mut Command, rank: usize, world: usize, master: &str, port: u16) {
    cmd.env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("RANK", rank.to_string())
        .env("WORLD_SIZE", world.to_string())
        .env("MASTER_ADDR", master)
        .env("MASTER_PORT", port.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
}

/// A rank as torchrun --no-python would start it, with the words of `args`: RANK,
/// WORLD_SIZE, MASTER_ADDR, MASTER_PORT and nothing else of a launcher's.
pub fn torchrun_rank(rank: usize, world: usize, port: u16, args: &str) -> Command {
    let mut c = Command::new(bin());
    c.args(["bench", "allreduce", "--backend", "tcp"])
        .args(args.split_whitespace());
    rank_env(&mut c, rank, world, "127.0.0.1", port);
    c
}

/// Rank 0 of a job of two started with `args` on a free port (killed if the test fails
/// before waiting for it), and that port (for rank 1, and for strangers).
pub fn rank_0_of_two(args: &str) -> (KillOnDrop, u16) {
    let port = free_port();
    (
        KillOnDrop::spawn(&mut torchrun_rank(0, 2, port, args)),
        port,
    )
}

/// Waits for a child with a deadline; kills it and fails the test past it. The child is
/// guarded ([`KillOnDrop`]) while it is waited for.
pub fn wait_within(
    child: impl Into<KillOnDrop>,
    limit: Duration,
    what: &str,
) -> (Output, Duration) {
    let mut child = child.into();
    let start = Instant::now();
    loop {
        if child.try_wait().unwrap().is_some() {
            return (child.wait_with_output().unwrap(), start.elapsed());
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "{what} still running after {limit:?}\nstdout: {}\nstderr: {}",
                text(&out.stdout),
                text(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Reads a child's stdout until a line containing `marker` (the header, once the rendezvous
/// is done), and returns the text read so far; the rest stays readable.
pub fn read_until(child: &mut Child, marker: &str, limit: Duration) -> String {
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let wanted = marker.to_string();
    std::thread::spawn(move || {
        let mut reader = BufReader::new(stdout);
        let mut seen = String::new();
        let mut line = String::new();
        let mut sent = false;
        while reader.read_line(&mut line).map(|n| n > 0).unwrap_or(false) {
            seen.push_str(&line);
            if !sent && line.contains(&wanted) {
                let _ = tx.send(seen.clone());
                sent = true;
            }
            line.clear();
        }
        let mut rest = String::new();
        let _ = reader.read_to_string(&mut rest);
    });
    rx.recv_timeout(limit)
        .unwrap_or_else(|_| panic!("no `{marker}` within {limit:?}"))
}

/// The data rows of an nccl-tests table.
pub fn rows(table: &str) -> Vec<Vec<String>> {
    table
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| l.split_whitespace().map(String::from).collect())
        .collect()
}

/// Asserts every row of a JSON document has `nwrong` 0 in both halves, and returns the rows.
pub fn json_rows_all_right(doc: &serde_json::Value) -> usize {
    let results = doc["results"].as_array().expect("results");
    for r in results {
        assert_eq!(r["out_of_place"]["nwrong"], 0, "{r}");
        assert_eq!(r["in_place"]["nwrong"], 0, "{r}");
    }
    results.len()
}

/// A connection to rank 0's rendezvous port on loopback, once it listens (up to 5 s).
pub fn connect_when_listening(port: u16) -> std::net::TcpStream {
    for _ in 0..200 {
        if let Ok(s) = std::net::TcpStream::connect(("127.0.0.1", port)) {
            return s;
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    panic!("rank 0 never listened on port {port}")
}

/// `gputune bench COLLECTIVE --backend tcp --ranks N` with 2 iterations, 1 warm-up and 1 check
/// (sizes 4 B to 70000 B unless `extra` has `-b`), as JSON; it must succeed.
pub fn local_json(collective: &str, ranks: usize, extra: &str) -> serde_json::Value {
    let sizes = if extra.split_whitespace().any(|w| w == "-b") {
        ""
    } else {
        "-b 4 -e 70000 -f 7"
    };
    let out = bench(&format!(
        "{collective} --backend tcp --ranks {ranks} {sizes} -n 2 -w 1 -c 1 --format json --timeout 20 {extra}"
    ))
    .output()
    .unwrap();
    assert!(
        out.status.success(),
        "{collective} {ranks} ranks {extra:?}: {}",
        text(&out.stderr)
    );
    super::stdout_json(&out)
}

/// Waits for ranks 0 and 1 of a job and asserts both succeeded (`what` names the case).
/// Returns their outputs. Rank 1 is killed should the wait for rank 0 fail.
pub fn both_succeed(
    r0: impl Into<KillOnDrop>,
    r1: impl Into<KillOnDrop>,
    limit: Duration,
    what: &str,
) -> (Output, Output) {
    let (r0, r1) = (r0.into(), r1.into());
    let (o0, _) = wait_within(r0, limit, "rank 0");
    let (o1, _) = wait_within(r1, limit, "rank 1");
    for (rank, out) in [(0, &o0), (1, &o1)] {
        assert!(
            out.status.success(),
            "{what}: rank {rank}: {}",
            text(&out.stderr)
        );
    }
    (o0, o1)
}

/// A job of two whose rank 0 strangers tried to keep busy: both ranks pass, rank 0 prints
/// its three rows and says a stranger came.
pub fn assert_passed_despite_a_stranger(
    r0: impl Into<KillOnDrop>,
    r1: impl Into<KillOnDrop>,
    limit: Duration,
) -> String {
    let (o0, _) = both_succeed(r0, r1, limit, "the real job");
    let stderr0 = text(&o0.stderr);
    assert_eq!(rows(&text(&o0.stdout)).len(), 3);
    assert!(stderr0.contains("a stranger"), "{stderr0}");
    stderr0
}

/// Three ranks of one job, each timing `work` (sizes and iterations far longer than any
/// test), returned once rank 0 has printed its table header, so all three are mid-run. Each
/// is killed when dropped: a failing test leaves none of them running.
pub fn three_busy_ranks(work: &str, timeout_secs: &str) -> [KillOnDrop; 3] {
    let port = free_port();
    let args = format!("{work} -w 0 -c 0 --timeout {timeout_secs}");
    let rank = |r| KillOnDrop::spawn(&mut torchrun_rank(r, 3, port, &args));
    let mut r0 = rank(0);
    let r1 = rank(1);
    let r2 = rank(2);
    read_until(&mut r0, "#wrong", Duration::from_secs(20));
    [r0, r1, r2]
}

/// How a rank is taken out of a running job.
#[derive(Clone, Copy)]
pub enum Halt {
    /// SIGKILL: its sockets close.
    Kill,
    /// SIGSTOP: its sockets stay open and silent.
    Stall,
}

/// Halts rank `victim` of `ranks` mid-run, waits up to `limit` for each of the others to
/// exit, then kills the victim. Returns each other rank's name, output and how long it took.
/// Should a wait fail, the ranks not yet waited for are killed as their guards drop.
pub fn halt(
    ranks: [KillOnDrop; 3],
    victim: usize,
    how: Halt,
    limit: Duration,
) -> Vec<(String, (Output, Duration))> {
    // Into the timed loop before the signal. The table prints nothing between its header and
    // the first row (which these sizes never reach), so there is no line to wait for: the
    // settling times the separate killed-rank (500 ms) and stalled-rank (300 ms) tests had.
    let settle = match how {
        Halt::Kill => 500,
        Halt::Stall => 300,
    };
    std::thread::sleep(Duration::from_millis(settle));
    let mut others = Vec::new();
    let mut halted = None;
    for (rank, child) in ranks.into_iter().enumerate() {
        if rank == victim {
            halted = Some(child);
        } else {
            others.push((format!("rank {rank}"), child));
        }
    }
    let mut victim = halted.expect("the victim is one of the ranks");
    let pid = nix::unistd::Pid::from_raw(victim.id() as i32);
    let signal = match how {
        Halt::Kill => nix::sys::signal::Signal::SIGKILL,
        Halt::Stall => nix::sys::signal::Signal::SIGSTOP,
    };
    nix::sys::signal::kill(pid, signal).unwrap_or_else(|e| panic!("{signal} {pid}: {e}"));
    if let Halt::Kill = how {
        let _ = victim.wait();
    }
    let results = others
        .into_iter()
        .map(|(name, child)| {
            let result = wait_within(child, limit, &name);
            (name, result)
        })
        .collect();
    drop(victim); // killed and reaped
    results
}

/// One frame as the rendezvous wire carries it: magic, big-endian length, JSON body.
pub fn frame(json: &serde_json::Value) -> Vec<u8> {
    let body = json.to_string();
    let mut out = b"GTB1".to_vec();
    out.extend_from_slice(&(body.len() as u32).to_be_bytes());
    out.extend_from_slice(body.as_bytes());
    out
}

/// Tests that halt one of three busy ranks mid-run and expect the others to stop, one line
/// each: `name: WORK, timeout SECS, Kill|Stall rank N, wait LIMIT s, blaming [RANKS], within
/// MAX s`: every other rank exits 3 before MAX seconds (waited for up to LIMIT), naming one
/// of RANKS.
#[allow(unused_macros)]
macro_rules! halted_rank_tests {
    ($($name:ident: $work:expr, timeout $timeout:literal, $how:ident rank $victim:literal, wait $limit:literal s, blaming $blamed:expr, within $max:literal s;)+) => {
        $(
            #[test]
            fn $name() {
                use std::time::Duration;
                let ranks = $crate::common::three_busy_ranks($work, $timeout);
                let how = $crate::common::Halt::$how;
                let results = $crate::common::halt(ranks, $victim, how, Duration::from_secs($limit));
                $crate::common::assert_stopped(results, &$blamed, Duration::from_secs($max));
            }
        )+
    };
}
#[allow(unused_imports)]
pub(crate) use halted_rank_tests;

/// Every rank of `results` exited 3 within `max`, without a panic, naming one of `blamed`.
pub fn assert_stopped(results: Vec<(String, (Output, Duration))>, blamed: &[&str], max: Duration) {
    for (name, (out, took)) in results {
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(3), "{name}: {stderr}");
        assert!(
            blamed.iter().any(|rank| stderr.contains(rank)),
            "{name}: {stderr}"
        );
        assert!(!stderr.contains("panicked"), "{name}: {stderr}");
        assert!(took < max, "{name} took {took:?}");
    }
}

/// The TCP ports process `pid` listens on, read as `ss -ltnp` would (its socket inodes in
/// /proc/PID/fd, matched against the listening sockets of /proc/PID/net/tcp): what any local
/// user can learn of a rank.
pub fn listening_ports(pid: u32) -> Vec<u16> {
    let inodes: std::collections::BTreeSet<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|dir| {
            dir.flatten()
                .filter_map(|fd| std::fs::read_link(fd.path()).ok())
                .filter_map(|target| {
                    let t = target.to_string_lossy().into_owned();
                    t.strip_prefix("socket:[")?
                        .strip_suffix(']')
                        .map(String::from)
                })
                .collect()
        })
        .unwrap_or_default();
    let table = std::fs::read_to_string(format!("/proc/{pid}/net/tcp")).unwrap_or_default();
    let mut ports: Vec<u16> = table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            let listening = f.get(3) == Some(&"0A");
            let ours = f.get(9).is_some_and(|i| inodes.contains(*i));
            let port = f.get(1)?.rsplit_once(':')?.1;
            (listening && ours).then(|| u16::from_str_radix(port, 16).ok())?
        })
        .collect();
    ports.sort_unstable();
    ports
}

/// Waits (up to 20 s) until process `pid` listens on `n` TCP ports, and returns them.
pub fn wait_for_listening(pid: u32, n: usize) -> Vec<u16> {
    let start = Instant::now();
    loop {
        let ports = listening_ports(pid);
        if ports.len() >= n {
            return ports;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "pid {pid} listens on {ports:?}, not {n} ports"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A local user holding `n` silent connections to a port of 127.0.0.1: each one the port
/// closes is opened again, so the port never has fewer strangers than it can shed. Stops
/// (closing them all) when dropped.
pub struct Flood {
    _thread: super::StopOnDrop,
    /// Connections opened so far, reopened ones included.
    pub opened: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl Flood {
    pub fn start(port: u16, n: usize) -> Flood {
        use std::sync::Arc;
        use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
        let stop = Arc::new(AtomicBool::new(false));
        let opened = Arc::new(AtomicUsize::new(0));
        let (flag, count) = (stop.clone(), opened.clone());
        let thread = std::thread::spawn(move || {
            let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
            let mut held: Vec<Option<std::net::TcpStream>> = (0..n).map(|_| None).collect();
            while !flag.load(Ordering::SeqCst) {
                for slot in held.iter_mut() {
                    let alive = slot.as_mut().is_some_and(|s| {
                        matches!(s.read(&mut [0u8; 64]), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
                    });
                    if alive {
                        continue;
                    }
                    // A full backlog drops the SYN: try the rest on the next round.
                    *slot = std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(20))
                        .ok()
                        .filter(|s| s.set_nonblocking(true).is_ok());
                    if slot.is_none() || flag.load(Ordering::SeqCst) {
                        break;
                    }
                    count.fetch_add(1, Ordering::SeqCst);
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        });
        Flood {
            _thread: super::StopOnDrop::new(stop, thread),
            opened,
        }
    }

    /// Waits (up to 10 s) until `n` connections were opened.
    pub fn wait_for(&self, n: usize) {
        let start = Instant::now();
        while self.opened.load(std::sync::atomic::Ordering::SeqCst) < n {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "the flood opened too few"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}
