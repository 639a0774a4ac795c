//! A limit's effective value: the tightest between a cgroup and the root, read from v1 or v2
//! files, and why it could not be read.

use super::*;

/// A limit's tightest value between a cgroup and the root, and the cgroup that sets it.
pub(super) struct Effective {
    pub(super) amount: Amount,
    pub(super) set_by: Option<String>,
    /// The CPU period of the cgroup setting a `cpu.max` (for the fix).
    pub(super) period_us: u64,
}

/// Why a cgroup limit could not be read; the audit decides skip or error on the variant.
#[derive(Debug, thiserror::Error)]
pub(super) enum LimitError {
    /// The cgroup's directory does not exist (the unit or slice is not active).
    #[error("no such cgroup: {path} ({dir} is absent)")]
    NoCgroup { path: String, dir: String },
    /// The key has no cgroup v1 counterpart.
    #[error("cgroup v1 has no {key}")]
    NotInV1 { key: String },
    /// A limit file could not be read.
    #[error(transparent)]
    Unreadable(#[from] crate::host::HostError),
    /// A limit file holds what the kernel does not write there.
    #[error(transparent)]
    Malformed(#[from] limits::Malformed),
}

pub(super) fn controller_of(key: &str) -> &str {
    key.split('.').next().unwrap_or(key)
}

pub(super) fn read_limit(
    ctx: &Context,
    layout: &Layout,
    mount: &str,
    path: &str,
    key: &str,
) -> Result<Effective, LimitError> {
    let v1 = !matches!(layout, Layout::V2 { .. });
    let dir = |cg: &str| format!("{mount}{}", if cg == "/" { "" } else { cg });
    if !ctx.root.exists(&dir(path)) {
        return Err(LimitError::NoCgroup {
            path: path.to_string(),
            dir: dir(path),
        });
    }
    let mut best = Effective {
        amount: Amount::Unlimited,
        set_by: None,
        period_us: 100_000,
    };
    for cg in hierarchy::ancestors(path) {
        let read = |file: &str| ctx.root.read_optional(&format!("{}/{file}", dir(&cg)));
        let parsed: Option<(Amount, u64)> = match (key, v1) {
            ("memory.high", true) => {
                return Err(LimitError::NotInV1 { key: key.into() });
            }
            ("memory.max", true) => read("memory.limit_in_bytes")?
                .map(|t| limits::parse_v1_memory(&t).map(|a| (a, 0)))
                .transpose()?,
            ("cpu.max", true) => match (read("cpu.cfs_quota_us")?, read("cpu.cfs_period_us")?) {
                (Some(q), Some(p)) => {
                    let quota = limits::parse_v1_cpu(&q, &p)?;
                    Some((quota.millicpus, quota.period_us))
                }
                _ => None,
            },
            ("cpu.max", false) => read("cpu.max")?
                .map(|t| limits::parse_cpu_max(&t).map(|q| (q.millicpus, q.period_us)))
                .transpose()?,
            _ => read(key)?
                .map(|t| limits::parse_max(&t).map(|a| (a, 0)))
                .transpose()?,
        };
        if let Some((amount, period)) = parsed
            && amount < best.amount
        {
            best = Effective {
                amount,
                set_by: Some(cg.clone()),
                period_us: if period == 0 { best.period_us } else { period },
            };
        }
    }
    Ok(best)
}
