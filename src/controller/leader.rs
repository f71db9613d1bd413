//! Optional leader election on a coordination.k8s.io/v1 Lease. Correctness never depends on it
//! (the advisory lock serialises migrations); it only avoids duplicate work across replicas.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, PostParams};
use tokio_util::sync::CancellationToken;

/// How long a lease is valid without renewal.
pub const LEASE_DURATION: Duration = Duration::from_secs(15);
/// How often the holder renews.
pub const RENEW_INTERVAL: Duration = Duration::from_secs(5);

/// Why leadership could not be kept.
#[derive(Debug, thiserror::Error)]
pub enum LeaderError {
    /// Reading or writing the Lease failed.
    #[error("lease {name} operation {operation} failed")]
    Lease {
        /// The Lease name.
        name: String,
        /// get, create or replace.
        operation: &'static str,
        /// The API error.
        #[source]
        source: kube::Error,
    },
}

/// A Lease-based elector for one identity.
pub struct LeaderElector {
    api: Api<Lease>,
    name: String,
    identity: String,
    lease_duration: Duration,
    renew_interval: Duration,
}

impl LeaderElector {
    /// An elector for Lease `name` in the namespace of `api`, as `identity` (the pod name).
    pub fn new(api: Api<Lease>, name: &str, identity: &str) -> Self {
        Self {
            api,
            name: name.to_owned(),
            identity: identity.to_owned(),
            lease_duration: LEASE_DURATION,
            renew_interval: RENEW_INTERVAL,
        }
    }

    /// Overrides how long a lease lasts without renewal and how often it is renewed (the renew
    /// interval should be well under the lease duration).
    pub fn with_timing(mut self, lease_duration: Duration, renew_interval: Duration) -> Self {
        self.lease_duration = lease_duration;
        self.renew_interval = renew_interval;
        self
    }

    /// Waits until this identity holds the Lease.
    ///
    /// # Errors
    /// [`LeaderError`] when the Lease cannot be read or written (conflicts are retried).
    ///
    /// # Cancel safety
    /// Returns `Ok(false)` promptly when `cancel` fires.
    pub async fn acquire(&self, cancel: &CancellationToken) -> Result<bool, LeaderError> {
        loop {
            if self.try_acquire_or_renew().await? {
                return Ok(true);
            }
            tokio::select! {
                () = cancel.cancelled() => return Ok(false),
                () = tokio::time::sleep(self.renew_interval) => {}
            }
        }
    }

    /// Renews the Lease until renewal fails or `cancel` fires; returns when leadership is lost.
    /// On `cancel` (shutdown) the Lease is handed back, so a successor takes over at once instead
    /// of waiting for it to expire.
    ///
    /// # Errors
    /// [`LeaderError`] when the Lease cannot be read or written.
    pub async fn keep(&self, cancel: &CancellationToken) -> Result<(), LeaderError> {
        loop {
            tokio::select! {
                () = cancel.cancelled() => return self.release().await,
                () = tokio::time::sleep(self.renew_interval) => {}
            }
            if !self.try_acquire_or_renew().await? {
                return Ok(());
            }
        }
    }

    /// Hands the Lease back if this identity holds it (clears the holder).
    ///
    /// # Errors
    /// [`LeaderError`] when the Lease cannot be read or written; a conflict means someone else
    /// already took it, which is fine.
    pub async fn release(&self) -> Result<(), LeaderError> {
        let Some(mut lease) = self
            .api
            .get_opt(&self.name)
            .await
            .map_err(|source| self.err("get", source))?
        else {
            return Ok(());
        };
        let Some(spec) = lease.spec.as_mut() else {
            return Ok(());
        };
        if spec.holder_identity.as_deref() != Some(self.identity.as_str()) {
            return Ok(());
        }
        spec.holder_identity = None;
        spec.renew_time = None;
        match self
            .api
            .replace(&self.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(status)) if status.code == 409 => Ok(()),
            Err(source) => Err(self.err("replace", source)),
        }
    }

    /// One election round: take a free or expired Lease, renew our own; `false` when another
    /// identity holds a live Lease or won a write race.
    async fn try_acquire_or_renew(&self) -> Result<bool, LeaderError> {
        let now = jiff::Timestamp::now();
        let existing = self
            .api
            .get_opt(&self.name)
            .await
            .map_err(|source| self.err("get", source))?;
        let Some(mut lease) = existing else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.name.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(self.spec(now, now, 0)),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(_) => Ok(true),
                Err(kube::Error::Api(status)) if status.code == 409 => Ok(false),
                Err(source) => Err(self.err("create", source)),
            };
        };
        let spec = lease.spec.clone().unwrap_or_default();
        let holder = spec.holder_identity.clone().unwrap_or_default();
        let ours = holder == self.identity;
        let expired = spec
            .renew_time
            .as_ref()
            .map(|t| {
                let secs = i64::from(spec.lease_duration_seconds.unwrap_or(15));
                t.0.checked_add(jiff::SignedDuration::from_secs(secs))
                    .map(|end| end < now)
                    .unwrap_or(true)
            })
            .unwrap_or(true);
        if !ours && !holder.is_empty() && !expired {
            return Ok(false);
        }
        let acquire_time = if ours {
            spec.acquire_time.map(|t| t.0).unwrap_or(now)
        } else {
            now
        };
        let transitions = spec.lease_transitions.unwrap_or(0) + i32::from(!ours);
        lease.spec = Some(self.spec(acquire_time, now, transitions));
        match self
            .api
            .replace(&self.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(status)) if status.code == 409 => Ok(false),
            Err(source) => Err(self.err("replace", source)),
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
                i32::try_from(self.lease_duration.as_secs().max(1)).unwrap_or(i32::MAX),
            ),
            acquire_time: Some(MicroTime(acquired)),
            renew_time: Some(MicroTime(renewed)),
            lease_transitions: Some(transitions),
            ..LeaseSpec::default()
        }
    }

    fn err(&self, operation: &'static str, source: kube::Error) -> LeaderError {
        LeaderError::Lease {
            name: self.name.clone(),
            operation,
            source,
        }
    }
}
