//! A pass-through TCP proxy in front of the test PostgreSQL that records every statement a
//! client sends, as the server receives it: the text of each simple Query, and of each Parse
//! with the values and the statement name of the Bind that executes it. Nothing is changed on
//! the way; the proxy reads the frontend protocol only to take notes (clients must connect with
//! `sslmode=disable`).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// One statement the server received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sent {
    /// The SQL text, byte for byte.
    pub sql: String,
    /// The bound values (binary or text format as the client sent them); empty for a Query.
    pub params: Vec<Option<Vec<u8>>>,
    /// The prepared statement's name the Bind executed; empty for an unnamed statement and for a
    /// Query.
    pub statement: String,
}

/// The proxy: where to connect, and what it has seen.
pub struct Capture {
    /// The proxy's address.
    pub addr: SocketAddr,
    sent: Arc<Mutex<Vec<Sent>>>,
}

impl Capture {
    /// Everything received so far, in order, across all connections.
    pub fn sent(&self) -> Vec<Sent> {
        self.sent.lock().unwrap().clone()
    }
}

/// Starts a proxy to `upstream`.
pub async fn start(upstream: SocketAddr) -> Capture {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let sent = Arc::new(Mutex::new(Vec::new()));
    let notes = sent.clone();
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let notes = notes.clone();
            tokio::spawn(async move {
                let server = TcpStream::connect(upstream).await.unwrap();
                let (mut client_read, mut client_write) = client.into_split();
                let (mut server_read, mut server_write) = server.into_split();
                tokio::spawn(async move {
                    let _ = tokio::io::copy(&mut server_read, &mut client_write).await;
                });
                let _ = relay(&mut client_read, &mut server_write, &notes).await;
            });
        }
    });
    Capture { addr, sent }
}

async fn read_exact(r: &mut (impl AsyncReadExt + Unpin), n: usize) -> std::io::Result<Vec<u8>> {
    let mut buf = vec![0; n];
    r.read_exact(&mut buf).await?;
    Ok(buf)
}

/// Copies the client's bytes to the server one message at a time, noting statements.
async fn relay(
    from: &mut (impl AsyncReadExt + Unpin),
    to: &mut (impl AsyncWriteExt + Unpin),
    notes: &Mutex<Vec<Sent>>,
) -> std::io::Result<()> {
    // Startup: untyped, length-prefixed messages; an SSLRequest or GSSENCRequest comes first.
    loop {
        let len = read_exact(from, 4).await?;
        let n = u32::from_be_bytes(len[..].try_into().unwrap()) as usize;
        let body = read_exact(from, n - 4).await?;
        to.write_all(&len).await?;
        to.write_all(&body).await?;
        let code = u32::from_be_bytes(body[..4].try_into().unwrap());
        if code != 80_877_103 && code != 80_877_104 {
            break;
        }
    }
    let mut prepared: HashMap<String, String> = HashMap::new();
    loop {
        let head = read_exact(from, 5).await?;
        let n = u32::from_be_bytes(head[1..5].try_into().unwrap()) as usize;
        let body = read_exact(from, n - 4).await?;
        to.write_all(&head).await?;
        to.write_all(&body).await?;
        let mut at = 0;
        let cstr = |at: &mut usize| {
            let end = body[*at..].iter().position(|b| *b == 0).unwrap() + *at;
            let s = String::from_utf8(body[*at..end].to_vec()).unwrap();
            *at = end + 1;
            s
        };
        match head[0] {
            b'Q' => {
                let sql = cstr(&mut at);
                notes.lock().unwrap().push(Sent {
                    sql,
                    params: Vec::new(),
                    statement: String::new(),
                });
            }
            b'P' => {
                let name = cstr(&mut at);
                let sql = cstr(&mut at);
                prepared.insert(name, sql);
            }
            b'B' => {
                let _portal = cstr(&mut at);
                let name = cstr(&mut at);
                let int16 = |at: &mut usize| {
                    let v = i16::from_be_bytes(body[*at..*at + 2].try_into().unwrap());
                    *at += 2;
                    v
                };
                let formats = int16(&mut at);
                at += 2 * formats as usize;
                let count = int16(&mut at);
                let mut params = Vec::new();
                for _ in 0..count {
                    let len = i32::from_be_bytes(body[at..at + 4].try_into().unwrap());
                    at += 4;
                    if len < 0 {
                        params.push(None);
                    } else {
                        params.push(Some(body[at..at + len as usize].to_vec()));
                        at += len as usize;
                    }
                }
                let sql = prepared.get(&name).cloned().unwrap_or_default();
                notes.lock().unwrap().push(Sent {
                    sql,
                    params,
                    statement: name,
                });
            }
            b'X' => return Ok(()),
            _ => {}
        }
    }
}

/// The server behind `config` (its first host and port), for [`start`].
pub fn upstream(config: &tokio_postgres::Config) -> SocketAddr {
    let host = match &config.get_hosts()[0] {
        tokio_postgres::config::Host::Tcp(h) => h.clone(),
        #[allow(unreachable_patterns)]
        _ => panic!("DATABASE_URL must name a TCP host"),
    };
    let port = config.get_ports().first().copied().unwrap_or(5432);
    let ip = if host == "localhost" {
        "127.0.0.1".to_owned()
    } else {
        host
    };
    format!("{ip}:{port}").parse().unwrap()
}

/// A libpq keyword string for `config`'s database and role that goes through `proxy` without TLS
/// (so it can be read).
pub fn through(config: &tokio_postgres::Config, proxy: SocketAddr) -> String {
    let mut out = format!(
        "host={} port={} dbname={} user={} sslmode=disable",
        proxy.ip(),
        proxy.port(),
        config.get_dbname().unwrap(),
        config.get_user().unwrap()
    );
    if let Some(password) = config.get_password() {
        out.push_str(&format!(
            " password='{}'",
            String::from_utf8_lossy(password).replace('\'', "\\'")
        ));
    }
    out
}
