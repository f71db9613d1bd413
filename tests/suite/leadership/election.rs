//! Leader election on a coordination.k8s.io/v1 Lease against the real kube-apiserver, directly
//! and through a fault-injecting proxy (each test in a namespace of its own): hand-over on shutdown, expiry judged by how long
//! the record has gone unchanged (holders with skewed clocks), and renewals that survive 503s,
//! 429s and a 20-second stall.

use std::time::{Duration, Instant};

use boxtable_operator::controller::leader::{Ended, LeaderElector, Timing};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::Api;
use kube::api::PostParams;
use tokio_util::sync::CancellationToken;

use crate::support;
use crate::support::fault_proxy::{FaultProxy, Rule};
use crate::support::wait::wait_until_within;

const LEASE: &str = "boxtable-operator";
/// How long any wait on a condition may take: generous, for busy machines.
const WAIT: Duration = Duration::from_secs(60);

/// Short timing for most tests: a 3 s lease, renewed every 200 ms, given up after 2.5 s.
const SHORT: Timing = Timing {
    lease_duration: Duration::from_secs(3),
    renew_deadline: Duration::from_millis(2_500),
    retry_period: Duration::from_millis(200),
};

/// Six failed renewals in a row (200 ms apart) fit well within the renew deadline (10 s), also
/// on a busy machine.
const OUTLASTS_SIX_FAILED_RENEWALS: Timing = Timing {
    lease_duration: Duration::from_secs(12),
    renew_deadline: Duration::from_secs(10),
    retry_period: Duration::from_millis(200),
};

/// A lease long enough to outlast a 20 s stall; the stalled request is abandoned after half the
/// renew deadline and retried.
const OUTLASTS_A_20_SECOND_STALL: Timing = Timing {
    lease_duration: Duration::from_secs(30),
    renew_deadline: Duration::from_secs(25),
    retry_period: Duration::from_secs(1),
};

/// A client (the admin) and a namespace of this test's own on the real API server.
#[derive(Clone)]
struct Server {
    client: kube::Client,
    namespace: String,
}

async fn server() -> Server {
    let plane = support::control_plane::control_plane();
    let namespace = plane.create_namespace("leader");
    Server {
        client: plane.admin_client().await,
        namespace,
    }
}

impl Server {
    /// The same namespace through another client (a fault proxy's).
    fn via(&self, client: kube::Client) -> Server {
        Server {
            client,
            namespace: self.namespace.clone(),
        }
    }
}

fn leases(server: &Server) -> Api<Lease> {
    Api::namespaced(server.client.clone(), &server.namespace)
}

fn elector(server: &Server, identity: &str, timing: Timing) -> LeaderElector {
    LeaderElector::new(leases(server), LEASE, identity).with_timing(timing)
}

/// Two electors with [`SHORT`] timing on a fresh server: `pod-a`, which has just won, and
/// `pod-b`, standing by.
async fn a_leader_and_a_standby() -> (Server, LeaderElector, LeaderElector) {
    let client = server().await;
    let first = elector(&client, "pod-a", SHORT);
    let second = elector(&client, "pod-b", SHORT);
    assert!(wins_within(&first, WAIT).await);
    (client, first, second)
}

/// Tries to become leader for `within`; true if it did.
async fn wins_within(elector: &LeaderElector, within: Duration) -> bool {
    let cancel = CancellationToken::new();
    let stop = cancel.clone();
    let timer = tokio::spawn(async move {
        tokio::time::sleep(within).await;
        stop.cancel();
    });
    let won = elector.acquire(&cancel, |_| {}).await;
    timer.abort();
    won
}

async fn holder(client: &Server) -> Option<String> {
    leases(client)
        .get(LEASE)
        .await
        .unwrap()
        .spec
        .and_then(|s| s.holder_identity)
}

