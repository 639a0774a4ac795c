//! What the node's sysctl configuration files set at boot, read the way `systemd-sysctl`
//! reads them (sysctl.d(5)): `*.conf` files from /etc/sysctl.d, /run/sysctl.d,
//! /usr/local/lib/sysctl.d, /usr/lib/sysctl.d and /lib/sysctl.d merged by file name (a
//! file in an earlier directory masks a same-named one in a later directory), applied in
//! lexical order of their names; a later assignment wins. systemd-sysctl does not read
//! /etc/sysctl.conf itself: distributions link it in as /etc/sysctl.d/99-sysctl.conf, and
//! through that link it counts, at that place.

use std::collections::BTreeMap;

use crate::host::{HostError, Root, sysctl};

/// The directories systemd-sysctl reads, most important first.
pub(crate) const DIRS: [&str; 5] = [
    "/etc/sysctl.d",
    "/run/sysctl.d",
    "/usr/local/lib/sysctl.d",
    "/usr/lib/sysctl.d",
    "/lib/sysctl.d",
];

/// The file gputune persists sysctls in.
pub(crate) const GPUTUNE_CONF: &str = "/etc/sysctl.d/90-gputune.conf";

/// One `key = value` line of a configuration file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Assignment {
    pub key: String,
    /// What the kernel sets for it (white space folded, integers in decimal, as
    /// `sysctl -n` shows them); the text as written when the kernel rejects it.
    pub value: String,
    /// Why the kernel rejects the value, so systemd-sysctl fails to set it at boot (see
    /// [`super::kernel`]); `None` when it is accepted.
    pub rejected: Option<String>,
    /// Host path of the file and the 1-based line, for messages.
    pub file: String,
    pub line: usize,
}

impl Assignment {
    /// `file:line`, as people open it in an editor.
    pub(crate) fn origin(&self) -> String {
        format!("{}:{}", self.file, self.line)
    }
}

/// Parses one sysctl.d file: `key = value` lines; `#` and `;` comments; a leading `-`
/// (ignore errors) is dropped; `/` separators become dots. Glob keys are left out (they
/// name no one setting). Lines without `=` are ignored, as systemd-sysctl does with a warning.
pub fn parse(text: &str, file: &str) -> Vec<Assignment> {
    text.lines()
        .enumerate()
        .filter_map(|(i, line)| {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
                return None;
            }
            let (key, value) = line.split_once('=')?;
            let key = key.trim().trim_start_matches('-').trim();
            if key.is_empty() || key.contains('*') {
                return None;
            }
            let key = if key.contains('/') {
                key.replace('/', ".")
            } else {
                key.to_string()
            };
            let (value, rejected) = match super::kernel::kernel_value(&key, value) {
                Ok(v) => (v, None),
                Err(why) => (sysctl::normalize(value), Some(why.to_string())),
            };
            Some(Assignment {
                key,
                value,
                rejected,
                file: file.to_string(),
                line: i + 1,
            })
        })
        .collect()
}

/// The configuration files in the order systemd-sysctl applies them.
pub(crate) fn boot_order(root: &Root) -> Result<Vec<String>, HostError> {
    let mut by_name: BTreeMap<String, String> = BTreeMap::new();
    for dir in DIRS {
        for name in root.list_dir(dir)?.unwrap_or_default() {
            if name.ends_with(".conf") {
                by_name
                    .entry(name.clone())
                    .or_insert_with(|| format!("{dir}/{name}"));
            }
        }
    }
    Ok(by_name.into_values().collect())
}

/// Every assignment of the node's configuration, in boot order (a later one wins).
pub(crate) fn assignments(root: &Root) -> Result<Vec<Assignment>, HostError> {
    let mut all = Vec::new();
    for file in boot_order(root)? {
        if let Some(text) = root.read_optional(&file)? {
            all.extend(parse(&text, &file));
        }
    }
    Ok(all)
}

/// What the files set for each key at boot: the winning assignment.
pub(crate) fn effective(assignments: &[Assignment]) -> BTreeMap<String, Assignment> {
    let mut out = BTreeMap::new();
    for a in assignments {
        out.insert(a.key.clone(), a.clone());
    }
    out
}

/// Assignments of `key` applied after gputune's file at boot with another value: they
/// override what gputune persisted.
pub(crate) fn overriding<'a>(
    assignments: &'a [Assignment],
    key: &str,
    value: &str,
) -> Vec<&'a Assignment> {
    let Some(ours) = assignments.iter().position(|a| a.file == GPUTUNE_CONF) else {
        return assignments
            .iter()
            .filter(|a| a.key == key && a.value != sysctl::normalize(value) && after_ours(&a.file))
            .collect();
    };
    assignments[ours..]
        .iter()
        .filter(|a| a.file != GPUTUNE_CONF && a.key == key && a.value != sysctl::normalize(value))
        .collect()
}

