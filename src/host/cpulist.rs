//! CPU lists as the kernel writes them (`0-3,8-11`, `cpulist`, `local_cpulist`,
//! `cpuset.cpus`, `Cpus_allowed_list`).

use std::collections::BTreeSet;
use std::fmt;

/// A set of CPU (or memory node) numbers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CpuList(pub BTreeSet<u32>);

/// The highest CPU number the kernel can have (`NR_CPUS` is at most 8192 on x86 and 65536
/// anywhere); a list naming more is not from a kernel.
pub const MAX_CPU_ID: u32 = 65535;

/// The highest NUMA node number (`MAX_NUMNODES` is at most 1 << 10 on x86; 4096 anywhere).
pub(crate) const MAX_NODE_ID: u32 = 4095;

/// Why text is not a CPU list; `shown` is its first 64 characters.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CpuListError {
    #[error("`{shown}` is not a CPU list (example: 0-3,8-11)")]
    Malformed { shown: String },
    #[error("`{shown}` is not a NUMA node list (example: 0-1)")]
    MalformedNodes { shown: String },
    #[error("`{shown}` names {id}, above {max_id}, the highest number the kernel allows")]
    TooHigh { shown: String, id: u32, max_id: u32 },
    #[error("`{shown}…` is longer than any kernel CPU list")]
    TooLong { shown: String },
}

/// How many numbers one list may name in all, counting repeats (`0-65535` repeated a
/// thousand times): parsing stays linear in what a real kernel could write.
const MAX_WORK: u64 = 1 << 22;

impl CpuList {
    /// Parses `0-3,8-11`, `5`, `0-7:2` (stride) or an empty string (no CPUs); CPU numbers
    /// above [`MAX_CPU_ID`] are an error.
    pub fn parse(text: &str) -> Result<CpuList, CpuListError> {
        CpuList::parse_capped(text, MAX_CPU_ID)
    }

    /// A NUMA node list (`0-1`): like [`CpuList::parse`], capped at [`MAX_NODE_ID`].
    pub fn parse_nodes(text: &str) -> Result<CpuList, CpuListError> {
        CpuList::parse_capped(text, MAX_NODE_ID)
    }

