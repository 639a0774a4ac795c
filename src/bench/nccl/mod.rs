//! The NCCL backend: one process per GPU (`LOCAL_RANK` picks the device), device buffers and
//! a stream through the CUDA driver ([`crate::ffi::cuda`]), NCCL through `libnccl.so.2` found
//! by [`crate::host::nccl::locate`] and bound by [`crate::ffi::nccl`]. The communicator's id
//! travels in the rendezvous Welcome, so no MPI is needed. Every wait polls the stream and
//! NCCL's asynchronous error, and gives up with `ncclCommAbort` when `--timeout` passes or
//! the job is stopped. What the backend holds (communicator, buffers, stream, context)
//! releases itself when dropped, on every path.

pub(crate) mod init;

use std::path::PathBuf;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use crate::bench::control::group::JobStop;
use crate::bench::measure::collective::{Collective, Shape};
use crate::bench::measure::data::{DType, Op};
use crate::bench::{Backend, BenchError};
use crate::ffi::cuda::{Context, Cuda, CudaError, DeviceBuffer, Stream};
use crate::ffi::nccl::{
    At, CollectiveCall, Communicator, DataType, Nccl, NcclResult, NcclVersion, Progress, RedOp,
    UNIQUE_ID_BYTES,
};
use crate::host::Root;
use crate::host::nccl::{SONAME, SearchEnv, locate};

/// The oldest NCCL with everything used here: `ncclAvg` and bf16 arrived in 2.10.
pub(crate) const MIN_VERSION: (u32, u32) = (2, 10);

/// NCCL and the CUDA driver, both loaded and usable, with the GPUs they see.
pub(crate) struct NcclStack {
    pub nccl: Nccl,
    pub version: NcclVersion,
    pub cuda: Cuda,
    pub devices: usize,
}

/// Why the NCCL backend could not start or stopped, each with its own text (exit 3). A call
/// NCCL refused, or an error it reported, stays the library's own
/// [`NcclError`](crate::ffi::nccl::NcclError).
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    #[error(
        "NCCL not found ({SONAME} not in: {}); set GPUTUNE_NCCL_LIB to its path, or use \
         --backend tcp",
        searched.join("; ")
    )]
    NotFound { searched: Vec<String> },
    /// NCCL loaded, but the CUDA driver did not.
    #[error(
        "NCCL {version} found at {}, but {source}; use --backend tcp to measure the network \
         without GPUs",
        path.display()
    )]
    NoCuda {
        version: NcclVersion,
        path: PathBuf,
        #[source]
        source: CudaError,
    },
    #[error(
        "NCCL {version} at {} is too old: bench needs {}.{} or newer (avg and bf16)",
        path.display(),
        MIN_VERSION.0,
        MIN_VERSION.1
    )]
    TooOld { version: NcclVersion, path: PathBuf },
    #[error("rank 0 sent an NCCL id of {0} bytes, not {UNIQUE_ID_BYTES}")]
    IdLength(usize),
    #[error("cannot allocate {0} bytes of host memory")]
    HostMemory(usize),
    #[error("the NCCL backend ran before it was prepared")]
    Unprepared,
    #[error("the NCCL communicator was aborted")]
    Aborted,
    #[error(
        "{ops} operation(s) did not complete within {secs}s: a rank stalled or the network \
         dropped (communicator aborted)"
    )]
    Stalled { ops: usize, secs: u64 },
    #[error(
        "ncclCommInitRank did not complete within {0}s: a rank is missing or NCCL cannot \
         connect (check NCCL_SOCKET_IFNAME and the firewall)"
    )]
    InitStalled(u64),
    #[error("cannot start a thread: {0}")]
    Thread(#[source] std::io::Error),
    #[error("ncclCommInitRank's thread ended without an answer")]
    InitVanished,
}

/// Loads NCCL and CUDA and counts GPUs; each way of failing is its own message.
pub(crate) fn probe(root: &Root) -> Result<NcclStack, BenchError> {
    let located = locate(root, &SearchEnv::from_process())
        .map_err(|searched| BackendError::NotFound { searched })?;
    let nccl = crate::host::nccl::load(root, &located).map_err(BenchError::from)?;
    let version = nccl.version().map_err(BenchError::from)?;
    check_version(version, &located.path)?;
    let with_nccl = |source: CudaError| BackendError::NoCuda {
        version,
        path: located.path.clone(),
        source,
    };
    let cuda = Cuda::open().map_err(with_nccl)?;
    let devices = cuda.device_count().map_err(with_nccl)?;
    Ok(NcclStack {
        nccl,
        version,
        cuda,
        devices,
    })
}

