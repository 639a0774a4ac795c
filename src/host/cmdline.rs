//! The kernel command line an image or node boots with, read from where its boot loader
//! takes it, and the edits apply makes there. Two ways exist:
//!
//! - kernel-install (systemd-boot, UKIs built by ukify or dracut) takes the whole command
//!   line from `/etc/kernel/cmdline`; when that file exists it is the command line.
//! - GRUB's `grub-mkconfig` (`update-grub`) sources `/etc/default/grub`, then on Debian and
//!   Ubuntu every `/etc/default/grub.d/*.cfg` in name order, and boots with
//!   `GRUB_CMDLINE_LINUX` followed by `GRUB_CMDLINE_LINUX_DEFAULT`. gputune's drop-in appends
//!   its parameters to `GRUB_CMDLINE_LINUX_DEFAULT`, so the rest of the line stays the site's.
//!
//! The kernel takes the last `param=` of the line, so a later word wins.

use super::{HostError, Root};

/// kernel-install's command line (systemd-boot, UKIs).
pub(crate) const KERNEL_CMDLINE: &str = "/etc/kernel/cmdline";
/// GRUB's main settings.
pub(crate) const GRUB_DEFAULT: &str = "/etc/default/grub";
/// The directory of GRUB drop-ins Debian's grub-mkconfig sources.
pub(crate) const GRUB_DROP_INS: &str = "/etc/default/grub.d";
/// gputune's GRUB drop-in.
pub(crate) const GRUB_DROP_IN: &str = "/etc/default/grub.d/90-gputune.cfg";

/// The GRUB variable gputune's drop-in extends (normal boot entries, not recovery ones).
const GRUB_CMDLINE_KEY: &str = "GRUB_CMDLINE_LINUX_DEFAULT";

/// How the root boots, as far as its files tell, and so where command-line settings go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Loader {
    /// `/etc/kernel/cmdline` exists: kernel-install builds the boot entry or UKI from it.
    KernelInstall,
    /// Nothing is written, the text says why: systemd-boot or a UKI layout without
    /// `/etc/kernel/cmdline` (kernel-install then falls back to the running kernel's command
    /// line, so a new file with only gputune's words would drop `root=`), or RHEL's
    /// grub2-mkconfig, which reads no drop-ins (grubby edits its boot entries).
    Manual(String),
    /// GRUB, or no boot loader configuration at all (a minimal image GRUB is installed on
    /// later): the drop-in. The text says why.
    Grub(String),
}

impl Loader {
    /// Where this loader's command line is written, when apply may write it.
    pub(crate) fn file(&self) -> Option<&'static str> {
        match self {
            Loader::KernelInstall => Some(KERNEL_CMDLINE),
            Loader::Grub(_) => Some(GRUB_DROP_IN),
            Loader::Manual(_) => None,
        }
    }
}

/// Which boot loader configuration the root carries.
pub(crate) fn loader(root: &Root) -> Loader {
    if root.exists(KERNEL_CMDLINE) {
        return Loader::KernelInstall;
    }
    let debian_grub = ["/usr/sbin/grub-mkconfig", "/usr/sbin/update-grub"]
        .into_iter()
        .find(|g| root.exists(g));
    if debian_grub.is_none() && root.exists("/usr/sbin/grub2-mkconfig") {
        return Loader::Manual(
            "the root boots with grub2-mkconfig (RHEL family), which reads no /etc/default/grub.d drop-ins: add it with `grubby --update-kernel=ALL --args=...` (and GRUB_CMDLINE_LINUX in /etc/default/grub for new kernels)".into(),
        );
    }
    if root.exists(GRUB_DEFAULT) {
        return Loader::Grub(format!("the root has {GRUB_DEFAULT}"));
    }
    if let Some(grub) = debian_grub {
        return Loader::Grub(format!("the root has {grub}"));
    }
    for sd_boot in [
        "/usr/lib/systemd/boot/efi",
        "/boot/loader/entries",
        "/boot/efi/loader/entries",
        "/usr/bin/ukify",
        "/usr/lib/systemd/ukify",
    ] {
        if root.exists(sd_boot) {
            return Loader::Manual(format!(
                "the root has {sd_boot} (systemd-boot or UKIs) but no {KERNEL_CMDLINE}: kernel-install would fall back to the build machine's command line; write the image's whole command line (root=...) into {KERNEL_CMDLINE}, then apply again"
            ));
        }
    }
    Loader::Grub(format!(
        "no boot loader configuration found ({KERNEL_CMDLINE}, {GRUB_DEFAULT}); update-grub reads the drop-in once GRUB is installed, a systemd-boot or UKI image takes its command line from {KERNEL_CMDLINE} instead"
    ))
}

/// One word of the command line and the file that put it there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Word {
    pub text: String,
    pub origin: String,
}

