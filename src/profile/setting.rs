//! One profile setting: how a fact is judged (exact, minimum, maximum, one of, version) and
//! how much a mismatch matters.

use std::fmt::Write as _;

use super::amount::Amount;
use super::version::{Version, VersionReq};
use crate::finding::Status;

/// What kind of value a key holds, which decides the rules it may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValueKind {
    /// Integers and sizes: `equals`, `min`, `max`, `one_of`.
    Number,
    /// Words such as `madvise`: `equals`, `one_of`.
    Text,
    /// Dotted versions: `version`.
    Version,
}

/// A key an area's checks understand, with the reason it matters (shown in findings).
/// A key ending in `.*` is a family: `firmware.*` takes `firmware.mlx5_core`.
#[derive(Debug, Clone, Copy)]
pub struct KeySpec {
    pub key: &'static str,
    pub kind: ValueKind,
    pub why: &'static str,
}

impl KeySpec {
    /// Whether a profile key is this one, or a member of this family.
    pub(crate) fn matches(&self, key: &str) -> bool {
        match self.key.strip_suffix('*') {
            Some(prefix) => key.len() > prefix.len() && key.starts_with(prefix),
            None => self.key == key,
        }
    }
}

/// How much a miss matters. `Off` lets a site profile turn off a check it inherits: the
/// check is reported as a skip naming the profile, and apply leaves it alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Fail,
    Warn,
    Off,
}

impl Severity {
    /// The status a check gets when the node does not meet the setting.
    pub(crate) fn status(self) -> Status {
        match self {
            Severity::Fail => Status::Fail,
            Severity::Warn => Status::Warn,
            Severity::Off => Status::Skip,
        }
    }

    /// The word a profile writes: `fail`, `warn` or `off`.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Severity::Fail => "fail",
            Severity::Warn => "warn",
            Severity::Off => "off",
        }
    }
}

/// How a fact is judged. Every rule present must hold.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Rule {
    pub equals: Option<String>,
    pub min: Option<Amount>,
    pub max: Option<Amount>,
    pub one_of: Option<Vec<String>>,
    pub version: Option<VersionReq>,
}

/// Whether a fact meets a rule, or why it cannot be judged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Verdict {
    Met,
    NotMet,
    /// The actual value is not of the kind the rule needs (e.g. text where a number was due).
    Unjudgeable(String),
}

impl Rule {
    /// Judges `actual` (as read from the node) against every rule present.
    pub(crate) fn judge(&self, actual: &str) -> Verdict {
        let actual = actual.trim();
        let mut met = true;
        if let Some(want) = &self.equals {
            met &= values_equal(want, actual);
        }
        if let Some(options) = &self.one_of {
            met &= options.iter().any(|o| values_equal(o, actual));
        }
        if self.min.is_some() || self.max.is_some() {
            let Ok(value) = Amount::parse(actual) else {
                return Verdict::Unjudgeable(format!("`{actual}` is not a number"));
            };
            met &= self.min.is_none_or(|min| value >= min);
            met &= self.max.is_none_or(|max| value <= max);
        }
        if let Some(req) = &self.version {
            let Some(version) = Version::parse(actual) else {
                return Verdict::Unjudgeable(format!("`{actual}` is not a version"));
            };
            met &= req.matches(&version);
        }
        if met { Verdict::Met } else { Verdict::NotMet }
    }

    /// The value to set so the rule holds, when one value is implied: the exact value, the
    /// first option, or the bound the current value is on the wrong side of.
    pub(crate) fn target(&self, actual: &str) -> Option<String> {
        if let Some(want) = &self.equals {
            return Some(want.clone());
        }
        if let Some(first) = self.one_of.as_ref().and_then(|o| o.first()) {
            return Some(first.clone());
        }
        let current = Amount::parse(actual).ok();
        if let Some(min) = self.min
            && current.is_none_or(|c| c < min)
        {
            return Some(min.to_string());
        }
        if let Some(max) = self.max
            && current.is_none_or(|c| c > max)
        {
            return Some(max.to_string());
        }
        None
    }

    /// The rule as people read it: `>= 16777216`, `one of madvise, never`, `>=2.14`.
    pub(crate) fn describe(&self) -> String {
        let mut parts = Vec::new();
        if let Some(want) = &self.equals {
            parts.push(format!("= {want}"));
        }
        if let Some(options) = &self.one_of {
            parts.push(format!("one of {}", options.join(", ")));
        }
        match (self.min, self.max) {
            (Some(min), Some(max)) => parts.push(format!("{min}..{max}")),
            (Some(min), None) => parts.push(format!(">= {min}")),
            (None, Some(max)) => parts.push(format!("<= {max}")),
            (None, None) => {}
        }
        if let Some(req) = &self.version {
            parts.push(format!("version {req}"));
        }
        parts.join(" and ")
    }

    /// The rule as TOML inline-table fields, for `gputune profiles show`.
    pub(crate) fn to_toml_fields(&self) -> String {
        let mut out = String::new();
        let quote = |s: &str| toml::Value::String(s.to_string()).to_string();
        let amount = |a: Amount| match a {
            Amount::Finite(n) => n.to_string(),
            Amount::Unlimited => quote("unlimited"),
        };
        if let Some(want) = &self.equals {
            let value = match want.parse::<i64>() {
                Ok(n) => n.to_string(),
                Err(_) => quote(want),
            };
            let _ = write!(out, "equals = {value}, ");
        }
        if let Some(min) = self.min {
            let _ = write!(out, "min = {}, ", amount(min));
        }
        if let Some(max) = self.max {
            let _ = write!(out, "max = {}, ", amount(max));
        }
        if let Some(options) = &self.one_of {
            let items: Vec<String> = options.iter().map(|o| quote(o)).collect();
            let _ = write!(out, "one_of = [{}], ", items.join(", "));
        }
        if let Some(req) = &self.version {
            let _ = write!(out, "version = {}, ", quote(&req.to_string()));
        }
        out
    }
}

