//! One dedicated PostgreSQL session: the connection that takes the lock and runs the transaction.

use std::time::Duration;
use tokio::task::JoinHandle;
use tokio_postgres::{CancelToken, Client, Config, NoTls};

/// Why a session could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// The server could not be reached or refused the session.
    #[error("connecting to PostgreSQL at {target} failed")]
    Connect {
        /// Host and port, never the password.
        target: String,
        /// The driver error.
        #[source]
        source: tokio_postgres::Error,
    },
}

/// A dedicated session with its connection task. Dropping it closes the connection, which frees
/// any session-level advisory lock on the server.
pub struct Session {
    client: Client,
    cancel: CancelToken,
    connection: JoinHandle<()>,
}

impl Session {
    /// Opens a session without TLS from a driver config, setting `application_name` and TCP
    /// keepalives.
    ///
    /// # Errors
    /// [`ConnectError::Connect`] when the server cannot be reached or refuses the session.
    pub async fn connect_plain(mut config: Config, application_name: &str) -> Result<Self, ConnectError> {
        config
            .application_name(application_name)
            .keepalives(true)
            .keepalives_idle(Duration::from_secs(30))
            .connect_timeout(Duration::from_secs(10));
        let target = describe_target(&config);
        let (client, connection) = config
            .connect(NoTls)
            .await
            .map_err(|source| ConnectError::Connect { target, source })?;
        let connection = tokio::spawn(async move {
            if let Err(error) = connection.await {
                tracing::debug!(error = %error, "postgres connection ended");
            }
        });
        let cancel = client.cancel_token();
        Ok(Self {
            client,
            cancel,
            connection,
        })
    }

    /// The client for queries on this session.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The client, mutably (to open a transaction).
    pub fn client_mut(&mut self) -> &mut Client {
        &mut self.client
    }

    /// Asks the server to cancel the statement running on this session (used on shutdown).
    ///
    /// # Errors
    /// The driver error when the cancel request could not be sent.
    pub async fn cancel_running_statement(&self) -> Result<(), tokio_postgres::Error> {
        self.cancel.cancel_query(NoTls).await
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

/// `host:port` of the first host, for error messages; never includes credentials.
fn describe_target(config: &Config) -> String {
    let host = config
        .get_hosts()
        .first()
        .map(|h| match h {
            tokio_postgres::config::Host::Tcp(name) => name.clone(),
            tokio_postgres::config::Host::Unix(path) => path.display().to_string(),
        })
        .unwrap_or_else(|| "localhost".to_owned());
    let port = config.get_ports().first().copied().unwrap_or(5432);
    format!("{host}:{port}")
}
