//! Idle sessions kept between tables, so a run over many tables does not pay a connection
//! handshake per table; at most `--concurrency` are ever open per database.

use std::sync::Mutex;

use tokio_util::sync::CancellationToken;

use crate::converge::{self, ConvergeError, Target};
use crate::db::Session;
use crate::migrate::{Outcome, Plan, Preview};

/// Which database a session reaches: connection string and CA bundle.
pub type SessionKey = (String, Option<Vec<u8>>);

/// The idle sessions, by database.
#[derive(Default)]
pub struct Sessions(Mutex<Vec<(SessionKey, Session)>>);

impl Sessions {
    fn take(&self, key: &SessionKey) -> Option<Session> {
        let mut idle = self.0.lock().ok()?;
        let at = idle.iter().position(|(k, _)| k == key)?;
        Some(idle.swap_remove(at).1)
    }

    fn give_back(&self, key: SessionKey, session: Session) {
        if let Ok(mut idle) = self.0.lock() {
            idle.push((key, session));
        }
    }

    async fn open(&self, key: &SessionKey, target: &Target<'_>) -> Result<Session, ConvergeError> {
        match self.take(key) {
            Some(session) if !session.is_closed() => Ok(session),
            _ => converge::open(target).await,
        }
    }

    /// Migrates on an idle session for the same database when there is one; the session is kept
    /// only after a clean run (after a failure it may be mid-cancel or broken, so it is closed).
    ///
    /// # Errors
    /// [`ConvergeError`] for the step that failed.
    pub async fn migrate(
        &self,
        key: SessionKey,
        target: &Target<'_>,
        plan: &Plan,
        cancel: &CancellationToken,
    ) -> Result<Outcome, ConvergeError> {
        let mut session = self.open(&key, target).await?;
        let outcome = converge::migrate_on(&mut session, plan, cancel, |_| {}).await?;
        self.give_back(key, session);
        Ok(outcome)
    }

    /// Plans on an idle session for the same database when there is one.
    ///
    /// # Errors
    /// [`ConvergeError`] for the step that failed.
    pub async fn preview(
        &self,
        key: SessionKey,
        target: &Target<'_>,
        plan: &Plan,
    ) -> Result<Preview, ConvergeError> {
        let session = self.open(&key, target).await?;
        let preview = converge::preview(&session, plan).await?;
        self.give_back(key, session);
        Ok(preview)
    }
}
