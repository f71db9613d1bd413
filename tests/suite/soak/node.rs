//! The invariant soak on the real node: `soak::soak` with [`Mode::Node`]. The operator runs as the
//! two Pods of `dist/install.yaml` (the `Install` fixture: this commit's image, the shipped
//! probes, limits and grace period; the overlay adds only the soak's short resync and retry
//! backoff, as the processes' soak runs them), and the soak's chaos on the database and the
//! BoxTables runs as there (edits, deletions, `migrate` runs, Brighter-style racers, terminated
//! sessions), with the same invariants. Beside it, one disruption at a time, each followed by a
//! wait until the operator is back (two Ready Pods, one holding the Lease):
//! - the leader's Pod deleted; in every fifth disruption staged while its pass holds a table's
//!   advisory lock in the middle of a migration (a transaction of the soak holds the table, so
//!   the pass's `ALTER TABLE` waits under the lock);
//! - the standby's Pod deleted;
//! - the operator's container SIGKILLed (the kubelet restarts it);
//! - the kubelet restarted (SIGTERM or SIGKILL; `node_restart_kubelet` of `scripts/node.sh`);
//! - once, in the middle, `kubectl rollout restart` of the Deployment.
//!
//! Checked besides the soak's invariants:
//! - a deleted Pod is gone within half its grace period (it stops at SIGTERM), and a deleted
//!   leader no longer holds the Lease once gone (it handed it back);
//! - the pass interrupted mid-migration lets go of the table's advisory lock within 15 s of the
//!   Pod's deletion (rolled back: the table's history invariants then show it ran once);
//! - no operator container restarts but those the soak killed (none by itself, none OOM-killed,
//!   none because the kubelet restarted);
//! - after every disruption the operator is back within 3 minutes; the kubelet is back Ready;
//!   the rollout completes;
//! - at the end, the soak's namespaces are deleted (their BoxTables finalized by the running
//!   operator) and the Deployment scaled to zero, each Pod gone within half its grace period.
//!
//! It prints the counts of each disruption, the times back to Ready after each kind and the peak
//! of the operator containers' memory cgroups against their limit. `scripts/test-node.sh
//! soak::node::` runs it for `SOAK_SECONDS` (default 60 s); `scripts/soak.sh --node` for longer.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use boxtable_operator::ident::QualifiedName;
use boxtable_operator::lock::LockIdentity;
use boxtable_operator::migrate::history::HISTORY_TABLE;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, ListParams};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use serde_json::json;

use crate::soak::processes::{self as soak, Entry, Mode, NAMESPACES, Soak, bump, get, retry_api};
use crate::support::connect;
use crate::support::control_plane::OPERATOR_NAMESPACE;
use crate::support::e2e::Cluster;
use crate::support::node::printed;
use crate::support::node_install::{DEPLOYMENT, Install, SELECTOR, scale_to_zero, secret_for};

/// Added to the operator's arguments: the processes' soak's resync and retry backoff, so that a
/// BoxTable stalled by a racer's lock is retried within seconds, not the shipped 5 minutes.
const SOAK_ARGS: [&str; 2] = ["--resync-interval=3s", "--retry-backoff=200ms"];
/// The grace period `dist/install.yaml` gives the operator's Pods.
const GRACE: Duration = Duration::from_secs(60);
/// How long a deleted Pod may take to go: a process that ignored SIGTERM would take the grace
/// period.
const EXIT_BOUND: Duration = Duration::from_secs(30);
/// How long the operator may take to be back after a disruption.
const RECOVER_BOUND: Duration = Duration::from_secs(180);
/// How long the staged disruption waits for the leader's pass to hold the lock and wait for the
/// table (the pass may first wait for one of the operator's sessions to the database, which
/// other passes hold while they wait for locks the racers hold).
const STAGE_BOUND: Duration = Duration::from_secs(30);
/// How long a pass interrupted mid-migration may keep the table's advisory lock.
const RELEASE_BOUND: Duration = Duration::from_secs(15);

#[test]
fn the_operator_pods_keep_every_invariant_through_deletions_kills_kubelet_restarts_and_a_rollout() {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .unwrap()
        .block_on(soak::soak(Mode::Node));
}

