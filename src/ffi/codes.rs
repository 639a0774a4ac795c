//! Result codes of C libraries (`CUresult`, `ncclResult_t`), declared once each: a C int
//! kept as is (a newer library may return codes this list lacks), a constant per known code,
//! and a `Display` that prints the header's name, or the number for an unknown code.

/// Declares a result-code type: `struct Name, unknown = "prefix";` then one
/// `CONST = value, "c_name";` per code.
macro_rules! result_codes {
    (
        $(#[$meta:meta])*
        $vis:vis struct $ty:ident, unknown = $unknown:literal;
        $($(#[$code_meta:meta])* $code:ident = $value:literal, $c_name:literal;)*
    ) => {
        $(#[$meta])*
        #[repr(transparent)]
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        $vis struct $ty(pub std::ffi::c_int);

        impl $ty {
            // The header mirrored whole: a code is named here even where no branch tests for it.
            $($(#[$code_meta])* #[allow(dead_code)] pub const $code: $ty = $ty($value);)*

            /// Every code with a name (for the tests that check the names).
            #[cfg(test)]
            pub(crate) const KNOWN: &'static [$ty] = &[$($ty($value)),*];

            /// The header's name for the code, when it is one this binding knows.
            pub(crate) fn name(self) -> Option<&'static str> {
                match self.0 {
                    $($value => Some($c_name),)*
                    _ => None,
                }
            }
        }

        impl std::fmt::Display for $ty {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                match self.name() {
                    Some(name) => f.write_str(name),
                    None => write!(f, "{} {}", $unknown, self.0),
                }
            }
        }
    };
}

pub(crate) use result_codes;
