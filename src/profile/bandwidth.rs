//! Bus-bandwidth thresholds and baselines as `--min-busbw` and `[bench]` write them: a number
//! of GB/s (1e9 bytes/s, nccl-tests' unit), or a percentage of what the path can carry
//! (`"80%"`, resolved against the reference `bench` determines, see `bench::context`); and
//! per-size baselines with a tolerance, the expected figures sites keep per node type (Azure's
//! health checks keep them per SKU; nccl-tests users keep them by hand).

use std::collections::BTreeMap;
use std::fmt;

use serde::Serialize;
use toml::Spanned;

/// The least acceptable average bus bandwidth.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Threshold {
    /// GB/s (1e9 bytes per second).
    Gbps(f64),
    /// A fraction (0.8 for `80%`) of the reference rate of the run.
    Fraction(f64),
}

impl Threshold {
    /// Parses `2.5` (GB/s) or `80%` (of the reference); what is wrong, else.
    pub fn parse(text: &str) -> Result<Threshold, BadThreshold> {
        let t = text.trim();
        match t.strip_suffix('%') {
            Some(p) => parse_percent(p).map(Threshold::Fraction),
            None => t
                .parse::<f64>()
                .ok()
                // The sign bit, not `>= 0`: `-0` is written as a negative and is refused as one.
                .filter(|v| v.is_finite() && v.is_sign_positive())
                .map(Threshold::Gbps)
                .ok_or_else(|| BadThreshold::Gbps(t.to_string())),
        }
    }

    /// A profile value: a number of GB/s or a `"80%"` string.
    pub fn from_toml(value: &toml::Value) -> Result<Threshold, BadThreshold> {
        match value {
            toml::Value::Float(f) => Threshold::parse(&f.to_string()),
            toml::Value::Integer(i) => Threshold::parse(&i.to_string()),
            toml::Value::String(s) => Threshold::parse(s),
            other => Err(BadThreshold::OtherType(other.clone())),
        }
    }

    /// As a profile writes it: `2.5` or `"80%"`.
    pub fn to_toml(self) -> String {
        match self {
            Threshold::Gbps(g) => format!("{g:?}"),
            Threshold::Fraction(f) => format!("\"{}%\"", percent(f)),
        }
    }
}

impl fmt::Display for Threshold {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Threshold::Gbps(g) => write!(f, "{g} GB/s"),
            Threshold::Fraction(x) => write!(f, "{}%", percent(*x)),
        }
    }
}

/// `0.8` as `80`, without float noise (`0.07 * 100` is 7.000000000000001).
pub fn percent(fraction: f64) -> String {
    let p = (fraction * 100.0 * 1e6).round() / 1e6;
    format!("{p}")
}

/// The number of `80%` without its `%`: more than 0 and at most 100, as a fraction.
fn parse_percent(number: &str) -> Result<f64, BadThreshold> {
    let bad = || BadThreshold::Percentage(number.to_string());
    let p: f64 = number.trim().parse().map_err(|_| bad())?;
    if p.is_finite() && p > 0.0 && p <= 100.0 {
        Ok(p / 100.0)
    } else {
        Err(bad())
    }
}

/// Why `--min-busbw` or a `[bench]` threshold is not one; each carries what was written.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum BadThreshold {
    /// Not a number, or a negative, infinite or NaN one (trimmed text).
    #[error("`{0}` is neither a non-negative number of GB/s nor a percentage such as 80%")]
    Gbps(String),
    /// The number before `%`, as written, is not above 0 and at most 100.
    #[error("`{0}%` is not a percentage above 0% and at most 100%")]
    Percentage(String),
    /// A profile value that is neither a number nor a string (a table, a boolean, ...).
    #[error("{0} is not a bandwidth in GB/s nor a percentage such as \"80%\"")]
    OtherType(toml::Value),
}

/// What is wrong in a `[bench.KEY]` baseline table; each carries what was written.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum BadBaseline {
    /// A tolerance string without its `%`.
    #[error("`{0}` is not a percentage such as \"10%\"")]
    ToleranceWithoutPercent(String),
    /// A tolerance that is not a number from 0 to below 100 before its `%`.
    #[error("`{0}` is not a percentage from 0% to below 100%")]
    ToleranceOutOfRange(String),
    #[error("{0} is not a percentage: write it as a string such as \"10%\"")]
    ToleranceNotText(toml::Value),
    /// A key that is neither `tolerance` nor a message size above 0.
    #[error("`{0}` is neither `tolerance` nor a message size such as \"1M\" or \"131072\"")]
    NotASize(String),
    /// Two keys for one size (`"1M"` and `"1024K"`); `first` is the earlier key.
    #[error("`{name}` is the same size ({size} B) as `{first}`")]
    SameSize {
        name: String,
        size: u64,
        first: String,
    },
    /// A size's value that is not a finite number above 0.
    #[error("{0} is not a bus bandwidth in GB/s above 0")]
    NotGbps(toml::Value),
    #[error("missing: say how far below its baseline a size may fall, e.g. tolerance = \"10%\"")]
    NoTolerance,
    #[error("no sizes: add the expected GB/s per size, e.g. \"128M\" = 9.4")]
    NoSizes,
}

