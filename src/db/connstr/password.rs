//! [`Password`]: the secret from a connection string, redacted wherever it is printed.

use std::fmt;

/// A password that renders as `***` in `Debug` and `Display`.
#[derive(Clone, PartialEq, Eq)]
pub struct Password(pub(super) String);

impl Password {
    /// The secret itself, for the driver only.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Password {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}
