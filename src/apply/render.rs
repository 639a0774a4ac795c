//! Apply's plan and rollback's file changes as people review them: one line per write,
//! `before -> after`, files as line diffs, every host string made safe for a terminal.

use super::plan::Plan;

/// The plan as people read it: one line per write, `before -> after`, then the notes.
pub(crate) fn plan(profile: &str, plan: &Plan) -> String {
    let mut out = format!("plan for profile {profile}: {} changes\n", plan.steps.len());
    for step in &plan.steps {
        // Name the target only where the step's own name does not already say it.
        let label = step.target.label();
        let redundant =
            step.what.contains(&label) || label == crate::host::sysctl::host_path(&step.what);
        let what = if redundant {
            step.what.clone()
        } else {
            format!("{} ({label})", step.what)
        };
        out.push_str(&format!(
            "  {what}: {} -> {}\n",
            step.before.summary(),
            step.after.summary()
        ));
        if let crate::apply::target::Target::File(_) = step.target {
            out.push_str(&diff(&step.before, &step.after));
        }
    }
    for left in &plan.left_out {
        out.push_str(&format!("left out {left}\n"));
    }
    for note in &plan.notes {
        out.push_str(&format!("note: {note}\n"));
    }
    out
}

/// A diff of file content from a journal or the node, safe for a terminal.
pub(crate) fn clean_diff(diff: &str) -> String {
    diff.lines()
        .map(|l| format!("{}\n", crate::say::clean_line(l)))
        .collect()
}

/// A file's change as lines people review: `-` removed, `+` added, ` ` kept.
pub(crate) fn diff(
    before: &crate::apply::target::State,
    after: &crate::apply::target::State,
) -> String {
    use crate::apply::target::State;
    let lines = |s: &State| -> Vec<String> {
        match s {
            State::Present(text) => text.lines().map(str::to_string).collect(),
            State::Absent => Vec::new(),
        }
    };
    let (old, new) = (lines(before), lines(after));
    let mut out = String::new();
    for line in old.iter().filter(|l| !new.contains(l)) {
        out.push_str(&format!("    -{line}\n"));
    }
    for line in &new {
        let mark = if old.contains(line) { ' ' } else { '+' };
        out.push_str(&format!("    {mark}{line}\n"));
    }
    out
}
