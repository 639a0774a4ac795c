//! What a rank says while it waits to reach another (rank 0's rendezvous, a neighbour's data
//! port): once what it waits for and why, then a line every [`PROGRESS_EVERY`] with the time
//! left, then one verdict. A port held by another program makes every attempt fail the same
//! way; a line per attempt would bury the one thing a person needs, which is what is wrong.

use std::time::{Duration, Instant};

/// How long a rank waits quietly: a launcher starts ranks within moments of each other, so
/// a first refused attempt is normal, not news.
pub(crate) const QUIET: Duration = Duration::from_secs(1);
/// How often a rank still waiting says so.
pub(crate) const PROGRESS_EVERY: Duration = Duration::from_secs(5);

/// Why an attempt failed, as far as this side can tell; each has its own advice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cause {
    /// Nothing listens there (connection refused).
    Refused,
    /// The connection opened, then closed or reset without an answer.
    Dropped,
    /// The connection opened and nothing answered.
    Silent,
    /// The connection itself did not complete (no route, dropped packets, no such name).
    Unreachable,
}

impl Cause {
    /// What usually lies behind it, for a person to check.
    pub(crate) fn hint(self) -> &'static str {
        match self {
            Cause::Refused => {
                "nothing listens there yet: the rank has not started, or the address or port \
                 points elsewhere"
            }
            Cause::Dropped => {
                "something accepts connections there and closes them without answering: \
                 another program holds the port, or the rank is busy shedding strangers"
            }
            Cause::Silent => {
                "something accepts connections there and never answers: another program holds \
                 the port (`ss -ltnp` names it), or the rank is stopped"
            }
            Cause::Unreachable => {
                "the connection does not complete: a firewall drops it, the host is down, or \
                 the name does not resolve"
            }
        }
    }

    /// The cause of a failed connect(2).
    pub(crate) fn of_connect(e: &std::io::Error) -> Cause {
        match e.kind() {
            std::io::ErrorKind::ConnectionRefused => Cause::Refused,
            std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::ConnectionAborted => {
                Cause::Dropped
            }
            _ => Cause::Unreachable,
        }
    }
}

/// One rank's wait for one target.
#[derive(Debug)]
pub(crate) struct Wait {
    /// The part this is, as lines start: `rendezvous`, `data port`.
    part: &'static str,
    /// What is waited for: `rank 0 at 10.0.0.1:29500`.
    target: String,
    started: Instant,
    deadline: Instant,
    attempts: usize,
    last: Option<(String, Cause)>,
    /// When the last line was printed; `None` before the first.
    said_at: Option<Instant>,
}

impl Wait {
    pub(crate) fn new(part: &'static str, target: String, deadline: Instant) -> Wait {
        Wait {
            part,
            target,
            started: Instant::now(),
            deadline,
            attempts: 0,
            last: None,
            said_at: None,
        }
    }

    /// The time left to wait (zero once it is up).
    pub(crate) fn remaining(&self) -> Duration {
        self.deadline.saturating_duration_since(Instant::now())
    }

    /// Records a failed attempt and prints what [`Wait::line_at`] says to.
    pub(crate) fn failed(&mut self, why: String, cause: Cause) {
        if let Some(line) = self.line_at(Instant::now(), why, cause) {
            eprintln!("{line}");
        }
    }

    /// Records a failed attempt at `now`; returns the line to print, if any: the first past
    /// [`QUIET`] says what is waited for and why, later ones the time left, each at most
    /// every [`PROGRESS_EVERY`].
    pub(crate) fn line_at(&mut self, now: Instant, why: String, cause: Cause) -> Option<String> {
        self.attempts += 1;
        let line = match self.said_at {
            None if now.saturating_duration_since(self.started) >= QUIET => format!(
                "# {}: waiting up to {}s for {}: {why}; {}",
                self.part,
                secs(self.deadline.saturating_duration_since(self.started)),
                self.target,
                cause.hint()
            ),
            Some(at) if now.saturating_duration_since(at) >= PROGRESS_EVERY => format!(
                "# {}: still waiting for {}, {}s left ({} attempts; the last: {why})",
                self.part,
                self.target,
                secs(self.deadline.saturating_duration_since(now)),
                self.attempts
            ),
            _ => {
                self.last = Some((why, cause));
                return None;
            }
        };
        self.last = Some((why, cause));
        self.said_at = Some(now);
        Some(line)
    }

