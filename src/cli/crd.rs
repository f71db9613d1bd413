//! The `crd` command.

use std::process::ExitCode;

use boxtable_operator::{crd, report};

use super::output::{self, note};

/// The `crd` command: the BoxTable CustomResourceDefinition printed as YAML.
pub fn execute() -> ExitCode {
    const NAME: &str = "boxtable-operator crd";
    match crd::crd_yaml() {
        Ok(yaml) => output::exit_code(NAME, output::stdout(&yaml), ExitCode::SUCCESS),
        Err(error) => {
            note!("{NAME}: {}", report::chain(&error));
            ExitCode::FAILURE
        }
    }
}
