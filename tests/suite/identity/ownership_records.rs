//! Ownership recorded in the database, against a real PostgreSQL: a run records the BoxTable that
//! created or adopted a table, another BoxTable neither migrates nor drops it, and a drop drops
//! only a table its BoxTable owns, re-checked under the lock, with consent for the data it holds.

use boxtable_operator::migrate::ownership::{self, Origin};
use boxtable_operator::migrate::{self, DropBlock, DropRequest, DropVerdict, Plan, Rows, RunPath};
use boxtable_operator::reason::Reason;
use boxtable_operator::report::chain;
use tokio_util::sync::CancellationToken;

use crate::support;
use crate::support::Sql;
use crate::support::advisory_locks;
use crate::support::migrate::*;

fn record_of(comment: Option<String>) -> Option<ownership::OwnerRecord> {
    comment.as_deref().and_then(ownership::parse)
}

/// A fresh database, a client on it, and the plan of `public.outbox` for the BoxTable `uid-a`,
/// which that plan's run has created.
async fn outbox_created_for_uid_a() -> (support::TestDb, tokio_postgres::Client, Plan) {
    let (db, client) = support::fresh_db_and_client().await;
    let plan = outbox("Outbox").owned_by("uid-a").build();
    run(&db, &plan).await.unwrap();
    (db, client, plan)
}

/// Drops `plan`'s table (`public.outbox`) as its owner, with `consent` or without, and asserts
/// that it is gone.
async fn assert_drops_public_outbox(
    db: &support::TestDb,
    client: &tokio_postgres::Client,
    plan: &Plan,
    consent: bool,
) {
    let dropped = drop_as_owner(db, plan, consent).await.unwrap();
    assert!(dropped.dropped(), "{dropped:?}");
    assert!(columns(client, "public", "outbox").await.is_empty());
}

#[tokio::test]
async fn a_fresh_table_records_the_boxtable_that_created_it() {
    let (db, client) = support::fresh_db_and_client().await;

    run(&db, &outbox("Outbox").owned_by("uid-a").build())
        .await
        .unwrap();

    let record = record_of(table_comment(&client, "public.outbox").await).unwrap();
    assert_eq!(record.uid, "uid-a");
    assert_eq!(record.boxtable, "shop/uid-a");
    assert_eq!(record.origin, Origin::Created);
}

/// A user's comment that a literal quoted by hand would get wrong: quotes, backslashes, a
/// dollar-quote tag, a line break and non-ASCII text.
const USER_COMMENT: &str =
    "orders waiting to be sent; owner: team-a's \\\\queue\\n $$x$$ \u{e9}t\u{e9}\nsecond line";

/// Adopts `public.outbox` carrying [`USER_COMMENT`], with the database's
/// `standard_conforming_strings` set to `conforming`, and checks that the user's text comes back
/// byte for byte above the record.
async fn adoption_keeps_the_user_comment(conforming: bool) {
    let (db, client) = support::fresh_db_and_client().await;
    let setting = if conforming { "on" } else { "off" };
    client
        .batch(&format!(
            "ALTER DATABASE \"{}\" SET standard_conforming_strings = {setting}",
            db.name
        ))
        .await;
    outbox_at(&client, "public.outbox", 2, 0).await;
    client
        .execute(
            "SELECT pg_catalog.set_config('app.comment', $1, false)",
            &[&USER_COMMENT],
        )
        .await
        .unwrap();
    client
        .batch("DO $do$ BEGIN EXECUTE format('COMMENT ON TABLE public.outbox IS %L', current_setting('app.comment')); END $do$")
        .await;
    assert_eq!(
        table_comment(&client, "public.outbox").await.as_deref(),
        Some(USER_COMMENT)
    );

    let outcome = run(&db, &outbox("Outbox").owned_by("uid-a").build())
        .await
        .unwrap();

    assert_eq!(outcome.path, RunPath::Bootstrap);
    let comment = table_comment(&client, "public.outbox").await.unwrap();
    assert!(
        comment.starts_with(&format!("{USER_COMMENT}\n")),
        "the user's comment is kept exactly (standard_conforming_strings = {setting}): {comment:?}"
    );
    let record = record_of(Some(comment)).unwrap();
    assert_eq!(
        (record.uid.as_str(), record.origin),
        ("uid-a", Origin::Adopted)
    );
}

#[tokio::test]
async fn an_existing_table_is_adopted_by_the_first_boxtable_and_its_own_comment_is_kept() {
    adoption_keeps_the_user_comment(true).await;
}

#[tokio::test]
async fn the_kept_comment_is_exact_with_standard_conforming_strings_off() {
    adoption_keeps_the_user_comment(false).await;
}

#[tokio::test]
async fn another_boxtable_neither_migrates_nor_drops_a_table_it_does_not_own() {
    let (db, client) = support::fresh_db_and_client().await;
    run(&db, &outbox("Outbox").target(5).owned_by("uid-a").build())
        .await
        .unwrap();

    // Another BoxTable (another namespace, another Secret: only the database can tell).
    let theirs = outbox("Outbox").owned_by("uid-b").build();
    let err = fails_without_change(&db, &theirs).await;
    assert_eq!(err.reason(), Reason::TableConflict);
    let text = chain(&err);
    assert!(
        text.contains("shop/uid-a") && text.contains("public.outbox"),
        "names the owner and the table: {text}"
    );

    let kept = drop_as_owner(&db, &theirs, true).await.unwrap();
    match kept.verdict {
        DropVerdict::Kept { owner: Some(owner) } => assert_eq!(owner.uid, "uid-a"),
        other => panic!("expected the table kept for its owner, got {other:?}"),
    }
    assert_eq!(kept.history_rows_deleted, 0);
    assert_eq!(history_versions(&client, "public").await.len(), 1);
    assert!(!columns(&client, "public", "outbox").await.is_empty());
    assert_eq!(advisory_locks(&client).await, 0);
}

