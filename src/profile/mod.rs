//! Profiles: TOML files that say what a well-configured node looks like. Built-in ones are
//! embedded in the binary; `/etc/gputune/profiles/NAME.toml` (under the root) wins on a name
//! clash; a path loads a file. `include = ["base"]` inherits, the child overriding per key.

pub mod amount;
pub mod default;
pub mod job;
pub mod setting;
pub mod version;

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use toml::Spanned;

use crate::finding::Area;
use crate::host::Root;
use amount::Amount;
use setting::{KeySpec, Rule, Setting, Severity, ValueKind};
use version::VersionReq;

/// The profiles shipped inside the binary, parents first.
pub const BUILTIN: &[(&str, &str)] = &[
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
];

/// Where site profiles live on the node (under the root).
pub const SITE_DIR: &str = "/etc/gputune/profiles";

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

/// Knobs of the benchmark a profile may set.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct Bench {
    /// AllReduce bus bandwidth below which `bench allreduce` fails, in GB/s (1e9 bytes/s).
    pub min_busbw: Option<f64>,
    /// The same for `bench allgather`.
    pub allgather_min_busbw: Option<f64>,
    /// The same for `bench reducescatter`.
    pub reducescatter_min_busbw: Option<f64>,
    /// The same for `bench broadcast`.
    pub broadcast_min_busbw: Option<f64>,
}

impl Bench {
    /// The keys of `[bench]`, each with its threshold.
    pub fn thresholds(&self) -> [(&'static str, Option<f64>); 4] {
        [
            ("min_busbw", self.min_busbw),
            ("allgather_min_busbw", self.allgather_min_busbw),
            ("reducescatter_min_busbw", self.reducescatter_min_busbw),
            ("broadcast_min_busbw", self.broadcast_min_busbw),
        ]
    }

    fn threshold_mut(&mut self, key: &str) -> Option<&mut Option<f64>> {
        match key {
            "min_busbw" => Some(&mut self.min_busbw),
            "allgather_min_busbw" => Some(&mut self.allgather_min_busbw),
            "reducescatter_min_busbw" => Some(&mut self.reducescatter_min_busbw),
            "broadcast_min_busbw" => Some(&mut self.broadcast_min_busbw),
            _ => None,
        }
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
    pub fn area(&self, area: Area) -> impl Iterator<Item = (&String, &Setting)> {
        self.settings.get(&area).into_iter().flatten()
    }

    pub fn get(&self, area: Area, key: &str) -> Option<&Setting> {
        self.settings.get(&area)?.get(key)
    }

    /// The resolved profile as a loadable TOML file, each setting annotated with its origin.
    pub fn to_toml(&self) -> String {
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
            .filter_map(|(key, min)| min.map(|m| format!("{key} = {m:?}\n")))
            .collect();
        if !set.is_empty() {
            out.push_str(&format!("\n[bench]\n{}", set.concat()));
        }
        out.push_str(&self.job.to_toml());
        out
    }
}

fn severity_name(s: Severity) -> &'static str {
    match s {
        Severity::Fail => "fail",
        Severity::Warn => "warn",
    }
}

/// One profile a user can name, for `gputune profiles list`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listing {
    pub name: String,
    pub source: String,
    pub description: String,
}

