//! Running an external program (nft, iptables, scontrol, ...) with a hard time limit and a
//! bounded capture, so a hung or chatty tool can never hang or swamp gputune: past the limit
//! the program's whole process group is killed and the caller gets [`ExecError::TimedOut`]
//! naming it.

use std::io::{self, Read};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex, mpsc};
use std::thread;
use std::time::{Duration, Instant};

/// The most bytes kept of a program's stdout or stderr; the rest is read and dropped.
pub(crate) const MAX_CAPTURE: usize = 64 << 20;

/// What a program printed and how it ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Output {
    pub success: bool,
    pub stdout: String,
    pub stderr: String,
}

#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    /// The program is not installed (not found on `PATH`).
    #[error("{program}: not installed")]
    NotInstalled { program: String },
    /// It did not finish within its limit and was killed.
    #[error("{program} did not finish within {} s and was killed", limit.as_secs_f64())]
    TimedOut { program: String, limit: Duration },
    /// It could not be started or waited for.
    #[error("{program}: {source}")]
    Io {
        program: String,
        #[source]
        source: io::Error,
    },
}

/// Runs `command` (stdin closed) in its own process group and waits at most `limit`.
pub(crate) fn run(mut command: Command, limit: Duration) -> Result<Output, ExecError> {
    let program = command.get_program().to_string_lossy().into_owned();
    let io_err = |source| ExecError::Io {
        program: program.clone(),
        source,
    };
    command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(ExecError::NotInstalled { program });
        }
        Err(e) => return Err(io_err(e)),
    };
    let _running = Running::register(child.id());
    let stdout = Capture::start(child.stdout.take());
    let stderr = Capture::start(child.stderr.take());
    let deadline = Instant::now() + limit;
    let mut pause = Duration::from_millis(1);
    let status = loop {
        if let Some(status) = child.try_wait().map_err(io_err)? {
            break status;
        }
        let now = Instant::now();
        if now >= deadline {
            kill_group(child.id());
            let _ = child.wait();
            return Err(ExecError::TimedOut { program, limit });
        }
        thread::sleep(pause.min(deadline - now));
        pause = (pause * 2).min(Duration::from_millis(50));
    };
    // The program has exited; a grandchild still holding the pipes gets a short grace, then
    // its group is killed, and whatever was read by then is the output.
    let grace = Duration::from_millis(500).min(limit);
    if !(stdout.wait(grace) && stderr.wait(grace)) {
        kill_group(child.id());
        stdout.wait(Duration::from_millis(100));
        stderr.wait(Duration::from_millis(100));
    }
    Ok(Output {
        success: status.success(),
        stdout: stdout.take(),
        stderr: stderr.take(),
    })
}

/// The process groups of the programs running now, so a caller that abandons a hung
/// check (the audit runner's per-area limit) can kill them instead of leaving them behind.
static RUNNING: Mutex<Vec<u32>> = Mutex::new(Vec::new());

/// Kills every program [`run`] has started and not yet reaped, with its process group.
pub(crate) fn kill_running() {
    let running = RUNNING.lock().unwrap_or_else(|e| e.into_inner());
    for &pid in running.iter() {
        kill_group(pid);
    }
}

/// A running program's entry in [`RUNNING`], removed when `run` returns.
struct Running(u32);

impl Running {
    fn register(pid: u32) -> Running {
        RUNNING.lock().unwrap_or_else(|e| e.into_inner()).push(pid);
        Running(pid)
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        RUNNING
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|&p| p != self.0);
    }
}

/// A pipe read to its end on a thread, keeping at most [`MAX_CAPTURE`] bytes.
struct Capture {
    kept: Arc<Mutex<Vec<u8>>>,
    done: mpsc::Receiver<()>,
}

impl Capture {
    fn start(pipe: Option<impl Read + Send + 'static>) -> Self {
        let kept = Arc::new(Mutex::new(Vec::new()));
        let (tx, done) = mpsc::channel();
        let sink = Arc::clone(&kept);
        thread::spawn(move || {
            if let Some(mut pipe) = pipe {
                let mut buf = [0u8; 8192];
                while let Ok(n) = pipe.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    let mut kept = sink.lock().unwrap_or_else(|e| e.into_inner());
                    let room = MAX_CAPTURE.saturating_sub(kept.len());
                    kept.extend_from_slice(&buf[..n.min(room)]);
                }
            }
            let _ = tx.send(());
        });
        Capture { kept, done }
    }

    /// True when the pipe reached its end within `limit`.
    fn wait(&self, limit: Duration) -> bool {
        !matches!(
            self.done.recv_timeout(limit),
            Err(mpsc::RecvTimeoutError::Timeout)
        )
    }

    fn take(&self) -> String {
        let kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
        String::from_utf8_lossy(&kept).into_owned()
    }
}

fn kill_group(pid: u32) {
    if let Ok(pid) = i32::try_from(pid) {
        // The child leads its own process group (process_group(0)): kill all of it.
        let _ = nix::sys::signal::killpg(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str) -> Command {
        let mut c = Command::new("sh");
        c.args(["-c", script]);
        c
    }

    #[test]
    fn captures_output_and_status() {
        let out = run(
            sh("echo out; echo err >&2; exit 3"),
            Duration::from_secs(10),
        )
        .unwrap();
        assert_eq!(out.stdout, "out\n");
        assert_eq!(out.stderr, "err\n");
        assert!(!out.success);
    }

    #[test]
    fn a_hung_program_is_killed_at_its_limit() {
        let start = Instant::now();
        let err = run(sh("sleep 30 & sleep 30"), Duration::from_millis(300)).unwrap_err();
        assert!(matches!(err, ExecError::TimedOut { .. }), "{err}");
        assert!(start.elapsed() < Duration::from_secs(5));
        assert!(err.to_string().contains("did not finish within 0.3 s"));
    }

    #[test]
    fn a_grandchild_holding_the_pipe_does_not_hang_the_caller() {
        let start = Instant::now();
        let out = run(sh("(sleep 30 &) ; echo done"), Duration::from_secs(10)).unwrap();
        assert_eq!(out.stdout, "done\n");
        assert!(start.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn a_missing_program_is_not_installed() {
        let err = run(
            Command::new("gputune-no-such-program"),
            Duration::from_secs(1),
        )
        .unwrap_err();
        assert!(matches!(err, ExecError::NotInstalled { .. }));
    }
}
