//! The three connection string [`Form`]s and how a string's form is detected.

use std::fmt;

use super::keyword;

/// The three connection string forms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Form {
    /// `postgres://user:password@host:port/db?sslmode=...`
    Url,
    /// `host=... port=... dbname=...`
    Keyword,
    /// `Host=...;Port=...;Database=...`
    Npgsql,
}

impl fmt::Display for Form {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Form::Url => "url",
            Form::Keyword => "libpq",
            Form::Npgsql => "npgsql",
        })
    }
}

/// URL when it starts with `scheme://`; Npgsql when it has a `;` or its first key is not a
/// libpq keyword; libpq keywords otherwise.
pub(super) fn detect(input: &str) -> Form {
    let trimmed = input.trim_start();
    if let Some((scheme, _)) = trimmed.split_once("://") {
        let mut chars = scheme.chars();
        let first_alpha = chars.next().is_some_and(|c| c.is_ascii_alphabetic());
        if first_alpha && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.')) {
            return Form::Url;
        }
    }
    let first_key = trimmed.split('=').next().unwrap_or("").trim();
    if keyword::is_libpq_keyword(first_key) && !keyword::has_unquoted_semicolon(trimmed) {
        Form::Keyword
    } else {
        Form::Npgsql
    }
}
