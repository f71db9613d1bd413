//! A PgBouncer in front of the shared test server, started by the test as the server's non-root
//! owner on a free port, with a SCRAM auth file; killed on drop.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Where PgBouncer comes from when it is missing.
const INSTALL_HINT: &str = "pgbouncer is not installed: run scripts/reliability.sh (as root it \
    installs the Debian package with apt-get; otherwise `sudo apt-get install pgbouncer`)";

/// A running PgBouncer.
pub struct Pgbouncer {
    child: Child,
    dir: tempfile::TempDir,
    /// Its port on 127.0.0.1.
    pub port: u16,
}

fn pgbouncer_binary() -> String {
    for candidate in [
        "/usr/sbin/pgbouncer",
        "/usr/bin/pgbouncer",
        "/usr/local/bin/pgbouncer",
    ] {
        if std::path::Path::new(candidate).exists() {
            return candidate.to_owned();
        }
    }
    panic!("{INSTALL_HINT}");
}

impl Pgbouncer {
    /// Starts PgBouncer in `pool_mode` (`transaction` or `session`) for the server at
    /// `upstream` (a `postgres://` URL with user and password). Idle server connections are handed
    /// out round-robin, as under load, so consecutive transactions move between backends.
    pub fn start(pool_mode: &str, upstream: &tokio_postgres::Config) -> Self {
        let binary = pgbouncer_binary();
        let dir = tempfile::Builder::new()
            .prefix("boxtable-rel-pgbouncer")
            .tempdir()
            .unwrap();
        let (host, port) = match (upstream.get_hosts().first(), upstream.get_ports().first()) {
            (Some(tokio_postgres::config::Host::Tcp(h)), Some(p)) => (h.clone(), *p),
            _ => panic!("DATABASE_URL must name a TCP host and port"),
        };
        let user = upstream.get_user().unwrap();
        let password = String::from_utf8(upstream.get_password().unwrap().to_vec()).unwrap();
        let listen = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let d = dir.path().display();
        std::fs::write(
            dir.path().join("userlist.txt"),
            format!("\"{user}\" \"{password}\"\n"),
        )
        .unwrap();
        std::fs::write(
            dir.path().join("pgbouncer.ini"),
            format!(
                "[databases]\n* = host={host} port={port}\n\n[pgbouncer]\nlisten_addr = 127.0.0.1\n\
                 listen_port = {listen}\nunix_socket_dir =\nauth_type = scram-sha-256\n\
                 auth_file = {d}/userlist.txt\npool_mode = {pool_mode}\nserver_round_robin = 1\n\
                 default_pool_size = 4\nmax_client_conn = 50\n\
                 ignore_startup_parameters = extra_float_digits,options\n\
                 logfile = {d}/pgbouncer.log\n"
            ),
        )
        .unwrap();
        let root = Command::new("id")
            .arg("-u")
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
            .unwrap_or(false);
        let mut cmd = if root {
            let owner = std::env::var("PG_OWNER").unwrap_or_else(|_| "postgres".to_owned());
            let chown = Command::new("chown")
                .args(["-R", &owner])
                .arg(dir.path())
                .status()
                .unwrap();
            assert!(chown.success());
            let mut c = Command::new("runuser");
            c.args(["-u", &owner, "--", &binary]);
            c
        } else {
            Command::new(&binary)
        };
        let child = cmd
            .arg(dir.path().join("pgbouncer.ini"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let bouncer = Self {
            child,
            dir,
            port: listen,
        };
        let start = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", listen)).is_err() {
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "pgbouncer did not start: {}",
                std::fs::read_to_string(bouncer.dir.path().join("pgbouncer.log"))
                    .unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        bouncer
    }

    /// `upstream`'s URL with PgBouncer's port and database `db`.
    pub fn url(&self, upstream: &tokio_postgres::Config, db: &str) -> String {
        let user = upstream.get_user().unwrap();
        let password = String::from_utf8(upstream.get_password().unwrap().to_vec()).unwrap();
        format!("postgres://{user}:{password}@127.0.0.1:{}/{db}", self.port)
    }
}

impl Drop for Pgbouncer {
    fn drop(&mut self) {
        // runuser forwards SIGTERM to pgbouncer.
        let _ = Command::new("kill")
            .arg(self.child.id().to_string())
            .status();
        let _ = self.child.wait();
    }
}