/// Writes the Lease as a holder `identity` whose clock is `skew` away from ours would.
async fn write_skewed(client: &Server, identity: &str, skew: jiff::SignedDuration, n: i64) {
    let api = leases(client);
    let stamp = MicroTime(
        jiff::Timestamp::now()
            .checked_add(skew)
            .unwrap()
            .checked_add(jiff::SignedDuration::from_millis(n))
            .unwrap(),
    );
    let spec = LeaseSpec {
        holder_identity: Some(identity.to_owned()),
        lease_duration_seconds: Some(3),
        acquire_time: Some(stamp.clone()),
        renew_time: Some(stamp),
        lease_transitions: Some(0),
        ..LeaseSpec::default()
    };
    match api.get_opt(LEASE).await.unwrap() {
        Some(mut lease) => {
            lease.spec = Some(spec);
            api.replace(LEASE, &PostParams::default(), &lease)
                .await
                .unwrap();
        }
        None => {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(LEASE.to_owned()),
                    ..ObjectMeta::default()
                },
                spec: Some(spec),
            };
            api.create(&PostParams::default(), &lease).await.unwrap();
        }
    }
}

#[tokio::test]
async fn a_standby_waits_while_the_leader_renews_and_takes_over_at_once_when_it_is_handed_back() {
    let (client, first, second) = a_leader_and_a_standby().await;

    let keep = CancellationToken::new();
    let renewing = {
        let keep = keep.clone();
        tokio::spawn(async move { first.keep(&keep).await })
    };
    assert!(
        !wins_within(&second, SHORT.lease_duration * 2).await,
        "a renewed lease is never taken over, even past its duration"
    );

    keep.cancel();
    assert!(matches!(renewing.await.unwrap(), Ended::Shutdown));
    assert_eq!(holder(&client).await, None, "handed back");
    let started = Instant::now();
    assert!(wins_within(&second, WAIT).await);
    assert!(
        started.elapsed() < SHORT.lease_duration,
        "taken over at the next try, not after expiry: {:?}",
        started.elapsed()
    );
    let spec = leases(&client).get(LEASE).await.unwrap().spec.unwrap();
    assert_eq!(spec.holder_identity.as_deref(), Some("pod-b"));
    assert_eq!(spec.lease_transitions, Some(1));
}

#[tokio::test]
async fn a_leader_that_stops_renewing_is_taken_over_once_its_record_is_a_lease_duration_old() {
    let (_client, _first, second) = a_leader_and_a_standby().await;
    let started = Instant::now();
    assert!(wins_within(&second, WAIT).await);
    let waited = started.elapsed();
    assert!(
        waited >= SHORT.lease_duration,
        "took over before the record had gone unchanged for a lease duration: {waited:?}"
    );
}

#[tokio::test]
async fn a_holder_whose_clock_is_an_hour_behind_keeps_the_lease_while_it_renews() {
    let client = server().await;
    let behind = jiff::SignedDuration::from_hours(-1);
    write_skewed(&client, "skewed-holder", behind, 0).await;
    let renewer = {
        let client = client.clone();
        tokio::spawn(async move {
            for n in 1.. {
                tokio::time::sleep(Duration::from_millis(200)).await;
                write_skewed(&client, "skewed-holder", behind, n).await;
            }
        })
    };
    let standby = elector(&client, "pod-b", SHORT);

    assert!(
        !wins_within(&standby, SHORT.lease_duration * 2).await,
        "a renewTime an hour old on our clock is not an expired lease while the record changes"
    );
    renewer.abort();
    let _ = renewer.await;
    let frozen = Instant::now();
    assert!(wins_within(&standby, WAIT).await);
    assert!(
        frozen.elapsed() >= SHORT.lease_duration - SHORT.retry_period,
        "taken over {:?} after the holder stopped",
        frozen.elapsed()
    );
}

