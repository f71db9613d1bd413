//! Which PostgreSQL servers the operator supports: 13 and newer, decided from the
//! `server_version_num` a session reads when it opens (pure).

use super::RunError;
use crate::ident::QualifiedName;

/// The oldest supported PostgreSQL major. Every major from here to 18 is tested
/// (`scripts/pg-matrix.sh`).
pub const MINIMUM_MAJOR: u32 = 13;

/// `server_version_num` as people write it: `170002` is `17.2`, `90624` is `9.6.24`.
pub fn version_text(server_version_num: i32) -> String {
    let n = server_version_num;
    if n >= 100_000 {
        format!("{}.{}", n / 10_000, n % 10_000)
    } else {
        format!("{}.{}.{}", n / 10_000, n / 100 % 100, n % 100)
    }
}

/// Refuses a server older than [`MINIMUM_MAJOR`]. A version of 0 (not read) is let through.
///
/// # Errors
/// [`RunError::UnsupportedPostgres`] naming the server's version and the minimum.
pub fn check_supported(server_version_num: i32, table: &QualifiedName) -> Result<(), RunError> {
    let minimum = i32::try_from(MINIMUM_MAJOR * 10_000).unwrap_or(i32::MAX);
    if server_version_num <= 0 || server_version_num >= minimum {
        return Ok(());
    }
    Err(RunError::UnsupportedPostgres {
        table: table.to_string(),
        version: version_text(server_version_num),
        minimum: MINIMUM_MAJOR,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> QualifiedName {
        QualifiedName::parse(None, "outbox").unwrap()
    }

    #[test]
    fn versions_read_as_people_write_them() {
        assert_eq!(version_text(170_002), "17.2");
        assert_eq!(version_text(130_023), "13.23");
        assert_eq!(version_text(120_019), "12.19");
        assert_eq!(version_text(90_624), "9.6.24");
    }

    #[test]
    fn thirteen_and_newer_are_supported() {
        for n in [130_000, 130_023, 150_018, 180_004] {
            check_supported(n, &table()).unwrap();
        }
    }

    #[test]
    fn twelve_is_refused_naming_its_version_and_the_minimum() {
        let err = check_supported(120_019, &table()).unwrap_err();
        assert_eq!(err.reason(), crate::reason::Reason::UnsupportedPostgres);
        let text = err.to_string();
        assert!(
            text.contains("PostgreSQL 12.19") && text.contains("PostgreSQL 13 or newer"),
            "{text}"
        );
    }
}
