//! A judged value and a rule as JSON values for scripts, beside the text people read:
//! numbers in base units (a key in Mb/s gives bits per second, one in ms gives seconds),
//! `yes`/`no` as booleans, anything else as text.

use serde_json::{Map, Value, json};

use crate::profile::amount::Amount;
use crate::profile::setting::Rule;

/// The factor to base units of a key whose name carries its unit.
fn scale(id: &str) -> Option<f64> {
    let key = id.split(['@']).next().unwrap_or(id);
    let parts: Vec<&str> = key.split('.').collect();
    parts.iter().rev().find_map(|p| {
        if p.ends_with("_mbps") {
            Some(1e6)
        } else if p.ends_with("_ms") {
            Some(1e-3)
        } else {
            None
        }
    })
}

/// A number in base units: integers stay integers, scaled ones become floats when needed.
fn number(n: i128, id: &str) -> Value {
    match scale(id) {
        Some(f) => {
            let v = n as f64 * f;
            if v.fract() == 0.0 && v.abs() < 9.0e15 {
                json!(v as i64)
            } else {
                json!(v)
            }
        }
        None => i64::try_from(n).map_or_else(|_| json!(n as f64), |n| json!(n)),
    }
}

fn amount(a: Amount, id: &str) -> Value {
    match a {
        Amount::Finite(n) => number(n, id),
        Amount::Unlimited => json!("unlimited"),
    }
}

/// A value as the node gave it, typed.
pub(crate) fn value(text: &str, id: &str) -> Option<Value> {
    let text = text.trim();
    if text.is_empty() {
        return None;
    }
    if let Ok(a) = Amount::parse(text) {
        return Some(amount(a, id));
    }
    if let Ok(f) = text.parse::<f64>()
        && f.is_finite()
    {
        return Some(json!(f * scale(id).unwrap_or(1.0)));
    }
    Some(match text.to_ascii_lowercase().as_str() {
        "yes" | "true" => Value::Bool(true),
        "no" | "false" => Value::Bool(false),
        _ => Value::String(text.to_string()),
    })
}

/// A value shown undecorated (one word, or a number), typed; `None` for text that says
/// more than the value (`soft 20000, hard 20000 (this process)`), which only the check
/// that judged it can type.
pub(crate) fn bare(text: &str, id: &str) -> Option<Value> {
    let text = text.trim();
    if text.is_empty() || text.contains(char::is_whitespace) || matches!(text, "-" | "?") {
        return None;
    }
    value(text, id)
}

/// A rule's bounds, typed: `{"min": 16777216}`, `{"one_of": ["madvise", "never"]}`,
/// `{"version": ">=2.14"}`.
pub(crate) fn rule(rule: &Rule, id: &str) -> Option<Value> {
    let mut out = Map::new();
    if let Some(want) = &rule.equals {
        out.insert("equals".into(), value(want, id)?);
    }
    if let Some(min) = rule.min {
        out.insert("min".into(), amount(min, id));
    }
    if let Some(max) = rule.max {
        out.insert("max".into(), amount(max, id));
    }
    if let Some(options) = &rule.one_of {
        let typed: Vec<Value> = options.iter().filter_map(|o| value(o, id)).collect();
        out.insert("one_of".into(), Value::Array(typed));
    }
    if let Some(req) = &rule.version {
        out.insert("version".into(), Value::String(req.to_string()));
    }
    (!out.is_empty()).then_some(Value::Object(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_in_base_units() {
        let cases: &[(&str, &str, Value)] = &[
            ("4194304", "net.core.rmem_max", json!(4194304)),
            ("16M", "net.core.rmem_max", json!(16777216)),
            ("25000", "link.speed_mbps.eth0", json!(25_000_000_000_i64)),
            ("0.5", "peer.rtt_ms", json!(0.0005)),
            ("2", "peer.rtt_ms", json!(0.002)),
            ("unlimited", "ulimit.memlock", json!("unlimited")),
            ("no", "logind.RemoveIPC", json!(false)),
            ("yes", "logind.RemoveIPC", json!(true)),
            ("madvise", "transparent_hugepage.enabled", json!("madvise")),
            ("2.21.5", "nccl.version", json!("2.21.5")),
        ];
        for (text, id, want) in cases {
            assert_eq!(value(text, id).as_ref(), Some(want), "{text} of {id}");
        }
        assert_eq!(value(" ", "x"), None);
        assert_eq!(bare("212992", "net.core.rmem_max"), Some(json!(212992)));
        assert_eq!(bare("always", "t"), Some(json!("always")));
        assert_eq!(
            bare("soft 20000, hard 20000 (this process)", "ulimit.nofile"),
            None
        );
        assert_eq!(bare("-", "t"), None);
    }

    #[test]
    fn rules_as_objects() {
        let r = Rule {
            min: Some(Amount::Finite(10000)),
            max: Some(Amount::Unlimited),
            ..Rule::default()
        };
        assert_eq!(
            rule(&r, "link.speed_mbps.eth0"),
            Some(json!({"min": 10_000_000_000_i64, "max": "unlimited"}))
        );
        let r = Rule {
            one_of: Some(vec!["madvise".into(), "never".into()]),
            ..Rule::default()
        };
        assert_eq!(rule(&r, "t"), Some(json!({"one_of": ["madvise", "never"]})));
        assert_eq!(rule(&Rule::default(), "t"), None);
    }
}
