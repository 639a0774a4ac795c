//! Message sizes as nccl-tests takes them: `-b`/`-e` with K/M/G suffixes that are powers of
//! two, stepped by a factor `-f` or an increment `-i`.

/// Why a size string or a size range was refused; the caller adds the flag's name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum SizeError {
    #[error("`{0}` is not a size (a whole number of bytes, optionally with K, M or G)")]
    Malformed(String),
    #[error("`{0}` is too large")]
    TooLarge(String),
}

/// Parses `8`, `64K`, `1M`, `2G` (also `kb`/`KiB`-style spellings, any case) into bytes.
pub(crate) fn parse_size(text: &str) -> Result<u64, SizeError> {
    let trimmed = text.trim();
    let digits_end = trimmed
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(trimmed.len());
    let (digits, suffix) = trimmed.split_at(digits_end);
    if digits.is_empty() {
        return Err(SizeError::Malformed(text.to_string()));
    }
    let shift = match suffix.to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        _ => return Err(SizeError::Malformed(text.to_string())),
    };
    let value: u64 = digits
        .parse()
        .map_err(|_| SizeError::TooLarge(text.to_string()))?;
    value
        .checked_mul(1u64 << shift)
        .ok_or_else(|| SizeError::TooLarge(text.to_string()))
}

/// How sizes grow from one row to the next.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SizeStep {
    /// Multiply by this (`-f`, at least 2).
    Factor(u64),
    /// Add this many bytes (`-i`, at least 1).
    Increment(u64),
}

/// The sizes of a run, `min` to `max` inclusive. A factor of 1 or increment of 0 would never
/// end, so callers validate the step first; `max < min` gives no sizes.
pub(crate) fn sizes(min: u64, max: u64, step: SizeStep) -> Vec<u64> {
    let mut out = Vec::new();
    let mut size = min;
    while size <= max {
        out.push(size);
        let next = match step {
            SizeStep::Factor(f) => size.checked_mul(f.max(2)),
            SizeStep::Increment(i) => size.checked_add(i.max(1)),
        };
        match next {
            // A zero minimum with a factor would stay at zero: move on to one byte.
            Some(0) => size = 1,
            Some(n) => size = n,
            None => break,
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn size_strings() {
        let ok: &[(&str, u64)] = &[
            ("8", 8),
            ("0", 0),
            ("1K", 1024),
            ("1k", 1024),
            ("64KB", 65536),
            ("1M", 1 << 20),
            ("256MiB", 256 << 20),
            ("2G", 2 << 30),
            (" 16 ", 16),
            ("8b", 8),
        ];
        for (text, want) in ok {
            assert_eq!(parse_size(text), Ok(*want), "{text}");
        }
        let bad = ["", "K", "1T", "-1", "1.5M", "1 M", "0x10", "M1"];
        for text in bad {
            assert!(
                matches!(parse_size(text), Err(SizeError::Malformed(_))),
                "{text}"
            );
        }
        assert!(matches!(
            parse_size("99999999999999999999"),
            Err(SizeError::TooLarge(_))
        ));
        assert!(matches!(
            parse_size("17179869184G"),
            Err(SizeError::TooLarge(_))
        ));
    }

    #[test]
    fn size_sequences() {
        assert_eq!(sizes(8, 64, SizeStep::Factor(2)), [8, 16, 32, 64]);
        assert_eq!(sizes(8, 100, SizeStep::Factor(4)), [8, 32]);
        assert_eq!(sizes(8, 8, SizeStep::Factor(2)), [8]);
        assert_eq!(sizes(16, 8, SizeStep::Factor(2)), Vec::<u64>::new());
        assert_eq!(sizes(0, 4, SizeStep::Factor(2)), [0, 1, 2, 4]);
        assert_eq!(sizes(10, 40, SizeStep::Increment(10)), [10, 20, 30, 40]);
        assert_eq!(
            sizes(u64::MAX - 1, u64::MAX, SizeStep::Factor(2)),
            [u64::MAX - 1]
        );
    }
}
