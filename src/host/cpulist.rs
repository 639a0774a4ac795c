//! CPU lists as the kernel writes them (`0-3,8-11`, `cpulist`, `local_cpulist`,
//! `cpuset.cpus`, `Cpus_allowed_list`).

use std::collections::BTreeSet;
use std::fmt;

/// A set of CPU (or memory node) numbers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CpuList(pub BTreeSet<u32>);

impl CpuList {
    /// Parses `0-3,8-11`, `5`, `0-7:2` (stride) or an empty string (no CPUs).
    pub fn parse(text: &str) -> Result<CpuList, String> {
        let mut set = BTreeSet::new();
        let text = text.trim();
        if text.is_empty() {
            return Ok(CpuList(set));
        }
        let bad = || format!("`{text}` is not a CPU list (example: 0-3,8-11)");
        for part in text.split(',') {
            let (range, stride) = match part.split_once(':') {
                Some((r, s)) => (
                    r,
                    s.trim()
                        .parse::<u32>()
                        .ok()
                        .filter(|s| *s > 0)
                        .ok_or_else(bad)?,
                ),
                None => (part, 1),
            };
            let (lo, hi) = match range.split_once('-') {
                Some((a, b)) => (
                    a.trim().parse::<u32>().map_err(|_| bad())?,
                    b.trim().parse::<u32>().map_err(|_| bad())?,
                ),
                None => {
                    let n = range.trim().parse::<u32>().map_err(|_| bad())?;
                    (n, n)
                }
            };
            if lo > hi || hi - lo > 1 << 20 {
                return Err(bad());
            }
            set.extend((lo..=hi).step_by(stride as usize));
        }
        Ok(CpuList(set))
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn contains_all(&self, other: &CpuList) -> bool {
        other.0.is_subset(&self.0)
    }
}

impl fmt::Display for CpuList {
    /// The kernel's compact form: `0-3,8-11`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts = Vec::new();
        let mut iter = self.0.iter().copied().peekable();
        while let Some(start) = iter.next() {
            let mut end = start;
            while iter.peek() == Some(&(end + 1)) {
                end += 1;
                iter.next();
            }
            parts.push(if start == end {
                start.to_string()
            } else {
                format!("{start}-{end}")
            });
        }
        f.write_str(&parts.join(","))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn valid_lists() {
        let cases: &[(&str, &[u32], &str)] = &[
            ("0-3,8-11\n", &[0, 1, 2, 3, 8, 9, 10, 11], "0-3,8-11"),
            ("5", &[5], "5"),
            ("", &[], ""),
            ("0-6:2", &[0, 2, 4, 6], "0,2,4,6"),
            ("3,1,2", &[1, 2, 3], "1-3"),
        ];
        for (text, cpus, shown) in cases {
            let list = CpuList::parse(text).unwrap();
            assert_eq!(
                list.0.iter().copied().collect::<Vec<_>>(),
                *cpus,
                "{text:?}"
            );
            assert_eq!(list.to_string(), *shown);
        }
    }

    #[test]
    fn malformed_lists() {
        for text in ["a", "3-1", "1-", "-1", "0-3:0", "1,,2", "0-99999999"] {
            assert!(CpuList::parse(text).is_err(), "{text:?}");
        }
    }
}
