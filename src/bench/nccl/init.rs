//! Joining the communicator without hanging: with NCCL ≥ 2.14, `ncclCommInitRankConfig` with
//! `blocking = 0` returns at once and the communicator is polled with
//! `ncclCommGetAsyncError` past `ncclInProgress`, so the wait can end (with
//! `ncclCommAbort`) on the timeout or on the control plane's verdict, and the error returns
//! to `main`. Older libraries only have the blocking `ncclCommInitRank`: it runs on a
//! thread of its own, and this thread stops waiting on the same conditions (the process
//! then exits from `main`, leaving that thread behind).

use std::ffi::{c_char, c_int, c_uint};
use std::sync::Arc;
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use super::{Comm, UniqueId};
use crate::bench::BenchError;
use crate::bench::control::JobStop;
use crate::host::nccl::{Nccl, NcclVersion};

/// `ncclInProgress`.
pub const IN_PROGRESS: c_int = 7;

/// `NCCL_CONFIG_UNDEF_INT`.
const UNDEF: c_int = c_int::MIN;

/// `ncclConfig_t` as NCCL 2.28 lays it out (nccl.h, `ncclConfig_v22800`). The struct grew
/// field by field across versions; `size` tells the library how much of it the caller
/// filled, so an older library is given only the prefix it knows.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct Config {
    pub size: usize,
    pub magic: c_uint,
    pub version: c_uint,
    pub blocking: c_int,
    pub cga_cluster_size: c_int,
    pub min_ctas: c_int,
    pub max_ctas: c_int,
    pub net_name: *const c_char,
    pub split_share: c_int,
    pub traffic_class: c_int,
    pub comm_name: *const c_char,
    pub collnet_enable: c_int,
    pub cta_policy: c_int,
    pub shrink_share: c_int,
    pub nvls_ctas: c_int,
    pub n_channels_per_net_peer: c_int,
    pub nvlink_centric_sched: c_int,
}

/// `NCCL_CONFIG_INITIALIZER`'s magic.
const MAGIC: c_uint = 0xcafe_beef;

impl Config {
    /// A non-blocking configuration for `version`: every attribute undefined (the library's
    /// default) except `blocking = 0` and, from 2.28 (where the field exists),
    /// `nvlinkCentricSched = 1` as nccl-tests sets it. Before 2.28, `size` covers only the
    /// fields 2.14 defined (through `netName`).
    pub fn non_blocking(version: NcclVersion) -> Config {
        let full = std::mem::size_of::<Config>();
        let has_sched = (version.major, version.minor) >= (2, 28);
        Config {
            size: if has_sched {
                full
            } else {
                std::mem::offset_of!(Config, split_share)
            },
            magic: MAGIC,
            version: version.code.max(0) as c_uint,
            blocking: 0,
            cga_cluster_size: UNDEF,
            min_ctas: UNDEF,
            max_ctas: UNDEF,
            net_name: std::ptr::null(),
            split_share: UNDEF,
            traffic_class: UNDEF,
            comm_name: std::ptr::null(),
            collnet_enable: UNDEF,
            cta_policy: UNDEF,
            shrink_share: UNDEF,
            nvls_ctas: UNDEF,
            n_channels_per_net_peer: UNDEF,
            nvlink_centric_sched: if has_sched { 1 } else { UNDEF },
        }
    }
}

/// Whether the library has `ncclCommInitRankConfig` and non-blocking communicators.
pub fn supports_config(version: NcclVersion) -> bool {
    (version.major, version.minor) >= (2, 14)
}

fn rt(message: String) -> BenchError {
    BenchError::Runtime(message)
}

fn too_slow(timeout: Duration) -> BenchError {
    rt(format!(
        "ncclCommInitRank did not complete within {}s: a rank is missing or NCCL cannot connect (check NCCL_SOCKET_IFNAME and the firewall)",
        timeout.as_secs()
    ))
}

