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
        Some(Command::Run(args)) => run_controller(args),
        None => run_controller(RunArgs::parse_from(["boxtable-operator"])),
    }
}

/// Runs the controller as a task on a multi-thread runtime's workers (as many as the CPUs the
/// process may use, its cgroup's CPU limit included), not on the thread that waits for it: the
/// Kubernetes client's and the database sessions' connections are tasks on those workers too,
/// so a request and its answer stay on the workers instead of waking the waiting thread for every
/// message (under the shipped 500m CPU limit the runtime has one worker, and that ping-pong
/// between two threads was a large part of the CPU per BoxTable; BENCHMARKS.md has the runs).
fn run_controller(args: RunArgs) -> ExitCode {
    block_on(tokio::runtime::Builder::new_multi_thread(), async move {
        match tokio::spawn(cli::run::execute(args)).await {
            Ok(code) => code,
            Err(error) => {
                cli::output::note!(
                    "boxtable-operator: the controller task ended abnormally: {error}"
                );
                ExitCode::FAILURE
            }
        }
    })
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
