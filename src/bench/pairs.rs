//! `bench allreduce --pairs`: the slow node out. Instead of one all-rank ring (whose speed
//! is its slowest link's, naming nobody), the ranks are split into disjoint pairs, round
//! after round (the circle method, so each rank meets a different partner every round), and
//! each pair runs a two-rank AllReduce over TCP. A node whose median pair bandwidth is below
//! a fraction of the job's median is named: nccl-tests users find bad nodes this way by hand.
//! One rank per node (`srun --ntasks-per-node=1`), so a rank's host is the node.

use std::net::{SocketAddr, TcpListener};
use std::time::Instant;

use serde::Serialize;

use super::control::group::Group;
use super::measure::collective::{Collective, Shape};
use super::measure::data;
use super::tcp::{self, TcpBackend};
use super::{Backend, BenchError, JobError, Settings};
use crate::error::ExitCode;

/// At most this many rounds: each node meets this many partners, enough for a median that
/// one other bad node cannot sway, and bounded on a large job.
pub(crate) const MAX_ROUNDS: usize = 7;

/// The pairs of each round: circle method over `world` ranks (a bye for an odd count).
pub(crate) fn schedule(world: usize) -> Vec<Vec<(usize, usize)>> {
    let n = world + world % 2;
    let rounds = (n - 1).min(MAX_ROUNDS);
    (0..rounds)
        .map(|r| {
            // Rank n-1 stays put; the others rotate by r.
            let at = |i: usize| {
                if i == n - 1 { n - 1 } else { (i + r) % (n - 1) }
            };
            (0..n / 2)
                .map(|i| {
                    let (a, b) = (at(i), at(n - 1 - i));
                    (a.min(b), a.max(b))
                })
                .filter(|&(_, b)| b < world)
                .collect()
        })
        .collect()
}

/// One measured pair.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct PairResult {
    pub round: usize,
    pub ranks: (usize, usize),
    pub hosts: (String, String),
    /// Microseconds per AllReduce (the slower side's).
    pub time: f64,
    /// GB/s; for two ranks bus bandwidth equals algorithm bandwidth.
    pub bus_bw: f64,
    pub nwrong: u64,
}

/// A node whose pairs are slow.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct SlowNode {
    pub rank: usize,
    pub host: String,
    pub median_bus_bw: f64,
}

/// What rank 0 concludes.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Verdict {
    pub size: u64,
    pub pairs: Vec<PairResult>,
    /// The median over nodes of each node's median pair bandwidth.
    pub job_median_bus_bw: f64,
    pub threshold_fraction: f64,
    pub slow: Vec<SlowNode>,
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(|a, b| a.total_cmp(b));
    match values.len() {
        0 => 0.0,
        n if n % 2 == 1 => values[n / 2],
        n => (values[n / 2 - 1] + values[n / 2]) / 2.0,
    }
}

/// Names the nodes whose median pair bandwidth is below `fraction` of the job's median.
pub(crate) fn judge(size: u64, pairs: Vec<PairResult>, hosts: &[String], fraction: f64) -> Verdict {
    let per_node: Vec<f64> = (0..hosts.len())
        .map(|rank| {
            let mut mine: Vec<f64> = pairs
                .iter()
                .filter(|p| p.ranks.0 == rank || p.ranks.1 == rank)
                .map(|p| p.bus_bw)
                .collect();
            median(&mut mine)
        })
        .collect();
    let job = median(&mut per_node.clone());
    let slow = per_node
        .iter()
        .enumerate()
        .filter(|&(_, &bw)| bw < fraction * job)
        .map(|(rank, &bw)| SlowNode {
            rank,
            host: hosts.get(rank).cloned().unwrap_or_default(),
            median_bus_bw: bw,
        })
        .collect();
    Verdict {
        size,
        pairs,
        job_median_bus_bw: job,
        threshold_fraction: fraction,
        slow,
    }
}

/// What a pairs run takes from the job's command line (handed over by [`super::job`], so
/// this module needs nothing back from it).
pub(crate) struct Request<'a> {
    pub settings: &'a Settings,
    pub timeout: std::time::Duration,
    /// `--pairs-threshold`: a node below this fraction of the job's median is slow.
    pub fraction: f64,
    /// `--format json`; anything else prints the table.
    pub json: bool,
    /// `--output FILE`.
    pub output: Option<&'a std::path::Path>,
}

