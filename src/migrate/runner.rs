//! The run: on one dedicated session, take Brighter's advisory lock, then in one transaction ensure
//! the history table, re-detect, apply the path, verify the lock, COMMIT, and release the lock. On
//! any failure: ROLLBACK, then unlock, and report the original error.

use std::future::Future;

use tokio_postgres::Client;
use tokio_postgres::types::{ToSql, Type};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::Decision;
use super::detect::{self, Facts};
use super::drift::ActualShape;
use super::history::{self, HistoryTable};
use super::inspect;
use super::ownership;
use super::statements::{self, Param, Purpose, Statement};
use super::{HistoryScope, Outcome, Plan, RunError};
use crate::db::{Read, Session, pipeline};
use crate::lock::{self, Holder, LockError, LockIdentity, Wait};

const BEGIN: &str = "BEGIN";
const COMMIT: &str = "COMMIT";
const ROLLBACK: &str = "ROLLBACK";
/// Unnamed statement (works through any pooler, so a pooler is detected rather than failing here).
const PREFLIGHT_SQL: &str = "SELECT pg_backend_pid(), pg_is_in_recovery()";
/// `SET LOCAL` with a bound value: `set_config(name, value, is_local => true)`.
const SET_LOCAL: Read = Read {
    sql: "SELECT set_config($1, $2, true)",
    types: &[Type::TEXT, Type::TEXT],
};

/// Brings `plan.table()` to its target version, exactly as Brighter's runner would.
///
/// `on_waiting` is called once, with the holder when it can be seen, if the lock is found taken.
///
/// # Errors
/// [`RunError`]: invalid plan, a transaction-mode pooler in between, read-only server, lock
/// timeout or loss, detection errors
/// (not a Brighter table, unknown version, table missing, payload mismatch, missing schema),
/// a failing step ([`RunError::MigrationFailed`]) or [`RunError::Cancelled`]. Nothing partial
/// survives a failure.
///
/// # Cancel safety
/// Cancelling `cancel` stops the lock wait, or asks the server to cancel the running statement,
/// rolls back and unlocks, then returns [`RunError::Cancelled`]. If an unlock fails after a failure,
/// the caller should drop the session (the server frees its session locks). Dropping the future
/// itself mid-run leaves the session in an unknown state: drop the session too.
///
/// # Idempotency
/// A table at its target is left unchanged (path `UpToDate`); a table above it is never downgraded.
pub async fn run(
    session: &mut Session,
    plan: &Plan,
    cancel: &CancellationToken,
    on_waiting: impl FnOnce(Option<Holder>) + Send,
) -> Result<Outcome, RunError> {
    run_gated(session, plan, cancel, on_waiting, || async { Ok(()) }).await
}

/// Why a [`run_gated`] gate withdrew the run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Withdrawal {
    /// What the gate found, for logs.
    pub why: String,
    /// Whether asking again later may give another answer (a failed read), as opposed to an
    /// answer that stands (the owner is gone).
    pub transient: bool,
}

