//! Resolving includes: each profile's parents merged first, once each (a diamond is read
//! once), cycles and depth refused with the chain that shows them.

use super::*;

impl Loader<'_> {
    /// `stack` holds the (identity, display) of the profiles being resolved, outermost first;
    /// `memo` every profile already resolved, by identity, so a file included from many
    /// places (a diamond, twenty levels deep) is read and merged once, not 2^20 times.
    pub(super) fn resolve(
        &self,
        source: SourceFile,
        stack: &mut Vec<(String, String)>,
        memo: &mut std::collections::HashMap<String, Merged>,
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
        if let Some(done) = memo.get(&source.identity) {
            return Ok(done.clone());
        }
        if stack.len() >= MAX_INCLUDE_DEPTH {
            return Err(err(
                None,
                Some("include".into()),
                format!(
                    "includes nest deeper than {MAX_INCLUDE_DEPTH} levels (from {})",
                    stack.first().map_or("", |(_, d)| d.as_str())
                ),
            ));
        }
        let identity = source.identity.clone();
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
                .find(include.get_ref(), source.dir.as_ref())
                .map_err(|e| err(line, Some("include".into()), e.to_string()))?;
            let parent = self.resolve(parent_source, stack, memo)?;
            merged.absorb(parent);
        }
        stack.pop();

        for (&area, table) in &raw.areas {
            for (key, value) in table {
                let line = line_of(&source.text, key.span().start);
                let setting = parse_setting(area, key.get_ref(), value, (self.keys)(area))
                    .map_err(|e| {
                        err(
                            Some(line),
                            Some(format!("[{area}] {}", key.get_ref())),
                            e.to_string(),
                        )
                    })?;
                let inherited = merged
                    .settings
                    .get(&area)
                    .and_then(|s| s.get(key.get_ref()));
                let setting = Setting {
                    origin: format!("{}:{line}", source.display),
                    set_by: source.name.clone(),
                    ..severity_only(setting, inherited).map_err(|e| {
                        err(
                            Some(line),
                            Some(format!("[{area}] {}", key.get_ref())),
                            e.to_string(),
                        )
                    })?
                };
                merged
                    .settings
                    .entry(area)
                    .or_default()
                    .insert(key.get_ref().clone(), setting);
            }
        }
        if let Some(bench) = raw.bench {
            let text = &source.text;
            let bench = bench.try_map(
                |key, min| {
                    Threshold::from_toml(min.get_ref()).map_err(|e| {
                        err(
                            Some(line_of(text, min.span().start)),
                            Some(format!("[bench] {key}")),
                            e.to_string(),
                        )
                    })
                },
                |key, table| {
                    Baseline::from_raw(table).map_err(|(at, inner, problem)| {
                        err(
                            Some(line_of(text, at)),
                            Some(format!("[bench.{key}] {inner}")),
                            problem.to_string(),
                        )
                    })
                },
            )?;
            merged.bench = bench.or(std::mem::take(&mut merged.bench));
        }
        if let Some(raw_job) = raw.job {
            let job = job::Job::from_raw(raw_job).map_err(|(offset, key, problem)| {
                err(
                    Some(line_of(&source.text, offset)),
                    Some(format!("[job] {key}")),
                    problem.to_string(),
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
        memo.insert(identity, merged.clone());
        Ok(merged)
    }
}

/// A setting written with only a severity (and perhaps a reason) takes its rule from the
/// included profile that sets the key: a site profile softens or turns off what it inherits.
/// Turned off, it needs no rule; softened, it needs one to judge by.
fn severity_only(
    setting: Setting,
    inherited: Option<&Setting>,
) -> Result<Setting, NothingToSoften> {
    if setting.rule != Rule::default() {
        return Ok(setting);
    }
    match inherited {
        Some(parent) => Ok(Setting {
            rule: parent.rule.clone(),
            why: setting.why.or_else(|| parent.why.clone()),
            ..setting
        }),
        None if setting.severity == Severity::Off => Ok(setting),
        None => Err(NothingToSoften(setting.severity)),
    }
}

/// A setting with only a severity (not `off`) where no included profile sets the key, so
/// there is no rule to judge by.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "severity `{}` alone changes a setting an included profile makes, and no included profile sets this key: give a rule too (equals, min, max, one_of or version)",
    .0.name()
)]
struct NothingToSoften(Severity);

#[derive(Default, Clone)]
pub(super) struct Merged {
    pub(super) name: String,
    pub(super) description: String,
    pub(super) source: String,
    pub(super) chain: Vec<String>,
    pub(super) settings: BTreeMap<Area, BTreeMap<String, Setting>>,
    pub(super) bench: Bench,
    pub(super) job: job::Job,
}

impl Merged {
    /// Takes a parent's settings; keys already present (from earlier parents) are overridden.
    pub(super) fn absorb(&mut self, parent: Merged) {
        for (area, settings) in parent.settings {
            self.settings.entry(area).or_default().extend(settings);
        }
        self.bench = parent.bench.or(std::mem::take(&mut self.bench));
        self.job.absorb(parent.job);
        for name in parent.chain {
            if !self.chain.contains(&name) {
                self.chain.push(name);
            }
        }
        self.description = parent.description;
    }
}