/// Creates this rank's communicator, giving up on the timeout or the job's stop.
pub fn init(
    nccl: &Nccl,
    version: NcclVersion,
    world: usize,
    id: UniqueId,
    rank: usize,
    timeout: Duration,
    fatal: &Arc<JobStop>,
) -> Result<Comm, BenchError> {
    let deadline = Instant::now() + timeout;
    if !supports_config(version) {
        return init_blocking(nccl, world, id, rank, deadline, timeout, fatal);
    }
    // SAFETY: ncclResult_t ncclCommInitRankConfig(ncclComm_t*, int, ncclUniqueId, int,
    // ncclConfig_t*); ncclCommGetAsyncError(ncclComm_t, ncclResult_t*);
    // ncclCommAbort(ncclComm_t).
    let (init, state, abort) = unsafe {
        (
            nccl.symbol::<unsafe extern "C" fn(*mut Comm, c_int, UniqueId, c_int, *mut Config) -> c_int>(
                "ncclCommInitRankConfig",
            ),
            nccl.symbol::<unsafe extern "C" fn(Comm, *mut c_int) -> c_int>("ncclCommGetAsyncError"),
            nccl.symbol::<unsafe extern "C" fn(Comm) -> c_int>("ncclCommAbort"),
        )
    };
    let e = |e: crate::host::nccl::NcclError| rt(e.to_string());
    let (init, state, abort) = (init.map_err(e)?, state.map_err(e)?, abort.map_err(e)?);
    let mut config = Config::non_blocking(version);
    let mut comm: Comm = std::ptr::null_mut();
    // SAFETY: valid out-pointer and config; `id` is the id every rank received.
    let code = unsafe { init(&mut comm, world as c_int, id, rank as c_int, &mut config) };
    if code != 0 && code != IN_PROGRESS {
        if !comm.is_null() {
            // SAFETY: a communicator NCCL handed back, not used after this.
            unsafe { abort(comm) };
        }
        return Err(rt(nccl
            .check("ncclCommInitRankConfig", code)
            .err()
            .map_or_else(
                || format!("ncclCommInitRankConfig: {code}"),
                |e| e.to_string(),
            )));
    }
    loop {
        let mut now: c_int = IN_PROGRESS;
        // SAFETY: `comm` is the communicator being created; valid out-pointer.
        let code = unsafe { state(comm, &mut now) };
        let failure = if code != 0 {
            Some(format!(
                "ncclCommGetAsyncError: {}",
                nccl.error_string(code)
            ))
        } else if now == 0 {
            return Ok(comm);
        } else if now != IN_PROGRESS {
            Some(format!(
                "ncclCommInitRankConfig failed: {} (ncclResult_t {now})",
                nccl.error_string(now)
            ))
        } else if let Some(reason) = fatal.reason() {
            Some(reason)
        } else if Instant::now() >= deadline {
            Some(too_slow(timeout).to_string())
        } else {
            None
        };
        if let Some(message) = failure {
            // SAFETY: `comm` is live and not used after this.
            unsafe { abort(comm) };
            return Err(rt(message));
        }
        thread::sleep(Duration::from_millis(1));
    }
}

/// NCCL < 2.14: the blocking call on a thread of its own, waited for here.
fn init_blocking(
    nccl: &Nccl,
    world: usize,
    id: UniqueId,
    rank: usize,
    deadline: Instant,
    timeout: Duration,
    fatal: &Arc<JobStop>,
) -> Result<Comm, BenchError> {
    // SAFETY: ncclResult_t ncclCommInitRank(ncclComm_t*, int nranks, ncclUniqueId, int rank).
    let init: unsafe extern "C" fn(*mut Comm, c_int, UniqueId, c_int) -> c_int =
        unsafe { nccl.symbol("ncclCommInitRank") }.map_err(|e| rt(e.to_string()))?;
    let (tx, rx) = mpsc::channel();
    thread::Builder::new()
        .name("nccl-init".into())
        .spawn(move || {
            let mut comm: Comm = std::ptr::null_mut();
            // SAFETY: valid out-pointer; `id` is the id every rank received.
            let code = unsafe { init(&mut comm, world as c_int, id, rank as c_int) };
            let _ = tx.send((SendComm(comm), code));
        })
        .map_err(|e| rt(format!("cannot start a thread: {e}")))?;
    loop {
        match rx.recv_timeout(Duration::from_millis(20)) {
            Ok((SendComm(comm), code)) => {
                nccl.check("ncclCommInitRank", code)
                    .map_err(|e| rt(e.to_string()))?;
                return Ok(comm);
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                return Err(rt(
                    "ncclCommInitRank's thread ended without an answer".into()
                ));
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
        }
        if let Some(reason) = fatal.reason() {
            return Err(rt(reason));
        }
        if Instant::now() >= deadline {
            return Err(too_slow(timeout));
        }
    }
}

/// A communicator handed from the init thread back to the caller.
struct SendComm(Comm);

// SAFETY: an opaque handle; NCCL allows using a communicator from any thread (one at a time).
unsafe impl Send for SendComm {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_config_matches_nccl_2_28_and_older_libraries_get_the_2_14_prefix() {
        // ncclConfig_v22800 on LP64: 3 header words (8+4+4), 4 ints, a pointer, 2 ints, a
        // pointer, 7 ints.
        assert_eq!(std::mem::offset_of!(Config, blocking), 16);
        assert_eq!(std::mem::offset_of!(Config, net_name), 32);
        assert_eq!(std::mem::offset_of!(Config, comm_name), 48);
        assert_eq!(std::mem::offset_of!(Config, nvlink_centric_sched), 76);
        assert_eq!(std::mem::size_of::<Config>(), 80);
        let new = Config::non_blocking(NcclVersion::from_code(22803));
        assert_eq!((new.size, new.version, new.magic), (80, 22803, 0xcafebeef));
        assert_eq!((new.blocking, new.nvlink_centric_sched), (0, 1));
        let old = Config::non_blocking(NcclVersion::from_code(21805));
        assert_eq!(old.size, 40);
        assert_eq!(old.nvlink_centric_sched, UNDEF);
        assert!(supports_config(NcclVersion::from_code(21403)));
        assert!(!supports_config(NcclVersion::from_code(21304)));
    }
}
