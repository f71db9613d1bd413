//! Leader election on a coordination.k8s.io/v1 Lease, against the local API server.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::{Duration, Instant};

use boxtable_localapi::LocalApi;
use boxtable_operator::controller::leader::LeaderElector;
use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use kube::config::{KubeConfigOptions, Kubeconfig};
use tokio_util::sync::CancellationToken;

async fn leases() -> (boxtable_localapi::LocalApiHandle, Api<Lease>) {
    let api = LocalApi::builder().start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kubeconfig");
    api.write_kubeconfig(&path).unwrap();
    let config = kube::Config::from_custom_kubeconfig(
        Kubeconfig::read_from(&path).unwrap(),
        &KubeConfigOptions::default(),
    )
    .await
    .unwrap();
    let client = kube::Client::try_from(config).unwrap();
    (api, Api::namespaced(client, "default"))
}

fn elector(api: &Api<Lease>, identity: &str) -> LeaderElector {
    LeaderElector::new(api.clone(), "boxtable-operator", identity)
        .with_timing(Duration::from_secs(2), Duration::from_millis(200))
}

/// Tries to become leader for `within`; true if it did.
async fn wins_within(elector: &LeaderElector, within: Duration) -> bool {
    let cancel = CancellationToken::new();
    let stop = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(within).await;
        stop.cancel();
    });
    elector.acquire(&cancel).await.unwrap()
}

#[tokio::test]
async fn a_second_replica_waits_while_the_leader_renews_and_takes_over_when_it_hands_back() {
    let (_server, api) = leases().await;
    let first = elector(&api, "pod-a");
    let second = elector(&api, "pod-b");
    assert!(wins_within(&first, Duration::from_secs(1)).await);

    let keep = CancellationToken::new();
    let renewing = {
        let keep = keep.clone();
        let first = elector(&api, "pod-a");
        tokio::spawn(async move { first.keep(&keep).await })
    };
    assert!(
        !wins_within(&second, Duration::from_secs(3)).await,
        "a renewed lease is never taken over, even past its duration"
    );

    keep.cancel();
    renewing.await.unwrap().unwrap();
    let started = Instant::now();
    assert!(wins_within(&second, Duration::from_secs(5)).await);
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "handed back, not expired: {:?}",
        started.elapsed()
    );
    let lease = api.get("boxtable-operator").await.unwrap();
    let spec = lease.spec.unwrap();
    assert_eq!(spec.holder_identity.as_deref(), Some("pod-b"));
    assert_eq!(spec.lease_transitions, Some(1));
}

#[tokio::test]
async fn a_leader_that_stops_renewing_loses_the_lease_when_it_expires() {
    let (_server, api) = leases().await;
    let first = elector(&api, "pod-a");
    let second = elector(&api, "pod-b");
    assert!(wins_within(&first, Duration::from_secs(1)).await);
    let started = Instant::now();
    assert!(wins_within(&second, Duration::from_secs(10)).await);
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(1_500),
        "took over before the lease expired: {waited:?}"
    );
}