/// Numbers compare as numbers (`"0"` == `" 0\n"`); anything else compares word by word.
fn values_equal(want: &str, actual: &str) -> bool {
    match (Amount::parse(want), Amount::parse(actual)) {
        (Ok(a), Ok(b)) => a == b,
        _ => crate::host::sysctl::normalize(want) == crate::host::sysctl::normalize(actual),
    }
}

/// A resolved setting with the place it was defined, so messages and `profiles show` can
/// point to it.
#[derive(Debug, Clone, PartialEq)]
pub struct Setting {
    pub rule: Rule,
    pub severity: Severity,
    /// The profile's own reason, overriding the check's built-in one.
    pub why: Option<String>,
    /// `file:line` where the setting was written.
    pub origin: String,
    /// The profile that wrote it (for "turned off by profile X").
    pub set_by: String,
}

impl Setting {
    /// The status for `actual`, and a note when it cannot be judged.
    pub(crate) fn status_for(&self, actual: &str) -> (Status, Option<String>) {
        match self.rule.judge(actual) {
            Verdict::Met => (Status::Pass, None),
            Verdict::NotMet => (self.severity.status(), None),
            Verdict::Unjudgeable(why) => (Status::Error, Some(why)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn min(n: i128) -> Rule {
        Rule {
            min: Some(Amount::Finite(n)),
            ..Rule::default()
        }
    }

    #[test]
    fn judging() {
        let one_of = Rule {
            one_of: Some(vec!["madvise".into(), "never".into()]),
            ..Rule::default()
        };
        let equals = Rule {
            equals: Some("1".into()),
            ..Rule::default()
        };
        let range = Rule {
            min: Some(Amount::Finite(1)),
            max: Some(Amount::Finite(10)),
            ..Rule::default()
        };
        let version = Rule {
            version: Some(VersionReq::parse(">=2.14").unwrap()),
            ..Rule::default()
        };
        let cases: &[(&Rule, &str, Verdict)] = &[
            (&min(16777216), "16777216", Verdict::Met),
            (&min(16777216), "212992", Verdict::NotMet),
            (&min(100), "unlimited", Verdict::Met),
            (
                &min(100),
                "lots",
                Verdict::Unjudgeable("`lots` is not a number".into()),
            ),
            (&one_of, "madvise", Verdict::Met),
            (&one_of, "always", Verdict::NotMet),
            (&equals, "1\n", Verdict::Met),
            (&equals, "0", Verdict::NotMet),
            (&range, "10", Verdict::Met),
            (&range, "60", Verdict::NotMet),
            (&version, "2.21.5", Verdict::Met),
            (&version, "2.12.12", Verdict::NotMet),
            (
                &version,
                "none",
                Verdict::Unjudgeable("`none` is not a version".into()),
            ),
        ];
        for (rule, actual, want) in cases {
            assert_eq!(
                &rule.judge(actual),
                want,
                "{} vs {actual:?}",
                rule.describe()
            );
        }
    }

    #[test]
    fn targets() {
        assert_eq!(min(16).target("4").as_deref(), Some("16"));
        assert_eq!(min(16).target("32"), None);
        assert_eq!(min(16).target("16"), None, "on the bound is right");
        let max = Rule {
            max: Some(Amount::Finite(10)),
            ..Rule::default()
        };
        assert_eq!(max.target("60").as_deref(), Some("10"));
        assert_eq!(max.target("10"), None, "on the bound is right");
        let one_of = Rule {
            one_of: Some(vec!["madvise".into(), "never".into()]),
            ..Rule::default()
        };
        assert_eq!(one_of.target("always").as_deref(), Some("madvise"));
    }

    #[test]
    fn descriptions() {
        assert_eq!(min(16777216).describe(), ">= 16777216");
        let both = Rule {
            equals: Some("0".into()),
            max: Some(Amount::Finite(3)),
            ..Rule::default()
        };
        assert_eq!(both.describe(), "= 0 and <= 3");
    }

    #[test]
    fn a_family_key_takes_its_members_and_nothing_else() {
        let family = KeySpec {
            key: "firmware.*",
            kind: ValueKind::Version,
            why: "",
        };
        assert!(family.matches("firmware.mlx5_core"));
        assert!(!family.matches("firmware."), "no member named");
        assert!(!family.matches("firmware"));
        assert!(!family.matches("driver.mlx5_core"));
        let plain = KeySpec {
            key: "vm.swappiness",
            kind: ValueKind::Number,
            why: "",
        };
        assert!(plain.matches("vm.swappiness"));
        assert!(!plain.matches("vm.swappines"));
    }

    #[test]
    fn numbers_equal_as_numbers_words_as_words() {
        let equals = |want: &str| Rule {
            equals: Some(want.into()),
            ..Rule::default()
        };
        assert_eq!(equals("16M").judge("16777216"), Verdict::Met);
        assert_eq!(equals("0").judge("00\n"), Verdict::Met);
        assert_eq!(equals("madvise").judge(" madvise\n"), Verdict::Met);
        assert_eq!(equals("16M").judge("16"), Verdict::NotMet);
    }
}
