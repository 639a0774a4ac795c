//! Printing without ever panicking, and only text that is safe to print.
//!
//! [`clean`] and [`clean_line`] are the crate's one sanitiser: every string that came from
//! a host, an image, a report or a log goes through one of them before it reaches a
//! terminal or another program (`scontrol`), so an escape sequence planted in a file cannot
//! clear the screen, fake a verdict or end up in slurmctld's state.
//!
//! `println!` panics when stdout is closed or full (`apply --yes | head -1`,
//! `rollback > /dev/full`), which for a transaction would abort it half-reported, or leave
//! the journal saying `applied` after rollback restored everything. [`say!`] writes the
//! line and, on failure, only records the first error; the command finishes its work,
//! and [`finish`] then turns the recorded error into exit 3, because the user did not see
//! what was done.

use std::io::{self, Write};
use std::sync::Mutex;

static FAILED: Mutex<Option<io::Error>> = Mutex::new(None);

/// Writes `text` to stdout; the first failure is kept for [`finish`].
pub(crate) fn write(text: &str) {
    let result = {
        let mut out = io::stdout().lock();
        out.write_all(text.as_bytes()).and_then(|()| out.flush())
    };
    if let Err(e) = result
        && let Ok(mut slot) = FAILED.lock()
        && slot.is_none()
    {
        *slot = Some(e);
    }
}

/// Takes the first stdout failure since the last call.
pub(crate) fn take_failure() -> Option<io::Error> {
    FAILED.lock().ok().and_then(|mut slot| slot.take())
}

/// The command's result, unless its report could not be written: then exit 3 saying the
/// work itself is complete.
pub(crate) fn finish(result: crate::Result<crate::ExitCode>) -> crate::Result<crate::ExitCode> {
    match (result, take_failure()) {
        (Ok(_), Some(e)) => Err(crate::Error::Unseen(e)),
        (result, _) => result,
    }
}

/// `println!` that never panics (see the module).
#[macro_export]
macro_rules! say {
    ($($arg:tt)*) => {
        $crate::say::write(&format!("{}\n", format_args!($($arg)*)))
    };
}

/// `text` without control characters (C0, DEL, C1 such as the one-byte CSI `\u{9b}`) and
/// without the Unicode format characters that reorder or hide text (bidirectional overrides
/// and isolates, zero-width characters, the BOM); newlines are kept and tabs become spaces,
/// for multi-line report cells.
pub(crate) fn clean(text: &str) -> String {
    text.chars()
        .filter_map(|c| match c {
            '\n' => Some('\n'),
            '\t' => Some(' '),
            c if hostile(c) => None,
            c => Some(c),
        })
        .collect()
}

/// [`clean`] for one line: newlines, carriage returns and tabs become spaces too (greppable
/// log lines, a Slurm reason, an argument to another program).
pub(crate) fn clean_line(text: &str) -> String {
    cleaned_line(text).into_owned()
}

/// [`clean_line`], borrowed when there is nothing to strip: the usual case, which fleet
/// meets for every field of every report.
pub(crate) fn cleaned_line(text: &str) -> std::borrow::Cow<'_, str> {
    // Printable ASCII is answered without decoding a character.
    if text.bytes().all(|b| (0x20..0x7f).contains(&b)) || !text.chars().any(hostile) {
        return std::borrow::Cow::Borrowed(text);
    }
    std::borrow::Cow::Owned(
        text.chars()
            .filter_map(|c| match c {
                '\n' | '\r' | '\t' => Some(' '),
                c if hostile(c) => None,
                c => Some(c),
            })
            .collect(),
    )
}

/// What may not reach a terminal or another program: control characters, and the format
/// characters that are not control characters to `char::is_control` but make a terminal show
/// text out of order or hide it (LRE..RLO, LRI..PDI, zero-width characters, the BOM).
fn hostile(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{feff}')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_never_get_through() {
        assert_eq!(
            clean("eth0\u{1b}[31mRED\u{1b}[0m\u{7}\u{9b}2J"),
            "eth0[31mRED[0m2J"
        );
        assert_eq!(clean("a\nb\tc\r\u{7f}"), "a\nb c");
        assert_eq!(clean("abc\u{202e}fed\u{2066}x"), "abcfedx");
        assert_eq!(clean_line("a\nb\r\nc\u{1b}]0;title\u{7}"), "a b  c]0;title");
        assert_eq!(
            clean_line("plain: 212992 (want 16777216)"),
            "plain: 212992 (want 16777216)"
        );
    }

    #[test]
    fn clean_strips_what_drives_a_terminal() {
        let cases = [
            ("gpu01", "gpu01"),
            ("\u{1b}[2J\u{1b}[HNo drift", "[2J[HNo drift"),
            ("a\nb\rc\td\u{7f}e\u{9b}f", "a b c def"),
            ("evil\u{202e}txt.json", "eviltxt.json"),
            ("zero\u{200b}width", "zerowidth"),
            ("ünïcode ok", "ünïcode ok"),
        ];
        for (input, want) in cases {
            assert_eq!(super::cleaned_line(input), want, "{input:?}");
        }
        assert!(matches!(
            super::cleaned_line("plain"),
            std::borrow::Cow::Borrowed(_)
        ));
    }
}
