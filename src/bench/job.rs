//! One run of `bench allreduce` from this process's point of view: start local ranks or join
//! a launcher's job, pick the backend, rendezvous, measure, and (on rank 0) print and judge.

use std::collections::BTreeMap;
use std::hash::{BuildHasher, RandomState};
use std::io::{IsTerminal, Write};
use std::net::{IpAddr, Ipv4Addr, TcpListener};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};

use super::control::group::Group;
use super::control::launch::{self, JobEnv, Launcher};
use super::control::rendezvous::{self, Identity, Joined, Member, Transport};
use super::measure::context::{self, Judged, Reference};
use super::measure::harness;
use super::measure::output::{self, RunInfo, Versions};
use super::measure::stats::{Row, average_busbw, total_wrong};
use super::nccl::{self, NcclBackend, NcclStack};
use super::tcp::{self, TcpBackend};
use super::{Backend, BenchError, JobError, Settings};
use serde::{Deserialize, Serialize};

use crate::error::ExitCode;
use crate::host::Root;
use crate::profile::{Baseline, Threshold};

/// Marks the ranks `--ranks` started, so they join instead of starting ranks of their own.
pub(crate) const CHILD_VAR: &str = "GPUTUNE_BENCH_CHILD";

/// Which transport was asked for (`--backend`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Choice {
    Auto,
    Nccl,
    Tcp,
}

/// How the figures are printed (`--format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Table,
    Json,
    /// node_exporter textfile gauges in base units (bandwidth in bytes per second); with
    /// --output, written atomically for the collector.
    Prometheus,
}

/// A validated command line.
#[derive(Debug, Clone)]
pub struct Job {
    pub settings: Settings,
    pub choice: Choice,
    pub format: Format,
    /// The threshold and where it came from (`--min-busbw`, or a profile).
    pub min_busbw: Option<(Threshold, String)>,
    /// Expected bus bandwidth per size and where it came from (a profile's baseline).
    pub baseline: Option<(Baseline, String)>,
    pub timeout: Duration,
    pub ranks: Option<usize>,
    /// `--output FILE`: the JSON or Prometheus document, written atomically.
    pub output: Option<std::path::PathBuf>,
    /// `--pairs`: disjoint pairs in rounds instead of one ring ([`super::pairs`]).
    pub pairs: bool,
    /// `--pairs-threshold`: a node below this fraction of the job's median is slow.
    pub pairs_fraction: f64,
}

/// The backend this rank will use.
enum Resolved {
    Tcp,
    Nccl(Box<NcclStack>),
}

impl Resolved {
    fn transport(&self) -> Transport {
        match self {
            Resolved::Tcp => Transport::Tcp,
            Resolved::Nccl(_) => Transport::Nccl,
        }
    }
}

fn resolve(choice: Choice, root: &Root, say: bool) -> Result<Resolved, BenchError> {
    match choice {
        Choice::Tcp => Ok(Resolved::Tcp),
        Choice::Nccl => nccl::probe(root).map(|p| Resolved::Nccl(Box::new(p))),
        Choice::Auto => match nccl::probe(root) {
            Ok(p) => Ok(Resolved::Nccl(Box::new(p))),
            Err(e) => {
                if say {
                    eprintln!("# --backend auto: using TCP, not NCCL: {e}");
                }
                Ok(Resolved::Tcp)
            }
        },
    }
}

