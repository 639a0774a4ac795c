//! The benchmark's rendezvous against strangers: the built binary, real processes, real
//! sockets. Each test reproduces one way a stranger got in or kept the real ranks out.

use crate::common;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

use common::*;

const TOKEN: &str = "tok-5ecret-0f-this-job-8c1d";

fn rank(rank: usize, port: u16, timeout: &str) -> std::process::Command {
    of_world(rank, 2, port, timeout)
}

fn of_world(rank: usize, world: usize, port: u16, timeout: &str) -> std::process::Command {
    let args = format!("-b 8 -e 8K -f 32 -n 2 --timeout {timeout}");
    let mut c = torchrun_rank(rank, world, port, &args);
    c.env("GPUTUNE_BENCH_TOKEN", TOKEN);
    c
}

/// Everything rank 1 sends to a fake rank 0 that answers each connection's opening with a
/// challenge it made up (it does not know the token). Returns the bytes of each connection.
fn capture_rank_1(port: u16) -> (Vec<Vec<u8>>, std::process::Output) {
    let fake = TcpListener::bind(("127.0.0.1", port)).unwrap();
    fake.set_nonblocking(true).unwrap();
    let child = rank(1, port, "3").spawn().unwrap();
    let mut captured = Vec::new();
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(3) && captured.len() < 3 {
        match fake.accept() {
            Ok((mut s, _)) => {
                s.set_nonblocking(false).unwrap();
                s.set_read_timeout(Some(Duration::from_millis(500)))
                    .unwrap();
                let mut bytes = Vec::new();
                let mut buf = [0u8; 4096];
                let challenge = frame(&serde_json::json!({
                    "kind": "challenge", "nonce": "ab".repeat(32), "proof": "cd".repeat(32)
                }));
                let mut answered = false;
                while let Ok(n) = s.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    bytes.extend_from_slice(&buf[..n]);
                    if !answered {
                        answered = true;
                        let _ = s.write_all(&challenge);
                    }
                }
                captured.push(bytes);
            }
            Err(_) => std::thread::sleep(Duration::from_millis(10)),
        }
    }
    let (out, _) = wait_within(child, Duration::from_secs(20), "rank 1");
    (captured, out)
}

#[test]
fn the_token_never_crosses_the_wire() {
    let (captured, out) = capture_rank_1(free_port());
    assert!(!captured.is_empty(), "rank 1 never connected");
    let all: Vec<u8> = captured.concat();
    assert!(all.starts_with(b"GTB1"), "{}", text(&all));
    for needle in [TOKEN.as_bytes(), b"5ecret", b"\"token\""] {
        assert!(
            !all.windows(needle.len()).any(|w| w == needle),
            "{} sent in clear: {}",
            text(needle),
            text(&all)
        );
    }
    // The fake rank 0 could not prove the token, so rank 1 stopped, saying so.
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(stderr.contains("wrong job token"), "{stderr}");
}

#[test]
fn a_stranger_replaying_a_captured_handshake_is_refused() {
    // What a real rank 1 sent to whatever held the port, replayed to the real rank 0.
    let (captured, _) = capture_rank_1(free_port());
    let replay = captured.concat();
    assert!(!replay.is_empty());

    let port = free_port();
    let r0 = rank(0, port, "8").spawn().unwrap();
    let mut stranger = connect_when_listening(port);
    stranger.write_all(&replay).unwrap();
    // Whatever the stranger's opening earns, its proof is for another nonce: no Welcome.
    stranger
        .write_all(&frame(
            &serde_json::json!({"kind": "proof", "proof": "00".repeat(32)}),
        ))
        .unwrap();
    stranger
        .set_read_timeout(Some(Duration::from_secs(4)))
        .unwrap();
    let mut answer = Vec::new();
    let _ = stranger.read_to_end(&mut answer);
    assert!(
        !text(&answer).contains("welcome"),
        "the stranger was admitted: {}",
        text(&answer)
    );

    // The real rank 1 still joins and the job passes.
    let r1 = rank(1, port, "8").spawn().unwrap();
    assert_passed_despite_a_stranger(r0, r1, Duration::from_secs(60));
}

#[test]
fn rank_0_listens_only_where_master_addr_points() {
    let port = free_port();
    let r0 = rank(0, port, "3").spawn().unwrap();
    // Reachable where MASTER_ADDR (127.0.0.1) points...
    drop(connect_when_listening(port));
    // ...and not on another address of this host.
    let other = TcpStream::connect_timeout(
        &format!("127.0.0.2:{port}").parse().unwrap(),
        Duration::from_secs(2),
    );
    let (o0, _) = wait_within(r0, Duration::from_secs(20), "rank 0");
    assert!(
        other.is_err(),
        "rank 0 accepted a connection on 127.0.0.2 while MASTER_ADDR is 127.0.0.1"
    );
    assert_eq!(o0.status.code(), Some(3), "{}", text(&o0.stderr));
}

#[test]
fn master_addr_that_is_not_this_host_is_a_clear_error() {
    let port = free_port();
    let child = rank(0, port, "3")
        .env("MASTER_ADDR", "192.0.2.1")
        .spawn()
        .unwrap();
    let (out, _) = wait_within(child, Duration::from_secs(20), "rank 0");
    assert_exit(&out, 3, "MASTER_ADDR=192.0.2.1");
    assert_exit(&out, 3, "address of rank 0's host");
}

