//! Bounded property tests (proptest, fixed case counts) of identifier validation and of
//! connection-string parsing with arbitrary Unicode and control characters. `tests/suite/connections/connection_strings.rs`
//! already covers printable junk and single-character damage; this adds whole-string noise,
//! NUL and non-ASCII text around a password, in all three forms.

use boxtable_operator::db::ConnectionSettings;
use boxtable_operator::ident::{IDENT_PATTERN, Ident, MAX_IDENT_BYTES, QualifiedName};
use proptest::prelude::*;

fn accepted_by_contract(raw: &str) -> bool {
    regex::Regex::new(IDENT_PATTERN).unwrap().is_match(raw) && raw.len() <= MAX_IDENT_BYTES
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2048, ..ProptestConfig::default() })]

    #[test]
    fn identifiers_are_accepted_exactly_when_they_match_the_pattern_and_fit_63_bytes(
        raw in prop_oneof![
            "\\PC{0,80}",
            "[A-Za-z][A-Za-z0-9_]{0,70}",
            "[A-Za-z0-9_\"'; .\\-\u{0}é]{0,70}",
        ]
    ) {
        let result = Ident::table(&raw);
        prop_assert_eq!(result.is_ok(), accepted_by_contract(&raw), "{:?}", raw);
        if let Ok(ident) = result {
            let quoted = ident.quoted();
            prop_assert_eq!(quoted.matches('"').count(), 2);
            prop_assert!(quoted.starts_with('"') && quoted.ends_with('"'));
            prop_assert_eq!(ident.as_str(), raw.to_ascii_lowercase());
            let qualified = QualifiedName::parse(Some(&raw), &raw).unwrap().quoted();
            prop_assert_eq!(qualified.matches('"').count(), 4);
        }
    }

    #[test]
    fn connection_strings_with_arbitrary_noise_never_panic_or_echo_the_password(
        pw in "Pw[A-Za-z0-9]{12,20}",
        form in 0..3usize,
        before in "[\\PC\u{0}\t\n]{0,12}",
        after in "[\\PC\u{0}\t\n]{0,12}",
    ) {
        let input = match form {
            0 => format!("{before}postgres://app:{pw}@db/shop{after}"),
            1 => format!("{before}host=db password={pw}{after}"),
            _ => format!("{before}Host=db;Password={pw}{after}"),
        };
        let result = ConnectionSettings::parse(&input);
        let shown = match &result {
            Ok(s) => format!("{s} {s:?} {}", s.redacted()),
            Err(e) => format!("{e} {e:?}"),
        };
        let elsewhere = result.as_ref().is_ok_and(|s| {
            format!("{:?} {:?} {} {:?} {:?}", s.hosts(), s.dbname(), s.user(), s.application_name(), s.options())
                .contains(&pw)
        });
        prop_assert!(elsewhere || !shown.contains(&pw), "{:?} showed {:?}", input, shown);
    }
}
