//! Executing a plan all or nothing: each write is read back and verified; when one fails,
//! every earlier write (and the failed one, which may have half happened) is restored in
//! reverse order, so the node ends exactly as it started.

use super::error::ApplyError;
use super::io::{Io, holds};
use super::owned;
use super::target::{State, Step, Target};

/// A plan that could not be applied, and how restoring the node went.
#[derive(Debug)]
pub struct Failure {
    /// Index of the step that failed.
    pub step: usize,
    pub error: ApplyError,
    /// Targets that could not be put back (empty when the node is as it started).
    pub unrestored: Vec<String>,
}

/// What restoring one target did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Restored {
    /// The target held something else and now holds its old state.
    Changed {
        target: String,
        from: String,
        to: String,
    },
    /// The target already held its old state (the change had not happened yet).
    Unchanged { target: String },
    /// A file gputune wrote was since replaced by someone else's (no gputune header): it is
    /// not gputune's to delete or overwrite any more.
    LeftAlone { target: String },
}

/// Writes every step in order, verifying each; on failure restores and reports.
pub fn execute(steps: &[Step], io: &dyn Io) -> Result<(), Failure> {
    #[cfg(feature = "test-hooks")]
    let stop_before = std::env::var("GPUTUNE_TEST_STOP_BEFORE").ok();
    for (i, step) in steps.iter().enumerate() {
        #[cfg(feature = "test-hooks")]
        if stop_before.as_deref() == Some(step.target.label().as_str()) {
            stop_self();
        }
        if let Err(error) = write_verified(io, step, &step.after) {
            let unrestored = restore(&steps[..=i], io)
                .into_iter()
                .filter_map(Result::err)
                .map(|e| e.to_string())
                .collect();
            return Err(Failure {
                step: i,
                error,
                unrestored,
            });
        }
    }
    Ok(())
}

/// For end-to-end tests of crashes and the lock: with `GPUTUNE_TEST_STOP_BEFORE` naming a
/// target, apply stops itself (SIGSTOP) just before writing it, so a test can kill it
/// there, or hold it while a second apply runs, then let it go on (SIGCONT). Stopping
/// needs no cooperation from the node (a FIFO standing in for a knob is refused now that
/// every read and write demands a regular file). Only in builds with the `test-hooks`
/// feature (the binary `cargo test` builds): a released gputune never reads the variable,
/// so nobody can make a root apply stop while it holds the lock.
#[cfg(feature = "test-hooks")]
fn stop_self() {
    let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGSTOP);
}

/// Puts every target of `steps` back to its `before` state, last step first. Each target
/// is handled even when another fails, so as much as possible is restored.
pub fn restore(steps: &[Step], io: &dyn Io) -> Vec<Result<Restored, ApplyError>> {
    steps
        .iter()
        .rev()
        .map(|step| {
            let label = step.target.label();
            let current = io
                .read(&step.target)
                .map_err(|e| ApplyError::during(format!("restoring {label}"), e))?;
            let decided = decide(step, &current);
            if let Restored::Changed { .. } = decided {
                write_verified(io, step, &step.before)
                    .map_err(|e| ApplyError::during(format!("restoring {label}"), e))?;
            }
            Ok(decided)
        })
        .collect()
}

/// What restoring `step` does to a target that holds `current` (shared by rollback and
/// `rollback --dry-run`, so the preview is what rollback would do).
pub(crate) fn decide(step: &Step, current: &State) -> Restored {
    let target = step.target.label();
    if holds(&step.target, &step.before, current) {
        return Restored::Unchanged { target };
    }
    // A file without gputune's header is someone else's now, unless it still holds exactly
    // what apply wrote (a system file edited in place, /etc/kernel/cmdline).
    if let (Target::File(_), State::Present(text)) = (&step.target, current)
        && !owned::is_ours(text)
        && *current != step.after
    {
        return Restored::LeftAlone { target };
    }
    Restored::Changed {
        target,
        from: current.summary(),
        to: step.before.summary(),
    }
}

fn write_verified(io: &dyn Io, step: &Step, want: &State) -> Result<(), ApplyError> {
    io.write(&step.target, want)
        .map_err(|e| ApplyError::during(&step.what, e))?;
    let got = io
        .read(&step.target)
        .map_err(|e| ApplyError::during(format!("{}: reading back", step.what), e))?;
    if holds(&step.target, want, &got) {
        Ok(())
    } else {
        Err(ApplyError::during(
            &step.what,
            ApplyError::Verify {
                target: step.target.label(),
                got: got.summary(),
                want: want.summary(),
            },
        ))
    }
}
