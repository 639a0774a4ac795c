//! Helpers for the bench tests: starting ranks as real processes of the built binary.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read};
use std::net::TcpListener;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_gputune")
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

/// A rank as torchrun --no-python would start it: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT
/// and nothing else of a launcher's.
pub fn torchrun_rank(rank: usize, world: usize, port: u16, args: &[&str]) -> Command {
    let mut c = Command::new(bin());
    c.args(["bench", "allreduce", "--backend", "tcp"])
        .args(args)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("RANK", rank.to_string())
        .env("WORLD_SIZE", world.to_string())
        .env("MASTER_ADDR", "127.0.0.1")
        .env("MASTER_PORT", port.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

/// Waits for a child with a deadline; kills it and fails the test past it.
pub fn wait_within(mut child: Child, limit: Duration, what: &str) -> (Output, Duration) {
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
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
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

pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
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
pub fn local_json(collective: &str, ranks: usize, extra: &[&str]) -> serde_json::Value {
    let sizes: &[&str] = if extra.contains(&"-b") {
        &[]
    } else {
        &["-b", "4", "-e", "70000", "-f", "7"]
    };
    let out = super::gputune()
        .args(["bench", collective, "--backend", "tcp", "--ranks"])
        .arg(ranks.to_string())
        .args(sizes)
        .args(["-n", "2", "-w", "1", "-c", "1"])
        .args(["--format", "json", "--timeout", "20"])
        .args(extra)
        .timeout(Duration::from_secs(60))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{collective} {ranks} ranks {extra:?}: {}",
        text(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Every rank of `results` exited 3 within `max`, without a panic, naming one of `blamed`.
pub fn assert_stopped(
    results: Vec<(&str, (std::process::Output, Duration))>,
    blamed: &[&str],
    max: Duration,
) {
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

/// Kills `victim`, then waits up to `limit` for each of the others to exit. Returns each
/// other rank's output and how long it took.
pub fn kill_one(
    mut victim: Child,
    others: [(&str, Child); 2],
    limit: Duration,
) -> Vec<(&str, (Output, Duration))> {
    victim.kill().expect("the victim rank is running");
    let _ = victim.wait();
    others
        .into_iter()
        .map(|(name, child)| (name, wait_within(child, limit, name)))
        .collect()
}

/// The run exited with `code` and its stderr says `needle`.
pub fn assert_exit(out: &Output, code: i32, needle: &str) {
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(code), "{stderr}");
    assert!(stderr.contains(needle), "{stderr}");
}