/// Runs the job: as the launcher of `--ranks` local ranks, or as one rank of a job.
pub(crate) fn run(job: &Job, root: &Root) -> Result<ExitCode, BenchError> {
    let vars: BTreeMap<String, String> = std::env::vars().collect();
    let is_child = vars.contains_key(CHILD_VAR);
    if (is_child || job.ranks.is_none())
        && let Some(env) = launch::from_vars(&vars).map_err(|e| BenchError::Usage(e.to_string()))?
    {
        return run_rank(job, root, &env, None);
    }
    // Nobody launched us: start the ranks here (rank 0 says which backend and why).
    let resolved = resolve(job.choice, root, false)?;
    let ranks = match (job.ranks, &resolved) {
        (Some(n), _) => n,
        (None, Resolved::Nccl(p)) => p.devices,
        (None, Resolved::Tcp) => 2,
    };
    if let Resolved::Nccl(p) = &resolved {
        nccl::check_ranks(ranks, p.devices)?;
    }
    drop(resolved);
    if ranks == 1 {
        let env = JobEnv {
            launcher: Launcher::Torchrun,
            rank: 0,
            world: 1,
            local_rank: 0,
            master: ("127.0.0.1".into(), 0),
            token: String::new(),
        };
        return run_rank(job, root, &env, None);
    }
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).map_err(JobError::LocalPort)?;
    let port = listener.local_addr().map_err(JobError::PortOf)?.port();
    let token = random_token();
    let mut children = Vec::new();
    for rank in 1..ranks {
        match spawn_rank(rank, ranks, port, &token) {
            Ok(child) => children.push((rank, child)),
            Err(e) => {
                kill_all(&mut children);
                return Err(e);
            }
        }
    }
    let env = JobEnv {
        launcher: Launcher::Torchrun,
        rank: 0,
        world: ranks,
        local_rank: 0,
        master: ("127.0.0.1".into(), port),
        token,
    };
    let result = run_rank(job, root, &env, Some(listener));
    // On error rank 0 has already told every rank to stop, so the ones still running are
    // stalled (or about to exit): a short wait lets the others print their reason, then the
    // rest are killed rather than holding this process past `--timeout`.
    let grace = if result.is_ok() {
        job.timeout
    } else {
        ERROR_GRACE.min(job.timeout)
    };
    let statuses = reap(&mut children, grace);
    match result {
        Ok(code) => {
            for (rank, status) in statuses {
                if let Some(s) = status.filter(|s| s.code() != Some(code as i32)) {
                    return Err(JobError::Ended { rank, status: s }.into());
                }
            }
            Ok(code)
        }
        Err(e) => Err(e),
    }
}

/// How long local ranks get to exit by themselves once the job has failed.
const ERROR_GRACE: Duration = Duration::from_secs(1);

fn random_token() -> String {
    // RandomState is seeded from the OS's randomness.
    let a = RandomState::new().hash_one(std::process::id());
    let b = RandomState::new().hash_one(Instant::now());
    format!("{a:016x}{b:016x}")
}

fn spawn_rank(rank: usize, world: usize, port: u16, token: &str) -> Result<Child, BenchError> {
    let exe = std::env::current_exe().map_err(|source| JobError::NoProgram { rank, source })?;
    Command::new(exe)
        .args(std::env::args_os().skip(1))
        .env(CHILD_VAR, "1")
        .env("RANK", rank.to_string())
        .env("WORLD_SIZE", world.to_string())
        .env("LOCAL_RANK", rank.to_string())
        .env("MASTER_ADDR", "127.0.0.1")
        .env("MASTER_PORT", port.to_string())
        .env(launch::TOKEN_VAR, token)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .map_err(|source| JobError::Start { rank, source }.into())
}

fn kill_all(children: &mut [(usize, Child)]) {
    for (_, c) in children.iter_mut() {
        let _ = c.kill();
        let _ = c.wait();
    }
}

/// Waits for the local ranks, killing any still running after `grace`.
fn reap(
    children: &mut [(usize, Child)],
    grace: Duration,
) -> Vec<(usize, Option<std::process::ExitStatus>)> {
    let deadline = Instant::now() + grace;
    let mut out = Vec::new();
    for (rank, child) in children.iter_mut() {
        let status = loop {
            match child.try_wait() {
                Ok(Some(s)) => break Some(s),
                Ok(None) if Instant::now() < deadline => thread::sleep(Duration::from_millis(10)),
                _ => {
                    let _ = child.kill();
                    break child.wait().ok();
                }
            }
        };
        out.push((*rank, status));
    }
    out
}

/// Pins this rank's calling thread to a core of its own among the ranks on its host (see
/// [`tcp::placement`]), then lets the start-up settle before the first timed operation.
fn pin_local_rank(members: &[Member], rank: usize) {
    let Some(me) = members.iter().find(|m| m.rank == rank) else {
        return;
    };
    let local = members.iter().filter(|m| m.host == me.host);
    let index = local.clone().filter(|m| m.rank < rank).count();
    if tcp::placement::pin_calling_thread(index, local.count()).is_some() {
        thread::sleep(tcp::placement::SETTLE);
    }
}