    /// Parses with ids capped at `max_id`, into a bitmap first so repeated ranges cost no
    /// more than their length.
    pub(crate) fn parse_capped(text: &str, max_id: u32) -> Result<CpuList, CpuListError> {
        let text = text.trim();
        if text.is_empty() {
            return Ok(CpuList(BTreeSet::new()));
        }
        let shown: String = text.chars().take(64).collect();
        let bad = || {
            let shown = shown.clone();
            if max_id == MAX_NODE_ID {
                CpuListError::MalformedNodes { shown }
            } else {
                CpuListError::Malformed { shown }
            }
        };
        let mut bits = vec![0u64; (max_id as usize >> 6) + 1];
        let mut work: u64 = 0;
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
            if lo > hi {
                return Err(bad());
            }
            if hi > max_id {
                return Err(CpuListError::TooHigh {
                    shown,
                    id: hi,
                    max_id,
                });
            }
            work += u64::from((hi - lo) / stride) + 1;
            if work > MAX_WORK {
                return Err(CpuListError::TooLong { shown });
            }
            for id in (lo..=hi).step_by(stride as usize) {
                bits[(id >> 6) as usize] |= 1 << (id & 63);
            }
        }
        let set = bits
            .iter()
            .enumerate()
            .flat_map(|(w, word)| {
                (0..64u32)
                    .filter(move |b| word & (1 << b) != 0)
                    .map(move |b| ((w as u32) << 6) | b)
            })
            .collect();
        Ok(CpuList(set))
    }

    /// Parses a hex mask as the kernel writes `cpumap` and `local_cpus`
    /// (`00000000,0000ffff`: 32-bit words, most significant first), for kernels and
    /// snapshots without the list form. `None` when malformed or naming a CPU above
    /// [`MAX_CPU_ID`].
    pub(crate) fn parse_mask(text: &str) -> Option<CpuList> {
        let words: Vec<&str> = text.trim().split(',').collect();
        let max_words = (MAX_CPU_ID as usize + 1) / 32;
        if words.len() > max_words || words.iter().any(|w| w.is_empty() || w.len() > 8) {
            return None;
        }
        let mut set = BTreeSet::new();
        for (i, word) in words.iter().rev().enumerate() {
            let bits = u32::from_str_radix(word, 16).ok()?;
            let base = u32::try_from(i).ok()?.checked_mul(32)?;
            set.extend((0..32).filter(|b| bits & (1 << b) != 0).map(|b| base + b));
        }
        Some(CpuList(set))
    }

    pub(crate) fn len(&self) -> usize {
        self.0.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub(crate) fn contains_all(&self, other: &CpuList) -> bool {
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
        for text in [
            "a",
            "3-1",
            "1-",
            "-1",
            "0-3:0",
            "1,,2",
            "0-99999999",
            "65536",
        ] {
            assert!(CpuList::parse(text).is_err(), "{text:?}");
        }
        assert!(CpuList::parse_nodes("4096").is_err());
        assert_eq!(
            CpuList::parse_nodes("1,,").unwrap_err().to_string(),
            "`1,,` is not a NUMA node list (example: 0-1)"
        );
        assert_eq!(
            CpuList::parse("1,,").unwrap_err().to_string(),
            "`1,,` is not a CPU list (example: 0-3,8-11)"
        );
        assert_eq!(CpuList::parse_nodes("0-4095").unwrap().len(), 4096);
        assert_eq!(CpuList::parse("65535").unwrap().len(), 1);
    }

    #[test]
    fn masks() {
        let list = |t: &str| CpuList::parse_mask(t).map(|c| c.to_string());
        assert_eq!(list("0000ffff\n").as_deref(), Some("0-15"));
        assert_eq!(list("00000001,00000000").as_deref(), Some("32"));
        assert_eq!(list("ff,0000000f").as_deref(), Some("0-3,32-39"));
        assert_eq!(list("00000000").as_deref(), Some(""));
        assert_eq!(list("xyz"), None);
        assert_eq!(list("1,,2"), None);
        assert_eq!(list("123456789"), None);
        assert_eq!(list("000000001"), None, "nine digits is no kernel word");
        let widest = vec!["80000000"; 2048].join(",");
        let cpus = CpuList::parse_mask(&widest).unwrap();
        assert_eq!((cpus.len(), cpus.0.last()), (2048, Some(&MAX_CPU_ID)));
        let too_wide = vec!["0"; 2049].join(",");
        assert_eq!(list(&too_wide), None, "names CPUs above the kernel's limit");
    }

    #[test]
    fn huge_lists_are_refused_fast_and_small() {
        let start = std::time::Instant::now();
        let ranges: Vec<String> = (0..60)
            .map(|i| format!("{}-{}", i * 1_000_000, i * 1_000_000 + 999_999))
            .collect();
        let err = CpuList::parse(&ranges.join(",")).unwrap_err().to_string();
        assert!(err.contains("highest number"), "{err}");
        let repeated = vec!["0-65535"; 10_000].join(",");
        let err = CpuList::parse(&repeated).unwrap_err().to_string();
        assert!(err.contains("longer than"), "{err}");
        assert!(start.elapsed() < std::time::Duration::from_secs(5));
    }

    /// A NIC's local CPUs inside a NUMA node's, an IRQ's affinity inside what it may use.
    #[test]
    fn emptiness_and_containment() {
        let cpus = |t: &str| CpuList::parse(t).unwrap();
        assert!(cpus("").is_empty());
        assert!(!cpus("7").is_empty());
        assert!(cpus("0-7").contains_all(&cpus("2-3,6")));
        assert!(cpus("0-7").contains_all(&cpus("")));
        assert!(!cpus("0-7").contains_all(&cpus("6-8")));
    }

    /// The work cap is inclusive: exactly 2^22 numbers parse, a list that steps past it
    /// without landing on it (2^22 - 1, then 2 more) is refused.
    #[test]
    fn the_work_cap_at_its_edge() {
        let full = vec!["0-65535"; 64].join(",");
        assert_eq!(CpuList::parse(&full).map(|c| c.len()), Ok(65536));
        let mut past = vec!["0-65535"; 63];
        past.extend(["0-65534", "0-1"]);
        let err = CpuList::parse(&past.join(",")).unwrap_err().to_string();
        assert!(err.contains("longer than"), "{err}");
        let mut under = vec!["0-65535"; 63];
        under.extend(["0-65534", "7"]);
        assert_eq!(CpuList::parse(&under.join(",")).map(|c| c.len()), Ok(65536));
    }
}
