//! systemd-logind's `RemoveIPC=`: when `yes` (the default), logind deletes a user's System V
//! and POSIX shared memory when their last session ends, which removes NCCL's `/dev/shm`
//! segments under a running job that was started from a session that has since closed.

use crate::host::{HostError, Root};

/// The main file (`/etc` overrides the vendor copy newer systemd keeps in `/usr/lib`).
const MAIN_FILES: &[&str] = &["/etc/systemd/logind.conf", "/usr/lib/systemd/logind.conf"];
/// Drop-in directories, highest precedence first: a file name in an earlier directory masks
/// the same name in later ones (systemd.unit(5) drop-in rules).
const DROP_IN_DIRS: &[&str] = &[
    "/etc/systemd/logind.conf.d",
    "/run/systemd/logind.conf.d",
    "/usr/local/lib/systemd/logind.conf.d",
    "/usr/lib/systemd/logind.conf.d",
];
/// Where the daemon lives; without it there is no logind to remove anything.
const DAEMONS: &[&str] = &[
    "/usr/lib/systemd/systemd-logind",
    "/lib/systemd/systemd-logind",
];

/// A line of a logind file that systemd would not take, with its `file:line`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Malformed {
    #[error("{place}: `{line}` is neither a [section] nor KEY=VALUE")]
    NotKeyValue { place: String, line: String },
    #[error("{place}: RemoveIPC=`{value}` is not a boolean")]
    NotBoolean { place: String, value: String },
}

/// Why logind's `RemoveIPC=` is unknown.
#[derive(Debug, thiserror::Error)]
pub(crate) enum LogindError {
    #[error(transparent)]
    Unreadable(#[from] HostError),
    #[error(transparent)]
    Malformed(#[from] Malformed),
}

/// The last `RemoveIPC=` in the `[Login]` section of one file, or `None` when it sets none.
pub fn parse_remove_ipc(file: &str, text: &str) -> Result<Option<bool>, Malformed> {
    let mut section = String::new();
    let mut value = None;
    for (index, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            section = name.to_string();
            continue;
        }
        let Some((key, v)) = line.split_once('=') else {
            return Err(Malformed::NotKeyValue {
                place: format!("{file}:{}", index + 1),
                line: line.to_string(),
            });
        };
        if section == "Login" && key.trim() == "RemoveIPC" {
            value = Some(parse_bool(v.trim()).ok_or_else(|| Malformed::NotBoolean {
                place: format!("{file}:{}", index + 1),
                value: v.trim().to_string(),
            })?);
        }
    }
    Ok(value)
}

/// systemd's booleans: yes/no, true/false, on/off, 1/0.
fn parse_bool(text: &str) -> Option<bool> {
    match text.to_ascii_lowercase().as_str() {
        "yes" | "true" | "on" | "1" | "y" | "t" => Some(true),
        "no" | "false" | "off" | "0" | "n" | "f" => Some(false),
        _ => None,
    }
}

/// What logind on this root would run with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum RemoveIpc {
    /// systemd-logind is not installed.
    NoLogind,
    /// The effective value and the file that set it (`None`: the built-in default, yes).
    Set { remove: bool, place: Option<String> },
}

/// Reads the main file and drop-ins in the order systemd-logind applies them.
pub(crate) fn read(root: &Root) -> Result<RemoveIpc, LogindError> {
    if !DAEMONS.iter().any(|d| root.exists(d)) {
        return Ok(RemoveIpc::NoLogind);
    }
    let mut files: Vec<String> = Vec::new();
    if let Some(main) = MAIN_FILES.iter().find(|f| root.exists(f)) {
        files.push(main.to_string());
    }
    let mut drop_ins: Vec<(String, String)> = Vec::new();
    for dir in DROP_IN_DIRS {
        for name in root.list_dir(dir)?.unwrap_or_default() {
            if name.ends_with(".conf") && !drop_ins.iter().any(|(n, _)| *n == name) {
                drop_ins.push((name.clone(), format!("{dir}/{name}")));
            }
        }
    }
    drop_ins.sort();
    files.extend(drop_ins.into_iter().map(|(_, path)| path));

    let mut result = RemoveIpc::Set {
        remove: true,
        place: None,
    };
    for file in files {
        let Some(text) = root.read_optional(&file)? else {
            continue;
        };
        if let Some(remove) = parse_remove_ipc(&file, &text)? {
            result = RemoveIpc::Set {
                remove,
                place: Some(file),
            }
        }
    }
    Ok(result)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::Tree;
    use crate::testing::assert_cases;

    #[test]
    fn parsing() {
        let cases = [
            ("", Ok(None)),
            ("[Login]\n#RemoveIPC=yes\n", Ok(None)),
            ("[Login]\nRemoveIPC=no\n", Ok(Some(false))),
            (
                "[Login]\nRemoveIPC = yes\nRemoveIPC=false\n",
                Ok(Some(false)),
            ),
            ("[Other]\nRemoveIPC=no\n", Ok(None)),
            (
                "; comment\n[Login]\nKillUserProcesses=no\nRemoveIPC=1\n",
                Ok(Some(true)),
            ),
            ("[Login]\nRemoveIPC=maybe\n", Err(())),
            ("[Login]\ngarbage\n", Err(())),
        ];
        assert_cases(cases, |text| parse_remove_ipc("f", text).map_err(|_| ()));
        assert!(
            parse_remove_ipc("logind.conf", "[Login]\nRemoveIPC=maybe\n")
                .unwrap_err()
                .to_string()
                .starts_with("logind.conf:2:")
        );
    }

    #[test]
    fn drop_ins_override_in_name_order_and_etc_masks_usr() {
        let tree = Tree::new();
        let root = tree.root();
        assert_eq!(read(&root).ok(), Some(RemoveIpc::NoLogind));
        tree.file("/usr/lib/systemd/systemd-logind", "");
        assert_eq!(
            read(&root).ok(),
            Some(RemoveIpc::Set {
                remove: true,
                place: None
            })
        );
        tree.file("/etc/systemd/logind.conf", "[Login]\nRemoveIPC=yes\n");
        tree.file(
            "/usr/lib/systemd/logind.conf.d/50-x.conf",
            "[Login]\nRemoveIPC=no\n",
        );
        tree.file(
            "/usr/lib/systemd/logind.conf.d/10-a.conf",
            "[Login]\nRemoveIPC=yes\n",
        );
        assert_eq!(
            read(&root).ok(),
            Some(RemoveIpc::Set {
                remove: false,
                place: Some("/usr/lib/systemd/logind.conf.d/50-x.conf".into())
            })
        );
        // An /etc drop-in of the same name masks the vendor one.
        tree.file("/etc/systemd/logind.conf.d/50-x.conf", "[Login]\n");
        assert_eq!(
            read(&root).ok(),
            Some(RemoveIpc::Set {
                remove: true,
                place: Some("/usr/lib/systemd/logind.conf.d/10-a.conf".into())
            })
        );
    }
}