/// Refuses an NCCL older than [`MIN_VERSION`], naming the file.
pub(crate) fn check_version(
    version: NcclVersion,
    path: &std::path::Path,
) -> Result<(), BenchError> {
    if (version.major, version.minor) < MIN_VERSION {
        return Err(BackendError::TooOld {
            version,
            path: path.to_path_buf(),
        }
        .into());
    }
    Ok(())
}

fn data_type(dtype: DType) -> DataType {
    match dtype {
        DType::I32 => DataType::Int32,
        DType::F16 => DataType::Float16,
        DType::F32 => DataType::Float32,
        DType::F64 => DataType::Float64,
        DType::Bf16 => DataType::Bfloat16,
    }
}

fn red_op(op: Op) -> RedOp {
    match op {
        Op::Sum => RedOp::Sum,
        Op::Prod => RedOp::Prod,
        Op::Max => RedOp::Max,
        Op::Min => RedOp::Min,
        Op::Avg => RedOp::Avg,
    }
}

/// The library call for a row: `count` as [`Counts::param`] gives it, reductions by `op`,
/// Broadcast from rank 0 (nccl-tests' default root).
fn nccl_call(collective: Collective, count: usize, op: RedOp) -> CollectiveCall {
    match collective {
        Collective::AllReduce => CollectiveCall::AllReduce { count, op },
        Collective::AllGather => CollectiveCall::AllGather { count },
        Collective::ReduceScatter => CollectiveCall::ReduceScatter { count, op },
        Collective::Broadcast => CollectiveCall::Broadcast { count, root: 0 },
    }
}

/// Where a rank sits: its GPU and its place in the job.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Place {
    pub ordinal: usize,
    pub rank: usize,
    pub world: usize,
}

/// One GPU per rank: more ranks on a node than it has GPUs is a usage error naming both
/// counts, found before any rank starts.
pub(crate) fn check_ranks(local_ranks: usize, devices: usize) -> Result<(), BenchError> {
    if local_ranks <= devices {
        return Ok(());
    }
    Err(BenchError::Usage(format!(
        "{local_ranks} ranks on this node but {devices} GPU(s): each rank needs a GPU of its own, so at most {devices} ranks per node (lower --ranks)"
    )))
}

/// The GPU a rank uses and its name, for the header. Two ranks on one GPU would measure
/// nothing real (and NCCL 2.30 no longer refuses it), so more local ranks than GPUs is a
/// usage error naming both counts.
pub(crate) fn device_for(
    probe: &NcclStack,
    local_rank: usize,
) -> Result<(usize, String), BenchError> {
    if local_rank >= probe.devices {
        return Err(BenchError::Usage(format!(
            "local rank {local_rank} has no GPU of its own: this node has {} GPU(s), so at most {} ranks per node (lower --ranks or the launcher's tasks per node)",
            probe.devices, probe.devices
        )));
    }
    let ordinal = local_rank;
    let dev = probe.cuda.device(ordinal).map_err(BenchError::from)?;
    let name = probe.cuda.device_name(dev).map_err(BenchError::from)?;
    Ok((ordinal, format!("{ordinal} {name}")))
}

/// One rank's communicator on one GPU. Fields drop in order: the communicator before the
/// memory and stream its work used; the context, which each of them also holds, last.
pub(crate) struct NcclBackend {
    /// `None` once aborted.
    comm: Option<Communicator>,
    /// Allocated by the first [`Backend::prepare`], grown when a size needs more.
    buffers: Option<Buffers>,
    stream: Stream,
    context: Context,
    /// This rank's input for the current size, kept to reload before each checked run.
    input: Vec<u8>,
    shape: Shape,
    rank: usize,
    /// Bytes to allocate at least: the run's largest size, so smaller sizes can move.
    max_bytes: usize,
    /// Operations since the last reset: each one's buffers sit one size further into the
    /// allocation (cycling), as nccl-tests shifts them to keep caches from flattering small
    /// sizes; a reset goes back to offset 0, where the input is loaded and the check reads.
    iter: usize,
    timeout: Duration,
    fatal: Arc<JobStop>,
}

