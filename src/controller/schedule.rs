//! When each BoxTable is next due, so that the watch events caused by the operator's own status
//! writes do not start another pass (which, for a contended lock, would wait all over again).
//!
//! A pass runs when the object is new, its [`Trigger`] changed (generation, deletion, the
//! drop-consent annotation, the reconcile-request annotation), its Secret changed, or its requeue
//! time has come (the resync, or the backoff of a pass that failed, whatever made that pass due);
//! any other trigger (above all the watch event of the operator's own status write) is answered
//! with "come back at the due time". So a deletion that cannot finish makes one pass per backoff
//! step, not one per status write.
//!
//! An object this process has not yet passed that is already current (Ready at its target for
//! its generation, finalizer in step, not deleting) is not due at once: its first pass, the
//! periodic drift check, falls at a point of the resync interval fixed by its uid (see
//! [`spread`]), so that after a restart, a rollout or a failover the passes of a fleet that is
//! already converged are spread over the interval instead of all falling due together. Work
//! that is due (a new object, one not Ready, an interrupted migration, a spec change, a retry, a
//! reconcile request, a Secret that changes while this process watches it) still runs at once.
//!
//! A Secret event counts as a change only when it carries a resourceVersion this process has not
//! seen for that Secret; the first sight of a Secret (the watch's initial list) is no change for
//! an object that has not had a pass here yet (that first pass reads the Secret anyway), and is
//! compared with the version a pass read when one has (the controller's Secret mapper does that).
//!
//! Objects whose finalizer the operator has let go are remembered until the cache sees them go
//! (at most for a while), so that a trigger still queued for them does not run the drop again.
//! Every entry of an object is forgotten once the cache no longer has it (see
//! [`super::memory`]): a Retain object deleted, a Drop object released, one deleted while failing.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::Duration;

use kube::ResourceExt;
use tokio::time::Instant;

use crate::crd::{
    ADOPT_ANNOTATION, BoxTable, CONFIRM_DROP_ANNOTATION, RECONCILE_REQUESTED_ANNOTATION,
};
use crate::status::READY;

/// How long a released object is remembered (far longer than a queued trigger can wait).
const RELEASED_MEMORY: Duration = Duration::from_secs(600);

/// What about an object, when it changes, makes a pass due at once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Trigger {
    generation: i64,
    deleting: bool,
    confirm_drop: Option<String>,
    requested: Option<String>,
    adopt: Option<String>,
}

impl Trigger {
    /// The trigger of `bt` as it is now.
    pub fn of(bt: &BoxTable) -> Self {
        Self {
            generation: bt.metadata.generation.unwrap_or(0),
            deleting: bt.metadata.deletion_timestamp.is_some(),
            confirm_drop: bt.annotations().get(CONFIRM_DROP_ANNOTATION).cloned(),
            requested: bt
                .annotations()
                .get(RECONCILE_REQUESTED_ANNOTATION)
                .cloned(),
            adopt: bt.annotations().get(ADOPT_ANNOTATION).cloned(),
        }
    }
}

#[derive(Debug, Clone)]
struct Due {
    trigger: Trigger,
    at: Instant,
    /// Recorded at first sight of a current object (no pass of this process yet).
    spread: bool,
}

/// What a Secret event is to the schedule (see [`Schedule::secret_seen`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SecretSeen {
    /// This process had not seen the Secret before.
    First,
    /// A resourceVersion already seen: nothing changed.
    Same,
    /// A new resourceVersion.
    Changed,
}

/// Per-object due times and pending Secret changes, keyed by uid.
#[derive(Debug, Default)]
pub struct Schedule {
    due: Mutex<HashMap<String, Due>>,
    secret_changed: Mutex<HashSet<String>>,
    released: Mutex<HashMap<String, Instant>>,
    /// The last resourceVersion seen of each Secret a BoxTable refers to, by (namespace, name).
    secret_versions: Mutex<HashMap<(String, String), String>>,
}