fn run_rank(
    job: &Job,
    root: &Root,
    env: &JobEnv,
    listener: Option<TcpListener>,
) -> Result<ExitCode, BenchError> {
    let resolved = resolve(job.choice, root, env.rank == 0)?;
    let transport = resolved.transport();
    let mut nccl_version = None;
    let (device, ordinal) = match &resolved {
        Resolved::Tcp => ("cpu".to_string(), 0),
        Resolved::Nccl(p) => {
            nccl_version = Some(p.version.to_string());
            let (ordinal, name) = nccl::device_for(p, env.local_rank)?;
            (name, ordinal)
        }
    };
    let member = Member {
        rank: env.rank,
        host: root.hostname(),
        pid: std::process::id(),
        device,
    };
    let identity = Identity {
        rank: env.rank,
        world: env.world,
        token: env.token.clone(),
        member: member.clone(),
        backend: transport,
        settings: job.settings.clone(),
    };
    let nccl_id = match &resolved {
        Resolved::Nccl(p) if env.rank == 0 => Some(p.nccl.unique_id()?.to_vec()),
        _ => None,
    };
    let joined: Option<Joined> = if env.world == 1 {
        None
    } else if env.rank == 0 {
        let listener = match listener {
            Some(l) => l,
            None => rendezvous::listen(&env.master)?,
        };
        Some(rendezvous::serve(
            listener,
            identity,
            nccl_id.clone(),
            job.timeout,
        )?)
    } else {
        Some(rendezvous::join(&env.master, identity, job.timeout)?)
    };
    let (mut group, data) = match joined {
        None => (Group::alone(vec![member], job.timeout), None),
        Some(j) => (j.group, Some((j.data_listener, j.data_addrs, j.nccl_id))),
    };
    // Rank 0 puts the figures against the NICs it routes to the other hosts through.
    let peers: Vec<IpAddr> = match (&data, group.members.first()) {
        (Some((_, addrs, _)), Some(first)) => group
            .members
            .iter()
            .filter(|m| m.host != first.host)
            .filter_map(|m| addrs.get(m.rank).map(|a| a.ip()))
            .collect(),
        _ => Vec::new(),
    };

    if job.pairs {
        let Some((listener, addrs, _)) = data else {
            return Err(BenchError::Usage("--pairs needs at least 2 ranks".into()));
        };
        if !matches!(resolved, Resolved::Tcp) {
            return Err(group.fail(BenchError::Usage(
                "--pairs measures over TCP: add --backend tcp".into(),
            )));
        }
        let request = super::pairs::Request {
            settings: &job.settings,
            timeout: job.timeout,
            fraction: job.pairs_fraction,
            json: matches!(job.format, Format::Json),
            output: job.output.as_deref(),
        };
        return super::pairs::run(&request, &mut group, listener, &addrs, &env.token)
            .map_err(|e| group.fail(e));
    }
    let backend: Result<Box<dyn Backend>, BenchError> = match resolved {
        Resolved::Tcp => {
            let options = tcp::Options {
                streams: job.settings.streams,
                sockbuf: job.settings.sockbuf,
                timeout: job.timeout,
                token: env.token.clone(),
            };
            let hosts: Vec<String> = group.members.iter().map(|m| m.host.clone()).collect();
            match data {
                Some((listener, addrs, _)) => tcp::connect(
                    env.rank,
                    env.world,
                    listener,
                    &addrs,
                    &hosts,
                    &options,
                    group.fatal.clone(),
                ),
                None => Ok(tcp::Connections::alone()),
            }
            .map(|conns| {
                pin_local_rank(&group.members, env.rank);
                Box::new(TcpBackend::new(conns, job.settings.algo)) as Box<dyn Backend>
            })
        }
        Resolved::Nccl(probe) => {
            let id = data
                .and_then(|(_, _, id)| id)
                .or(nccl_id)
                .unwrap_or_default();
            let id = if env.world == 1 && id.is_empty() {
                probe
                    .nccl
                    .unique_id()
                    .map(|i| i.to_vec())
                    .map_err(BenchError::from)
            } else {
                Ok(id)
            };
            id.and_then(|id| {
                NcclBackend::new(
                    *probe,
                    nccl::Place {
                        ordinal,
                        rank: env.rank,
                        world: env.world,
                    },
                    &id,
                    usize::try_from(job.settings.sweep.max_bytes).unwrap_or(usize::MAX),
                    job.timeout,
                    group.fatal.clone(),
                )
            })
            .map(|b| Box::new(b) as Box<dyn Backend>)
        }
    };
    let mut backend = match backend {
        Ok(b) => b,
        Err(e) => return Err(group.fail(e)),
    };

    let info = RunInfo {
        backend: transport,
        settings: job.settings.clone(),
        members: group.members.clone(),
        versions: Versions {
            gputune: env!("CARGO_PKG_VERSION"),
            nccl: nccl_version,
        },
    };
    if env.rank != 0 {
        if let Err(e) = harness::run(
            backend.as_mut(),
            &mut group,
            &job.settings.sweep,
            |_| Ok(()),
        ) {
            return Err(group.fail(e));
        }
        drop(backend);
        let code = group.finish(0).map_err(|e| group.fail(e))?;
        return Ok(match code {
            0 => ExitCode::Ok,
            1 => ExitCode::Findings,
            2 => ExitCode::Usage,
            _ => ExitCode::Runtime,
        });
    }
    rank0(job, info, backend.as_mut(), &mut group, root, &peers)
}

