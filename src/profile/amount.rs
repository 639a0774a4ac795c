//! Numbers as profiles and the kernel write them: plain integers, sizes with binary
//! suffixes (`64M`, `1GiB`) and `unlimited`.

use std::cmp::Ordering;
use std::fmt;

/// A quantity that may be unbounded (`ulimit` and cgroup `max`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Amount {
    Finite(i128),
    Unlimited,
}

impl Amount {
    /// Parses `16777216`, `-1`, `64M`, `64MiB`, `1g`, `unlimited`, `infinity` or `max`.
    /// Suffixes are powers of two (K = 1024), as in nccl-tests and ulimit.
    pub(crate) fn parse(text: &str) -> Result<Amount, BadAmount> {
        let t = text.trim();
        if matches!(
            t.to_ascii_lowercase().as_str(),
            "unlimited" | "infinity" | "max"
        ) {
            return Ok(Amount::Unlimited);
        }
        let split = t
            .find(|c: char| !(c.is_ascii_digit() || c == '-' || c == '+'))
            .unwrap_or(t.len());
        let (digits, suffix) = t.split_at(split);
        let number: i128 = digits
            .parse()
            .map_err(|_| BadAmount::NotANumber(text.to_string()))?;
        let shift = match suffix.to_ascii_lowercase().as_str() {
            "" | "b" => 0,
            "k" | "kib" => 10,
            "m" | "mib" => 20,
            "g" | "gib" => 30,
            "t" | "tib" => 40,
            _ => {
                return Err(BadAmount::UnknownSuffix {
                    text: text.to_string(),
                    suffix: suffix.to_string(),
                });
            }
        };
        number
            .checked_mul(1i128 << shift)
            .map(Amount::Finite)
            .ok_or_else(|| BadAmount::TooLarge(text.to_string()))
    }
}

/// Why a profile's or the kernel's text is not an [`Amount`]; each carries the text as given.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum BadAmount {
    #[error("`{0}` is not a number or size (examples: 4096, 64M, 1GiB, unlimited)")]
    NotANumber(String),
    #[error(
        "`{text}` has an unknown size suffix `{suffix}` (use K, M, G, T or KiB, MiB, GiB, TiB)"
    )]
    UnknownSuffix { text: String, suffix: String },
    /// More bytes than an `i128` holds.
    #[error("`{0}` is too large")]
    TooLarge(String),
}

impl PartialOrd for Amount {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Amount {
    fn cmp(&self, other: &Self) -> Ordering {
        match (self, other) {
            (Amount::Finite(a), Amount::Finite(b)) => a.cmp(b),
            (Amount::Finite(_), Amount::Unlimited) => Ordering::Less,
            (Amount::Unlimited, Amount::Finite(_)) => Ordering::Greater,
            (Amount::Unlimited, Amount::Unlimited) => Ordering::Equal,
        }
    }
}

impl fmt::Display for Amount {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Amount::Finite(n) => write!(f, "{n}"),
            Amount::Unlimited => f.write_str("unlimited"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    macro_rules! parses {
        ($($text:expr => $want:expr),* $(,)?) => {$(
            assert_eq!(Amount::parse($text), Ok($want), "parsing {:?}", $text);
        )*};
    }

    #[test]
    fn valid_amounts() {
        parses! {
            "16777216" => Amount::Finite(16777216),
            " 10\n" => Amount::Finite(10),
            "-1" => Amount::Finite(-1),
            "64M" => Amount::Finite(64 << 20),
            "64MiB" => Amount::Finite(64 << 20),
            "1g" => Amount::Finite(1 << 30),
            "8K" => Amount::Finite(8192),
            "2T" => Amount::Finite(2 << 40),
            "unlimited" => Amount::Unlimited,
            "max" => Amount::Unlimited,
            "infinity" => Amount::Unlimited,
        }
    }

    #[test]
    fn malformed_amounts() {
        for text in [
            "",
            "lots",
            "1.5G",
            "12MB",
            "64 M",
            "1Q",
            "99999999999999999999999999999999999999999G",
        ] {
            assert!(Amount::parse(text).is_err(), "{text:?} should not parse");
        }
    }

    #[test]
    fn malformed_amounts_say_what_is_wrong() {
        let too_large = format!("{}T", i128::MAX);
        let cases = [
            ("lots", BadAmount::NotANumber("lots".into())),
            (
                " 12MB",
                BadAmount::UnknownSuffix {
                    text: " 12MB".into(),
                    suffix: "MB".into(),
                },
            ),
            (&too_large, BadAmount::TooLarge(too_large.clone())),
        ];
        for (text, want) in cases {
            assert_eq!(Amount::parse(text), Err(want), "{text:?}");
        }
    }

    #[test]
    fn unlimited_is_larger_than_any_number() {
        assert!(Amount::Unlimited > Amount::Finite(i128::MAX));
        assert!(Amount::Finite(1) < Amount::Finite(2));
    }
}