/// The text of one profile file and how to name it in messages.
struct SourceFile {
    name: String,
    display: String,
    /// The file itself (canonical path), so `./a.toml` and `../dir/a.toml` are one file
    /// for include-cycle detection.
    identity: String,
    /// Directory relative includes given as paths resolve against.
    dir: Option<PathBuf>,
    text: String,
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
        let source = self
            .find(name_or_path, None)
            .map_err(|message| ProfileError {
                file: name_or_path.to_string(),
                line: None,
                key: None,
                message,
            })?;
        let mut stack = Vec::new();
        let merged = self.resolve(source, &mut stack)?;
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
    pub fn list(&self) -> Result<Vec<Listing>, ProfileError> {
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

    fn find(&self, ident: &str, relative_to: Option<&Path>) -> Result<SourceFile, String> {
        if ident.contains('/') || ident.ends_with(".toml") {
            let path = match relative_to {
                Some(dir) if Path::new(ident).is_relative() => dir.join(ident),
                _ => PathBuf::from(ident),
            };
            let text = std::fs::read_to_string(&path)
                .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
            let name = path
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default();
            return Ok(SourceFile {
                name,
                display: path.display().to_string(),
                identity: identity_of(&path),
                dir: path.parent().map(Path::to_path_buf),
                text,
            });
        }
        if !ident
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
            || ident.is_empty()
        {
            return Err(format!(
                "`{ident}` is not a profile name (letters, digits, - and _) or a path"
            ));
        }
        let site = format!("{SITE_DIR}/{ident}.toml");
        match self.root.read_optional(&site) {
            Ok(Some(text)) => {
                let path = self.root.path(&site);
                return Ok(SourceFile {
                    name: ident.into(),
                    display: path.display().to_string(),
                    identity: identity_of(&path),
                    // Includes written as paths resolve beside the site profile.
                    dir: Some(self.root.path(SITE_DIR)),
                    text,
                });
            }
            Ok(None) => {}
            Err(e) => return Err(e.to_string()),
        }
        match BUILTIN.iter().find(|(name, _)| *name == ident) {
            Some((name, text)) => Ok(SourceFile {
                name: name.to_string(),
                display: format!("profiles/{name}.toml"),
                identity: format!("built-in {name}"),
                dir: None,
                text: text.to_string(),
            }),
            None => {
                let names: Vec<&str> = BUILTIN.iter().map(|(n, _)| *n).collect();
                Err(format!(
                    "no profile named `{ident}` (built-in: {}; site profiles go in {SITE_DIR})",
                    names.join(", ")
                ))
            }
        }
    }

    /// `stack` holds the (identity, display) of the profiles being resolved, outermost first.
    fn resolve(
        &self,
        source: SourceFile,
        stack: &mut Vec<(String, String)>,
    ) -> Result<Merged, ProfileError> {
        let err = |line: Option<usize>, key: Option<String>, message: String| ProfileError {
            file: source.display.clone(),
            line,
            key,
            message,
        };
        if stack
            .iter()
            .any(|(identity, _)| *identity == source.identity)
        {
            let chain: Vec<&str> = stack.iter().map(|(_, display)| display.as_str()).collect();
            return Err(err(
                None,
                Some("include".into()),
                format!(
                    "include cycle: {} -> {}",
                    chain.join(" -> "),
                    source.display
                ),
            ));
        }
        let raw: RawProfile = toml::from_str(&source.text).map_err(|e| {
            err(
                e.span().map(|s| line_of(&source.text, s.start)),
                None,
                e.message().to_string(),
            )
        })?;
        stack.push((source.identity.clone(), source.display.clone()));
        let mut merged = Merged::default();
        for include in &raw.include {
            let line = Some(line_of(&source.text, include.span().start));
            let parent_source = self
                .find(include.get_ref(), source.dir.as_deref())
                .map_err(|m| err(line, Some("include".into()), m))?;
            let parent = self.resolve(parent_source, stack)?;
            merged.absorb(parent);
        }
        stack.pop();

        for (area, table) in raw.areas() {
            for (key, value) in table {
                let line = line_of(&source.text, key.span().start);
                let setting = parse_setting(area, key.get_ref(), value, (self.keys)(area))
                    .map_err(|m| err(Some(line), Some(format!("[{area}] {}", key.get_ref())), m))?;
                let setting = Setting {
                    origin: format!("{}:{line}", source.display),
                    ..setting
                };
                merged
                    .settings
                    .entry(area)
                    .or_default()
                    .insert(key.get_ref().clone(), setting);
            }
        }
        let raw_bench = raw.bench.map(|b| {
            [
                ("min_busbw", b.min_busbw),
                ("allgather_min_busbw", b.allgather_min_busbw),
                ("reducescatter_min_busbw", b.reducescatter_min_busbw),
                ("broadcast_min_busbw", b.broadcast_min_busbw),
            ]
        });
        for (key, min) in raw_bench.into_iter().flatten() {
            let Some(min) = min else { continue };
            if !(min.get_ref().is_finite() && *min.get_ref() >= 0.0) {
                return Err(err(
                    Some(line_of(&source.text, min.span().start)),
                    Some(format!("[bench] {key}")),
                    format!("{} is not a bandwidth in GB/s", min.get_ref()),
                ));
            }
            if let Some(slot) = merged.bench.threshold_mut(key) {
                *slot = Some(*min.get_ref());
            }
        }
        if let Some(raw_job) = raw.job {
            let job = job::Job::from_raw(raw_job).map_err(|(offset, key, message)| {
                err(
                    Some(line_of(&source.text, offset)),
                    Some(format!("[job] {key}")),
                    message,
                )
            })?;
            merged.job.absorb(job);
        }
        merged.chain.push(source.name.clone());
        merged.name = source.name;
        merged.source = if source.display.starts_with("profiles/") {
            "built-in".into()
        } else {
            source.display
        };
        if let Some(description) = raw.description {
            merged.description = description;
        }
        Ok(merged)
    }
}

#[derive(Default)]
struct Merged {
    name: String,
    description: String,
    source: String,
    chain: Vec<String>,
    settings: BTreeMap<Area, BTreeMap<String, Setting>>,
    bench: Bench,
    job: job::Job,
}

impl Merged {
    /// Takes a parent's settings; keys already present (from earlier parents) are overridden.
    fn absorb(&mut self, parent: Merged) {
        for (area, settings) in parent.settings {
            self.settings.entry(area).or_default().extend(settings);
        }
        if parent.bench.min_busbw.is_some() {
            self.bench.min_busbw = parent.bench.min_busbw;
        }
        self.job.absorb(parent.job);
        for name in parent.chain {
            if !self.chain.contains(&name) {
                self.chain.push(name);
            }
        }
        self.description = parent.description;
    }
}

type RawArea = BTreeMap<Spanned<String>, Spanned<toml::Value>>;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawProfile {
    description: Option<String>,
    #[serde(default)]
    include: Vec<Spanned<String>>,
    #[serde(default)]
    network: RawArea,
    #[serde(default)]
    memory: RawArea,
    #[serde(default)]
    numa: RawArea,
    #[serde(default)]
    nic: RawArea,
    #[serde(default)]
    gpu: RawArea,
    #[serde(default)]
    platform: RawArea,
    #[serde(default)]
    limits: RawArea,
    #[serde(default)]
    cgroup: RawArea,
    #[serde(default)]
    firewall: RawArea,
    bench: Option<RawBench>,
    job: Option<job::RawJob>,
}

/// `[bench]` as written, with the span of each value for error messages.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawBench {
    min_busbw: Option<Spanned<f64>>,
    allgather_min_busbw: Option<Spanned<f64>>,
    reducescatter_min_busbw: Option<Spanned<f64>>,
    broadcast_min_busbw: Option<Spanned<f64>>,
}

