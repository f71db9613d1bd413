//! The Npgsql form Brighter applications use:
//! `Host=db;Port=5432;Database=shop;Username=app;Password="p;w";SSL Mode=Require`.
//!
//! Keys are case-insensitive and ignore spaces (`SSL Mode` = `SslMode`); values may be quoted with
//! `"` or `'`, a doubled quote standing for itself. A key Npgsql does not define is refused as
//! Npgsql refuses it (`keyword not supported: 'passwrd'`); see the parent module.

use super::entry::{Entry, Key, Unknown, refuse_unknown, split_host_ports};
use super::{ConnStrError, Form};

/// Maps a normalised key (lowercase, no spaces) to its setting: `Some(Some(key))` read (honoured,
/// or refused when it cannot be honoured), `Some(None)` known and ignored (it changes nothing
/// about security), `None` unknown. The known keys are every key Npgsql 6 to 10
/// accepts (display names, property names and synonyms, obsolete ones included), and `User` and
/// `Connection Timeout`, which the operator has always read as `Username` and `Timeout`.
///
/// Longer than most: one arm per key Npgsql defines, a table better read whole.
fn npgsql_key(norm: &str) -> Option<Option<Key>> {
    let key = match norm {
        "host" | "server" => Key::Host,
        "port" => Key::Port,
        "database" | "db" => Key::DbName,
        "username" | "user" | "userid" | "uid" => Key::User,
        "password" | "pwd" | "psw" => Key::Password,
        "sslmode" => Key::SslMode,
        "trustservercertificate" => Key::TrustServerCertificate,
        "rootcertificate" => Key::SslRootCert,
        "sslcertificate" | "clientcertificate" => Key::SslCert,
        "sslkey" | "clientcertificatekey" => Key::SslKeyFile,
        "sslpassword" => Key::SslPassword,
        "checkcertificaterevocation" => Key::CheckCertificateRevocation,
        "channelbinding" => Key::ChannelBinding,
        "requireauth" => Key::RequireAuth,
        "gssencryptionmode" => Key::GssEncMode,
        "timeout" | "connecttimeout" | "connectiontimeout" => Key::ConnectTimeout,
        "applicationname" => Key::ApplicationName,
        "options" => Key::Options,
        "targetsessionattributes" => Key::TargetSession,
        "includeerrordetail"
        | "includeerrordetails"
        | "pooling"
        | "minimumpoolsize"
        | "minpoolsize"
        | "maximumpoolsize"
        | "maxpoolsize"
        | "connectionidlelifetime"
        | "connectionpruninginterval"
        | "connectionlifetime"
        | "commandtimeout"
        | "internalcommandtimeout"
        | "cancellationtimeout"
        | "enlist"
        | "multiplexing"
        | "keepalive"
        | "tcpkeepalive"
        | "tcpkeepalivetime"
        | "tcpkeepaliveinterval"
        | "searchpath"
        | "encoding"
        | "clientencoding"
        | "timezone"
        | "noresetonclose"
        | "maxautoprepare"
        | "autopreparemintimes"
        | "readbuffersize"
        | "writebuffersize"
        | "loadbalancehosts"
        | "hostrecheckseconds"
        | "servercompatibilitymode"
        | "persistsecurityinfo"
        | "kerberosservicename"
        | "krbsrvname"
        | "includefailedbatchedcommand"
        | "loadbalancetimeout"
        | "socketreceivebuffersize"
        | "socketsendbuffersize"
        | "autoprepareminusages"
        | "replicationmode"
        | "loadtablecomposites"
        | "writecoalescingbufferthresholdbytes"
        | "integratedsecurity"
        | "efadmindatabase"
        | "eftemplatedatabase"
        | "entityadmindatabase"
        | "entitytemplatedatabase"
        | "backendtimeouts"
        | "continuousprocessing"
        | "convertinfinitydatetime"
        | "preloadreader"
        | "useextendedtypes"
        | "useperfcounters"
        | "usesslstream"
        | "includerealm"
        | "logparameters"
        | "arraynullabilitymode"
        | "passfile"
        | "sslnegotiation" => return Some(None),
        _ => return None,
    };
    Some(Some(key))
}

