//! Drift on the real control plane: a Ready table altered behind the operator's back gets a
//! `Drifted` condition naming the difference (Ready stays True), one Warning event, and
//! `boxtable_drifted` counts it; once the table is put back the condition turns False, a Normal
//! event says so, and the gauge drops. Nothing is repaired.

use boxtable_operator::crd::BoxTable;

use crate::support::Sql;
use crate::support::controller::*;

fn drifted(bt: &BoxTable) -> Option<(String, String, String)> {
    let c = condition(bt.status.as_ref()?, "Drifted")?;
    Some((c.status.clone(), c.reason.clone(), c.message.clone()))
}

fn gauge(h: &Harness) -> String {
    h.metrics
        .encode()
        .unwrap()
        .lines()
        .find(|l| l.starts_with("boxtable_drifted "))
        .unwrap_or("boxtable_drifted (missing)")
        .to_owned()
}

/// Waits until `boxtable_drifted` reads `value` (counted from the controller's cache at each
/// scrape, so it follows the status once the cache has seen it).
async fn wait_for_gauge(h: &Harness, value: u32) {
    let want = format!("boxtable_drifted {value}");
    wait_until(&want, || async { gauge(h) == want }).await;
}

/// Drops the replay index behind the operator's back.
const DROP_REPLAY_INDEX: &str = "DROP INDEX public.idx_outbox_causationid";
/// Puts the replay index back as Brighter made it.
const RESTORE_REPLAY_INDEX: &str =
    "CREATE INDEX idx_outbox_causationid ON public.outbox (causationid)";

/// Runs `sql` on the database behind the operator's back and waits until `orders` has
/// Drifted=`status` (on the resync that follows).
async fn alter_and_wait_for_drifted(h: &Harness, sql: &str, status: &str) -> BoxTable {
    h.sql().await.batch(sql).await;
    h.wait_for("orders", &format!("Drifted={status}"), |bt| {
        drifted(bt).is_some_and(|(s, _, _)| s == status)
    })
    .await
}

async fn index_exists(h: &Harness) -> bool {
    h.sql()
        .await
        .value(
            "SELECT to_regclass('public.idx_outbox_causationid') IS NOT NULL",
            &[],
        )
        .await
}

#[tokio::test]
async fn a_dropped_replay_index_is_reported_as_drift_once_and_cleared_when_it_is_back() {
    let h = Harness::start().await;
    h.apply(boxtable("orders").outbox()).await;
    let bt = h
        .wait_for("orders", "Ready with Drifted=False", |bt| {
            is_ready(bt) && drifted(bt).is_some_and(|(s, _, _)| s == "False")
        })
        .await;
    let (_, reason, message) = drifted(&bt).unwrap();
    assert_eq!(reason, "NoDrift");
    assert_eq!(message, "public.outbox matches the shape of version 8");
    wait_for_gauge(&h, 0).await;

    let bt = alter_and_wait_for_drifted(&h, DROP_REPLAY_INDEX, "True").await;
    let (_, reason, message) = drifted(&bt).unwrap();
    println!(
        "{}",
        serde_json::to_string_pretty(condition(bt.status.as_ref().unwrap(), "Drifted").unwrap())
            .unwrap()
    );
    assert_eq!(reason, "Drifted");
    assert_eq!(
        message,
        "public.outbox differs from the shape of version 8: index idx_outbox_causationid on (causationid) is missing"
    );
    assert!(is_ready(&bt), "drift leaves Ready as it is");
    assert_eq!(reason_of_ready(&bt), "Migrated");
    wait_for_gauge(&h, 1).await;
    // `kubectl get -o wide` shows it beside READY; the default listing stays as narrow as it was.
    assert_eq!(
        get_column(&h, &["-o", "wide"], "DRIFTED"),
        Some("True".to_owned())
    );
    assert_eq!(
        get_column(&h, &["-o", "wide"], "READY"),
        Some("True".to_owned())
    );
    assert_eq!(get_column(&h, &[], "DRIFTED"), None);

    // Further resyncs find the same drift: no new event, nothing repaired.
    h.wait_for_passes(3).await;
    let warnings: Vec<_> = h
        .events("orders")
        .await
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("Drifted"))
        .collect();
    assert_eq!(warnings.len(), 1, "{warnings:#?}");
    assert_eq!(warnings[0].type_.as_deref(), Some("Warning"));
    assert!(
        warnings[0].series.is_none(),
        "published once: {warnings:#?}"
    );
    assert_eq!(warnings[0].note.as_deref(), Some(message.as_str()));
    assert!(!index_exists(&h).await, "drift is reported, never repaired");

    let bt = alter_and_wait_for_drifted(&h, RESTORE_REPLAY_INDEX, "False").await;
    assert_eq!(drifted(&bt).unwrap().1, "NoDrift");
    wait_for_gauge(&h, 0).await;
    wait_until("a Normal NoDrift event", || async {
        h.events("orders")
            .await
            .iter()
            .any(|e| e.reason.as_deref() == Some("NoDrift") && e.type_.as_deref() == Some("Normal"))
    })
    .await;
}

