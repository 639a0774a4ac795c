//! Slurm's hostlist syntax (`gpu[01-04,07],io1`), as in `SLURM_STEP_NODELIST`: expanded the
//! way `scontrol show hostnames` does, so ranks find rank 0's host without exporting it.

/// The most hosts one list may expand to: Slurm's own clusters stay far below it, and a
/// typo like `n[0-999999999]` must not exhaust memory.
pub const MAX_HOSTS: usize = 65_536;

/// The list is not valid hostlist syntax; the message says where.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("hostlist {list:?}: {problem}")]
pub struct HostlistError {
    pub list: String,
    pub problem: String,
}

/// Every host of `list`, in order (duplicates kept, as Slurm keeps them).
pub fn expand(list: &str) -> Result<Vec<String>, HostlistError> {
    let fail = |problem: String| HostlistError {
        list: list.to_string(),
        problem,
    };
    let mut hosts = Vec::new();
    for item in split_top_level(list).map_err(&fail)? {
        let item = item.trim();
        if item.is_empty() {
            continue;
        }
        let mut names = vec![String::new()];
        let mut rest = item;
        while !rest.is_empty() {
            match rest.find('[') {
                None => {
                    names.iter_mut().for_each(|n| n.push_str(rest));
                    rest = "";
                }
                Some(open) => {
                    let literal = &rest[..open];
                    let close = rest[open..]
                        .find(']')
                        .map(|c| open + c)
                        .ok_or_else(|| fail(format!("unclosed '[' in {item:?}")))?;
                    let suffixes = ranges(&rest[open + 1..close]).map_err(&fail)?;
                    let count = names.len().saturating_mul(suffixes.len());
                    if hosts.len().saturating_add(count) > MAX_HOSTS {
                        return Err(fail(format!("more than {MAX_HOSTS} hosts")));
                    }
                    names = names
                        .iter()
                        .flat_map(|n| suffixes.iter().map(move |s| format!("{n}{literal}{s}")))
                        .collect();
                    rest = &rest[close + 1..];
                }
            }
        }
        if names.iter().any(|n| n.contains(']')) {
            return Err(fail(format!("unmatched ']' in {item:?}")));
        }
        hosts.extend(names);
        if hosts.len() > MAX_HOSTS {
            return Err(fail(format!("more than {MAX_HOSTS} hosts")));
        }
    }
    if hosts.is_empty() {
        return Err(fail("no hosts".into()));
    }
    Ok(hosts)
}

/// The first host of `list`: rank 0's under Slurm's default block distribution.
pub fn first(list: &str) -> Result<String, HostlistError> {
    // Only the first item needs expanding; a long list costs nothing more.
    let items = split_top_level(list).map_err(|problem| HostlistError {
        list: list.to_string(),
        problem,
    })?;
    let item = items
        .into_iter()
        .map(str::trim)
        .find(|i| !i.is_empty())
        .unwrap_or("");
    let hosts = expand(item).map_err(|e| HostlistError {
        list: list.to_string(),
        problem: e.problem,
    })?;
    Ok(hosts.into_iter().next().unwrap_or_default())
}