/// This rank's part: every round, a barrier, then a two-rank AllReduce with its partner,
/// its time reported to rank 0, which prints the table of pairs and the slow nodes.
pub(crate) fn run(
    job: &Request,
    group: &mut Group,
    listener: TcpListener,
    addrs: &[SocketAddr],
    token: &str,
) -> Result<ExitCode, BenchError> {
    let size = *job.settings.sweep.sizes().last().unwrap_or(&0);
    let (dtype, op) = (job.settings.sweep.dtype, job.settings.sweep.op);
    let count = super::measure::harness::element_count(size, dtype);
    let bytes = count as usize * dtype.size();
    let hosts: Vec<String> = group.members.iter().map(|m| m.host.clone()).collect();
    let options = tcp::Options {
        streams: job.settings.streams,
        sockbuf: job.settings.sockbuf,
        timeout: job.timeout,
        token: token.to_string(),
    };
    let mut results = Vec::new();
    for (round, pairs) in schedule(group.world).into_iter().enumerate() {
        group.barrier()?;
        let partner = pairs
            .iter()
            .find(|(a, b)| *a == group.rank || *b == group.rank)
            .copied();
        let (time, wrong) = match partner {
            None => (0.0, 0),
            Some((a, b)) => {
                let me = usize::from(group.rank == b);
                let pair_addrs = [addrs[a], addrs[b]];
                let pair_hosts = [hosts[a].clone(), hosts[b].clone()];
                let accept = listener.try_clone().map_err(JobError::Pairs)?;
                let ring = tcp::connect(
                    me,
                    2,
                    accept,
                    &pair_addrs,
                    &pair_hosts,
                    &options,
                    group.fatal.clone(),
                )?;
                let mut backend = TcpBackend::new(ring, job.settings.algo);
                let mut input = vec![0u8; bytes];
                data::fill_input(dtype, op, me, 2, &mut input);
                let shape = Shape::new(Collective::AllReduce, dtype, count as usize, 2);
                backend.prepare(shape, &input)?;
                backend.run(op, false, job.settings.sweep.warmup)?;
                let start = Instant::now();
                backend.run(op, false, job.settings.sweep.iters)?;
                let time =
                    start.elapsed().as_secs_f64() * 1e6 / job.settings.sweep.iters.max(1) as f64;
                let mut wrong = 0;
                for _ in 0..job.settings.sweep.check {
                    backend.reset(false)?;
                    backend.run(op, false, 1)?;
                    wrong += data::count_wrong(dtype, op, 2, &backend.result(false)?);
                }
                (time, wrong)
            }
        };
        let max_wrong = count.saturating_mul(job.settings.sweep.check as u64);
        if let Some(all) =
            group.report(round as u64, [time, time], [Some(wrong), None], max_wrong)?
        {
            for &(a, b) in &pairs {
                let t = all[a].0[0].max(all[b].0[0]);
                let nwrong = all[a].1[0].unwrap_or(0) + all[b].1[0].unwrap_or(0);
                results.push(PairResult {
                    round,
                    ranks: (a, b),
                    hosts: (hosts[a].clone(), hosts[b].clone()),
                    time: t,
                    bus_bw: if t > 0.0 {
                        bytes as f64 / (t * 1e-6) / 1e9
                    } else {
                        0.0
                    },
                    nwrong,
                });
            }
        }
    }
    if group.rank != 0 {
        let code = group.finish(0)?;
        return Ok(match code {
            0 => ExitCode::Ok,
            1 => ExitCode::Findings,
            _ => ExitCode::Runtime,
        });
    }
    let verdict = judge(bytes as u64, results, &hosts, job.fraction);
    let wrong: u64 = verdict.pairs.iter().map(|p| p.nwrong).sum();
    let failed = !verdict.slow.is_empty() || wrong > 0;
    group.finish(u8::from(failed))?;
    let text = if job.json {
        let mut t = serde_json::to_string_pretty(&verdict).map_err(JobError::Render)?;
        t.push('\n');
        t
    } else {
        render(&verdict)
    };
    match job.output {
        Some(path) => {
            crate::host::atomic::write_output(path, text.as_bytes()).map_err(|source| {
                JobError::Output {
                    path: path.to_path_buf(),
                    source,
                }
            })?
        }
        None => {
            use std::io::Write;
            let mut out = std::io::stdout().lock();
            out.write_all(text.as_bytes())
                .and_then(|_| out.flush())
                .map_err(BenchError::Stdout)?;
        }
    }
    if wrong > 0 {
        return Err(BenchError::Failed(format!(
            "{wrong} wrong elements in the pairs' results"
        )));
    }
    if failed {
        let names: Vec<String> = verdict
            .slow
            .iter()
            .map(|s| format!("{} (rank {})", s.host, s.rank))
            .collect();
        return Err(BenchError::Failed(format!(
            "slow nodes: {}",
            names.join(", ")
        )));
    }
    Ok(ExitCode::Ok)
}

