//! One dedicated PostgreSQL session: the connection that takes the lock and runs the transaction.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio_postgres::tls::MakeTlsConnect;
use tokio_postgres::types::ToSql;
use tokio_postgres::{
    CancelToken, Client, Config, Connection as DriverConnection, NoTls, Row, Socket,
};
use tokio_postgres_rustls::MakeRustlsConnect;

use super::advisory::LockStatements;
use super::connect_error::{Attempt, ConnectError, classify};
use super::prepared::{Prepared, Read};
use super::tls;
use super::{ChannelBinding, Connection, TlsMode};
use crate::report::prefix;

/// Connect timeout when the connection string sets none.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Idle time before the first TCP keepalive probe.
const KEEPALIVE_IDLE: Duration = Duration::from_secs(30);
/// PostgreSQL truncates `application_name` to 63 bytes (NAMEDATALEN - 1).
const APPLICATION_NAME_MAX: usize = 63;
/// Run once per session: its backend pid (to detect a pooler later) and, where the server has
/// the setting, `idle_session_timeout` turned off for this session, so a role-level idle timeout
/// cannot end the session while it sits idle between lock polls or holds the lock.
/// Also reads the server's version (`server_version_num`), for refusing unsupported servers.
const SESSION_SETUP: &str = "SELECT pg_backend_pid(), \
     CASE WHEN current_setting('server_version_num')::int >= 140000 \
          THEN set_config('idle_session_timeout', '0', false) END, \
     current_setting('server_version_num')::int";

/// How long connecting may take in all (see [`crate::waits::connect_budget`]): a `prefer` retry
/// without TLS gets only what the TLS attempt left.
#[derive(Clone, Copy)]
struct Budget {
    until: tokio::time::Instant,
    total: Duration,
}

impl Budget {
    fn of(per_host: Duration, hosts: usize) -> Self {
        let total = crate::waits::connect_budget(per_host, hosts);
        Self {
            until: tokio::time::Instant::now() + total,
            total,
        }
    }
}

/// What the connection string asked of TLS, for classifying a failure.
#[derive(Clone, Copy)]
struct Asked {
    mode: TlsMode,
    client_cert: bool,
}

/// A dedicated session with its connection task. Dropping it closes the connection, which frees
/// any session-level advisory lock on the server.
pub struct Session {
    client: Client,
    cancel: CancelToken,
    tls: Option<MakeRustlsConnect>,
    backend_pid: i32,
    server_version_num: i32,
    preflight_passed: AtomicBool,
    /// Whether anything but the fixed reads ran since the session was last kept idle: every
    /// statement that can open a transaction block or take a lock goes through [`Session::client`].
    beyond_reads: AtomicBool,
    lock_statements: LockStatements,
    prepared: Prepared,
    connection: JoinHandle<()>,
}

impl Session {
    /// Opens a session to `connection`, with TLS per its mode (`prefer` tries TLS, then plain
    /// TCP, unless channel binding is required), its client certificate, TCP keepalives, the
    /// connect timeout (default `DEFAULT_CONNECT_TIMEOUT`) per host, all of it within
    /// [`crate::waits::CONNECT_TOTAL_MAX`], and `application_name` truncated to 63 bytes. The connection string's own application name is not used: the operator must be
    /// recognisable as itself in `pg_stat_activity`.
    ///
    /// # Errors
    /// [`ConnectError`], classified by [`ConnectError::reason`].
    pub async fn connect(
        connection: &Connection,
        application_name: &str,
    ) -> Result<Self, ConnectError> {
        let settings = connection.settings();
        let target = settings.target();
        let mode = settings.tls_mode();
        let asked = Asked {
            mode,
            client_cert: connection.files().client_cert.is_some() && settings.send_client_cert(),
        };
        let mut config = settings.to_config();
        let timeout = settings
            .connect_timeout()
            .unwrap_or(DEFAULT_CONNECT_TIMEOUT);
        config.connect_timeout(timeout);
        let hosts = config.get_hosts().len().max(config.get_hostaddrs().len());
        let budget = Budget::of(timeout, hosts);
        let connector = tls::connector(connection).map_err(|source| ConnectError::TlsConfig {
            target: target.clone(),
            source,
        })?;
        let Some(connector) = connector else {
            config.ssl_mode(tokio_postgres::config::SslMode::Disable);
            return Self::open(config, NoTls, None, application_name, budget, asked).await;
        };
        if mode == TlsMode::Prefer {
            config.ssl_mode(tokio_postgres::config::SslMode::Prefer);
            match Self::open(
                config.clone(),
                connector.clone(),
                Some(connector),
                application_name,
                budget,
                asked,
            )
            .await
            {
                // Without TLS, authentication cannot be bound to the channel: keep the TLS error.
                Err(ConnectError::Tls { source, .. })
                    if settings.channel_binding() != ChannelBinding::Require =>
                {
                    tracing::debug!(%target, error = %source, "tls handshake failed with sslmode=prefer; retrying without tls");
                    config.ssl_mode(tokio_postgres::config::SslMode::Disable);
                    Self::open(config, NoTls, None, application_name, budget, asked).await
                }
                other => other,
            }
        } else {
            config.ssl_mode(tokio_postgres::config::SslMode::Require);
            Self::open(
                config,
                connector.clone(),
                Some(connector),
                application_name,
                budget,
                asked,
            )
            .await
        }
    }