/// Expected bus bandwidth per message size, and how far below it a run may fall.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Baseline {
    /// The fraction a size may fall below its baseline (0.1 for `"10%"`) and still pass.
    pub tolerance: f64,
    /// GB/s expected at each size in bytes.
    pub sizes: BTreeMap<u64, f64>,
}

/// A `[bench.baseline]` table as written: each key and value with its place in the file.
pub type RawBaseline = Spanned<BTreeMap<Spanned<String>, Spanned<toml::Value>>>;

impl Baseline {
    /// Validates a table such as `tolerance = "10%"`, `"1M" = 2.1`, `"128M" = 9.4`; an
    /// error carries the byte offset of what is wrong, the key and the problem.
    pub fn from_raw(raw: RawBaseline) -> Result<Baseline, (usize, String, BadBaseline)> {
        let table_at = raw.span().start;
        let mut tolerance = None;
        let mut sizes = BTreeMap::new();
        let mut keys_of_size: BTreeMap<u64, String> = BTreeMap::new();
        // In file order, so a repeated size is reported where it is repeated.
        let mut entries: Vec<_> = raw.into_inner().into_iter().collect();
        entries.sort_by_key(|(key, _)| key.span().start);
        for (key, value) in entries {
            let at = key.span().start;
            let name = key.get_ref().clone();
            if name == "tolerance" {
                let t = match value.get_ref() {
                    toml::Value::String(s) => s
                        .trim()
                        .strip_suffix('%')
                        .ok_or_else(|| BadBaseline::ToleranceWithoutPercent(s.clone()))
                        .and_then(|p| {
                            p.trim()
                                .parse::<f64>()
                                .ok()
                                .filter(|p| p.is_finite() && (0.0..100.0).contains(p))
                                .map(|p| p / 100.0)
                                .ok_or_else(|| BadBaseline::ToleranceOutOfRange(s.clone()))
                        }),
                    other => Err(BadBaseline::ToleranceNotText(other.clone())),
                };
                tolerance = Some(t.map_err(|m| (value.span().start, name.clone(), m))?);
                continue;
            }
            let size = crate::bench::measure::size::parse_size(&name)
                .ok()
                .filter(|s| *s > 0)
                .ok_or_else(|| (at, name.clone(), BadBaseline::NotASize(name.clone())))?;
            if let Some(first) = keys_of_size.insert(size, name.clone()) {
                return Err((
                    at,
                    name.clone(),
                    BadBaseline::SameSize { name, size, first },
                ));
            }
            let gbps = match value.get_ref() {
                toml::Value::Float(f) => Some(*f),
                toml::Value::Integer(i) => Some(*i as f64),
                _ => None,
            }
            .filter(|g| g.is_finite() && *g > 0.0)
            .ok_or_else(|| {
                (
                    value.span().start,
                    name.clone(),
                    BadBaseline::NotGbps(value.get_ref().clone()),
                )
            })?;
            sizes.insert(size, gbps);
        }
        let tolerance = tolerance
            .ok_or_else(|| (table_at, "tolerance".to_string(), BadBaseline::NoTolerance))?;
        if sizes.is_empty() {
            return Err((table_at, "tolerance".to_string(), BadBaseline::NoSizes));
        }
        Ok(Baseline { tolerance, sizes })
    }

    /// The least bus bandwidth that passes at a size with baseline `gbps`.
    pub fn floor(&self, gbps: f64) -> f64 {
        gbps * (1.0 - self.tolerance)
    }