    /// The verdict once the time is up: what was not reached, how often it was tried, the
    /// last failure and what usually lies behind it.
    pub(crate) fn verdict(&self) -> String {
        let waited = secs(self.deadline.saturating_duration_since(self.started));
        match &self.last {
            None => format!("cannot reach {} within {waited}s", self.target),
            Some((why, cause)) => format!(
                "cannot reach {} within {waited}s: {} attempt{}, the last: {why} ({})",
                self.target,
                self.attempts,
                if self.attempts == 1 { "" } else { "s" },
                cause.hint()
            ),
        }
    }
}

/// Whole seconds, rounded up, so a wait that has not ended never shows 0.
fn secs(d: Duration) -> u64 {
    d.as_secs() + u64::from(d.subsec_nanos() > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wait(seconds: u64) -> (Wait, Instant) {
        let mut w = Wait::new("rendezvous", "rank 0 at h:1".into(), Instant::now());
        w.deadline = w.started + Duration::from_secs(seconds);
        let start = w.started;
        (w, start)
    }

    /// 300 identical failures over a minute (one every 200 ms): one line saying what and
    /// why, then one every 5 s with the time left, then the verdict.
    #[test]
    fn a_minute_of_failures_says_what_once_then_every_few_seconds() {
        let (mut w, start) = wait(60);
        let lines: Vec<String> = (1..=300)
            .filter_map(|i| {
                let at = start + Duration::from_millis(200 * i);
                w.line_at(at, "connection reset by peer".into(), Cause::Dropped)
            })
            .collect();
        assert_eq!(
            lines[0],
            format!(
                "# rendezvous: waiting up to 60s for rank 0 at h:1: connection reset by peer; {}",
                Cause::Dropped.hint()
            )
        );
        assert!(lines[0].contains("another program holds the port"));
        // Said at 1 s, then at 6, 11, ... 56 s.
        assert_eq!(lines.len(), 1 + 11, "{lines:#?}");
        assert_eq!(
            lines[1],
            "# rendezvous: still waiting for rank 0 at h:1, 54s left (30 attempts; the last: \
             connection reset by peer)"
        );
        assert!(
            lines[11].contains(", 4s left (280 attempts;"),
            "{}",
            lines[11]
        );
        assert_eq!(
            w.verdict(),
            format!(
                "cannot reach rank 0 at h:1 within 60s: 300 attempts, the last: connection \
                 reset by peer ({})",
                Cause::Dropped.hint()
            )
        );
    }

    #[test]
    fn a_short_wait_says_nothing_and_the_verdict_names_the_last_cause() {
        let (mut w, start) = wait(10);
        assert_eq!(w.verdict(), "cannot reach rank 0 at h:1 within 10s");
        let at = start + Duration::from_millis(999);
        assert_eq!(w.line_at(at, "refused".into(), Cause::Refused), None);
        assert_eq!(
            w.verdict(),
            format!(
                "cannot reach rank 0 at h:1 within 10s: 1 attempt, the last: refused ({})",
                Cause::Refused.hint()
            )
        );
        let line = w.line_at(
            at + Duration::from_millis(1),
            "no answer".into(),
            Cause::Silent,
        );
        assert!(line.unwrap().ends_with(Cause::Silent.hint()));
        assert!(w.verdict().contains("2 attempts, the last: no answer"));
    }

    #[test]
    fn connect_errors_have_their_causes() {
        use std::io::{Error, ErrorKind};
        let cause = |k| Cause::of_connect(&Error::from(k));
        assert_eq!(cause(ErrorKind::ConnectionRefused), Cause::Refused);
        assert_eq!(cause(ErrorKind::ConnectionReset), Cause::Dropped);
        assert_eq!(cause(ErrorKind::TimedOut), Cause::Unreachable);
        assert_eq!(secs(Duration::from_millis(1)), 1);
        assert_eq!(secs(Duration::from_secs(3)), 3);
    }
}
