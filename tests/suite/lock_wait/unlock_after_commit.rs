//! A migration that committed is a success even when `pg_advisory_unlock` afterwards finds the
//! lock already gone: the table is at its version, the run says so, and flags the lost lock.

use boxtable_operator::lock::LockIdentity;
use boxtable_operator::migrate::RunPath;
use boxtable_operator::report::chain;

use crate::support;
use crate::support::advisory_locks;
use crate::support::migrate::*;

#[tokio::test]
async fn an_unlock_that_finds_the_lock_gone_after_commit_still_reports_the_migration() {
    let (db, client) = support::fresh_db_and_client().await;
    let plan = outbox("Outbox").build();
    release_lock_at_commit_of_history_rows(&client, LockIdentity::for_table(plan.table()).key())
        .await;

    let outcome = run(&db, &plan).await.unwrap_or_else(|e| {
        panic!(
            "a committed migration was reported as failed: {}",
            chain(&e)
        )
    });

    assert_eq!(outcome.path, RunPath::Fresh);
    assert_eq!(outcome.to_version, 8);
    assert!(outcome.lock_lost_after_commit, "{outcome:?}");
    assert_eq!(
        history_versions(&client, "public").await,
        [(8, "fresh install at V8".to_owned())]
    );
    assert!(
        columns(&client, "public", "outbox")
            .await
            .iter()
            .any(|(name, _, _)| name == "causationid"),
        "the V8 table was committed"
    );
    assert_eq!(advisory_locks(&client).await, 0);
}

#[tokio::test]
async fn a_normal_unlock_after_commit_is_not_flagged() {
    let db = support::fresh_db().await;

    let outcome = run(&db, &outbox("Outbox").build()).await.unwrap();

    assert_eq!(outcome.path, RunPath::Fresh);
    assert!(!outcome.lock_lost_after_commit, "{outcome:?}");
}