/// Whether environment variable `name` is `value`.
fn env_is(name: &str, value: &str) -> bool {
    std::env::var(name).is_ok_and(|v| v.trim() == value)
}

/// How long the loopback reference's memcpy probe may take.
const COPY_BUDGET: Duration = Duration::from_millis(250);

/// What the path of this run can carry ([`context`]): the NICs across hosts, the GPUs'
/// interconnect for NCCL on one host, the memory copy rate for TCP on one host.
fn reference(
    root: &Root,
    info: &RunInfo,
    peers: &[IpAddr],
) -> Result<Reference, context::NoReference> {
    let hosts = info.hosts();
    if hosts.len() > 1 && info.backend == Transport::Nccl && !env_is("NCCL_IB_DISABLE", "1") {
        // NCCL's IB transport (InfiniBand, RoCE) takes the RDMA ports, not the IP route.
        let devices = crate::inventory::rdma::devices(root)?;
        let spec = std::env::var("NCCL_IB_HCA").ok();
        let ports = context::ib_ports(&devices, spec.as_deref());
        if let Some(r) = context::of_nics(
            &ports,
            &format!(
                "the active RDMA ports NCCL's IB transport uses (NCCL_IB_HCA {})",
                spec.as_deref()
                    .map_or("unset: all".to_string(), |s| format!(
                        "`{}`",
                        crate::say::clean_line(s)
                    ))
            ),
        ) {
            return Ok(r);
        }
    }
    if hosts.len() > 1 {
        let nics = context::nics_to(root, peers, &crate::probe::route::Netlink)?;
        let why = format!(
            "the interface{} rank 0 routes to {} through",
            if nics.len() == 1 { "" } else { "s" },
            crate::say::clean_line(&hosts[1..].join(", "))
        );
        return context::of_nics(&nics, &why).ok_or(context::NoReference::NoCarrier);
    }
    if info.backend == Transport::Nccl {
        let gpus = crate::inventory::gpu::present(root)?;
        let used: Vec<_> = gpus.into_iter().take(info.members.len()).collect();
        let nvml = crate::probe::Probes::for_root(root)
            .nvml
            .probe()
            .map(|f| f.gpus)
            .unwrap_or_default();
        return context::of_gpus(&used, &nvml);
    }
    Ok(context::loopback_copy(COPY_BUDGET))
}

fn print(text: &str) -> Result<(), BenchError> {
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())
        .and_then(|_| out.flush())
        .map_err(BenchError::Stdout)
}

