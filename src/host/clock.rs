//! Calendar dates from seconds since the epoch, UTC, for the few timestamps gputune prints
//! (the journal's, an Xid's, when a GPU was last seen): no date library for three formats.

/// `secs` since the epoch as (year, month, day, hour, minute, second) in the proleptic
/// Gregorian calendar (Howard Hinnant's `civil_from_days`).
fn civil(secs: u64) -> (i64, i64, i64, u64, u64, u64) {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day, rem / 3600, rem % 3600 / 60, rem % 60)
}

/// `secs` as RFC 3339 in UTC: `2026-11-25T14:23:02Z`.
pub(crate) fn rfc3339(secs: u64) -> String {
    let (y, mo, d, h, mi, s) = civil(secs);
    format!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}Z")
}

/// `secs` for people: `2026-11-25 14:00:00 UTC`.
pub(crate) fn utc(secs: u64) -> String {
    let (y, mo, d, h, mi, s) = civil(secs);
    format!("{y:04}-{mo:02}-{d:02} {h:02}:{mi:02}:{s:02} UTC")
}

#[cfg(test)]
mod tests {
    #[test]
    fn both_formats_name_the_same_moment() {
        for (secs, rfc, human) in [
            (0, "1970-01-01T00:00:00Z", "1970-01-01 00:00:00 UTC"),
            (
                951_782_400,
                "2000-02-29T00:00:00Z",
                "2000-02-29 00:00:00 UTC",
            ),
            (
                1_795_702_982,
                "2026-11-26T14:23:02Z",
                "2026-11-26 14:23:02 UTC",
            ),
        ] {
            assert_eq!(super::rfc3339(secs), rfc);
            assert_eq!(super::utc(secs), human);
        }
    }
}
