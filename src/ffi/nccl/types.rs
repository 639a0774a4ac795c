//! NCCL's plain C types as nccl.h defines them: result codes, the version, element types and
//! reductions, the versioned `ncclConfig_t`, and how many bytes each collective touches.
//! Nothing here calls the library.

use std::ffi::{c_char, c_int, c_uint};
use std::fmt;

use crate::ffi::codes::result_codes;
use crate::ffi::cuda::OutOfBounds;

result_codes! {
    /// An `ncclResult_t`.
    pub struct NcclResult, unknown = "ncclResult_t";
    SUCCESS = 0, "ncclSuccess";
    UNHANDLED_CUDA_ERROR = 1, "ncclUnhandledCudaError";
    SYSTEM_ERROR = 2, "ncclSystemError";
    INTERNAL_ERROR = 3, "ncclInternalError";
    INVALID_ARGUMENT = 4, "ncclInvalidArgument";
    INVALID_USAGE = 5, "ncclInvalidUsage";
    REMOTE_ERROR = 6, "ncclRemoteError";
    /// A non-blocking communicator is still working on the last call: poll
    /// [`super::Communicator::state`] before the next one.
    IN_PROGRESS = 7, "ncclInProgress";
    TIMEOUT = 8, "ncclTimeout";
}

/// NCCL's version as `ncclGetVersion` reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NcclVersion {
    pub major: u32,
    pub minor: u32,
    pub patch: u32,
    /// The raw code (`23203` for 2.32.3).
    pub code: i32,
}

impl NcclVersion {
    /// Decodes NCCL_VERSION_CODE: `X*10000 + Y*100 + Z` since 2.9, `X*1000 + Y*100 + Z` before.
    pub(crate) fn from_code(code: i32) -> NcclVersion {
        let c = code.max(0) as u32;
        let (major, minor, patch) = if c >= 10000 {
            (c / 10000, (c % 10000) / 100, c % 100)
        } else {
            (c / 1000, (c % 1000) / 100, c % 100)
        };
        NcclVersion {
            major,
            minor,
            patch,
            code,
        }
    }

    /// Whether the library has `ncclCommInitRankConfig` and non-blocking communicators
    /// (2.14 and later).
    pub(crate) fn has_config(self) -> bool {
        (self.major, self.minor) >= (2, 14)
    }
}

impl fmt::Display for NcclVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

/// `ncclDataType_t`: the element types gputune measures.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DataType {
    Int32 = 2,
    Float16 = 6,
    Float32 = 7,
    Float64 = 8,
    Bfloat16 = 9,
}

impl DataType {
    /// Bytes per element.
    pub(crate) fn size(self) -> usize {
        match self {
            DataType::Float16 | DataType::Bfloat16 => 2,
            DataType::Int32 | DataType::Float32 => 4,
            DataType::Float64 => 8,
        }
    }
}

/// `ncclRedOp_t`'s built-in reductions.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RedOp {
    Sum = 0,
    Prod = 1,
    Max = 2,
    Min = 3,
    /// Since 2.10.
    Avg = 4,
}

/// `NCCL_CONFIG_UNDEF_INT`: "the library's default".
const UNDEF: c_int = c_int::MIN;

/// `NCCL_CONFIG_INITIALIZER`'s magic.
const MAGIC: c_uint = 0xcafe_beef;

/// `ncclConfig_t` as NCCL 2.28 lays it out (nccl.h, `ncclConfig_v22800`). The struct grew
/// field by field across versions; `size` tells the library how much of it the caller
/// filled, so an older library is given only the prefix it knows. The fields are private:
/// NCCL reads `size` bytes and follows the name pointers, so only the constructors here
/// may set them.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub(crate) struct Config {
    size: usize,
    magic: c_uint,
    version: c_uint,
    blocking: c_int,
    cga_cluster_size: c_int,
    min_ctas: c_int,
    max_ctas: c_int,
    net_name: *const c_char,
    split_share: c_int,
    traffic_class: c_int,
    comm_name: *const c_char,
    collnet_enable: c_int,
    cta_policy: c_int,
    shrink_share: c_int,
    nvls_ctas: c_int,
    n_channels_per_net_peer: c_int,
    nvlink_centric_sched: c_int,
}

