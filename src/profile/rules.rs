//! Validating a profile's settings: every key known to its area, every rule's value of the
//! kind the key takes.

use super::*;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSetting {
    pub(super) equals: Option<toml::Value>,
    pub(super) min: Option<toml::Value>,
    pub(super) max: Option<toml::Value>,
    pub(super) one_of: Option<Vec<toml::Value>>,
    pub(super) version: Option<String>,
    pub(super) severity: Option<String>,
    pub(super) why: Option<String>,
}

pub(super) fn parse_setting(
    area: Area,
    key: &str,
    value: &Spanned<toml::Value>,
    keys: &[KeySpec],
) -> Result<Setting, String> {
    let Some(spec) = keys.iter().find(|s| s.matches(key)) else {
        let known: Vec<&str> = keys.iter().map(|s| s.key).collect();
        return Err(if known.is_empty() {
            format!("unknown key: this version has no checks in [{area}] yet")
        } else {
            let hint = super::suggest::closest(key, known.iter().copied())
                .map_or(String::new(), |c| format!("did you mean `{c}`? "));
            format!(
                "unknown key ({hint}known in [{area}]: {})",
                known.join(", ")
            )
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
        Some("off") => Severity::Off,
        Some(other) => {
            return Err(format!("severity `{other}` is not `fail`, `warn` or `off`"));
        }
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
            // A number is stored in its plain form (`16M` becomes 16777216).
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
        // `{ severity = "warn" }` alone softens (or turns off) what an included profile
        // sets: the rule comes from there when the includes are merged.
        if raw.severity.is_none() {
            return Err(
                "no rule: give one of equals, min, max, one_of or version (or only a severity, to change an included profile's setting)"
                    .into(),
            );
        }
        return Ok(Setting {
            rule,
            severity,
            why: raw.why,
            origin: String::new(),
            set_by: String::new(),
        });
    }
    if let Some((_, word)) = WORD_OR_COUNT.iter().find(|(k, _)| *k == key) {
        for value in rule.equals.iter().chain(rule.one_of.iter().flatten()) {
            if value != word && value.parse::<u32>().is_err() {
                return Err(format!(
                    "`{value}` is neither `{word}` nor a count (e.g. equals = \"{word}\" or equals = 4096)"
                ));
            }
        }
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
        set_by: String::new(),
    })
}

/// Text keys that take one word or a count: the NIC ring sizes (`max`: the NIC's maximum)
/// and queue count (`local_cpus`: one per CPU of the NIC's NUMA node).
const WORD_OR_COUNT: &[(&str, &str)] = &[
    ("ring.rx", "max"),
    ("ring.tx", "max"),
    ("channels.combined", "local_cpus"),
];

pub(super) fn amount(value: &toml::Value) -> Result<Amount, String> {
    match value {
        toml::Value::Integer(n) => Ok(Amount::Finite(*n as i128)),
        toml::Value::String(s) => Amount::parse(s),
        other => Err(format!(
            "expected a number or size, found {}",
            other.type_str()
        )),
    }
}

pub(super) fn number_text(value: &toml::Value) -> Result<String, String> {
    amount(value).map(|a| a.to_string())
}

pub(super) fn text(value: &toml::Value) -> Result<String, String> {
    match value {
        toml::Value::String(s) => Ok(s.clone()),
        // Keys that take a word or a count (`ring.rx = "max"` or `4096`).
        toml::Value::Integer(n) if *n >= 0 => Ok(n.to_string()),
        other => Err(format!("expected text, found {}", other.type_str())),
    }
}

/// 1-based line of a byte offset.
pub(super) fn line_of(text: &str, offset: usize) -> usize {
    text[..offset.min(text.len())].matches('\n').count() + 1
}
