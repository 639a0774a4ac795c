//! The control plane after the rendezvous ([`super::rendezvous`]): a star of control
//! connections to rank 0, used for barriers, gathering figures, and stopping the job.
//!
//! Failure handling: every rank watches its control connections on a reader thread. When a
//! rank's connection closes (it exited or was killed), rank 0 decides at once that this rank
//! is the one missing, tells every other rank ([`Message::Abort`]) and shuts its own data
//! sockets so any blocked transfer returns. Ranks that hit an error themselves tell rank 0 and
//! wait briefly for its verdict, so every rank names the same missing rank.

use std::cell::RefCell;
use std::collections::{BTreeMap, VecDeque};
use std::net::{Shutdown, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use super::figures;
use super::frame::{self, FrameError, Message};
use super::rendezvous::Member;
use crate::bench::BenchError;

/// The longest a failing rank waits for rank 0's verdict before giving its own reason.
const VERDICT_GRACE: Duration = Duration::from_secs(3);
/// The shortest such wait: enough for rank 0 to hear the failure and answer on a busy node.
const MIN_VERDICT_GRACE: Duration = Duration::from_secs(1);
/// How long rank 0 waits for a closed connection to be noticed before blaming an error.
const BLAME_GRACE: Duration = Duration::from_millis(500);
/// How long rank 0 lets its own transfers report first-hand before relaying another rank's
/// failure (which may be a consequence of the real cause, not the cause).
const RELAY_GRACE: Duration = Duration::from_secs(2);

/// How long rank 0 waits for its verdict to be written to every rank before acting on it.
const ANNOUNCE_WAIT: Duration = Duration::from_secs(1);

/// The job's shared "stop" state: the first reason wins, and raising it wakes every blocked
/// data transfer by shutting the sockets registered here.
#[derive(Default)]
pub struct JobStop {
    reason: Mutex<Option<String>>,
    sockets: Mutex<Vec<TcpStream>>,
    /// Set once the run is over, so closing connections are not failures.
    finished: AtomicBool,
    raised: AtomicBool,
    /// Rank 0: the raised reason has been written to every rank (see [`abort_all`]).
    announced: AtomicBool,
}

impl JobStop {
    /// Records the reason (unless one is recorded) and interrupts data transfers.
    pub(crate) fn raise(&self, reason: String) -> bool {
        if self.finished.load(Ordering::SeqCst) {
            return false;
        }
        {
            let mut r = lock(&self.reason);
            if r.is_some() {
                return false;
            }
            *r = Some(reason);
        }
        self.raised.store(true, Ordering::SeqCst);
        for s in lock(&self.sockets).iter() {
            let _ = s.shutdown(Shutdown::Both);
        }
        true
    }

    pub(crate) fn reason(&self) -> Option<String> {
        lock(&self.reason).clone()
    }

    /// Cheap check for polling loops (the NCCL backend's wait).
    pub(crate) fn is_raised(&self) -> bool {
        self.raised.load(Ordering::SeqCst)
    }

    /// Rank 0: waits (at most `limit`) until the verdict has been written to every rank, so
    /// the process does not exit, closing their connections, before they have read why.
    fn wait_announced(&self, limit: Duration) {
        let until = Instant::now() + limit;
        while !self.announced.load(Ordering::SeqCst) && Instant::now() < until {
            thread::sleep(Duration::from_millis(2));
        }
    }

    /// Registers a data socket to shut when the job stops.
    pub(crate) fn register(&self, socket: &TcpStream) {
        if let Ok(clone) = socket.try_clone() {
            lock(&self.sockets).push(clone);
        }
    }
}

/// The verdict when a rank's control connection fails: it left the job, and how.
fn left_the_job(rank: usize, host: &str, e: FrameError) -> String {
    let why = match e {
        FrameError::Closed => "its connection closed (it exited or was killed)".to_string(),
        other => other.to_string(),
    };
    format!("rank {rank} ({host}) left the job: {why}")
}

/// How long a failing rank waits for rank 0's verdict: a quarter of `--timeout` (1-3 s), so
/// a stall detected after `--timeout` ends the job soon after it, not a fixed 3 s later
/// (the README promises `--timeout` plus a few seconds).
pub(crate) fn verdict_grace(timeout: Duration) -> Duration {
    (timeout / 4).clamp(MIN_VERDICT_GRACE, VERDICT_GRACE)
}

/// Rank 0's waits fit inside the others' verdict wait, so its answer reaches them in time.
fn relay_grace(timeout: Duration) -> Duration {
    RELAY_GRACE.min(verdict_grace(timeout) * 2 / 3)
}

fn blame_grace(timeout: Duration) -> Duration {
    (BLAME_GRACE * 2).min(verdict_grace(timeout) / 2)
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Why the control connections failed this rank, each with its own text (exit 3). The
/// job's verdict itself, a reason rank 0 sent or raised, stays a [`BenchError::Runtime`]: its
/// text is all there is of it.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    /// A control connection could not be set up for its reader thread.
    #[error("control connection: {0}")]
    Connection(#[source] std::io::Error),
    /// This rank could not write to rank 0.
    #[error("lost the connection to rank 0: {0}")]
    LostRoot(#[source] std::io::Error),
    /// Rank 0 waited `--timeout` for these ranks (rank and host) to reach `what`.
    #[error(
        "rank{} {} did not reach {what} within {secs}s (stalled or unreachable)",
        if missing.len() == 1 { "" } else { "s" },
        missing.iter().map(|(r, h)| format!("{r} ({h})")).collect::<Vec<_>>().join(", ")
    )]
    Stalled {
        missing: Vec<(usize, String)>,
        what: &'static str,
        secs: u64,
    },
    /// Another rank waited `--timeout` for rank 0 on `host`.
    #[error("no word from rank 0 ({host}) for {secs}s while waiting for {what}: the job stalled")]
    RootSilent {
        host: String,
        secs: u64,
        what: &'static str,
    },
    /// A rank's figures could not be a measurement ([`figures::check`]).
    #[error(
        "rank {rank} ({host}) reported impossible figures: {bad}; it is broken or not a rank of this job"
    )]
    BadFigures {
        rank: usize,
        host: String,
        bad: figures::BadFigures,
    },
    /// Rank 0 gave no verdict within the grace after this rank failed with `saw`.
    #[error(
        "rank 0 ({host}) did not answer within {:.1}s (it stalled or is unreachable); this rank saw: {saw}",
        grace.as_secs_f64()
    )]
    NoVerdict {
        host: String,
        grace: Duration,
        saw: Box<BenchError>,
    },
}