    /// As a profile writes it, under its `[bench.KEY]` header.
    pub fn to_toml(&self, key: &str) -> String {
        let mut out = format!(
            "\n[bench.{key}]\ntolerance = \"{}%\"\n",
            percent(self.tolerance)
        );
        for (size, gbps) in &self.sizes {
            out.push_str(&format!("\"{size}\" = {gbps:?}\n"));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thresholds_are_gbps_or_percentages() {
        let cases: &[(&str, Threshold)] = &[
            ("2.5", Threshold::Gbps(2.5)),
            ("0", Threshold::Gbps(0.0)),
            (" 40 ", Threshold::Gbps(40.0)),
            ("80%", Threshold::Fraction(0.8)),
            ("100%", Threshold::Fraction(1.0)),
            ("7.5%", Threshold::Fraction(0.075)),
        ];
        for (text, want) in cases {
            assert_eq!(Threshold::parse(text), Ok(*want), "{text}");
        }
        for bad in [
            "-1", "NaN", "inf", "0%", "101%", "-5%", "x%", "%", "80 %%", "", "1e400",
        ] {
            assert!(Threshold::parse(bad).is_err(), "{bad}");
        }
        // Negative zero is a negative as written: refused like -1, not shown as -0 GB/s.
        for negative in [" -1 ", "-0", "-0.0", "-0e3"] {
            assert_eq!(
                Threshold::parse(negative),
                Err(BadThreshold::Gbps(negative.trim().into())),
                "{negative}"
            );
        }
        assert_eq!(
            Threshold::from_toml(&toml::Value::Float(-0.0)),
            Err(BadThreshold::Gbps("-0".into()))
        );
        assert_eq!(
            Threshold::parse("x %"),
            Err(BadThreshold::Percentage("x ".into()))
        );
        assert_eq!(
            Threshold::from_toml(&toml::Value::Boolean(true)),
            Err(BadThreshold::OtherType(toml::Value::Boolean(true)))
        );
        assert_eq!(Threshold::Fraction(0.07).to_string(), "7%");
        assert_eq!(Threshold::Fraction(0.8).to_toml(), "\"80%\"");
        assert_eq!(Threshold::Gbps(2.0).to_toml(), "2.0");
    }

    fn baseline(text: &str) -> Result<Baseline, (usize, String, BadBaseline)> {
        #[derive(serde::Deserialize)]
        struct T {
            b: RawBaseline,
        }
        let t: T = toml::from_str(text).unwrap();
        Baseline::from_raw(t.b)
    }

    #[test]
    fn baselines_read_sizes_and_a_tolerance() {
        let b =
            baseline("[b]\ntolerance = \"10%\"\n\"1M\" = 2.1\n\"128M\" = 9\n4096 = 0.5\n").unwrap();
        assert_eq!(b.tolerance, 0.1);
        assert_eq!(
            b.sizes,
            BTreeMap::from([(4096, 0.5), (1 << 20, 2.1), (128 << 20, 9.0)])
        );
        assert!((b.floor(9.0) - 8.1).abs() < 1e-9);
    }

    #[test]
    fn bad_baselines_name_the_key_and_its_place() {
        let cases: &[(&str, &str, &str)] = &[
            ("[b]\n\"1M\" = 2.0\n", "tolerance", "missing"),
            ("[b]\ntolerance = \"10%\"\n", "tolerance", "no sizes"),
            ("[b]\ntolerance = 10\n\"1M\" = 2.0\n", "tolerance", "string"),
            (
                "[b]\ntolerance = \"100%\"\n\"1M\" = 2.0\n",
                "tolerance",
                "below 100%",
            ),
            (
                "[b]\ntolerance = \"ten\"\n\"1M\" = 2.0\n",
                "tolerance",
                "not a percentage",
            ),
            (
                "[b]\ntolerance = \"5%\"\n\"1Q\" = 2.0\n",
                "1Q",
                "message size",
            ),
            (
                "[b]\ntolerance = \"5%\"\n\"0\" = 2.0\n",
                "0",
                "message size",
            ),
            ("[b]\ntolerance = \"5%\"\n\"1M\" = -2.0\n", "1M", "above 0"),
            ("[b]\ntolerance = \"5%\"\n\"1M\" = \"fast\"\n", "1M", "GB/s"),
            (
                "[b]\ntolerance = \"5%\"\n\"1M\" = 2.0\n\"1024K\" = 2.0\n",
                "1024K",
                "same size",
            ),
        ];
        for (text, key, message) in cases {
            let (at, k, m) = baseline(text).unwrap_err();
            assert_eq!(k, *key, "{text}");
            assert!(m.to_string().contains(message), "{text}: {m}");
            assert!(at < text.len(), "{text}");
        }
        // The offset points at the bad line.
        let text = "[b]\ntolerance = \"5%\"\n\"1M\" = -2.0\n";
        let (at, _, _) = baseline(text).unwrap_err();
        assert_eq!(text[..at].matches('\n').count() + 1, 3);
    }
}