/// Whether `bt` is current: not being deleted, its finalizer in step with its deletion policy,
/// its status Ready for its generation at the version its spec asks for, and no reconcile request
/// or adoption annotation on it (one set while no operator ran is honoured at once). Such an
/// object has nothing due but the periodic drift check.
pub fn is_current(bt: &BoxTable) -> bool {
    let Some(status) = &bt.status else {
        return false;
    };
    let target = bt
        .spec
        .target_version
        .unwrap_or_else(|| bt.spec.box_kind.latest());
    bt.metadata.deletion_timestamp.is_none()
        && !bt
            .annotations()
            .contains_key(RECONCILE_REQUESTED_ANNOTATION)
        && !bt.annotations().contains_key(ADOPT_ANNOTATION)
        && super::finalizer::needed(bt) == super::finalizer::has(bt)
        && status.observed_generation.is_some()
        && status.observed_generation == bt.metadata.generation
        && status.target_version == Some(target)
        && status.is_true(READY)
}

/// The point of `interval` at which the periodic pass of the object with `uid` falls: the same
/// for the same uid in every process (FNV-1a of the uid), spread evenly over the interval.
pub fn spread(uid: &str, interval: Duration) -> Duration {
    let hash = uid.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    });
    let millis = u64::try_from(interval.as_millis())
        .unwrap_or(u64::MAX)
        .max(1);
    Duration::from_millis(hash % millis)
}

impl Schedule {
    /// Records that `uid`, as `trigger`, finished a pass and is next due after `delay`.
    pub fn record(&self, uid: &str, trigger: &Trigger, delay: Duration) {
        if let Ok(mut due) = self.due.lock() {
            due.insert(
                uid.to_owned(),
                Due {
                    trigger: trigger.clone(),
                    at: Instant::now() + delay,
                    spread: false,
                },
            );
        }
    }

    /// Records that `uid`'s finalizer was let go: its deletion is finished, and nothing more is
    /// to be done for it.
    pub fn released(&self, uid: &str) {
        self.forget(uid);
        if let Ok(mut released) = self.released.lock() {
            let now = Instant::now();
            released.retain(|_, at| now.duration_since(*at) < RELEASED_MEMORY);
            released.insert(uid.to_owned(), now);
        }
    }

    /// Whether `uid`'s finalizer was let go (see [`Schedule::released`]).
    pub fn is_released(&self, uid: &str) -> bool {
        self.released
            .lock()
            .map(|released| released.contains_key(uid))
            .unwrap_or(false)
    }

    /// Records that Secret `namespace/name` was seen at `version` and says whether that is a
    /// change.
    pub fn secret_seen(&self, namespace: &str, name: &str, version: &str) -> SecretSeen {
        let Ok(mut versions) = self.secret_versions.lock() else {
            return SecretSeen::Changed;
        };
        match versions.insert((namespace.to_owned(), name.to_owned()), version.to_owned()) {
            None => SecretSeen::First,
            Some(old) if old == version => SecretSeen::Same,
            Some(_) => SecretSeen::Changed,
        }
    }

    /// Forgets the versions of the Secrets for which `keep(namespace, name)` is false.
    pub fn retain_secrets(&self, keep: impl Fn(&str, &str) -> bool) {
        if let Ok(mut versions) = self.secret_versions.lock() {
            versions.retain(|(namespace, name), _| keep(namespace, name));
        }
    }

    /// Marks `uid`'s Secret as changed, as `seen` says (see [`Schedule::secret_seen`]): its next
    /// trigger runs a pass. A version already seen is no change; the first sight of a Secret is
    /// no change for an object with no pass of this process yet.
    pub fn secret_changed(&self, uid: &str, seen: SecretSeen) {
        let counts = match seen {
            SecretSeen::Same => false,
            SecretSeen::Changed => true,
            SecretSeen::First => self
                .due
                .lock()
                .map(|due| due.get(uid).is_some_and(|d| !d.spread))
                .unwrap_or(true),
        };
        if counts && let Ok(mut changed) = self.secret_changed.lock() {
            changed.insert(uid.to_owned());
        }
    }