impl RawProfile {
    fn areas(&self) -> [(Area, &RawArea); 9] {
        [
            (Area::Network, &self.network),
            (Area::Memory, &self.memory),
            (Area::Numa, &self.numa),
            (Area::Nic, &self.nic),
            (Area::Gpu, &self.gpu),
            (Area::Platform, &self.platform),
            (Area::Limits, &self.limits),
            (Area::Cgroup, &self.cgroup),
            (Area::Firewall, &self.firewall),
        ]
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSetting {
    equals: Option<toml::Value>,
    min: Option<toml::Value>,
    max: Option<toml::Value>,
    one_of: Option<Vec<toml::Value>>,
    version: Option<String>,
    severity: Option<String>,
    why: Option<String>,
}

fn parse_setting(
    area: Area,
    key: &str,
    value: &Spanned<toml::Value>,
    keys: &[KeySpec],
) -> Result<Setting, String> {
    let Some(spec) = keys.iter().find(|s| s.key == key) else {
        let known: Vec<&str> = keys.iter().map(|s| s.key).collect();
        return Err(if known.is_empty() {
            format!("unknown key: this version has no checks in [{area}] yet")
        } else {
            format!("unknown key (known in [{area}]: {})", known.join(", "))
        });
    };
    let raw: RawSetting = value
        .get_ref()
        .clone()
        .try_into()
        .map_err(|e: toml::de::Error| {
            format!(
                "{} (a setting looks like {{ min = 16777216, severity = \"warn\" }})",
                e.message().trim()
            )
        })?;
    let severity = match raw.severity.as_deref() {
        None | Some("fail") => Severity::Fail,
        Some("warn") => Severity::Warn,
        Some(other) => return Err(format!("severity `{other}` is not `fail` or `warn`")),
    };
    let kind_name = match spec.kind {
        ValueKind::Number => "a number",
        ValueKind::Text => "text",
        ValueKind::Version => "a version",
    };
    let not_for = |rule: &str| {
        Err(format!(
            "`{rule}` does not apply to this key, which holds {kind_name}"
        ))
    };
    let mut rule = Rule::default();
    match spec.kind {
        ValueKind::Number => {
            if raw.version.is_some() {
                return not_for("version");
            }
            rule.equals = raw.equals.as_ref().map(number_text).transpose()?;
            rule.min = raw.min.as_ref().map(amount).transpose()?;
            rule.max = raw.max.as_ref().map(amount).transpose()?;
            rule.one_of = raw
                .one_of
                .as_ref()
                .map(|v| v.iter().map(number_text).collect())
                .transpose()?;
        }
        ValueKind::Text => {
            if raw.min.is_some() || raw.max.is_some() {
                return not_for(if raw.min.is_some() { "min" } else { "max" });
            }
            if raw.version.is_some() {
                return not_for("version");
            }
            rule.equals = raw.equals.as_ref().map(text).transpose()?;
            rule.one_of = raw
                .one_of
                .as_ref()
                .map(|v| v.iter().map(text).collect())
                .transpose()?;
        }
        ValueKind::Version => {
            if raw.equals.is_some()
                || raw.min.is_some()
                || raw.max.is_some()
                || raw.one_of.is_some()
            {
                return Err("this key holds a version: use `version = \">=X.Y\"`".into());
            }
            rule.version = raw.version.as_deref().map(VersionReq::parse).transpose()?;
        }
    }
    if rule == Rule::default() {
        return Err("no rule: give one of equals, min, max, one_of or version".into());
    }
    if rule.one_of.as_ref().is_some_and(Vec::is_empty) {
        return Err("`one_of` is empty".into());
    }
    if let (Some(min), Some(max)) = (rule.min, rule.max)
        && min > max
    {
        return Err(format!("min {min} is above max {max}"));
    }
    // A rule no value can meet would let apply set and "verify" a value audit then fails.
    let candidates = rule.equals.iter().chain(rule.one_of.iter().flatten());
    for value in candidates {
        if rule.judge(value) != setting::Verdict::Met {
            return Err(format!(
                "`{value}` does not meet the rest of the rule ({}): no value could pass",
                rule.describe()
            ));
        }
    }
    Ok(Setting {
        rule,
        severity,
        why: raw.why,
        origin: String::new(),
    })
}

fn amount(value: &toml::Value) -> Result<Amount, String> {
    match value {
        toml::Value::Integer(n) => Ok(Amount::Finite(*n as i128)),
        toml::Value::String(s) => Amount::parse(s),
        other => Err(format!(
            "expected a number or size, found {}",
            other.type_str()
        )),
    }
}

fn number_text(value: &toml::Value) -> Result<String, String> {
    amount(value).map(|a| a.to_string())
}

fn text(value: &toml::Value) -> Result<String, String> {
    match value {
        toml::Value::String(s) => Ok(s.clone()),
        other => Err(format!("expected text, found {}", other.type_str())),
    }
}

/// A file's canonical path, or the path as given when it cannot be resolved.
fn identity_of(path: &Path) -> String {
    std::fs::canonicalize(path)
        .unwrap_or_else(|_| path.to_path_buf())
        .display()
        .to_string()
}

/// 1-based line of a byte offset.
fn line_of(text: &str, offset: usize) -> usize {
    text[..offset.min(text.len())].matches('\n').count() + 1
}

#[cfg(test)]
mod tests;
