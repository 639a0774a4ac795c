//! The one fixture-tree builder: a node's files (`/proc`, `/sys`, `/etc`, ...) written into a
//! temporary directory that is removed when dropped. The unit tests (through
//! `crate::testing`) and the integration tests (through `tests/common`) compile this same
//! file, so it uses only std and tempfile; each side adds `root()` in its own terms.
#![allow(dead_code)] // each of the two crates that compile it uses part of it

use std::path::{Path, PathBuf};

/// A node tree in a temporary directory, removed when dropped.
pub struct Tree {
    dir: tempfile::TempDir,
}

impl Tree {
    pub fn new() -> Self {
        Tree {
            dir: tempfile::tempdir().expect("a temporary directory"),
        }
    }

    /// A tree holding `files`: (path inside the tree, text).
    pub fn with(files: &[(&str, &str)]) -> Self {
        let tree = Tree::new();
        for (path, text) in files {
            tree.file(path, text);
        }
        tree
    }

    /// The tree's directory on this machine.
    pub fn base(&self) -> &Path {
        self.dir.path()
    }

    /// Where `path` (absolute inside the tree) lies on this machine.
    pub fn path(&self, path: &str) -> PathBuf {
        self.base().join(path.trim_start_matches('/'))
    }

    /// Writes `text` at `path` (absolute inside the tree), creating its directories.
    pub fn file(&self, path: &str, text: &str) -> &Self {
        self.bytes(path, text.as_bytes())
    }

    /// Writes `content` at `path`, creating its directories.
    pub fn bytes(&self, path: &str, content: &[u8]) -> &Self {
        let full = self.path(path);
        std::fs::create_dir_all(full.parent().expect("a file has a parent"))
            .expect("fixture directories are created");
        std::fs::write(&full, content).expect("fixture files are written");
        self
    }

    /// A symbolic link at `path` pointing at `target` (taken as is).
    pub fn link(&self, path: &str, target: &str) -> &Self {
        let full = self.path(path);
        std::fs::create_dir_all(full.parent().expect("a link has a parent"))
            .expect("fixture directories are created");
        std::os::unix::fs::symlink(target, &full).expect("fixture links are made");
        self
    }

    /// A link at `link` to `target` (both absolute inside the tree) spelt relative, as
    /// sysfs has them, so it resolves the same inside and outside a confined root.
    pub fn sys_link(&self, link: &str, target: &str) -> &Self {
        let depth = Path::new(link)
            .parent()
            .expect("a link has a parent")
            .components()
            .count()
            - 1;
        let relative = format!("{}{}", "../".repeat(depth), target.trim_start_matches('/'));
        self.link(link, &relative)
    }

    /// An empty directory at `path`.
    pub fn dir(&self, path: &str) -> &Self {
        std::fs::create_dir_all(self.path(path)).expect("fixture directories are created");
        self
    }

    /// Writes profile `text` at `path` and returns where it lies on this machine, the way a
    /// user names a profile file.
    pub fn profile(&self, path: &str, text: &str) -> String {
        self.file(path, text);
        self.path(path)
            .to_str()
            .expect("a UTF-8 temporary path")
            .to_string()
    }
}

impl Default for Tree {
    fn default() -> Self {
        Tree::new()
    }
}
