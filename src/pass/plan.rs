//! Turning a `BoxTable` spec into a [`Plan`]: identifiers checked and lowercased, the table
//! defaulted by box, durations parsed. Payload and target version are checked against the box by
//! [`Plan`] itself, the one place a plan is validated.
//!
//! Pure: no client. The API server already refuses most bad input through the CRD schema; this is
//! the same judgement made again for manifests that never passed an API server
//! (`boxtable-operator migrate -f`), plus what the schema cannot express.

use crate::crd::{self, BoxTableSpec};
use crate::duration::{DurationError, MAX_DDL_TIMEOUT, MAX_LOCK_TIMEOUT, parse_duration_at_most};
use crate::ident::{IdentError, QualifiedName};
use crate::migrate::{BoxKind, DdlTimeouts, InvalidPlan, Plan};
use crate::reason::Reason;

/// The table name used when the spec gives none: `Outbox` or `Inbox`, as Brighter defaults.
pub fn default_table(kind: BoxKind) -> &'static str {
    match kind {
        BoxKind::Outbox => "Outbox",
        BoxKind::Inbox => "Inbox",
    }
}

/// Why a spec cannot become a plan. Every variant is [`Reason::InvalidSpec`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    /// `spec.schema` or `spec.table` is not a valid PostgreSQL identifier.
    #[error("spec names an invalid box table")]
    Name {
        /// Which identifier and why.
        #[source]
        source: IdentError,
    },
    /// The payload or target version is not one the catalog has for the box.
    #[error(transparent)]
    Invalid(#[from] InvalidPlan),
    /// A duration field does not parse or is too long.
    #[error("spec.{field} is invalid")]
    Duration {
        /// The field, like `lock.timeout`.
        field: &'static str,
        /// What is wrong with it.
        #[source]
        source: DurationError,
    },
}

impl PlanError {
    /// The bounded reason for conditions, events and metrics: always [`Reason::InvalidSpec`].
    pub fn reason(&self) -> Reason {
        Reason::InvalidSpec
    }
}

/// The table a spec names, validated and lowercased, with the table defaulted by box.
///
/// Useful on its own for conflict detection and status even when other fields are invalid.
///
/// # Errors
/// [`PlanError::Name`] when the schema or table is not a valid identifier.
pub fn resolve_table(spec: &BoxTableSpec) -> Result<QualifiedName, PlanError> {
    let table = spec
        .table
        .as_deref()
        .unwrap_or(default_table(spec.box_kind));
    QualifiedName::parse(Some(&spec.schema), table).map_err(|source| PlanError::Name { source })
}

/// Builds the plan for `spec`.
///
/// # Errors
/// The first [`PlanError`] found, checking names, payload, target version, then durations.
pub fn plan(spec: &BoxTableSpec) -> Result<Plan, PlanError> {
    let plan = Plan::new(spec.box_kind, resolve_table(spec)?)
        .with_payload(spec.payload)?
        .with_target_version(spec.target_version)?;
    let lock_timeout =
        parse_duration_at_most(&spec.lock.timeout, MAX_LOCK_TIMEOUT).map_err(|source| {
            PlanError::Duration {
                field: "lock.timeout",
                source,
            }
        })?;
    let ddl_field = |field: &'static str, value: Option<&String>| {
        value
            .map(|text| parse_duration_at_most(text, MAX_DDL_TIMEOUT))
            .transpose()
            .map_err(|source| PlanError::Duration { field, source })
    };
    let ddl_spec = spec.ddl.clone().unwrap_or_default();
    let ddl = DdlTimeouts {
        lock_timeout: ddl_field("ddl.lockTimeout", ddl_spec.lock_timeout.as_ref())?
            .or(DdlTimeouts::default().lock_timeout),
        statement_timeout: ddl_field("ddl.statementTimeout", ddl_spec.statement_timeout.as_ref())?,
    };
    Ok(plan
        .with_lock_timeout(lock_timeout)
        .with_history_scope(spec.history_scope)
        .with_ddl(ddl))
}