/// `n` connections to rank 0 that never say anything, held open until dropped.
fn silent(port: u16, n: usize) -> Vec<TcpStream> {
    (0..n).map(|_| connect_when_listening(port)).collect()
}

#[test]
fn a_flood_of_silent_connections_does_not_keep_the_ranks_out() {
    let port = free_port();
    // The timeout is shorter than the old 5 s per-connection allowance, and the flood is
    // larger than the number of handshakes rank 0 runs at once.
    let r0 = rank(0, port, "4").spawn().unwrap();
    let flood = silent(port, 300);
    std::thread::sleep(Duration::from_millis(700));
    let start = Instant::now();
    let r1 = rank(1, port, "4").spawn().unwrap();
    let stderr0 = assert_passed_despite_a_stranger(r0, r1, Duration::from_secs(30));
    let took = start.elapsed();
    drop(flood);
    assert!(stderr0.contains("from 127.0.0.1"), "{stderr0}");
    assert!(took < Duration::from_secs(15), "took {took:?}");
}

#[test]
fn a_missing_rank_behind_a_flood_is_named_with_the_stranger() {
    let port = free_port();
    let r0 = rank(0, port, "3").spawn().unwrap();
    let flood = silent(port, 64);
    let (o0, took) = wait_within(r0, Duration::from_secs(30), "rank 0");
    drop(flood);
    let stderr = text(&o0.stderr);
    assert_eq!(o0.status.code(), Some(3), "{stderr}");
    assert!(stderr.contains("rank 1 did not join"), "{stderr}");
    assert!(stderr.contains("a stranger held the port"), "{stderr}");
    assert!(took < Duration::from_secs(10), "took {took:?}");
}

#[test]
fn two_processes_claiming_one_rank_stop_the_job() {
    // Whoever comes second (a launcher's mistake, or a stranger who knows a derived token)
    // while the rendezvous is open, the job must not go on with whichever arrived first.
    let port = free_port();
    let r0 = of_world(0, 3, port, "6").spawn().unwrap();
    drop(connect_when_listening(port));
    let a = of_world(1, 3, port, "6").spawn().unwrap();
    let b = of_world(1, 3, port, "6").spawn().unwrap();
    let (o0, took) = wait_within(r0, Duration::from_secs(30), "rank 0");
    let (oa, _) = wait_within(a, Duration::from_secs(30), "rank 1 (a)");
    let (ob, _) = wait_within(b, Duration::from_secs(30), "rank 1 (b)");
    let stderr = text(&o0.stderr);
    assert_eq!(o0.status.code(), Some(3), "{stderr}");
    assert!(stderr.contains("rank 1 joined twice"), "{stderr}");
    assert_eq!(oa.status.code(), Some(3), "{}", text(&oa.stderr));
    assert_eq!(ob.status.code(), Some(3), "{}", text(&ob.stderr));
    assert!(took < Duration::from_secs(10), "took {took:?}");
}

/// Another program holds the rendezvous port: one that closes every connection at once, and
/// one that never answers. Rank 1 says once what it waits for and why, then a line every few
/// seconds with the time left, then one verdict naming the cause; not a line per attempt.
#[test]
fn waiting_for_a_port_another_program_holds_says_why_once_then_counts_down() {
    for (holder, why) in [
        ("closes", "closes them without answering"),
        ("is silent", "never answers"),
    ] {
        let port = free_port();
        let listener = TcpListener::bind(("127.0.0.1", port)).unwrap();
        listener.set_nonblocking(true).unwrap();
        let r1 = KillOnDrop::spawn(&mut rank(1, port, "7"));
        let mut held = Vec::new();
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(9) {
            match listener.accept() {
                Ok((s, _)) if holder == "is silent" => held.push(s),
                Ok((s, _)) => drop(s),
                Err(_) => std::thread::sleep(Duration::from_millis(5)),
            }
        }
        let (out, _) = wait_within(r1, Duration::from_secs(20), "rank 1");
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(3), "{holder}: {stderr}");
        let target = format!("rank 0 at 127.0.0.1:{port}");
        // The first line says what and why, the last is the verdict; between them only the
        // count-down (one at 6 s when attempts come every 200 ms, none when each takes 3 s).
        let lines: Vec<&str> = stderr.lines().collect();
        assert!((2..=3).contains(&lines.len()), "{holder}: {stderr}");
        assert!(
            lines[0].starts_with(&format!("# rendezvous: waiting up to 7s for {target}: "))
                && lines[0].contains(why)
                && lines[0].contains("another program holds the port"),
            "{holder}: {stderr}"
        );
        for line in &lines[1..lines.len() - 1] {
            assert!(
                line.starts_with(&format!("# rendezvous: still waiting for {target}, "))
                    && line.contains("s left ("),
                "{holder}: {stderr}"
            );
        }
        let verdict = lines[lines.len() - 1];
        assert!(
            verdict.starts_with(&format!("gputune: cannot reach {target} within 7s: "))
                && verdict.contains(why),
            "{holder}: {stderr}"
        );
        assert!(!stderr.contains("no attempt"), "{holder}: {stderr}");
    }
}