/// The send and receive allocations, of the same size.
struct Buffers {
    send: DeviceBuffer,
    recv: DeviceBuffer,
}

/// Which allocation one side of an operation uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    Send,
    Recv,
}

/// Where an operation reads and writes: the allocation and byte offset of its send side,
/// then of its receive side, `shift` bytes in. Out of place each side has its own; in place
/// both use the receive allocation as nccl-tests places them: AllGather sends from this
/// rank's `block`, ReduceScatter receives into it.
fn layout(
    collective: Collective,
    in_place: bool,
    shift: usize,
    block: usize,
    rank: usize,
) -> [(Side, usize); 2] {
    if !in_place {
        return [(Side::Send, shift), (Side::Recv, shift)];
    }
    let mine = shift.saturating_add(rank.saturating_mul(block));
    match collective {
        Collective::AllGather => [(Side::Recv, mine), (Side::Recv, shift)],
        Collective::ReduceScatter => [(Side::Recv, shift), (Side::Recv, mine)],
        Collective::AllReduce | Collective::Broadcast => [(Side::Recv, shift), (Side::Recv, shift)],
    }
}

/// The offset of operation `iter` since the reset: `whole · (iter mod steps)`, with `steps`
/// the sizes that fit in `capacity` (nccl-tests' `startColl`).
fn shift(iter: usize, whole: usize, capacity: usize) -> usize {
    if whole == 0 {
        return 0;
    }
    let steps = (capacity / whole).max(1);
    whole * (iter % steps)
}

/// `len` zeroed bytes of host memory, or an error when there is not that much.
fn host_buffer(len: usize) -> Result<Vec<u8>, BenchError> {
    let mut buffer = Vec::new();
    buffer
        .try_reserve_exact(len)
        .map_err(|_| BackendError::HostMemory(len))?;
    buffer.resize(len, 0);
    Ok(buffer)
}

/// What a wait waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Until {
    /// NCCL took the last call (a non-blocking communicator refuses the next one before).
    Queued,
    /// The stream ran everything queued on it.
    Finished,
}

/// Why to stop waiting for NCCL, once it is time: the control plane's verdict first, else
/// `late()` once `deadline` passed.
fn stop_reason(
    fatal: &JobStop,
    deadline: Instant,
    late: impl FnOnce() -> BenchError,
) -> Option<BenchError> {
    if fatal.is_raised()
        && let Some(reason) = fatal.reason()
    {
        return Some(BenchError::Runtime(reason));
    }
    (Instant::now() >= deadline).then(late)
}

impl NcclBackend {
    /// Joins the communicator ([`init`]): an error, never a hang, when a rank is missing
    /// past the timeout or the control plane stops the job.
    pub(crate) fn new(
        probe: NcclStack,
        place: Place,
        id: &[u8],
        max_bytes: usize,
        timeout: Duration,
        fatal: Arc<JobStop>,
    ) -> Result<NcclBackend, BenchError> {
        let id: &[u8; UNIQUE_ID_BYTES] = id
            .try_into()
            .map_err(|_| BackendError::IdLength(id.len()))?;
        // Each of these releases itself if a later step fails.
        let device = probe.cuda.device(place.ordinal).map_err(BenchError::from)?;
        let context = probe
            .cuda
            .primary_context(device)
            .map_err(BenchError::from)?;
        let stream = context.stream().map_err(BenchError::from)?;
        let comm = init::init(&probe, &context, place, id, timeout, &fatal)?;
        Ok(NcclBackend {
            comm: Some(comm),
            buffers: None,
            stream,
            context,
            input: Vec::new(),
            shape: Shape::new(Collective::AllReduce, DType::F32, 0, 1),
            rank: place.rank,
            max_bytes,
            iter: 0,
            timeout,
            fatal,
        })
    }

    fn buffers(&self) -> Result<&Buffers, BenchError> {
        Ok(self.buffers.as_ref().ok_or(BackendError::Unprepared)?)
    }

    /// Bytes the in-place buffer holds: the larger of send and receive.
    fn whole(&self) -> usize {
        self.shape.whole_bytes()
    }