/// A message from a peer, or its connection's end.
enum Event {
    Message(usize, Message),
}

/// Rank 0's side of the control plane: a connection to every other rank and what they
/// reported.
struct Hub {
    /// A writer per other rank (index rank - 1).
    writers: Vec<Mutex<TcpStream>>,
    /// Every rank's first-hand error, for [`diagnose`].
    reports: Mutex<Vec<Report>>,
}

/// What a rank's control connections are, by its role in the job.
enum Role {
    /// A job of one rank: nobody to talk to.
    Alone,
    /// Rank 0: it gathers, decides and broadcasts.
    Root(Arc<Hub>),
    /// Any other rank: its one connection to rank 0.
    Member(Mutex<TcpStream>),
}

/// The ranks of a running job, as seen from one of them.
pub struct Group {
    pub rank: usize,
    pub world: usize,
    pub members: Vec<Member>,
    pub fatal: Arc<JobStop>,
    timeout: Duration,
    seq: u64,
    role: Role,
    events: Receiver<Event>,
    backlog: RefCell<VecDeque<(usize, Message)>>,
}

impl Group {
    /// A job of one rank: nothing to talk to.
    pub(crate) fn alone(members: Vec<Member>, timeout: Duration) -> Group {
        let (_tx, events) = mpsc::channel();
        Group {
            rank: 0,
            world: 1,
            members,
            fatal: Arc::default(),
            timeout,
            seq: 0,
            role: Role::Alone,
            events,
            backlog: RefCell::default(),
        }
    }

