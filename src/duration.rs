//! Go-style duration strings in the BoxTable spec (`30s`, `1m30s`, `500ms`, `0s`): the pattern,
//! the CEL rules the API server (and `migrate`) enforce with it, and the parser that agrees.
//!
//! The accepted form is deliberately narrower than Go's `time.ParseDuration`: units `h`, `m`, `s`
//! and `ms`, each at most once, in that order, with whole numbers only. Every string the pattern
//! accepts parses, and every string it refuses is refused by the parser too.
//!
//! The schema checks a duration field with two CEL rules ([`cel_rules`]) instead of an OpenAPI
//! `pattern`, so each mistake gets one message that says what to write, worded the same by
//! kube-apiserver and by `migrate`: a pattern refusal would quote the whole regular expression,
//! and a `duration()` rule evaluated on text it cannot parse would add a "type conversion error".

use std::time::Duration;

/// The duration rule as a regular expression, used in the CRD schema.
///
/// Written without look-ahead so both the API server's RE2 and the `regex` crate read it the same
/// way; the alternation keeps the empty string out without a separate `minLength`, and nine digits
/// per unit keep every accepted value far from overflow.
pub const DURATION_PATTERN: &str = "^([0-9]{1,9}h([0-9]{1,9}m)?([0-9]{1,9}s)?([0-9]{1,9}ms)?|[0-9]{1,9}m([0-9]{1,9}s)?([0-9]{1,9}ms)?|[0-9]{1,9}s([0-9]{1,9}ms)?|[0-9]{1,9}ms)$";

/// Matched after [`DURATION_PATTERN`], before CEL's `duration()` is called: every string that
/// matches both parses in Go's `time.ParseDuration` (kube-apiserver's `duration()`) without
/// overflowing its 2^63 nanoseconds (999999h + 9999999m + 999999999s + 999999999ms is about
/// 5.2e18 ns). A string that matches the first pattern and not this one has at least 1000000
/// hours or 10000000 minutes, far above every maximum.
pub const GO_PARSEABLE_PATTERN: &str =
    "^(0*[0-9]{1,6}h)?(0*[0-9]{1,7}m)?(0*[0-9]{1,9}s)?(0*[0-9]{1,9}ms)?$";

/// The rule message for text that is not a duration (the API server prefixes the field and the
/// value: `spec.lock.timeout: Invalid value: "30 s": must be a duration ...`).
pub const NOT_A_DURATION: &str = "must be a duration of whole numbers with units h, m, s, ms in \
    that order, like 30s, 1m30s or 500ms";

/// The two CEL rules of a duration field whose values may not exceed `max`: the text has the
/// accepted form ([`NOT_A_DURATION`] otherwise), and it is at most `max` (`must be at most 1h`).
/// The second holds for text the first refuses and calls `duration()` only on text that parses,
/// so every mistake draws exactly one message.
pub fn cel_rules(max: Duration) -> serde_json::Value {
    let max = format_duration(max);
    serde_json::json!([
        {
            "rule": format!("self.matches('{DURATION_PATTERN}')"),
            "message": NOT_A_DURATION,
        },
        {
            "rule": format!(
                "!self.matches('{DURATION_PATTERN}') || \
                 (self.matches('{GO_PARSEABLE_PATTERN}') && duration(self) <= duration('{max}'))"
            ),
            "message": format!("must be at most {max}"),
        },
    ])
}

/// The longest advisory-lock wait a spec may ask for.
pub const MAX_LOCK_TIMEOUT: Duration = Duration::from_secs(60 * 60);

/// The longest DDL `lock_timeout` / `statement_timeout` a spec may ask for (PostgreSQL keeps these
/// as 32-bit milliseconds; a day is far below that and far above any sane migration).
pub const MAX_DDL_TIMEOUT: Duration = Duration::from_secs(24 * 60 * 60);