    /// The two sides of an operation `shift` bytes into the allocations.
    fn places<'a>(&self, buffers: &'a Buffers, in_place: bool, shift: usize) -> [At<'a>; 2] {
        let block = self.shape.block_bytes();
        layout(self.shape.collective, in_place, shift, block, self.rank).map(|(side, offset)| At {
            buffer: match side {
                Side::Send => &buffers.send,
                Side::Recv => &buffers.recv,
            },
            offset,
        })
    }

    /// Queues one operation, its buffers `shift` bytes in.
    fn launch(&self, op: Op, in_place: bool, shift: usize) -> Result<Progress, BenchError> {
        let comm = self.comm.as_ref().ok_or(BackendError::Aborted)?;
        let [send, recv] = self.places(self.buffers()?, in_place, shift);
        let call = nccl_call(self.shape.collective, self.shape.counts.param, red_op(op));
        comm.launch(call, data_type(self.shape.dtype), send, recv, &self.stream)
            .map_err(BenchError::from)
    }

    /// Polls until `until` holds, watching NCCL's asynchronous error, the job's stop and
    /// `deadline`; aborts the communicator on any of them.
    fn wait(&mut self, until: Until, deadline: Instant, ops: usize) -> Result<(), BenchError> {
        loop {
            match self.poll(until) {
                Ok(true) => return Ok(()),
                Ok(false) => {}
                Err(e) => return Err(self.abort(e)),
            }
            let late = || {
                BackendError::Stalled {
                    ops: ops.max(1),
                    secs: self.timeout.as_secs(),
                }
                .into()
            };
            if let Some(reason) = stop_reason(&self.fatal, deadline, late) {
                return Err(self.abort(reason));
            }
            thread::yield_now();
        }
    }

    /// Whether `until` holds now; an error once NCCL or the stream reports one.
    fn poll(&self, until: Until) -> Result<bool, BenchError> {
        let comm = self.comm.as_ref().ok_or(BackendError::Aborted)?;
        match comm.state().map_err(BenchError::from)? {
            NcclResult::SUCCESS => {}
            NcclResult::IN_PROGRESS => return Ok(false),
            code => return Err(comm.reported(code).into()),
        }
        match until {
            Until::Queued => Ok(true),
            Until::Finished => self.stream.is_idle().map_err(BenchError::from),
        }
    }

    /// Aborts the communicator (once; later calls find none) and returns `reason` as the
    /// error.
    fn abort(&mut self, reason: BenchError) -> BenchError {
        if let Some(comm) = self.comm.take() {
            comm.abort();
        }
        reason
    }
}

impl Backend for NcclBackend {
    fn prepare(&mut self, shape: Shape, input: &[u8]) -> Result<(), BenchError> {
        self.shape = shape;
        let whole = self.whole().max(self.max_bytes);
        if self.buffers.as_ref().is_none_or(|b| b.recv.len() < whole) {
            // The old pair goes before the larger one is asked for.
            self.buffers = None;
            let send = self.context.alloc(whole).map_err(BenchError::from)?;
            let recv = self.context.alloc(whole).map_err(BenchError::from)?;
            self.buffers = Some(Buffers { send, recv });
        }
        self.input.clear();
        self.input
            .try_reserve_exact(input.len())
            .map_err(|_| BackendError::HostMemory(input.len()))?;
        self.input.extend_from_slice(input);
        self.buffers()?
            .send
            .write(0, input, &self.stream)
            .map_err(BenchError::from)
    }

    fn run(&mut self, op: Op, in_place: bool, iters: usize) -> Result<(), BenchError> {
        // `--timeout` bounds the whole wait, as nccl-tests' `-T` does.
        let deadline = Instant::now() + self.timeout;
        let capacity = self.buffers()?.recv.len();
        for _ in 0..iters {
            let shift = shift(self.iter, self.whole(), capacity);
            self.iter += 1;
            match self.launch(op, in_place, shift) {
                Ok(Progress::Done) => {}
                Ok(Progress::InProgress) => self.wait(Until::Queued, deadline, iters)?,
                Err(e) => return Err(self.abort(e)),
            }
        }
        self.wait(Until::Finished, deadline, iters)
    }