    /// Connects with `config` over `tls`; `asked` is what the connection string asked for, for
    /// messages.
    async fn open<T>(
        mut config: Config,
        tls: T,
        cancel_tls: Option<MakeRustlsConnect>,
        application_name: &str,
        budget: Budget,
        asked: Asked,
    ) -> Result<Self, ConnectError>
    where
        T: MakeTlsConnect<Socket> + Send,
        T::Stream: Send + 'static,
    {
        config
            .application_name(prefix(application_name, APPLICATION_NAME_MAX))
            .keepalives(true)
            .keepalives_idle(KEEPALIVE_IDLE);
        let target = describe_target(&config);
        let user = config.get_user().unwrap_or("").to_owned();
        let connecting = tokio::time::timeout_at(budget.until, config.connect(tls));
        let (client, connection) = match connecting.await {
            Ok(Ok(pair)) => pair,
            Ok(Err(source)) => {
                let attempt = Attempt {
                    target,
                    user,
                    dbname: config.get_dbname().map(str::to_owned),
                    mode: asked.mode,
                    client_cert: asked.client_cert,
                };
                return Err(classify(attempt, source));
            }
            Err(_) => {
                return Err(ConnectError::Timeout {
                    target,
                    user,
                    seconds: budget.total.as_secs(),
                });
            }
        };
        let connection = spawn(connection);
        // The setup query is an unnamed statement, so it works through any pooler and a pooler is
        // detected later (preflight) instead of failing here. The lock statements are prepared in
        // the same round trip: the three requests are polled together, so they are written
        // together and the server answers them in order.
        let (setup, lock_statements) = futures::future::join(
            client.query_typed(SESSION_SETUP, &[]),
            LockStatements::prepare(&client),
        )
        .await;
        let (backend_pid, server_version_num) = match setup {
            Ok(rows) => rows.first().map_or(Ok((0, 0)), |row| {
                Ok((row.try_get::<_, i32>(0)?, row.try_get::<_, i32>(2)?))
            }),
            Err(source) => Err(source),
        }
        .map_err(|source| ConnectError::BackendPid {
            target: target.clone(),
            source,
        })?;
        let lock_statements = lock_statements.map_err(|source| ConnectError::PrepareLock {
            target: target.clone(),
            source,
        })?;
        let cancel = client.cancel_token();
        Ok(Self {
            client,
            cancel,
            tls: cancel_tls,
            backend_pid,
            server_version_num,
            preflight_passed: AtomicBool::new(false),
            beyond_reads: AtomicBool::new(false),
            lock_statements,
            prepared: Prepared::default(),
            connection,
        })
    }

    /// The client for queries on this session. Whatever runs through it may leave a transaction
    /// block open or a lock held, so the pool checks the session before keeping it (see
    /// [`Session::only_read_since_kept`]).
    pub fn client(&self) -> &Client {
        self.beyond_reads.store(true, Ordering::Relaxed);
        &self.client
    }

    /// Whether only the fixed reads ([`Session::read`], [`Session::read_one`]) ran on this
    /// session since it was opened or last kept idle. Each is one `SELECT` in a transaction of its
    /// own, so none can leave a transaction block open or a lock held, and the pool keeps such a
    /// session without asking the server.
    pub fn only_read_since_kept(&self) -> bool {
        !self.beyond_reads.load(Ordering::Relaxed)
    }