    /// Forgets when `uid` is due and whether its Secret changed (its finalizer was let go).
    pub fn forget(&self, uid: &str) {
        if let Ok(mut due) = self.due.lock() {
            due.remove(uid);
        }
        if let Ok(mut changed) = self.secret_changed.lock() {
            changed.remove(uid);
        }
    }

    /// Forgets everything about `uid`, released or not: the object is gone from the cache, so no
    /// trigger can start a pass for it any more.
    pub fn gone(&self, uid: &str) {
        self.forget(uid);
        if let Ok(mut released) = self.released.lock() {
            released.remove(uid);
        }
    }

    /// Forgets every object for which `live(uid)` is false.
    pub fn retain(&self, live: impl Fn(&str) -> bool) {
        if let Ok(mut due) = self.due.lock() {
            due.retain(|uid, _| live(uid));
        }
        if let Ok(mut changed) = self.secret_changed.lock() {
            changed.retain(|uid| live(uid));
        }
        if let Ok(mut released) = self.released.lock() {
            released.retain(|uid, _| live(uid));
        }
    }

    /// How many entries are kept (due times, Secret changes, released objects).
    pub fn entries(&self) -> usize {
        let due = self.due.lock().map_or(0, |d| d.len());
        let changed = self.secret_changed.lock().map_or(0, |c| c.len());
        let released = self.released.lock().map_or(0, |r| r.len());
        due + changed + released
    }

    /// Whether `trigger` carries a reconcile request the last recorded pass of `uid` did not see
    /// (a new value of the annotation; a first pass sees no request as new).
    pub fn newly_requested(&self, uid: &str, trigger: &Trigger) -> bool {
        let Ok(due) = self.due.lock() else {
            return false;
        };
        due.get(uid).is_some_and(|seen| {
            trigger.requested.is_some() && seen.trigger.requested != trigger.requested
        })
    }

    /// `None` when a pass should run now; otherwise how long until the object is due.
    pub fn not_due(&self, uid: &str, trigger: &Trigger) -> Option<Duration> {
        self.due_in(uid, trigger, None)
    }

    /// [`Schedule::not_due`] for `bt`, whose first pass in this process, when it is current (see
    /// [`is_current`]) and nothing brought it forward, is recorded as due at its point of
    /// `interval` (see [`spread`]).
    pub fn not_due_spread(
        &self,
        uid: &str,
        bt: &BoxTable,
        trigger: &Trigger,
        interval: Duration,
    ) -> Option<Duration> {
        self.due_in(uid, trigger, Some((bt, interval)))
    }

