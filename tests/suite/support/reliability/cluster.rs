//! Private PostgreSQL clusters for scenarios that restart or replicate a server, or need TLS:
//! started with the binaries `scripts/pg.sh` found (`PG_BIN`, run as `PG_OWNER`), trust
//! authentication on 127.0.0.1 (or, for [`Cluster::primary_with_client_auth`], `hostssl` rules
//! with client certificates and SCRAM), stopped and deleted on drop. Certificates are made with
//! `openssl` ([`Pki`]).

use std::path::PathBuf;
use std::process::Command;

use crate::support::Sql;
use crate::support::process::run_ok;

/// A PostgreSQL cluster owned by one test.
pub struct Cluster {
    /// Root directory (data directory and logs).
    root: tempfile::TempDir,
    /// The data directory.
    pub data: PathBuf,
    /// The port on 127.0.0.1.
    pub port: u16,
    bin: PathBuf,
    owner: Option<String>,
    /// Whether the server offers TLS (`ssl = on` with a self-signed certificate).
    tls: bool,
    /// The CA file the server checks client certificates against (`ssl_ca_file`), if any.
    client_ca: Option<PathBuf>,
}

/// The roles of [`Cluster::primary_with_client_auth`] and how `pg_hba.conf` lets each in (over
/// TLS only, from 127.0.0.1): `bt_cert` with a client certificate alone (`cert`), `bt_scram` with
/// its password (`scram-sha-256`, [`SCRAM_PASSWORD`]), `bt_both` with both (`scram-sha-256
/// clientcert=verify-full`); `postgres` without authentication (`trust`), over TLS or not.
pub const CLIENT_AUTH_HBA: &str = "local all all trust\n\
    hostssl all bt_cert 127.0.0.1/32 cert\n\
    hostssl all bt_scram 127.0.0.1/32 scram-sha-256\n\
    hostssl all bt_both 127.0.0.1/32 scram-sha-256 clientcert=verify-full\n\
    host all postgres 127.0.0.1/32 trust\n\
    host all all 127.0.0.1/32 reject\n";

/// The password of `bt_scram` and `bt_both`.
pub const SCRAM_PASSWORD: &str = "Scram-Pw-7c1e";

/// A private certificate authority made with `openssl` in a directory of its own: its certificate,
/// and certificates it issues (EC P-256, valid two days).
pub struct Pki {
    dir: tempfile::TempDir,
}

fn openssl(args: &[&str], dir: &std::path::Path) {
    run_ok(
        &format!("openssl {args:?}"),
        Command::new("openssl").args(args).current_dir(dir),
    );
}

impl Pki {
    /// A new CA named `name`.
    pub fn new(name: &str) -> Self {
        let dir = tempfile::Builder::new()
            .prefix("boxtable-pki")
            .tempdir()
            .unwrap();
        let subject = format!("/CN={name}");
        openssl(
            &[
                "req",
                "-x509",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:prime256v1",
                "-nodes",
                "-days",
                "2",
                "-subj",
                &subject,
                "-keyout",
                "ca.key",
                "-out",
                "ca.crt",
            ],
            dir.path(),
        );
        Self { dir }
    }

    /// The CA's certificate (PEM).
    pub fn ca(&self) -> Vec<u8> {
        std::fs::read(self.dir.path().join("ca.crt")).unwrap()
    }

    /// A certificate for common name `cn` (with `subjectAltName` `san` when given), signed by
    /// this CA: the paths of its PEM certificate and unencrypted key.
    pub fn issue_files(&self, cn: &str, san: Option<&str>) -> (PathBuf, PathBuf) {
        let dir = self.dir.path();
        let (key, csr, crt, ext) = (
            format!("{cn}.key"),
            format!("{cn}.csr"),
            format!("{cn}.crt"),
            format!("{cn}.ext"),
        );
        let subject = format!("/CN={cn}");
        openssl(
            &[
                "req",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:prime256v1",
                "-nodes",
                "-subj",
                &subject,
                "-keyout",
                &key,
                "-out",
                &csr,
            ],
            dir,
        );
        let mut extensions = String::from("basicConstraints=CA:FALSE\n");
        if let Some(san) = san {
            extensions.push_str(&format!("subjectAltName={san}\n"));
        }
        std::fs::write(dir.join(&ext), extensions).unwrap();
        openssl(
            &[
                "x509",
                "-req",
                "-in",
                &csr,
                "-CA",
                "ca.crt",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-days",
                "2",
                "-extfile",
                &ext,
                "-out",
                &crt,
            ],
            dir,
        );
        (dir.join(crt), dir.join(key))
    }

    /// A client certificate for common name `cn` (a role name, for `cert` authentication): its
    /// PEM certificate and unencrypted key.
    pub fn client(&self, cn: &str) -> (Vec<u8>, Vec<u8>) {
        let (crt, key) = self.issue_files(cn, None);
        (std::fs::read(crt).unwrap(), std::fs::read(key).unwrap())
    }
}

