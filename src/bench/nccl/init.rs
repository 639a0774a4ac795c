//! Joining the communicator without hanging: with NCCL ≥ 2.14, `ncclCommInitRankConfig` with
//! `blocking = 0` returns at once and the communicator is polled past `ncclInProgress`, so
//! the wait can end (with `ncclCommAbort`) on the timeout or on the control plane's verdict,
//! and the error returns to `main`. Older libraries only have the blocking
//! `ncclCommInitRank`: it runs on a thread of its own, and this thread stops waiting on the
//! same conditions (the process then exits from `main`, leaving that thread behind).
//!
//! The timed collectives run on the same non-blocking communicator, so no call can hang:
//! the price is that NCCL starts a thread of its own for every call (`group.cc`), which
//! nccl-tests, timing blocking communicators, does not pay; small sizes read slower than
//! `all_reduce_perf`'s. A blocking copy (`ncclCommSplit`) would time like nccl-tests, but
//! since NCCL 2.22 connections are made inside a blocking communicator's first calls
//! (`NCCL_RUNTIME_CONNECT`), where a stalled peer holds the call, and `ncclCommAbort` from
//! another thread frees the communicator under it. The way to both: a persistent launch
//! thread owning the blocking copy, which `main` waits for with the deadline and leaves
//! behind when it passes, as the < 2.14 join does; to be built and measured on a GPU.

use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use super::{BackendError, NcclStack, Place};
use crate::bench::BenchError;
use crate::bench::control::group::JobStop;
use crate::ffi::cuda::Context;
use crate::ffi::nccl::{Communicator, Config, NcclResult, UNIQUE_ID_BYTES};

fn too_slow(timeout: Duration) -> BenchError {
    BackendError::InitStalled(timeout.as_secs()).into()
}

/// Why to stop waiting for the communicator, once it is time.
fn stop(fatal: &JobStop, deadline: Instant, timeout: Duration) -> Option<BenchError> {
    super::stop_reason(fatal, deadline, || too_slow(timeout))
}

/// Creates this rank's communicator on `context`'s device, giving up on the timeout or the
/// job's stop.
pub(crate) fn init(
    stack: &NcclStack,
    context: &Context,
    place: Place,
    id: &[u8; UNIQUE_ID_BYTES],
    timeout: Duration,
    fatal: &JobStop,
) -> Result<Communicator, BenchError> {
    let deadline = Instant::now() + timeout;
    if !stack.version.has_config() {
        return join_on_thread(stack, context, place, id, deadline, timeout, fatal);
    }
    let config = Config::non_blocking(stack.version);
    let comm = Communicator::start(&stack.nccl, context, place.world, place.rank, id, config)
        .map_err(BenchError::from)?;
    loop {
        let failure = match comm.state() {
            Ok(NcclResult::SUCCESS) => return Ok(comm),
            Ok(NcclResult::IN_PROGRESS) => stop(fatal, deadline, timeout),
            Ok(code) => Some(stack.nccl.failure("ncclCommInitRankConfig", code).into()),
            Err(e) => Some(e.into()),
        };
        if let Some(e) = failure {
            comm.abort();
            return Err(e);
        }
        thread::sleep(Duration::from_millis(1));
    }
}

/// NCCL < 2.14: the blocking call on a thread of its own (with the device's context made
/// current there), waited for here.
fn join_on_thread(
    stack: &NcclStack,
    context: &Context,
    place: Place,
    id: &[u8; UNIQUE_ID_BYTES],
    deadline: Instant,
    timeout: Duration,
    fatal: &JobStop,
) -> Result<Communicator, BenchError> {
    let (tx, rx) = mpsc::channel();
    let (nccl, context, id) = (stack.nccl.clone(), context.clone(), *id);
    thread::Builder::new()
        .name("nccl-init".into())
        .spawn(move || {
            // Nobody listens once the wait below gave up: the communicator is then dropped.
            let _ = tx.send(Communicator::join(
                &nccl,
                &context,
                place.world,
                place.rank,
                &id,
            ));
        })
        .map_err(BackendError::Thread)?;
    loop {
        match rx.recv_timeout(Duration::from_millis(20)) {
            Ok(joined) => return joined.map_err(BenchError::from),
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                return Err(BackendError::InitVanished.into());
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
        }
        if let Some(e) = stop(fatal, deadline, timeout) {
            return Err(e);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waiting_stops_on_the_verdict_first_then_on_the_deadline() {
        let fatal = JobStop::default();
        let (later, timeout) = (
            Instant::now() + Duration::from_secs(60),
            Duration::from_secs(60),
        );
        assert!(stop(&fatal, later, timeout).is_none());
        let past = stop(&fatal, Instant::now(), Duration::from_secs(7)).map(|e| e.to_string());
        assert_eq!(
            past.as_deref(),
            Some(
                "ncclCommInitRank did not complete within 7s: a rank is missing or NCCL cannot connect (check NCCL_SOCKET_IFNAME and the firewall)"
            )
        );
        fatal.raise("rank 1 on node-b left".into());
        let stopped = stop(&fatal, Instant::now(), timeout).map(|e| e.to_string());
        assert_eq!(stopped.as_deref(), Some("rank 1 on node-b left"));
    }
}
