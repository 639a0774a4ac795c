//! Validating a profile's settings: every key known to its area, every rule's value of the
//! kind the key takes.

use super::amount::BadAmount;
use super::version::BadRequirement;
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
) -> Result<Setting, SettingError> {
    let Some(spec) = keys.iter().find(|s| s.matches(key)) else {
        let known: Vec<&'static str> = keys.iter().map(|s| s.key).collect();
        return Err(if known.is_empty() {
            SettingError::NoChecks(area)
        } else {
            SettingError::UnknownKey {
                area,
                closest: super::suggest::closest(key, known.iter().copied()),
                known,
            }
        });
    };
    let raw: RawSetting = value
        .get_ref()
        .clone()
        .try_into()
        .map_err(|e: toml::de::Error| SettingError::NotASetting(e.message().trim().to_string()))?;
    let severity = match raw.severity.as_deref() {
        None | Some("fail") => Severity::Fail,
        Some("warn") => Severity::Warn,
        Some("off") => Severity::Off,
        Some(other) => return Err(SettingError::BadSeverity(other.to_string())),
    };
    let kind_name = match spec.kind {
        ValueKind::Number => "a number",
        ValueKind::Text => "text",
        ValueKind::Version => "a version",
    };
    let not_for = |rule: &'static str| {
        Err(SettingError::NotFor {
            rule,
            holds: kind_name,
        })
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
                return Err(SettingError::VersionOnly);
            }
            rule.version = raw.version.as_deref().map(VersionReq::parse).transpose()?;
        }
    }
    if rule == Rule::default() {
        // `{ severity = "warn" }` alone softens (or turns off) what an included profile
        // sets: the rule comes from there when the includes are merged.
        if raw.severity.is_none() {
            return Err(SettingError::NoRule);
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
                return Err(SettingError::NotWordOrCount {
                    value: value.clone(),
                    word,
                });
            }
        }
    }
    if rule.one_of.as_ref().is_some_and(Vec::is_empty) {
        return Err(SettingError::EmptyOneOf);
    }
    if let (Some(min), Some(max)) = (rule.min, rule.max)
        && min > max
    {
        return Err(SettingError::MinAboveMax { min, max });
    }
    // A rule no value can meet would let apply set and "verify" a value audit then fails.
    let candidates = rule.equals.iter().chain(rule.one_of.iter().flatten());
    for value in candidates {
        if rule.judge(value) != setting::Verdict::Met {
            return Err(SettingError::Unmeetable {
                value: value.clone(),
                rule: rule.describe(),
            });
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

pub(super) fn amount(value: &toml::Value) -> Result<Amount, BadValue> {
    match value {
        toml::Value::Integer(n) => Ok(Amount::Finite(*n as i128)),
        toml::Value::String(s) => Ok(Amount::parse(s)?),
        other => Err(BadValue::NotAmount(other.type_str())),
    }
}

pub(super) fn number_text(value: &toml::Value) -> Result<String, BadValue> {
    amount(value).map(|a| a.to_string())
}

pub(super) fn text(value: &toml::Value) -> Result<String, BadValue> {
    match value {
        toml::Value::String(s) => Ok(s.clone()),
        // Keys that take a word or a count (`ring.rx = "max"` or `4096`).
        toml::Value::Integer(n) if *n >= 0 => Ok(n.to_string()),
        other => Err(BadValue::NotText(other.type_str())),
    }
}

/// A rule's value that is not of the kind its key holds; the TOML type found is named.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(super) enum BadValue {
    #[error(transparent)]
    Amount(#[from] BadAmount),
    #[error("expected a number or size, found {0}")]
    NotAmount(&'static str),
    #[error("expected text, found {0}")]
    NotText(&'static str),
}

/// Why a setting cannot be used; the caller names the file, line and key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(super) enum SettingError {
    #[error("unknown key: this version has no checks in [{0}] yet")]
    NoChecks(Area),
    #[error(
        "unknown key ({}known in [{area}]: {})",
        closest.map_or(String::new(), |c| format!("did you mean `{c}`? ")),
        known.join(", ")
    )]
    UnknownKey {
        area: Area,
        closest: Option<&'static str>,
        known: Vec<&'static str>,
    },
    /// Not a table of the rule fields (TOML's message, trimmed).
    #[error("{0} (a setting looks like {{ min = 16777216, severity = \"warn\" }})")]
    NotASetting(String),
    #[error("severity `{0}` is not `fail`, `warn` or `off`")]
    BadSeverity(String),
    /// A rule field the key's kind does not take (`min` on a text key).
    #[error("`{rule}` does not apply to this key, which holds {holds}")]
    NotFor {
        rule: &'static str,
        holds: &'static str,
    },
    #[error("this key holds a version: use `version = \">=X.Y\"`")]
    VersionOnly,
    #[error(transparent)]
    Value(#[from] BadValue),
    #[error(transparent)]
    Version(#[from] BadRequirement),
    #[error(
        "no rule: give one of equals, min, max, one_of or version (or only a severity, to change an included profile's setting)"
    )]
    NoRule,
    #[error(
        "`{value}` is neither `{word}` nor a count (e.g. equals = \"{word}\" or equals = 4096)"
    )]
    NotWordOrCount { value: String, word: &'static str },
    #[error("`one_of` is empty")]
    EmptyOneOf,
    #[error("min {min} is above max {max}")]
    MinAboveMax { min: Amount, max: Amount },
    /// A value `equals` or `one_of` allows that the rest of the rule refuses, so nothing passes.
    #[error("`{value}` does not meet the rest of the rule ({rule}): no value could pass")]
    Unmeetable { value: String, rule: String },
}

