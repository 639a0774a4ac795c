//! One declaration per profile key: each area lists its keys with the judge that reads
//! them, and derives the bare [`KeySpec`]s profile parsing and the docs need from that
//! list. A key cannot be declared without naming its judge, and each area's audit matches
//! the judges exhaustively, so a judge without a key (never constructed) or a key whose
//! judge has no arm fails the build instead of falling silently through a `_ => {}`.

use crate::profile::setting::KeySpec;

/// A profile key and the judge (an area's own enum) that reads it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Judged<J> {
    pub spec: KeySpec,
    pub judge: J,
}

/// The bare specs of a judged list, in its order. `N` is the list's length; a mismatch
/// stops the build (a panic in const evaluation).
pub(crate) const fn specs<J: Copy, const N: usize>(table: &[Judged<J>]) -> [KeySpec; N] {
    assert!(
        table.len() == N && N > 0,
        "specs: N must be the table's length"
    );
    let mut out = [table[0].spec; N];
    let mut i = 1;
    while i < N {
        out[i] = table[i].spec;
        i += 1;
    }
    out
}

/// The judge of a profile key (`None` only for a key the area does not declare, which
/// profile parsing has already refused).
pub(crate) fn judge_of<J: Copy>(table: &[Judged<J>], key: &str) -> Option<J> {
    table.iter().find(|j| j.spec.matches(key)).map(|j| j.judge)
}

/// Asserts that every key of a judged list reaches its own entry: no family declared
/// before it swallows it, and no key is declared twice.
#[cfg(test)]
pub(crate) fn assert_each_key_reaches_its_judge<J: Copy + PartialEq + std::fmt::Debug>(
    table: &[Judged<J>],
) {
    for (i, entry) in table.iter().enumerate() {
        let key = entry.spec.key;
        let probe = key
            .strip_suffix('*')
            .map_or(key.to_string(), |family| format!("{family}x"));
        let reached = table.iter().position(|e| e.spec.matches(&probe));
        assert_eq!(reached, Some(i), "`{key}` reaches entry {reached:?}");
        assert_eq!(judge_of(table, &probe), Some(entry.judge), "`{key}`");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::setting::ValueKind::Number;

    const fn spec(key: &'static str) -> KeySpec {
        KeySpec {
            key,
            kind: Number,
            why: "",
        }
    }

    const TABLE: &[Judged<u8>] = &[
        Judged {
            spec: spec("a.one"),
            judge: 1,
        },
        Judged {
            spec: spec("b.*"),
            judge: 2,
        },
    ];

    #[test]
    fn specs_keep_the_order_and_judge_of_finds_families() {
        let keys: [KeySpec; 2] = specs(TABLE);
        assert_eq!(keys.map(|k| k.key), ["a.one", "b.*"]);
        assert_eq!(judge_of(TABLE, "a.one"), Some(1));
        assert_eq!(judge_of(TABLE, "b.mlx5"), Some(2));
        assert_eq!(judge_of(TABLE, "b."), None);
        assert_eq!(judge_of(TABLE, "c"), None);
        assert_each_key_reaches_its_judge(TABLE);
    }

    #[test]
    #[should_panic(expected = "reaches entry")]
    fn a_family_that_swallows_a_later_key_is_caught() {
        let shadowed = [
            Judged {
                spec: spec("b.*"),
                judge: 2,
            },
            Judged {
                spec: spec("b.one"),
                judge: 3,
            },
        ];
        assert_each_key_reaches_its_judge(&shadowed);
    }
}
