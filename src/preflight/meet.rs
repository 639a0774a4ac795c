//! The preflight's rounds, all inside `--timeout`: ranks join rank 0 (token handshake,
//! facts, one clock sample) until 45% of it, probe until 80%, report until 92%; rank 0
//! then judges with whatever arrived and tells every rank its one-line verdict.

use std::collections::BTreeMap;
use std::net::{IpAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::bench::control::auth;
use crate::bench::control::frame::{self, Message};
use crate::bench::control::launch::JobEnv;
use crate::bench::control::rendezvous;
use crate::error::{ExitCode, Result};
use crate::host::Root;
use crate::report::table::clean;

use super::facts::{self, JobPorts};
use super::judge::{self, Evidence, Probed, Problem};
use super::render::{self, PairsReport, Report};
use super::wire::{Facts, Target, Wire};
use super::{Format, Options, plan, probe};

/// Each connection's handshake, facts and clock sample must be done within this.
const HANDSHAKE: Duration = Duration::from_secs(3);
/// Handshakes in progress at once on rank 0; more are dropped (a flood, not a job).
const MAX_PENDING: usize = 512;
/// How long rank 0 tries to reach a missing rank's host.
const LOOK_LIMIT: Duration = Duration::from_secs(1);
/// The pause before a rank tries again after rank 0 dropped its connection.
const RETRY_PAUSE: Duration = Duration::from_millis(200);
/// How long a rank waits for rank 0's verdict past the deadline.
const VERDICT_GRACE: Duration = Duration::from_secs(3);

/// Wall clock in ns since the epoch (i64 lasts until 2262).
fn now_ns() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
}

fn part(start: Instant, timeout: Duration, percent: u32) -> Instant {
    start + timeout * percent / 100
}

fn send(stream: &mut TcpStream, w: &Wire) -> std::io::Result<()> {
    frame::write(stream, &w.to_message())
}