/// 1-based line of a byte offset.
pub(super) fn line_of(text: &str, offset: usize) -> usize {
    text[..offset.min(text.len())].matches('\n').count() + 1
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEYS: &[KeySpec] = &[
        KeySpec {
            key: "rmem_max",
            kind: ValueKind::Number,
            why: "",
        },
        KeySpec {
            key: "thp",
            kind: ValueKind::Text,
            why: "",
        },
        KeySpec {
            key: "nccl",
            kind: ValueKind::Version,
            why: "",
        },
    ];

    fn parse(key: &str, setting: &str, keys: &[KeySpec]) -> Result<Setting, SettingError> {
        #[derive(Deserialize)]
        struct One {
            v: Spanned<toml::Value>,
        }
        let one: One = toml::from_str(&format!("v = {setting}")).unwrap();
        parse_setting(Area::Network, key, &one.v, keys)
    }

    #[test]
    fn each_refusal_says_what_is_wrong() {
        use SettingError::*;
        let cases = [
            (
                "rmem_mx",
                "{ min = 1 }",
                KEYS,
                UnknownKey {
                    area: Area::Network,
                    closest: Some("rmem_max"),
                    known: vec!["rmem_max", "thp", "nccl"],
                },
            ),
            ("rmem_max", "{ min = 1 }", &[][..], NoChecks(Area::Network)),
            (
                "rmem_max",
                "{ min = 1, severity = \"loud\" }",
                KEYS,
                BadSeverity("loud".into()),
            ),
            (
                "thp",
                "{ max = 1 }",
                KEYS,
                NotFor {
                    rule: "max",
                    holds: "text",
                },
            ),
            (
                "rmem_max",
                "{ version = \"1\" }",
                KEYS,
                NotFor {
                    rule: "version",
                    holds: "a number",
                },
            ),
            ("nccl", "{ equals = \"2\" }", KEYS, VersionOnly),
            (
                "rmem_max",
                "{ min = true }",
                KEYS,
                Value(BadValue::NotAmount("boolean")),
            ),
            (
                "thp",
                "{ equals = 1.5 }",
                KEYS,
                Value(BadValue::NotText("float")),
            ),
            ("rmem_max", "{ why = \"x\" }", KEYS, NoRule),
            ("rmem_max", "{ one_of = [] }", KEYS, EmptyOneOf),
            (
                "rmem_max",
                "{ min = \"2K\", max = 1 }",
                KEYS,
                MinAboveMax {
                    min: Amount::Finite(2048),
                    max: Amount::Finite(1),
                },
            ),
            (
                "rmem_max",
                "{ equals = 5, min = 10 }",
                KEYS,
                Unmeetable {
                    value: "5".into(),
                    rule: "= 5 and >= 10".into(),
                },
            ),
        ];
        for (key, setting, keys, want) in cases {
            assert_eq!(parse(key, setting, keys), Err(want), "{key} = {setting}");
        }
        assert!(matches!(
            parse("rmem_max", "{ min = \"12MB\" }", KEYS),
            Err(Value(BadValue::Amount(BadAmount::UnknownSuffix { .. })))
        ));
        assert!(matches!(
            parse("nccl", "{ version = \"latest\" }", KEYS),
            Err(Version(_))
        ));
        assert!(matches!(parse("rmem_max", "5", KEYS), Err(NotASetting(_))));
    }
}