/// The plan a `deletionPolicy: Drop` runs, even for a spec that no longer plans.
///
/// A drop needs only the table (immutable, so it is the table every earlier run used), the box,
/// the history scope and a lock wait. Fields that matter only to a migration (payload, target
/// version, DDL timeouts) are not checked, and a lock wait that no longer parses (for example
/// `2h`, admitted by the schema but above the 1h limit) falls back to `fallback_lock_timeout` (the
/// wait last shown in status) or the default. So a spec edited after its table was created never
/// turns a Drop into a Retain.
///
/// # Errors
/// [`PlanError::Name`] when the spec names no valid table: then no run ever used it.
pub fn teardown_plan(
    spec: &BoxTableSpec,
    fallback_lock_timeout: Option<std::time::Duration>,
) -> Result<Plan, PlanError> {
    if let Ok(plan) = plan(spec) {
        return Ok(plan);
    }
    let table = resolve_table(spec)?;
    let default_wait =
        || parse_duration_at_most(crd::DEFAULT_LOCK_TIMEOUT, MAX_LOCK_TIMEOUT).unwrap_or_default();
    let lock_timeout = parse_duration_at_most(&spec.lock.timeout, MAX_LOCK_TIMEOUT)
        .ok()
        .or(fallback_lock_timeout.filter(|t| *t <= MAX_LOCK_TIMEOUT))
        .unwrap_or_else(default_wait);
    Ok(Plan::new(spec.box_kind, table)
        .with_lock_timeout(lock_timeout)
        .with_history_scope(spec.history_scope))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::DdlSpec;
    use crate::migrate::{HistoryScope, Payload};
    use std::time::Duration;

    /// A spec builder so tests read as sentences: `outbox().table("Orders").plan()`.
    struct SpecBuilder(BoxTableSpec);

    fn outbox() -> SpecBuilder {
        SpecBuilder(BoxTableSpec::new(crd::BoxKind::Outbox, "shop-db"))
    }

    fn inbox() -> SpecBuilder {
        SpecBuilder(BoxTableSpec::new(crd::BoxKind::Inbox, "shop-db"))
    }

    impl SpecBuilder {
        fn table(mut self, table: &str) -> Self {
            self.0.table = Some(table.to_owned());
            self
        }
        fn schema(mut self, schema: &str) -> Self {
            self.0.schema = schema.to_owned();
            self
        }
        fn payload(mut self, payload: crd::Payload) -> Self {
            self.0.payload = payload;
            self
        }
        fn target_version(mut self, version: u32) -> Self {
            self.0.target_version = Some(version);
            self
        }
        fn lock_timeout(mut self, timeout: &str) -> Self {
            self.0.lock.timeout = timeout.to_owned();
            self
        }
        fn ddl(mut self, lock_timeout: Option<&str>, statement_timeout: Option<&str>) -> Self {
            self.0.ddl = Some(Box::new(DdlSpec {
                lock_timeout: lock_timeout.map(str::to_owned),
                statement_timeout: statement_timeout.map(str::to_owned),
            }));
            self
        }
        fn plan(&self) -> Result<Plan, PlanError> {
            plan(&self.0)
        }
    }

    #[test]
    fn the_schema_ranges_match_the_catalog() {
        assert_eq!(crd::OUTBOX_LATEST_VERSION, BoxKind::Outbox.latest());
        assert_eq!(crd::INBOX_LATEST_VERSION, BoxKind::Inbox.latest());
    }

    #[test]
    fn a_bare_outbox_gets_every_default() {
        let plan = outbox().plan().unwrap();
        assert_eq!(plan.kind(), BoxKind::Outbox);
        assert_eq!(plan.table().to_string(), "public.outbox");
        assert_eq!(plan.payload(), Payload::Text);
        assert_eq!(plan.history_scope(), HistoryScope::Global);
        assert_eq!(plan.target(), 8);
        assert_eq!(plan.lock_timeout(), Duration::from_secs(30));
        assert_eq!(plan.ddl(), DdlTimeouts::default());
        assert_eq!(
            plan.ddl().lock_timeout,
            Some(Duration::from_secs(10)),
            "a table lock is never waited for without a limit"
        );
        assert_eq!(plan.ddl().statement_timeout, None);
    }

    #[test]
    fn an_inbox_defaults_to_the_inbox_table_and_version_2() {
        let plan = inbox().plan().unwrap();
        assert_eq!(plan.table().to_string(), "public.inbox");
        assert_eq!(plan.target(), 2);
    }

    #[test]
    fn names_are_lowercased() {
        let plan = outbox()
            .schema("Sales")
            .table("Orders_Outbox")
            .plan()
            .unwrap();
        assert_eq!(plan.table().to_string(), "sales.orders_outbox");
    }

    #[test]
    fn json_payloads_are_refused_on_an_outbox_and_accepted_on_an_inbox() {
        for payload in [crd::Payload::Json, crd::Payload::Jsonb] {
            let err = outbox().payload(payload).plan().unwrap_err();
            assert_eq!(
                err,
                PlanError::Invalid(InvalidPlan::PayloadNotForOutbox { payload })
            );
            assert_eq!(err.reason(), Reason::InvalidSpec);
            assert_eq!(inbox().payload(payload).plan().unwrap().payload(), payload);
        }
        assert_eq!(
            outbox()
                .payload(crd::Payload::Binary)
                .plan()
                .unwrap()
                .payload(),
            Payload::Binary
        );
    }

    #[test]
    fn bad_identifiers_are_refused() {
        for (schema, table) in [
            ("public", "1orders"),
            ("my-schema", "outbox"),
            ("public", "a;drop"),
        ] {
            let err = outbox().schema(schema).table(table).plan().unwrap_err();
            assert!(matches!(err, PlanError::Name { .. }), "{err}");
        }
        let long = format!("a{}", "b".repeat(63));
        assert!(matches!(
            outbox().table(&long).plan(),
            Err(PlanError::Name { .. })
        ));
    }

    #[test]
    fn target_versions_above_the_latest_for_the_box_are_refused() {
        assert_eq!(outbox().target_version(8).plan().unwrap().target(), 8);
        assert_eq!(
            outbox().target_version(9).plan().unwrap_err(),
            PlanError::Invalid(InvalidPlan::TargetVersionOutOfRange {
                kind: BoxKind::Outbox,
                requested: 9,
                latest: 8
            })
        );
        assert!(inbox().target_version(2).plan().is_ok());
        let err = inbox().target_version(3).plan().unwrap_err();
        assert_eq!(
            err.to_string(),
            "targetVersion 3 is outside 1 to 2, the versions known for an Inbox"
        );
        assert!(outbox().target_version(0).plan().is_err());
    }

    #[test]
    fn durations_are_parsed_and_capped() {
        let plan = outbox()
            .lock_timeout("0s")
            .ddl(Some("5s"), Some("1m30s"))
            .plan()
            .unwrap();
        assert_eq!(plan.lock_timeout(), Duration::ZERO);
        assert_eq!(plan.ddl().lock_timeout, Some(Duration::from_secs(5)));
        assert_eq!(plan.ddl().statement_timeout, Some(Duration::from_secs(90)));

        let err = outbox().lock_timeout("2h").plan().unwrap_err();
        assert!(
            matches!(
                err,
                PlanError::Duration {
                    field: "lock.timeout",
                    ..
                }
            ),
            "{err}"
        );
        let err = outbox().ddl(None, Some("soon")).plan().unwrap_err();
        assert_eq!(err.to_string(), "spec.ddl.statementTimeout is invalid");
    }

    #[test]
    fn a_spec_that_no_longer_plans_still_plans_its_drop() {
        let spec = outbox().lock_timeout("2h").target_version(0);
        assert!(spec.plan().is_err());
        let drop = teardown_plan(&spec.0, Some(Duration::from_secs(12))).unwrap();
        assert_eq!(drop.table().to_string(), "public.outbox");
        assert_eq!(
            drop.lock_timeout(),
            Duration::from_secs(12),
            "the wait status last showed"
        );
        let drop = teardown_plan(&spec.0, None).unwrap();
        assert_eq!(
            drop.lock_timeout(),
            Duration::from_secs(30),
            "the default wait"
        );
        assert_eq!(
            drop.ddl().lock_timeout,
            Some(Duration::from_secs(10)),
            "a drop waits for its table lock no longer than a migration"
        );
        assert!(teardown_plan(&outbox().table("bad name").0, None).is_err());
    }
}