fn rank0(
    job: &Job,
    info: RunInfo,
    backend: &mut dyn Backend,
    group: &mut Group,
    root: &Root,
    peers: &[IpAddr],
) -> Result<ExitCode, BenchError> {
    // Before the sweep: a percentage that cannot be resolved is a usage error, found early.
    let reference = reference(root, &info, peers);
    if let (Some((Threshold::Fraction(_), source)), Err(why)) = (&job.min_busbw, &reference) {
        return Err(group.fail(BenchError::Usage(format!(
            "{source}: a percentage needs the rate the path can carry, and none could be \
             determined ({why}); give the minimum in GB/s instead"
        ))));
    }
    let table = job.format == Format::Table;
    if table {
        print(&output::table_header(&info))?;
    }
    let bar = if std::io::stderr().is_terminal() {
        let bar = ProgressBar::new(job.settings.sweep.sizes().len() as u64);
        if let Ok(style) = ProgressStyle::with_template("{bar:30} {pos}/{len} sizes {msg}") {
            bar.set_style(style);
        }
        Some(bar)
    } else {
        None
    };
    let rows = harness::run(backend, group, &job.settings.sweep, |row: &Row| {
        if let Some(bar) = &bar {
            bar.inc(1);
            bar.set_message(format!("{} B", row.size));
        }
        if table {
            let line = output::table_row(row);
            match &bar {
                Some(bar) => bar.suspend(|| print(&line)),
                None => print(&line),
            }
        } else {
            Ok(())
        }
    });
    if let Some(bar) = &bar {
        bar.finish_and_clear();
    }
    let rows = match rows {
        Ok(rows) => rows,
        Err(e) => return Err(group.fail(e)),
    };
    let mut failures = Vec::new();
    let wrong = total_wrong(&rows);
    if wrong > 0 {
        failures.push(format!(
            "{wrong} wrong element{} in the results",
            if wrong == 1 { "" } else { "s" }
        ));
    }
    let avg = average_busbw(&rows);
    let reference_ok = reference.as_ref().ok();
    let min_busbw = job.min_busbw.as_ref().map(|(threshold, source)| {
        // Refused before the sweep when a percentage has no reference.
        let gbps = context::minimum(*threshold, reference_ok).unwrap_or(0.0);
        (gbps, *threshold, source)
    });
    if let Some((min, threshold, source)) = &min_busbw
        && context::below(*threshold, avg, reference_ok)
    {
        let of = match (threshold, reference_ok) {
            (Threshold::Fraction(_), Some(r)) => format!(
                " = {threshold} of {} ({:.3} GB/s); the average is {:.1}% of it",
                r.label,
                r.gbps(),
                r.fraction(avg) * 100.0
            ),
            _ => String::new(),
        };
        // A minimum given in GB/s is quoted as given.
        let min = match threshold {
            Threshold::Gbps(g) => g.to_string(),
            Threshold::Fraction(_) => format!("{min:.3}"),
        };
        failures.push(crate::say::clean(&format!(
            "average bus bandwidth {avg:.3} GB/s is below the minimum {min} GB/s{of} ({source})"
        )));
    }
    let baseline = job.baseline.as_ref().map(|(b, source)| {
        let checks = context::judge_baseline(b, &rows);
        for c in checks.iter().filter(|c| !c.passed) {
            failures.push(format!(
                "at {} B the bus bandwidth {:.3} GB/s is below {:.3} GB/s, the baseline {} GB/s \
                 less the {}% tolerance ({source})",
                c.size,
                c.measured,
                c.floor,
                c.expected,
                crate::profile::bandwidth::percent(b.tolerance)
            ));
        }
        (b.clone(), source.clone(), checks)
    });
    let judged = Judged {
        reference,
        min_busbw: min_busbw.map(|(g, t, _)| (g, t)),
        baseline,
    };
    let code = if failures.is_empty() { 0 } else { 1 };
    group.finish(code)?;
    let document = match job.format {
        Format::Table => None,
        Format::Json => Some(output::json(&info, &rows, &judged)),
        Format::Prometheus => Some(super::measure::prometheus::render(
            job.settings.sweep.collective.name(),
            &info,
            &rows,
            &judged,
            failures.is_empty(),
        )),
    };
    match (document, &job.output) {
        (None, _) => print(&output::table_footer(&rows, &judged))?,
        (Some(text), None) => print(&text)?,
        (Some(text), Some(path)) => crate::host::atomic::write_output(path, text.as_bytes())
            .map_err(|source| JobError::Output {
                path: path.clone(),
                source,
            })?,
    }
    if failures.is_empty() {
        Ok(ExitCode::Ok)
    } else {
        Err(BenchError::Failed(failures.join("; ")))
    }
}
