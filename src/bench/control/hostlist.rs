//! Slurm's hostlist syntax (`gpu[01-04,07],io1`), as in `SLURM_STEP_NODELIST`: expanded the
//! way `scontrol show hostnames` does, so ranks find rank 0's host without exporting it.

/// The most hosts one list may expand to: Slurm's own clusters stay far below it, and a
/// typo like `n[0-999999999]` must not exhaust memory.
pub(crate) const MAX_HOSTS: usize = 65_536;

/// The list is not valid hostlist syntax; the message says where.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("hostlist {list:?}: {problem}")]
pub(crate) struct HostlistError {
    pub list: String,
    pub problem: Problem,
}

/// What is wrong with a hostlist; the items and parts are quoted as written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Problem {
    #[error("nested '['")]
    Nested,
    #[error("unmatched ']'")]
    Unmatched,
    #[error("unclosed '['")]
    Unclosed,
    #[error("unclosed '[' in {0:?}")]
    UnclosedIn(String),
    #[error("unmatched ']' in {0:?}")]
    UnmatchedIn(String),
    #[error("{0:?} is not a number or a range like 01-04")]
    NotNumber(String),
    #[error("{0:?} is too large")]
    TooLarge(String),
    #[error("range {0:?} runs backwards")]
    Backwards(String),
    #[error("more than {MAX_HOSTS} hosts in one bracket")]
    BigBracket,
    #[error("more than {MAX_HOSTS} hosts at {0:?}")]
    TooManyAt(String),
    #[error("more than {MAX_HOSTS} hosts")]
    TooMany,
    #[error("no hosts")]
    Empty,
}

/// Every host of `list`, in order (duplicates kept, as Slurm keeps them).
pub(crate) fn expand(list: &str) -> Result<Vec<String>, HostlistError> {
    let fail = |problem: Problem| HostlistError {
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
                        .ok_or_else(|| fail(Problem::UnclosedIn(item.to_string())))?;
                    let suffixes = ranges(&rest[open + 1..close]).map_err(&fail)?;
                    // Refused before the cross product is built: `a[0-65534]b[0-65534]` is
                    // four billion names.
                    let count = names.len().saturating_mul(suffixes.len());
                    if hosts.len().saturating_add(count) > MAX_HOSTS {
                        return Err(fail(Problem::TooManyAt(item.to_string())));
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
            return Err(fail(Problem::UnmatchedIn(item.to_string())));
        }
        hosts.extend(names);
        if hosts.len() > MAX_HOSTS {
            return Err(fail(Problem::TooMany));
        }
    }
    if hosts.is_empty() {
        return Err(fail(Problem::Empty));
    }
    Ok(hosts)
}

