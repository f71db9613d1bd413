//! Validated PostgreSQL identifiers for box tables: the only way a schema or table name reaches SQL text.
//!
//! Brighter accepts `^[A-Za-z][A-Za-z0-9_]*$`; this module also refuses names longer than 63 bytes
//! (PostgreSQL would truncate them silently, and every later run would then mis-detect the table).
//! Names are lowercased (ASCII) before use, so `Outbox` and `outbox` are the same table, and they are
//! always double-quoted in SQL, so reserved words such as `Order` work.

use std::fmt;

/// PostgreSQL's identifier limit (NAMEDATALEN - 1), in bytes.
pub const MAX_IDENT_BYTES: usize = 63;

/// The identifier rule as a regular expression, shared with the CRD schema.
pub const IDENT_PATTERN: &str = "^[A-Za-z][A-Za-z0-9_]*$";

/// The schema used when none is given.
pub const DEFAULT_SCHEMA: &str = "public";

/// Why a name is not a valid box-table identifier.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdentError {
    /// The name is empty.
    #[error("{what} name is empty")]
    Empty {
        /// Which name (schema or table).
        what: &'static str,
    },
    /// The name is longer than PostgreSQL keeps.
    #[error("{what} name is {len} bytes long; PostgreSQL keeps at most {MAX_IDENT_BYTES}")]
    TooLong {
        /// Which name (schema or table).
        what: &'static str,
        /// Its length in bytes.
        len: usize,
    },
    /// The name has a character outside the allowed set.
    #[error(
        "{what} name {shown} is not allowed: use a letter first, then letters, digits or underscores ({IDENT_PATTERN})"
    )]
    Invalid {
        /// Which name (schema or table).
        what: &'static str,
        /// The offending name, escaped for display.
        shown: String,
    },
}

/// A validated, lowercased PostgreSQL identifier.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Ident(String);

impl Ident {
    /// Validates `raw` as a schema name and lowercases it.
    ///
    /// # Errors
    /// [`IdentError`] when the name is empty, too long or has a disallowed character.
    pub fn schema(raw: &str) -> Result<Self, IdentError> {
        Self::parse("schema", raw)
    }

    /// Validates `raw` as a table name and lowercases it.
    ///
    /// # Errors
    /// [`IdentError`] when the name is empty, too long or has a disallowed character.
    pub fn table(raw: &str) -> Result<Self, IdentError> {
        Self::parse("table", raw)
    }

    /// Validates `raw` (named `what` in errors) and lowercases it.
    ///
    /// # Errors
    /// [`IdentError`] when the name is empty, too long or has a disallowed character.
    pub fn parse(what: &'static str, raw: &str) -> Result<Self, IdentError> {
        if raw.is_empty() {
            return Err(IdentError::Empty { what });
        }
        let mut chars = raw.chars();
        let first_ok = chars.next().is_some_and(|c| c.is_ascii_alphabetic());
        let rest_ok = chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !first_ok || !rest_ok {
            return Err(IdentError::Invalid {
                what,
                shown: format!("{raw:?}"),
            });
        }
        if raw.len() > MAX_IDENT_BYTES {
            return Err(IdentError::TooLong {
                what,
                len: raw.len(),
            });
        }
        Ok(Self(raw.to_ascii_lowercase()))
    }

    /// The lowercased name, unquoted (for bound parameters and history rows).
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The name double-quoted for SQL text. Validation guarantees it holds no quote character.
    pub fn quoted(&self) -> String {
        format!("\"{}\"", self.0)
    }
}

impl fmt::Display for Ident {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A schema-qualified table name, both parts validated and lowercased.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct QualifiedName {
    /// The schema (defaults to `public`).
    pub schema: Ident,
    /// The table.
    pub table: Ident,
}

impl QualifiedName {
    /// Validates both parts; `schema` of `None` means `public`.
    ///
    /// # Errors
    /// [`IdentError`] for the first part that is not a valid identifier.
    pub fn parse(schema: Option<&str>, table: &str) -> Result<Self, IdentError> {
        Ok(Self {
            schema: Ident::schema(schema.unwrap_or(DEFAULT_SCHEMA))?,
            table: Ident::table(table)?,
        })
    }

    /// `"schema"."table"` for SQL text.
    pub fn quoted(&self) -> String {
        format!("{}.{}", self.schema.quoted(), self.table.quoted())
    }
}

impl fmt::Display for QualifiedName {
    /// `schema.table`, unquoted and lowercased, as shown in status.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.schema, self.table)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_lowercased_and_quoted() {
        let name = QualifiedName::parse(Some("Sales"), "Order").unwrap();
        assert_eq!(name.to_string(), "sales.order");
        assert_eq!(name.quoted(), "\"sales\".\"order\"");
    }

    #[test]
    fn schema_defaults_to_public() {
        let name = QualifiedName::parse(None, "outbox").unwrap();
        assert_eq!(name.schema.as_str(), "public");
    }

    #[test]
    fn mixed_case_names_are_one_table() {
        assert_eq!(
            Ident::table("Outbox").unwrap(),
            Ident::table("outbox").unwrap()
        );
    }

    #[test]
    fn sixty_three_bytes_pass_and_sixty_four_fail() {
        let ok = format!("a{}", "b".repeat(62));
        assert!(Ident::table(&ok).is_ok());
        let long = format!("a{}", "b".repeat(63));
        assert_eq!(
            Ident::table(&long),
            Err(IdentError::TooLong {
                what: "table",
                len: 64
            })
        );
    }

    #[test]
    fn disallowed_names_are_refused_with_the_rule_in_the_message() {
        for bad in [
            "", "1abc", "_abc", "a-b", "a b", "a\"b", "a;drop", "ä", "a\0b", "a.b",
        ] {
            let err = Ident::table(bad).unwrap_err();
            if !bad.is_empty() {
                assert!(err.to_string().contains(IDENT_PATTERN), "{err}");
            }
        }
    }
}