#[tokio::test]
async fn a_dead_holder_whose_clock_was_an_hour_ahead_is_taken_over_after_a_lease_duration() {
    let client = server().await;
    write_skewed(
        &client,
        "dead-holder",
        jiff::SignedDuration::from_hours(1),
        0,
    )
    .await;
    let standby = elector(&client, "pod-b", SHORT);
    let started = Instant::now();
    assert!(
        wins_within(&standby, WAIT).await,
        "a renewTime an hour in the future does not keep a dead holder's lease"
    );
    assert!(
        started.elapsed() >= SHORT.lease_duration,
        "{:?}",
        started.elapsed()
    );
    assert_eq!(holder(&client).await.as_deref(), Some("pod-b"));
}

#[tokio::test]
async fn renewals_failing_with_503_429_and_500_do_not_end_leadership() {
    let timing = OUTLASTS_SIX_FAILED_RENEWALS;
    let client = server().await;
    let proxy = FaultProxy::start(client.client.clone()).await;
    // kube's client retries 429, 503 and 504 itself; without that, every fault reaches the
    // elector, whose own retries are under test.
    let mut config = proxy.config();
    config.default_retry = false;
    let leader = elector(
        &client.via(kube::Client::try_from(config).unwrap()),
        "pod-a",
        timing,
    );
    assert!(wins_within(&leader, WAIT).await);
    let lease_put = |rule: Rule| rule.method("PUT").path_contains("/leases/");
    let unavailable = proxy.add(lease_put(Rule::status(503)).times(2));
    let throttled = proxy.add(lease_put(Rule::status(429)).times(2));
    let failing = proxy.add(lease_put(Rule::status(500)).times(2));
    let renewed = proxy.add(lease_put(Rule::count()));
    let keep = CancellationToken::new();
    let renewing = {
        let keep = keep.clone();
        tokio::spawn(async move { leader.keep(&keep).await })
    };

    wait_until_within("six failed renewals and then two good ones", WAIT, || {
        std::future::ready(
            renewing.is_finished()
                || (unavailable.hits() == 2
                    && throttled.hits() == 2
                    && failing.hits() == 2
                    && renewed.hits() >= 2),
        )
    })
    .await;

    assert!(
        !renewing.is_finished(),
        "leadership ended: {:?}",
        renewing.await
    );
    assert_eq!(holder(&client).await.as_deref(), Some("pod-a"));
    keep.cancel();
    assert!(matches!(renewing.await.unwrap(), Ended::Shutdown));
}

#[tokio::test]
async fn a_renewal_stalled_for_20_seconds_does_not_end_leadership_and_no_standby_takes_over() {
    let timing = OUTLASTS_A_20_SECOND_STALL;
    let client = server().await;
    let proxy = FaultProxy::start(client.client.clone()).await;
    let leader = elector(&client.via(proxy.client()), "pod-a", timing);
    assert!(wins_within(&leader, WAIT).await);
    let stalled = proxy.add(
        Rule::stall(Duration::from_secs(20))
            .then_status(504)
            .method("PUT")
            .path_contains("/leases/")
            .times(1),
    );
    let renewed = proxy.add(Rule::count().method("PUT").path_contains("/leases/"));
    let keep = CancellationToken::new();
    let renewing = {
        let keep = keep.clone();
        tokio::spawn(async move { leader.keep(&keep).await })
    };
    let standby_stop = CancellationToken::new();
    let standby = {
        let stop = standby_stop.clone();
        let standby = elector(&client, "pod-b", timing);
        tokio::spawn(async move { standby.acquire(&stop, |_| {}).await })
    };

    wait_until_within(
        "the stalled renewal and two good ones after it",
        WAIT,
        || {
            std::future::ready(
                renewing.is_finished() || (stalled.hits() == 1 && renewed.hits() >= 2),
            )
        },
    )
    .await;

    assert!(
        !renewing.is_finished(),
        "leadership ended: {:?}",
        renewing.await
    );
    assert!(
        !standby.is_finished(),
        "the standby took over during the stall"
    );
    assert_eq!(holder(&client).await.as_deref(), Some("pod-a"));
    keep.cancel();
    assert!(matches!(renewing.await.unwrap(), Ended::Shutdown));
    assert!(
        standby.await.unwrap(),
        "the standby takes over once the lease is handed back"
    );
    standby_stop.cancel();
}
