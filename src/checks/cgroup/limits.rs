//! Parsers for the limit files of cgroup v2 and their v1 equivalents. Each returns an
//! [`Amount`] so a profile judges v1 and v2 nodes with the same rule.

use crate::profile::amount::Amount;

/// A limit file's text that is not what the kernel writes there.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Malformed {
    #[error("`{0}` is not `max` or a number")]
    NotMax(String),
    #[error("`{0}` is not a number of bytes")]
    NotBytes(String),
    #[error("CPU period is 0")]
    ZeroPeriod,
    #[error("`{0}` is not `QUOTA PERIOD` (e.g. `max 100000`)")]
    NotCpuMax(String),
    #[error("cpu.cfs_period_us `{0}` is not a number")]
    NotPeriod(String),
    #[error("cpu.cfs_quota_us `{0}` is not a number")]
    NotQuota(String),
}

/// v1 writes "no limit" as the largest page-aligned counter (9223372036854771712 on 4 KiB
/// pages); anything at or above 2^62 bytes is no limit in practice.
const V1_UNLIMITED: i128 = 1 << 62;

/// `memory.max` / `memory.high` / `pids.max` (v2, and `pids.max` on v1): `max` or a number.
pub(crate) fn parse_max(text: &str) -> Result<Amount, Malformed> {
    let t = text.trim();
    if t == "max" {
        return Ok(Amount::Unlimited);
    }
    t.parse::<u64>()
        .map(|n| Amount::Finite(n.into()))
        .map_err(|_| Malformed::NotMax(t.to_string()))
}

/// v1 `memory.limit_in_bytes`: bytes, with the huge "unlimited" counter.
pub(crate) fn parse_v1_memory(text: &str) -> Result<Amount, Malformed> {
    let t = text.trim();
    let n: i128 = t.parse().map_err(|_| Malformed::NotBytes(t.to_string()))?;
    Ok(if !(0..V1_UNLIMITED).contains(&n) {
        Amount::Unlimited
    } else {
        Amount::Finite(n)
    })
}

/// CPU bandwidth as thousandths of a CPU, so "4 CPUs" is 4000 and a profile can use `min`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CpuQuota {
    pub millicpus: Amount,
    pub period_us: u64,
}

fn quota(quota_us: Option<u64>, period_us: u64) -> Result<CpuQuota, Malformed> {
    if period_us == 0 {
        return Err(Malformed::ZeroPeriod);
    }
    Ok(CpuQuota {
        millicpus: match quota_us {
            None => Amount::Unlimited,
            Some(q) => Amount::Finite(i128::from(q) * 1000 / i128::from(period_us)),
        },
        period_us,
    })
}

/// v2 `cpu.max`: `max 100000` or `400000 100000` (quota and period in µs).
pub(crate) fn parse_cpu_max(text: &str) -> Result<CpuQuota, Malformed> {
    let t = text.trim();
    let bad = || Malformed::NotCpuMax(t.to_string());
    let mut fields = t.split_whitespace();
    let (Some(q), period, None) = (fields.next(), fields.next(), fields.next()) else {
        return Err(bad());
    };
    let period = match period {
        Some(p) => p.parse().map_err(|_| bad())?,
        None => 100_000,
    };
    let q = if q == "max" {
        None
    } else {
        Some(q.parse().map_err(|_| bad())?)
    };
    quota(q, period)
}

/// v1 `cpu.cfs_quota_us` (`-1` = no limit) and `cpu.cfs_period_us`.
pub(crate) fn parse_v1_cpu(quota_text: &str, period_text: &str) -> Result<CpuQuota, Malformed> {
    let q = quota_text.trim();
    let p = period_text.trim();
    let period: u64 = p.parse().map_err(|_| Malformed::NotPeriod(p.to_string()))?;
    let q: i64 = q.parse().map_err(|_| Malformed::NotQuota(q.to_string()))?;
    quota(u64::try_from(q).ok(), period)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::assert_cases;

    #[test]
    fn maxima() {
        let cases = [
            ("max\n", Ok(Amount::Unlimited)),
            ("8589934592\n", Ok(Amount::Finite(8589934592))),
            ("4096", Ok(Amount::Finite(4096))),
            ("", Err(())),
            ("-1", Err(())),
            ("lots", Err(())),
        ];
        assert_cases(cases, |text| parse_max(text).map_err(|_| ()));
    }

    #[test]
    fn v1_memory() {
        let cases = [
            ("9223372036854771712\n", Ok(Amount::Unlimited)),
            ("8589934592\n", Ok(Amount::Finite(8589934592))),
            ("-1", Ok(Amount::Unlimited)),
            ("max", Err(())),
            ("", Err(())),
        ];
        assert_cases(cases, |text| parse_v1_memory(text).map_err(|_| ()));
    }

    #[test]
    fn cpu() {
        let q = |m: Amount, p: u64| {
            Ok(CpuQuota {
                millicpus: m,
                period_us: p,
            })
        };
        let cases = [
            ("max 100000\n", q(Amount::Unlimited, 100000)),
            ("400000 100000", q(Amount::Finite(4000), 100000)),
            ("50000 100000", q(Amount::Finite(500), 100000)),
            ("max", q(Amount::Unlimited, 100000)),
            ("1 2 3", Err(())),
            ("", Err(())),
            ("x 100000", Err(())),
            ("100 0", Err(())),
        ];
        assert_cases(cases, |text| parse_cpu_max(text).map_err(|_| ()));
        assert_eq!(
            parse_v1_cpu("-1\n", "100000\n").map(|c| c.millicpus),
            Ok(Amount::Unlimited)
        );
        assert_eq!(
            parse_v1_cpu("200000", "100000").map(|c| c.millicpus),
            Ok(Amount::Finite(2000))
        );
        assert!(parse_v1_cpu("x", "100000").is_err());
        assert!(parse_v1_cpu("1", "").is_err());
    }
}
