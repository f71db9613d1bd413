//! The libpq keyword form: `host=db port=5432 dbname=shop user=app password='it''s'`.
//!
//! Values may be single-quoted; inside or outside quotes a backslash escapes the next character.

use super::entry::{Entry, Key, Unknown, refuse_unknown};
use super::{ConnStrError, Form};

/// Maps a libpq keyword (as libpq spells it, lowercase) to the setting it carries:
/// `Some(Some(key))` for keywords the operator reads (honoured, or refused when it cannot honour
/// them), `Some(None)` for keywords it accepts and ignores because they change nothing about
/// security (pool, keepalive, GSSAPI details, ...), `None` for words libpq does not know.
pub(super) fn libpq_key(word: &str) -> Option<Option<Key>> {
    let key = match word {
        "host" => Key::Host,
        "hostaddr" => Key::HostAddr,
        "port" => Key::Port,
        "dbname" => Key::DbName,
        "user" => Key::User,
        "password" => Key::Password,
        "sslmode" => Key::SslMode,
        "connect_timeout" => Key::ConnectTimeout,
        "application_name" => Key::ApplicationName,
        "options" => Key::Options,
        "target_session_attrs" => Key::TargetSession,
        "sslrootcert" => Key::SslRootCert,
        "sslcert" => Key::SslCert,
        "sslkey" => Key::SslKeyFile,
        "sslpassword" => Key::SslPassword,
        "sslcertmode" => Key::SslCertMode,
        "ssl_min_protocol_version" => Key::SslMinProtocolVersion,
        "ssl_max_protocol_version" => Key::SslMaxProtocolVersion,
        "sslsni" => Key::SslSni,
        "sslcrl" => Key::SslCrl,
        "sslcrldir" => Key::SslCrlDir,
        "channel_binding" => Key::ChannelBinding,
        "require_auth" => Key::RequireAuth,
        "requirepeer" => Key::RequirePeer,
        "gssencmode" => Key::GssEncMode,
        "passfile"
        | "client_encoding"
        | "fallback_application_name"
        | "keepalives"
        | "keepalives_idle"
        | "keepalives_interval"
        | "keepalives_count"
        | "tcp_user_timeout"
        | "replication"
        | "sslnegotiation"
        | "sslcompression"
        | "krbsrvname"
        | "gsslib"
        | "gssdelegation"
        | "service"
        | "load_balance_hosts" => {
            return Some(None);
        }
        _ => return None,
    };
    Some(Some(key))
}

/// Whether `word` is a libpq keyword (used to tell this form from Npgsql's).
pub(super) fn is_libpq_keyword(word: &str) -> bool {
    libpq_key(word).is_some()
}

/// Whether `input` has a `;` outside libpq quoting (then it is an Npgsql string with lowercase keys).
pub(super) fn has_unquoted_semicolon(input: &str) -> bool {
    let mut quoted = false;
    let mut chars = input.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                chars.next();
            }
            '\'' => quoted = !quoted,
            ';' if !quoted => return true,
            _ => {}
        }
    }
    false
}

/// Resolves a keyword found at `position`: an entry for a keyword the operator uses, nothing for
/// one it ignores, and the first keyword libpq does not know kept in `unknown` (refused once the
/// whole string is read, as libpq refuses it). `after_bare_password`: the keyword follows a
/// password whose value was not quoted.
pub(super) fn resolve(
    word: &str,
    value: String,
    position: usize,
    after_bare_password: bool,
    out: &mut Vec<Entry>,
    unknown: &mut Option<Unknown>,
) {
    match libpq_key(word) {
        Some(Some(key)) => out.push(Entry::at_byte(key, value, position)),
        Some(None) => tracing::debug!(
            position,
            "ignoring a libpq keyword the operator does not use"
        ),
        None => {
            unknown.get_or_insert(Unknown {
                text: word.to_owned(),
                position,
                after_bare_password,
            });
        }
    }
}

/// Splits a libpq keyword/value connection string into its entries, refusing an unknown keyword.
///
/// Longer than most: one scanner over the text (keywords, `=`, quoted and bare values); its states
/// share the position and the entry being read.
pub(super) fn parse(input: &str) -> Result<Vec<Entry>, ConnStrError> {
    let syntax = |position, expected| ConnStrError::Syntax {
        form: Form::Keyword,
        position,
        expected,
    };
    let bytes: Vec<(usize, char)> = input.char_indices().collect();
    let at = |i: usize| bytes.get(i).map(|&(p, _)| p).unwrap_or(input.len());
    let mut entries = Vec::new();
    let mut unknown = None;
    let mut after_bare_password = false;
    let mut i = 0;
    loop {
        while bytes.get(i).is_some_and(|(_, c)| c.is_whitespace()) {
            i += 1;
        }
        if i >= bytes.len() {
            break;
        }
        let key_start = i;
        while bytes
            .get(i)
            .is_some_and(|&(_, c)| c != '=' && !c.is_whitespace())
        {
            i += 1;
        }
        if i == key_start {
            return Err(syntax(at(i), "a keyword before '='"));
        }
        let word: String = bytes[key_start..i].iter().map(|&(_, c)| c).collect();
        while bytes.get(i).is_some_and(|(_, c)| c.is_whitespace()) {
            i += 1;
        }
        if bytes.get(i).map(|&(_, c)| c) != Some('=') {
            return Err(syntax(at(i), "'=' after a keyword"));
        }
        i += 1;
        while bytes.get(i).is_some_and(|(_, c)| c.is_whitespace()) {
            i += 1;
        }
        let mut value = String::new();
        let quoted = bytes.get(i).map(|&(_, c)| c) == Some('\'');
        if quoted {
            let open = i;
            i += 1;
            loop {
                match bytes.get(i).map(|&(_, c)| c) {
                    None => {
                        return Err(syntax(
                            at(open),
                            "a closing quote for the value starting here",
                        ));
                    }
                    Some('\'') => {
                        i += 1;
                        break;
                    }
                    Some('\\') => {
                        let Some(&(_, c)) = bytes.get(i + 1) else {
                            return Err(syntax(at(i), "a character after '\\'"));
                        };
                        value.push(c);
                        i += 2;
                    }
                    Some(c) => {
                        value.push(c);
                        i += 1;
                    }
                }
            }
            if bytes.get(i).is_some_and(|(_, c)| !c.is_whitespace()) {
                return Err(syntax(at(i), "whitespace after a quoted value"));
            }
        } else {
            while let Some(&(_, c)) = bytes.get(i) {
                if c.is_whitespace() {
                    break;
                }
                if c == '\\' {
                    let Some(&(_, next)) = bytes.get(i + 1) else {
                        return Err(syntax(at(i), "a character after '\\'"));
                    };
                    value.push(next);
                    i += 2;
                } else {
                    value.push(c);
                    i += 1;
                }
            }
        }
        resolve(
            &word,
            value,
            at(key_start),
            after_bare_password,
            &mut entries,
            &mut unknown,
        );
        after_bare_password = word == "password" && !quoted;
    }
    refuse_unknown(Form::Keyword, unknown, &entries)?;
    Ok(entries)
}