/// The words of the command line the root boots with, in order (the last `param=` wins);
/// `None` when the root has no command-line configuration at all.
pub(crate) fn words(root: &Root) -> Result<Option<Vec<Word>>, HostError> {
    if let Some(text) = root.read_optional(KERNEL_CMDLINE)? {
        return Ok(Some(kernel_cmdline_words(&text, KERNEL_CMDLINE)));
    }
    let mut files = Vec::new();
    if let Some(text) = root.read_optional(GRUB_DEFAULT)? {
        files.push((GRUB_DEFAULT.to_string(), text));
    }
    let mut drop_ins: Vec<String> = root
        .list_dir(GRUB_DROP_INS)?
        .unwrap_or_default()
        .into_iter()
        .filter(|n| n.ends_with(".cfg"))
        .collect();
    drop_ins.sort();
    for name in drop_ins {
        let path = format!("{GRUB_DROP_INS}/{name}");
        if let Some(text) = root.read_optional(&path)? {
            files.push((path, text));
        }
    }
    if files.is_empty() {
        return Ok(None);
    }
    Ok(Some(grub_words(&files)))
}

/// The value of the last `param=` among `words`, with the file that set it.
pub(crate) fn param<'a>(words: &'a [Word], param: &str) -> Option<(&'a str, &'a str)> {
    let prefix = format!("{param}=");
    words
        .iter()
        .filter_map(|w| Some((w.text.strip_prefix(&prefix)?, w.origin.as_str())))
        .next_back()
}

/// The words of a `/etc/kernel/cmdline` (kernel-install folds its lines into one).
pub(crate) fn kernel_cmdline_words(text: &str, origin: &str) -> Vec<Word> {
    text.split_whitespace()
        .map(|w| Word {
            text: w.to_string(),
            origin: origin.to_string(),
        })
        .collect()
}

/// GRUB's `GRUB_CMDLINE_LINUX` then `GRUB_CMDLINE_LINUX_DEFAULT` after sourcing `files` in
/// order. Only assignments of those two variables are understood, with `$VAR` and `${VAR}`
/// of either expanded (what drop-ins use to extend them); other shell is ignored.
pub(crate) fn grub_words(files: &[(String, String)]) -> Vec<Word> {
    let mut linux: Vec<Word> = Vec::new();
    let mut default: Vec<Word> = Vec::new();
    for (origin, text) in files {
        for line in text.lines() {
            let line = line.trim().trim_start_matches("export ").trim();
            let Some((name, value)) = line.split_once('=') else {
                continue;
            };
            if name != "GRUB_CMDLINE_LINUX" && name != GRUB_CMDLINE_KEY {
                continue;
            }
            let value = unquote(value);
            let mut words = Vec::new();
            for w in value.split_whitespace() {
                match w {
                    "$GRUB_CMDLINE_LINUX" | "${GRUB_CMDLINE_LINUX}" => {
                        words.extend(linux.iter().cloned())
                    }
                    "$GRUB_CMDLINE_LINUX_DEFAULT" | "${GRUB_CMDLINE_LINUX_DEFAULT}" => {
                        words.extend(default.iter().cloned())
                    }
                    _ => words.push(Word {
                        text: w.to_string(),
                        origin: origin.clone(),
                    }),
                }
            }
            if name == GRUB_CMDLINE_KEY {
                default = words;
            } else {
                linux = words;
            }
        }
    }
    linux.extend(default);
    linux
}

/// A shell value without its quotes and a trailing comment.
fn unquote(value: &str) -> &str {
    let value = value.trim();
    for q in ['"', '\''] {
        if let Some(rest) = value.strip_prefix(q) {
            return rest.split(q).next().unwrap_or("");
        }
    }
    value.split('#').next().unwrap_or("").trim()
}

/// `/etc/kernel/cmdline` with every `param=` of `params` set: an existing word replaced in
/// place (all of them, so none later overrides it), else appended to the last line.
pub(crate) fn edit_kernel_cmdline(text: &str, params: &[(String, String)]) -> String {
    let mut lines: Vec<Vec<String>> = text
        .lines()
        .map(|l| l.split_whitespace().map(str::to_string).collect())
        .collect();
    for (name, value) in params {
        let prefix = format!("{name}=");
        let word = format!("{name}={value}");
        let mut found = false;
        for w in lines.iter_mut().flatten() {
            if w.starts_with(&prefix) {
                *w = word.clone();
                found = true;
            }
        }
        if !found {
            match lines.iter_mut().rev().find(|l| !l.is_empty()) {
                Some(last) => last.push(word),
                None => lines.push(vec![word]),
            }
        }
    }
    let mut out: Vec<String> = lines.iter().map(|l| l.join(" ")).collect();
    while out.last().is_some_and(String::is_empty) {
        out.pop();
    }
    out.join("\n") + "\n"
}

/// The parameters gputune's GRUB drop-in already appends (a later apply keeps them).
pub(crate) fn drop_in_params(text: &str) -> Vec<(String, String)> {
    grub_words(&[(GRUB_DROP_IN.to_string(), text.to_string())])
        .into_iter()
        .filter_map(|w| {
            let (k, v) = w.text.split_once('=')?;
            Some((k.to_string(), v.to_string()))
        })
        .collect()
}