    pub(super) fn root(
        world: usize,
        members: Vec<Member>,
        streams: Vec<(usize, TcpStream)>,
        timeout: Duration,
    ) -> Result<Group, BenchError> {
        let fatal: Arc<JobStop> = Arc::default();
        let (tx, events) = mpsc::channel();
        let mut writers = Vec::new();
        let mut readers = Vec::new();
        for (rank, stream) in streams {
            let reader = stream.try_clone().map_err(ControlError::Connection)?;
            readers.push((rank, reader));
            writers.push(Mutex::new(stream));
        }
        let hub = Arc::new(Hub {
            writers,
            reports: Mutex::default(),
        });
        let hosts: Vec<String> = members.iter().map(|m| m.host.clone()).collect();
        for (rank, mut reader) in readers {
            let (tx, fatal, hub) = (tx.clone(), fatal.clone(), hub.clone());
            let hosts = hosts.clone();
            let host = members
                .get(rank)
                .map(|m| m.host.clone())
                .unwrap_or_default();
            thread::spawn(move || {
                loop {
                    match frame::read(&mut reader) {
                        Ok(Message::Failed { reason, suspect }) => {
                            lock(&hub.reports).push(Report {
                                rank,
                                suspect,
                                reason: reason.clone(),
                            });
                            // A failure may be the consequence of another rank's stall: let
                            // rank 0's own transfers and the other reports come in first.
                            let (fatal, hub, hosts) = (fatal.clone(), hub.clone(), hosts.clone());
                            let fallback = format!("rank {rank} ({host}) failed: {reason}");
                            thread::spawn(move || {
                                thread::sleep(relay_grace(timeout));
                                let reports = lock(&hub.reports).clone();
                                let reason = diagnose(&reports, &hosts).unwrap_or(fallback);
                                abort_all(&fatal, &hub, reason);
                            });
                        }
                        Ok(m) => {
                            if tx.send(Event::Message(rank, m)).is_err() {
                                return;
                            }
                        }
                        Err(e) => {
                            abort_all(&fatal, &hub, left_the_job(rank, &host, e));
                            return;
                        }
                    }
                }
            });
        }
        Ok(Group {
            rank: 0,
            world,
            members,
            fatal,
            timeout,
            seq: 0,
            role: Role::Root(hub),
            events,
            backlog: RefCell::default(),
        })
    }

    pub(super) fn member(
        rank: usize,
        world: usize,
        members: Vec<Member>,
        stream: TcpStream,
        timeout: Duration,
    ) -> Result<Group, BenchError> {
        let fatal: Arc<JobStop> = Arc::default();
        let (tx, events) = mpsc::channel();
        let mut reader = stream.try_clone().map_err(ControlError::Connection)?;
        let host0 = members.first().map(|m| m.host.clone()).unwrap_or_default();
        let f = fatal.clone();
        thread::spawn(move || {
            loop {
                match frame::read(&mut reader) {
                    Ok(Message::Abort { reason }) => {
                        f.raise(reason);
                        return;
                    }
                    Ok(done @ Message::Done { .. }) => {
                        // Rank 0 exits right after this: its connection closing next is the
                        // end of the run, even before this rank's main thread reads the Done.
                        f.finished.store(true, Ordering::SeqCst);
                        let _ = tx.send(Event::Message(0, done));
                        return;
                    }
                    Ok(m) => {
                        if tx.send(Event::Message(0, m)).is_err() {
                            return;
                        }
                    }
                    Err(e) => {
                        f.raise(left_the_job(0, &host0, e));
                        return;
                    }
                }
            }
        });
        Ok(Group {
            rank,
            world,
            members,
            fatal,
            timeout,
            seq: 0,
            role: Role::Member(Mutex::new(stream)),
            events,
            backlog: RefCell::default(),
        })
    }

    /// The job's verdict once there is one. On rank 0 it is returned only once every rank
    /// has been told (or a second has passed): the thread that raised it may still be writing
    /// the Aborts, and an exit now would show the other ranks a closed connection instead of
    /// the reason.
    fn stopped(&self) -> Option<BenchError> {
        let reason = self.fatal.reason()?;
        if let Role::Root(_) = self.role {
            self.fatal.wait_announced(ANNOUNCE_WAIT);
        }
        Some(BenchError::Runtime(reason))
    }

    fn send_to_root(&self, m: &Message) -> Result<(), BenchError> {
        let Role::Member(w) = &self.role else {
            return Ok(());
        };
        frame::write(&mut *lock(w), m).map_err(|e| {
            self.stopped()
                .unwrap_or_else(|| ControlError::LostRoot(e).into())
        })
    }

    fn broadcast(&self, m: &Message) {
        if let Role::Root(hub) = &self.role {
            for w in &hub.writers {
                let _ = frame::write(&mut *lock(w), m);
            }
        }
    }