/// The table of pairs, then the verdict.
pub(crate) fn render(v: &Verdict) -> String {
    let mut out = format!(
        "# gputune bench allreduce --pairs: {} bytes per AllReduce, {} pairs\n#\n",
        v.size,
        v.pairs.len()
    );
    out.push_str(&format!(
        "# {:>5}  {:>5} {:<20} {:>5} {:<20} {:>10} {:>8} {:>6}\n",
        "round", "rank", "host", "rank", "host", "time(us)", "busbw", "#wrong"
    ));
    for p in &v.pairs {
        out.push_str(&format!(
            "  {:>5}  {:>5} {:<20} {:>5} {:<20} {:>10.1} {:>8.3} {:>6}\n",
            p.round, p.ranks.0, p.hosts.0, p.ranks.1, p.hosts.1, p.time, p.bus_bw, p.nwrong
        ));
    }
    out.push_str(&format!(
        "# Job median pair bus bandwidth : {:.3} GB/s (threshold {} x)\n",
        v.job_median_bus_bw, v.threshold_fraction
    ));
    if v.slow.is_empty() {
        out.push_str("# Slow nodes : none\n");
    } else {
        for s in &v.slow {
            out.push_str(&format!(
                "# Slow node : {} (rank {}): median pair bus bandwidth {:.3} GB/s\n",
                s.host, s.rank, s.median_bus_bw
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounds_are_disjoint_and_partners_differ() {
        for world in 2..=12 {
            let rounds = schedule(world);
            assert_eq!(rounds.len(), (world + world % 2 - 1).min(MAX_ROUNDS));
            let mut met = std::collections::BTreeSet::new();
            for pairs in &rounds {
                let mut seen = std::collections::BTreeSet::new();
                for &(a, b) in pairs {
                    assert!(a < b && b < world, "{world}: {pairs:?}");
                    assert!(seen.insert(a) && seen.insert(b), "{world}: {pairs:?}");
                    assert!(met.insert((a, b)), "{world}: ({a},{b}) twice");
                }
                assert_eq!(seen.len(), world - world % 2);
            }
        }
    }

    #[test]
    fn names_the_node_whose_pairs_are_slow() {
        let hosts: Vec<String> = ["n0", "n1", "n2", "n3"].map(String::from).to_vec();
        let mut pairs = Vec::new();
        for (round, ps) in schedule(4).into_iter().enumerate() {
            for (a, b) in ps {
                let bw = if a == 2 || b == 2 { 0.1 } else { 5.0 };
                pairs.push(PairResult {
                    round,
                    ranks: (a, b),
                    hosts: (hosts[a].clone(), hosts[b].clone()),
                    time: 1.0,
                    bus_bw: bw,
                    nwrong: 0,
                });
            }
        }
        let v = judge(1, pairs.clone(), &hosts, 0.8);
        assert_eq!(v.slow.len(), 1);
        assert_eq!(v.slow[0].host, "n2");
        assert_eq!(v.job_median_bus_bw, 5.0);
        assert!(render(&v).contains("# Slow node : n2 (rank 2)"));
        let fine: Vec<PairResult> = pairs
            .into_iter()
            .map(|p| PairResult { bus_bw: 5.0, ..p })
            .collect();
        assert!(judge(1, fine, &hosts, 0.8).slow.is_empty());
    }
}