    fn due_in(
        &self,
        uid: &str,
        trigger: &Trigger,
        first: Option<(&BoxTable, Duration)>,
    ) -> Option<Duration> {
        if self
            .secret_changed
            .lock()
            .map(|mut c| c.remove(uid))
            .unwrap_or(true)
        {
            return None;
        }
        let mut due = self.due.lock().ok()?;
        let Some(recorded) = due.get(uid) else {
            let (bt, interval) = first?;
            if !is_current(bt) {
                return None;
            }
            let wait = spread(uid, interval);
            due.insert(
                uid.to_owned(),
                Due {
                    trigger: trigger.clone(),
                    at: Instant::now() + wait,
                    spread: true,
                },
            );
            return Some(wait);
        };
        if recorded.trigger != *trigger {
            return None;
        }
        let now = Instant::now();
        (recorded.at > now).then(|| recorded.at - now)
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    use super::*;

    fn at(generation: i64) -> Trigger {
        Trigger {
            generation,
            deleting: false,
            confirm_drop: None,
            requested: None,
            adopt: None,
        }
    }

    /// An Outbox BoxTable at generation 2 whose status says Ready (or not) for `observed`.
    fn outbox(ready: bool, observed: i64, target: u32) -> BoxTable {
        use crate::crd::{BoxTableSpec, BoxTableStatus};
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
        let mut bt = BoxTable::new(
            "orders",
            BoxTableSpec::new(crate::migrate::BoxKind::Outbox, "db"),
        );
        bt.metadata.generation = Some(2);
        bt.status = Some(BoxTableStatus {
            observed_generation: Some(observed),
            target_version: Some(target),
            conditions: vec![Condition {
                type_: READY.to_owned(),
                status: if ready { "True" } else { "False" }.to_owned(),
                reason: "UpToDate".to_owned(),
                message: String::new(),
                observed_generation: Some(observed),
                last_transition_time: Time(jiff::Timestamp::UNIX_EPOCH),
            }],
            ..BoxTableStatus::default()
        });
        bt
    }

    #[test]
    fn only_an_object_ready_at_its_target_for_its_generation_is_current() {
        assert!(is_current(&outbox(true, 2, 8)));
        assert!(!is_current(&outbox(false, 2, 8)), "not Ready");
        assert!(
            !is_current(&outbox(true, 1, 8)),
            "a spec change not yet seen"
        );
        assert!(!is_current(&outbox(true, 2, 7)), "another target");
        let mut deleting = outbox(true, 2, 8);
        deleting.metadata.deletion_timestamp = Some(Time(jiff::Timestamp::UNIX_EPOCH));
        assert!(!is_current(&deleting));
        let mut new = outbox(true, 2, 8);
        new.status = None;
        assert!(!is_current(&new));
        let mut requested = outbox(true, 2, 8);
        requested
            .annotations_mut()
            .insert(RECONCILE_REQUESTED_ANNOTATION.to_owned(), "t1".to_owned());
        assert!(
            !is_current(&requested),
            "a request set while no operator ran"
        );
    }

    #[test]
    fn the_spread_is_fixed_by_the_uid_and_covers_the_interval() {
        let interval = Duration::from_secs(300);
        let points: Vec<Duration> = (0..1000)
            .map(|i| spread(&format!("0b6c9d2e-{i:04}-4a1f-9e3b-5d7c8a9b0c1d"), interval))
            .collect();
        assert_eq!(
            points[7],
            spread("0b6c9d2e-0007-4a1f-9e3b-5d7c8a9b0c1d", interval)
        );
        assert!(points.iter().all(|p| *p < interval));
        // Each tenth of the interval gets about a tenth of the objects.
        for tenth in 0..10 {
            let from = interval * tenth / 10;
            let n = points
                .iter()
                .filter(|p| **p >= from && **p < from + interval / 10)
                .count();
            assert!((60..=140).contains(&n), "{n} in tenth {tenth}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_current_object_first_seen_waits_for_its_point_of_the_interval() {
        let schedule = Schedule::default();
        let interval = Duration::from_secs(300);
        let current = outbox(true, 2, 8);
        let point = spread("a", interval);
        assert_eq!(
            schedule.not_due_spread("a", &current, &at(2), interval),
            Some(point)
        );
        assert_eq!(
            schedule.not_due_spread("b", &outbox(false, 2, 8), &at(2), interval),
            None,
            "one not Ready runs at once"
        );
        assert_eq!(
            schedule.not_due_spread("a", &current, &at(3), interval),
            None,
            "a spec change runs at once"
        );
        tokio::time::advance(point).await;
        assert_eq!(
            schedule.not_due_spread("a", &current, &at(2), interval),
            None
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_secret_changes_only_with_a_new_version_and_first_sight_spares_spread_objects() {
        let schedule = Schedule::default();
        let interval = Duration::from_secs(300);
        let current = outbox(true, 2, 8);
        assert!(
            schedule
                .not_due_spread("spread", &current, &at(2), interval)
                .is_some()
        );
        schedule.record("passed", &at(2), interval);
        let seen = schedule.secret_seen("shop", "db", "10");
        assert_eq!(seen, SecretSeen::First);
        schedule.secret_changed("spread", seen);
        schedule.secret_changed("passed", seen);
        assert!(
            schedule
                .not_due_spread("spread", &current, &at(2), interval)
                .is_some(),
            "the first sight of its Secret is no change for an object not passed yet"
        );
        assert_eq!(schedule.not_due("passed", &at(2)), None);
        schedule.record("passed", &at(2), interval);
        let same = schedule.secret_seen("shop", "db", "10");
        assert_eq!(same, SecretSeen::Same);
        schedule.secret_changed("passed", same);
        assert!(schedule.not_due("passed", &at(2)).is_some(), "a relist");
        let changed = schedule.secret_seen("shop", "db", "11");
        assert_eq!(changed, SecretSeen::Changed);
        schedule.secret_changed("spread", changed);
        assert_eq!(
            schedule.not_due_spread("spread", &current, &at(2), interval),
            None
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_new_object_is_due_at_once() {
        assert_eq!(Schedule::default().not_due("a", &at(1)), None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_trigger_before_the_due_time_waits_for_it() {
        let schedule = Schedule::default();
        schedule.record("a", &at(1), Duration::from_secs(60));
        tokio::time::advance(Duration::from_secs(10)).await;
        assert_eq!(schedule.not_due("a", &at(1)), Some(Duration::from_secs(50)));
        tokio::time::advance(Duration::from_secs(50)).await;
        assert_eq!(schedule.not_due("a", &at(1)), None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_spec_change_or_a_secret_change_runs_at_once() {
        let schedule = Schedule::default();
        schedule.record("a", &at(1), Duration::from_secs(60));
        assert_eq!(schedule.not_due("a", &at(2)), None);
        schedule.secret_changed("a", SecretSeen::Changed);
        assert_eq!(schedule.not_due("a", &at(1)), None);
        assert!(
            schedule.not_due("a", &at(1)).is_some(),
            "the secret change is consumed once"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn deletion_or_drop_consent_runs_at_once() {
        let schedule = Schedule::default();
        let deleting = Trigger {
            deleting: true,
            ..at(1)
        };
        schedule.record("a", &at(1), Duration::from_secs(60));
        assert_eq!(schedule.not_due("a", &deleting), None);
        schedule.record("a", &deleting, Duration::from_secs(60));
        assert!(
            schedule.not_due("a", &deleting).is_some(),
            "a status write is no trigger"
        );
        let confirmed = Trigger {
            confirm_drop: Some("public.outbox".to_owned()),
            ..deleting
        };
        assert_eq!(schedule.not_due("a", &confirmed), None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_new_reconcile_request_runs_at_once_and_is_new_only_once() {
        let schedule = Schedule::default();
        let requested = |value: &str| Trigger {
            requested: Some(value.to_owned()),
            ..at(1)
        };
        schedule.record("a", &at(1), Duration::from_secs(300));
        assert!(schedule.not_due("a", &at(1)).is_some());
        assert_eq!(schedule.not_due("a", &requested("t1")), None);
        assert!(schedule.newly_requested("a", &requested("t1")));
        schedule.record("a", &requested("t1"), Duration::from_secs(300));
        assert!(!schedule.newly_requested("a", &requested("t1")));
        assert!(schedule.not_due("a", &requested("t1")).is_some());
        assert!(schedule.newly_requested("a", &requested("t2")));
        assert!(
            !schedule.newly_requested("b", &requested("t1")),
            "a first pass"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_gone_object_leaves_no_entry_released_or_not() {
        let schedule = Schedule::default();
        schedule.record("a", &at(1), Duration::from_secs(60));
        schedule.secret_changed("a", SecretSeen::Changed);
        schedule.released("b");
        schedule.record("c", &at(1), Duration::from_secs(60));
        assert_eq!(
            schedule.entries(),
            4,
            "a's due time and Secret change, b, c"
        );
        schedule.gone("a");
        schedule.gone("b");
        assert!(!schedule.is_released("b"));
        assert_eq!(schedule.entries(), 1);
        schedule.retain(|uid| uid != "c");
        assert_eq!(schedule.entries(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_released_object_is_remembered_for_a_while() {
        let schedule = Schedule::default();
        schedule.released("a");
        assert!(schedule.is_released("a") && !schedule.is_released("b"));
        tokio::time::advance(RELEASED_MEMORY).await;
        schedule.released("b");
        assert!(!schedule.is_released("a"), "old entries are purged");
    }
}
