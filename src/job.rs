//! The `migrate` command: BoxTable manifests applied straight to a database without a cluster (a
//! Kubernetes Job, a CI step, a laptop), through the same converge path the controller uses.

use std::sync::Mutex;

use futures::StreamExt;
use kube::ResourceExt;
use serde::Serialize;
use tokio_util::sync::CancellationToken;

use crate::controller::secrets;
use crate::converge::{self, Target};
use crate::crd::{BoxTable, BoxTableStatus, GROUP, KIND, VERSION};
use crate::db::Session;
use crate::manifests::Manifests;
use crate::reason::Reason;
use crate::report::chain;
use crate::status::{self, Observed};

/// `application_name` of the command's sessions.
pub const APPLICATION_NAME: &str = "boxtable-operator-migrate";

/// How the command runs.
pub struct Options {
    /// The database for every table; when `None`, each BoxTable's Secret must be among the files.
    pub database_url: Option<String>,
    /// A CA bundle (PEM) for verify-ca / verify-full; otherwise `ca.crt` of a Secret among the
    /// files is used when the connection string comes from that Secret.
    pub ca_pem: Option<Vec<u8>>,
    /// Tables migrated at once.
    pub concurrency: usize,
}

/// One table's result, printed as a YAML document.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TableReport {
    /// `brighter.dev/v1alpha1`.
    pub api_version: String,
    /// `BoxTable`.
    pub kind: String,
    /// Name and namespace of the BoxTable.
    pub metadata: ReportMetadata,
    /// The status the controller would write.
    pub status: BoxTableStatus,
}

/// Name and namespace of a reported BoxTable.
#[derive(Debug, Serialize)]
pub struct ReportMetadata {
    /// Name.
    pub name: String,
    /// Namespace, when the manifest has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
}

impl TableReport {
    /// Whether the table ended Ready.
    pub fn is_ready(&self) -> bool {
        self.status
            .conditions
            .iter()
            .any(|c| c.type_ == status::READY && c.status == "True")
    }
}

/// Converges every BoxTable in `manifests`, `options.concurrency` at a time; results keep file order.
///
/// # Cancel safety
/// Cancelling `cancel` abandons lock waits and cancels running migrations (rolled back, unlocked).
pub async fn run(
    manifests: &Manifests,
    options: &Options,
    cancel: &CancellationToken,
) -> Vec<TableReport> {
    let concurrency = options.concurrency.max(1);
    let sessions = Sessions::default();
    let sessions = &sessions;
    let mut reports: Vec<(usize, TableReport)> =
        futures::stream::iter(manifests.boxtables.iter().enumerate())
            .map(|(i, (_, bt))| async move {
                (
                    i,
                    converge_one(bt, manifests, options, sessions, cancel).await,
                )
            })
            .buffer_unordered(concurrency)
            .collect()
            .await;
    reports.sort_by_key(|(i, _)| *i);
    reports.into_iter().map(|(_, r)| r).collect()
}

/// Which database a session reaches: connection string and CA bundle.
type SessionKey = (String, Option<Vec<u8>>);

/// Idle sessions kept between tables, so a run over many tables does not pay a connection
/// handshake per table; at most `--concurrency` are ever open per database.
#[derive(Default)]
struct Sessions(Mutex<Vec<(SessionKey, Session)>>);

impl Sessions {
    fn take(&self, key: &SessionKey) -> Option<Session> {
        let mut idle = self.0.lock().ok()?;
        let at = idle.iter().position(|(k, _)| k == key)?;
        Some(idle.swap_remove(at).1)
    }

    fn give_back(&self, key: SessionKey, session: Session) {
        if let Ok(mut idle) = self.0.lock() {
            idle.push((key, session));
        }
    }
}

/// Migrates on an idle session for the same database when there is one; the session is kept
/// only after a clean run (after a failure it may be mid-cancel or broken, so it is closed).
async fn migrate_reusing(
    sessions: &Sessions,
    key: SessionKey,
    target: &Target<'_>,
    plan: &crate::migrate::Plan,
    cancel: &CancellationToken,
) -> Result<crate::migrate::Outcome, converge::ConvergeError> {
    let mut session = match sessions.take(&key) {
        Some(session) if !session.is_closed() => session,
        _ => converge::open(target).await?,
    };
    let outcome = converge::migrate_on(&mut session, plan, cancel, |_| {}).await?;
    sessions.give_back(key, session);
    Ok(outcome)
}

/// Where `bt`'s table lives: the command-line URL, else its Secret from the files; with the CA
/// bundle from the command line, else from that Secret's `ca.crt`.
fn connection(
    bt: &BoxTable,
    manifests: &Manifests,
    options: &Options,
) -> Result<(String, Option<Vec<u8>>), String> {
    if let Some(url) = &options.database_url {
        return Ok((url.clone(), options.ca_pem.clone()));
    }
    let secret_ref = &bt.spec.database.secret_ref;
    let namespace = bt.namespace();
    let secret = manifests.secrets.iter().find(|s| {
        s.name_any() == secret_ref.name && (namespace.is_none() || s.namespace() == namespace)
    });
    let Some(secret) = secret else {
        return Err(format!(
            "no --database-url (or DATABASE_URL) was given and secret {} is not among the files",
            secret_ref.name
        ));
    };
    let value = secrets::lookup(secret, &secret_ref.key)
        .ok_or_else(|| format!("secret {} has no key {:?}", secret_ref.name, secret_ref.key))?;
    let connection_string = String::from_utf8(value).map_err(|_| {
        format!(
            "secret {} key {:?} is not UTF-8 text",
            secret_ref.name, secret_ref.key
        )
    })?;
    let ca_pem = options
        .ca_pem
        .clone()
        .or_else(|| secrets::lookup(secret, secrets::CA_KEY));
    Ok((connection_string.trim().to_owned(), ca_pem))
}

async fn converge_one(
    bt: &BoxTable,
    manifests: &Manifests,
    options: &Options,
    sessions: &Sessions,
    cancel: &CancellationToken,
) -> TableReport {
    let generation = bt.metadata.generation.unwrap_or(1);
    let plan = crate::plan::plan(&bt.spec);
    let observed = match (&plan, connection(bt, manifests, options)) {
        (Err(error), _) => Observed::Failed {
            reason: error.reason(),
            message: chain(error),
            lock: None,
        },
        (Ok(_), Err(message)) => Observed::Failed {
            reason: Reason::SecretNotFound,
            message,
            lock: None,
        },
        (Ok(plan), Ok((connection_string, ca_pem))) => {
            let target = Target {
                connection_string: &connection_string,
                ca_pem: ca_pem.as_deref(),
                application_name: APPLICATION_NAME,
            };
            if bt.spec.suspend {
                match converge::observe(&target, plan).await {
                    Ok(found) => Observed::Suspended {
                        applied_version: (found.current_version > 0)
                            .then_some(found.current_version),
                    },
                    Err(error) => error.observed(),
                }
            } else {
                let key = (connection_string.clone(), ca_pem.clone());
                match migrate_reusing(sessions, key, &target, plan, cancel).await {
                    Ok(outcome) => Observed::Succeeded(outcome),
                    Err(error) => error.observed(),
                }
            }
        }
    };
    let status = status::desired_status(
        None,
        generation,
        plan.as_ref().ok(),
        &observed,
        jiff::Timestamp::now(),
    );
    TableReport {
        api_version: format!("{GROUP}/{VERSION}"),
        kind: KIND.to_owned(),
        metadata: ReportMetadata {
            name: bt.name_any(),
            namespace: bt.namespace(),
        },
        status,
    }
}