/// One kind of disruption.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Disruption {
    LeaderDeleted,
    LeaderDeletedMidMigration,
    StandbyDeleted,
    ContainerKilled,
    KubeletRestarted,
    KubeletKilled,
    Rollout,
}

impl Disruption {
    fn describe(self) -> &'static str {
        match self {
            Disruption::LeaderDeleted => "leader Pod deleted",
            Disruption::LeaderDeletedMidMigration => "leader Pod deleted mid-migration",
            Disruption::StandbyDeleted => "standby Pod deleted",
            Disruption::ContainerKilled => "container SIGKILLed",
            Disruption::KubeletRestarted => "kubelet SIGTERMed",
            Disruption::KubeletKilled => "kubelet SIGKILLed",
            Disruption::Rollout => "rollout restart",
        }
    }
}

/// The operator's Pods on the node, the node's chaos and what it measured.
pub(crate) struct OnNode {
    install: Install,
    pods: Api<Pod>,
    /// Container kills by the soak, per Pod UID.
    kills: Mutex<BTreeMap<String, u64>>,
    /// Times back to two Ready Pods and a Lease holder, per kind of disruption.
    recoveries: Mutex<BTreeMap<Disruption, Vec<Duration>>>,
    /// Staged disruptions that found no pass to interrupt and deleted the leader plainly.
    unstaged: AtomicU64,
    /// Longest time from a Pod's deletion to its end.
    longest_exit_ms: AtomicU64,
    /// Longest time from the deletion of a leader mid-migration to the release of its lock.
    longest_release_ms: AtomicU64,
    memory_peak: AtomicU64,
    memory_limit: AtomicU64,
    oom_kills: AtomicU64,
    checks: AtomicU64,
}

impl OnNode {
    /// Installs `dist/install.yaml` (the `Install` fixture) with [`SOAK_ARGS`]; waits for two
    /// Ready Pods.
    pub(crate) async fn install(client: kube::Client) -> OnNode {
        let install = tokio::task::spawn_blocking(|| Install::dist_with_args(&SOAK_ARGS))
            .await
            .unwrap();
        eprintln!(
            "soak: dist/install.yaml rolled out in {:.1} s",
            install.rollout.as_secs_f64()
        );
        OnNode {
            install,
            pods: Api::namespaced(client, OPERATOR_NAMESPACE),
            kills: Mutex::default(),
            recoveries: Mutex::default(),
            unstaged: AtomicU64::new(0),
            longest_exit_ms: AtomicU64::new(0),
            longest_release_ms: AtomicU64::new(0),
            memory_peak: AtomicU64::new(0),
            memory_limit: AtomicU64::new(0),
            oom_kills: AtomicU64::new(0),
            checks: AtomicU64::new(0),
        }
    }

    /// Creates namespace `ns` afresh with Secret `db`: the address the Pods reach the cluster's
    /// database by.
    pub(crate) async fn secret(&self, cluster: &Cluster, ns: &str) {
        let plane = self.install.plane;
        let name = ns.to_owned();
        tokio::task::spawn_blocking(move || plane.fresh_namespace(&name))
            .await
            .unwrap();
        cluster
            .apply(secret_for(self.install.node, ns, "db", &cluster.db))
            .await;
    }

    /// The invariant checks this module made.
    pub(crate) fn checks(&self) -> u64 {
        get(&self.checks)
    }

    /// The operator's Pods; with `deleting`, also those being deleted.
    async fn operator_pods(&self, deleting: bool) -> Vec<Pod> {
        let pods = self.pods.clone();
        retry_api("list the operator's Pods", || {
            let pods = pods.clone();
            async move { pods.list(&ListParams::default().labels(SELECTOR)).await }
        })
        .await
        .items
        .into_iter()
        .filter(|p| deleting || p.metadata.deletion_timestamp.is_none())
        .collect()
    }

    /// The operator's Pod named `name`, if it exists.
    async fn pod(&self, name: &str) -> Option<Pod> {
        let pods = self.pods.clone();
        retry_api(&format!("get Pod {name}"), || {
            let pods = pods.clone();
            let name = name.to_owned();
            async move { pods.get_opt(&name).await }
        })
        .await
    }

