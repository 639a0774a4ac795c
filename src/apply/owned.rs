//! Files gputune creates and owns. Each starts with [`HEADER`]; a file at one of these paths
//! without it was written by someone else and is never edited. Their content is a list of
//! keyed lines, so applying again replaces a key's line instead of adding another.

/// The first line of every file gputune writes: how it recognises its own files.
pub(crate) const HEADER: &str = "# Written by gputune apply; `gputune rollback` restores what was here before.\n# gputune rewrites this file: do not edit it, override in a later file instead.\n";

/// True when `text` is a file gputune wrote.
pub(crate) fn is_ours(text: &str) -> bool {
    text.starts_with("# Written by gputune")
}

/// How a line of a file names the setting it sets.
pub(crate) type KeyOf = fn(&str) -> Option<String>;

/// `key = value` and `KEY=VALUE` lines (sysctl.d, nccl.conf, systemd directives).
pub(crate) fn key_before_equals(line: &str) -> Option<String> {
    let (key, _) = line.split_once('=')?;
    Some(key.trim().to_string()).filter(|k| !k.is_empty())
}

/// `domain type item value` lines of limits.conf: the first three fields.
pub(crate) fn limits_key(line: &str) -> Option<String> {
    let fields: Vec<&str> = line.split_whitespace().collect();
    (fields.len() == 4).then(|| fields[..3].join(" "))
}

/// A file gputune would merge into but did not create.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{path} exists and was not written by gputune; gputune never edits files it did not create (move its settings elsewhere or remove it, then apply again)"
)]
pub(crate) struct NotOurs {
    pub path: String,
}

/// The new content of an owned file: its current lines with `entries` replacing the lines
/// of the same key and new keys appended, after the header and `preamble` (e.g. `[Slice]`).
/// `existing` not ours is an error naming `path`.
pub(crate) fn merge(
    path: &str,
    existing: Option<&str>,
    preamble: &str,
    entries: &[(String, String)],
    key_of: KeyOf,
) -> Result<String, NotOurs> {
    let mut lines: Vec<(Option<String>, String)> = Vec::new();
    if let Some(text) = existing {
        if !is_ours(text) {
            return Err(NotOurs {
                path: path.to_string(),
            });
        }
        for line in text.lines() {
            let trimmed = line.trim();
            if trimmed.is_empty()
                || trimmed.starts_with('#')
                || (trimmed.starts_with('[') && preamble.contains(trimmed))
            {
                continue;
            }
            lines.push((key_of(trimmed), trimmed.to_string()));
        }
    }
    for (key, line) in entries {
        match lines.iter_mut().find(|(k, _)| k.as_deref() == Some(key)) {
            Some(slot) => slot.1 = line.clone(),
            None => lines.push((Some(key.clone()), line.clone())),
        }
    }
    let mut out = String::from(HEADER);
    out.push_str(preamble);
    for (_, line) in lines {
        out.push_str(&line);
        out.push('\n');
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(k: &str, l: &str) -> (String, String) {
        (k.into(), l.into())
    }

    #[test]
    fn merging_keeps_replaces_and_appends() {
        let p = "/etc/x.conf";
        let new = merge(p, None, "", &[e("a", "a = 1")], key_before_equals).unwrap();
        assert_eq!(new, format!("{HEADER}a = 1\n"));
        let again = merge(
            p,
            Some(&new),
            "",
            &[e("b", "b = 2"), e("a", "a = 3")],
            key_before_equals,
        )
        .unwrap();
        assert_eq!(again, format!("{HEADER}a = 3\nb = 2\n"));
        let same = merge(p, Some(&again), "", &[e("a", "a = 3")], key_before_equals).unwrap();
        assert_eq!(same, again, "merging what is there changes nothing");
    }

    #[test]
    fn files_of_others_are_refused() {
        let err = merge(
            "/etc/nccl.conf",
            Some("NCCL_DEBUG=INFO\n"),
            "",
            &[],
            key_before_equals,
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("/etc/nccl.conf") && err.contains("not written by gputune"));
    }

    #[test]
    fn preambles_are_written_once() {
        let p = "/etc/systemd/system/training.slice.d/90-gputune.conf";
        let one = merge(
            p,
            None,
            "[Slice]\n",
            &[e("MemoryMax", "MemoryMax=1G")],
            key_before_equals,
        )
        .unwrap();
        let two = merge(
            p,
            Some(&one),
            "[Slice]\n",
            &[e("CPUWeight", "CPUWeight=200")],
            key_before_equals,
        )
        .unwrap();
        assert_eq!(
            two,
            format!("{HEADER}[Slice]\nMemoryMax=1G\nCPUWeight=200\n")
        );
    }

    #[test]
    fn limits_lines_key_on_three_fields() {
        assert_eq!(
            limits_key("* soft memlock unlimited").as_deref(),
            Some("* soft memlock")
        );
        assert_eq!(
            limits_key("@gpu hard nofile 131072").as_deref(),
            Some("@gpu hard nofile")
        );
        assert_eq!(limits_key("broken line"), None);
        assert_eq!(
            key_before_equals("NCCL_SOCKET_IFNAME=eth0").as_deref(),
            Some("NCCL_SOCKET_IFNAME")
        );
        assert_eq!(key_before_equals("no equals"), None);
    }
}
