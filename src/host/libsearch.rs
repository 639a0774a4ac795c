//! Finding a shared library or a Python package's files the way the NCCL lookup does
//! (`host::nccl`): `LD_LIBRARY_PATH` (live node only), the dynamic linker's cache, then
//! Python installs' `site-packages` and a few vendor directories. Nothing found here is
//! loaded: cuDNN, torch and NCCL network plugins are judged from their files.

use std::fmt;

use super::Root;

/// Where a file was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Origin {
    LdLibraryPath,
    LinkerCache,
    Directory,
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Origin::LdLibraryPath => "LD_LIBRARY_PATH",
            Origin::LinkerCache => "the dynamic linker's cache",
            Origin::Directory => "a vendor library directory",
        })
    }
}

/// A file found: its host path (as seen on the node) and how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Found {
    pub path: String,
    pub origin: Origin,
}

/// The process environment the search depends on, captured once so tests can set it.
#[derive(Debug, Clone, Default)]
pub(crate) struct SearchEnv {
    pub ld_library_path: Option<String>,
    /// `$VIRTUAL_ENV`, `$CONDA_PREFIX`, `$HOME/.local`: Python prefixes beyond the system's.
    pub python_prefixes: Vec<String>,
}

impl SearchEnv {
    pub(crate) fn from_process() -> Self {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
        let mut python_prefixes: Vec<String> = ["VIRTUAL_ENV", "CONDA_PREFIX"]
            .iter()
            .filter_map(|n| var(n))
            .collect();
        if let Some(home) = var("HOME") {
            python_prefixes.push(format!("{home}/.local"));
        }
        SearchEnv {
            ld_library_path: var("LD_LIBRARY_PATH"),
            python_prefixes,
        }
    }
}

/// System Python prefixes, as `host::nccl` searches them.
pub(crate) const SYSTEM_PYTHON_PREFIXES: &[&str] = &["/usr/local", "/usr", "/opt/conda"];

/// Where vendors put NCCL network plugins outside the linker's path.
const VENDOR_DIRS: &[&str] = &[
    "/opt/amazon/ofi-nccl/lib",
    "/opt/amazon/ofi-nccl/lib64",
    "/opt/aws-ofi-nccl/lib",
    "/usr/local/lib",
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/usr/lib64",
];

/// The first of `names` (file names such as `libibverbs.so.1`), or every place searched.
pub(crate) fn find_any(root: &Root, env: &SearchEnv, names: &[&str]) -> Result<Found, Vec<String>> {
    let mut searched = Vec::new();
    if root.is_live()
        && let Some(dirs) = &env.ld_library_path
    {
        for dir in dirs.split(':').filter(|d| d.starts_with('/')) {
            for name in names {
                let path = format!("{}/{name}", dir.trim_end_matches('/'));
                if root.is_file(&path) {
                    return Ok(Found {
                        path,
                        origin: Origin::LdLibraryPath,
                    });
                }
            }
        }
        searched.push(format!("LD_LIBRARY_PATH={dirs}"));
    }
    match root.read_optional_bytes("/etc/ld.so.cache") {
        Ok(Some(bytes)) => match super::ldcache::parse(&bytes) {
            Ok(cache) => {
                for name in names {
                    if let Some(path) = cache
                        .get(*name)
                        .into_iter()
                        .flatten()
                        .find(|p| root.is_file(p))
                    {
                        return Ok(Found {
                            path: path.clone(),
                            origin: Origin::LinkerCache,
                        });
                    }
                }
                searched.push("/etc/ld.so.cache".into());
            }
            Err(e) => searched.push(format!("/etc/ld.so.cache (unreadable: {e})")),
        },
        Ok(None) => searched.push("/etc/ld.so.cache (absent)".into()),
        Err(e) => searched.push(e.to_string()),
    }
    for dir in VENDOR_DIRS {
        for name in names {
            let path = format!("{dir}/{name}");
            if root.is_file(&path) {
                return Ok(Found {
                    path,
                    origin: Origin::Directory,
                });
            }
        }
    }
    searched.push(VENDOR_DIRS.join(", "));
    Err(searched)
}

/// Every `site-packages`/`dist-packages` directory (host paths) of the Python installs
/// under the prefixes, live prefixes first, newest Python first.
pub(crate) fn site_packages(root: &Root, env: &SearchEnv) -> Vec<String> {
    let live: Vec<&str> = if root.is_live() {
        env.python_prefixes.iter().map(String::as_str).collect()
    } else {
        Vec::new()
    };
    let mut out = Vec::new();
    for prefix in live
        .into_iter()
        .chain(SYSTEM_PYTHON_PREFIXES.iter().copied())
    {
        let lib = format!("{}/lib", prefix.trim_end_matches('/'));
        let mut pythons: Vec<String> = root
            .list_dir(&lib)
            .ok()
            .flatten()
            .unwrap_or_default()
            .into_iter()
            .filter(|n| n.starts_with("python3"))
            .collect();
        pythons.sort_by_key(|p| python_minor(p));
        pythons.reverse();
        for py in pythons {
            for pkgs in ["site-packages", "dist-packages"] {
                let dir = format!("{lib}/{py}/{pkgs}");
                if root.is_dir(&dir) {
                    out.push(dir);
                }
            }
        }
    }
    out
}

/// `python3.12` → 12, for ordering (`python3.9` is older than `python3.10`).
fn python_minor(name: &str) -> u32 {
    name.trim_start_matches("python3.")
        .parse()
        .unwrap_or_default()
}

/// Where the search looks for Python packages, for messages.
pub(crate) fn site_packages_pattern() -> String {
    format!(
        "{{$VIRTUAL_ENV,$CONDA_PREFIX,~/.local,{}}}/lib/python3*/{{site,dist}}-packages",
        SYSTEM_PYTHON_PREFIXES.join(",")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::Tree;

    #[test]
    fn finds_in_vendor_dirs_and_site_packages_under_a_root() {
        let tree = Tree::new();
        tree.file("/opt/amazon/ofi-nccl/lib/libnccl-net-ofi.so", "\x7fELF");
        let root = tree.root();
        let env = SearchEnv::default();
        let found = find_any(&root, &env, &["libnccl-net-ofi.so"]).unwrap();
        assert_eq!(found.path, "/opt/amazon/ofi-nccl/lib/libnccl-net-ofi.so");
        assert_eq!(found.origin, Origin::Directory);
        let missing = find_any(&root, &env, &["libibverbs.so.1"]).unwrap_err();
        assert!(missing.iter().any(|s| s.contains("ld.so.cache (absent)")));

        for py in ["python3.9", "python3.12"] {
            tree.dir(&format!("/usr/lib/{py}/dist-packages"));
        }
        assert_eq!(
            site_packages(&root, &env),
            [
                "/usr/lib/python3.12/dist-packages",
                "/usr/lib/python3.9/dist-packages"
            ]
        );
    }
}
