//! The NCCL backend: one process per GPU (`LOCAL_RANK` picks the device), device buffers and
//! a stream through the CUDA driver API ([`cuda`]), NCCL through `libnccl.so.2` found by
//! [`crate::host::nccl::locate`]. The communicator's id travels in the rendezvous Welcome, so
//! no MPI is needed. Every wait polls the stream and NCCL's asynchronous error, and gives up
//! with `ncclCommAbort` when the timeout passes or the job is stopped.

pub use crate::ffi::cuda;
pub mod init;

use std::ffi::{c_int, c_void};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use crate::bench::collective::{Collective, Counts};
use crate::bench::control::JobStop;
use crate::bench::data::{DType, Op};
use crate::bench::{Backend, BenchError};
use crate::host::Root;
use crate::host::nccl::{Nccl, NcclVersion, SearchEnv, UNIQUE_ID_BYTES, locate};
use cuda::{CuDevicePtr, CuStream, Cuda, Stream};

/// The oldest NCCL with everything used here: `ncclAvg` and bf16 arrived in 2.10.
pub const MIN_VERSION: (u32, u32) = (2, 10);

/// NCCL and the CUDA driver, both loaded and usable, with the GPUs they see.
pub struct NcclStack {
    pub nccl: Nccl,
    pub version: NcclVersion,
    pub cuda: Cuda,
    pub devices: usize,
}

