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