    /// Rank 0 stops the job with `reason` (see [`abort_all`]); other roles have no one to
    /// tell.
    fn abort(&self, reason: String) {
        if let Role::Root(hub) = &self.role {
            abort_all(&self.fatal, hub, reason);
        }
    }

    /// Rank 0 waits for one message of kind `want` from every other rank.
    fn gather(
        &self,
        want: impl Fn(&Message) -> bool,
        what: &'static str,
    ) -> Result<BTreeMap<usize, Message>, BenchError> {
        let deadline = Instant::now() + self.timeout;
        let mut got = BTreeMap::new();
        while got.len() + 1 < self.world {
            if let Some(e) = self.stopped() {
                return Err(e);
            }
            let remaining = deadline.saturating_duration_since(Instant::now());
            if remaining.is_zero() {
                let stalled = ControlError::Stalled {
                    missing: (1..self.world)
                        .filter(|r| !got.contains_key(r))
                        .map(|r| (r, self.host(r).to_string()))
                        .collect(),
                    what,
                    secs: self.timeout.as_secs(),
                };
                self.abort(stalled.to_string());
                return Err(self.stopped().unwrap_or_else(|| stalled.into()));
            }
            if let Some((rank, m)) = self.next(&want, remaining) {
                got.insert(rank, m);
            }
        }
        Ok(got)
    }

    /// Others wait for rank 0's message of kind `want`.
    fn await_root(
        &self,
        want: impl Fn(&Message) -> bool,
        what: &'static str,
    ) -> Result<Message, BenchError> {
        let deadline = Instant::now() + self.timeout;
        loop {
            if let Some(e) = self.stopped() {
                return Err(e);
            }
            let remaining = deadline.saturating_duration_since(Instant::now());
            if remaining.is_zero() {
                return Err(ControlError::RootSilent {
                    host: self.host(0).to_string(),
                    secs: self.timeout.as_secs(),
                    what,
                }
                .into());
            }
            if let Some((_, m)) = self.next(&want, remaining) {
                return Ok(m);
            }
        }
    }

    /// The next message `want` accepts, waiting at most 100 ms (so callers re-check the
    /// stop flag). Messages for a later step (a fast rank's next Arrive while rank 0 still
    /// gathers Reports) are kept, not dropped.
    fn next(
        &self,
        want: &impl Fn(&Message) -> bool,
        remaining: Duration,
    ) -> Option<(usize, Message)> {
        let mut backlog = self.backlog.borrow_mut();
        if let Some(i) = backlog.iter().position(|(_, m)| want(m)) {
            return backlog.remove(i);
        }
        match self
            .events
            .recv_timeout(remaining.min(Duration::from_millis(100)))
        {
            Ok(Event::Message(rank, m)) if want(&m) => Some((rank, m)),
            Ok(Event::Message(rank, m)) => {
                backlog.push_back((rank, m));
                None
            }
            Err(RecvTimeoutError::Timeout) => None,
            Err(RecvTimeoutError::Disconnected) => {
                thread::sleep(remaining.min(Duration::from_millis(10)));
                None
            }
        }
    }

    fn host(&self, rank: usize) -> &str {
        self.members.get(rank).map_or("?", |m| m.host.as_str())
    }

    /// Every rank waits here until all have arrived.
    pub(crate) fn barrier(&mut self) -> Result<(), BenchError> {
        self.seq += 1;
        let seq = self.seq;
        if self.world == 1 {
            return Ok(());
        }
        if self.rank == 0 {
            self.gather(
                |m| matches!(m, Message::Arrive { seq: s } if *s == seq),
                "the barrier",
            )?;
            self.broadcast(&Message::Release { seq });
            Ok(())
        } else {
            self.send_to_root(&Message::Arrive { seq })?;
            self.await_root(
                |m| matches!(m, Message::Release { seq: s } if *s == seq),
                "the barrier",
            )
            .map(|_| ())
        }
    }

