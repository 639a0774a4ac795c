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
        if let Some(rest) = suffix.strip_prefix('.') {
            let (fraction, unit) = rest.split_at(
                rest.find(|c: char| !c.is_ascii_digit())
                    .unwrap_or(rest.len()),
            );
            return Err(BadAmount::NotWhole {
                text: text.to_string(),
                instead: shift_of(unit).and_then(|shift| in_whole_units(digits, fraction, shift)),
            });
        }
        let Some(shift) = shift_of(suffix) else {
            return Err(BadAmount::UnknownSuffix {
                text: text.to_string(),
                suffix: suffix.to_string(),
            });
        };
        number
            .checked_mul(1i128 << shift)
            .map(Amount::Finite)
            .ok_or_else(|| BadAmount::TooLarge(text.to_string()))
    }
}

/// The power of two a size suffix stands for; `None` for an unknown suffix.
fn shift_of(suffix: &str) -> Option<u32> {
    match suffix.to_ascii_lowercase().as_str() {
        "" | "b" => Some(0),
        "k" | "kib" => Some(10),
        "m" | "mib" => Some(20),
        "g" | "gib" => Some(30),
        "t" | "tib" => Some(40),
        _ => None,
    }
}

/// `WHOLE.FRACTION` times `1 << shift` written in the largest unit that makes it whole
/// (`1.5G` → `1536M`); `None` when it is not a whole number of bytes (`0.3K`).
fn in_whole_units(whole: &str, fraction: &str, shift: u32) -> Option<String> {
    let scale = 10i128.checked_pow(u32::try_from(fraction.len()).ok()?)?;
    let scaled: i128 = format!("{whole}{fraction}").parse().ok()?;
    let scaled_bytes = scaled.checked_mul(1i128 << shift)?;
    (scaled_bytes % scale == 0).then(|| Amount::Finite(scaled_bytes / scale).in_units())
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
    /// A decimal such as `1.5G`: the values an amount sets (sysctls, cgroup and ulimit limits,
    /// ring sizes) are whole numbers, so the profile says exactly which one; `instead` is the
    /// same size in whole units when there is one.
    #[error(
        "`{text}` is not a whole number of units{}",
        .instead.as_ref().map(|whole| format!(" (write {whole})")).unwrap_or_default()
    )]
    NotWhole {
        text: String,
        instead: Option<String>,
    },
    /// More bytes than an `i128` holds.
    #[error("`{0}` is too large")]
    TooLarge(String),
}

impl Amount {
    /// As a profile, `mount -o size=` or `docker --shm-size` takes it: the largest unit that
    /// keeps it whole (`1536M`, `8G`, `100`), or `unlimited`.
    pub(crate) fn in_units(self) -> String {
        let Amount::Finite(n) = self else {
            return "unlimited".into();
        };
        [(40, "T"), (30, "G"), (20, "M"), (10, "K")]
            .into_iter()
            .find(|&(shift, _)| n != 0 && n % (1i128 << shift) == 0)
            .map_or_else(
                || n.to_string(),
                |(shift, unit)| format!("{}{unit}", n / (1i128 << shift)),
            )
    }
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
    fn amounts_are_written_in_the_largest_unit_that_keeps_them_whole() {
        // What `mount -o size=` and docker's --shm-size take: no decimals, no `B`.
        let cases = [
            (Amount::Finite(1536 << 20), "1536M"),
            (Amount::Finite(8 << 30), "8G"),
            (Amount::Finite(64 << 20), "64M"),
            (Amount::Finite(100), "100"),
            (Amount::Finite(0), "0"),
            (Amount::Finite(-1), "-1"),
            (Amount::Unlimited, "unlimited"),
        ];
        crate::testing::assert_cases(cases, Amount::in_units);
    }

    fn not_whole(text: &str, instead: Option<&str>) -> BadAmount {
        BadAmount::NotWhole {
            text: text.into(),
            instead: instead.map(Into::into),
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
            ("1.5G", not_whole("1.5G", Some("1536M"))),
            ("1.0g", not_whole("1.0g", Some("1G"))),
            ("0.25KiB", not_whole("0.25KiB", Some("256"))),
            ("-2.5M", not_whole("-2.5M", Some("-2560K"))),
            ("1.5", not_whole("1.5", None)),
            ("0.3K", not_whole("0.3K", None)),
            ("1.5MB", not_whole("1.5MB", None)),
        ];
        for (text, want) in cases {
            assert_eq!(Amount::parse(text), Err(want), "{text:?}");
        }
        assert_eq!(
            Amount::parse("1.5G").unwrap_err().to_string(),
            "`1.5G` is not a whole number of units (write 1536M)"
        );
        assert_eq!(
            Amount::parse("1.5").unwrap_err().to_string(),
            "`1.5` is not a whole number of units"
        );
    }

    #[test]
    fn unlimited_is_larger_than_any_number() {
        assert!(Amount::Unlimited > Amount::Finite(i128::MAX));
        assert!(Amount::Finite(1) < Amount::Finite(2));
    }
}
