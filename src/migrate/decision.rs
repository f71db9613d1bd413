//! [`Decision`]: what a run does, decided from what was found and the plan (pure).

use super::RunPath;

/// What a run does, decided from the facts found (see `detect::decide`) and the plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Create the table at `to` with one history row.
    Fresh {
        /// The version created.
        to: u32,
    },
    /// Stamp the detected version, then apply steps `detected+1..=to` (none when already there).
    Bootstrap {
        /// The version the columns show.
        detected: u32,
        /// The version reached.
        to: u32,
    },
    /// Apply steps `from+1..=to`.
    Normal {
        /// The history's version.
        from: u32,
        /// The version reached.
        to: u32,
    },
    /// Nothing to do; `at` may exceed the target (never downgraded).
    UpToDate {
        /// The current version.
        at: u32,
    },
}

impl Decision {
    /// The path this decision takes.
    pub fn path(self) -> RunPath {
        match self {
            Decision::Fresh { .. } => RunPath::Fresh,
            Decision::Bootstrap { .. } => RunPath::Bootstrap,
            Decision::Normal { .. } => RunPath::Normal,
            Decision::UpToDate { .. } => RunPath::UpToDate,
        }
    }

    /// The version before the run (0 without a table).
    pub fn from_version(self) -> u32 {
        match self {
            Decision::Fresh { .. } => 0,
            Decision::Bootstrap { detected, .. } => detected,
            Decision::Normal { from, .. } => from,
            Decision::UpToDate { at } => at,
        }
    }

    /// The version after the run (never below the version before it).
    pub fn to_version(self) -> u32 {
        match self {
            Decision::Fresh { to } | Decision::Normal { to, .. } => to,
            Decision::Bootstrap { detected, to } => detected.max(to),
            Decision::UpToDate { at } => at,
        }
    }
}