    /// Sends this rank's figures for row `seq`; rank 0 gets every rank's, in rank order,
    /// each checked ([`figures::check`]; `max_wrong` is the most wrong elements a rank can
    /// find): an impossible report stops the job naming its rank.
    #[allow(clippy::type_complexity)]
    pub(crate) fn report(
        &mut self,
        seq: u64,
        times: [f64; 2],
        wrong: [Option<u64>; 2],
        max_wrong: u64,
    ) -> Result<Option<Vec<([f64; 2], [Option<u64>; 2])>>, BenchError> {
        if self.rank != 0 {
            self.send_to_root(&Message::Report { seq, times, wrong })?;
            return Ok(None);
        }
        let got = self.gather(
            |m| matches!(m, Message::Report { seq: s, .. } if *s == seq),
            "the end of a size",
        )?;
        let mut all = vec![(times, wrong)];
        for (rank, m) in got {
            if let Message::Report {
                times: t, wrong: w, ..
            } = m
            {
                if let Err(bad) = figures::check(t, w, wrong, max_wrong) {
                    let bad = ControlError::BadFigures {
                        rank,
                        host: self.host(rank).to_string(),
                        bad,
                    };
                    self.abort(bad.to_string());
                    return Err(bad.into());
                }
                all.push((t, w));
            }
        }
        Ok(Some(all))
    }

    /// Ends the run: rank 0 tells everyone the exit code; the others learn it.
    pub fn finish(&mut self, exit_code: u8) -> Result<u8, BenchError> {
        if self.world == 1 {
            return Ok(exit_code);
        }
        if self.rank == 0 {
            self.fatal.finished.store(true, Ordering::SeqCst);
            self.broadcast(&Message::Done { exit_code });
            Ok(exit_code)
        } else {
            let m = self.await_root(|m| matches!(m, Message::Done { .. }), "the end of the run")?;
            self.fatal.finished.store(true, Ordering::SeqCst);
            match m {
                Message::Done { exit_code } => Ok(exit_code),
                _ => Ok(exit_code),
            }
        }
    }

    /// Turns this rank's error into the job's verdict: the reason rank 0 settles on when it
    /// has one (naming the rank that is missing), else this rank's own.
    pub(crate) fn fail(&mut self, err: BenchError) -> BenchError {
        if self.world == 1
            || !matches!(
                err,
                BenchError::Runtime(_)
                    | BenchError::Control(_)
                    | BenchError::Rendezvous(_)
                    | BenchError::NcclBackend(_)
                    | BenchError::Link(_)
                    | BenchError::Nccl(_)
                    | BenchError::Cuda(_)
                    | BenchError::Transfer { .. }
            )
        {
            self.abort(err.to_string());
            return err;
        }
        if let Some(e) = self.stopped() {
            return e;
        }
        if self.rank == 0 {
            let Role::Root(hub) = &self.role else {
                return err;
            };
            lock(&hub.reports).push(Report::of(0, &err));
            let until = Instant::now() + blame_grace(self.timeout);
            while Instant::now() < until && self.stopped().is_none() {
                thread::sleep(Duration::from_millis(10));
            }
            let hosts: Vec<String> = self.members.iter().map(|m| m.host.clone()).collect();
            let reports = lock(&hub.reports).clone();
            let reason = diagnose(&reports, &hosts).unwrap_or_else(|| err.to_string());
            self.abort(reason);
            self.stopped().unwrap_or(err)
        } else {
            let _ = self.send_to_root(&Message::Failed {
                reason: err.to_string(),
                suspect: Report::of(self.rank, &err).suspect,
            });
            let grace = verdict_grace(self.timeout);
            let until = Instant::now() + grace;
            while Instant::now() < until && self.stopped().is_none() {
                thread::sleep(Duration::from_millis(10));
            }
            self.stopped().unwrap_or_else(|| {
                ControlError::NoVerdict {
                    host: self.host(0).to_string(),
                    grace,
                    saw: Box::new(err),
                }
                .into()
            })
        }
    }
}

/// One rank's first-hand error, as rank 0 collects them to decide whom to blame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Report {
    pub rank: usize,
    /// The rank at the other end of the failed transfer, when it was one.
    pub suspect: Option<usize>,
    pub reason: String,
}

impl Report {
    /// `rank`'s report of `err`.
    pub(crate) fn of(rank: usize, err: &BenchError) -> Report {
        Report {
            rank,
            suspect: match err {
                BenchError::Transfer { peer, .. } => Some(*peer),
                _ => None,
            },
            reason: err.to_string(),
        }
    }
}

