//! Profiles: TOML files that say what a well-configured node looks like. Built-in ones are
//! embedded in the binary; `/etc/gputune/profiles/NAME.toml` (under the root) wins on a name
//! clash; a path loads a file. `include = ["base"]` inherits, the child overriding per key.

pub(crate) mod amount;
pub(crate) mod bandwidth;
pub(crate) mod default;
pub(crate) mod job;
pub(crate) mod setting;
pub(crate) mod suggest;
pub(crate) mod version;

mod find;
mod merge;
mod raw;
mod rules;

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use toml::Spanned;

use crate::finding::Area;
use crate::host::Root;
use amount::Amount;
pub use bandwidth::{Baseline, Threshold};
use setting::{KeySpec, Rule, Setting, Severity, ValueKind};
use version::VersionReq;

use find::*;
use raw::*;
use rules::*;

/// The profiles shipped inside the binary, parents first.
pub(crate) const BUILTIN: &[(&str, &str)] = &[
    ("base", include_str!("../../profiles/base.toml")),
    (
        "single-node",
        include_str!("../../profiles/single-node.toml"),
    ),
    ("ddp-10gbe", include_str!("../../profiles/ddp-10gbe.toml")),
    ("ddp-25gbe", include_str!("../../profiles/ddp-25gbe.toml")),
    ("ddp-100gbe", include_str!("../../profiles/ddp-100gbe.toml")),
    (
        "ddp-infiniband",
        include_str!("../../profiles/ddp-infiniband.toml"),
    ),
    ("ddp-roce", include_str!("../../profiles/ddp-roce.toml")),
];

/// Where site profiles live on the node (under the root).
pub(crate) const SITE_DIR: &str = "/etc/gputune/profiles";

/// How deep includes may nest. Shipped profiles use two levels; a deeper chain is a
/// mistake or an attack (a chain of thousands would overflow the stack).
pub(crate) const MAX_INCLUDE_DEPTH: usize = 32;

/// The most a profile file may hold (1 MiB; shipped ones are a few KiB). A profile naming
/// `/dev/zero` or a FIFO is refused rather than read without end.
pub(crate) const MAX_PROFILE_BYTES: u64 = 1 << 20;

/// A profile that cannot be used, naming the file, line and key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ProfileError {
    pub file: String,
    pub line: Option<usize>,
    pub key: Option<String>,
    pub message: String,
}

impl fmt::Display for ProfileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "profile {}", self.file)?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
        }
        if let Some(key) = &self.key {
            write!(f, ": {key}")?;
        }
        write!(f, ": {}", self.message)
    }
}

/// Knobs of the benchmark a profile may set: each threshold and baseline as resolved or as
/// the file writes it, with its place (`RawBench`), so the keys are listed once for both.
#[derive(Debug, Clone, PartialEq, Deserialize, serde::Serialize)]
// A `[bench]` that is not a table is still refused as `expected struct RawBench`.
#[serde(deny_unknown_fields, expecting = "struct RawBench")]
pub struct Bench<T = Threshold, B = Baseline> {
    /// AllReduce bus bandwidth below which `bench allreduce` fails: GB/s (1e9 bytes/s), or a
    /// percentage of the reference rate (`"80%"`).
    pub min_busbw: Option<T>,
    /// The same for `bench allgather`.
    pub allgather_min_busbw: Option<T>,
    /// The same for `bench reducescatter`.
    pub reducescatter_min_busbw: Option<T>,
    /// The same for `bench broadcast`.
    pub broadcast_min_busbw: Option<T>,
    /// `[bench.baseline]`: AllReduce bus bandwidth expected per size, with a tolerance.
    pub baseline: Option<B>,
    /// The same for `bench allgather`.
    pub allgather_baseline: Option<B>,
    /// The same for `bench reducescatter`.
    pub reducescatter_baseline: Option<B>,
    /// The same for `bench broadcast`.
    pub broadcast_baseline: Option<B>,
}

impl<T, B> Default for Bench<T, B> {
    fn default() -> Self {
        Bench {
            min_busbw: None,
            allgather_min_busbw: None,
            reducescatter_min_busbw: None,
            broadcast_min_busbw: None,
            baseline: None,
            allgather_baseline: None,
            reducescatter_baseline: None,
            broadcast_baseline: None,
        }
    }
}

