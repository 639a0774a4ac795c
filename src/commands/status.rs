//! `gputune status`: `tuned-adm active` and `tuned-adm verify` in one. What gputune applied
//! to this node (or to an image, whose journal is kept outside it), when, by whom, with which
//! profile and gputune, what it owns now, and whether each of those still holds; the judging
//! is [`crate::apply::status`]'s. Reads only, as any user.

use clap::Args;
use serde::Serialize;

use crate::apply::io::{HostIo, has_live_kernel};
use crate::apply::journal::{self, Applied, Event, Journal, Phase};
use crate::apply::nft::NftCommand;
use crate::apply::operator::Console;
use crate::apply::status::{self, Item, Verdict};
use crate::error::{Error, ExitCode, Result};
use crate::host::Root;
use crate::image::Mode;
use crate::report::terminal::TableStyle;
use crate::say::clean_line;

/// Output formats of `status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum StatusFormat {
    Table,
    Json,
}

#[derive(Debug, Args)]
pub struct StatusArgs {
    /// Output format.
    #[arg(long, value_enum, default_value = "table")]
    pub format: StatusFormat,
}

/// The JSON document's version; bumped when a field is renamed or removed.
const SCHEMA_VERSION: u32 = 1;

/// Below this width the items are lines, not a five-column table.
const TABLE_MIN_WIDTH: u16 = 100;

/// What `status` found, for both formats.
#[derive(Serialize)]
struct Document {
    schema_version: u32,
    tool: Tool,
    /// `live` or `image`.
    mode: Mode,
    root: String,
    journal: String,
    /// Whether gputune's changes are in place now (a journal that was not rolled back).
    applied: bool,
    /// The journal's phase; `null` when nothing was ever applied.
    phase: Option<Phase>,
    profiles: Vec<String>,
    applies: Vec<Applied>,
    rolled_back: Option<Event>,
    /// Every item holds and no apply was interrupted.
    holds: bool,
    summary: Summary,
    items: Vec<Item>,
}

#[derive(Serialize)]
struct Tool {
    name: &'static str,
    version: &'static str,
}

#[derive(Serialize, Default)]
struct Summary {
    holds: usize,
    drifted: usize,
    unknown: usize,
}

/// `gputune status`.
pub(crate) fn run(args: &StatusArgs, root: &Root) -> Result<ExitCode> {
    crate::image::check_root(root)?;
    let mode = Mode::detect(root, false);
    let image = mode == Mode::Image;
    let state = crate::apply::run::state_root(root, image, &Console);
    let journal_path = state.path(journal::PATH);
    // An image's state directory is made by its first apply; status never makes it.
    let never = image
        && std::fs::symlink_metadata(state.dir())
            .is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound);
    let record = if never { None } else { journal::load(&state)? };
    let items = match &record {
        Some(j) if j.phase != Phase::RolledBack => {
            let io = HostIo {
                root,
                nft: has_live_kernel(root).then_some(&NftCommand),
            };
            status::check(j, root, &io, !image)
        }
        _ => Vec::new(),
    };
    let doc = document(mode, root, &journal_path, record.as_ref(), items);
    let text = match args.format {
        StatusFormat::Json => {
            let mut text = serde_json::to_string_pretty(&doc).map_err(|source| Error::Render {
                what: "the status",
                source,
            })?;
            text.push('\n');
            text
        }
        StatusFormat::Table => render(&doc, &TableStyle::detect()),
    };
    super::emit(&text, None)?;
    Ok(if doc.holds {
        ExitCode::Ok
    } else {
        ExitCode::Findings
    })
}

fn document(
    mode: Mode,
    root: &Root,
    journal_path: &std::path::Path,
    record: Option<&Journal>,
    items: Vec<Item>,
) -> Document {
    let mut summary = Summary::default();
    for item in &items {
        match item.status {
            Verdict::Holds => summary.holds += 1,
            Verdict::Drifted => summary.drifted += 1,
            Verdict::Unknown => summary.unknown += 1,
        }
    }
    let phase = record.map(|j| j.phase);
    Document {
        schema_version: SCHEMA_VERSION,
        tool: Tool {
            name: "gputune",
            version: env!("CARGO_PKG_VERSION"),
        },
        mode,
        root: clean_line(&root.dir().display().to_string()),
        journal: clean_line(&journal_path.display().to_string()),
        applied: matches!(phase, Some(Phase::Applied | Phase::Applying)),
        phase,
        profiles: record
            .map(|j| j.profiles.iter().map(|p| clean_line(p)).collect())
            .unwrap_or_default(),
        applies: record
            .map(|j| j.applies.iter().map(clean_applied).collect())
            .unwrap_or_default(),
        rolled_back: record.and_then(|j| j.rolled_back.as_ref().map(clean_event)),
        holds: phase != Some(Phase::Applying) && summary.drifted == 0 && summary.unknown == 0,
        summary,
        items,
    }
}

/// The journal's strings, safe for a terminal and for programs reading the JSON.
fn clean_event(e: &Event) -> Event {
    Event {
        at: clean_line(&e.at),
        uid: e.uid,
        user: e.user.as_deref().map(clean_line),
        login_uid: e.login_uid,
        login_user: e.login_user.as_deref().map(clean_line),
        command: e.command.iter().map(|a| clean_line(a)).collect(),
        gputune_version: clean_line(&e.gputune_version),
    }
}

fn clean_applied(a: &Applied) -> Applied {
    Applied {
        profile: clean_line(&a.profile),
        changes: a.changes,
        by: clean_event(&a.by),
    }
}

