//! When another replica's Lease counts as expired: judged, as client-go's leader election does, by
//! how long the Lease record has gone unchanged on this process's monotonic clock, never by
//! comparing the holder's `renewTime` with the local wall clock (the two nodes' clocks may
//! disagree by any amount).

use std::time::Duration;

use k8s_openapi::api::coordination::v1::LeaseSpec;
use tokio::time::Instant;

/// The parts of a Lease record that change when its holder renews or hands it over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// `holderIdentity` (empty when released).
    pub holder: String,
    /// `renewTime` as the holder wrote it (compared, never read as a time).
    pub renew_time: Option<String>,
    /// `acquireTime` as the holder wrote it.
    pub acquire_time: Option<String>,
    /// `leaseDurationSeconds`.
    pub duration_seconds: Option<i32>,
    /// `leaseTransitions`.
    pub transitions: Option<i32>,
}

impl Record {
    /// The record of a Lease spec.
    pub fn of(spec: &LeaseSpec) -> Self {
        Self {
            holder: spec.holder_identity.clone().unwrap_or_default(),
            renew_time: spec.renew_time.as_ref().map(|t| t.0.to_string()),
            acquire_time: spec.acquire_time.as_ref().map(|t| t.0.to_string()),
            duration_seconds: spec.lease_duration_seconds,
            transitions: spec.lease_transitions,
        }
    }
}

/// The last record seen and when (monotonic) it was first seen in that form.
#[derive(Debug, Clone)]
pub struct Observation {
    record: Record,
    since: Instant,
}

/// What an observed Lease means for an identity that wants it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Nobody holds it (no holder, or released).
    Free,
    /// This identity holds it.
    Ours,
    /// Another identity holds it and has changed the record within its lease duration.
    HeldElsewhere,
    /// Another identity holds it but the record has not changed for a whole lease duration.
    Expired,
}

/// Tracks one Lease as seen by one identity.
#[derive(Debug, Clone, Default)]
pub struct Observer {
    last: Option<Observation>,
}

impl Observer {
    /// Notes `record` as seen at `now`: the clock restarts only when the record changed.
    pub fn observe(&mut self, record: Record, now: Instant) {
        match &self.last {
            Some(o) if o.record == record => {}
            _ => self.last = Some(Observation { record, since: now }),
        }
    }

    /// How the last observed record stands for `identity` at `now`; `fallback` is the lease
    /// duration to assume when the record carries none.
    pub fn verdict(&self, identity: &str, now: Instant, fallback: Duration) -> Verdict {
        let Some(o) = &self.last else {
            return Verdict::Free;
        };
        if o.record.holder.is_empty() {
            return Verdict::Free;
        }
        if o.record.holder == identity {
            return Verdict::Ours;
        }
        let duration = o
            .record
            .duration_seconds
            .and_then(|s| u64::try_from(s).ok())
            .map_or(fallback, Duration::from_secs);
        if now.saturating_duration_since(o.since) >= duration {
            Verdict::Expired
        } else {
            Verdict::HeldElsewhere
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(holder: &str, renew: &str) -> Record {
        Record {
            holder: holder.to_owned(),
            renew_time: Some(renew.to_owned()),
            acquire_time: None,
            duration_seconds: Some(15),
            transitions: Some(0),
        }
    }

    const FALLBACK: Duration = Duration::from_secs(15);

    #[tokio::test(start_paused = true)]
    async fn a_record_that_keeps_changing_is_held_however_old_its_renew_time_reads() {
        let mut o = Observer::default();
        for i in 0..20 {
            // The holder's clock is a year behind: its renewTime is always long past.
            o.observe(
                record("a", &format!("2025-01-01T00:00:{i:02}Z")),
                Instant::now(),
            );
            assert_eq!(
                o.verdict("b", Instant::now(), FALLBACK),
                Verdict::HeldElsewhere
            );
            tokio::time::advance(Duration::from_secs(5)).await;
        }
    }

    #[tokio::test(start_paused = true)]
    async fn an_unchanged_record_expires_after_its_lease_duration_whatever_its_renew_time() {
        let mut o = Observer::default();
        // The holder's clock is a year ahead and it has died.
        let frozen = record("a", "2027-12-01T00:00:00Z");
        o.observe(frozen.clone(), Instant::now());
        tokio::time::advance(Duration::from_secs(14)).await;
        o.observe(frozen.clone(), Instant::now());
        assert_eq!(
            o.verdict("b", Instant::now(), FALLBACK),
            Verdict::HeldElsewhere
        );
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(o.verdict("b", Instant::now(), FALLBACK), Verdict::Expired);
    }

    #[tokio::test(start_paused = true)]
    async fn a_first_sight_starts_the_clock_so_an_old_record_is_not_taken_at_once() {
        let o = {
            let mut o = Observer::default();
            o.observe(record("a", "2020-01-01T00:00:00Z"), Instant::now());
            o
        };
        assert_eq!(
            o.verdict("b", Instant::now(), FALLBACK),
            Verdict::HeldElsewhere
        );
    }

    #[tokio::test(start_paused = true)]
    async fn released_and_own_records_are_free_and_ours() {
        let mut o = Observer::default();
        assert_eq!(o.verdict("b", Instant::now(), FALLBACK), Verdict::Free);
        o.observe(record("", "x"), Instant::now());
        assert_eq!(o.verdict("b", Instant::now(), FALLBACK), Verdict::Free);
        o.observe(record("b", "x"), Instant::now());
        assert_eq!(o.verdict("b", Instant::now(), FALLBACK), Verdict::Ours);
    }
}
