//! Optional leader election on a coordination.k8s.io/v1 Lease. Correctness never depends on it
//! (the advisory lock serialises migrations); it only avoids duplicate work across replicas.
//!
//! The rules follow client-go's leader election:
//! - a standby tries every retry period and takes the Lease when it is free, or when its record
//!   has not changed for a whole lease duration on the standby's own monotonic clock (see
//!   [`observe`]; the holder's `renewTime` is never compared with the local wall clock);
//! - the leader renews every retry period and keeps leadership through failed renewals (5xx,
//!   429, timeouts, conflicts), giving it up only when the renew deadline passes without one
//!   success; the deadline is shorter than the lease duration, so the leader has stopped before
//!   any standby can consider the Lease expired;
//! - on shutdown the leader hands the Lease back, so a standby takes over at its next try.

pub mod observe;

use std::sync::Mutex;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, PostParams};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use observe::{Observer, Record, Verdict};

/// How long a Lease record may go unchanged before a standby takes it over.
pub const LEASE_DURATION: Duration = Duration::from_secs(15);
/// How long the leader keeps trying to renew before it gives leadership up.
pub const RENEW_DEADLINE: Duration = Duration::from_secs(10);
/// How often the leader renews and a standby tries.
pub const RETRY_PERIOD: Duration = Duration::from_secs(2);

/// The election's timing. `renew_deadline` must be shorter than `lease_duration`, and
/// `retry_period` shorter than `renew_deadline`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    /// See [`LEASE_DURATION`].
    pub lease_duration: Duration,
    /// See [`RENEW_DEADLINE`].
    pub renew_deadline: Duration,
    /// See [`RETRY_PERIOD`].
    pub retry_period: Duration,
}

impl Default for Timing {
    fn default() -> Self {
        Self {
            lease_duration: LEASE_DURATION,
            renew_deadline: RENEW_DEADLINE,
            retry_period: RETRY_PERIOD,
        }
    }
}

impl Timing {
    /// How long one Lease request may take: half the renew deadline (a stalled request is
    /// abandoned in time for a retry), at least one retry period.
    pub fn request_timeout(&self) -> Duration {
        (self.renew_deadline / 2).max(self.retry_period)
    }
}

/// Why a Lease request failed.
#[derive(Debug, thiserror::Error)]
pub enum LeaderError {
    /// The API server answered with an error, or could not be reached.
    #[error("lease {name} operation {operation} failed")]
    Lease {
        /// The Lease name.
        name: String,
        /// get, create, replace.
        operation: &'static str,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// The API server did not answer in time.
    #[error("lease {name} operation {operation} timed out after {timeout:?}")]
    Timeout {
        /// The Lease name.
        name: String,
        /// get, create, replace.
        operation: &'static str,
        /// The request timeout.
        timeout: Duration,
    },
}

/// How leadership ended.
#[derive(Debug)]
pub enum Ended {
    /// Shutdown: the Lease was handed back (or handing it back failed, logged).
    Shutdown,
    /// Another identity holds the Lease.
    TakenOver {
        /// Its holder.
        holder: String,
    },
    /// No renewal succeeded within the renew deadline.
    RenewDeadlinePassed {
        /// The last renewal error, if a renewal failed rather than stalled.
        last_error: Option<LeaderError>,
    },
}

/// The outcome of one election round.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Round {
    /// This identity holds the Lease and has just written it.
    Held,
    /// Another identity holds a live Lease.
    Elsewhere(String),
    /// Someone else wrote the Lease between our read and our write.
    Conflict,
}

/// A Lease-based elector for one identity.
pub struct LeaderElector {
    api: Api<Lease>,
    name: String,
    identity: String,
    timing: Timing,
    observer: Mutex<Observer>,
}

impl LeaderElector {
    /// An elector for Lease `name` in the namespace of `api`, as `identity` (the pod name).
    pub fn new(api: Api<Lease>, name: &str, identity: &str) -> Self {
        Self {
            api,
            name: name.to_owned(),
            identity: identity.to_owned(),
            timing: Timing::default(),
            observer: Mutex::new(Observer::default()),
        }
    }

    /// Overrides the timing (tests use short ones).
    pub fn with_timing(mut self, timing: Timing) -> Self {
        self.timing = timing;
        self
    }

    /// Waits until this identity holds the Lease; `false` when `cancel` fired first. Failed
    /// rounds are retried every retry period; `healthy` hears after each round whether the API
    /// server answered (a standby's readiness).
    ///
    /// # Cancel safety
    /// Returns promptly when `cancel` fires, also during a request.
    pub async fn acquire(&self, cancel: &CancellationToken, mut healthy: impl FnMut(bool)) -> bool {
        loop {
            let round = tokio::select! {
                () = cancel.cancelled() => return false,
                round = self.round() => round,
            };
            match round {
                Ok(Round::Held) => {
                    healthy(true);
                    return true;
                }
                Ok(Round::Elsewhere(_) | Round::Conflict) => healthy(true),
                Err(error) => {
                    tracing::warn!(error = %crate::report::chain(&error), "leader election round failed; retrying");
                    healthy(false);
                }
            }
            tokio::select! {
                () = cancel.cancelled() => return false,
                () = tokio::time::sleep(self.timing.retry_period) => {}
            }
        }
    }