/// Who stopped the job, from every rank's first-hand error: a stalled rank reports nothing,
/// while its neighbours (and, down the ring, theirs) each blame the rank next to them. The
/// culprit is the rank that is blamed but reported nothing itself (the most blamed such rank).
pub(crate) fn diagnose(reports: &[Report], hosts: &[String]) -> Option<String> {
    let reporters: Vec<usize> = reports.iter().map(|r| r.rank).collect();
    let mut best: Option<(usize, usize, &str)> = None;
    for report in reports {
        let Some(suspect) = report.suspect else {
            continue;
        };
        if reporters.contains(&suspect) {
            continue;
        }
        let votes = reports
            .iter()
            .filter(|r| r.suspect == Some(suspect))
            .count();
        if best.is_none_or(|(_, v, _)| votes > v) {
            best = Some((suspect, votes, &report.reason));
        }
    }
    best.map(|(suspect, _, reason)| {
        let host = hosts.get(suspect).map_or("?", String::as_str);
        format!("rank {suspect} ({host}) stopped responding: {reason}")
    })
}

/// Rank 0 stops the job: records the reason, interrupts its transfers, tells every rank.
fn abort_all(fatal: &JobStop, hub: &Hub, reason: String) {
    if fatal.raise(reason.clone()) {
        let abort = Message::Abort { reason };
        for w in &hub.writers {
            let _ = frame::write(&mut *lock(w), &abort);
        }
        fatal.announced.store(true, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_control_failure_reads_as_the_text_it_replaced() {
        let io = || std::io::Error::from(std::io::ErrorKind::BrokenPipe);
        let io_text = io().to_string();
        let bad = figures::BadFigures::Checked {
            half: "in-place",
            reported: true,
        };
        let cases: Vec<(ControlError, String)> = vec![
            (
                ControlError::Connection(io()),
                format!("control connection: {io_text}"),
            ),
            (
                ControlError::LostRoot(io()),
                format!("lost the connection to rank 0: {io_text}"),
            ),
            (
                ControlError::Stalled {
                    missing: vec![(2, "c".into()), (5, "f".into())],
                    what: "the barrier",
                    secs: 30,
                },
                "ranks 2 (c), 5 (f) did not reach the barrier within 30s (stalled or unreachable)"
                    .to_string(),
            ),
            (
                ControlError::Stalled {
                    missing: vec![(1, "b".into())],
                    what: "the end of a size",
                    secs: 5,
                },
                "rank 1 (b) did not reach the end of a size within 5s (stalled or unreachable)"
                    .to_string(),
            ),
            (
                ControlError::RootSilent {
                    host: "a".into(),
                    secs: 30,
                    what: "the end of the run",
                },
                "no word from rank 0 (a) for 30s while waiting for the end of the run: the job \
                 stalled"
                    .to_string(),
            ),
            (
                ControlError::BadFigures {
                    rank: 3,
                    host: "d".into(),
                    bad: bad.clone(),
                },
                format!(
                    "rank 3 (d) reported impossible figures: {bad}; it is broken or not a rank of \
                     this job"
                ),
            ),
            (
                ControlError::NoVerdict {
                    host: "a".into(),
                    grace: Duration::from_millis(1500),
                    saw: Box::new(BenchError::Runtime("cannot allocate".into())),
                },
                "rank 0 (a) did not answer within 1.5s (it stalled or is unreachable); this rank \
                 saw: cannot allocate"
                    .to_string(),
            ),
        ];
        crate::testing::assert_bench_failures(cases);
    }

    #[test]
    fn the_rank_blamed_but_silent_is_the_culprit() {
        let hosts: Vec<String> = ["a", "b", "c", "d"].iter().map(|h| h.to_string()).collect();
        let r = |rank: usize, suspect: usize, text: &str| Report {
            rank,
            suspect: Some(suspect),
            reason: text.to_string(),
        };
        // Rank 2 stalled: rank 3 blames it, rank 0 blames rank 3, rank 1 blames rank 0.
        let reports = [
            r(0, 3, "receiving from rank 3 (d) failed: no progress for 3s"),
            r(1, 0, "receiving from rank 0 (a) failed: no progress for 3s"),
            r(3, 2, "receiving from rank 2 (c) failed: no progress for 3s"),
        ];
        let verdict = diagnose(&reports, &hosts).unwrap();
        assert!(
            verdict.starts_with("rank 2 (c) stopped responding"),
            "{verdict}"
        );
        // Everyone reported: no one to blame beyond the reports themselves.
        let all = [
            r(0, 1, "receiving from rank 1 (b)"),
            r(1, 0, "receiving from rank 0 (a)"),
        ];
        assert_eq!(diagnose(&all, &hosts), None);
        // Only a failed transfer names a suspect, whatever its words say.
        let local = Report::of(0, &BenchError::Runtime("cannot allocate for rank 3".into()));
        assert_eq!(local.suspect, None);
        assert_eq!(diagnose(&[local], &hosts), None);
        let transfer = BenchError::Transfer {
            peer: 12,
            reason: "sending to rank 12 (x) failed".into(),
        };
        assert_eq!(Report::of(1, &transfer).suspect, Some(12));
        assert_eq!(transfer.exit_code(), crate::error::ExitCode::Runtime);
    }

    #[test]
    fn a_fast_ranks_next_message_waits_in_the_backlog() {
        let (tx, events) = mpsc::channel();
        let group = Group {
            rank: 0,
            world: 2,
            members: Vec::new(),
            fatal: Arc::default(),
            timeout: Duration::from_secs(2),
            seq: 0,
            role: Role::Root(Arc::new(Hub {
                writers: Vec::new(),
                reports: Mutex::default(),
            })),
            events,
            backlog: RefCell::default(),
        };
        // Rank 1 reaches the next barrier before rank 0 has read its report.
        tx.send(Event::Message(1, Message::Arrive { seq: 2 }))
            .unwrap();
        tx.send(Event::Message(
            1,
            Message::Report {
                seq: 1,
                times: [1.0, 1.0],
                wrong: [Some(0), Some(0)],
            },
        ))
        .unwrap();
        let reports = group
            .gather(|m| matches!(m, Message::Report { seq: 1, .. }), "a report")
            .unwrap();
        assert_eq!(reports.len(), 1);
        let arrivals = group
            .gather(|m| matches!(m, Message::Arrive { seq: 2 }), "the barrier")
            .unwrap();
        assert_eq!(arrivals.len(), 1);
    }

    #[test]
    fn waiting_for_a_verdict_is_a_small_part_of_the_timeout() {
        let s = Duration::from_secs;
        assert_eq!(verdict_grace(s(1)), s(1));
        assert_eq!(verdict_grace(s(4)), s(1));
        assert_eq!(verdict_grace(s(8)), s(2));
        assert_eq!(verdict_grace(s(300)), s(3));
        for t in [1, 2, 3, 4, 5, 8, 12, 60, 300] {
            // Rank 0 settles before the others stop waiting for it.
            assert!(relay_grace(s(t)) < verdict_grace(s(t)), "{t}");
            assert!(blame_grace(s(t)) < verdict_grace(s(t)), "{t}");
            assert!(verdict_grace(s(t)) <= s(3).max(s(t) / 4), "{t}");
        }
    }

    #[test]
    fn rank_0_closing_right_after_done_is_not_a_failure() {
        use std::io::Write;
        use std::net::TcpListener;
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let member_side = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (mut root_side, _) = listener.accept().unwrap();
        let members = vec![
            Member {
                rank: 0,
                host: "a".into(),
                pid: 1,
                device: "cpu".into(),
            },
            Member {
                rank: 1,
                host: "b".into(),
                pid: 2,
                device: "cpu".into(),
            },
        ];
        let mut group = Group::member(1, 2, members, member_side, Duration::from_secs(5)).unwrap();
        // Rank 0 says Done and exits before this rank reaches `finish`.
        root_side
            .write_all(&frame::encode(&Message::Done { exit_code: 1 }))
            .unwrap();
        drop(root_side);
        thread::sleep(Duration::from_millis(300));
        assert_eq!(group.finish(0).unwrap(), 1);
    }

    #[test]
    fn raising_keeps_the_first_reason_and_nothing_after_the_end() {
        let f = JobStop::default();
        assert!(f.raise("rank 2 left".into()));
        assert!(!f.raise("rank 1 failed".into()));
        assert_eq!(f.reason().as_deref(), Some("rank 2 left"));
        let g = JobStop::default();
        g.finished.store(true, Ordering::SeqCst);
        assert!(!g.raise("late".into()));
        assert!(!g.is_raised());
    }
}
