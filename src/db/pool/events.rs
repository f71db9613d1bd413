//! What the pool reports: why sessions were opened and closed, and to whom.

/// Why a session was opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Opened {
    /// No idle session for the key.
    NoneIdle,
    /// The idle session failed its check before lending (closed by the server, another backend).
    ReplacedBroken,
}

impl Opened {
    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Opened::NoneIdle => "none_idle",
            Opened::ReplacedBroken => "replaced_broken",
        }
    }

    /// Every value, for metrics that show each label from the start.
    pub const ALL: [Opened; 2] = [Opened::NoneIdle, Opened::ReplacedBroken];
}

/// Why a session was closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Closed {
    /// The pass that borrowed it did not end cleanly (error, cancel, lock in doubt, dropped).
    NotClean,
    /// It failed its check before lending, or its state check before going back.
    Broken,
    /// Idle past the idle timeout.
    IdleTimeout,
    /// The idle cap overall was reached.
    IdleCap,
    /// Its source now gives another key (a rotated Secret).
    Superseded,
    /// The pool was closed (shutdown), or keeps no session given back
    /// ([`super::SessionPool::keep_none`]).
    Shutdown,
}

impl Closed {
    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Closed::NotClean => "not_clean",
            Closed::Broken => "broken",
            Closed::IdleTimeout => "idle_timeout",
            Closed::IdleCap => "idle_cap",
            Closed::Superseded => "superseded",
            Closed::Shutdown => "shutdown",
        }
    }

    /// Every value, for metrics that show each label from the start.
    pub const ALL: [Closed; 6] = [
        Closed::NotClean,
        Closed::Broken,
        Closed::IdleTimeout,
        Closed::IdleCap,
        Closed::Superseded,
        Closed::Shutdown,
    ];
}

/// Told of every session opened and closed, and of the sizes after each change (metrics).
pub trait PoolEvents: Send + Sync {
    /// A session was opened.
    fn opened(&self, why: Opened);
    /// A session was closed.
    fn closed(&self, why: Closed);
    /// Sessions open (lent or idle) and idle, after a change.
    fn sizes(&self, open: usize, idle: usize);
}

/// Reports nowhere.
pub(super) struct NoEvents;

impl PoolEvents for NoEvents {
    fn opened(&self, _: Opened) {}
    fn closed(&self, _: Closed) {}
    fn sizes(&self, _: usize, _: usize) {}
}