/// As [`run`], with `gate` asked once the lock is held and the transaction open, before any
/// statement changes anything; a gate that withdraws rolls back, unlocks and returns
/// [`RunError::Withdrawn`]. The gate is skipped when the table is up to date without the lock.
///
/// The controller's gate re-reads the BoxTable from the API server: a table is created or
/// changed only for a BoxTable that still exists, is not being deleted and, with
/// `deletionPolicy: Drop`, carries the finalizer that makes its deletion wait for this lock.
///
/// # Errors
/// As [`run`], and [`RunError::Withdrawn`].
///
/// # Cancel safety
/// As [`run`].
///
/// Longer than most: the run's three stages in order (the lock-free check, the wait that ends once
/// a holder has done the work, then gate and change in one locked transaction), each a call; the
/// up-to-date outcome both early ends build is defined once, here.
pub async fn run_gated<G, F>(
    session: &mut Session,
    plan: &Plan,
    cancel: &CancellationToken,
    on_waiting: impl FnOnce(Option<Holder>) + Send,
    gate: G,
) -> Result<Outcome, RunError>
where
    G: FnOnce() -> F + Send,
    F: Future<Output = Result<(), Withdrawal>> + Send,
{
    let started = jiff::Timestamp::now();
    let clock = std::time::Instant::now();
    let target = plan.target();
    plan.kind().check_contiguous().map_err(RunError::Catalog)?;
    let session = &*session;
    let identity = plan.lock();
    let found = before_lock(session, identity, cancel, lock_free_reads(session, plan)).await;
    let known_latest = plan.kind().latest();
    let up_to_date = |at: u32| Outcome {
        path: super::RunPath::UpToDate,
        from_version: at,
        to_version: at,
        target_version: target,
        known_latest,
        lock_lost_after_commit: false,
        lock: None,
        blocked: lock::Blocked::default(),
        started,
        duration: clock.elapsed(),
        drift: None,
    };
    if let Some((at, shape)) = found? {
        let mut outcome = up_to_date(at);
        // Left `None` when the read failed: the caller's own drift check reads again.
        outcome.drift = shape.and_then(|actual| inspect::compare(plan, at, &actual));
        return Ok(outcome);
    }
    // While another session holds the lock, check after each failed try whether it has already
    // brought the table up to date: then there is nothing left to wait for.
    let done_by_holder = std::sync::atomic::AtomicU32::new(0);
    let wait = lock::acquire_while_needed(
        session,
        identity,
        plan.lock_timeout(),
        cancel,
        on_waiting,
        || async {
            match up_to_date_without_lock(session, plan, target).await {
                Ok(Some(at)) => {
                    done_by_holder.store(at, std::sync::atomic::Ordering::Relaxed);
                    false
                }
                _ => true,
            }
        },
    )
    .instrument(
        tracing::info_span!("lock_wait", table = %plan.table(), lock_key = %identity.lock_key()),
    );
    let wait = before_lock(session, identity, cancel, async {
        wait.await.map_err(RunError::from)
    })
    .await?;
    let report = match wait {
        Wait::Acquired(report) => report,
        Wait::NotNeeded { .. } => {
            return Ok(up_to_date(
                done_by_holder.load(std::sync::atomic::Ordering::Relaxed),
            ));
        }
    };
    let work = async {
        if let Err(withdrawal) = gate().await {
            return Err(RunError::Withdrawn {
                table: plan.table().to_string(),
                why: withdrawal.why,
                transient: withdrawal.transient,
            });
        }
        migrate(session, plan, identity, target).await
    };
    // The shape for the drift check is read with the unlock, once the change has committed.
    let shape = async {
        inspect::actual_shape(session, plan.table())
            .await
            .ok()
            .flatten()
    };
    let Committed {
        value: decision,
        lock_lost_after_commit,
        blocked,
        after: shape,
    } = locked(session, plan, identity, cancel, work, shape)
        .instrument(
            tracing::info_span!("migration", table = %plan.table(), target_version = target),
        )
        .await?;
    // Left `None` when the read failed or found no table: the caller's own drift check reads again.
    let drift = shape.and_then(|actual| inspect::compare(plan, decision.to_version(), &actual));
    Ok(Outcome {
        path: decision.path(),
        from_version: decision.from_version(),
        to_version: decision.to_version(),
        target_version: target,
        known_latest,
        lock_lost_after_commit,
        lock: Some(report),
        blocked,
        started,
        duration: clock.elapsed(),
        drift,
    })
}

/// Everything a run reads before the lock, in one round trip: the preflight, the lock-free check
/// (see [`up_to_date_without_lock`]) and the table's shape. The check only reads, so it may go out
/// before the preflight has answered; its answer counts only once the preflight has passed. The
/// shape goes with it because most runs find the table up to date, and then its drift is known
/// without another round trip; any other path reads the shape again after its change (a failed
/// read here is only a shape not known yet).
///
/// # Errors
/// As [`preflight`] and [`up_to_date_without_lock`].
async fn lock_free_reads(
    session: &Session,
    plan: &Plan,
) -> Result<Option<(u32, Option<ActualShape>)>, RunError> {
    let shape = async {
        if plan.history_scope() == HistoryScope::Global {
            inspect::actual_shape(session, plan.table())
                .await
                .ok()
                .flatten()
        } else {
            None
        }
    };
    let (checked, found, shape) = futures::future::join3(
        preflight(session, plan, plan.lock()),
        up_to_date_without_lock(session, plan, plan.target()),
        shape,
    )
    .await;
    checked?;
    Ok(found?.map(|at| (at, shape)))
}

