//! A run cancelled while its `COMMIT` is still running (here a deferred trigger that takes its
//! time, as a commit waiting for a synchronous standby would) asks the server to stop it: the
//! commit rolls back, the run says `Cancelled`, and the lock is released.

use std::time::Duration;

use boxtable_operator::migrate;
use boxtable_operator::reason::Reason;
use boxtable_operator::report::chain;
use tokio_util::sync::CancellationToken;

use crate::support;
use crate::support::Sql;
use crate::support::migrate::*;

/// How long the commit would take if nothing stopped it: longer than the test waits.
const SLOW_COMMIT_SECONDS: u32 = 120;
const WAIT: Duration = Duration::from_secs(60);

#[tokio::test]
async fn a_run_cancelled_while_its_commit_runs_rolls_back_and_says_cancelled() {
    let (db, client) = support::fresh_db_and_client().await;
    slow_commit_of_history_rows(&client, SLOW_COMMIT_SECONDS).await;
    let plan = outbox("Outbox").build();
    let cancel = CancellationToken::new();
    // Cancel once the run's COMMIT is running on the server, not at a guessed moment.
    let trigger = async {
        support::wait::wait_until("the run's COMMIT is running on the server", || async {
            let committing: i64 = client
                .value(
                    "SELECT count(*) FROM pg_stat_activity \
                     WHERE query = 'COMMIT' AND state = 'active' AND pid <> pg_backend_pid()",
                    &[],
                )
                .await;
            committing > 0
        })
        .await;
        cancel.cancel();
    };

    let mut session = session(&db).await;
    let (result, ()) = tokio::join!(
        tokio::time::timeout(WAIT, migrate::run(&mut session, &plan, &cancel, |_| ())),
        trigger
    );
    let err = result
        .expect("the cancellation must stop the commit")
        .expect_err("a commit the cancellation stopped is not a success");

    assert_eq!(err.reason(), Reason::Cancelled, "{}", chain(&err));
    assert_nothing_committed_for_public_outbox(&client).await;
}
