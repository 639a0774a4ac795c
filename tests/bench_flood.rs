//! Strangers holding every port a rank opens: a local user reads the ports from `ss` and
//! keeps 300 silent connections open to each (reopening every one a rank closes). The ranks'
//! own connections still get through, on the rendezvous port and on every data port alike.

use crate::common;

use std::time::{Duration, Instant};

use common::*;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

const TOKEN: &str = "tok-fl00d-of-this-job";

fn rank(rank: usize, port: u16) -> std::process::Command {
    let mut c = torchrun_rank(rank, 2, port, "-b 8 -e 64K -f 8 -n 2 --timeout 20");
    c.env("GPUTUNE_BENCH_TOKEN", TOKEN);
    c
}

fn signal(child: &KillOnDrop, signal: Signal) {
    kill(Pid::from_raw(child.id() as i32), signal).unwrap();
}

#[test]
fn a_flood_on_every_port_of_every_rank_does_not_stop_the_job() {
    let port = free_port();
    let r0 = KillOnDrop::spawn(&mut rank(0, port));
    // Rank 0 listens on the rendezvous port and its data port.
    let ports0 = wait_for_listening(r0.id(), 2);
    assert!(ports0.contains(&port), "{ports0:?}");
    // Held still, rank 0 answers no one: rank 1 connects (the kernel completes it), opens its
    // data port and waits, and the strangers come to all three ports before any is used.
    signal(&r0, Signal::SIGSTOP);
    let r1 = KillOnDrop::spawn(&mut rank(1, port));
    let ports1 = wait_for_listening(r1.id(), 1);
    let floods: Vec<Flood> = ports0
        .iter()
        .chain(&ports1)
        .map(|&p| Flood::start(p, 300))
        .collect();
    for f in &floods {
        f.wait_for(100);
    }
    let start = Instant::now();
    signal(&r0, Signal::SIGCONT);
    let (o0, o1) = both_succeed(r0, r1, Duration::from_secs(60), "flooded job");
    let took = start.elapsed();
    let opened: Vec<usize> = floods
        .iter()
        .map(|f| f.opened.load(std::sync::atomic::Ordering::SeqCst))
        .collect();
    drop(floods);
    let (stderr0, stderr1) = (text(&o0.stderr), text(&o1.stderr));
    assert_eq!(rows(&text(&o0.stdout)).len(), 5, "{stderr0}");
    // Every port shed strangers, each one saying so once, not once per connection.
    assert!(
        stderr0.contains("# rendezvous: every rank joined; "),
        "{stderr0}"
    );
    assert!(
        stderr0.contains("# data port: every expected connection arrived; "),
        "{stderr0}"
    );
    assert!(
        stderr1.contains("# data port: every expected connection arrived; "),
        "{stderr1}"
    );
    for stderr in [&stderr0, &stderr1] {
        assert!(stderr.lines().count() < 60, "{stderr}");
    }
    // Each port had strangers queued ahead of the ranks' connections (at least the 100
    // waited for; a port not yet accepting queues at most its backlog, 128) and more came
    // as it shed them.
    assert!(opened.iter().all(|&n| n >= 100), "{opened:?}");
    assert!(took < Duration::from_secs(20), "took {took:?}");
}
