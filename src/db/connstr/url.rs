//! The URL form: `postgres://user:password@host:port,host2/dbname?sslmode=require`.
//!
//! User, password, hosts, database and query values are percent-decoded; query keys are libpq
//! keywords.

use super::entry::{Entry, Key, refuse_unknown, split_host_ports};
use super::{ConnStrError, Form, keyword};

fn syntax(position: usize, expected: &'static str) -> ConnStrError {
    ConnStrError::Syntax {
        form: Form::Url,
        position,
        expected,
    }
}

/// Decodes `%XX` escapes; `base` is the byte offset of `s` in the whole string, for errors.
fn decode(s: &str, base: usize) -> Result<String, ConnStrError> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = s
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok());
            let Some(b) = hex else {
                return Err(syntax(base + i, "two hex digits after '%'"));
            };
            out.push(b);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| syntax(base, "percent-encoded UTF-8"))
}

pub(super) fn parse(input: &str) -> Result<Vec<Entry>, ConnStrError> {
    let lead = input.len() - input.trim_start().len();
    let text = input.trim();
    let Some(scheme_end) = text.find("://") else {
        return Err(ConnStrError::UnsupportedScheme);
    };
    let scheme = text[..scheme_end].to_ascii_lowercase();
    if scheme != "postgres" && scheme != "postgresql" {
        return Err(ConnStrError::UnsupportedScheme);
    }
    let mut pos = lead + scheme_end + 3;
    let rest = &input[pos..lead + text.len()];
    let rest = rest.split_once('#').map_or(rest, |(r, _)| r);
    let mut entries = Vec::new();

    // Credentials end at the first '@' before any '/' (as libpq reads them).
    let mut remaining = rest;
    let cred_end = rest.find('/').unwrap_or(rest.len());
    if let Some(at) = rest[..cred_end].rfind('@') {
        let userinfo = &rest[..at];
        let (user, password) = match userinfo.split_once(':') {
            Some((u, p)) => (u, Some((p, u.len() + 1))),
            None => (userinfo, None),
        };
        if !user.is_empty() {
            entries.push(entry(Key::User, decode(user, pos)?, pos));
        }
        if let Some((p, offset)) = password {
            entries.push(entry(Key::Password, decode(p, pos + offset)?, pos + offset));
        }
        remaining = &rest[at + 1..];
        pos += at + 1;
    }

    let host_end = remaining.find(['/', '?']).unwrap_or(remaining.len());
    let hostspec = &remaining[..host_end];
    if !hostspec.is_empty() {
        let (hosts, ports) = split_host_ports(hostspec);
        let hosts: Vec<String> = hosts
            .iter()
            .map(|h| decode(h, pos))
            .collect::<Result<_, _>>()?;
        if hosts.iter().any(String::is_empty) {
            return Err(syntax(pos, "a host name before ':' or ','"));
        }
        entries.push(entry(Key::Host, hosts.join(","), pos));
        if ports.iter().any(Option::is_some) {
            let ports: Vec<String> = ports
                .into_iter()
                .map(|p| p.unwrap_or_else(|| String::from("5432")))
                .collect();
            entries.push(entry(Key::Port, ports.join(","), pos));
        }
    }
    pos += host_end;
    let mut tail = &remaining[host_end..];

    if let Some(path) = tail.strip_prefix('/') {
        let end = path.find('?').unwrap_or(path.len());
        if end > 0 {
            entries.push(entry(Key::DbName, decode(&path[..end], pos + 1)?, pos + 1));
        }
        pos += 1 + end;
        tail = &path[end..];
    }

    let mut unknown = None;
    if let Some(query) = tail.strip_prefix('?') {
        pos += 1;
        let mut after_password = false;
        for param in query.split('&') {
            if !param.is_empty() {
                let Some((k, v)) = param.split_once('=') else {
                    return Err(syntax(pos, "key=value in the query"));
                };
                let word = decode(k, pos)?;
                let value = decode(v, pos + k.len() + 1)?;
                keyword::resolve(
                    &word,
                    value,
                    pos,
                    after_password,
                    &mut entries,
                    &mut unknown,
                );
                after_password = word == "password";
            }
            pos += param.len() + 1;
        }
    }
    refuse_unknown(Form::Url, unknown, &entries)?;
    Ok(entries)
}

fn entry(key: Key, value: String, position: usize) -> Entry {
    Entry::at_byte(key, value, position)
}
