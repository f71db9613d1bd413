//! Shared test helpers: a tiny HTTP/1.1 client over TCP, a watch reader, fixtures and polling.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::net::SocketAddr;
use std::time::Duration;

use boxtable_localapi::{LocalApi, LocalApiHandle};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

pub const CRD: &str = include_str!("../data/boxtable-crd.yaml");
pub const BT: &str = "/apis/brighter.dev/v1alpha1/namespaces/default/boxtables";

pub async fn server() -> LocalApiHandle {
    LocalApi::builder()
        .crd_yaml(CRD)
        .bookmark_interval(Duration::from_millis(200))
        .start()
        .await
        .unwrap()
}

#[derive(Debug)]
pub struct Resp {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Resp {
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "body is not JSON ({e}): {}",
                String::from_utf8_lossy(&self.body)
            )
        })
    }
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

async fn send(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&[u8]>,
) -> BufReader<TcpStream> {
    let mut s = TcpStream::connect(addr).await.unwrap();
    let mut req = format!("{method} {path} HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str(&format!(
        "content-length: {}\r\n\r\n",
        body.map_or(0, <[u8]>::len)
    ));
    s.write_all(req.as_bytes()).await.unwrap();
    if let Some(b) = body {
        s.write_all(b).await.unwrap();
    }
    BufReader::new(s)
}

async fn read_head(r: &mut BufReader<TcpStream>) -> (u16, Vec<(String, String)>) {
    let mut line = String::new();
    r.read_line(&mut line).await.unwrap();
    let status: u16 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    let mut headers = Vec::new();
    loop {
        line.clear();
        r.read_line(&mut line).await.unwrap();
        let l = line.trim_end();
        if l.is_empty() {
            break;
        }
        let (k, v) = l.split_once(':').unwrap();
        headers.push((k.trim().to_lowercase(), v.trim().to_string()));
    }
    (status, headers)
}

async fn read_chunk(r: &mut BufReader<TcpStream>) -> Option<Vec<u8>> {
    let mut line = String::new();
    if r.read_line(&mut line).await.ok()? == 0 {
        return None;
    }
    let size = usize::from_str_radix(line.trim(), 16).ok()?;
    let mut buf = vec![0; size + 2];
    r.read_exact(&mut buf).await.ok()?;
    buf.truncate(size);
    (size > 0).then_some(buf)
}

pub async fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&[u8]>,
) -> Resp {
    let mut r = send(addr, method, path, headers, body).await;
    let (status, hs) = read_head(&mut r).await;
    let mut body = Vec::new();
    if hs
        .iter()
        .any(|(k, v)| k == "transfer-encoding" && v.contains("chunked"))
    {
        while let Some(c) = read_chunk(&mut r).await {
            body.extend(c);
        }
    } else {
        r.read_to_end(&mut body).await.unwrap();
    }
    Resp {
        status,
        headers: hs,
        body,
    }
}

pub struct Api {
    pub addr: SocketAddr,
}

impl Api {
    pub fn new(h: &LocalApiHandle) -> Self {
        Self { addr: h.addr() }
    }
    pub async fn get(&self, path: &str) -> Resp {
        request(
            self.addr,
            "GET",
            path,
            &[("accept", "application/json")],
            None,
        )
        .await
    }
    pub async fn get_accept(&self, path: &str, accept: &str) -> Resp {
        request(self.addr, "GET", path, &[("accept", accept)], None).await
    }
    pub async fn send(&self, method: &str, path: &str, content_type: &str, body: &Value) -> Resp {
        let b = body.to_string();
        request(
            self.addr,
            method,
            path,
            &[
                ("content-type", content_type),
                ("accept", "application/json"),
            ],
            Some(b.as_bytes()),
        )
        .await
    }
    pub async fn post(&self, path: &str, body: &Value) -> Resp {
        self.send("POST", path, "application/json", body).await
    }
    pub async fn put(&self, path: &str, body: &Value) -> Resp {
        self.send("PUT", path, "application/json", body).await
    }
    pub async fn merge(&self, path: &str, body: &Value) -> Resp {
        self.send("PATCH", path, "application/merge-patch+json", body)
            .await
    }
    pub async fn json_patch(&self, path: &str, body: &Value) -> Resp {
        self.send("PATCH", path, "application/json-patch+json", body)
            .await
    }
    pub async fn apply(&self, path: &str, body: &Value) -> Resp {
        self.send("PATCH", path, "application/apply-patch+yaml", body)
            .await
    }
    pub async fn delete(&self, path: &str) -> Resp {
        request(self.addr, "DELETE", path, &[], None).await
    }
    pub async fn watch(&self, path: &str) -> Watch {
        let mut r = send(
            self.addr,
            "GET",
            path,
            &[("accept", "application/json")],
            None,
        )
        .await;
        let (status, _) = read_head(&mut r).await;
        assert_eq!(status, 200, "watch {path} answered {status}");
        Watch {
            r,
            pending: String::new(),
        }
    }
}

pub struct Watch {
    r: BufReader<TcpStream>,
    pending: String,
}

impl Watch {
    /// The next event, `None` when the server closed the stream. Fails the test after 60 s.
    pub async fn next(&mut self) -> Option<Value> {
        loop {
            if let Some(i) = self.pending.find('\n') {
                let line: String = self.pending.drain(..=i).collect();
                return Some(serde_json::from_str(line.trim()).unwrap());
            }
            let chunk = tokio::time::timeout(Duration::from_secs(60), read_chunk(&mut self.r))
                .await
                .expect("no watch event within 60s")?;
            self.pending.push_str(&String::from_utf8(chunk).unwrap());
        }
    }

    /// The next event that is not a BOOKMARK.
    pub async fn next_change(&mut self) -> Option<Value> {
        loop {
            let ev = self.next().await?;
            if ev["type"] != "BOOKMARK" {
                return Some(ev);
            }
        }
    }
}

/// Polls `check` until it returns true, failing after `secs` seconds.
pub async fn eventually<F, Fut>(secs: u64, what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
    while !check().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Fixture builder for BoxTable manifests.
pub struct BoxTableBuilder(Value);

pub fn boxtable(name: &str) -> BoxTableBuilder {
    BoxTableBuilder(
        json!({"apiVersion": "brighter.dev/v1alpha1", "kind": "BoxTable", "metadata": {"name": name}, "spec": {"box": "Outbox"}}),
    )
}

impl BoxTableBuilder {
    pub fn table(mut self, t: &str) -> Self {
        self.0["spec"]["table"] = json!(t);
        self
    }
    pub fn spec(mut self, k: &str, v: Value) -> Self {
        self.0["spec"][k] = v;
        self
    }
    pub fn finalizer(mut self, f: &str) -> Self {
        self.0["metadata"]["finalizers"] = json!([f]);
        self
    }
    pub fn label(mut self, k: &str, v: &str) -> Self {
        self.0["metadata"]["labels"][k] = json!(v);
        self
    }
    pub fn build(self) -> Value {
        self.0
    }
}