/// The no-op fast path: when the history already records the target (or more) for an existing
/// table, there is nothing to change and no reason to take the lock, so a resync of an up-to-date
/// table costs one read instead of lock, transaction and unlock.
///
/// The table's columns, its ownership record and its history version are read in one statement,
/// so from one snapshot: a winner commits the table and its history row together, and a reader
/// that took them from two snapshots could see the row without the table (a spurious
/// `TableMissing`). Only "up to date" is concluded here; anything else (no history table yet, a
/// missing table, a table this BoxTable does not own, any detection error) is left to the locked
/// path, which re-reads everything under the lock. PerSchema tables always take the locked path,
/// which also seeds their history from `public`.
async fn up_to_date_without_lock(
    session: &Session,
    plan: &Plan,
    target: u32,
) -> Result<Option<u32>, RunError> {
    if plan.history_scope() != HistoryScope::Global {
        return Ok(None);
    }
    let Some(found) = detect::catalog_with_public_history(session, plan.table()).await? else {
        return Ok(None);
    };
    let facts = Facts {
        table: found.catalog.table,
        history_version: found.history_version,
    };
    let Ok(Decision::UpToDate { at }) =
        detect::decide(plan, target, &facts, &HistoryTable::Public.quoted())
    else {
        return Ok(None);
    };
    // Up to date is the answer only for the table's owner: anyone else (or a table nobody owns
    // yet) goes to the locked path, which refuses or records the owner.
    if let Some(owner) = &plan.owner()
        && !matches!(
            ownership::judge(found.comment.as_deref(), owner),
            ownership::Claim::Ours(_)
        )
    {
        return Ok(None);
    }
    Ok(Some(at))
}

/// Runs `work`, a part of a run before the lock is held (reads, the lock wait), until `cancel`
/// fires; then asks the server to cancel the statement in flight (a read stuck behind a table
/// lock, a try that gets no answer) and reports the wait as cancelled. The session must not be
/// used for another run after that (the caller drops it, which frees whatever it holds).
///
/// # Cancel safety
/// Returns as soon as `cancel` fires, whatever `work` is waiting for.
pub(super) async fn before_lock<T>(
    session: &Session,
    identity: &LockIdentity,
    cancel: &CancellationToken,
    work: impl Future<Output = Result<T, RunError>>,
) -> Result<T, RunError> {
    tokio::select! {
        result = work => result,
        () = cancel.cancelled() => {
            if let Err(error) = session.cancel_running_statement().await {
                tracing::warn!(error = %error, lock_key = %identity.lock_key(), "asking the server to cancel the statement failed");
            }
            Err(RunError::from(LockError::Cancelled {
                lock_key: identity.lock_key().to_owned(),
            }))
        }
    }
}

/// Before anything else, in one round trip: refuses a server older than the oldest supported
/// major (known from the session's setup, no round trip), a session whose statements reach
/// another backend than the one it connected to (a transaction- or statement-mode pooler, which
/// cannot keep a session lock) and a hot standby (read-only).
///
/// The round trip runs once per session: a session kept for later passes is checked for its
/// backend again each time it is lent (see [`crate::db::pool`]), and a server that is a primary
/// when a session starts does not turn into a standby under it (a demotion ends every session).
pub(super) async fn preflight(
    session: &Session,
    plan: &Plan,
    identity: &LockIdentity,
) -> Result<(), RunError> {
    super::postgres_version::check_supported(session.server_version_num(), plan.table())?;
    if session.preflight_passed() {
        return Ok(());
    }
    let operation = "checking the session";
    let rows = session
        .client()
        .query_typed(PREFLIGHT_SQL, &[])
        .await
        .map_err(RunError::query(operation, plan.table()))?;
    let Some(row) = rows.first() else {
        return Ok(());
    };
    let current_pid: i32 = row
        .try_get(0)
        .map_err(RunError::query(operation, plan.table()))?;
    let in_recovery: bool = row
        .try_get(1)
        .map_err(RunError::query(operation, plan.table()))?;
    if current_pid != session.backend_pid() {
        return Err(RunError::from(LockError::BackendChanged {
            lock_key: identity.lock_key().to_owned(),
            connected_pid: session.backend_pid(),
            current_pid,
        }));
    }
    if in_recovery {
        return Err(RunError::ReadOnlyDatabase {
            table: plan.table().to_string(),
        });
    }
    session.mark_preflight_passed();
    Ok(())
}

/// What a committed transaction under the lock returned.
pub(super) struct Committed<T, A> {
    /// What the work returned.
    pub(super) value: T,
    /// `pg_advisory_unlock` returned false after `COMMIT`: the work is committed, but the session
    /// had already lost the lock (see [`Outcome::lock_lost_after_commit`]).
    pub(super) lock_lost_after_commit: bool,
    /// The sessions found blocked on the lock just before it was released.
    pub(super) blocked: lock::Blocked,
    /// What the read sent with the unlock returned.
    pub(super) after: A,
}