    /// Clears the output and loads fresh input, as nccl-tests does before a checked run,
    /// both on the benchmark's stream (so the collective queued next sees them): a check
    /// that did nothing then fails instead of passing on the timed loop's leftovers.
    fn reset(&mut self, in_place: bool) -> Result<(), BenchError> {
        self.iter = 0;
        let [send, recv] = self.places(self.buffers()?, in_place, 0);
        let output = self.shape.recv_bytes();
        recv.buffer
            .clear(recv.offset, output, &self.stream)
            .and_then(|()| send.buffer.write(send.offset, &self.input, &self.stream))
            .map_err(BenchError::from)
    }

    fn result(&mut self, in_place: bool) -> Result<Vec<u8>, BenchError> {
        let [_, recv] = self.places(self.buffers()?, in_place, 0);
        let mut out = host_buffer(self.shape.recv_bytes())?;
        recv.buffer
            .read(recv.offset, &mut out, &self.stream)
            .map_err(BenchError::from)?;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn too_old_libraries_are_refused_by_name() {
        let path = std::path::Path::new("/opt/nccl/libnccl.so.2");
        let err = check_version(NcclVersion::from_code(2804), path).unwrap_err();
        assert_eq!(err.exit_code(), crate::error::ExitCode::Runtime);
        assert!(
            err.to_string()
                .contains("NCCL 2.8.4 at /opt/nccl/libnccl.so.2 is too old"),
            "{err}"
        );
        assert!(check_version(NcclVersion::from_code(21003), path).is_ok());
        assert!(check_version(NcclVersion::from_code(23203), path).is_ok());
    }

    #[test]
    fn each_backend_failure_reads_as_the_text_it_replaced() {
        let version = NcclVersion::from_code(21805);
        let path = PathBuf::from("/opt/nccl/libnccl.so.2");
        let cuda = CudaError::NoDevice("CUDA_ERROR_NO_DEVICE".into());
        let cuda_text = cuda.to_string();
        let cases: Vec<(BackendError, String)> = vec![
            (
                BackendError::NotFound {
                    searched: vec!["/a".into(), "/b".into()],
                },
                "NCCL not found (libnccl.so.2 not in: /a; /b); set GPUTUNE_NCCL_LIB to its path, \
                 or use --backend tcp"
                    .to_string(),
            ),
            (
                BackendError::NoCuda {
                    version,
                    path: path.clone(),
                    source: cuda,
                },
                format!(
                    "NCCL 2.18.5 found at /opt/nccl/libnccl.so.2, but {cuda_text}; use --backend \
                     tcp to measure the network without GPUs"
                ),
            ),
            (
                BackendError::TooOld { version, path },
                "NCCL 2.18.5 at /opt/nccl/libnccl.so.2 is too old: bench needs 2.10 or newer (avg \
                 and bf16)"
                    .to_string(),
            ),
            (
                BackendError::IdLength(12),
                "rank 0 sent an NCCL id of 12 bytes, not 128".to_string(),
            ),
            (
                BackendError::HostMemory(1 << 20),
                "cannot allocate 1048576 bytes of host memory".to_string(),
            ),
            (
                BackendError::Unprepared,
                "the NCCL backend ran before it was prepared".to_string(),
            ),
            (
                BackendError::Aborted,
                "the NCCL communicator was aborted".to_string(),
            ),
            (
                BackendError::Stalled { ops: 20, secs: 30 },
                "20 operation(s) did not complete within 30s: a rank stalled or the network \
                 dropped (communicator aborted)"
                    .to_string(),
            ),
            (
                BackendError::InitStalled(30),
                "ncclCommInitRank did not complete within 30s: a rank is missing or NCCL cannot \
                 connect (check NCCL_SOCKET_IFNAME and the firewall)"
                    .to_string(),
            ),
            (
                BackendError::Thread(std::io::Error::from(std::io::ErrorKind::OutOfMemory)),
                format!(
                    "cannot start a thread: {}",
                    std::io::Error::from(std::io::ErrorKind::OutOfMemory)
                ),
            ),
            (
                BackendError::InitVanished,
                "ncclCommInitRank's thread ended without an answer".to_string(),
            ),
        ];
        crate::testing::assert_bench_failures(cases);
    }

    #[test]
    fn an_nccl_failure_stays_typed_with_its_text_and_exit_code() {
        let err = BenchError::from(crate::ffi::nccl::NcclError::NotLive {
            path: "/img/usr/lib/libnccl.so.2".into(),
            root: "/img".into(),
        });
        assert_eq!(err.exit_code(), crate::error::ExitCode::Runtime);
        assert_eq!(
            err.to_string(),
            "/img/usr/lib/libnccl.so.2 belongs to the root /img, not the running node; gputune never loads an image's libraries"
        );
        assert!(matches!(
            err,
            BenchError::Nccl(crate::ffi::nccl::NcclError::NotLive { .. })
        ));
    }

    #[test]
    fn more_ranks_than_gpus_is_a_usage_error_naming_both_counts() {
        assert!(check_ranks(8, 8).is_ok());
        assert!(check_ranks(1, 8).is_ok());
        let err = check_ranks(3, 2).unwrap_err();
        assert_eq!(err.exit_code(), crate::error::ExitCode::Usage);
        assert!(
            err.to_string()
                .starts_with("3 ranks on this node but 2 GPU(s)"),
            "{err}"
        );
    }

    #[test]
    fn out_of_place_sides_use_their_own_allocation_at_the_shift() {
        for collective in Collective::ALL {
            assert_eq!(
                layout(collective, false, 64, 16, 3),
                [(Side::Send, 64), (Side::Recv, 64)],
                "{collective:?}"
            );
        }
    }

    #[test]
    fn in_place_sides_sit_in_the_receive_allocation_as_nccl_tests_puts_them() {
        // Rank 2 of 4, 16-byte blocks, 128 bytes in: AllGather sends from this rank's block,
        // ReduceScatter receives into it, the others work on one range.
        let (base, mine) = ((Side::Recv, 128), (Side::Recv, 160));
        for (collective, want) in [
            (Collective::AllGather, [mine, base]),
            (Collective::ReduceScatter, [base, mine]),
            (Collective::AllReduce, [base, base]),
            (Collective::Broadcast, [base, base]),
        ] {
            assert_eq!(layout(collective, true, 128, 16, 2), want, "{collective:?}");
        }
    }

    #[test]
    fn each_operation_moves_one_size_further_and_wraps_inside_the_allocation() {
        // 1 KiB operations in a 4 KiB allocation: 0, 1, 2, 3 KiB, then back to 0.
        let shifts: Vec<usize> = (0..6).map(|i| shift(i, 1024, 4096)).collect();
        assert_eq!(shifts, [0, 1024, 2048, 3072, 0, 1024]);
        // Every shifted operation still ends inside the allocation.
        for (iter, whole, capacity) in [(7, 1000, 4096), (3, 4096, 4096), (9, 3, 10)] {
            assert!(shift(iter, whole, capacity) + whole <= capacity);
        }
        assert_eq!(shift(5, 0, 4096), 0);
        assert_eq!(shift(5, 4096, 4096), 0, "the largest size never moves");
    }

    /// The in-place layout never reaches past `whole` bytes from the shift, so with the
    /// shift above every side fits in the allocation: what ffi::nccl checks again.
    #[test]
    fn every_side_of_every_collective_fits_in_the_allocation() {
        let (ranks, es, capacity) = (4, 4, 4096);
        for collective in Collective::ALL {
            let counts = collective.counts(64, ranks);
            let whole = counts.send.max(counts.recv) * es;
            let call = nccl_call(collective, counts.param, RedOp::Sum);
            let (send_len, recv_len) = call.extents(es, ranks).unwrap();
            assert_eq!((send_len, recv_len), (counts.send * es, counts.recv * es));
            for rank in 0..ranks {
                for in_place in [false, true] {
                    for iter in 0..8 {
                        let at = shift(iter, whole, capacity);
                        let [(_, send), (_, recv)] =
                            layout(collective, in_place, at, counts.param * es, rank);
                        assert!(send + send_len <= capacity, "{collective:?} {rank} {iter}");
                        assert!(recv + recv_len <= capacity, "{collective:?} {rank} {iter}");
                    }
                }
            }
        }
    }

    #[test]
    fn bench_types_map_to_nccl_types_of_the_same_size() {
        for dtype in DType::ALL {
            assert_eq!(data_type(dtype).size(), dtype.size(), "{dtype:?}");
        }
        assert_eq!(red_op(Op::Avg), RedOp::Avg);
        assert_eq!(red_op(Op::Min), RedOp::Min);
    }
}
