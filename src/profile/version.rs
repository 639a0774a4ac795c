//! Version requirements such as `">=2.14"` or `">=11.8, <13"`, judged on dotted numbers
//! (`535.104.05`, `12.4`, `2.21.5`); the numbers themselves are [`Version`], read from the host.

use std::fmt;

pub(crate) use crate::host::version::Version;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Ge,
    Gt,
    Le,
    Lt,
    Eq,
}

/// One or more comparisons, all of which must hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VersionReq {
    text: String,
    terms: Vec<(Op, Version)>,
}

impl VersionReq {
    pub(crate) fn parse(text: &str) -> Result<VersionReq, BadRequirement> {
        let mut terms = Vec::new();
        for term in text.split(',') {
            let term = term.trim();
            let (op, rest) = [
                (">=", Op::Ge),
                ("<=", Op::Le),
                ("==", Op::Eq),
                (">", Op::Gt),
                ("<", Op::Lt),
                ("=", Op::Eq),
            ]
            .into_iter()
            .find_map(|(sym, op)| term.strip_prefix(sym).map(|rest| (op, rest)))
            .unwrap_or((Op::Ge, term));
            let version = Version::parse(rest)
                .filter(|_| rest.trim().chars().all(|c| c.is_ascii_digit() || c == '.'))
                .ok_or_else(|| BadRequirement(text.to_string()))?;
            terms.push((op, version));
        }
        Ok(VersionReq {
            text: text.trim().to_string(),
            terms,
        })
    }

    pub(crate) fn matches(&self, version: &Version) -> bool {
        self.terms.iter().all(|(op, want)| {
            let o = version.cmp(want);
            match op {
                Op::Ge => o.is_ge(),
                Op::Gt => o.is_gt(),
                Op::Le => o.is_le(),
                Op::Lt => o.is_lt(),
                Op::Eq => o.is_eq(),
            }
        })
    }
}

/// A requirement (the whole text as written) with a term that is not an operator and a
/// dotted number.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is not a version requirement (examples: \">=2.14\", \">=11.8, <13\")")]
pub(crate) struct BadRequirement(String);

impl fmt::Display for VersionReq {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(text: &str) -> Version {
        Version::parse(text).unwrap()
    }

    #[test]
    fn requirements() {
        let cases = [
            (">=2.14", "2.14.3", true),
            (">=2.14", "2.13.4", false),
            ("2.14", "2.18", true),
            (">=11.8, <13", "12.4", true),
            (">=11.8, <13", "13.0", false),
            ("==535.104.05", "535.104.5", true),
            ("<470", "470.1", false),
        ];
        for (req, version, want) in cases {
            assert_eq!(
                VersionReq::parse(req).unwrap().matches(&v(version)),
                want,
                "{req} vs {version}"
            );
        }
    }

    #[test]
    fn malformed_requirements() {
        for text in ["", ">=", "~2.14", ">=2.x", "latest"] {
            assert!(VersionReq::parse(text).is_err(), "{text:?}");
        }
    }
}