/// Why a duration string was refused. Messages quote the input (escaped) and the accepted form.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    /// The text does not have the accepted shape.
    #[error(
        "duration {shown} is not valid: use whole numbers with units h, m, s, ms in that order, like 30s, 1m30s or 500ms"
    )]
    Malformed {
        /// The input, escaped for display.
        shown: String,
    },
    /// The value is larger than the field allows.
    #[error("duration {shown} is longer than the maximum of {}", format_duration(*max))]
    TooLong {
        /// The input, escaped for display.
        shown: String,
        /// The largest value allowed.
        max: Duration,
    },
}

/// The most digits one unit may have (matches the `{1,9}` in [`DURATION_PATTERN`]).
const MAX_DIGITS: usize = 9;

/// The units in the order they must appear, with their length in milliseconds.
const UNITS: [(&str, u64); 4] = [("h", 3_600_000), ("m", 60_000), ("s", 1_000), ("ms", 1)];

/// Parses a duration in the form [`DURATION_PATTERN`] describes.
///
/// # Errors
/// [`DurationError::Malformed`] when the text does not match the pattern or overflows.
pub fn parse_duration(text: &str) -> Result<Duration, DurationError> {
    let malformed = || DurationError::Malformed {
        shown: format!("{text:?}"),
    };
    let mut rest = text;
    let mut next_unit = 0;
    let mut total_ms: u64 = 0;
    if rest.is_empty() {
        return Err(malformed());
    }
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 || digits > MAX_DIGITS {
            return Err(malformed());
        }
        let (number, after) = rest.split_at(digits);
        let value: u64 = number.parse().map_err(|_| malformed())?;
        // "ms" must be tried before "m": `5ms` is five milliseconds, never five minutes then "s".
        let unit = if after.starts_with("ms") {
            3
        } else if after.starts_with('h') {
            0
        } else if after.starts_with('m') {
            1
        } else if after.starts_with('s') {
            2
        } else {
            return Err(malformed());
        };
        if unit < next_unit {
            return Err(malformed());
        }
        let (suffix, unit_ms) = UNITS[unit];
        let part = value.checked_mul(unit_ms).ok_or_else(malformed)?;
        total_ms = total_ms.checked_add(part).ok_or_else(malformed)?;
        next_unit = unit + 1;
        rest = &after[suffix.len()..];
    }
    Ok(Duration::from_millis(total_ms))
}

/// Parses like [`parse_duration`] and refuses values above `max`.
///
/// # Errors
/// [`DurationError::Malformed`] or [`DurationError::TooLong`].
pub fn parse_duration_at_most(text: &str, max: Duration) -> Result<Duration, DurationError> {
    let value = parse_duration(text)?;
    if value > max {
        return Err(DurationError::TooLong {
            shown: format!("{text:?}"),
            max,
        });
    }
    Ok(value)
}