/// That the session was found still holding the lock after the transaction's last change. The
/// work given to [`locked`] returns one, so nothing commits without that check; only
/// [`still_held`] makes one.
pub(super) struct StillHeld(());

/// Checks that the session still holds the lock (see [`lock::ensure_still_held`]). Sent with the
/// transaction's last statements, it runs after them on the server, and its answer is known
/// before `COMMIT` is sent.
///
/// # Errors
/// [`LockError::Lost`] (as a [`RunError`]) when the lock is gone; a failed query.
pub(super) async fn still_held(
    session: &Session,
    identity: &LockIdentity,
) -> Result<StillHeld, RunError> {
    lock::ensure_still_held(session, identity)
        .await
        .map_err(RunError::from)?;
    Ok(StillHeld(()))
}

/// Runs `work` in one transaction while the lock is held, then commits and unlocks; on failure or
/// cancellation rolls back, unlocks, and returns the original error.
///
/// `COMMIT`, the look at who is blocked on the lock, the unlock and `after` (a read of what was
/// committed) go out together, one round trip: the server runs them in that order, so the lock is
/// released only once the transaction has ended. `after` runs even when `COMMIT` fails; its answer
/// is then dropped.
///
/// Once `COMMIT` has succeeded the work is done: an unlock that finds the lock already gone is
/// logged and reported in [`Committed::lock_lost_after_commit`], not turned into a failure (as
/// Brighter's own runner warns and carries on). A cancellation while `COMMIT` is in flight asks
/// the server to stop it and then takes its answer: a transaction that committed is reported as
/// committed, one the cancellation stopped as [`RunError::Cancelled`].
///
/// Longer than most: every way out of the transaction (work failed, cancelled, commit failed,
/// unlock failed) sits beside the others, so that each can be seen to roll back and unlock.
pub(super) async fn locked<T, A>(
    session: &Session,
    plan: &Plan,
    identity: &LockIdentity,
    cancel: &CancellationToken,
    work: impl Future<Output = Result<(T, StillHeld), RunError>>,
    after: impl Future<Output = A>,
) -> Result<Committed<T, A>, RunError> {
    // The lock was taken just before: it counts as held until this returns (released, or the
    // session gone, which frees it on the server).
    let _held = lock::HeldLock::taken();
    let client = session.client();
    let table = plan.table();
    let transaction = async {
        // `SET LOCAL` goes out with `BEGIN` (it has no effect outside a transaction), and a
        // failed `BEGIN` fails the run before any of the work is sent.
        let (begun, set) =
            futures::future::join(client.batch_execute(BEGIN), set_local(session, plan)).await;
        begun.map_err(RunError::query("opening the transaction", table))?;
        set?;
        let (value, StillHeld(())) = work.await?;
        Ok(value)
    };
    let worked = tokio::select! {
        result = transaction => result,
        () = cancel.cancelled() => {
            cancel_statement(session, table).await;
            Err(RunError::Cancelled { table: table.to_string() })
        }
    };
    let value = match worked {
        Ok(value) => value,
        Err(error) => return Err(roll_back_and_unlock(session, plan, identity, error).await),
    };
    let mut closing = std::pin::pin!(async {
        futures::join!(
            client.batch_execute(COMMIT),
            lock::blocked_on(session, identity),
            lock::release(session, identity),
            after,
        )
    });
    let closed = tokio::select! {
        closed = &mut closing => Some(closed),
        () = cancel.cancelled() => None,
    };
    let ((committed, blocked, released, after), cancelled) = match closed {
        Some(closed) => (closed, false),
        None => {
            // `COMMIT` may be running deferred work or waiting for a synchronous standby.
            cancel_statement(session, table).await;
            (closing.await, true)
        }
    };
    if let Err(source) = committed {
        // The transaction is over either way, and the unlock sent with `COMMIT` has run.
        if let Err(error) = released {
            tracing::warn!(error = %error, table = %table, "unlock after a failed commit failed; drop the session");
        }
        if cancelled {
            tracing::debug!(error = %source, table = %table, "the cancelled commit rolled back");
            return Err(RunError::Cancelled {
                table: table.to_string(),
            });
        }
        let error = RunError::query("committing", table)(source);
        return Err(error.with_table_lock_timeout(plan.ddl().lock_timeout));
    }
    // A cancellation that reached the server after `COMMIT` had ended may have stopped the unlock
    // sent with it instead: the session then still holds the lock, so it unlocks once more.
    let released = match released {
        Err(LockError::Query { .. }) if cancelled => lock::release(session, identity).await,
        released => released,
    };
    // Measured, not acted on: a failed look is only logged.
    let blocked = blocked.unwrap_or_else(|error| {
        tracing::debug!(error = %error, table = %table, "looking for sessions blocked on the lock failed");
        lock::Blocked::default()
    });
    let lock_lost_after_commit = match released {
        Ok(()) => false,
        Err(LockError::Lost { lock_key }) => {
            tracing::warn!(table = %table, lock_key, "committed, but the advisory lock was no longer held by this session when it was released");
            true
        }
        Err(error) => return Err(RunError::from(error)),
    };
    Ok(Committed {
        value,
        lock_lost_after_commit,
        blocked,
        after,
    })
}