#[tokio::test]
async fn an_up_to_date_table_is_not_reported_ready_to_a_boxtable_that_does_not_own_it() {
    let db = support::fresh_db().await;
    run(&db, &outbox("Outbox").owned_by("uid-a").build())
        .await
        .unwrap();

    // The table is at V8 already: the lock-free "up to date" read must not answer for uid-b.
    let err = run(&db, &outbox("Outbox").owned_by("uid-b").build())
        .await
        .unwrap_err();

    assert_eq!(err.reason(), Reason::TableConflict, "{}", chain(&err));
}

#[tokio::test]
async fn a_drop_of_a_table_holding_undispatched_messages_waits_for_consent() {
    let (db, client, plan) = outbox_created_for_uid_a().await;
    client
        .batch(
            "INSERT INTO public.outbox (messageid, topic, body, dispatched) \
             SELECT gen_random_uuid()::text, 't', 'b', CASE WHEN i <= 3 THEN now() END \
             FROM generate_series(1, 10) i",
        )
        .await;

    let blocked = drop_as_owner(&db, &plan, false).await.unwrap();

    assert_eq!(
        blocked.verdict,
        DropVerdict::Blocked(DropBlock::NeedsConsent {
            origin: Origin::Created,
            rows: Rows {
                total: 10,
                undispatched: Some(7)
            }
        })
    );
    assert!(!columns(&client, "public", "outbox").await.is_empty());
    assert_eq!(history_versions(&client, "public").await.len(), 1);

    assert_drops_public_outbox(&db, &client, &plan, true).await;
}

#[tokio::test]
async fn a_drop_of_an_adopted_table_waits_for_consent_even_when_it_is_empty() {
    let (db, client) = support::fresh_db_and_client().await;
    outbox_at(&client, "public.outbox", 2, 0).await;
    let plan = outbox("Outbox").owned_by("uid-a").build();
    run(&db, &plan).await.unwrap();

    let blocked = drop_as_owner(&db, &plan, false).await.unwrap();

    assert!(
        matches!(
            blocked.verdict,
            DropVerdict::Blocked(DropBlock::NeedsConsent {
                origin: Origin::Adopted,
                ..
            })
        ),
        "{blocked:?}"
    );
    assert!(!columns(&client, "public", "outbox").await.is_empty());
}

#[tokio::test]
async fn an_empty_table_the_boxtable_created_is_dropped_without_consent() {
    let (db, client, plan) = outbox_created_for_uid_a().await;

    assert_drops_public_outbox(&db, &client, &plan, false).await;
}

#[tokio::test]
async fn a_suspended_boxtable_does_not_drop_its_table() {
    let (db, client, plan) = outbox_created_for_uid_a().await;

    let request = DropRequest {
        suspended: true,
        ..drop_request(&plan, true)
    };
    let outcome = drop_with(&db, &plan, &request).await.unwrap();

    assert_eq!(outcome.verdict, DropVerdict::Blocked(DropBlock::Suspended));
    assert!(!columns(&client, "public", "outbox").await.is_empty());
}

#[tokio::test]
async fn a_table_created_again_after_its_owner_dropped_it_is_never_dropped() {
    let (db, client, plan) = outbox_created_for_uid_a().await;
    assert!(drop_as_owner(&db, &plan, false).await.unwrap().dropped());

    // An application creates the table again (Brighter's own start-up path writes no record).
    run(&db, &outbox("Outbox").build()).await.unwrap();

    let again = drop_as_owner(&db, &plan, true).await.unwrap();
    assert_eq!(again.verdict, DropVerdict::Kept { owner: None });
    assert!(!columns(&client, "public", "outbox").await.is_empty());
    assert_eq!(history_versions(&client, "public").await.len(), 1);
}

#[tokio::test]
async fn ownership_is_checked_again_under_the_lock_so_a_table_replaced_during_the_wait_is_kept() {
    let (db, client, plan) = outbox_created_for_uid_a().await;
    // A Brighter application holds the lock while it replaces the table.
    let key = boxtable_operator::lock::LockIdentity::for_table(plan.table()).key();
    let app = db.connect().await;
    let taken: bool = app.value("SELECT pg_try_advisory_lock($1)", &[&key]).await;
    assert!(taken);

    let mut session = session(&db).await;
    let (waiting_tx, waiting_rx) = tokio::sync::oneshot::channel();
    let request = drop_request(&plan, true);
    let cancel = CancellationToken::new();
    let drop = migrate::drop_box_table(&mut session, &plan, &request, &cancel, move |_| {
        let _ = waiting_tx.send(());
    });
    let replace = async {
        // The drop has found the lock taken (and has read nothing it will act on).
        waiting_rx.await.unwrap();
        app.batch("DROP TABLE public.outbox; \
             CREATE TABLE public.outbox (id bigserial, messageid varchar(255), headerbag text, body text)").await;
        app.query_one("SELECT pg_advisory_unlock($1)", &[&key])
            .await
            .unwrap();
    };
    let (outcome, ()) = tokio::join!(drop, replace);

    assert_eq!(outcome.unwrap().verdict, DropVerdict::Kept { owner: None });
    assert_eq!(
        columns(&client, "public", "outbox").await.len(),
        4,
        "the new table survives"
    );
    assert_eq!(advisory_locks(&client).await, 0);
}
