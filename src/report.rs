//! Rendering text for status messages, events and logs: an error and its sources as one line,
//! and text cut to a byte limit at a character boundary.

use std::error::Error;

/// Joins an error and all its sources with `": "`, skipping a source whose text is already
/// contained in the previous one. A PostgreSQL server error is shown with its message, detail,
/// hint and SQLSTATE instead of tokio-postgres's bare "db error".
pub fn chain(error: &(dyn Error + 'static)) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut current: Option<&(dyn Error + 'static)> = Some(error);
    while let Some(err) = current {
        let text = describe_one(err);
        if !text.is_empty() && !parts.last().is_some_and(|last| last.contains(&text)) {
            parts.push(text);
        }
        current = err.source();
    }
    parts.join(": ")
}

fn describe_one(err: &(dyn Error + 'static)) -> String {
    if let Some(pg) = err.downcast_ref::<tokio_postgres::Error>() {
        if let Some(db) = pg.as_db_error() {
            let mut text = format!("{} (SQLSTATE {})", db.message(), db.code().code());
            if let Some(detail) = db.detail() {
                text.push_str(&format!("; detail: {detail}"));
            }
            if let Some(hint) = db.hint() {
                text.push_str(&format!("; hint: {hint}"));
            }
            return text;
        }
        if pg.is_closed() {
            return "the connection to PostgreSQL is closed".to_owned();
        }
    }
    if err
        .downcast_ref::<tokio_postgres::error::DbError>()
        .is_some()
    {
        // Already rendered by the wrapping tokio_postgres::Error.
        return String::new();
    }
    err.to_string()
}

/// The longest prefix of `text` that fits in `max` bytes, cut at a character boundary.
pub fn prefix(text: &str, max: usize) -> &str {
    let mut end = text.len().min(max);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// `text` itself when it fits in `max` bytes, else its longest prefix that fits with `...`
/// appended (cut at a character boundary).
pub fn truncate(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    format!("{}...", prefix(text, max.saturating_sub(3)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("outer step failed")]
    struct Outer(#[source] std::io::Error);

    #[test]
    fn chain_joins_each_source_once() {
        let err = Outer(std::io::Error::other("disk on fire"));
        assert_eq!(chain(&err), "outer step failed: disk on fire");
    }

    #[test]
    fn truncate_keeps_text_that_fits_and_cuts_longer_text_to_the_limit_with_an_ellipsis() {
        assert_eq!(truncate("short", 5), "short");
        assert_eq!(truncate("longer", 5), "lo...");
        let cut = truncate(&"é".repeat(10), 10);
        assert_eq!(cut, "ééé...");
        assert!(cut.len() <= 10);
    }
}
