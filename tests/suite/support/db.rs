//! Shared test fixtures: a fresh database per test on the PostgreSQL that `scripts/test.sh` starts.

use std::sync::atomic::{AtomicU32, Ordering};

use std::future::Future;

use boxtable_operator::db::{Connection, Session};
use tokio_postgres::types::{FromSqlOwned, ToSql};
use tokio_postgres::{Client, Config, NoTls};

/// The shapes of read the tests make, failing the test on any error: one value, or the first
/// one, two or three columns of every row; and [`Sql::batch`], statements that must succeed. `client.value::<i64>("SELECT count(*) ...", &[]).await`.
pub trait Sql {
    /// Runs the statements in `sql` (one batch, no parameters).
    fn batch<'a>(&'a self, sql: &'a str) -> impl Future<Output = ()> + Send + 'a;

    /// The first column of the one row `sql` returns.
    fn value<'a, T: FromSqlOwned + Send + 'a>(
        &'a self,
        sql: &'a str,
        params: &'a [&'a (dyn ToSql + Sync)],
    ) -> impl Future<Output = T> + Send + 'a;

    /// The first column of every row `sql` returns, in the server's order.
    fn column<'a, T: FromSqlOwned + Send + 'a>(
        &'a self,
        sql: &'a str,
        params: &'a [&'a (dyn ToSql + Sync)],
    ) -> impl Future<Output = Vec<T>> + Send + 'a;

    /// The first two columns of every row `sql` returns, in the server's order.
    fn pairs<'a, A: FromSqlOwned + Send + 'a, B: FromSqlOwned + Send + 'a>(
        &'a self,
        sql: &'a str,
        params: &'a [&'a (dyn ToSql + Sync)],
    ) -> impl Future<Output = Vec<(A, B)>> + Send + 'a;

    /// The first three columns of every row `sql` returns, in the server's order.
    fn triples<'a, A, B, C>(
        &'a self,
        sql: &'a str,
        params: &'a [&'a (dyn ToSql + Sync)],
    ) -> impl Future<Output = Vec<(A, B, C)>> + Send + 'a
    where
        A: FromSqlOwned + Send + 'a,
        B: FromSqlOwned + Send + 'a,
        C: FromSqlOwned + Send + 'a;
}

impl Sql for Client {
    async fn batch<'a>(&'a self, sql: &'a str) {
        self.batch_execute(sql)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e:?}"));
    }

    async fn value<'a, T: FromSqlOwned + Send + 'a>(
        &'a self,
        sql: &'a str,
        params: &'a [&'a (dyn ToSql + Sync)],
    ) -> T {
        self.query_one(sql, params)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e:?}"))
            .get(0)
    }

    async fn column<'a, T: FromSqlOwned + Send + 'a>(
        &'a self,
        sql: &'a str,
        params: &'a [&'a (dyn ToSql + Sync)],
    ) -> Vec<T> {
        self.query(sql, params)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e:?}"))
            .iter()
            .map(|row| row.get(0))
            .collect()
    }

    async fn pairs<'a, A: FromSqlOwned + Send + 'a, B: FromSqlOwned + Send + 'a>(
        &'a self,
        sql: &'a str,
        params: &'a [&'a (dyn ToSql + Sync)],
    ) -> Vec<(A, B)> {
        self.query(sql, params)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e:?}"))
            .iter()
            .map(|row| (row.get(0), row.get(1)))
            .collect()
    }

    async fn triples<'a, A, B, C>(
        &'a self,
        sql: &'a str,
        params: &'a [&'a (dyn ToSql + Sync)],
    ) -> Vec<(A, B, C)>
    where
        A: FromSqlOwned + Send + 'a,
        B: FromSqlOwned + Send + 'a,
        C: FromSqlOwned + Send + 'a,
    {
        self.query(sql, params)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e:?}"))
            .iter()
            .map(|row| (row.get(0), row.get(1), row.get(2)))
            .collect()
    }
}

/// The server URL, or a failure that says how to get one. Tests never skip silently.
pub fn database_url() -> String {
    match std::env::var("DATABASE_URL") {
        Ok(url) if !url.is_empty() => url,
        _ => panic!(
            "DATABASE_URL is not set. Run the suite with scripts/test.sh, which starts a throwaway \
             PostgreSQL (installing the postgresql package with apt if needed), or set DATABASE_URL \
             to a disposable PostgreSQL server where this user may create databases."
        ),
    }
}