/// Splits at the commas outside brackets.
fn split_top_level(list: &str) -> Result<Vec<&str>, String> {
    let mut items = Vec::new();
    let (mut depth, mut start) = (0u32, 0);
    for (i, c) in list.char_indices() {
        match c {
            '[' if depth > 0 => return Err("nested '['".into()),
            '[' => depth = 1,
            ']' if depth == 0 => return Err("unmatched ']'".into()),
            ']' => depth = 0,
            ',' if depth == 0 => {
                items.push(&list[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if depth > 0 {
        return Err("unclosed '['".into());
    }
    items.push(&list[start..]);
    Ok(items)
}

/// The suffixes of one bracket: `01-04,07` → `01 02 03 04 07` (zero padding kept).
fn ranges(inside: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    for part in inside.split(',') {
        let part = part.trim();
        let (lo, hi) = part.split_once('-').unwrap_or((part, part));
        let number = |t: &str| -> Result<u64, String> {
            if t.is_empty() || !t.bytes().all(|b| b.is_ascii_digit()) {
                return Err(format!("{part:?} is not a number or a range like 01-04"));
            }
            t.parse().map_err(|_| format!("{t:?} is too large"))
        };
        let (a, b) = (number(lo)?, number(hi)?);
        if b < a {
            return Err(format!("range {part:?} runs backwards"));
        }
        if b - a >= MAX_HOSTS as u64 || out.len() + (b - a) as usize >= MAX_HOSTS {
            return Err(format!("more than {MAX_HOSTS} hosts"));
        }
        let width = lo.len();
        out.extend((a..=b).map(|n| format!("{n:0width$}")));
    }
    Ok(out)
}

/// The inverse of [`expand`]: names in Slurm's notation, `node[01-04,07],login`. Names that
/// share a prefix and a number width fold into one bracket; order is by prefix, then number.
pub fn compress(hosts: &[String]) -> String {
    use std::collections::BTreeMap;
    let mut groups: BTreeMap<(String, usize), Vec<u64>> = BTreeMap::new();
    let mut plain: Vec<String> = Vec::new();
    for h in hosts {
        let digits = h.len() - h.trim_end_matches(|c: char| c.is_ascii_digit()).len();
        let (prefix, number) = h.split_at(h.len() - digits);
        match number.parse::<u64>() {
            Ok(n) if digits > 0 && digits <= 18 => {
                let width = if number.starts_with('0') && digits > 1 {
                    digits
                } else {
                    0
                };
                groups
                    .entry((prefix.to_string(), width))
                    .or_default()
                    .push(n);
            }
            _ => plain.push(h.clone()),
        }
    }
    let mut parts: Vec<String> = Vec::new();
    for ((prefix, width), mut numbers) in groups {
        numbers.sort_unstable();
        numbers.dedup();
        if numbers.len() == 1 {
            parts.push(format!("{prefix}{:0width$}", numbers[0]));
            continue;
        }
        let mut runs: Vec<String> = Vec::new();
        let mut i = 0;
        while i < numbers.len() {
            let start = numbers[i];
            while i + 1 < numbers.len() && numbers[i + 1] == numbers[i] + 1 {
                i += 1;
            }
            let end = numbers[i];
            runs.push(if start == end {
                format!("{start:0width$}")
            } else {
                format!("{start:0width$}-{end:0width$}")
            });
            i += 1;
        }
        parts.push(format!("{prefix}[{}]", runs.join(",")));
    }
    plain.sort();
    plain.dedup();
    parts.extend(plain);
    parts.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expands_like_scontrol_show_hostnames() {
        let cases: &[(&str, &[&str])] = &[
            ("n1", &["n1"]),
            (
                "gpu[01-04,07],io1",
                &["gpu01", "gpu02", "gpu03", "gpu04", "gpu07", "io1"],
            ),
            ("a[1-2]b[3-4]", &["a1b3", "a1b4", "a2b3", "a2b4"]),
            ("x[8-11]", &["x8", "x9", "x10", "x11"]),
            ("x[098-101]", &["x098", "x099", "x100", "x101"]),
            ("rack[1]-node", &["rack1-node"]),
            ("h1,h2,,h3", &["h1", "h2", "h3"]),
            ("node-a.cluster", &["node-a.cluster"]),
        ];
        for (list, want) in cases {
            assert_eq!(expand(list).unwrap(), *want, "{list}");
        }
        assert_eq!(first("gpu[03-04,07],io1").unwrap(), "gpu03");
        assert_eq!(first("io1,gpu[1-2]").unwrap(), "io1");
        // Only the first item is expanded: a huge tail is not a cost.
        assert_eq!(first("a1,b[0-99999999]").unwrap(), "a1");
    }

    #[test]
    fn malformed_lists_say_what_is_wrong() {
        let cases = [
            ("gpu[01-04", "unclosed"),
            ("gpu01]", "unmatched"),
            ("gpu[[1]]", "nested"),
            ("gpu[4-1]", "backwards"),
            ("gpu[a-b]", "not a number"),
            ("gpu[]", "not a number"),
            ("n[0-999999999]", "more than 65536"),
            ("a[0-999],b[0-999],c[0-99999]", "more than 65536"),
            ("a[0-300]b[0-300]", "more than 65536"),
            ("", "no hosts"),
            (" , ", "no hosts"),
        ];
        for (list, want) in cases {
            let err = expand(list).unwrap_err().to_string();
            assert!(err.contains(want), "{list}: {err}");
        }
    }

    #[test]
    fn compress_folds_what_expand_unfolds() {
        let hosts = |l: &str| expand(l).unwrap();
        for list in ["node[0-3,5]", "n[01-04,07],login", "a1,b2", "gpu[8-10]"] {
            assert_eq!(compress(&hosts(list)), list);
        }
        assert_eq!(compress(&hosts("node3,node1,node2")), "node[1-3]");
        assert_eq!(compress(&[]), "");
    }
}
