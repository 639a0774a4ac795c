//! The person (or script) running apply: are they root, is there a terminal to ask, and
//! what do they answer. [`Console`] is the real one; tests answer for themselves.

use std::io::{BufRead, IsTerminal, Write};

/// What apply needs to know about who runs it before it touches anything.
pub trait Operator {
    /// Effective user id 0: allowed to write kernel knobs and /etc.
    fn is_root(&self) -> bool;
    /// Standard input is a terminal, so a question can be asked.
    fn can_ask(&self) -> bool;
    /// Asks a yes/no question; anything but `y`/`yes` is no.
    fn confirm(&self, question: &str) -> std::io::Result<bool>;
}

/// The process's own user, standard input and standard error.
#[derive(Debug, Default)]
pub(crate) struct Console;

impl Operator for Console {
    fn is_root(&self) -> bool {
        nix::unistd::geteuid().is_root()
    }

    fn can_ask(&self) -> bool {
        std::io::stdin().is_terminal()
    }

    fn confirm(&self, question: &str) -> std::io::Result<bool> {
        let mut err = std::io::stderr().lock();
        write!(err, "{question} [y/N] ")?;
        err.flush()?;
        let mut answer = String::new();
        std::io::stdin().lock().read_line(&mut answer)?;
        Ok(is_yes(&answer))
    }
}

/// `y` or `yes` in any case, surrounding white space ignored.
pub(crate) fn is_yes(answer: &str) -> bool {
    matches!(answer.trim().to_ascii_lowercase().as_str(), "y" | "yes")
}

#[cfg(test)]
mod tests {
    #[test]
    fn answers() {
        for (answer, want) in [
            ("y\n", true),
            ("YES", true),
            (" yes \n", true),
            ("", false),
            ("n", false),
            ("yes please", false),
        ] {
            assert_eq!(super::is_yes(answer), want, "{answer:?}");
        }
    }
}
