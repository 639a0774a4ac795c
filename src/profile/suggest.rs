//! "Did you mean": the known name closest to a misspelt one, so a typo in a profile name or
//! a `--skip` id is answered with the name that was meant rather than a bare "unknown".

/// The candidate closest to `name` by edit distance, when it is close enough to be a typo
/// (2 edits, or a third of the name's length up to 3) and not `name` itself.
/// A candidate whose last dotted part is `name` (`RemoveIPC` for `logind.RemoveIPC`) is
/// meant too, however far apart they are.
pub(crate) fn closest<'a>(
    name: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<&'a str> {
    let limit = (name.chars().count() / 3).clamp(2, 3);
    let candidates: Vec<&'a str> = candidates.into_iter().filter(|c| *c != name).collect();
    let tail = format!(".{name}");
    if let Some(whole) = candidates.iter().find(|c| c.ends_with(&tail)) {
        return Some(whole);
    }
    candidates
        .into_iter()
        .map(|c| (c, distance(name, c)))
        .filter(|(_, d)| *d <= limit)
        .min_by_key(|(_, d)| *d)
        .map(|(c, _)| c)
}

/// Levenshtein distance over characters.
pub(crate) fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            let sub = prev[j] + usize::from(ca != *cb);
            cur.push(sub.min(prev[j + 1] + 1).min(cur[j] + 1));
        }
        prev = cur;
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests {
    use super::closest;

    #[test]
    fn typos_find_the_name_meant_and_strangers_find_nothing() {
        let names = [
            "base",
            "single-node",
            "ddp-10gbe",
            "ddp-25gbe",
            "ddp-infiniband",
        ];
        let cases: &[(&str, Option<&str>)] = &[
            ("ddp-10gb", Some("ddp-10gbe")),
            ("ddp10gbe", Some("ddp-10gbe")),
            ("ddp-infinband", Some("ddp-infiniband")),
            ("singlenode", Some("single-node")),
            ("bsae", Some("base")),
            // a doubled letter, and three letters left out of a long name
            ("single-nodde", Some("single-node")),
            ("ddp-infband", Some("ddp-infiniband")),
            ("production", None),
            // three edits are too many in a short name: they leave it little of its own
            ("bxyz", None),
            ("x", None),
        ];
        let keys = ["logind.RemoveIPC", "dev_shm.size"];
        assert_eq!(closest("RemoveIPC", keys), Some("logind.RemoveIPC"));
        assert_eq!(closest("size", keys), Some("dev_shm.size"));
        assert_eq!(closest("RemovIPC", keys), None);
        for (typo, want) in cases {
            assert_eq!(closest(typo, names), *want, "{typo}");
        }
    }
}
