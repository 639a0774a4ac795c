//! What unit tests share: fixture paths, throwaway node trees, and "audit this area of that
//! root with this profile, findings by id".

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::path::{Path, PathBuf};

use crate::checks::{AREAS, AuditOptions, Context};
use crate::finding::{Area, Finding, Status};
use crate::host::Root;
use crate::probe::Probes;
use crate::profile::{Loader, Profile};

/// A path under `tests/fixtures`.
pub(crate) fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

/// Asserts that `text` starts with `prefix`, showing the text when it does not.
#[track_caller]
pub(crate) fn assert_starts(text: &str, prefix: &str) {
    assert!(
        text.starts_with(prefix),
        "{text:?}\ndoes not start with {prefix:?}"
    );
}

/// Asserts that `text` contains `part`, showing the text when it does not.
#[track_caller]
pub(crate) fn assert_contains(text: &str, part: &str) {
    assert!(text.contains(part), "{text:?}\ndoes not contain {part:?}");
}

/// The finding `id` of `findings`, asserted to have `status`; either failure shows what
/// was found.
#[track_caller]
pub(crate) fn expect<'a>(
    findings: &'a BTreeMap<String, Finding>,
    id: &str,
    status: Status,
) -> &'a Finding {
    let finding = findings
        .get(id)
        .unwrap_or_else(|| panic!("no {id} among {:?}", findings.keys()));
    assert_eq!(finding.status, status, "{id}: {finding:#?}");
    finding
}

/// Asserts that each bench failure prints its text, the same once it is a `BenchError`, and
/// ends the run with exit code 3 (a runtime failure).
#[track_caller]
pub(crate) fn assert_bench_failures<E: Into<crate::error::BenchError> + std::fmt::Display>(
    cases: impl IntoIterator<Item = (E, String)>,
) {
    let mut checked = 0;
    for (err, text) in cases {
        assert_eq!(err.to_string(), text);
        let bench: crate::error::BenchError = err.into();
        assert_eq!(bench.to_string(), text);
        assert_eq!(bench.exit_code(), crate::error::ExitCode::Runtime);
        checked += 1;
    }
    assert!(checked > 0, "no cases");
}

/// A table test: asserts `f(input) == want` for every `(input, want)` of `cases`, naming the
/// input that fails; an empty table fails too (a test that checks nothing).
#[track_caller]
pub(crate) fn assert_cases<I: Debug, T: Debug + PartialEq<W>, W: Debug>(
    cases: impl IntoIterator<Item = (I, W)>,
    f: impl Fn(I) -> T,
) {
    let mut checked = 0;
    for (input, want) in cases {
        let name = format!("{input:?}");
        assert_eq!(f(input), want, "{name}");
        checked += 1;
    }
    assert!(checked > 0, "no cases");
}

mod tree;

pub(crate) use tree::Tree;

impl Tree {
    /// The tree as gputune's root.
    pub(crate) fn root(&self) -> Root {
        Root::new(self.base())
    }
}

/// Profile `profile` (a name or a path) as `audit` loads it for `root`.
pub(crate) fn profile(root: &Root, profile: &str) -> Profile {
    Loader::new(root, &crate::checks::keys)
        .load(profile)
        .unwrap_or_else(|e| panic!("profile {profile}: {e}"))
}

/// Runs `area`'s checks on `root` with `profile` (a name or a path) and `probes` the way
/// `audit` runs them ([`crate::checks::run`]), and returns the findings by id.
pub(crate) fn audit(
    root: &Root,
    profile: &str,
    options: &AuditOptions,
    probes: Probes,
    area: Area,
) -> BTreeMap<String, Finding> {
    audit_areas(root, profile, options, probes, &[area])
}

/// [`audit`] of several areas in one context, as one audit runs them (every area when
/// `areas` is empty).
pub(crate) fn audit_areas(
    root: &Root,
    profile: &str,
    options: &AuditOptions,
    probes: Probes,
    areas: &[Area],
) -> BTreeMap<String, Finding> {
    let profile = self::profile(root, profile);
    let ctx = Context::with_probes(root, &profile, options, probes);
    for area in areas {
        assert!(
            AREAS.iter().any(|a| a.area == *area),
            "no checks for {area}"
        );
    }
    crate::checks::run(&ctx, areas)
        .into_iter()
        .map(|f| (f.id.clone(), f))
        .collect()
}
