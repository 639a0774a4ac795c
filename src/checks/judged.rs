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
