//! A run that finds its advisory lock gone after its last change commits nothing: the check that
//! the session still holds the lock runs after the statements and before `COMMIT`, whatever
//! released the lock in between.

use boxtable_operator::lock::LockIdentity;
use boxtable_operator::reason::Reason;
use boxtable_operator::report::chain;

use crate::support;
use crate::support::migrate::*;

#[tokio::test]
async fn a_lock_released_by_the_migrations_own_statements_rolls_the_whole_run_back() {
    let (db, client) = support::fresh_db_and_client().await;
    let plan = outbox("Outbox").owned_by("uid-a").build();
    release_lock_when_history_rows_are_written(
        &client,
        LockIdentity::for_table(plan.table()).key(),
    )
    .await;

    let err = run(&db, &plan)
        .await
        .expect_err("a run whose lock was gone before COMMIT must not succeed");

    assert_eq!(err.reason(), Reason::LockLost, "{}", chain(&err));
    assert_nothing_committed_for_public_outbox(&client).await;
}