impl<T, B> Bench<T, B> {
    /// The keys of `[bench]`, each with its threshold, in the order `profiles show` writes them.
    pub(crate) fn thresholds(&self) -> [(&'static str, Option<&T>); 4] {
        [
            ("min_busbw", self.min_busbw.as_ref()),
            ("allgather_min_busbw", self.allgather_min_busbw.as_ref()),
            (
                "reducescatter_min_busbw",
                self.reducescatter_min_busbw.as_ref(),
            ),
            ("broadcast_min_busbw", self.broadcast_min_busbw.as_ref()),
        ]
    }

    /// The baseline tables of `[bench]`, in the order `profiles show` writes them.
    pub(crate) fn baselines(&self) -> [(&'static str, Option<&B>); 4] {
        [
            ("baseline", self.baseline.as_ref()),
            ("allgather_baseline", self.allgather_baseline.as_ref()),
            (
                "reducescatter_baseline",
                self.reducescatter_baseline.as_ref(),
            ),
            ("broadcast_baseline", self.broadcast_baseline.as_ref()),
        ]
    }

    /// Every key this sets, else `base`'s: a profile's over its includes'. A baseline table
    /// is taken whole (its sizes were measured together), never merged size by size.
    pub(crate) fn or(self, base: Bench<T, B>) -> Bench<T, B> {
        Bench {
            min_busbw: self.min_busbw.or(base.min_busbw),
            allgather_min_busbw: self.allgather_min_busbw.or(base.allgather_min_busbw),
            reducescatter_min_busbw: self
                .reducescatter_min_busbw
                .or(base.reducescatter_min_busbw),
            broadcast_min_busbw: self.broadcast_min_busbw.or(base.broadcast_min_busbw),
            baseline: self.baseline.or(base.baseline),
            allgather_baseline: self.allgather_baseline.or(base.allgather_baseline),
            reducescatter_baseline: self.reducescatter_baseline.or(base.reducescatter_baseline),
            broadcast_baseline: self.broadcast_baseline.or(base.broadcast_baseline),
        }
    }

    /// Every threshold passed through `f` and every baseline through `g`; the first error
    /// stops it.
    pub(crate) fn try_map<U, C, E>(
        self,
        mut f: impl FnMut(&'static str, T) -> Result<U, E>,
        mut g: impl FnMut(&'static str, B) -> Result<C, E>,
    ) -> Result<Bench<U, C>, E> {
        let mut t = |key, v: Option<T>| v.map(|v| f(key, v)).transpose();
        let min_busbw = t("min_busbw", self.min_busbw)?;
        let allgather_min_busbw = t("allgather_min_busbw", self.allgather_min_busbw)?;
        let reducescatter_min_busbw = t("reducescatter_min_busbw", self.reducescatter_min_busbw)?;
        let broadcast_min_busbw = t("broadcast_min_busbw", self.broadcast_min_busbw)?;
        let mut b = |key, v: Option<B>| v.map(|v| g(key, v)).transpose();
        Ok(Bench {
            min_busbw,
            allgather_min_busbw,
            reducescatter_min_busbw,
            broadcast_min_busbw,
            baseline: b("baseline", self.baseline)?,
            allgather_baseline: b("allgather_baseline", self.allgather_baseline)?,
            reducescatter_baseline: b("reducescatter_baseline", self.reducescatter_baseline)?,
            broadcast_baseline: b("broadcast_baseline", self.broadcast_baseline)?,
        })
    }
}

/// A fully resolved profile: includes merged, every setting validated.
#[derive(Debug, Clone, PartialEq)]
pub struct Profile {
    pub name: String,
    pub description: String,
    /// `built-in` or the file it was read from.
    pub source: String,
    /// The profiles merged into this one, parents first, itself last.
    pub chain: Vec<String>,
    pub settings: BTreeMap<Area, BTreeMap<String, Setting>>,
    pub bench: Bench,
    /// How jobs run on the node: their ports and slice (`[job]`).
    pub job: job::Job,
}

impl Profile {
    /// The settings of one area, by key.
    pub(crate) fn area(&self, area: Area) -> impl Iterator<Item = (&String, &Setting)> {
        self.settings.get(&area).into_iter().flatten()
    }

    pub(crate) fn get(&self, area: Area, key: &str) -> Option<&Setting> {
        self.settings.get(&area)?.get(key)
    }

    /// The setting behind check `id` of `area`: the key that names it, the most specific
    /// when several do (`ulimit.nofile` governs `ulimit.nofile.login`).
    pub(crate) fn governing(&self, area: Area, id: &str) -> Option<&Setting> {
        self.area(area)
            .filter(|(key, _)| names_check(key, id))
            .max_by_key(|(key, _)| key.len())
            .map(|(_, s)| s)
    }

    /// The resolved profile as a loadable TOML file, each setting annotated with its origin.
    pub(crate) fn to_toml(&self) -> String {
        let mut out = format!(
            "# Resolved profile `{}` ({}), merged from: {}\ndescription = {}\n",
            self.name,
            self.source,
            self.chain.join(" -> "),
            toml::Value::String(self.description.clone())
        );
        for (area, settings) in &self.settings {
            out.push_str(&format!("\n[{area}]\n"));
            for (key, s) in settings {
                let mut fields = s.rule.to_toml_fields();
                fields.push_str(&format!("severity = \"{}\"", severity_name(s.severity)));
                if let Some(why) = &s.why {
                    fields.push_str(&format!(", why = {}", toml::Value::String(why.clone())));
                }
                out.push_str(&format!("\"{key}\" = {{ {fields} }}  # {}\n", s.origin));
            }
        }
        let set: Vec<String> = self
            .bench
            .thresholds()
            .iter()
            .filter_map(|(key, min)| min.map(|m| format!("{key} = {}\n", m.to_toml())))
            .collect();
        if !set.is_empty() {
            out.push_str(&format!("\n[bench]\n{}", set.concat()));
        }
        for (key, baseline) in self.bench.baselines() {
            if let Some(b) = baseline {
                out.push_str(&b.to_toml(key));
            }
        }
        out.push_str(&self.job.to_toml());
        out
    }
}

/// Whether `pattern` (a profile key or a `--skip` id) names check `id`: the id itself, or
/// the same check of one of its subjects (`link.speed_mbps` names `link.speed_mbps.eth0`,
/// `cpu.max` names `cpu.max@training.slice`).
pub(crate) fn names_check(pattern: &str, id: &str) -> bool {
    id.strip_prefix(pattern)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('.') || rest.starts_with('@'))
}

fn severity_name(s: Severity) -> &'static str {
    s.name()
}

/// One profile a user can name, for `gputune profiles list`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Listing {
    pub name: String,
    pub source: String,
    pub description: String,
}

/// Finds, parses and resolves profiles against the keys the checks understand.
pub struct Loader<'a> {
    root: &'a Root,
    keys: &'a dyn Fn(Area) -> &'static [KeySpec],
}