#[tokio::test]
async fn a_column_an_application_added_is_named_without_setting_drifted() {
    let h = Harness::start().await;
    h.apply_ready(boxtable("orders").outbox()).await;

    h.sql()
        .await
        .batch("ALTER TABLE public.outbox ADD COLUMN tenant text")
        .await;
    let bt = h
        .wait_for("orders", "the extra column in the Drifted message", |bt| {
            drifted(bt).is_some_and(|(_, _, m)| m.contains("tenant"))
        })
        .await;
    let (status, reason, message) = drifted(&bt).unwrap();
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "NoDrift"),
        "{message}"
    );
    assert!(message.contains("extra columns, not drift"), "{message}");
    wait_for_gauge(&h, 0).await;
    assert!(
        !h.events("orders")
            .await
            .iter()
            .any(|e| e.reason.as_deref() == Some("Drifted"))
    );
}

/// The value `kubectl get boxtable orders <args>` prints in column `column` (`None` when it has no
/// such column). Every column before MESSAGE is one word.
fn get_column(h: &Harness, args: &[&str], column: &str) -> Option<String> {
    let mut command = vec!["-n", h.namespace.as_str(), "get", "boxtable", "orders"];
    command.extend_from_slice(args);
    let out = h.plane.kubectl_admin(&command, None).unwrap();
    let mut lines = out.lines();
    let header: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    let row: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    let at = header.iter().position(|c| *c == column)?;
    Some(row[at].to_owned())
}

fn reason_of_ready(bt: &BoxTable) -> String {
    reason(bt.status.as_ref().unwrap()).to_owned()
}

#[tokio::test]
async fn a_pass_that_stalls_before_the_shape_check_says_drift_is_unknown_not_that_there_is_none() {
    let h = Harness::start().await;
    h.apply(boxtable("orders").outbox()).await;
    h.wait_for("orders", "Ready with Drifted=False", |bt| {
        is_ready(bt) && drifted(bt).is_some_and(|(s, _, _)| s == "False")
    })
    .await;

    // The payload column changed behind the operator's back: drift, and a payload that no longer
    // matches the spec, which stalls the pass before it compares the shape.
    h.sql()
        .await
        .batch(
            "ALTER TABLE public.outbox ALTER COLUMN body TYPE bytea USING convert_to(body, 'UTF8')",
        )
        .await;
    let bt = h.wait_stalled("orders", "PayloadMismatch").await;
    let (status, reason, message) = drifted(&bt).unwrap();
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("Unknown", "NotChecked"),
        "{message}"
    );
    assert_eq!(
        message,
        "the table's shape was not checked in the last pass: the pass stopped at PayloadMismatch; \
         the last check found no drift: public.outbox matches the shape of version 8"
    );
    assert!(
        !h.events("orders")
            .await
            .iter()
            .any(|e| e.reason.as_deref() == Some("NoDrift")),
        "nothing announces a finding no pass made"
    );
}
