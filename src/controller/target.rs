//! What a BoxTable is to a pass: the Secret it reads its connection from, the [`Target`] that
//! connection makes, the owner it is recorded as and the `application_name` its sessions carry.

use std::sync::Arc;

use kube::ResourceExt;
use tracing::Instrument;

use super::context::Context;
use super::secrets::{DatabaseSecret, SecretError, SourceError};
use crate::crd::{BoxTable, CONTROLLER_NAME};
use crate::migrate::ownership::Owner;
use crate::pass::Target;

/// Reads the Secret `bt` references (one LIST by name per new resourceVersion), in a span naming
/// it.
///
/// # Errors
/// [`SecretError`] when it is missing, is not selected or cannot be read.
pub(super) async fn read_secret(
    bt: &BoxTable,
    ctx: &Context,
    namespace: &str,
) -> Result<Arc<DatabaseSecret>, SecretError> {
    // The span names the Secret, never what it holds.
    let span = tracing::info_span!("read_secret", secret = %bt.spec.database.secret_ref.name);
    ctx.secrets
        .read(namespace, &bt.spec.database)
        .instrument(span)
        .await
}

/// The BoxTable as the owner of its table in this cluster (see [`crate::migrate::ownership`]).
pub(super) fn owner_of(bt: &BoxTable, namespace: &str, cluster: &str) -> Owner {
    Owner {
        cluster: cluster.to_owned(),
        namespace: namespace.to_owned(),
        name: bt.name_any(),
        uid: bt.uid().unwrap_or_default(),
        takes_over: None,
    }
}

/// The `application_name` a pass's sessions carry: `boxtable-operator/<namespace>/<name>`.
pub(super) fn application_name(namespace: &str, name: &str) -> String {
    format!("{CONTROLLER_NAME}/{namespace}/{name}")
}

/// Where a BoxTable's table lives, from its Secret (`source`, see [`secret_source`]).
///
/// # Errors
/// The [`SourceError`] when the Secret does not give a connection (a missing key, an invalid
/// connection string): the BoxTable stalls with its reason.
pub(super) fn target<'a>(
    secret: &'a DatabaseSecret,
    application_name: &'a str,
    source: &'a str,
) -> Result<Target<'a>, &'a SourceError> {
    Ok(Target {
        connection: secret.connection.as_ref()?,
        application_name,
        source: Some(source),
    })
}

/// The Secret and keys a BoxTable reads its connection from, as the session pool's source: when
/// its contents change, the sessions opened with the previous ones are closed.
pub(super) fn secret_source(bt: &BoxTable, namespace: &str) -> String {
    let secret_ref = &bt.spec.database.secret_ref;
    match &secret_ref.keys {
        Some(_) => format!("{namespace}/{}/(keys)", secret_ref.name),
        None => format!("{namespace}/{}/{}", secret_ref.name, secret_ref.key()),
    }
}
