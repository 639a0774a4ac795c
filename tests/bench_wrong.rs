//! The benchmark must be able to report a wrong answer, and its figures must add up.
//!
//! A wrong answer needs a rank that sends wrong data. Rank 0 here is the built binary; rank 1
//! is this test process, made of the library's own parts (rendezvous, data connections,
//! harness), speaking the real protocol with the job's token, but loading a wrong value into
//! what it sends. Nothing of this ships in the binary: the corruption is the test's backend.

use crate::common;

use std::time::Duration;

use common::*;
use gputune::bench::control::rendezvous::{self, Identity, Member, Transport};
use gputune::bench::measure::collective::Shape;
use gputune::bench::measure::data::Op;
use gputune::bench::measure::harness;
use gputune::bench::{Backend, BenchError, tcp};
use gputune::commands::bench::validate;

const TOKEN: &str = "tok-0f-a-job-with-a-corrupt-rank";

/// The TCP backend, with the first element of every buffer it is given replaced by a value
/// no rank holds: the peers receive (and reduce) wrong data.
struct Corrupt(tcp::TcpBackend);

/// Far from any value the benchmark's inputs take, so every reduction of it is wrong.
const WRONG: f32 = 1.0e6;

impl Backend for Corrupt {
    fn prepare(&mut self, shape: Shape, input: &[u8]) -> Result<(), BenchError> {
        let mut wrong = input.to_vec();
        wrong[..4].copy_from_slice(&WRONG.to_le_bytes());
        self.0.prepare(shape, &wrong)
    }
    fn run(&mut self, op: Op, in_place: bool, iters: usize) -> Result<(), BenchError> {
        self.0.run(op, in_place, iters)
    }
    fn reset(&mut self, in_place: bool) -> Result<(), BenchError> {
        self.0.reset(in_place)
    }
    fn result(&mut self, in_place: bool) -> Result<Vec<u8>, BenchError> {
        self.0.result(in_place)
    }
    fn algorithm(&self, bytes: usize) -> Option<&'static str> {
        self.0.algorithm(bytes)
    }
}

/// Rank 1 of a job of two, run in this process: joins rank 0 at `port` with the settings
/// `args` give, sends corrupt data, checks its own results honestly, and returns the exit
/// code rank 0 announces.
fn corrupt_rank_1(port: u16, args: &str) -> Result<u8, BenchError> {
    let words = format!("gputune bench allreduce --backend tcp {args}");
    let cli = gputune::cli::Cli::try_parse_from(words.split_whitespace())
        .map_err(|e| BenchError::Usage(e.to_string()))?;
    let gputune::cli::Command::Bench(bench) = cli.command else {
        return Err(BenchError::Usage("not a bench command".into()));
    };
    let (collective, flags) = bench.command.collective();
    let job = validate(collective, flags)?;
    let me = Identity {
        rank: 1,
        world: 2,
        token: TOKEN.into(),
        member: Member {
            rank: 1,
            host: "corrupt".into(),
            pid: std::process::id(),
            device: "cpu".into(),
        },
        backend: Transport::Tcp,
        settings: job.settings.clone(),
    };
    let joined = rendezvous::join(&("127.0.0.1".into(), port), me, job.timeout)?;
    let mut group = joined.group;
    let hosts: Vec<String> = group.members.iter().map(|m| m.host.clone()).collect();
    let options = tcp::Options {
        streams: job.settings.streams,
        sockbuf: job.settings.sockbuf,
        timeout: job.timeout,
        token: TOKEN.into(),
    };
    let conns = tcp::connect(
        1,
        2,
        joined.data_listener,
        &joined.data_addrs,
        &hosts,
        &options,
        group.fatal.clone(),
    )?;
    let mut backend = Corrupt(tcp::TcpBackend::new(conns, job.settings.algo));
    harness::run(&mut backend, &mut group, &job.settings.sweep, |_| Ok(()))?;
    group.finish(0)
}

use clap::Parser as _;

#[test]
fn a_rank_sending_wrong_data_is_counted_and_fails_the_job() {
    // Three sizes, through recursive doubling (4K, 128K) and the pipelined ring (4M).
    let args = "-b 4K -e 4M -f 32 -n 2 -w 1 -c 1 --timeout 30";
    let port = free_port();
    let mut r0 = torchrun_rank(0, 2, port, args);
    r0.env("GPUTUNE_BENCH_TOKEN", TOKEN);
    let r0 = KillOnDrop::spawn(&mut r0);
    let r1 = std::thread::spawn(move || corrupt_rank_1(port, args));
    let (o0, _) = wait_within(r0, Duration::from_secs(90), "rank 0");
    let r1 = r1.join().expect("rank 1's thread");
    let (stdout, stderr) = (text(&o0.stdout), text(&o0.stderr));
    assert_eq!(o0.status.code(), Some(1), "{stdout}\n{stderr}");
    assert_eq!(
        r1.expect("rank 1 ran to the end"),
        1,
        "rank 0 announced exit 1"
    );
    // Element 0 is wrong on both ranks (each reduces rank 1's wrong value): 2 per half.
    let rows = rows(&stdout);
    assert_eq!(rows.len(), 3, "{stdout}");
    for r in &rows {
        assert_eq!((r[8].as_str(), r[12].as_str()), ("2", "2"), "{stdout}");
    }
    assert!(
        stdout.contains("# Out of bounds values : 12 FAILED"),
        "{stdout}"
    );
    assert!(
        stderr.contains("12 wrong elements in the results"),
        "{stderr}"
    );
}

/// The table's busbw and its `# Avg bus bandwidth` footer, worked out again from the size
/// and time columns: busbw = size / time · 2(n−1)/n (4/3 for 3 ranks), the footer the mean
/// of both halves of every row. Compared relative to their size, so slow figures (a debug
/// build on a busy machine) check the formula as tightly as fast ones.
#[test]
fn the_footer_is_the_mean_of_every_busbw_worked_out_from_the_times() {
    let out = bench("allreduce --backend tcp --ranks 3 -b 8K -e 512K -f 8 -n 3")
        .output()
        .unwrap();
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    let rows = rows(&stdout);
    assert_eq!(rows.len(), 3, "{stdout}");
    let mut busbw = Vec::new();
    for r in &rows {
        let size: f64 = r[0].parse().unwrap();
        for (time, printed) in [(&r[5], &r[7]), (&r[9], &r[11])] {
            let time_us: f64 = time.parse().unwrap();
            let worked_out = size / (time_us * 1e-6) / 1e9 * 4.0 / 3.0;
            let printed: f64 = printed.parse().unwrap();
            // The time is printed to 3 or more significant digits, busbw to 0.01.
            assert!(
                (printed - worked_out).abs() <= 0.005 + worked_out * 2e-3,
                "{printed} vs {worked_out}: {stdout}"
            );
            busbw.push(worked_out);
        }
    }
    let mean = busbw.iter().sum::<f64>() / busbw.len() as f64;
    let footer: f64 = stdout
        .lines()
        .find_map(|l| l.strip_prefix("# Avg bus bandwidth    : "))
        .expect("the footer")
        .trim()
        .parse()
        .unwrap();
    assert!(mean > 0.0, "{stdout}");
    assert!(
        (footer - mean).abs() <= mean * 2e-3,
        "footer {footer} vs mean {mean}: {stdout}"
    );
}
