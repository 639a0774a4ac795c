//! How a table meets its reader: width, borders and colour, decided once from the
//! environment (`COLUMNS`, the locale, `NO_COLOR`) and whether standard output is a terminal.

use std::io::IsTerminal;

use comfy_table::presets::{ASCII_FULL_CONDENSED, UTF8_FULL_CONDENSED};
use comfy_table::{Cell, Color, ContentArrangement, Table};

use crate::finding::Status;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TableStyle {
    /// The width to lay out for: the terminal's, else `COLUMNS`; `None` (a pipe or file
    /// with no `COLUMNS`) means plain lines without boxes, never wrapped by gputune.
    pub width: Option<u16>,
    /// Box drawing needs a UTF-8 locale; anything else gets `+`, `-` and `|`.
    pub ascii: bool,
    /// FAIL and WARN in colour: only on a terminal, never with `NO_COLOR`.
    pub colour: bool,
}

impl TableStyle {
    /// The style for this process's standard output.
    pub(crate) fn detect() -> Self {
        let terminal = std::io::stdout().is_terminal();
        // comfy-table asks the terminal for its size (TIOCGWINSZ) when stdout is one.
        let terminal_width = if terminal { Table::new().width() } else { None };
        Self::from_env(terminal, terminal_width, |name| std::env::var(name).ok())
    }

    /// The style for a file (`--output`): whatever standard output is, no terminal reads it.
    pub(crate) fn for_file() -> Self {
        Self::from_env(false, None, |name| std::env::var(name).ok())
    }

    /// The style for a terminal (or not) of `terminal_width` columns (when it says) and an
    /// environment, kept apart for tests.
    pub(crate) fn from_env(
        terminal: bool,
        terminal_width: Option<u16>,
        env: impl Fn(&str) -> Option<String>,
    ) -> Self {
        let set = |name: &str| env(name).filter(|v| !v.is_empty());
        let columns = set("COLUMNS")
            .and_then(|c| c.trim().parse::<u16>().ok())
            .filter(|c| *c > 0);
        let width = terminal_width.filter(|w| *w > 0).or(columns);
        // The locale's character set, as setlocale(LC_CTYPE, "") picks it.
        let locale = ["LC_ALL", "LC_CTYPE", "LANG"]
            .iter()
            .find_map(|name| set(name))
            .unwrap_or_default()
            .to_ascii_lowercase();
        let utf8 = locale.contains("utf-8") || locale.contains("utf8");
        TableStyle {
            width,
            ascii: !utf8,
            colour: terminal && set("NO_COLOR").is_none(),
        }
    }

    /// A table with this style's borders and width and the given header.
    pub(crate) fn table<const N: usize>(&self, header: [&str; N]) -> Table {
        let mut table = Table::new();
        table
            .load_style(if self.ascii {
                ASCII_FULL_CONDENSED
            } else {
                UTF8_FULL_CONDENSED
            })
            .set_content_arrangement(ContentArrangement::Dynamic)
            .set_header(header);
        if let Some(width) = self.width {
            table.set_width(width);
        }
        if self.colour {
            table.enforce_styling();
        } else {
            table.force_no_tty();
        }
        table
    }

    /// A finding's status as a word padded to 5 columns, coloured when this style colours.
    pub(crate) fn status_word(&self, status: Status) -> String {
        let word = format!("{:<5}", status.name().to_uppercase());
        let colour = match status {
            Status::Fail | Status::Error => "31",
            Status::Warn => "33",
            _ => return word,
        };
        if self.colour {
            format!("\x1b[{colour}m{word}\x1b[0m")
        } else {
            word
        }
    }

    /// A finding's status as a cell, coloured when this style colours.
    pub(crate) fn status_cell(&self, status: Status) -> Cell {
        let cell = Cell::new(status.name().to_uppercase());
        match (self.colour, status) {
            (true, Status::Fail | Status::Error) => cell.fg(Color::Red),
            (true, Status::Warn) => cell.fg(Color::Yellow),
            (true, Status::Pass) => cell.fg(Color::Green),
            _ => cell,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn style(terminal: bool, vars: &[(&str, &str)]) -> TableStyle {
        TableStyle::from_env(terminal, None, |name| {
            vars.iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| v.to_string())
        })
    }

    #[test]
    fn width_follows_the_terminal_then_columns_else_plain() {
        assert_eq!(style(false, &[]).width, None);
        assert_eq!(style(false, &[("COLUMNS", "100")]).width, Some(100));
        assert_eq!(style(true, &[]).width, None);
        assert_eq!(style(true, &[("COLUMNS", "90")]).width, Some(90));
        assert_eq!(style(false, &[("COLUMNS", "wide")]).width, None);
        assert_eq!(style(false, &[("COLUMNS", "0")]).width, None);
        let sized =
            TableStyle::from_env(true, Some(80), |n| (n == "COLUMNS").then(|| "200".into()));
        assert_eq!(sized.width, Some(80));
    }

    #[test]
    fn box_drawing_only_in_a_utf8_locale() {
        assert!(style(false, &[]).ascii);
        assert!(style(false, &[("LC_ALL", "C"), ("LANG", "en_US.UTF-8")]).ascii);
        assert!(!style(false, &[("LANG", "en_US.UTF-8")]).ascii);
        assert!(!style(false, &[("LC_ALL", ""), ("LC_CTYPE", "C.utf8")]).ascii);
        let ascii = style(false, &[("LC_ALL", "C")]).table(["A"]).to_string();
        assert!(ascii.is_ascii(), "{ascii}");
    }

    #[test]
    fn colour_only_on_a_terminal_without_no_color() {
        assert!(style(true, &[]).colour);
        assert!(!style(true, &[("NO_COLOR", "1")]).colour);
        assert!(style(true, &[("NO_COLOR", "")]).colour);
        assert!(!style(false, &[]).colour);
        let plain = style(false, &[]);
        let mut table = plain.table(["Status"]);
        table.add_row([plain.status_cell(Status::Fail)]);
        assert!(!table.to_string().contains('\x1b'));
        let coloured = style(true, &[("COLUMNS", "80")]);
        let mut table = coloured.table(["Status"]);
        table.add_row([coloured.status_cell(Status::Fail)]);
        assert!(table.to_string().contains("\x1b["));
    }
}
