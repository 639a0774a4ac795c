//! PyTorch as installed in the node's Python site-packages, read from `torch/version.py`
//! (never imported): the torch version and the CUDA version its wheel was built for, which
//! the NVIDIA driver must support.

use super::Root;
use super::libsearch::{self, SearchEnv};

/// torch as found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Torch {
    /// `torch/version.py` (host path).
    pub path: String,
    /// `2.3.0+cu121`.
    pub version: Option<String>,
    /// `12.1`; `None` for CPU-only and ROCm builds.
    pub cuda: Option<String>,
}

/// The string value of a top-level assignment in `version.py`: `cuda = '12.1'`,
/// `cuda: Optional[str] = '12.1'`, `__version__ = "2.3.0+cu121"`; `None` for `None`.
pub(crate) fn assignment(text: &str, name: &str) -> Option<String> {
    text.lines().find_map(|l| {
        let rest = l.strip_prefix(name)?;
        if !rest.starts_with([' ', ':', '=']) {
            return None;
        }
        let value = rest.split_once('=')?.1.trim();
        let quoted = value
            .strip_prefix('\'')
            .and_then(|v| v.split_once('\''))
            .or_else(|| value.strip_prefix('"').and_then(|v| v.split_once('"')))?;
        Some(quoted.0.to_string()).filter(|v| !v.is_empty())
    })
}

/// No torch in any site-packages directory; says where it looked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("no torch/version.py in {}", libsearch::site_packages_pattern())]
pub(crate) struct NoTorch;

/// The first torch in the site-packages search order.
pub(crate) fn locate(root: &Root, env: &SearchEnv) -> Result<Torch, NoTorch> {
    for site in libsearch::site_packages(root, env) {
        let path = format!("{site}/torch/version.py");
        if let Ok(Some(text)) = root.read_optional(&path) {
            return Ok(Torch {
                version: assignment(&text, "__version__"),
                cuda: assignment(&text, "cuda"),
                path,
            });
        }
    }
    Err(NoTorch)
}

/// The CUDA version each NVIDIA driver branch supports at most, from the minimum driver of
/// each CUDA release (CUDA Toolkit release notes, table "CUDA Toolkit and Corresponding
/// Driver Versions", Linux x86_64 GA minimums), newest first.
const DRIVER_MINIMUMS: &[(&str, &str)] = &[
    ("13.0", "580.65.06"),
    ("12.9", "575.51.03"),
    ("12.8", "570.26"),
    ("12.6", "560.28.03"),
    ("12.5", "555.42.02"),
    ("12.4", "550.54.14"),
    ("12.3", "545.23.06"),
    ("12.2", "535.54.03"),
    ("12.1", "530.30.02"),
    ("12.0", "525.60.13"),
    ("11.8", "520.61.05"),
    ("11.7", "515.43.04"),
    ("11.6", "510.39.01"),
    ("11.5", "495.29.05"),
    ("11.4", "470.42.01"),
    ("11.3", "465.19.01"),
    ("11.2", "460.27.03"),
    ("11.1", "455.23"),
    ("11.0", "450.36.06"),
];

/// The newest CUDA version a driver version supports, by the release notes' table.
pub(crate) fn cuda_for_driver(driver: &str) -> Option<&'static str> {
    use super::version::Version;
    let d = Version::parse(driver)?;
    DRIVER_MINIMUMS
        .iter()
        .find(|(_, min)| Version::parse(min).is_some_and(|m| d >= m))
        .map(|(cuda, _)| *cuda)
}

/// The minimum driver of a CUDA major version (its `.0` release): with CUDA's minor version
/// compatibility, any 12.x runtime starts on a 12.0 driver, though PTX JIT of newer code
/// fails there.
pub(crate) fn major_minimum(cuda: &str) -> Option<&'static str> {
    let major = cuda.split('.').next()?;
    DRIVER_MINIMUMS
        .iter()
        .rev()
        .find(|(c, _)| c.split('.').next() == Some(major))
        .map(|(_, d)| *d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::Tree;

    #[test]
    fn locates_the_first_torch_or_says_where_it_looked() {
        let tree = Tree::new();
        let env = SearchEnv::default();
        assert_eq!(locate(&tree.root(), &env), Err(NoTorch));
        assert_eq!(
            NoTorch.to_string(),
            format!(
                "no torch/version.py in {}",
                libsearch::site_packages_pattern()
            )
        );
        tree.file(
            "/usr/lib/python3.11/dist-packages/torch/version.py",
            "__version__ = '2.3.0+cu121'\ncuda = '12.1'\n",
        );
        let found = locate(&tree.root(), &env).unwrap();
        assert_eq!(
            found.path,
            "/usr/lib/python3.11/dist-packages/torch/version.py"
        );
        assert_eq!(found.cuda.as_deref(), Some("12.1"));
    }

    #[test]
    fn version_py_assignments() {
        let text = "__version__ = '2.3.0+cu121'\ndebug = False\ncuda: Optional[str] = '12.1'\ngit_version = 'abc'\nhip: Optional[str] = None\n";
        assert_eq!(
            assignment(text, "__version__").as_deref(),
            Some("2.3.0+cu121")
        );
        assert_eq!(assignment(text, "cuda").as_deref(), Some("12.1"));
        assert_eq!(assignment(text, "hip"), None);
        assert_eq!(assignment("cuda = None\n", "cuda"), None);
        assert_eq!(assignment("cudaX = '1'\n", "cuda"), None);
        assert_eq!(
            assignment("cuda = \"11.8\"\n", "cuda").as_deref(),
            Some("11.8")
        );
    }

    #[test]
    fn drivers_and_cuda() {
        assert_eq!(cuda_for_driver("550.54.15"), Some("12.4"));
        assert_eq!(cuda_for_driver("535.104.05"), Some("12.2"));
        assert_eq!(cuda_for_driver("525.60.13"), Some("12.0"));
        assert_eq!(cuda_for_driver("580.95.05"), Some("13.0"));
        assert_eq!(cuda_for_driver("440.33.01"), None);
        assert_eq!(major_minimum("12.4"), Some("525.60.13"));
        assert_eq!(major_minimum("11.8"), Some("450.36.06"));
    }
}