/// A database created for one test.
pub struct TestDb {
    /// The database name.
    pub name: String,
    /// A URL for it (same credentials as `DATABASE_URL`).
    pub url: String,
}

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// Replaces the database name in a `postgres://` URL.
pub fn url_with_dbname(url: &str, dbname: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (url, None),
    };
    let scheme_end = base.find("://").map(|i| i + 3).unwrap_or(0);
    let host_part_end = base[scheme_end..]
        .find('/')
        .map(|i| scheme_end + i)
        .unwrap_or(base.len());
    let mut out = format!("{}/{}", &base[..host_part_end], dbname);
    if let Some(q) = query {
        out.push('?');
        out.push_str(q);
    }
    out
}

/// Connects to `url` without TLS; the connection task runs in the background.
pub async fn connect(url: &str) -> Client {
    let config: Config = url.parse().expect("DATABASE_URL must be a postgres:// URL");
    connect_config(&config).await
}

/// Connects with a driver config without TLS.
pub async fn connect_config(config: &Config) -> Client {
    let (client, connection) = config
        .connect(NoTls)
        .await
        .expect("connect to test PostgreSQL");
    tokio::spawn(async move {
        let _ = connection.await;
    });
    client
}

/// Creates a new, empty database for one test.
pub async fn fresh_db() -> TestDb {
    let admin_url = database_url();
    let admin = connect(&admin_url).await;
    let n = COUNTER.fetch_add(1, Ordering::SeqCst);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let name = format!("t_{}_{}_{}", std::process::id(), n, nanos);
    admin
        .batch_execute(&format!("CREATE DATABASE \"{name}\""))
        .await
        .expect("create test database");
    let url = url_with_dbname(&admin_url, &name);
    TestDb { name, url }
}

/// A new, empty database for one test and a plain connection to it.
pub async fn fresh_db_and_client() -> (TestDb, Client) {
    let db = fresh_db().await;
    let client = db.connect().await;
    (db, client)
}

impl TestDb {
    /// A new plain connection to this database.
    pub async fn connect(&self) -> Client {
        connect(&self.url).await
    }

    /// A `postgres://` URL for this database that logs in as `role` with `password`.
    pub fn url_as(&self, role: &str, password: &str) -> String {
        let config = self.config();
        let (host, port) = match (config.get_hosts().first(), config.get_ports().first()) {
            (Some(tokio_postgres::config::Host::Tcp(h)), Some(p)) => (h.clone(), *p),
            _ => panic!("DATABASE_URL must name a TCP host"),
        };
        format!("postgres://{role}:{password}@{host}:{port}/{}", self.name)
    }

    /// The driver config for this database.
    pub fn config(&self) -> Config {
        self.url.parse().expect("test database URL")
    }

    /// A dedicated session on this database as the operator opens one, without TLS (the test
    /// server has none).
    pub async fn session(&self, application_name: &str) -> Session {
        let separator = if self.url.contains('?') { '&' } else { '?' };
        let url = format!("{}{separator}sslmode=disable", self.url);
        let connection = Connection::parse(&url).expect("test database URL");
        Session::connect(&connection, application_name)
            .await
            .expect("a session on the test database")
    }
}

/// The statements `client`'s session has prepared, as the server lists them: (name, text),
/// ordered by text.
pub async fn prepared_statements(client: &Client) -> Vec<(String, String)> {
    // Unprepared (query_typed), so that this read is not itself in the list.
    client
        .query_typed(
            "SELECT name, statement FROM pg_prepared_statements ORDER BY statement",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect()
}

/// Advisory locks in this database, granted or awaited, held by any session.
pub async fn advisory_locks(client: &Client) -> i64 {
    client
        .value(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' \
             AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
            &[],
        )
        .await
}

/// The operator's sessions on this database (`application_name` `boxtable-operator/...`):
/// (pid, application_name), ordered by pid.
pub async fn operator_sessions(client: &Client) -> Vec<(i32, String)> {
    client
        .pairs(
            "SELECT pid, application_name FROM pg_stat_activity \
             WHERE datname = current_database() AND application_name LIKE 'boxtable-operator/%' \
             ORDER BY pid",
            &[],
        )
        .await
}
