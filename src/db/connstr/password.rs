//! [`Password`]: the secret from a connection string, redacted wherever it is printed and zeroed
//! when dropped.

use std::fmt;

use zeroize::Zeroize;

/// A password that renders as `***` in `Debug` and is zeroed in memory when dropped.
#[derive(Clone, PartialEq, Eq, Hash)]
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

impl Drop for Password {
    fn drop(&mut self) {
        self.0.zeroize();
    }
}