    /// The leader's Pod and the other one, when two run and one holds the Lease.
    async fn leader_and_standby(&self, soak: &Soak) -> Option<(Pod, Option<Pod>)> {
        let pods = self.operator_pods(false).await;
        let holder = soak.lease_holder().await?;
        let (leader, others): (Vec<Pod>, Vec<Pod>) =
            pods.into_iter().partition(|p| pod_name(p) == holder);
        Some((leader.into_iter().next()?, others.into_iter().next()))
    }

    /// No operator container restarted but those the soak killed: one that did exited by itself
    /// (a crash, a failed liveness probe, the OOM killer, or a kubelet restart that took it down).
    async fn check_restarts(&self, soak: &Soak) {
        bump(&self.checks);
        for pod in self.operator_pods(true).await {
            let uid = pod.metadata.uid.clone().unwrap_or_default();
            let Some(status) = container(&pod) else {
                continue;
            };
            let restarts = u64::try_from(status.restart_count).unwrap_or(0);
            let killed = self.kills.lock().unwrap().get(&uid).copied().unwrap_or(0);
            if restarts <= killed {
                continue;
            }
            let last = status
                .last_state
                .as_ref()
                .and_then(|s| s.terminated.as_ref());
            let reason = last.and_then(|t| t.reason.clone()).unwrap_or_default();
            if reason == "OOMKilled" {
                bump(&self.oom_kills);
            }
            soak.violations.add_once(
                format!("restart {uid} {restarts}"),
                format!(
                    "the operator's container in Pod {} restarted {restarts} times, {killed} of \
                     them killed by the soak: it ended by itself (last: {reason} {:?})",
                    pod_name(&pod),
                    last.map(|t| (t.exit_code, t.message.clone()))
                ),
            );
        }
    }

