//! NCCL found and loaded at run time (dlopen), never linked: on nodes without it gputune
//! still runs and says what it searched. Lookup order: `$GPUTUNE_NCCL_LIB` (a file),
//! `LD_LIBRARY_PATH`, the dynamic linker's cache, then Python installs'
//! `site-packages/nvidia/nccl/lib/` (where PyTorch's NCCL wheel puts it).
//!
//! Only `libnccl.so.2` is looked for: it is the name NCCL installs under (cudarc's loader
//! tries `libnccl.so`, `.so.12`, `.so.11`, ... and so misses it).

use std::fmt;
use std::path::{Path, PathBuf};

pub(crate) use crate::ffi::nccl::{Nccl, NcclError, NcclVersion};

use super::Root;
use super::libsearch::{self, SYSTEM_PYTHON_PREFIXES};

/// The file name NCCL 2.x installs under.
pub(crate) const SONAME: &str = "libnccl.so.2";

/// Where a library was found, said in findings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Origin {
    /// `$GPUTUNE_NCCL_LIB`.
    EnvVar,
    /// A directory of `LD_LIBRARY_PATH`.
    LdLibraryPath,
    /// `/etc/ld.so.cache`.
    LinkerCache,
    /// A Python install's `site-packages` (PyTorch's `nvidia-nccl-cu12` wheel).
    Python,
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Origin::EnvVar => "$GPUTUNE_NCCL_LIB",
            Origin::LdLibraryPath => "LD_LIBRARY_PATH",
            Origin::LinkerCache => "the dynamic linker's cache",
            Origin::Python => "a Python site-packages",
        })
    }
}

/// A library file and how it was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Located {
    /// The real path to open (under the root when the root is not `/`).
    pub path: PathBuf,
    pub origin: Origin,
    /// The path inside the root when the library was found there (the linker's cache or a
    /// site-packages); `None` for `$GPUTUNE_NCCL_LIB` and `LD_LIBRARY_PATH`, which name
    /// files of the invoking host.
    pub host_path: Option<String>,
}

impl Located {
    /// A file the invoking host named (`$GPUTUNE_NCCL_LIB`, `LD_LIBRARY_PATH`): it has no
    /// path inside the root.
    fn named(path: PathBuf, origin: Origin) -> Located {
        Located {
            path,
            origin,
            host_path: None,
        }
    }
}

/// The process environment the search depends on, captured once so tests can set it:
/// `$GPUTUNE_NCCL_LIB` and what every library search reads ([`libsearch::SearchEnv`]).
#[derive(Debug, Clone, Default)]
pub(crate) struct SearchEnv {
    pub gputune_nccl_lib: Option<String>,
    pub libs: libsearch::SearchEnv,
}

impl SearchEnv {
    pub(crate) fn from_process() -> Self {
        SearchEnv {
            gputune_nccl_lib: std::env::var("GPUTUNE_NCCL_LIB")
                .ok()
                .filter(|v| !v.is_empty()),
            libs: libsearch::SearchEnv::from_process(),
        }
    }
}

