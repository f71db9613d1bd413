//! The `boxtable-operator` binary: parses the command line, runs the command on its runtime and
//! exits with its code. The commands live in [`cli`]; they print only through [`cli::output`].

#![deny(clippy::print_stdout, clippy::print_stderr)]

use std::process::ExitCode;

use clap::Parser;

use cli::args::{Cli, Command, RunArgs};

mod cli;

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(error) => {
            // Help and version are not errors; a usage error exits 1, never 2, which `plan`
            // reserves for "changes pending".
            let _ = error.print();
            return if error.use_stderr() {
                ExitCode::FAILURE
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    if let Some(missing) = cli::features::Features::BUILT.missing(cli.command.as_ref()) {
        cli::output::note!("{missing}");
        return ExitCode::FAILURE;
    }
    match cli.command {
        Some(Command::Key(args)) => cli::key::execute(&args),
        Some(Command::Crd) => cli::crd::execute(),
        #[cfg(feature = "manifests")]
        Some(Command::Migrate(args)) => block_on(
            tokio::runtime::Builder::new_current_thread(),
            cli::migrate::execute(args),
        ),
        #[cfg(feature = "manifests")]
        Some(Command::Plan(mut args)) => {
            args.dry_run = true;
            block_on(
                tokio::runtime::Builder::new_current_thread(),
                cli::migrate::execute(args),
            )
        }
        // Refused above, naming the feature.
        #[cfg(not(feature = "manifests"))]
        Some(Command::Migrate(_) | Command::Plan(_)) => ExitCode::FAILURE,
        Some(Command::Run(args)) => block_on(
            tokio::runtime::Builder::new_multi_thread(),
            cli::run::execute(args),
        ),
        None => block_on(
            tokio::runtime::Builder::new_multi_thread(),
            cli::run::execute(RunArgs::parse_from(["boxtable-operator"])),
        ),
    }
}

/// Runs `work` on a runtime from `builder`; the controller uses several threads, while the
/// one-shot `migrate` command does a few sessions' worth of I/O and answers each round trip
/// sooner on one thread.
fn block_on(
    mut builder: tokio::runtime::Builder,
    work: impl std::future::Future<Output = ExitCode>,
) -> ExitCode {
    match builder.enable_all().build() {
        Ok(runtime) => runtime.block_on(work),
        Err(error) => {
            cli::output::note!("boxtable-operator: cannot start the async runtime: {error}");
            ExitCode::FAILURE
        }
    }
}