/// Asks the server to cancel the statement in flight; a failed request is only logged.
async fn cancel_statement(session: &Session, table: &crate::ident::QualifiedName) {
    if let Err(error) = session.cancel_running_statement().await {
        tracing::warn!(error = %error, table = %table, "asking the server to cancel the statement failed");
    }
}

/// After a failed or cancelled transaction: rolls back and unlocks (unless the session is gone,
/// which frees both on the server), and returns `error` for the caller to report.
async fn roll_back_and_unlock(
    session: &Session,
    plan: &Plan,
    identity: &LockIdentity,
    error: RunError,
) -> RunError {
    let table = plan.table();
    let error = error.with_table_lock_timeout(plan.ddl().lock_timeout);
    if session.is_closed() {
        return error;
    }
    if let Err(rollback) = session.client().batch_execute(ROLLBACK).await {
        tracing::warn!(error = %rollback, table = %table, "rollback after a failed migration failed");
    }
    if let Err(unlock) = lock::release(session, identity).await {
        tracing::warn!(error = %unlock, table = %table, "unlock after a failed migration failed; drop the session");
    }
    error
}

/// `SET LOCAL lock_timeout` / `statement_timeout` from the plan, inside the transaction.
async fn set_local(session: &Session, plan: &Plan) -> Result<(), RunError> {
    let settings = [
        ("lock_timeout", plan.ddl().lock_timeout),
        ("statement_timeout", plan.ddl().statement_timeout),
    ];
    for (name, value) in settings {
        let Some(value) = value else { continue };
        let millis = format!("{}ms", value.as_millis().max(1));
        session
            .read_one(SET_LOCAL, &[&name, &millis])
            .await
            .map_err(RunError::query("setting the DDL timeouts", plan.table()))?;
    }
    Ok(())
}

/// Reads the facts; with `ensure`, first creates the history table and seeds a per-schema copy.
///
/// With `ensure`, the catalog read, the history table's creation and (for a Global history) the
/// read of its highest version go out together, one round trip: the creation runs before the
/// version read on the server, so the read sees a table created just now. A missing schema is
/// still reported as [`RunError::SchemaNotFound`] (the catalog read is looked at first, and the
/// transaction that tried to create the history table is rolled back).
pub(super) async fn read_facts(
    session: &Session,
    plan: &Plan,
    ensure: bool,
) -> Result<Facts, RunError> {
    let client = session.client();
    let table = plan.table();
    let history = plan.history().clone();
    if ensure {
        let per_schema = plan.history_scope() == HistoryScope::PerSchema;
        let (catalog, ensured, version) = futures::future::join3(
            detect::catalog(session, table),
            history::ensure_table(client, &history, table),
            async {
                if per_schema {
                    None
                } else {
                    Some(history::max_version(session, &history, table).await)
                }
            },
        )
        .await;
        let catalog = catalog?;
        if !catalog.schema_exists {
            return Err(RunError::SchemaNotFound {
                schema: table.schema.to_string(),
            });
        }
        let raced = ensured?;
        let history_version = match version {
            // A concurrent creation aborted the transaction back to the savepoint before the
            // version read ran: read again now that it is rolled back.
            Some(_) if raced => history::max_version(session, &history, table).await?,
            Some(version) => version?,
            None => {
                history::seed_from_public(client, &history, table).await?;
                history::max_version(session, &history, table).await?
            }
        };
        return Ok(Facts {
            table: catalog.table,
            history_version,
        });
    }
    let catalog = detect::catalog(session, table).await?;
    if !catalog.schema_exists {
        return Err(RunError::SchemaNotFound {
            schema: table.schema.to_string(),
        });
    }
    let in_scope = match history {
        HistoryTable::Public => catalog.history_in_public,
        HistoryTable::InSchema(_) => catalog.history_in_schema,
    };
    let mut sources = Vec::new();
    if in_scope {
        sources.push(history.clone());
    }
    if plan.history_scope() == HistoryScope::PerSchema
        && history != HistoryTable::Public
        && catalog.history_in_public
    {
        sources.push(HistoryTable::Public);
    }
    let mut history_version = None;
    for source in sources {
        let v = history::max_version(session, &source, table).await?;
        history_version = history_version.max(v);
    }
    Ok(Facts {
        table: catalog.table,
        history_version,
    })
}