/// The first `libnccl.so.2` in lookup order, or every place searched.
pub(crate) fn locate(root: &Root, env: &SearchEnv) -> Result<Located, Vec<String>> {
    let mut searched = Vec::new();
    if let Some(file) = &env.gputune_nccl_lib {
        // An explicit path is the user's choice: taken as given, even under --root.
        let path = PathBuf::from(file);
        if path.is_file() {
            return Ok(Located::named(path, Origin::EnvVar));
        }
        searched.push(format!("$GPUTUNE_NCCL_LIB={file} (no such file)"));
    }
    // The environment describes this process, so it only speaks for the live node.
    if root.is_live()
        && let Some(dirs) = &env.libs.ld_library_path
    {
        for dir in dirs.split(':').filter(|d| !d.is_empty()) {
            let path = Path::new(dir).join(SONAME);
            if path.is_file() {
                return Ok(Located::named(path, Origin::LdLibraryPath));
            }
        }
        searched.push(format!("LD_LIBRARY_PATH={dirs}"));
    }
    match root.read_optional_bytes("/etc/ld.so.cache") {
        Ok(Some(bytes)) => match super::ldcache::parse(&bytes) {
            Ok(cache) => {
                if let Some(host) = cache
                    .get(SONAME)
                    .into_iter()
                    .flatten()
                    .find(|p| root.is_file(p))
                {
                    return Ok(Located {
                        path: root.path(host),
                        origin: Origin::LinkerCache,
                        host_path: Some(host.to_string()),
                    });
                }
                searched.push("/etc/ld.so.cache".into());
            }
            Err(e) => searched.push(format!("/etc/ld.so.cache (unreadable: {e})")),
        },
        Ok(None) => searched.push("/etc/ld.so.cache (absent)".into()),
        Err(e) => searched.push(e.to_string()),
    }
    let extra: Vec<&str> = if root.is_live() {
        env.libs
            .python_prefixes
            .iter()
            .map(String::as_str)
            .collect()
    } else {
        Vec::new()
    };
    for prefix in extra
        .iter()
        .copied()
        .chain(SYSTEM_PYTHON_PREFIXES.iter().copied())
    {
        if let Some(host) = python_nccl(root, prefix) {
            return Ok(Located {
                path: root.path(&host),
                origin: Origin::Python,
                host_path: Some(host),
            });
        }
        searched.push(format!(
            "{prefix}/lib/python3*/{{site,dist}}-packages/nvidia/nccl/lib"
        ));
    }
    Err(searched)
}

/// `PREFIX/lib/python3*/{site,dist}-packages/nvidia/nccl/lib/libnccl.so.2` (its host path),
/// newest Python first.
fn python_nccl(root: &Root, prefix: &str) -> Option<String> {
    let lib = format!("{}/lib", prefix.trim_end_matches('/'));
    let mut pythons: Vec<String> = root
        .list_dir(&lib)
        .ok()
        .flatten()?
        .into_iter()
        .filter(|n| n.starts_with("python3"))
        .collect();
    pythons.reverse();
    pythons
        .iter()
        .flat_map(|py| {
            ["site-packages", "dist-packages"]
                .map(|pkgs| format!("{lib}/{py}/{pkgs}/nvidia/nccl/lib/{SONAME}"))
        })
        .find(|p| root.is_file(p))
}

/// NCCL's version at `located`. Only the live node's library is loaded (and asked with
/// `ncclGetVersion`); a library inside another root is read, never loaded (see
/// [`super::libversion`]), and `$GPUTUNE_NCCL_LIB` counts as the live node's (the invoking
/// user named it).
pub(crate) fn version_of(root: &Root, located: &Located) -> Result<NcclVersion, NcclError> {
    match (&located.host_path, root.is_live()) {
        (Some(host), false) => match super::libversion::nccl(root, host) {
            Ok((major, minor, patch)) => Ok(NcclVersion {
                major,
                minor,
                patch,
                code: (major * 10000 + minor * 100 + patch) as i32,
            }),
            Err(tried) => Err(NcclError::Unread {
                path: located.path.clone(),
                reason: tried.to_string(),
            }),
        },
        _ => Nccl::open(&located.path)?.version(),
    }
}

