//! Dotted version numbers as hosts report them (`535.104.05`, `12.4`, `2.21.5+cuda12.2`):
//! read below every layer that compares them, so the host readers (torch's driver table)
//! need nothing from the profile.

use std::cmp::Ordering;
use std::fmt;

/// A dotted version; missing trailing parts count as zero (`2.14` == `2.14.0`).
#[derive(Debug, Clone)]
pub(crate) struct Version(pub Vec<u64>);

impl PartialEq for Version {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other).is_eq()
    }
}

impl Eq for Version {}

impl Version {
    /// Parses the leading dotted number of `text` (`"535.104.05"`, `"2.21.5+cuda12.2"`).
    pub(crate) fn parse(text: &str) -> Option<Version> {
        let t = text.trim().trim_start_matches('v');
        let end = t
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(t.len());
        let parts: Option<Vec<u64>> = t[..end]
            .trim_end_matches('.')
            .split('.')
            .map(|p| p.parse().ok())
            .collect();
        parts.filter(|p| !p.is_empty()).map(Version)
    }
}

impl Ord for Version {
    fn cmp(&self, other: &Self) -> Ordering {
        let len = self.0.len().max(other.0.len());
        (0..len)
            .map(|i| {
                let a = self.0.get(i).copied().unwrap_or(0);
                let b = other.0.get(i).copied().unwrap_or(0);
                a.cmp(&b)
            })
            .find(|o| o.is_ne())
            .unwrap_or(Ordering::Equal)
    }
}

impl PartialOrd for Version {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self.0.iter().map(u64::to_string).collect();
        f.write_str(&parts.join("."))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(text: &str) -> Version {
        Version::parse(text).unwrap()
    }

    #[test]
    fn versions_parse_and_order() {
        assert_eq!(v("535.104.05"), Version(vec![535, 104, 5]));
        assert_eq!(v("2.21.5+cuda12.2"), Version(vec![2, 21, 5]));
        assert_eq!(v("v12.4"), Version(vec![12, 4]));
        assert!(v("2.14") == v("2.14.0"));
        assert!(v("2.9") < v("2.14"));
        assert!(Version::parse("abc").is_none());
        assert!(Version::parse("").is_none());
    }
}