/// The body of the migration transaction: ensure history, re-detect under the lock, apply the
/// statements of [`statements::steps`] (the list `migrate --dry-run` prints), record the owner of
/// a table it creates, and check that the lock is still held.
///
/// The steps, the record and the lock check go out together, one round trip for all of them, and
/// run on the server in order.
/// The first failing step aborts the transaction, so every later one fails with `25P02` without
/// doing anything; the first failure is the one reported, and the caller rolls back.
async fn migrate(
    session: &Session,
    plan: &Plan,
    identity: &LockIdentity,
    target: u32,
) -> Result<(Decision, StillHeld), RunError> {
    let client = session.client();
    let history = plan.history().clone();
    let facts = read_facts(session, plan, true).await?;
    let owner = plan.owner();
    if let (Some(owner), Some(_)) = (owner, &facts.table) {
        ownership::ensure_owner(client, plan.table(), owner, ownership::Origin::Adopted).await?;
    }
    let decision = detect::decide(plan, target, &facts, &history.quoted())?;
    super::index_name::ensure_free(session, plan, decision).await?;
    let steps = statements::steps(plan, decision);
    // A table this transaction creates is recorded as its owner's without a read: it has no
    // comment yet.
    let created = match (owner, decision) {
        (Some(owner), Decision::Fresh { .. }) => Some(ownership::created_sql(plan.table(), owner)),
        _ => None,
    };
    let record = async {
        match &created {
            Some(sql) => client.batch_execute(sql).await.map_err(RunError::query(
                "writing the ownership record",
                plan.table(),
            )),
            None => Ok(()),
        }
    };
    let (applied, recorded, held) = futures::join!(
        pipeline::in_order(
            steps
                .iter()
                .map(|statement| execute(client, plan, statement))
                .collect(),
        ),
        record,
        still_held(session, identity),
    );
    applied.into_iter().collect::<Result<Vec<()>, RunError>>()?;
    recorded?;
    Ok((decision, held?))
}

/// Runs one statement of the list, classifying its failure.
async fn execute(client: &Client, plan: &Plan, statement: &Statement) -> Result<(), RunError> {
    match &statement.purpose {
        Purpose::Ddl {
            version,
            description,
        } => execute_step(client, plan, *version, description, &statement.sql).await,
        _ => {
            // Typed parameters: one unnamed Parse/Bind/Execute/Sync, one round trip, instead of
            // preparing a named statement first.
            let params: Vec<(&(dyn ToSql + Sync), Type)> = statement
                .params
                .iter()
                .map(|p| match p {
                    Param::Int(i) => (i as &(dyn ToSql + Sync), Type::INT4),
                    Param::Text(t) => (t as &(dyn ToSql + Sync), Type::TEXT),
                })
                .collect();
            client
                .query_typed(&statement.sql, &params)
                .await
                .map(drop)
                .map_err(RunError::query("writing a history row", plan.table()))
        }
    }
}

/// Runs one DDL statement of version `version`, classifying its failure.
async fn execute_step(
    client: &Client,
    plan: &Plan,
    version: u32,
    description: &str,
    sql: &str,
) -> Result<(), RunError> {
    tracing::debug!(table = %plan.table(), version, sql, "applying");
    client.batch_execute(sql).await.map_err(|source| {
        RunError::classify(source, "applying a migration", plan.table(), |source| {
            RunError::MigrationFailed {
                table: plan.table().to_string(),
                version,
                description: description.to_owned(),
                source,
            }
        })
    })
}