impl<'a> Loader<'a> {
    /// `keys` lists, per area, the keys the checks of that area understand.
    pub fn new(root: &'a Root, keys: &'a dyn Fn(Area) -> &'static [KeySpec]) -> Self {
        Loader { root, keys }
    }

    /// Loads a profile by name (site, then built-in) or by path (contains `/` or ends in `.toml`).
    pub fn load(&self, name_or_path: &str) -> Result<Profile, ProfileError> {
        let source = self.find(name_or_path, None).map_err(|e| ProfileError {
            file: name_or_path.to_string(),
            line: None,
            key: None,
            message: e.to_string(),
        })?;
        let mut stack = Vec::new();
        let mut memo = std::collections::HashMap::new();
        let merged = self.resolve(source, &mut stack, &mut memo)?;
        Ok(Profile {
            name: merged.name,
            description: merged.description,
            source: merged.source,
            chain: merged.chain,
            settings: merged.settings,
            bench: merged.bench,
            job: merged.job,
        })
    }

    /// Every profile a name can reach: site profiles first, then built-in ones they do not shadow.
    pub(crate) fn list(&self) -> Result<Vec<Listing>, ProfileError> {
        let mut listings = Vec::new();
        let site = self.root.list_dir(SITE_DIR).map_err(|e| ProfileError {
            file: SITE_DIR.into(),
            line: None,
            key: None,
            message: e.to_string(),
        })?;
        let site_names: Vec<String> = site
            .unwrap_or_default()
            .into_iter()
            .filter_map(|f| f.strip_suffix(".toml").map(str::to_string))
            .collect();
        for name in &site_names {
            let profile = self.load(name)?;
            listings.push(Listing {
                name: name.clone(),
                source: profile.source,
                description: profile.description,
            });
        }
        for (name, _) in BUILTIN {
            if !site_names.iter().any(|n| n == name) {
                let profile = self.load(name)?;
                listings.push(Listing {
                    name: name.to_string(),
                    source: profile.source,
                    description: profile.description,
                });
            }
        }
        Ok(listings)
    }
}
#[cfg(test)]
mod tests;