/// Formats a duration in the same form the parser accepts (`1m30s`, `500ms`, `0s`).
pub fn format_duration(value: Duration) -> String {
    let mut ms = value.as_millis();
    if ms == 0 {
        return "0s".to_owned();
    }
    let mut out = String::new();
    for (suffix, unit_ms) in UNITS {
        let unit_ms = u128::from(unit_ms);
        let count = ms / unit_ms;
        if count > 0 {
            out.push_str(&count.to_string());
            out.push_str(suffix);
            ms %= unit_ms;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn accepted_forms_parse_to_their_values() {
        for (text, want) in [
            ("0s", ms(0)),
            ("30s", ms(30_000)),
            ("1m30s", ms(90_000)),
            ("500ms", ms(500)),
            ("5m", ms(300_000)),
            ("1h", ms(3_600_000)),
            ("1h2m3s4ms", ms(3_723_004)),
            ("2m5ms", ms(120_005)),
            ("0ms", ms(0)),
        ] {
            assert_eq!(parse_duration(text), Ok(want), "{text}");
        }
    }

    #[test]
    fn malformed_forms_are_refused() {
        for text in [
            "",
            "0",
            "30",
            "s",
            "1.5s",
            "-1s",
            "+1s",
            " 30s",
            "30s ",
            "1s1m",
            "1m1m",
            "30 s",
            "1d",
            "1us",
            "1ms1s",
            "1S",
            "1h1h",
            "ms",
            "99999999999999999999s",
            "1234567890s",
        ] {
            assert!(
                matches!(parse_duration(text), Err(DurationError::Malformed { .. })),
                "{text:?} should be refused"
            );
        }
    }

    #[test]
    fn the_parser_agrees_with_the_schema_pattern() {
        let pattern = regex::Regex::new(DURATION_PATTERN).unwrap();
        for text in [
            "0s",
            "30s",
            "1m30s",
            "500ms",
            "1h",
            "1h2m3s4ms",
            "2m5ms",
            "1h5ms",
            "",
            "0",
            "1s1m",
            "1.5s",
            "-1s",
            "1d",
            "5ms",
            "5m5s",
            "1h1h",
            "ms",
            "1ms1s",
            "1h30m",
            "999999999h",
            "1234567890s",
        ] {
            assert_eq!(
                pattern.is_match(text),
                parse_duration(text).is_ok(),
                "pattern and parser disagree on {text:?}"
            );
        }
    }

    #[test]
    fn the_go_parseable_pattern_keeps_go_from_overflowing_and_refuses_only_huge_values() {
        let shape = regex::Regex::new(DURATION_PATTERN).unwrap();
        let parseable = regex::Regex::new(GO_PARSEABLE_PATTERN).unwrap();
        let numbers = [
            None,
            Some("0"),
            Some("1"),
            Some("000000001"),
            Some("999999"),
            Some("1000000"),
            Some("9999999"),
            Some("10000000"),
            Some("999999999"),
        ];
        let go_max_ms = u64::try_from(i64::MAX / 1_000_000).unwrap();
        for h in numbers {
            for m in numbers {
                for s in numbers {
                    for ms in numbers {
                        let text: String = [(h, "h"), (m, "m"), (s, "s"), (ms, "ms")]
                            .iter()
                            .filter_map(|(n, unit)| n.map(|n| format!("{n}{unit}")))
                            .collect();
                        if !shape.is_match(&text) {
                            continue;
                        }
                        let millis = parse_duration(&text).unwrap().as_millis();
                        if parseable.is_match(&text) {
                            assert!(millis < u128::from(go_max_ms), "{text} overflows Go");
                        } else {
                            assert!(millis > 24 * 3_600_000, "{text} is refused as too long");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn each_duration_field_gets_a_shape_rule_and_a_guarded_maximum_rule() {
        let rules = cel_rules(MAX_LOCK_TIMEOUT);
        assert_eq!(rules[0]["message"], NOT_A_DURATION);
        assert_eq!(rules[1]["message"], "must be at most 1h");
        let guarded = rules[1]["rule"].as_str().unwrap();
        assert!(guarded.starts_with(&format!("!self.matches('{DURATION_PATTERN}') || (")));
        assert!(
            guarded.ends_with("duration(self) <= duration('1h'))"),
            "{guarded}"
        );
    }

    #[test]
    fn values_above_the_cap_are_refused_with_the_cap_in_the_message() {
        let err = parse_duration_at_most("61m", MAX_LOCK_TIMEOUT).unwrap_err();
        assert_eq!(
            err.to_string(),
            "duration \"61m\" is longer than the maximum of 1h"
        );
        assert_eq!(
            parse_duration_at_most("1h", MAX_LOCK_TIMEOUT),
            Ok(MAX_LOCK_TIMEOUT)
        );
    }

    #[test]
    fn formatting_round_trips() {
        for text in ["0s", "30s", "1m30s", "500ms", "1h", "1h2m3s4ms"] {
            let parsed = parse_duration(text).unwrap();
            assert_eq!(format_duration(parsed), text);
        }
    }
}
