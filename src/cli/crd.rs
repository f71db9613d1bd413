//! The `crd` command.

use std::process::ExitCode;

use boxtable_operator::{crd, report};

/// The `crd` command: the BoxTable CustomResourceDefinition printed as YAML.
pub fn execute() -> ExitCode {
    match crd::crd_yaml() {
        Ok(yaml) => {
            print!("{yaml}");
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("boxtable-operator crd: {}", report::chain(&error));
            ExitCode::FAILURE
        }
    }
}