    /// Renews the Lease every retry period until leadership ends, and says how it ended. Failed
    /// renewals are retried until the renew deadline; on `cancel` the Lease is handed back.
    pub async fn keep(&self, cancel: &CancellationToken) -> Ended {
        let mut renewed = Instant::now();
        let mut last_error = None;
        loop {
            let deadline = renewed + self.timing.renew_deadline;
            let wake = (Instant::now() + self.timing.retry_period).min(deadline);
            let round = tokio::select! {
                () = cancel.cancelled() => return self.hand_back().await,
                () = tokio::time::sleep_until(wake) => {
                    tokio::select! {
                        () = cancel.cancelled() => return self.hand_back().await,
                        round = tokio::time::timeout_at(deadline, self.round()) => round,
                    }
                }
            };
            match round {
                Ok(Ok(Round::Held)) => {
                    renewed = Instant::now();
                    last_error = None;
                }
                Ok(Ok(Round::Elsewhere(holder))) => return Ended::TakenOver { holder },
                Ok(Ok(Round::Conflict)) => {}
                Ok(Err(error)) => {
                    tracing::warn!(error = %crate::report::chain(&error), "lease renewal failed; retrying until the renew deadline");
                    last_error = Some(error);
                }
                Err(_elapsed) => {}
            }
            if Instant::now() >= renewed + self.timing.renew_deadline {
                return Ended::RenewDeadlinePassed { last_error };
            }
        }
    }

    async fn hand_back(&self) -> Ended {
        if let Err(error) = self.release().await {
            tracing::warn!(error = %crate::report::chain(&error), "handing the lease back failed; a standby takes over once it expires");
        }
        Ended::Shutdown
    }

    /// Hands the Lease back if this identity holds it (clears the holder).
    ///
    /// # Errors
    /// [`LeaderError`] when the Lease cannot be read or written; a conflict means someone else
    /// already wrote it, which is fine.
    pub async fn release(&self) -> Result<(), LeaderError> {
        let Some(mut lease) = self.get().await? else {
            return Ok(());
        };
        let Some(spec) = lease.spec.as_mut() else {
            return Ok(());
        };
        if spec.holder_identity.as_deref() != Some(self.identity.as_str()) {
            return Ok(());
        }
        spec.holder_identity = None;
        match self.replace(&lease).await {
            Ok(()) => Ok(()),
            Err(LeaderError::Lease {
                source: kube::Error::Api(status),
                ..
            }) if status.code == 409 => Ok(()),
            Err(error) => Err(error),
        }
    }

    /// One round: read the Lease, take it if it is free, expired or ours, and write it back.
    async fn round(&self) -> Result<Round, LeaderError> {
        let now = jiff::Timestamp::now();
        let Some(mut lease) = self.get().await? else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.name.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(self.spec(now, now, 0)),
            };
            return match self
                .request("create", self.api.create(&PostParams::default(), &lease))
                .await
            {
                Ok(created) => {
                    self.observe(&created);
                    Ok(Round::Held)
                }
                Err(e) if is_conflict(&e) => Ok(Round::Conflict),
                Err(e) => Err(e),
            };
        };
        self.observe(&lease);
        let verdict = self.verdict();
        let spec = lease.spec.clone().unwrap_or_default();
        if verdict == Verdict::HeldElsewhere {
            return Ok(Round::Elsewhere(spec.holder_identity.unwrap_or_default()));
        }
        let ours = verdict == Verdict::Ours;
        let acquired = match (&spec.acquire_time, ours) {
            (Some(t), true) => t.0,
            _ => now,
        };
        let transitions = spec.lease_transitions.unwrap_or(0) + i32::from(!ours);
        lease.spec = Some(self.spec(acquired, now, transitions));
        match self.replace(&lease).await {
            Ok(()) => Ok(Round::Held),
            Err(e) if is_conflict(&e) => Ok(Round::Conflict),
            Err(e) => Err(e),
        }
    }

    fn observe(&self, lease: &Lease) {
        let record = Record::of(&lease.spec.clone().unwrap_or_default());
        if let Ok(mut observer) = self.observer.lock() {
            observer.observe(record, Instant::now());
        }
    }

    fn verdict(&self) -> Verdict {
        self.observer.lock().map_or(Verdict::HeldElsewhere, |o| {
            o.verdict(&self.identity, Instant::now(), self.timing.lease_duration)
        })
    }

    async fn get(&self) -> Result<Option<Lease>, LeaderError> {
        self.request("get", self.api.get_opt(&self.name)).await
    }

    async fn replace(&self, lease: &Lease) -> Result<(), LeaderError> {
        let written = self
            .request(
                "replace",
                self.api.replace(&self.name, &PostParams::default(), lease),
            )
            .await?;
        self.observe(&written);
        Ok(())
    }

    /// Runs one API call with the request timeout.
    async fn request<T>(
        &self,
        operation: &'static str,
        call: impl Future<Output = Result<T, kube::Error>>,
    ) -> Result<T, LeaderError> {
        let timeout = self.timing.request_timeout();
        match tokio::time::timeout(timeout, call).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(source)) => Err(LeaderError::Lease {
                name: self.name.clone(),
                operation,
                source,
            }),
            Err(_) => Err(LeaderError::Timeout {
                name: self.name.clone(),
                operation,
                timeout,
            }),
        }
    }

    fn spec(
        &self,
        acquired: jiff::Timestamp,
        renewed: jiff::Timestamp,
        transitions: i32,
    ) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(self.identity.clone()),
            lease_duration_seconds: Some(
                i32::try_from(self.timing.lease_duration.as_secs().max(1)).unwrap_or(i32::MAX),
            ),
            acquire_time: Some(MicroTime(acquired)),
            renew_time: Some(MicroTime(renewed)),
            lease_transitions: Some(transitions),
            ..LeaseSpec::default()
        }
    }
}

fn is_conflict(error: &LeaderError) -> bool {
    matches!(error, LeaderError::Lease { source: kube::Error::Api(status), .. } if status.code == 409)
}