    /// Waits until two Pods are Ready and one of them holds the Lease; a violation after
    /// [`RECOVER_BOUND`]. Returns the time from `since`.
    async fn recovered(&self, soak: &Soak, since: Instant, what: &str) -> Option<Duration> {
        loop {
            bump(&self.checks);
            let pods = self.operator_pods(false).await;
            let holder = soak.lease_holder().await;
            if pods.len() == 2
                && pods.iter().all(is_ready)
                && pods.iter().any(|p| Some(pod_name(p)) == holder)
            {
                return Some(since.elapsed());
            }
            if since.elapsed() > RECOVER_BOUND {
                let seen: Vec<String> = pods
                    .iter()
                    .map(|p| format!("{} ready {}", pod_name(p), is_ready(p)))
                    .collect();
                soak.violations.add(format!(
                    "the operator was not back (two Ready Pods, one holding the Lease) within \
                     {RECOVER_BOUND:?} of the {what}: Pods {seen:?}, Lease held by {holder:?}"
                ));
                return None;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Deletes Pod `name` (with its grace period, as `kubectl delete pod` does).
    async fn delete_pod(&self, name: &str) {
        let pods = self.pods.clone();
        retry_api(&format!("delete Pod {name}"), || {
            let pods = pods.clone();
            let name = name.to_owned();
            async move {
                match pods.delete(&name, &DeleteParams::default()).await {
                    Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
                    other => other.map(drop),
                }
            }
        })
        .await;
    }

    /// Waits for deleted Pod `name` to be gone: within [`EXIT_BOUND`] of `deleted`, and, if it
    /// led, no longer holding the Lease.
    async fn gone(&self, soak: &Soak, name: &str, leader: bool, deleted: Instant) {
        while self.pod(name).await.is_some() {
            if deleted.elapsed() > GRACE + EXIT_BOUND {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let took = deleted.elapsed();
        self.longest_exit_ms
            .fetch_max(took.as_millis() as u64, Ordering::Relaxed);
        bump(&self.checks);
        if took > EXIT_BOUND {
            soak.violations.add(format!(
                "Pod {name} took {took:?} to go after its deletion (grace period {GRACE:?}): its \
                 operator did not stop at SIGTERM"
            ));
        }
        if leader && soak.lease_holder().await.as_deref() == Some(name) {
            soak.violations.add(format!(
                "the deleted leader Pod {name} is gone but still holds the Lease: it did not hand \
                 it back"
            ));
        }
    }

    /// Deletes the leader's Pod (or the standby's) and waits for it to go.
    async fn delete(&self, soak: &Soak, leader: bool) -> Option<(Disruption, Instant)> {
        let (lead, standby) = self.leader_and_standby(soak).await?;
        let pod = if leader { lead } else { standby? };
        let name = pod_name(&pod);
        let deleted = Instant::now();
        self.delete_pod(&name).await;
        self.gone(soak, &name, leader, deleted).await;
        let kind = if leader {
            Disruption::LeaderDeleted
        } else {
            Disruption::StandbyDeleted
        };
        Some((kind, deleted))
    }

    /// Deletes the leader's Pod while its pass holds a table's advisory lock mid-migration: a
    /// transaction of the soak holds the table (`ACCESS SHARE`), the BoxTable's target goes up by
    /// one, and once the leader's pass holds the lock and waits for the table, its Pod is deleted.
    /// The pass must let go of the lock (its migration rolled back) before the soak's
    /// transaction ends. Without a pass to interrupt, the leader is deleted plainly.
    async fn delete_mid_migration(
        &self,
        soak: &Soak,
        rng: &mut StdRng,
    ) -> Option<(Disruption, Instant)> {
        let url = &soak.cluster.db.url;
        let (blocker, watcher) = (connect(url).await, connect(url).await);
        let mut live = soak.registry.live();
        live.shuffle(rng);
        let mut tried = 0;
        for entry in live {
            // A table below its latest version (the racers take most to the latest soon).
            let Some(object) = soak.fetch(&entry).await else {
                continue;
            };
            let applied = object.data["status"]["appliedVersion"]
                .as_u64()
                .unwrap_or(0);
            if applied == 0 || applied >= u64::from(entry.latest()) {
                continue;
            }
            tried += 1;
            if tried > 3 {
                break;
            }
            if let Some(done) = self.stage(soak, &entry, &blocker, &watcher).await {
                return Some(done);
            }
        }
        bump(&self.unstaged);
        self.delete(soak, true).await
    }

    /// [`OnNode::delete_mid_migration`] on `entry`'s table; `None` when it could not be staged.
    async fn stage(
        &self,
        soak: &Soak,
        entry: &Entry,
        blocker: &tokio_postgres::Client,
        watcher: &tokio_postgres::Client,
    ) -> Option<(Disruption, Instant)> {
        let object = soak.fetch(entry).await?;
        if object.data["spec"]["suspend"].as_bool() == Some(true) {
            return None;
        }
        let table = QualifiedName::parse(Some(entry.schema), &entry.table).unwrap();
        let key = LockIdentity::for_table(&table).key();
        // No `migrate` run or application on the table meanwhile: only the operator's pass.
        soak.registry
            .reserved
            .lock()
            .unwrap()
            .insert(entry.qualified());
        soak.stop_migrates(entry);
        let staged: Result<i32, String> = async {
            let failed = |what: &str| {
                let what = what.to_owned();
                move |e: tokio_postgres::Error| format!("{what}: {e}")
            };
            blocker
                .batch_execute("BEGIN; SET LOCAL lock_timeout = '2s'")
                .await
                .map_err(failed("BEGIN"))?;
            blocker
                .batch_execute(&format!(
                    "LOCK TABLE {} IN ACCESS SHARE MODE",
                    table.quoted()
                ))
                .await
                .map_err(failed("LOCK TABLE"))?;
            // Nobody can change the table now: its version is final until the soak lets go.
            let version: i32 = blocker
                .query_one(
                    &format!(
                        "SELECT coalesce(max(\"MigrationVersion\"), 0) FROM public.{HISTORY_TABLE} \
                         WHERE \"SchemaName\" = $1 AND \"BoxTableName\" = $2"
                    ),
                    &[&entry.schema, &entry.table],
                )
                .await
                .map_err(failed("read its version"))?
                .get(0);
            if version < 1 || version as u32 >= entry.latest() {
                return Err(format!("its history says version {version}"));
            }
            soak.patch(entry, json!({"spec": {"targetVersion": version + 1}}))
                .await;
            let waiting = Instant::now();
            loop {
                let pid: Option<i32> = watcher
                    .query_opt(
                        "SELECT r.pid FROM pg_locks r JOIN pg_stat_activity a ON a.pid = r.pid \
                         WHERE r.locktype = 'relation' AND NOT r.granted \
                         AND r.relation = to_regclass($1) \
                         AND a.application_name LIKE 'boxtable-operator/%' \
                         AND EXISTS (SELECT 1 FROM pg_locks l WHERE l.pid = r.pid \
                           AND l.locktype = 'advisory' AND l.granted AND l.objsubid = 1 \
                           AND (l.classid::int8 << 32) | l.objid::int8 = $2) LIMIT 1",
                        &[&table.quoted(), &key],
                    )
                    .await
                    .ok()
                    .flatten()
                    .map(|row| row.get(0));
                if let Some(pid) = pid {
                    return Ok(pid);
                }
                if waiting.elapsed() > STAGE_BOUND {
                    let status = soak.fetch(entry).await.map(|o| o.data["status"].clone());
                    return Err(format!(
                        "no pass of the leader waited for it under its lock within \
                         {STAGE_BOUND:?} of targetVersion {}; status {status:?}",
                        version + 1
                    ));
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        .await;
        let done = match staged {
            Ok(pid) => {
                self.interrupt(soak, entry, blocker, watcher, pid, key)
                    .await
            }
            Err(why) => {
                eprintln!(
                    "soak: no deletion mid-migration on {}: {why}",
                    entry.qualified()
                );
                None
            }
        };
        let _ = blocker.batch_execute("ROLLBACK").await;
        soak.registry
            .reserved
            .lock()
            .unwrap()
            .remove(&entry.qualified());
        done
    }

    /// Deletes the leader's Pod while session `pid` holds lock `key` and waits for the table;
    /// the lock must be let go within [`RELEASE_BOUND`], then the soak's transaction ends.
    async fn interrupt(
        &self,
        soak: &Soak,
        entry: &Entry,
        blocker: &tokio_postgres::Client,
        watcher: &tokio_postgres::Client,
        pid: i32,
        key: i64,
    ) -> Option<(Disruption, Instant)> {
        let (leader, _) = self.leader_and_standby(soak).await?;
        let name = pod_name(&leader);
        let deleted = Instant::now();
        self.delete_pod(&name).await;
        loop {
            let held: bool = watcher
                .query_one(
                    "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE pid = $1 AND locktype = 'advisory' \
                     AND granted AND objsubid = 1 AND (classid::int8 << 32) | objid::int8 = $2)",
                    &[&pid, &key],
                )
                .await
                .map_or(true, |row| row.get(0));
            if !held {
                break;
            }
            if deleted.elapsed() > RELEASE_BOUND {
                soak.violations.add(format!(
                    "the pass of deleted leader Pod {name} still held {}'s advisory lock (session \
                     {pid}) {RELEASE_BOUND:?} after the Pod's deletion, in the middle of a migration",
                    entry.qualified()
                ));
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        self.longest_release_ms
            .fetch_max(deleted.elapsed().as_millis() as u64, Ordering::Relaxed);
        let _ = blocker.batch_execute("ROLLBACK").await;
        self.gone(soak, &name, true, deleted).await;
        Some((Disruption::LeaderDeletedMidMigration, deleted))
    }

    /// SIGKILLs the operator's process in the leader's Pod (or the standby's); the kubelet must
    /// restart the container. A Pod already restarted twice is deleted instead (the kubelet's
    /// back-off would only grow).
    async fn kill(&self, soak: &Arc<Soak>, rng: &mut StdRng) -> Option<(Disruption, Instant)> {
        let (leader, standby) = self.leader_and_standby(soak).await?;
        let mut candidates = vec![leader];
        candidates.extend(standby);
        if rng.random_bool(0.4) {
            candidates.reverse();
        }
        let Some(pod) = candidates.into_iter().find(|p| restarts(p) < 2) else {
            return self.delete(soak, true).await;
        };
        let (name, uid, before) = (
            pod_name(&pod),
            pod.metadata.uid.clone().unwrap_or_default(),
            restarts(&pod),
        );
        let (s, find) = (soak.clone(), uid.clone());
        let pid = tokio::task::spawn_blocking(move || {
            s.node.as_ref().unwrap().install.find_operator_pid(&find)
        })
        .await
        .unwrap()?;
        *self.kills.lock().unwrap().entry(uid).or_default() += 1;
        let killed = std::process::Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .output()
            .unwrap();
        assert!(killed.status.success(), "kill: {}", printed(&killed));
        let since = Instant::now();
        loop {
            let pod = self.pod(&name).await?;
            if restarts(&pod) > before && is_ready(&pod) {
                let code = container(&pod)
                    .and_then(|s| s.last_state.as_ref()?.terminated.as_ref())
                    .map(|t| t.exit_code);
                if code != Some(137) {
                    soak.violations.add(format!(
                        "the operator's container in {name}, SIGKILLed, ended with {code:?}, not 137"
                    ));
                }
                return Some((Disruption::ContainerKilled, since));
            }
            if since.elapsed() > RECOVER_BOUND {
                soak.violations.add(format!(
                    "the operator's container in {name} was not restarted and Ready within \
                     {RECOVER_BOUND:?} of its SIGKILL: {:?}",
                    pod.status
                ));
                return None;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Restarts the kubelet (SIGTERM or SIGKILL); it must come back Ready.
    async fn restart_kubelet(
        &self,
        soak: &Soak,
        rng: &mut StdRng,
    ) -> Option<(Disruption, Instant)> {
        let kill = rng.random_bool(0.5);
        let since = Instant::now();
        let node = self.install.node;
        let restarted = tokio::task::spawn_blocking(move || node.restart_kubelet(kill))
            .await
            .unwrap();
        bump(&self.checks);
        if let Err(message) = restarted {
            soak.violations
                .add(format!("the kubelet did not come back Ready: {message}"));
            return None;
        }
        let kind = if kill {
            Disruption::KubeletKilled
        } else {
            Disruption::KubeletRestarted
        };
        Some((kind, since))
    }

    /// `kubectl rollout restart` of the Deployment; `kubectl rollout status` must see it complete.
    async fn rollout(&self, soak: &Soak) -> Option<(Disruption, Instant)> {
        let plane = self.install.plane;
        let since = Instant::now();
        let deployment = format!("deployment/{DEPLOYMENT}");
        let status = tokio::task::spawn_blocking(move || {
            plane.kubectl_admin(
                &["-n", OPERATOR_NAMESPACE, "rollout", "restart", &deployment],
                None,
            )?;
            let out = plane.kubectl_as(
                &plane.admin_kubeconfig,
                &[
                    "-n",
                    OPERATOR_NAMESPACE,
                    "rollout",
                    "status",
                    &deployment,
                    "--timeout=300s",
                ],
                None,
            );
            if out.status.success() {
                Ok(String::new())
            } else {
                Err(printed(&out))
            }
        })
        .await
        .unwrap();
        bump(&self.checks);
        if let Err(message) = status {
            soak.violations
                .add(format!("the rollout restart did not complete: {message}"));
            return None;
        }
        Some((Disruption::Rollout, since))
    }

    /// The peak of each operator container's memory cgroup (v1), and its limit.
    fn sample_memory(&self, pods: &[Pod]) {
        let root = PathBuf::from("/sys/fs/cgroup/memory").join(
            self.install
                .node
                .dir
                .file_name()
                .expect("the node's directory has a name"),
        );
        for pod in pods {
            let uid = pod.metadata.uid.clone().unwrap_or_default();
            let Some(id) = container(pod)
                .and_then(|s| s.container_id.clone())
                .and_then(|id| id.rsplit_once("://").map(|(_, id)| id.to_owned()))
            else {
                continue;
            };
            for qos in ["kubepods/burstable", "kubepods/besteffort", "kubepods"] {
                let dir = root.join(qos).join(format!("pod{uid}")).join(&id);
                if let Some(peak) = read_u64(&dir.join("memory.max_usage_in_bytes")) {
                    self.memory_peak.fetch_max(peak, Ordering::Relaxed);
                    if let Some(limit) = read_u64(&dir.join("memory.limit_in_bytes")) {
                        self.memory_limit.store(limit, Ordering::Relaxed);
                    }
                    break;
                }
            }
        }
    }

    /// Deletes the soak's namespaces while the operator runs (it finalizes their BoxTables, so
    /// no later test finds them), then scales the Deployment to zero: each Pod must be gone within
    /// [`EXIT_BOUND`].
    pub(crate) async fn stop_all(&self, soak: &Soak) {
        self.check_restarts(soak).await;
        self.sample_memory(&self.operator_pods(true).await);
        let plane = self.install.plane;
        for ns in NAMESPACES {
            let deleted = tokio::task::spawn_blocking(move || {
                plane.kubectl_admin(&["delete", "namespace", ns, "--timeout=240s"], None)
            })
            .await
            .unwrap();
            if let Err(message) = deleted {
                soak.violations.add(format!(
                    "namespace {ns} was not deleted within 240 s: {message}"
                ));
            }
        }
        let pods = self.operator_pods(true).await;
        let scaled = Instant::now();
        let done = tokio::task::spawn_blocking(move || scale_to_zero(plane))
            .await
            .unwrap();
        if let Err(message) = done {
            soak.violations
                .add(format!("scaling the Deployment to zero failed: {message}"));
        }
        for pod in pods {
            self.gone(soak, &pod_name(&pod), false, scaled).await;
        }
    }

    /// One line: each disruption's count and times back to Ready, memory, restarts.
    pub(crate) fn summary(&self) -> String {
        let recoveries = self.recoveries.lock().unwrap();
        let count = |d: Disruption| recoveries.get(&d).map_or(0, Vec::len);
        let times: Vec<String> = recoveries
            .iter()
            .map(|(d, times)| {
                let mut sorted = times.clone();
                sorted.sort();
                format!(
                    "{} {}: {:.1}/{:.1}/{:.1} s",
                    d.describe(),
                    sorted.len(),
                    sorted[0].as_secs_f64(),
                    sorted[sorted.len() / 2].as_secs_f64(),
                    sorted[sorted.len() - 1].as_secs_f64()
                )
            })
            .collect();
        format!(
            "node disruptions {} (Pod deletions {}: leader {}, leader mid-migration {}, standby {}; \
             leader deletions that found no migration to interrupt {}; container SIGKILLs {}; \
             kubelet restarts {}: SIGTERM {}, SIGKILL {}; rollouts {}), back to two Ready Pods and \
             a Lease holder after (min/median/max) [{}], longest Pod exit {:.1} s, longest lock \
             release after a deletion mid-migration {:.1} s, operator memory cgroup peak {:.1} MiB \
             of {:.0} MiB, OOM kills {}",
            recoveries.values().map(Vec::len).sum::<usize>(),
            count(Disruption::LeaderDeleted)
                + count(Disruption::LeaderDeletedMidMigration)
                + count(Disruption::StandbyDeleted),
            count(Disruption::LeaderDeleted),
            count(Disruption::LeaderDeletedMidMigration),
            count(Disruption::StandbyDeleted),
            get(&self.unstaged),
            count(Disruption::ContainerKilled),
            count(Disruption::KubeletRestarted) + count(Disruption::KubeletKilled),
            count(Disruption::KubeletRestarted),
            count(Disruption::KubeletKilled),
            count(Disruption::Rollout),
            times.join(", "),
            get(&self.longest_exit_ms) as f64 / 1000.0,
            get(&self.longest_release_ms) as f64 / 1000.0,
            get(&self.memory_peak) as f64 / 1_048_576.0,
            get(&self.memory_limit) as f64 / 1_048_576.0,
            get(&self.oom_kills),
        )
    }

    /// After a failure: the node's kubelet and containerd logs and the Pods' logs, into `dir`.
    pub(crate) fn keep_logs(&self, dir: &Path) {
        let node = &self.install.node.dir;
        for log in ["kubelet.log", "containerd.log", "inside.log"] {
            let _ = std::fs::copy(node.join(log), dir.join(log));
        }
        let _ = copy_dir(&node.join("pod-logs"), &dir.join("pod-logs"));
    }

    fn record(&self, what: Disruption, took: Duration) {
        self.recoveries
            .lock()
            .unwrap()
            .entry(what)
            .or_default()
            .push(took);
    }
}

/// The node's chaos: one disruption at a time, every kind once per round in a random order, the
/// rollout once half-way, each followed by a wait until the operator is back; until the soak
/// stops, then a last wait for the operator.
pub(crate) async fn chaos(soak: Arc<Soak>, length: Duration, seed: u64) {
    let node = soak.node.as_ref().unwrap();
    let mut rng = StdRng::seed_from_u64(seed);
    let started = Instant::now();
    let mut deck = Vec::new();
    let mut rolled = false;
    loop {
        let pause = Duration::from_millis(rng.random_range(1000..4000));
        let until = Instant::now() + pause;
        while Instant::now() < until && !soak.stop.load(Ordering::Relaxed) {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        if soak.stop.load(Ordering::Relaxed) {
            break;
        }
        node.check_restarts(&soak).await;
        let next = if !rolled && started.elapsed() >= length / 2 {
            rolled = true;
            Disruption::Rollout
        } else {
            if deck.is_empty() {
                deck = vec![
                    Disruption::LeaderDeleted,
                    Disruption::LeaderDeletedMidMigration,
                    Disruption::StandbyDeleted,
                    Disruption::ContainerKilled,
                    Disruption::KubeletRestarted,
                ];
                deck.shuffle(&mut rng);
            }
            deck.pop().unwrap()
        };
        let done = match next {
            Disruption::LeaderDeleted => node.delete(&soak, true).await,
            Disruption::StandbyDeleted => node.delete(&soak, false).await,
            Disruption::LeaderDeletedMidMigration => {
                node.delete_mid_migration(&soak, &mut rng).await
            }
            Disruption::ContainerKilled => node.kill(&soak, &mut rng).await,
            Disruption::KubeletRestarted | Disruption::KubeletKilled => {
                node.restart_kubelet(&soak, &mut rng).await
            }
            Disruption::Rollout => node.rollout(&soak).await,
        };
        if let Some((done, since)) = done
            && let Some(took) = node.recovered(&soak, since, done.describe()).await
        {
            node.record(done, took);
        }
        node.check_restarts(&soak).await;
    }
    node.recovered(&soak, Instant::now(), "end of the chaos")
        .await;
    if length >= Duration::from_secs(60) {
        let recoveries = node.recoveries.lock().unwrap();
        for kind in [
            Disruption::LeaderDeleted,
            Disruption::ContainerKilled,
            Disruption::Rollout,
        ] {
            if !recoveries.contains_key(&kind) {
                soak.violations.add(format!(
                    "the node's chaos never completed a {} in {length:?}",
                    kind.describe()
                ));
            }
        }
        if !recoveries.contains_key(&Disruption::KubeletRestarted)
            && !recoveries.contains_key(&Disruption::KubeletKilled)
        {
            soak.violations.add(format!(
                "the node's chaos never completed a kubelet restart in {length:?}"
            ));
        }
    }
}

/// Samples the operator containers' memory cgroups every second.
pub(crate) async fn memory_sampler(soak: Arc<Soak>) {
    let node = soak.node.as_ref().unwrap();
    while !soak.stop.load(Ordering::Relaxed) {
        node.sample_memory(&node.operator_pods(true).await);
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

fn pod_name(pod: &Pod) -> String {
    pod.metadata.name.clone().unwrap_or_default()
}

fn is_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

fn container(pod: &Pod) -> Option<&k8s_openapi::api::core::v1::ContainerStatus> {
    pod.status.as_ref()?.container_statuses.as_ref()?.first()
}

fn restarts(pod: &Pod) -> u64 {
    container(pod).map_or(0, |s| u64::try_from(s.restart_count).unwrap_or(0))
}

fn read_u64(path: &Path) -> Option<u64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

fn copy_dir(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_dir(&entry.path(), &target)?;
        } else {
            std::fs::copy(entry.path(), target)?;
        }
    }
    Ok(())
}
