//! Printing apply's and rollback's progress without ever panicking.
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
pub fn write(text: &str) {
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
pub fn take_failure() -> Option<io::Error> {
    FAILED.lock().ok().and_then(|mut slot| slot.take())
}

/// The command's result, unless its report could not be written: then exit 3 saying the
/// work itself is complete.
pub fn finish(result: crate::Result<crate::ExitCode>) -> crate::Result<crate::ExitCode> {
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

/// `text` without control characters (C0, DEL, C1) and without the Unicode format characters
/// that reorder or hide text (bidirectional overrides and isolates, zero-width joiners):
/// what every string that came from a host, an image, a report or a log goes through before
/// it reaches a terminal or another program, so it cannot clear a screen, move the cursor,
/// forge a line or disguise itself. Borrowed when there is nothing to strip.
pub fn clean(text: &str) -> std::borrow::Cow<'_, str> {
    fn hostile(c: char) -> bool {
        c.is_control()
            || matches!(c, '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{feff}')
    }
    // Printable ASCII, the usual case, is answered without decoding a character.
    if text.bytes().all(|b| (0x20..0x7f).contains(&b)) {
        return std::borrow::Cow::Borrowed(text);
    }
    if text.chars().any(hostile) {
        std::borrow::Cow::Owned(text.chars().filter(|&c| !hostile(c)).collect())
    } else {
        std::borrow::Cow::Borrowed(text)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn clean_strips_what_drives_a_terminal() {
        let cases = [
            ("gpu01", "gpu01"),
            ("\u{1b}[2J\u{1b}[HNo drift", "[2J[HNo drift"),
            ("a\nb\rc\td\u{7f}e\u{9b}f", "abcdef"),
            ("evil\u{202e}txt.json", "eviltxt.json"),
            ("zero\u{200b}width", "zerowidth"),
            ("ünïcode ok", "ünïcode ok"),
        ];
        for (input, want) in cases {
            assert_eq!(super::clean(input), want, "{input:?}");
        }
        assert!(matches!(
            super::clean("plain"),
            std::borrow::Cow::Borrowed(_)
        ));
    }
}