/// The status as people read it: the header (what, when, by whom), then one entry per item.
fn render(doc: &Document, style: &TableStyle) -> String {
    let of = match doc.mode {
        Mode::Image => format!("the image {}", doc.root),
        _ if doc.root == "/" => "this node".to_string(),
        _ => format!("the node under {}", doc.root),
    };
    let mut out = format!("gputune status of {of} (mode {})\n", doc.mode.name());
    out.push_str(&format!("journal: {}\n", doc.journal));
    let Some(phase) = doc.phase else {
        out.push_str(
            "nothing was ever applied here: there is no journal, so gputune owns nothing\n",
        );
        return out;
    };
    let state = match phase {
        Phase::Applied => "applied".to_string(),
        Phase::Applying => {
            "interrupted: an apply did not finish; run `gputune rollback` to put the node back"
                .to_string()
        }
        Phase::RolledBack => "rolled back: gputune owns nothing now".to_string(),
    };
    out.push_str(&format!("state: {state}\n"));
    // Profiles applied by a gputune that did not record who and when come first.
    let unrecorded = doc.profiles.len().saturating_sub(doc.applies.len());
    for profile in &doc.profiles[..unrecorded] {
        out.push_str(&format!(
            "applied profile {profile}: when and by whom not recorded (an older gputune wrote the journal)\n"
        ));
    }
    for a in &doc.applies {
        out.push_str(&format!(
            "applied profile {} at {} by {} with gputune {}: {} change{}\n  command: {}\n",
            a.profile,
            a.by.at,
            a.by.who(),
            a.by.gputune_version,
            a.changes,
            if a.changes == 1 { "" } else { "s" },
            a.by.command.join(" ")
        ));
    }
    if let Some(r) = &doc.rolled_back {
        out.push_str(&format!(
            "rolled back at {} by {} with gputune {}\n  command: {}\n",
            r.at,
            r.who(),
            r.gputune_version,
            r.command.join(" ")
        ));
    }
    if phase == Phase::RolledBack {
        return out;
    }
    let s = &doc.summary;
    out.push_str(&format!(
        "owns {} targets and settings: {} hold, {} drifted, {} unknown\n\n",
        doc.items.len(),
        s.holds,
        s.drifted,
        s.unknown
    ));
    match style.width {
        Some(width) if width >= TABLE_MIN_WIDTH => {
            let mut table = style.table(["STATUS", "SETTING", "APPLIED", "NOW", "WHY"]);
            for item in &doc.items {
                table.add_row([
                    item.status.name().to_uppercase(),
                    item.setting.clone(),
                    item.applied.clone(),
                    item.now.clone(),
                    item.message.clone(),
                ]);
            }
            out.push_str(&format!("{table}\n"));
        }
        _ => {
            for item in &doc.items {
                out.push_str(&format!(
                    "{:<8} {}: applied {}, now {}\n",
                    item.status.name().to_uppercase(),
                    item.setting,
                    item.applied,
                    item.now
                ));
                if !item.message.is_empty() {
                    out.push_str(&format!("         {}\n", item.message));
                }
            }
        }
    }
    out.push_str(&if doc.holds {
        "everything gputune applied still holds\n".to_string()
    } else if s.drifted + s.unknown == 0 {
        "the last apply did not finish\n".to_string()
    } else {
        format!(
            "{} of {} do not hold: `gputune audit` judges the node against the profile; `gputune apply` sets gputune's values again\n",
            s.drifted + s.unknown,
            doc.items.len()
        )
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apply::target::{State, Step, Target};

    fn plain() -> TableStyle {
        TableStyle {
            width: None,
            ascii: true,
            colour: false,
        }
    }

    fn journal(phase: Phase) -> Journal {
        let mut j = Journal::begin(
            None,
            "base",
            &[Step {
                what: "vm.swappiness".into(),
                target: Target::Knob("/proc/sys/vm/swappiness".into()),
                before: State::Present("60\n".into()),
                after: State::Present("10".into()),
            }],
        );
        j.phase = phase;
        j
    }

    fn status_of(record: Option<&Journal>, items: Vec<Item>) -> (bool, String) {
        let root = Root::new("/srv/image");
        let doc = document(
            Mode::Image,
            &root,
            std::path::Path::new("/state/journal.json"),
            record,
            items,
        );
        (doc.holds, render(&doc, &plain()))
    }

    #[test]
    fn nothing_applied_holds_and_says_so() {
        let (holds, text) = status_of(None, Vec::new());
        assert!(holds);
        assert!(
            text.contains("of the image /srv/image (mode image)"),
            "{text}"
        );
        assert!(text.contains("nothing was ever applied here"), "{text}");
    }

    #[test]
    fn an_interrupted_apply_does_not_hold_and_names_rollback() {
        let (holds, text) = status_of(Some(&journal(Phase::Applying)), Vec::new());
        assert!(!holds);
        assert!(text.contains("state: interrupted"), "{text}");
        assert!(text.contains("run `gputune rollback`"), "{text}");
        assert!(
            text.contains("applied profile base: when and by whom not recorded"),
            "{text}"
        );
    }

    #[test]
    fn a_rolled_back_journal_owns_nothing() {
        let mut j = journal(Phase::RolledBack);
        j.rolled_back = Some(Event {
            at: "2026-11-25T14:23:02Z".into(),
            uid: 0,
            user: Some("root\u{1b}]0;x\u{7}".into()),
            login_uid: None,
            login_user: None,
            command: vec!["gputune".into(), "rollback".into()],
            gputune_version: "0.1.0".into(),
        });
        let (holds, text) = status_of(Some(&j), Vec::new());
        assert!(holds);
        assert!(text.contains("state: rolled back"), "{text}");
        assert!(
            text.contains("rolled back at 2026-11-25T14:23:02Z by root]0;x (uid 0)"),
            "{text}"
        );
        assert!(!text.contains('\u{1b}'), "{text}");
    }
}