/// The first host of `list`: rank 0's under Slurm's default block distribution.
pub(crate) fn first(list: &str) -> Result<String, HostlistError> {
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
fn split_top_level(list: &str) -> Result<Vec<&str>, Problem> {
    let mut items = Vec::new();
    let (mut depth, mut start) = (0u32, 0);
    for (i, c) in list.char_indices() {
        match c {
            '[' if depth > 0 => return Err(Problem::Nested),
            '[' => depth = 1,
            ']' if depth == 0 => return Err(Problem::Unmatched),
            ']' => depth = 0,
            ',' if depth == 0 => {
                items.push(&list[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if depth > 0 {
        return Err(Problem::Unclosed);
    }
    items.push(&list[start..]);
    Ok(items)
}

/// The suffixes of one bracket: `01-04,07` → `01 02 03 04 07` (zero padding kept).
fn ranges(inside: &str) -> Result<Vec<String>, Problem> {
    let mut out = Vec::new();
    for part in inside.split(',') {
        let part = part.trim();
        let (lo, hi) = part.split_once('-').unwrap_or((part, part));
        let number = |t: &str| -> Result<u64, Problem> {
            if t.is_empty() || !t.bytes().all(|b| b.is_ascii_digit()) {
                return Err(Problem::NotNumber(part.to_string()));
            }
            t.parse().map_err(|_| Problem::TooLarge(t.to_string()))
        };
        let (a, b) = (number(lo)?, number(hi)?);
        if b < a {
            return Err(Problem::Backwards(part.to_string()));
        }
        // The first test keeps the conversion below lossless where usize is 32 bits, and
        // the sum from overflowing.
        if b - a >= MAX_HOSTS as u64 || out.len() + (b - a) as usize >= MAX_HOSTS {
            return Err(Problem::BigBracket);
        }
        let width = lo.len();
        out.extend((a..=b).map(|n| format!("{n:0width$}")));
    }
    Ok(out)
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

    /// The problem exactly, so each check is seen to be the one that refused.
    fn problem(list: &str) -> String {
        expand(list).unwrap_err().problem.to_string()
    }

    #[test]
    fn each_malformation_is_refused_where_it_is_first_seen() {
        // Found while splitting, before any item is expanded.
        assert_eq!(problem("x],y"), "unmatched ']'");
        assert_eq!(problem("gpu[01-04"), "unclosed '['");
        assert_eq!(problem("a[1]b[2"), "unclosed '['");
    }

    #[test]
    fn the_host_cap_is_exact_and_each_guard_decides_its_own_case() {
        // Exactly the cap is a list; one more is not.
        assert_eq!(expand("n[1-65536]").unwrap().len(), MAX_HOSTS);
        assert_eq!(expand("n[0-65533,0-1]").unwrap().len(), MAX_HOSTS);
        assert_eq!(expand("a[1-2]b[1-32768]").unwrap().len(), MAX_HOSTS);
        // One bracket over the cap, in one range or summed over its ranges.
        let bracket = "more than 65536 hosts in one bracket";
        assert_eq!(problem("n[0-65536]"), bracket);
        assert_eq!(problem("n[0-65534,0-1]"), bracket);
        // The largest range there is, after another: refused, not an overflow.
        assert_eq!(problem("n[1,0-18446744073709551615]"), bracket);
        assert_eq!(
            problem("n[18446744073709551616]"),
            "\"18446744073709551616\" is too large"
        );
        // A cross product over the cap is refused before it is built.
        assert_eq!(
            problem("a[1-2]b[1-32769]"),
            "more than 65536 hosts at \"a[1-2]b[1-32769]\""
        );
        assert_eq!(
            problem("a[0-999]b[0-999]"),
            "more than 65536 hosts at \"a[0-999]b[0-999]\""
        );
        assert_eq!(
            problem("x,a[1-2]b[1-32768]"),
            "more than 65536 hosts at \"a[1-2]b[1-32768]\""
        );
        // Plain names past the cap are counted too.
        assert_eq!(problem("n[1-65536],x"), "more than 65536 hosts");
    }

    /// Node numbers far from zero are ordinary: only the count of hosts is capped.
    #[test]
    fn large_node_numbers_expand() {
        assert_eq!(expand("n[40000-40001]").unwrap(), ["n40000", "n40001"]);
        assert_eq!(
            expand("n[99999999999-100000000000]").unwrap(),
            ["n99999999999", "n100000000000"]
        );
        assert_eq!(first("n[40000-40001],m1").unwrap(), "n40000");
    }
}

/// A host name split for ordering and compression: the text before a trailing number, and
/// that number's digits (empty when the name does not end in one).
fn split_number(host: &str) -> (&str, &str) {
    let digits = host.len() - host.bytes().rev().take_while(u8::is_ascii_digit).count();
    // A number too long for u64 is not one to count with: the name stays whole.
    if host.len() - digits > 19 {
        return (host, "");
    }
    host.split_at(digits)
}

/// The order [`compress`] lists hosts in, and the order a caller sorts names in before
/// [`compress_sorted`]: by the text before the trailing number, then by that number's value
/// (`gpu9` before `gpu10`), then by its width (`n1` before `n01`).
pub(crate) fn order(a: &str, b: &str) -> std::cmp::Ordering {
    let ((pa, da), (pb, db)) = (split_number(a), split_number(b));
    let value = |d: &str| d.parse::<u64>().ok();
    pa.cmp(pb)
        .then_with(|| value(da).cmp(&value(db)))
        .then_with(|| da.len().cmp(&db.len()))
}

/// The Slurm hostlist of `hosts` (`gpu[00001-00996,00998-09999],io1`), order and repeats
/// ignored: what `expand` (and `scontrol show hostnames`, `pdsh -w`) turn back into the same
/// set, so a group of ten thousand nodes is one short line. Names must not contain `[`, `]`
/// or `,` (they cannot be told apart from the notation); host names never do.
pub(crate) fn compress<'a>(hosts: impl IntoIterator<Item = &'a str>) -> String {
    let mut names: Vec<&str> = hosts.into_iter().collect();
    names.sort_unstable_by(|a, b| order(a, b));
    compress_sorted(names)
}

/// [`compress`] of names already sorted by [`order`] (repeats allowed): one pass, no sorting,
/// for callers that sort many lists of the same names once.
pub(crate) fn compress_sorted<'a>(sorted: impl IntoIterator<Item = &'a str>) -> String {
    /// Consecutive numbers after one prefix that expand back at the first one's width.
    struct Run<'a> {
        prefix: &'a str,
        lo: &'a str,
        hi: &'a str,
        last: u64,
    }
    let mut out = String::new();
    let mut runs: Vec<Run> = Vec::new();
    let flush = |runs: &mut Vec<Run>, out: &mut String| {
        let Some(first) = runs.first() else { return };
        if !out.is_empty() {
            out.push(',');
        }
        out.push_str(first.prefix);
        if runs.len() == 1 && first.lo == first.hi {
            out.push_str(first.lo);
        } else {
            out.push('[');
            for (i, r) in runs.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(r.lo);
                if r.hi != r.lo {
                    out.push('-');
                    out.push_str(r.hi);
                }
            }
            out.push(']');
        }
        runs.clear();
    };
    let mut previous: Option<&str> = None;
    for host in sorted {
        if previous == Some(host) {
            continue;
        }
        previous = Some(host);
        let (prefix, digits) = split_number(host);
        let Ok(value) = digits.parse::<u64>() else {
            flush(&mut runs, &mut out);
            if !out.is_empty() {
                out.push(',');
            }
            out.push_str(host);
            continue;
        };
        if runs.last().is_some_and(|r| r.prefix != prefix) {
            flush(&mut runs, &mut out);
        }
        if let Some(run) = runs.last_mut() {
            let width = run.lo.len();
            if run.last.checked_add(1) == Some(value) && format!("{value:0width$}") == digits {
                run.hi = digits;
                run.last = value;
                continue;
            }
        }
        runs.push(Run {
            prefix,
            lo: digits,
            hi: digits,
            last: value,
        });
    }
    flush(&mut runs, &mut out);
    out
}

#[cfg(test)]
mod compress_tests {
    use super::*;

    #[test]
    fn compresses_to_what_expands_back() {
        let cases: &[(&[&str], &str)] = &[
            (&["n1"], "n1"),
            (
                &["gpu02", "gpu01", "gpu03", "gpu07", "io1"],
                "gpu[01-03,07],io1",
            ),
            (&["x9", "x10", "x11"], "x[9-11]"),
            (&["x098", "x099", "x100"], "x[098-100]"),
            // n01 is not n1: both kept, each where it expands back.
            (&["n1", "n01", "n2", "n02"], "n[1,01,2,02]"),
            (&["b2", "a1", "a1", "login"], "a1,b2,login"),
            (&["n9", "n010"], "n[9,010]"),
            (&["rack1-node", "rack2-node"], "rack1-node,rack2-node"),
            (&[], ""),
        ];
        for (hosts, want) in cases {
            let got = compress(hosts.iter().copied());
            assert_eq!(got, *want, "{hosts:?}");
            if !hosts.is_empty() {
                let mut back = expand(&got).unwrap();
                back.sort_by(|a, b| order(a, b));
                let mut hosts: Vec<&str> = hosts.to_vec();
                hosts.sort_by(|a, b| order(a, b));
                hosts.dedup();
                assert_eq!(back, hosts, "{got}");
            }
        }
    }

    #[test]
    fn ten_thousand_nodes_with_holes_are_one_short_line() {
        let hosts: Vec<String> = (1..=10_000)
            .filter(|n| ![997, 5000].contains(n))
            .map(|n| format!("gpu{n:05}"))
            .collect();
        let list = compress(hosts.iter().map(String::as_str));
        assert_eq!(list, "gpu[00001-00996,00998-04999,05001-10000]");
        assert_eq!(expand(&list).unwrap(), hosts);
    }
}
