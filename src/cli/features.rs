//! The optional parts of this binary (cargo features, see Cargo.toml's `[features]`) and the
//! refusal, at start, of a command or flag whose part was left out of the build.

use std::fmt;

use super::args::Command;

/// The cargo features a command line can need.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Features {
    /// `manifests`: `migrate` and `plan` read BoxTable manifests and judge them against the CRD.
    pub manifests: bool,
    /// `otlp`: `run --otlp-endpoint` exports traces.
    pub otlp: bool,
}

impl Features {
    /// The features this binary was built with.
    pub const BUILT: Features = Features {
        manifests: cfg!(feature = "manifests"),
        otlp: cfg!(feature = "otlp"),
    };

    /// The feature `command` needs and this binary lacks, if any.
    pub fn missing(self, command: Option<&Command>) -> Option<Missing> {
        match command {
            Some(Command::Migrate(_)) if !self.manifests => Some(Missing {
                feature: "manifests",
                needed_by: "the migrate command (BoxTable manifests read and judged against the CRD)",
            }),
            Some(Command::Plan(_)) if !self.manifests => Some(Missing {
                feature: "manifests",
                needed_by: "the plan command (BoxTable manifests read and judged against the CRD)",
            }),
            Some(Command::Run(args)) if args.otlp_endpoint.is_some() && !self.otlp => {
                Some(Missing {
                    feature: "otlp",
                    needed_by: "--otlp-endpoint",
                })
            }
            _ => None,
        }
    }
}

/// A command or flag that needs a feature this binary was built without.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Missing {
    /// The cargo feature.
    pub feature: &'static str,
    /// What asked for it.
    pub needed_by: &'static str,
}

impl fmt::Display for Missing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "boxtable-operator: {} needs the cargo feature `{}`, and this binary was built without it; build it with `cargo build --release --features {}` (the shipped image has every feature)",
            self.needed_by, self.feature, self.feature
        )
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::cli::args::Cli;

    fn missing(features: Features, line: &[&str]) -> Option<String> {
        let cli = Cli::try_parse_from(line).unwrap();
        features
            .missing(cli.command.as_ref())
            .map(|m| m.to_string())
    }

    const NONE: Features = Features {
        manifests: false,
        otlp: false,
    };
    const ALL: Features = Features {
        manifests: true,
        otlp: true,
    };

    #[test]
    fn without_manifests_migrate_and_plan_are_refused_naming_the_feature() {
        for command in ["migrate", "plan"] {
            let message = missing(NONE, &["boxtable-operator", command, "-f", "x.yaml"]).unwrap();
            assert!(
                message.contains(&format!("the {command} command"))
                    && message.contains("cargo feature `manifests`")
                    && message.contains("--features manifests"),
                "{message}"
            );
        }
    }

    #[test]
    fn without_otlp_an_otlp_endpoint_is_refused_naming_the_feature() {
        let message = missing(
            NONE,
            &[
                "boxtable-operator",
                "run",
                "--otlp-endpoint",
                "http://c:4318",
            ],
        )
        .unwrap();
        assert!(
            message.contains("--otlp-endpoint needs the cargo feature `otlp`")
                && message.contains("--features otlp"),
            "{message}"
        );
    }

    #[test]
    fn what_needs_no_absent_feature_runs() {
        for line in [
            &["boxtable-operator", "run"][..],
            &["boxtable-operator"],
            &["boxtable-operator", "crd"],
            &["boxtable-operator", "key", "--table", "outbox"],
        ] {
            assert_eq!(missing(NONE, line), None, "{line:?}");
        }
        for line in [
            &["boxtable-operator", "migrate", "-f", "x.yaml"][..],
            &[
                "boxtable-operator",
                "run",
                "--otlp-endpoint",
                "http://c:4318",
            ],
        ] {
            assert_eq!(missing(ALL, line), None, "{line:?}");
        }
    }
}