/// Why a message from the other side did not arrive as one of ours.
#[derive(Debug, thiserror::Error)]
enum Received {
    /// The other side said no; the reason is cleaned for the terminal.
    #[error("refused: {}", clean(.0))]
    Refused(String),
    #[error("an unexpected message")]
    Unexpected,
    #[error(transparent)]
    Frame(#[from] frame::FrameError),
}

fn receive(stream: &TcpStream, deadline: Instant) -> std::result::Result<Wire, Received> {
    match frame::read_by(stream, deadline)? {
        Message::Reject { reason } => Err(Received::Refused(reason)),
        m => Wire::from_message(m).ok_or(Received::Unexpected),
    }
}

/// Why rank 0 turned a connection away (said on its standard error, not fatal).
#[derive(Debug, thiserror::Error)]
enum Handshake {
    #[error(transparent)]
    Auth(#[from] auth::AuthError),
    #[error("not a preflight rank")]
    NotPreflight,
    #[error("rank {rank} of {theirs}, but this job has {world} ranks")]
    Mismatch {
        rank: usize,
        theirs: usize,
        world: usize,
    },
    #[error("no facts")]
    NoFacts,
    #[error(transparent)]
    Receive(#[from] Received),
    #[error(transparent)]
    Send(#[from] std::io::Error),
    #[error("rank 0 stopped waiting")]
    Stopped,
}

/// What stopped a preflight rank (exit 3); `rank ({host})` names the one that stopped.
#[derive(Debug, thiserror::Error)]
pub enum MeetError {
    #[error("rendezvous: {0}")]
    Rendezvous(#[source] std::io::Error),
    #[error("{0}")]
    Nonce(#[source] auth::AuthError),
    #[error("rank {rank} ({host}): rank 0 at {master} sent no plan: {why}")]
    NoPlan {
        rank: usize,
        host: String,
        master: String,
        why: String,
    },
    #[error("rank {rank} ({host}): cannot send results to rank 0: {source}")]
    Results {
        rank: usize,
        host: String,
        #[source]
        source: std::io::Error,
    },
    #[error("rank {rank} ({host}): rank 0 gave no verdict within the timeout")]
    NoVerdict { rank: usize, host: String },
}

/// A rank that finished its handshake.
struct Arrival {
    facts: Facts,
    stream: TcpStream,
}

/// Rank 0: meets, plans, probes, judges and reports.
pub(crate) fn rank0(
    options: &Options,
    root: &Root,
    env: &JobEnv,
    ports: &JobPorts,
    pairs: Option<&PairsReport>,
) -> Result<ExitCode> {
    let start = Instant::now();
    let timeout = options.timeout;
    raise_open_files(env.world);
    let listener = rendezvous::listen(&env.master)?;
    listener
        .set_nonblocking(true)
        .map_err(MeetError::Rendezvous)?;
    let (my_facts, _listeners) = facts::gather(root, env, ports);
    let mut all: Vec<Option<Facts>> = vec![None; env.world];
    all[0] = Some(my_facts.clone());
    let mut streams: BTreeMap<usize, TcpStream> = BTreeMap::new();
    let (tx, rx) = mpsc::channel::<Arrival>();
    let pending = Arc::new(AtomicUsize::new(0));
    let join_by = part(start, timeout, 45);
    while streams.len() + 1 < env.world && Instant::now() < join_by {
        while let Ok((stream, addr)) = listener.accept() {
            if pending.load(Ordering::SeqCst) >= MAX_PENDING {
                continue;
            }
            pending.fetch_add(1, Ordering::SeqCst);
            let (tx, token, count, world) =
                (tx.clone(), env.token.clone(), pending.clone(), env.world);
            let spawned = thread::Builder::new().stack_size(1 << 20).spawn(move || {
                if let Err(why) = handshake(stream, &token, world, &tx) {
                    eprintln!("# preflight: refused {addr}: {}", clean(&why.to_string()));
                }
                count.fetch_sub(1, Ordering::SeqCst);
            });
            if spawned.is_err() {
                pending.fetch_sub(1, Ordering::SeqCst);
            }
        }
        while let Ok(a) = rx.try_recv() {
            let rank = a.facts.rank;
            if streams.contains_key(&rank) {
                eprintln!(
                    "# preflight: rank {rank} joined twice (from {}); the second is ignored",
                    clean(&a.facts.host)
                );
                continue;
            }
            all[rank] = Some(a.facts);
            streams.insert(rank, a.stream);
        }
        thread::sleep(Duration::from_millis(5));
    }
    // The plan: who probes whom, and which names every node resolves.
    let nodes = plan::listeners(&all);
    let mut hosts: Vec<String> = all.iter().flatten().map(|f| f.host.clone()).collect();
    hosts.sort();
    hosts.dedup();
    let probe_by = part(start, timeout, 80);
    let budget = probe_by.saturating_duration_since(Instant::now());
    let names_for = |targets: &[Target]| -> Vec<String> {
        if hosts.len() <= plan::ALL_PAIRS_MAX {
            hosts.clone()
        } else {
            let mut n: Vec<String> = targets.iter().map(|t| t.host.clone()).collect();
            n.push(my_facts.host.clone());
            n
        }
    };
    let mut lost: Vec<usize> = Vec::new();
    for (rank, stream) in streams.iter_mut() {
        let targets = plan::targets(*rank, &nodes, &all);
        let names = names_for(&targets);
        let plan = Wire::Plan {
            targets,
            names,
            budget_ms: budget.as_millis() as u64,
        };
        if send(stream, &plan).is_err() {
            lost.push(*rank);
        }
    }
    // Rank 0 probes too, while the others' results arrive.
    let my_targets = plan::targets(0, &nodes, &all);
    let my_names = names_for(&my_targets);
    let (addr, mtu) = (my_facts.probe_addr, my_facts.mtu);
    let own = thread::spawn(move || {
        let (cells, mtus) = probe::run(0, addr, mtu, &my_targets, probe_by);
        let names = resolve_all(&my_names);
        Probed {
            cells,
            mtus,
            names,
            clock_offset_ms: Some(0.0),
        }
    });
    let report_by = part(start, timeout, 92);
    let readers: Vec<_> = streams
        .iter()
        .filter(|(r, _)| !lost.contains(r))
        .filter_map(|(rank, s)| Some((*rank, s.try_clone().ok()?)))
        .filter_map(|(rank, s)| {
            let reader = thread::Builder::new().stack_size(256 << 10);
            reader
                .spawn(move || match receive(&s, report_by) {
                    Ok(Wire::Results {
                        cells,
                        mtus,
                        names,
                        clock_offset_ms,
                    }) => Some((
                        rank,
                        Probed {
                            cells: cells.into_iter().filter(|c| c.from == rank).collect(),
                            mtus,
                            names,
                            clock_offset_ms,
                        },
                    )),
                    _ => None,
                })
                .ok()
        })
        .collect();
    let mut probed: BTreeMap<usize, Probed> = BTreeMap::new();
    if let Ok(p) = own.join() {
        probed.insert(0, p);
    }
    for r in readers {
        if let Ok(Some((rank, p))) = r.join() {
            probed.insert(rank, p);
        }
    }
    let vars: BTreeMap<String, String> = std::env::vars().collect();
    let hint = |rank: usize| slurm_host(&vars, rank, env.world);
    let knock = facts::sample(&ports.rendezvous, facts::RENDEZVOUS_SAMPLE, &[env.master.1]);
    let seen: BTreeMap<usize, String> = match knock.first() {
        Some(&port) => (0..env.world)
            .filter(|r| all[*r].is_none())
            .filter_map(|r| Some((r, look_for(&hint(r)?, port))))
            .collect(),
        None => BTreeMap::new(),
    };
    let problems = judge::judge(&Evidence {
        world: env.world,
        facts: &all,
        probed: &probed,
        missing_hint: &hint,
        missing_seen: &seen,
        timeout_s: timeout.as_secs(),
    });
    let silent: Vec<usize> = streams
        .keys()
        .copied()
        .filter(|r| !probed.contains_key(r))
        .collect();
    let report = Report::build(&all, &probed, &problems, &nodes, ports, &silent);
    let code = if problems.is_empty() && silent.is_empty() {
        ExitCode::Ok
    } else {
        ExitCode::Findings
    };
    for (rank, stream) in streams.iter_mut() {
        let line = verdict_line(*rank, &all, &problems);
        let _ = send(
            stream,
            &Wire::Verdict {
                exit_code: code as u8,
                line,
            },
        );
    }
    drop(listener);
    let text = match options.format {
        Format::Table => render::table(&report),
        Format::Json => render::json(&report),
        Format::Html => render::html(&report, pairs),
    };
    crate::commands::emit(&text, options.output.as_deref())?;
    Ok(code)
}

/// Rank 0 holds a connection per rank: a job of thousands needs more than the usual soft
/// limit of 1024 open files, so the soft limit is raised towards the hard one.
fn raise_open_files(world: usize) {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let want = (world as u64).saturating_mul(2).saturating_add(256);
    if let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE)
        && soft < want
    {
        let _ = setrlimit(Resource::RLIMIT_NOFILE, want.min(hard), hard);
    }
}

/// One rank's line: its own problems, and the job's count.
fn verdict_line(rank: usize, all: &[Option<Facts>], problems: &[Problem]) -> String {
    let host = all
        .get(rank)
        .and_then(|f| f.as_ref())
        .map_or("?", |f| f.host.as_str());
    let mine: Vec<&Problem> = problems.iter().filter(|p| p.rank == Some(rank)).collect();
    let mut cats: Vec<&str> = mine.iter().map(|p| p.category).collect();
    cats.dedup();
    if mine.is_empty() {
        format!(
            "preflight: rank {rank} ({host}): ok here; the job has {} problem{} (rank 0's report)",
            problems.len(),
            if problems.len() == 1 { "" } else { "s" }
        )
    } else {
        format!(
            "preflight: rank {rank} ({host}): {} problem{} here ({}): {}",
            mine.len(),
            if mine.len() == 1 { "" } else { "s" },
            cats.join(", "),
            mine[0].message
        )
    }
}

/// Rank 0 looks for a missing rank's host itself: a preflight listening there was started
/// and cannot reach rank 0; no answer means the node is down or gputune never ran there.
fn look_for(host: &str, port: u16) -> String {
    let ip = match facts::resolve(host) {
        Ok(ips) => match ips.first() {
            Some(ip) => *ip,
            None => return format!("{host} resolves to nothing on rank 0"),
        },
        Err(e) => return format!("rank 0 cannot look for it: {e}"),
    };
    match TcpStream::connect_timeout(&std::net::SocketAddr::new(ip, port), LOOK_LIMIT) {
        Ok(_) => format!(
            "{host} ({ip}) is up and its preflight listens on port {port}, so it was started \
             but cannot reach rank 0 (its own output says which address it tried)"
        ),
        Err(e) => format!(
            "{host} ({ip}) does not answer on port {port} ({}): the node is down or \
             unreachable from rank 0, or gputune was not started there",
            probe::classify(&e)
        ),
    }
}

/// Under Slurm with one task per node, the host a missing rank was to run on.
fn slurm_host(vars: &BTreeMap<String, String>, rank: usize, world: usize) -> Option<String> {
    let list = vars
        .get("SLURM_STEP_NODELIST")
        .or_else(|| vars.get("SLURM_JOB_NODELIST"))?;
    let hosts = crate::bench::control::hostlist::expand(list).ok()?;
    (hosts.len() == world)
        .then(|| hosts.get(rank).cloned())
        .flatten()
}

/// Rank 0's side of one connection: token, facts, one clock sample.
fn handshake(
    mut stream: TcpStream,
    token: &str,
    world: usize,
    tx: &mpsc::Sender<Arrival>,
) -> std::result::Result<(), Handshake> {
    let deadline = Instant::now() + HANDSHAKE;
    let _ = stream.set_nonblocking(false);
    let opening = auth::accept(&mut stream, token, deadline)?;
    let Message::PreflightHello {
        rank,
        world: theirs,
        ..
    } = opening
    else {
        return Err(Handshake::NotPreflight);
    };
    if theirs != world || rank == 0 || rank >= world {
        let refusal = Handshake::Mismatch {
            rank,
            theirs,
            world,
        };
        let _ = frame::write(
            &mut stream,
            &Message::Reject {
                reason: refusal.to_string(),
            },
        );
        return Err(refusal);
    }
    let mut facts = match receive(&stream, deadline)? {
        Wire::Facts(f) => *f,
        _ => return Err(Handshake::NoFacts),
    };
    facts.rank = rank;
    if let Wire::Ping { t1 } = receive(&stream, deadline)? {
        send(&mut stream, &Wire::Pong { t1, t0: now_ns() })?;
    }
    let _ = stream.set_read_timeout(None);
    tx.send(Arrival { facts, stream })
        .map_err(|_| Handshake::Stopped)
}

fn resolve_all(names: &[String]) -> Vec<(String, std::result::Result<Vec<IpAddr>, String>)> {
    names
        .iter()
        .map(|n| (n.clone(), facts::resolve(n)))
        .collect()
}

/// Any other rank: joins, probes, reports, and prints rank 0's verdict for it.
pub(crate) fn member(
    options: &Options,
    root: &Root,
    env: &JobEnv,
    ports: &JobPorts,
) -> Result<ExitCode> {
    let start = Instant::now();
    let timeout = options.timeout;
    let (my_facts, _listeners) = facts::gather(root, env, ports);
    let host = clean(&my_facts.host);
    let say = |line: String| println!("{}", clean(&line));
    let join_by = part(start, timeout, 45);
    let unreachable = |why: String| -> ExitCode {
        let resolved = match &my_facts.master_resolved {
            Ok(ips) => format!(
                "resolves here to {}",
                ips.iter()
                    .map(IpAddr::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            Err(e) => e.clone(),
        };
        say(format!(
            "preflight: rank {} ({host}): cannot reach rank 0 at MASTER_ADDR={} port {} \
             ({resolved}): {why}",
            env.rank, env.master.0, env.master.1
        ));
        let multi = true;
        for p in [
            judge::own_name_problem(&my_facts, multi),
            judge::interface_problem(&my_facts, multi),
        ]
        .into_iter()
        .flatten()
        {
            say(format!(
                "preflight: rank {} ({host}): {}: {}",
                env.rank, p.category, p.message
            ));
        }
        // Listening a little longer lets rank 0 see that this node was started.
        thread::sleep(part(start, timeout, 60).saturating_duration_since(Instant::now()));
        ExitCode::Findings
    };
    // Rank 0 drops connections past its handshake limit (thousands arriving at once): a
    // connection closed before the token was proved is retried while the join lasts.
    let mut stream = loop {
        let mut wait = crate::bench::control::wait::Wait::new(
            "preflight",
            format!("rank 0's preflight at {}:{}", env.master.0, env.master.1),
            join_by,
        );
        let mut stream = match rendezvous::connect_retrying(&env.master, &mut wait) {
            Ok(s) => s,
            Err(e) => return Ok(unreachable(e.to_string())),
        };
        let hello = Message::PreflightHello {
            nonce: auth::nonce().map_err(MeetError::Nonce)?,
            rank: env.rank,
            world: env.world,
            host: my_facts.host.clone(),
        };
        match auth::open(&mut stream, &env.token, &hello, Instant::now() + HANDSHAKE) {
            Ok(()) => break stream,
            Err(e @ auth::AuthError::WrongToken) => {
                return Ok(unreachable(format!("the handshake failed: {e}")));
            }
            Err(e) if Instant::now() + RETRY_PAUSE >= join_by => {
                return Ok(unreachable(format!("the handshake failed: {e}")));
            }
            Err(_) => thread::sleep(
                RETRY_PAUSE + Duration::from_millis(u64::from(std::process::id() % 200)),
            ),
        }
    };
    let t1 = now_ns();
    let sent = send(&mut stream, &Wire::Facts(Box::new(my_facts.clone())))
        .and_then(|_| send(&mut stream, &Wire::Ping { t1 }));
    if let Err(e) = sent {
        return Ok(unreachable(e.to_string()));
    }
    let mut offset = None;
    let end = part(start, timeout, 100);
    let mut plan = None;
    while plan.is_none() {
        match receive(&stream, end) {
            Ok(Wire::Pong { t1: echoed, t0 }) if echoed == t1 => {
                let t2 = now_ns();
                offset = Some((t1 / 2 + t2 / 2 - t0) as f64 / 1e6);
            }
            Ok(Wire::Plan {
                targets,
                names,
                budget_ms,
            }) => plan = Some((targets, names, budget_ms)),
            Ok(_) => {}
            Err(e) => {
                return Err(MeetError::NoPlan {
                    rank: env.rank,
                    host: host.to_string(),
                    master: format!("{}:{}", env.master.0, env.master.1),
                    why: e.to_string(),
                }
                .into());
            }
        }
    }
    let Some((targets, names, budget_ms)) = plan else {
        return Ok(ExitCode::Runtime);
    };
    let probe_by = Instant::now() + Duration::from_millis(budget_ms).min(timeout);
    let (cells, mtus) = probe::run(
        env.rank,
        my_facts.probe_addr,
        my_facts.mtu,
        &targets,
        probe_by,
    );
    let results = Wire::Results {
        cells,
        mtus,
        names: resolve_all(&names),
        clock_offset_ms: offset,
    };
    if let Err(e) = send(&mut stream, &results) {
        return Err(MeetError::Results {
            rank: env.rank,
            host: host.to_string(),
            source: e,
        }
        .into());
    }
    match receive(&stream, end.max(Instant::now()) + VERDICT_GRACE) {
        Ok(Wire::Verdict { exit_code, line }) => {
            say(line);
            Ok(match exit_code {
                0 => ExitCode::Ok,
                1 => ExitCode::Findings,
                _ => ExitCode::Runtime,
            })
        }
        Ok(_) | Err(_) => Err(MeetError::NoVerdict {
            rank: env.rank,
            host: host.to_string(),
        }
        .into()),
    }
}