/// The drop-in's one line: `GRUB_CMDLINE_LINUX_DEFAULT` extended by `params`.
pub(crate) fn drop_in_line(params: &[(String, String)]) -> (String, String) {
    let words: Vec<String> = params.iter().map(|(k, v)| format!("{k}={v}")).collect();
    (
        GRUB_CMDLINE_KEY.to_string(),
        format!(
            "{GRUB_CMDLINE_KEY}=\"${GRUB_CMDLINE_KEY} {}\"",
            words.join(" ")
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::Tree;

    fn texts(words: &[Word]) -> Vec<&str> {
        words.iter().map(|w| w.text.as_str()).collect()
    }

    #[test]
    fn grub_files_are_sourced_in_order() {
        let files = vec![
            (
                GRUB_DEFAULT.to_string(),
                "GRUB_DEFAULT=0\nGRUB_CMDLINE_LINUX_DEFAULT=\"quiet\"\nGRUB_CMDLINE_LINUX=\"console=ttyS0 transparent_hugepage=always\"\n".to_string(),
            ),
            (
                "/etc/default/grub.d/50-cloud.cfg".to_string(),
                "GRUB_CMDLINE_LINUX_DEFAULT='quiet splash' # cloud\n".to_string(),
            ),
            (
                GRUB_DROP_IN.to_string(),
                "# Written by gputune\nGRUB_CMDLINE_LINUX_DEFAULT=\"$GRUB_CMDLINE_LINUX_DEFAULT transparent_hugepage=madvise\"\n".to_string(),
            ),
        ];
        let words = grub_words(&files);
        assert_eq!(
            texts(&words),
            [
                "console=ttyS0",
                "transparent_hugepage=always",
                "quiet",
                "splash",
                "transparent_hugepage=madvise"
            ]
        );
        assert_eq!(
            param(&words, "transparent_hugepage"),
            Some(("madvise", GRUB_DROP_IN))
        );
        // A later drop-in that assigns without extending throws gputune's words away.
        let mut later = files.clone();
        later.push((
            "/etc/default/grub.d/99-site.cfg".into(),
            "GRUB_CMDLINE_LINUX_DEFAULT=\"quiet\"\n".into(),
        ));
        assert_eq!(
            param(&grub_words(&later), "transparent_hugepage"),
            Some(("always", GRUB_DEFAULT))
        );
        assert_eq!(param(&grub_words(&[]), "transparent_hugepage"), None);
    }

    #[test]
    fn kernel_cmdline_edits_keep_the_rest() {
        let p = |v: &str| vec![("transparent_hugepage".to_string(), v.to_string())];
        let cases = [
            (
                "root=UUID=1 ro quiet\n",
                "root=UUID=1 ro quiet transparent_hugepage=madvise\n",
            ),
            (
                "root=/dev/vda1 transparent_hugepage=always ro\n",
                "root=/dev/vda1 transparent_hugepage=madvise ro\n",
            ),
            ("", "transparent_hugepage=madvise\n"),
            ("a\nb\n\n", "a\nb transparent_hugepage=madvise\n"),
        ];
        for (text, want) in cases {
            assert_eq!(edit_kernel_cmdline(text, &p("madvise")), want, "{text:?}");
        }
    }

    #[test]
    fn drop_in_round_trips() {
        let params = vec![
            ("transparent_hugepage".to_string(), "madvise".to_string()),
            ("iommu".to_string(), "pt".to_string()),
        ];
        let (key, line) = drop_in_line(&params);
        assert_eq!(key, "GRUB_CMDLINE_LINUX_DEFAULT");
        assert_eq!(
            line,
            "GRUB_CMDLINE_LINUX_DEFAULT=\"$GRUB_CMDLINE_LINUX_DEFAULT transparent_hugepage=madvise iommu=pt\""
        );
        assert_eq!(drop_in_params(&line), params);
    }

    #[test]
    fn loaders() {
        let tree = Tree::with(&[("/etc/os-release", "ID=debian\n")]);
        assert!(matches!(loader(&tree.root()), Loader::Grub(_)));
        let tree = Tree::with(&[("/usr/lib/systemd/boot/efi/systemd-bootx64.efi", "")]);
        assert!(matches!(loader(&tree.root()), Loader::Manual(_)));
        assert_eq!(loader(&tree.root()).file(), None);
        tree.file(KERNEL_CMDLINE, "root=/dev/vda1\n");
        assert_eq!(loader(&tree.root()), Loader::KernelInstall);
        let tree = Tree::with(&[(GRUB_DEFAULT, "GRUB_CMDLINE_LINUX=\"\"\n")]);
        assert_eq!(loader(&tree.root()).file(), Some(GRUB_DROP_IN));
        tree.file("/usr/sbin/grub2-mkconfig", "");
        assert!(matches!(loader(&tree.root()), Loader::Manual(why) if why.contains("grubby")));
        tree.file("/usr/sbin/update-grub", "");
        assert_eq!(loader(&tree.root()).file(), Some(GRUB_DROP_IN));
    }
}