impl Config {
    /// A non-blocking configuration for `version`: every attribute undefined (the library's
    /// default) except `blocking = 0` and, from 2.28 (where the field exists),
    /// `nvlinkCentricSched = 1` as nccl-tests sets it. Before 2.28, `size` covers only the
    /// fields 2.14 defined (through `netName`).
    pub(crate) fn non_blocking(version: NcclVersion) -> Config {
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

/// A collective and its parameters, with nccl.h's meaning of `count`: per rank for
/// AllGather's send and ReduceScatter's receive, the whole buffer otherwise.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CollectiveCall {
    AllReduce { count: usize, op: RedOp },
    AllGather { count: usize },
    ReduceScatter { count: usize, op: RedOp },
    Broadcast { count: usize, root: usize },
}

impl CollectiveCall {
    /// Bytes the call reads from its send side and writes to its receive side, for
    /// elements of `element` bytes on `ranks` ranks.
    pub(crate) fn extents(
        self,
        element: usize,
        ranks: usize,
    ) -> Result<(usize, usize), OutOfBounds> {
        let count = match self {
            CollectiveCall::AllReduce { count, .. }
            | CollectiveCall::AllGather { count }
            | CollectiveCall::ReduceScatter { count, .. }
            | CollectiveCall::Broadcast { count, .. } => count,
        };
        let overflow = OutOfBounds::Overflow {
            count,
            element,
            times: ranks,
        };
        let one = count.checked_mul(element).ok_or(overflow.clone())?;
        let all = one.checked_mul(ranks).ok_or(overflow)?;
        Ok(match self {
            CollectiveCall::AllReduce { .. } | CollectiveCall::Broadcast { .. } => (one, one),
            CollectiveCall::AllGather { .. } => (one, all),
            CollectiveCall::ReduceScatter { .. } => (all, one),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn result_codes_have_nccl_h_names_and_unknown_ones_keep_their_number() {
        assert_eq!(NcclResult::IN_PROGRESS.to_string(), "ncclInProgress");
        assert_eq!(NcclResult(0).to_string(), "ncclSuccess");
        assert_eq!(NcclResult(42).to_string(), "ncclResult_t 42");
        for (i, code) in NcclResult::KNOWN.iter().enumerate() {
            assert_eq!(code.0, i as c_int, "nccl.h numbers them 0 to 8 in order");
            let name = code.name().unwrap_or_default();
            assert!(name.starts_with("nccl"), "{code:?} is named {name:?}");
        }
        assert_eq!(NcclResult::KNOWN.len(), 9);
    }

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
        assert!(NcclVersion::from_code(21403).has_config());
        assert!(!NcclVersion::from_code(21304).has_config());
    }

    #[test]
    fn the_types_passed_by_value_have_nccl_h_sizes_and_values() {
        assert_eq!(
            std::mem::size_of::<DataType>(),
            std::mem::size_of::<c_int>()
        );
        assert_eq!(std::mem::size_of::<RedOp>(), std::mem::size_of::<c_int>());
        assert_eq!(
            std::mem::size_of::<NcclResult>(),
            std::mem::size_of::<c_int>()
        );
        assert_eq!(
            [
                DataType::Int32,
                DataType::Float16,
                DataType::Float32,
                DataType::Float64,
                DataType::Bfloat16
            ]
            .map(|t| (t as c_int, t.size())),
            [(2, 4), (6, 2), (7, 4), (8, 8), (9, 2)]
        );
        assert_eq!(
            [RedOp::Sum, RedOp::Prod, RedOp::Max, RedOp::Min, RedOp::Avg].map(|o| o as c_int),
            [0, 1, 2, 3, 4]
        );
    }

    #[test]
    fn extents_follow_nccl_h_counts_and_refuse_overflow() {
        use CollectiveCall::*;
        let (count, op) = (10, RedOp::Sum);
        // 10 f32 on 4 ranks.
        assert_eq!(AllReduce { count, op }.extents(4, 4), Ok((40, 40)));
        assert_eq!(Broadcast { count, root: 3 }.extents(4, 4), Ok((40, 40)));
        assert_eq!(AllGather { count }.extents(4, 4), Ok((40, 160)));
        assert_eq!(ReduceScatter { count, op }.extents(4, 4), Ok((160, 40)));
        assert_eq!(AllReduce { count: 0, op }.extents(8, 2), Ok((0, 0)));
        assert_eq!(
            AllGather {
                count: usize::MAX / 2
            }
            .extents(4, 1),
            Err(OutOfBounds::Overflow {
                count: usize::MAX / 2,
                element: 4,
                times: 1
            })
        );
        let count = usize::MAX / 8;
        assert!(ReduceScatter { count, op }.extents(4, 4).is_err());
    }
}