/// Splits an Npgsql connection string into its entries, refusing a key Npgsql does not define.
///
/// Longer than most: one scanner over the text (keys, `=`, quoted and bare values); its states
/// share the position and the entry being read.
pub(super) fn parse(input: &str) -> Result<Vec<Entry>, ConnStrError> {
    let syntax = |position, expected| ConnStrError::Syntax {
        form: Form::Npgsql,
        position,
        expected,
    };
    let chars: Vec<(usize, char)> = input.char_indices().collect();
    let at = |i: usize| chars.get(i).map(|&(p, _)| p).unwrap_or(input.len());
    let is_space = |i: usize| chars.get(i).is_some_and(|(_, c)| c.is_whitespace());
    let mut entries = Vec::new();
    let mut unknown = None;
    let mut after_bare_password = false;
    let mut i = 0;
    while i < chars.len() {
        while is_space(i) || chars.get(i).is_some_and(|&(_, c)| c == ';') {
            i += 1;
        }
        if i >= chars.len() {
            break;
        }
        let key_start = i;
        while chars.get(i).is_some_and(|&(_, c)| c != '=' && c != ';') {
            i += 1;
        }
        if chars.get(i).map(|&(_, c)| c) != Some('=') {
            return Err(syntax(at(key_start), "key=value"));
        }
        let written: String = chars[key_start..i].iter().map(|&(_, c)| c).collect();
        let norm: String = written
            .chars()
            .filter(|c| !c.is_whitespace())
            .collect::<String>()
            .to_ascii_lowercase();
        if norm.is_empty() {
            return Err(syntax(at(key_start), "a key before '='"));
        }
        i += 1;
        while is_space(i) {
            i += 1;
        }
        let mut value = String::new();
        let quoted = matches!(chars.get(i).map(|&(_, c)| c), Some('"' | '\''));
        match chars.get(i).map(|&(_, c)| c) {
            Some(q @ ('"' | '\'')) => {
                let open = i;
                i += 1;
                loop {
                    match chars.get(i).map(|&(_, c)| c) {
                        None => {
                            return Err(syntax(
                                at(open),
                                "a closing quote for the value starting here",
                            ));
                        }
                        Some(c) if c == q && chars.get(i + 1).map(|&(_, c)| c) == Some(q) => {
                            value.push(q);
                            i += 2;
                        }
                        Some(c) if c == q => {
                            i += 1;
                            break;
                        }
                        Some(c) => {
                            value.push(c);
                            i += 1;
                        }
                    }
                }
                while is_space(i) {
                    i += 1;
                }
                if chars.get(i).is_some_and(|&(_, c)| c != ';') {
                    return Err(syntax(at(i), "';' after a quoted value"));
                }
            }
            _ => {
                while let Some(&(_, c)) = chars.get(i) {
                    if c == ';' {
                        break;
                    }
                    value.push(c);
                    i += 1;
                }
                value.truncate(value.trim_end().len());
            }
        }
        let position = at(key_start);
        let key = npgsql_key(&norm);
        match key {
            Some(Some(key)) => entries.push(Entry::at_byte(key, value, position)),
            Some(None) => {
                tracing::trace!(position, "ignoring an npgsql key the operator does not use")
            }
            None => {
                unknown.get_or_insert(Unknown {
                    text: written.trim().to_lowercase(),
                    position,
                    after_bare_password,
                });
            }
        }
        after_bare_password = key == Some(Some(Key::Password)) && !quoted;
    }
    refuse_unknown(Form::Npgsql, unknown, &entries)?;
    Ok(with_host_ports(entries))
}

/// Npgsql allows `Host=a:5433,b`; a port on a host wins over `Port`, which applies to the rest.
fn with_host_ports(mut entries: Vec<Entry>) -> Vec<Entry> {
    let Some(host_idx) = entries.iter().rposition(|e| e.key == Key::Host) else {
        return entries;
    };
    let (hosts, ports) = split_host_ports(&entries[host_idx].value);
    if ports.iter().all(Option::is_none) {
        return entries;
    }
    let default_port = entries
        .iter()
        .rev()
        .find(|e| e.key == Key::Port)
        .map_or_else(|| String::from("5432"), |e| e.value.clone());
    let at = entries[host_idx].at.clone();
    entries.retain(|e| e.key != Key::Port);
    let ports: Vec<String> = ports
        .into_iter()
        .map(|p| p.unwrap_or_else(|| default_port.clone()))
        .collect();
    if let Some(host) = entries.iter_mut().rfind(|e| e.key == Key::Host) {
        host.value = hosts.join(",");
    }
    entries.push(Entry {
        key: Key::Port,
        value: ports.join(","),
        at,
    });
    entries
}