/// Loads NCCL and CUDA and counts GPUs; each way of failing is its own message.
pub fn probe(root: &Root) -> Result<NcclStack, BenchError> {
    let located = locate(root, &SearchEnv::from_process()).map_err(|searched| {
        BenchError::Runtime(format!(
            "NCCL not found ({} not in: {}); set GPUTUNE_NCCL_LIB to its path, or use --backend tcp",
            crate::host::nccl::SONAME,
            searched.join("; ")
        ))
    })?;
    let nccl =
        crate::host::nccl::load(root, &located).map_err(|e| BenchError::Runtime(e.to_string()))?;
    let version = nccl
        .version()
        .map_err(|e| BenchError::Runtime(e.to_string()))?;
    check_version(version, &located.path)?;
    let with_nccl = |e: cuda::CudaError| {
        BenchError::Runtime(format!(
            "NCCL {version} found at {}, but {e}; use --backend tcp to measure the network without GPUs",
            located.path.display()
        ))
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
pub fn check_version(version: NcclVersion, path: &std::path::Path) -> Result<(), BenchError> {
    if (version.major, version.minor) < MIN_VERSION {
        return Err(BenchError::Runtime(format!(
            "NCCL {version} at {} is too old: bench needs {}.{} or newer (avg and bf16)",
            path.display(),
            MIN_VERSION.0,
            MIN_VERSION.1
        )));
    }
    Ok(())
}

/// `ncclUniqueId`, passed by value.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct UniqueId {
    internal: [u8; UNIQUE_ID_BYTES],
}

pub type Comm = *mut c_void;

fn nccl_type(dtype: DType) -> c_int {
    match dtype {
        DType::I32 => 2,
        DType::F16 => 6,
        DType::F32 => 7,
        DType::F64 => 8,
        DType::Bf16 => 9,
    }
}

fn nccl_op(op: Op) -> c_int {
    match op {
        Op::Sum => 0,
        Op::Prod => 1,
        Op::Max => 2,
        Op::Min => 3,
        Op::Avg => 4,
    }
}

/// Where a rank sits: its GPU and its place in the job.
#[derive(Debug, Clone, Copy)]
pub struct Place {
    pub ordinal: usize,
    pub rank: usize,
    pub world: usize,
}

/// One rank's communicator on one GPU.
pub struct NcclBackend {
    probe: NcclStack,
    /// Its primary context is retained while the backend lives.
    device: cuda::CuDevice,
    comm: Comm,
    stream: Stream,
    send: CuDevicePtr,
    recv: CuDevicePtr,
    capacity: usize,
    input: Vec<u8>,
    dtype: DType,
    collective: Collective,
    counts: Counts,
    rank: usize,
    calls: Calls,
    /// Bytes to allocate at least: the run's largest size, so smaller sizes can move.
    max_bytes: usize,
    /// Operations since the last reset: each one's buffers sit one size further into the
    /// allocation (cycling), as nccl-tests shifts them to keep caches from flattering small
    /// sizes; a reset goes back to offset 0, where the input is loaded and the check reads.
    iter: usize,
    timeout: Duration,
    fatal: Arc<JobStop>,
    aborted: bool,
}

/// The GPU a rank uses and its name, for the header. Two ranks on one GPU would measure
/// nothing real (and NCCL 2.30 no longer refuses it), so more local ranks than GPUs is a
/// usage error naming both counts.
pub fn device_for(probe: &NcclStack, local_rank: usize) -> Result<(usize, String), BenchError> {
    if local_rank >= probe.devices {
        return Err(BenchError::Usage(format!(
            "local rank {local_rank} has no GPU of its own: this node has {} GPU(s), so at most {} ranks per node (lower --ranks or the launcher's tasks per node)",
            probe.devices, probe.devices
        )));
    }
    let ordinal = local_rank;
    let dev = probe
        .cuda
        .device(ordinal)
        .map_err(|e| BenchError::Runtime(e.to_string()))?;
    let name = probe
        .cuda
        .device_name(dev)
        .map_err(|e| BenchError::Runtime(e.to_string()))?;
    Ok((ordinal, format!("{ordinal} {name}")))
}

impl NcclBackend {
    /// Joins the communicator ([`init`]): an error, never a hang, when a rank is missing
    /// past the timeout or the control plane stops the job.
    pub fn new(
        probe: NcclStack,
        place: Place,
        id: &[u8],
        max_bytes: usize,
        timeout: Duration,
        fatal: Arc<JobStop>,
    ) -> Result<NcclBackend, BenchError> {
        let Place {
            ordinal,
            rank,
            world,
        } = place;
        let rt = |e: String| BenchError::Runtime(e);
        if id.len() != UNIQUE_ID_BYTES {
            return Err(rt(format!(
                "rank 0 sent an NCCL id of {} bytes, not {UNIQUE_ID_BYTES}",
                id.len()
            )));
        }
        let mut unique = UniqueId {
            internal: [0; UNIQUE_ID_BYTES],
        };
        unique.internal.copy_from_slice(id);
        let calls = Calls::resolve(&probe).map_err(rt)?;
        let dev = probe.cuda.device(ordinal).map_err(|e| rt(e.to_string()))?;
        probe.cuda.use_device(dev).map_err(|e| rt(e.to_string()))?;
        // From here every failure releases what was taken: the context, then the stream.
        let stream = match probe.cuda.stream() {
            Ok(s) => s,
            Err(e) => {
                probe.cuda.release_device(dev);
                return Err(rt(e.to_string()));
            }
        };
        let comm = match init::init(
            &probe.nccl,
            probe.version,
            world,
            unique,
            rank,
            timeout,
            &fatal,
        ) {
            Ok(c) => c,
            Err(e) => {
                probe.cuda.destroy_stream(stream);
                probe.cuda.release_device(dev);
                return Err(e);
            }
        };
        Ok(NcclBackend {
            probe,
            device: dev,
            comm,
            stream,
            send: 0,
            recv: 0,
            capacity: 0,
            input: Vec::new(),
            dtype: DType::F32,
            collective: Collective::AllReduce,
            counts: Collective::AllReduce.counts(0, 1),
            rank,
            calls,
            max_bytes,
            iter: 0,
            timeout,
            fatal,
            aborted: false,
        })
    }

    fn cuda_err(e: cuda::CudaError) -> BenchError {
        BenchError::Runtime(e.to_string())
    }

    /// Waits for the stream, watching NCCL's asynchronous error, the job's stop and the
    /// timeout; aborts the communicator on any of them.
    /// `--timeout` bounds the whole wait, as nccl-tests' `-T` does.
    fn wait(&mut self, ops: usize) -> Result<(), BenchError> {
        let deadline = Instant::now() + self.timeout;
        let async_error = self.calls.async_error;
        loop {
            let code = self
                .probe
                .cuda
                .stream_query(self.stream)
                .map_err(Self::cuda_err)?;
            if code == 0 {
                return Ok(());
            }
            if code != cuda::NOT_READY {
                self.abort();
                return Err(BenchError::Runtime(format!(
                    "cuStreamQuery failed: {}",
                    self.probe.cuda.error_string(code)
                )));
            }
            let mut err: c_int = 0;
            // SAFETY: `comm` is a live communicator; valid out-pointer.
            unsafe { async_error(self.comm, &mut err) };
            if err != 0 && err != 7 {
                // 7 = ncclInProgress.
                let message = self.probe.nccl.error_string(err);
                self.abort();
                return Err(BenchError::Runtime(format!(
                    "NCCL reported: {message} (ncclResult_t {err})"
                )));
            }
            if let Some(reason) = self.fatal.reason() {
                self.abort();
                return Err(BenchError::Runtime(reason));
            }
            if Instant::now() >= deadline {
                self.abort();
                return Err(BenchError::Runtime(format!(
                    "{} operation(s) did not complete within {}s: a rank stalled or the network dropped (communicator aborted)",
                    ops.max(1),
                    self.timeout.as_secs()
                )));
            }
            thread::yield_now();
        }
    }

    fn abort(&mut self) {
        if self.aborted {
            return;
        }
        self.aborted = true;
        // SAFETY: ncclResult_t ncclCommAbort(ncclComm_t).
        if let Ok(abort) = unsafe {
            self.probe
                .nccl
                .symbol::<unsafe extern "C" fn(Comm) -> c_int>("ncclCommAbort")
        } {
            // SAFETY: `comm` is live and not used after this.
            unsafe { abort(self.comm) };
        }
    }
}

/// The NCCL entry points the timed loop calls, looked up once.
#[derive(Clone, Copy)]
struct Calls {
    /// ncclAllReduce(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t,
    /// cudaStream_t).
    all_reduce: unsafe extern "C" fn(
        *const c_void,
        *mut c_void,
        usize,
        c_int,
        c_int,
        Comm,
        CuStream,
    ) -> c_int,
    /// ncclAllGather(const void*, void*, size_t sendcount, ncclDataType_t, ncclComm_t,
    /// cudaStream_t).
    all_gather:
        unsafe extern "C" fn(*const c_void, *mut c_void, usize, c_int, Comm, CuStream) -> c_int,
    /// ncclReduceScatter(const void*, void*, size_t recvcount, ncclDataType_t, ncclRedOp_t,
    /// ncclComm_t, cudaStream_t).
    reduce_scatter: unsafe extern "C" fn(
        *const c_void,
        *mut c_void,
        usize,
        c_int,
        c_int,
        Comm,
        CuStream,
    ) -> c_int,
    /// ncclBroadcast(const void*, void*, size_t, ncclDataType_t, int root, ncclComm_t,
    /// cudaStream_t).
    broadcast: unsafe extern "C" fn(
        *const c_void,
        *mut c_void,
        usize,
        c_int,
        c_int,
        Comm,
        CuStream,
    ) -> c_int,
    /// ncclCommGetAsyncError(ncclComm_t, ncclResult_t*).
    async_error: unsafe extern "C" fn(Comm, *mut c_int) -> c_int,
}

impl Calls {
    fn resolve(probe: &NcclStack) -> Result<Calls, String> {
        let nccl = &probe.nccl;
        let e = |e: crate::host::nccl::NcclError| e.to_string();
        // SAFETY: each symbol has the C signature written on its field (nccl.h).
        unsafe {
            Ok(Calls {
                all_reduce: nccl.symbol("ncclAllReduce").map_err(e)?,
                all_gather: nccl.symbol("ncclAllGather").map_err(e)?,
                reduce_scatter: nccl.symbol("ncclReduceScatter").map_err(e)?,
                broadcast: nccl.symbol("ncclBroadcast").map_err(e)?,
                async_error: nccl.symbol("ncclCommGetAsyncError").map_err(e)?,
            })
        }
    }
}

impl NcclBackend {
    /// The send and receive pointers of one operation, as nccl-tests places them in place:
    /// AllGather sends from this rank's block of the receive buffer, ReduceScatter receives
    /// into this rank's block of the send buffer.
    fn pointers(&self, in_place: bool, shift: usize) -> (CuDevicePtr, CuDevicePtr) {
        let shift = shift as CuDevicePtr;
        let (send, recv) = (self.send + shift, self.recv + shift);
        if !in_place {
            return (send, recv);
        }
        let block = (self.counts.param * self.dtype.size()) as CuDevicePtr;
        let mine = recv + self.rank as CuDevicePtr * block;
        match self.collective {
            Collective::AllGather => (mine, recv),
            Collective::ReduceScatter => (recv, mine),
            Collective::AllReduce | Collective::Broadcast => (recv, recv),
        }
    }

    /// The offset of operation `iter` since the reset: `whole · (iter mod steps)`, with
    /// `steps` the sizes that fit in the allocation (nccl-tests' `startColl`).
    fn shift(&self, iter: usize) -> usize {
        let whole = self.whole();
        if whole == 0 {
            return 0;
        }
        let steps = (self.capacity / whole).max(1);
        whole * (iter % steps)
    }

    /// Bytes the in-place buffer holds: the larger of send and receive.
    fn whole(&self) -> usize {
        self.counts.send.max(self.counts.recv) * self.dtype.size()
    }
}

impl Backend for NcclBackend {
    fn prepare(
        &mut self,
        collective: Collective,
        dtype: DType,
        counts: Counts,
        input: &[u8],
    ) -> Result<(), BenchError> {
        (self.collective, self.dtype, self.counts) = (collective, dtype, counts);
        let whole = self.whole().max(self.max_bytes);
        if whole > self.capacity {
            if self.capacity > 0 {
                self.probe.cuda.free(self.send);
                self.probe.cuda.free(self.recv);
                self.capacity = 0;
            }
            self.send = self.probe.cuda.alloc(whole).map_err(Self::cuda_err)?;
            self.recv = match self.probe.cuda.alloc(whole) {
                Ok(p) => p,
                Err(e) => {
                    self.probe.cuda.free(self.send);
                    return Err(Self::cuda_err(e));
                }
            };
            self.capacity = whole;
        }
        self.input.clear();
        self.input.try_reserve_exact(input.len()).map_err(|_| {
            BenchError::Runtime(format!(
                "cannot allocate {} bytes of host memory",
                input.len()
            ))
        })?;
        self.input.extend_from_slice(input);
        self.probe
            .cuda
            .copy_to_device(self.send, input)
            .and_then(|()| self.probe.cuda.synchronize())
            .map_err(Self::cuda_err)
    }

    fn run(&mut self, op: Op, in_place: bool, iters: usize) -> Result<(), BenchError> {
        if self.aborted {
            return Err(BenchError::Runtime(
                "the NCCL communicator was aborted".into(),
            ));
        }
        let (param, ty, red) = (self.counts.param, nccl_type(self.dtype), nccl_op(op));
        let (comm, stream, calls) = (self.comm, self.stream.0, self.calls);
        let name = match self.collective {
            Collective::AllReduce => "ncclAllReduce",
            Collective::AllGather => "ncclAllGather",
            Collective::ReduceScatter => "ncclReduceScatter",
            Collective::Broadcast => "ncclBroadcast",
        };
        for _ in 0..iters {
            let (src, dst) = self.pointers(in_place, self.shift(self.iter));
            let (src, dst) = (src as *const c_void, dst as *mut c_void);
            self.iter += 1;
            // SAFETY: the shift keeps `whole()` bytes inside the allocation at both pointers,
            // enough for this collective's counts; stream and communicator are live.
            let code = unsafe {
                match self.collective {
                    Collective::AllReduce => {
                        (calls.all_reduce)(src, dst, param, ty, red, comm, stream)
                    }
                    Collective::AllGather => (calls.all_gather)(src, dst, param, ty, comm, stream),
                    Collective::ReduceScatter => {
                        (calls.reduce_scatter)(src, dst, param, ty, red, comm, stream)
                    }
                    Collective::Broadcast => {
                        (calls.broadcast)(src, dst, param, ty, 0, comm, stream)
                    }
                }
            };
            // A non-blocking communicator may answer ncclInProgress: the wait polls it.
            if code == init::IN_PROGRESS {
                continue;
            }
            if let Err(e) = self.probe.nccl.check(name, code) {
                self.abort();
                return Err(BenchError::Runtime(e.to_string()));
            }
        }
        self.wait(iters)
    }

    fn reset(&mut self, in_place: bool) -> Result<(), BenchError> {
        self.iter = 0;
        let cuda = &self.probe.cuda;
        if in_place {
            let (src, _) = self.pointers(true, 0);
            cuda.copy_to_device(src, &self.input)
        } else {
            // Clear the output, as nccl-tests does before a checked run.
            let len = self.counts.recv * self.dtype.size();
            let mut zeros = Vec::new();
            zeros.try_reserve_exact(len).map_err(|_| {
                BenchError::Runtime(format!("cannot allocate {len} bytes of host memory"))
            })?;
            zeros.resize(len, 0);
            cuda.copy_to_device(self.recv, &zeros)
        }
        .and_then(|()| cuda.synchronize())
        .map_err(Self::cuda_err)
    }

    fn result(&mut self, in_place: bool) -> Result<Vec<u8>, BenchError> {
        let (_, dst) = self.pointers(in_place, 0);
        let mut out = vec![0u8; self.counts.recv * self.dtype.size()];
        self.probe
            .cuda
            .copy_to_host(&mut out, dst)
            .map_err(Self::cuda_err)?;
        Ok(out)
    }
}

impl Drop for NcclBackend {
    fn drop(&mut self) {
        if !self.aborted {
            // SAFETY: ncclResult_t ncclCommDestroy(ncclComm_t); the communicator is idle.
            if let Ok(destroy) = unsafe {
                self.probe
                    .nccl
                    .symbol::<unsafe extern "C" fn(Comm) -> c_int>("ncclCommDestroy")
            } {
                // SAFETY: live communicator, destroyed once.
                unsafe { destroy(self.comm) };
            }
        }
        if self.capacity > 0 {
            self.probe.cuda.free(self.send);
            self.probe.cuda.free(self.recv);
        }
        self.probe.cuda.destroy_stream(self.stream);
        self.probe.cuda.release_device(self.device);
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
}
