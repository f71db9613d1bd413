//! The operator Pod of `dist/install.yaml` under the memory limit it ships with, holding 2,000
//! BoxTables: the kubelet enforces the limit (the container's memory cgroup carries it), every
//! BoxTable reaches Ready, and neither replica is restarted or OOM-killed on the way. The peak
//! of the leader's memory cgroup is printed against the limit.
//!
//! Like every node test, it runs one at a time (`scripts/test-node.sh`).

use std::time::{Duration, Instant};

use boxtable_operator::crd::BoxTable;
use futures::{StreamExt, TryStreamExt, stream};
use kube::api::{Api, ListParams, PostParams};
use serde_json::Value;

use crate::support::control_plane::OPERATOR_NAMESPACE;
use crate::support::controller::{SECRET, boxtable};
use crate::support::node::get_json;
use crate::support::node_install::{Install, name, secret_for};

const NS: &str = "node-scale";
/// BoxTables in the fleet, spread over [`SCHEMAS`] schemas.
const FLEET: usize = 2_000;
const SCHEMAS: usize = 20;

/// The memory limit `dist/install.yaml` gives the operator's container.
fn shipped_limit() -> u64 {
    let deployment =
        std::fs::read_to_string(crate::support::control_plane::root().join("dist/install.yaml"))
            .unwrap();
    let limit = deployment
        .split("\n---")
        .find(|d| d.contains("kind: Deployment"))
        .and_then(|d| d.split("limits:").nth(1))
        .and_then(|l| l.lines().find_map(|l| l.trim().strip_prefix("memory:")))
        .expect("dist/install.yaml's Deployment sets a memory limit")
        .trim()
        .to_owned();
    let mebibytes: u64 = limit
        .strip_suffix("Mi")
        .and_then(|m| m.parse().ok())
        .unwrap_or_else(|| panic!("the shipped memory limit {limit:?} is not in Mi"));
    mebibytes << 20
}

/// The directory of the memory cgroup (v1) of process `pid`, as seen from the host.
fn memory_cgroup(pid: u32) -> std::path::PathBuf {
    let cgroups = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap();
    let path = cgroups
        .lines()
        .find_map(|l| {
            let mut parts = l.splitn(3, ':');
            let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
            controllers
                .split(',')
                .any(|c| c == "memory")
                .then(|| path.to_owned())
        })
        .unwrap_or_else(|| panic!("process {pid} is in no memory cgroup: {cgroups}"));
    std::path::Path::new("/sys/fs/cgroup/memory").join(path.trim_start_matches('/'))
}

fn read_u64(path: &std::path::Path) -> u64 {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .trim()
        .parse()
        .unwrap()
}

/// Restarts of the operator's containers, and the reason each last ended, if it did.
fn restarts(pod: &Value) -> (u64, Option<String>) {
    let status = &pod["status"]["containerStatuses"][0];
    (
        status["restartCount"].as_u64().unwrap_or(0),
        status["lastState"]["terminated"]["reason"]
            .as_str()
            .map(str::to_owned),
    )
}

#[test]
fn the_operator_pod_holds_2000_boxtables_under_its_shipped_memory_limit() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let db = runtime.block_on(crate::support::fresh_db());
    let schemas: Vec<String> = (0..SCHEMAS).map(|s| format!("fleet{s:02}")).collect();
    runtime.block_on(async {
        let client = db.connect().await;
        for schema in &schemas {
            client
                .batch_execute(&format!("CREATE SCHEMA {schema}"))
                .await
                .unwrap();
        }
    });
    let mut install = Install::dist();
    install.namespace(NS);
    let plane = install.plane;
    plane.fresh_namespace(NS);
    plane
        .kubectl_admin(
            &["apply", "-f", "-"],
            Some(&secret_for(install.node, NS, SECRET, &db)),
        )
        .unwrap_or_else(|m| panic!("{m}"));

    // The kubelet gave the container the shipped limit.
    let limit = shipped_limit();
    let pods = install.ready_pods(2);
    let leader = install.leader(&pods);
    let leader_pod = pods.iter().find(|p| name(p) == leader).unwrap();
    let cgroup = memory_cgroup(install.operator_pid(leader_pod));
    assert_eq!(
        read_u64(&cgroup.join("memory.limit_in_bytes")),
        limit,
        "the memory cgroup of {leader} ({}) does not carry the shipped limit",
        cgroup.display()
    );

    // The fleet, created 16 at a time.
    let started = Instant::now();
    let boxtables: Api<BoxTable> = runtime.block_on(async {
        let client = plane.admin_client().await;
        Api::namespaced(client, NS)
    });
    runtime.block_on(async {
        stream::iter(0..FLEET)
            .map(|i| {
                let boxtables = boxtables.clone();
                let schema = &schemas[i % SCHEMAS];
                let mut bt = boxtable(&format!("outbox-{i:04}"))
                    .schema(schema)
                    .table(&format!("outbox_{i:04}"))
                    .build();
                bt.metadata.namespace = Some(NS.to_owned());
                async move { boxtables.create(&PostParams::default(), &bt).await }
            })
            .buffer_unordered(16)
            .try_collect::<Vec<_>>()
            .await
            .unwrap();
    });
    let created = started.elapsed();

    // All Ready, polled every 2 s; the leader's peak memory is read as it goes.
    let deadline = Instant::now() + Duration::from_secs(900);
    let ready = loop {
        let ready = runtime.block_on(async {
            let list = boxtables.list(&ListParams::default()).await.unwrap();
            list.items
                .iter()
                .filter(|bt| {
                    bt.status.as_ref().is_some_and(|s| {
                        s.conditions
                            .iter()
                            .any(|c| c.type_ == "Ready" && c.status == "True")
                    })
                })
                .count()
        });
        if ready == FLEET {
            break started.elapsed();
        }
        for pod in install.pods() {
            let (count, reason) = restarts(&pod);
            assert_eq!(
                count,
                0,
                "{} restarted ({reason:?}) with {ready} of {FLEET} BoxTables Ready",
                name(&pod)
            );
        }
        assert!(
            Instant::now() < deadline,
            "only {ready} of {FLEET} BoxTables Ready after {:?}",
            started.elapsed()
        );
        std::thread::sleep(Duration::from_secs(2));
    };

    let peak = read_u64(&cgroup.join("memory.max_usage_in_bytes"));
    let failures = read_u64(&cgroup.join("memory.failcnt"));
    for pod in get_json(
        plane,
        &[
            "-n",
            OPERATOR_NAMESPACE,
            "pods",
            "-l",
            crate::support::node_install::SELECTOR,
        ],
    )["items"]
        .as_array()
        .unwrap()
    {
        let (count, reason) = restarts(pod);
        assert_eq!(count, 0, "{} restarted ({reason:?})", name(pod));
    }
    assert!(peak <= limit, "peak {peak} above the limit {limit}");
    eprintln!(
        "{FLEET} BoxTables created in {:.1}s, all Ready {:.1}s after the first; the leader's \
         memory cgroup peaked at {:.1} MiB of its {} MiB limit (memory.failcnt {failures}); no \
         restart, no OOM kill",
        created.as_secs_f64(),
        ready.as_secs_f64(),
        peak as f64 / f64::from(1u32 << 20),
        limit >> 20
    );
}