/// Whether a file comes after `90-gputune.conf` at boot, judged by name when gputune's
/// file does not exist yet.
fn after_ours(file: &str) -> bool {
    file.rsplit('/')
        .next()
        .is_some_and(|name| name > "90-gputune.conf")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::Tree;
    use crate::testing::assert_cases;

    fn a(key: &str, value: &str, file: &str, line: usize) -> Assignment {
        Assignment {
            key: key.into(),
            value: value.into(),
            rejected: None,
            file: file.into(),
            line,
        }
    }

    #[test]
    fn lines() {
        let f = "/etc/sysctl.d/x.conf";
        let cases = [
            ("", vec![]),
            ("# comment\n; other\n\n", vec![]),
            ("vm.swappiness = 10\n", vec![a("vm.swappiness", "10", f, 1)]),
            ("vm.swappiness=10", vec![a("vm.swappiness", "10", f, 1)]),
            (
                "\nnet.ipv4.tcp_rmem = 4096\t131072  16777216\n",
                vec![a("net.ipv4.tcp_rmem", "4096 131072 16777216", f, 2)],
            ),
            (
                "-net.core.somaxconn = 4096",
                vec![a("net.core.somaxconn", "4096", f, 1)],
            ),
            (
                "net/core/somaxconn = 1",
                vec![a("net.core.somaxconn", "1", f, 1)],
            ),
            ("net.ipv4.conf.*.rp_filter = 2\n", vec![]),
            ("vm.swappiness = 010\n", vec![a("vm.swappiness", "8", f, 1)]),
            (
                "vm.swappiness = -1\n",
                vec![Assignment {
                    rejected: Some("-1 is outside 0..=200".into()),
                    ..a("vm.swappiness", "-1", f, 1)
                }],
            ),
            ("no equals sign\n", vec![]),
            ("= 5\n", vec![]),
        ];
        assert_cases(cases, |text| parse(text, f));
    }

    #[test]
    fn files_merge_by_name_and_sort_lexically() {
        let tree = Tree::with(&[
            ("/usr/lib/sysctl.d/50-default.conf", "x = 1\n"),
            ("/lib/sysctl.d/50-default.conf", "x = masked\n"),
            ("/etc/sysctl.d/50-default.conf", "x = 2\n"),
            ("/run/sysctl.d/10-early.conf", "y = 1\n"),
            ("/usr/lib/sysctl.d/99-late.conf", "y = 3\n"),
            ("/etc/sysctl.d/README", "z = 1\n"),
            ("/etc/sysctl.conf", "y = 4\n"),
        ]);
        let root = tree.root();
        // systemd-sysctl never reads /etc/sysctl.conf by itself...
        assert_eq!(
            boot_order(&root).unwrap(),
            [
                "/run/sysctl.d/10-early.conf",
                "/etc/sysctl.d/50-default.conf",
                "/usr/lib/sysctl.d/99-late.conf",
            ]
        );
        let eff = effective(&assignments(&root).unwrap());
        assert_eq!(eff["x"].value, "2");
        assert_eq!(eff["y"].origin(), "/usr/lib/sysctl.d/99-late.conf:1");
        assert!(!eff.contains_key("z"));
        // ...only through the link distributions ship, at the link's place.
        tree.link("/etc/sysctl.d/99-sysctl.conf", "../sysctl.conf");
        assert_eq!(
            boot_order(&root).unwrap().last().map(String::as_str),
            Some("/etc/sysctl.d/99-sysctl.conf")
        );
        let eff = effective(&assignments(&root).unwrap());
        assert_eq!(eff["y"].origin(), "/etc/sysctl.d/99-sysctl.conf:1");
        assert_eq!(eff["y"].value, "4");
    }

    #[test]
    fn later_files_override_gputunes() {
        let tree = Tree::with(&[
            ("/etc/sysctl.d/10-early.conf", "k = 1\n"),
            (GPUTUNE_CONF, "k = 5\n"),
            ("/etc/sysctl.d/99-user.conf", "k = 1\nk2 = 5\n"),
        ]);
        let root = tree.root();
        let all = assignments(&root).unwrap();
        let over = overriding(&all, "k", "5");
        assert_eq!(over.len(), 1);
        assert_eq!(over[0].origin(), "/etc/sysctl.d/99-user.conf:1");
        assert!(overriding(&all, "k2", "5").is_empty());

        let tree = Tree::with(&[("/usr/lib/sysctl.d/95-x.conf", "k = 1\n")]);
        let root = tree.root();
        let all = assignments(&root).unwrap();
        assert_eq!(
            overriding(&all, "k", "5").len(),
            1,
            "by name when ours is absent"
        );
        let tree = Tree::with(&[("/usr/lib/sysctl.d/10-x.conf", "k = 1\n")]);
        let root = tree.root();
        let all = assignments(&root).unwrap();
        assert!(overriding(&all, "k", "5").is_empty());
    }

    #[test]
    fn commented_out_assignments_set_nothing() {
        let text = "# vm.swappiness = 1\n; vm.swappiness = 2\n  # net.core.somaxconn=3\n";
        assert_eq!(parse(text, "/etc/sysctl.d/x.conf"), []);
    }

    #[test]
    fn a_same_named_file_elsewhere_is_masked_by_ours_not_applied_after_it() {
        // Ours does not exist yet; once apply writes /etc/sysctl.d/90-gputune.conf it masks
        // the vendor's file of that name, which so cannot override it.
        let tree = Tree::with(&[("/usr/lib/sysctl.d/90-gputune.conf", "k = 1\n")]);
        let all = assignments(&tree.root()).unwrap();
        assert_eq!(all.len(), 1);
        assert!(overriding(&all, "k", "5").is_empty());
    }
}