    /// Records that the pool found the session clean and keeps it idle.
    pub fn mark_kept(&self) {
        self.beyond_reads.store(false, Ordering::Relaxed);
    }

    /// The server process id of this session, read once at connect. A different pid later (or
    /// pids that differ between sessions opened to the same backend) points at a pooler.
    pub fn backend_pid(&self) -> i32 {
        self.backend_pid
    }

    /// The server's `server_version_num` read at connect (`170002` for 17.2).
    pub fn server_version_num(&self) -> i32 {
        self.server_version_num
    }

    /// The try-lock and unlock statements, prepared on this session when it opened.
    pub fn lock_statements(&self) -> &LockStatements {
        &self.lock_statements
    }

    /// Runs the fixed read `read`: by name once this session has prepared it, unnamed before (see
    /// [`super::prepared`]).
    ///
    /// # Errors
    /// The driver's error.
    pub async fn read(
        &self,
        read: Read,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>, tokio_postgres::Error> {
        self.prepared.query(&self.client, read, params).await
    }

    /// As [`Session::read`], for a read that returns exactly one row.
    ///
    /// # Errors
    /// The driver's error, or a row count other than one.
    pub async fn read_one(
        &self,
        read: Read,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Row, tokio_postgres::Error> {
        self.prepared.query_one(&self.client, read, params).await
    }

    /// Prepares the fixed reads this session ran unnamed since it was last lent (the pool calls it
    /// with its lending check, so both share one round trip). A read that fails to prepare stays
    /// unnamed.
    pub async fn prepare_reads(&self) {
        self.prepared.prepare_wanted(&self.client).await;
    }

    /// How many fixed reads this session runs by name.
    pub fn prepared_reads(&self) -> usize {
        self.prepared.len()
    }

    /// Asks the server to cancel the statement running on this session (used on shutdown). The
    /// cancel request uses the same TLS mode as the session.
    ///
    /// # Errors
    /// The driver error when the cancel request could not be sent.
    pub async fn cancel_running_statement(&self) -> Result<(), tokio_postgres::Error> {
        match &self.tls {
            Some(tls) => self.cancel.cancel_query(tls.clone()).await,
            None => self.cancel.cancel_query(NoTls).await,
        }
    }

    /// Whether a run's preflight (pooler and hot-standby checks) has passed on this session; it
    /// runs once per session.
    pub fn preflight_passed(&self) -> bool {
        self.preflight_passed.load(Ordering::Relaxed)
    }

    /// Records that the preflight passed on this session.
    pub fn mark_preflight_passed(&self) {
        self.preflight_passed.store(true, Ordering::Relaxed);
    }

    /// Whether the connection has closed.
    pub fn is_closed(&self) -> bool {
        self.client.is_closed()
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.connection.abort();
    }
}

fn spawn<S>(connection: DriverConnection<Socket, S>) -> JoinHandle<()>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    tokio::spawn(async move {
        if let Err(error) = connection.await {
            tracing::debug!(error = %error, "postgres connection ended");
        }
    })
}

/// `application_name` as the server keeps it: at most 63 bytes, cut at a character boundary.
pub(super) fn application_name_prefix(application_name: &str) -> &str {
    crate::report::prefix(application_name, APPLICATION_NAME_MAX)
}

/// `host:port` of the first host, for error messages; never includes credentials.
fn describe_target(config: &Config) -> String {
    let host = match (config.get_hosts().first(), config.get_hostaddrs().first()) {
        (Some(tokio_postgres::config::Host::Tcp(name)), _) => name.clone(),
        (Some(tokio_postgres::config::Host::Unix(path)), _) => path.display().to_string(),
        (None, Some(addr)) => addr.to_string(),
        (None, None) => "localhost".to_owned(),
    };
    let port = config.get_ports().first().copied().unwrap_or(5432);
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn application_names_are_cut_at_63_bytes_on_a_char_boundary() {
        let long = "é".repeat(40);
        let cut = prefix(&long, APPLICATION_NAME_MAX);
        assert_eq!(cut.len(), 62);
        assert_eq!(prefix("boxtable-operator", 63), "boxtable-operator");
    }
}