/// Loads the library at `located` for use, refusing one that belongs to another root.
pub(crate) fn load(root: &Root, located: &Located) -> Result<Nccl, NcclError> {
    if located.host_path.is_some() && !root.is_live() {
        return Err(NcclError::NotLive {
            path: located.path.clone(),
            root: root.dir().to_path_buf(),
        });
    }
    Nccl::open(&located.path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::Tree;

    #[test]
    fn version_codes() {
        assert_eq!(NcclVersion::from_code(23203).to_string(), "2.32.3");
        assert_eq!(NcclVersion::from_code(21805).to_string(), "2.18.5");
        assert_eq!(NcclVersion::from_code(2804).to_string(), "2.8.4");
    }

    /// A root holding these files, none of them really a library.
    fn fake_root(files: &[&str]) -> Tree {
        let tree = Tree::new();
        for f in files {
            tree.file(f, "not really a library");
        }
        tree
    }

    #[test]
    fn lookup_order_under_a_root() {
        let tree = fake_root(&[
            "/usr/lib/python3.10/site-packages/nvidia/nccl/lib/libnccl.so.2",
            "/usr/local/lib/python3.11/dist-packages/nvidia/nccl/lib/libnccl.so.2",
        ]);
        let root = tree.root();
        let found = locate(&root, &SearchEnv::default()).unwrap();
        assert_eq!(found.origin, Origin::Python);
        assert!(
            found
                .path
                .ends_with("usr/local/lib/python3.11/dist-packages/nvidia/nccl/lib/libnccl.so.2"),
            "{found:?}"
        );

        let explicit = tree.path("/usr/lib/python3.10/site-packages/nvidia/nccl/lib/libnccl.so.2");
        let env = SearchEnv {
            gputune_nccl_lib: Some(explicit.display().to_string()),
            ..SearchEnv::default()
        };
        assert_eq!(
            locate(&root, &env).unwrap(),
            Located {
                path: explicit,
                origin: Origin::EnvVar,
                host_path: None,
            }
        );
    }

    #[test]
    fn nothing_found_lists_every_place_searched() {
        let tree = fake_root(&[]);
        let env = SearchEnv {
            gputune_nccl_lib: Some("/nonexistent/libnccl.so.2".into()),
            ..SearchEnv::default()
        };
        let searched = locate(&tree.root(), &env).unwrap_err();
        assert!(searched[0].contains("/nonexistent/libnccl.so.2"));
        assert!(searched.iter().any(|s| s.contains("ld.so.cache")));
        assert!(
            searched
                .iter()
                .any(|s| s.contains("/usr/local/lib/python3*"))
        );
    }

    #[test]
    fn a_file_that_is_not_a_library_fails_to_load_with_its_path() {
        let tree = fake_root(&["/lib/libnccl.so.2"]);
        let path = tree.path("/lib/libnccl.so.2");
        let Err(err) = Nccl::open(&path) else {
            panic!("a text file loaded as a library")
        };
        assert!(
            err.to_string().contains(&path.display().to_string()),
            "{err}"
        );
    }
}

#[cfg(test)]
mod real_library {
    use super::*;

    /// Under a root other than `/`, the real library's version comes from its `.rodata`
    /// and matches what `ncclGetVersion` says when it is loaded.
    #[test]
    fn an_image_library_is_read_not_loaded_and_agrees_with_the_loaded_one() {
        let lib = crate::ffi::nccl::test_library();
        let dir = lib.parent().unwrap();
        let root = Root::new(dir);
        let located = Located {
            path: lib.clone(),
            origin: Origin::Python,
            host_path: Some("/libnccl.so.2".into()),
        };
        let read = version_of(&root, &located).unwrap();
        let loaded = Nccl::open(&lib).unwrap().version().unwrap();
        assert_eq!(read.to_string(), loaded.to_string());
        assert!(matches!(
            load(&root, &located),
            Err(NcclError::NotLive { .. })
        ));
    }

    #[test]
    fn is_found_through_ld_library_path() {
        let lib = crate::ffi::nccl::test_library();
        let env = SearchEnv {
            libs: libsearch::SearchEnv {
                ld_library_path: Some(format!("/nonexistent:{}", lib.parent().unwrap().display())),
                ..libsearch::SearchEnv::default()
            },
            ..SearchEnv::default()
        };
        let found = locate(&Root::live(), &env).unwrap();
        assert_eq!(
            found,
            Located {
                path: lib,
                origin: Origin::LdLibraryPath,
                host_path: None,
            }
        );
    }
}