fn bin_dir() -> PathBuf {
    if let Ok(bin) = std::env::var("PG_BIN") {
        return PathBuf::from(bin);
    }
    let found = std::fs::read_dir("/usr/lib/postgresql")
        .ok()
        .and_then(|dirs| {
            dirs.filter_map(Result::ok)
                .map(|d| d.path().join("bin"))
                .find(|b| b.join("initdb").exists())
        });
    found.unwrap_or_else(|| {
        panic!(
            "PostgreSQL server binaries not found: run the tests through scripts/test.sh or \
             scripts/reliability.sh (they source scripts/pg.sh, which installs postgresql and \
             exports PG_BIN)"
        )
    })
}

/// The non-root user that runs servers (`PG_OWNER`, else `postgres` when root).
fn owner() -> Option<String> {
    let root = Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false);
    root.then(|| std::env::var("PG_OWNER").unwrap_or_else(|_| "postgres".to_owned()))
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl Cluster {
    fn run(&self, program: &str, args: &[&str]) {
        let exe = self.bin.join(program);
        let mut cmd = match &self.owner {
            Some(user) => {
                let mut c = Command::new("runuser");
                c.args(["-u", user, "--"]).arg(&exe);
                c
            }
            None => Command::new(&exe),
        };
        let out = cmd.args(args).output().unwrap();
        assert!(
            out.status.success(),
            "{program} {args:?} failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    fn new_dir() -> (tempfile::TempDir, Option<String>, PathBuf) {
        let root = tempfile::Builder::new()
            .prefix("boxtable-rel-pg")
            .tempdir()
            .unwrap();
        let owner = owner();
        if let Some(user) = &owner {
            let ok = Command::new("chown")
                .arg(user)
                .arg(root.path())
                .status()
                .unwrap();
            assert!(ok.success(), "chown {user}");
        }
        (root, owner, bin_dir())
    }

    /// A new primary with trust authentication (replication allowed from 127.0.0.1).
    pub fn primary() -> Self {
        let cluster = Self::initialised(false);
        cluster.start();
        cluster
    }

    /// A new primary that also offers TLS, with a self-signed certificate for the name
    /// `boxtable-test-server` ([`Cluster::certificate`]): not the name `127.0.0.1` it is reached
    /// by, and signed by no CA a client knows.
    pub fn primary_with_tls() -> Self {
        let cluster = Self::initialised(true);
        let (cert, key) = (
            cluster.data.join("server.crt"),
            cluster.data.join("server.key"),
        );
        run_ok(
            "openssl req",
            Command::new("openssl")
                .args([
                    "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                ])
                .args(["-subj", "/CN=boxtable-test-server", "-keyout"])
                .arg(&key)
                .arg("-out")
                .arg(&cert),
        );
        for file in [&cert, &key] {
            if let Some(user) = &cluster.owner {
                let ok = Command::new("chown").arg(user).arg(file).status().unwrap();
                assert!(ok.success(), "chown {user}");
            }
            let ok = Command::new("chmod").arg("600").arg(file).status().unwrap();
            assert!(ok.success(), "chmod 600");
        }
        cluster.start();
        cluster
    }

    /// A new primary that offers TLS with a certificate for `127.0.0.1` and `localhost` issued by
    /// `pki`, checks client certificates against `pki`'s CA, and lets roles in as
    /// [`CLIENT_AUTH_HBA`] says. The roles are created, `bt_scram` and `bt_both` with
    /// [`SCRAM_PASSWORD`] (stored as SCRAM), each allowed to create tables in `public`.
    pub async fn primary_with_client_auth(pki: &Pki) -> Self {
        let mut cluster = Self::initialised(true);
        let (crt, key) =
            pki.issue_files("boxtable-test-server", Some("IP:127.0.0.1,DNS:localhost"));
        let ca = cluster.data.join("root.crt");
        std::fs::copy(crt, cluster.data.join("server.crt")).unwrap();
        std::fs::copy(key, cluster.data.join("server.key")).unwrap();
        std::fs::write(&ca, pki.ca()).unwrap();
        std::fs::write(cluster.data.join("pg_hba.conf"), CLIENT_AUTH_HBA).unwrap();
        for file in ["server.crt", "server.key", "root.crt", "pg_hba.conf"] {
            let file = cluster.data.join(file);
            if let Some(user) = &cluster.owner {
                let ok = Command::new("chown").arg(user).arg(&file).status().unwrap();
                assert!(ok.success(), "chown {user}");
            }
            let ok = Command::new("chmod")
                .arg("600")
                .arg(&file)
                .status()
                .unwrap();
            assert!(ok.success(), "chmod 600");
        }
        cluster.client_ca = Some(ca);
        cluster.start();
        let admin = crate::support::connect(&cluster.url("postgres")).await;
        admin
            .batch(&format!(
                "SET password_encryption = 'scram-sha-256'; \
                 CREATE ROLE bt_cert LOGIN; \
                 CREATE ROLE bt_scram LOGIN PASSWORD '{SCRAM_PASSWORD}'; \
                 CREATE ROLE bt_both LOGIN PASSWORD '{SCRAM_PASSWORD}'; \
                 GRANT ALL ON SCHEMA public TO bt_cert, bt_scram, bt_both"
            ))
            .await;
        cluster
    }

    /// The server's certificate in PEM (only for [`Cluster::primary_with_tls`]).
    pub fn certificate(&self) -> Vec<u8> {
        std::fs::read(self.data.join("server.crt")).unwrap()
    }

    /// A cluster in a new directory on a free port, its data directory not made yet.
    fn in_new_dir(tls: bool) -> Self {
        let (root, owner, bin) = Self::new_dir();
        Self {
            data: root.path().join("data"),
            root,
            port: free_port(),
            bin,
            owner,
            tls,
            client_ca: None,
        }
    }

    /// A data directory made by `initdb`, the server not started yet.
    fn initialised(tls: bool) -> Self {
        let cluster = Self::in_new_dir(tls);
        let data = cluster.data.clone();
        cluster.run(
            "initdb",
            &[
                "-D",
                data.to_str().unwrap(),
                "-U",
                "postgres",
                "-A",
                "trust",
                "-E",
                "UTF8",
                "--no-sync",
            ],
        );
        cluster
    }

    /// A streaming hot standby of `primary`, made with `pg_basebackup -R` when the binaries have
    /// it, else (server-only builds, such as the per-major builds of `scripts/pg-install.sh`) from
    /// a copy of the primary's data directory taken while it is stopped.
    pub fn standby_of(primary: &Cluster) -> Self {
        let cluster = Self::in_new_dir(false);
        let data = cluster.data.clone();
        if !cluster.bin.join("pg_basebackup").exists() {
            cluster.copy_as_standby_of(primary);
            cluster.start();
            return cluster;
        }
        cluster.run(
            "pg_basebackup",
            &[
                "-h",
                "127.0.0.1",
                "-p",
                &primary.port.to_string(),
                "-U",
                "postgres",
                "-D",
                data.to_str().unwrap(),
                "-R",
                "-X",
                "stream",
                "--no-sync",
            ],
        );
        cluster.start();
        cluster
    }

    /// Copies the stopped primary's data directory into this cluster's and configures it to
    /// stream from the primary as a hot standby (`standby.signal`, `primary_conninfo`).
    fn copy_as_standby_of(&self, primary: &Cluster) {
        primary.pg_ctl("stop");
        let mut copy = match &self.owner {
            Some(user) => {
                let mut c = Command::new("runuser");
                c.args(["-u", user, "--", "cp"]);
                c
            }
            None => Command::new("cp"),
        };
        let copied = copy
            .arg("-a")
            .arg(&primary.data)
            .arg(&self.data)
            .status()
            .unwrap();
        assert!(copied.success(), "copying the primary's data directory");
        primary.start();
        std::fs::write(self.data.join("standby.signal"), "").unwrap();
        let mut auto = std::fs::OpenOptions::new()
            .append(true)
            .open(self.data.join("postgresql.auto.conf"))
            .unwrap();
        std::io::Write::write_all(
            &mut auto,
            format!(
                "primary_conninfo = 'host=127.0.0.1 port={} user=postgres'\n",
                primary.port
            )
            .as_bytes(),
        )
        .unwrap();
        if let Some(user) = &self.owner {
            let ok = Command::new("chown")
                .args(["-R", user])
                .arg(&self.data)
                .status()
                .unwrap();
            assert!(ok.success(), "chown {user}");
        }
    }

    fn log(&self) -> PathBuf {
        self.root.path().join("server.log")
    }

    fn options(&self) -> String {
        let mut options = format!(
            "-c listen_addresses=127.0.0.1 -c port={} -c unix_socket_directories={} -c fsync=off \
             -c max_connections=50 -c shared_buffers=16MB -c ssl={}",
            self.port,
            self.root.path().display(),
            if self.tls { "on" } else { "off" }
        );
        if let Some(ca) = &self.client_ca {
            options.push_str(&format!(" -c ssl_ca_file={}", ca.display()));
        }
        options
    }

    /// Starts the server and waits until it accepts connections.
    pub fn start(&self) {
        self.pg_ctl("start");
    }

    /// `pg_ctl restart -m fast`, waiting until the server is back.
    pub fn restart_fast(&self) {
        self.pg_ctl("restart");
    }

    fn pg_ctl(&self, action: &str) {
        let data = self.data.to_str().unwrap().to_owned();
        let log = self.log().to_str().unwrap().to_owned();
        let options = self.options();
        self.run(
            "pg_ctl",
            &[
                "-D", &data, "-l", &log, "-w", "-t", "60", "-m", "fast", "-o", &options, action,
            ],
        );
    }

    /// A URL for database `db` as `postgres`.
    pub fn url(&self, db: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{db}", self.port)
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let exe = self.bin.join("pg_ctl");
        let data = self.data.to_str().unwrap_or_default().to_owned();
        let mut cmd = match &self.owner {
            Some(user) => {
                let mut c = Command::new("runuser");
                c.args(["-u", user, "--"]).arg(&exe);
                c
            }
            None => Command::new(&exe),
        };
        let _ = cmd
            .args(["-D", &data, "-m", "immediate", "stop"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status();
    }
}
