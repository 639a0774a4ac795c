//! A C library loaded at run time, and one entry of its function table: the crate's one
//! dlopen and dlsym. Each library's module resolves its table once, when the library opens,
//! into [`Symbol`]s, each the function or the name it is missing under, so a function an
//! older library lacks fails only the calls that need it (as nvml-wrapper-sys keeps one
//! `Result` per symbol).

use std::path::{Path, PathBuf};

/// A library and the function table resolved from it, kept together so the table is only
/// called while the library is loaded.
pub(crate) struct Loaded<T> {
    table: T,
    library: Library,
}

/// A library that could not be loaded: where, and the loader's words.
#[derive(Debug, thiserror::Error)]
#[error("cannot load {}: {message}", path.display())]
pub struct LoadError {
    pub path: PathBuf,
    pub message: String,
}

impl<T> Loaded<T> {
    /// Loads the library at `path` and resolves its table with `load` (a table's own
    /// `load`, see [`symbol_table`]).
    ///
    /// # Safety
    /// As [`Library::open`].
    pub(crate) unsafe fn open(path: &Path, load: fn(&Library) -> T) -> Result<Self, LoadError> {
        // SAFETY: the caller vouches for the library's initialisers.
        let library = unsafe { Library::open(path) }.map_err(|e| LoadError {
            path: path.to_path_buf(),
            message: e.to_string(),
        })?;
        Ok(Loaded {
            table: load(&library),
            library,
        })
    }

    pub(crate) fn table(&self) -> &T {
        &self.table
    }

    pub(crate) fn path(&self) -> &Path {
        self.library.path()
    }
}

/// A loaded library and where it came from.
pub(crate) struct Library {
    path: PathBuf,
    inner: libloading::Library,
}

impl Library {
    /// Loads the library at `path` (a bare file name goes through the linker's search).
    /// It stays mapped until the process exits (`RTLD_NODELETE`): NCCL starts threads of its
    /// own (`ncclGetUniqueId`'s bootstrap root waits for ranks that may never come) which
    /// would run unmapped code, and crash the process, if closing the handle unloaded it.
    ///
    /// # Safety
    /// Loading runs the library's initialisers: `path` must name a library whose
    /// initialisers are sound to run in this process (the CUDA driver, NCCL).
    pub(crate) unsafe fn open(path: &Path) -> Result<Library, libloading::Error> {
        use libloading::os::unix;
        let flags = unix::RTLD_LAZY | unix::RTLD_LOCAL | libc::RTLD_NODELETE;
        // SAFETY: the caller vouches for the library's initialisers.
        let inner: libloading::Library = unsafe { unix::Library::open(Some(path), flags) }?.into();
        Ok(Library {
            path: path.to_path_buf(),
            inner,
        })
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// The function `name`, or an empty entry when the library does not export it.
    ///
    /// # Safety
    /// `F` must be the C signature of `name`, and the function may only be called while
    /// this library stays loaded (keep the two together, as each module's table does).
    pub(crate) unsafe fn symbol<F: Copy>(&self, name: &'static str) -> Symbol<F> {
        // SAFETY: the caller vouches for the signature and the lifetime.
        let function = unsafe { self.inner.get::<F>(name.as_bytes()) }
            .ok()
            .map(|s| *s);
        Symbol { name, function }
    }
}

/// Declares a library's function table, one `"c_name" => fn field(args) -> result;` per C
/// function: a struct with one [`Symbol`] per function, a `load` that resolves them all in a
/// [`Library`], and (for tests) `missing`, the C names the library lacks. Written
/// `unsafe struct`: the invocation vouches that each signature is the C one.
macro_rules! symbol_table {
    (
        $(#[$meta:meta])*
        unsafe struct $table:ident {
            $(
                $(#[$field_meta:meta])*
                $c_name:literal => fn $field:ident($($arg:ty),* $(,)?) -> $ret:ty;
            )*
        }
    ) => {
        $(#[$meta])*
        struct $table {
            $(
                $(#[$field_meta])*
                $field: $crate::ffi::library::Symbol<unsafe extern "C" fn($($arg),*) -> $ret>,
            )*
        }

        impl $table {
            /// Resolves every entry in `library`; a missing one stays empty.
            fn load(library: &$crate::ffi::library::Library) -> $table {
                $table {
                    // SAFETY: the `unsafe struct` declaring the table vouches for each
                    // signature; the table is kept beside its library (see each module's
                    // loaded type), so it is only called while the library is loaded.
                    $($field: unsafe { library.symbol($c_name) },)*
                }
            }

            /// The C names of the entries the library lacks.
            #[cfg(test)]
            fn missing(&self) -> Vec<&'static str> {
                [$(self.$field.get().err()),*].into_iter().flatten().map(|m| m.0).collect()
            }
        }
    };
}

pub(crate) use symbol_table;

/// A function of type `F` (an `unsafe extern "C" fn`), or its absence.
#[derive(Clone, Copy)]
pub(crate) struct Symbol<F> {
    name: &'static str,
    function: Option<F>,
}

/// A function the library does not export: its C name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Missing(pub &'static str);

impl<F: Copy> Symbol<F> {
    /// The function, or which one is missing.
    pub(crate) fn get(&self) -> Result<F, Missing> {
        self.function.ok_or(Missing(self.name))
    }

    /// The C name, for errors that say which call failed.
    pub(crate) fn name(&self) -> &'static str {
        self.name
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// libm is on every Linux system and exports `cos`, not `ncclCommShrink`.
    #[test]
    fn a_present_function_is_resolved_and_a_missing_one_names_itself() {
        // SAFETY: libm's initialisers are the C library's; `cos` is double cos(double).
        let libm = unsafe { Library::open(Path::new("libm.so.6")) }.unwrap();
        assert_eq!(libm.path(), Path::new("libm.so.6"));
        // SAFETY: as above.
        let cos: Symbol<unsafe extern "C" fn(f64) -> f64> = unsafe { libm.symbol("cos") };
        // SAFETY: `cos` takes and returns a double; libm stays loaded for the call.
        assert_eq!(cos.get().map(|f| unsafe { f(0.0) }), Ok(1.0));
        // SAFETY: never called.
        let missing: Symbol<unsafe extern "C" fn()> = unsafe { libm.symbol("ncclCommShrink") };
        assert_eq!(missing.get().err(), Some(Missing("ncclCommShrink")));
        assert_eq!(missing.name(), "ncclCommShrink");
    }

    #[test]
    fn a_file_that_is_no_library_fails_to_open() {
        // SAFETY: the file does not exist, so nothing is loaded.
        assert!(unsafe { Library::open(Path::new("/nonexistent/libnccl.so.2")) }.is_err());
    }
}
