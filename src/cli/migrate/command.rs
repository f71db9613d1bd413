//! The `migrate` and `plan` commands' body: where the database comes from, the manifests, the
//! output format and the exit code.

use std::process::ExitCode;

use boxtable_operator::{manifests, report};
use tokio_util::sync::CancellationToken;

use crate::cli::args::{MigrateArgs, OutputArg};
use crate::cli::{cancel_on_signal, init_logging};

/// The environment variable `--database-url-from-env` reads.
const DATABASE_URL_ENV: &str = "DATABASE_URL";

/// The `migrate` command (and `plan`, which is `migrate --dry-run`): the manifests read and
/// checked, every table run or planned, the results printed; the exit code is the worst verdict's.
pub async fn execute(args: MigrateArgs) -> ExitCode {
    const NAME: &str = "boxtable-operator migrate";
    if !init_logging(args.log_format) {
        return ExitCode::FAILURE;
    }
    let env_url = std::env::var(DATABASE_URL_ENV).ok();
    let database_url = if args.database_url_from_env {
        let Some(url) = env_url else {
            eprintln!(
                "{NAME}: --database-url-from-env was given but {DATABASE_URL_ENV} is not set"
            );
            return ExitCode::FAILURE;
        };
        eprintln!(
            "{NAME}: every table uses the database in {DATABASE_URL_ENV} (--database-url-from-env)"
        );
        Some(url)
    } else {
        if env_url.is_some() {
            eprintln!(
                "{NAME}: {DATABASE_URL_ENV} is set in the environment and ignored; pass --database-url-from-env to use it"
            );
        }
        match &args.database_url_file {
            Some(path) => match std::fs::read(path) {
                Ok(bytes) => match String::from_utf8(bytes) {
                    Ok(text) if !text.trim().is_empty() => Some(text.trim_end().to_owned()),
                    Ok(_) => {
                        eprintln!("{NAME}: --database-url-file {} is empty", path.display());
                        return ExitCode::FAILURE;
                    }
                    Err(_) => {
                        eprintln!(
                            "{NAME}: --database-url-file {} is not UTF-8 text",
                            path.display()
                        );
                        return ExitCode::FAILURE;
                    }
                },
                Err(error) => {
                    eprintln!(
                        "{NAME}: reading --database-url-file {} failed: {error}",
                        path.display()
                    );
                    return ExitCode::FAILURE;
                }
            },
            None => args.database_url,
        }
    };
    let found = match manifests::read(&args.files) {
        Ok(found) => found,
        Err(error) => {
            eprintln!("{NAME}: {}", report::chain(&error));
            return ExitCode::FAILURE;
        }
    };
    for skipped in &found.skipped {
        eprintln!("{NAME}: skipped {skipped}");
    }
    for problem in &found.problems {
        eprintln!("{NAME}: error: {problem}");
    }
    if found.boxtables.is_empty() && found.problems.is_empty() {
        eprintln!("{NAME}: no BoxTable manifests in the given files");
        return ExitCode::FAILURE;
    }
    let ca_pem = match &args.ca_file {
        Some(path) => match std::fs::read(path) {
            Ok(pem) => Some(pem),
            Err(error) => {
                eprintln!("{NAME}: cannot read {}: {error}", path.display());
                return ExitCode::FAILURE;
            }
        },
        None => None,
    };
    let cancel = CancellationToken::new();
    cancel_on_signal(cancel.clone());
    let options = super::Options {
        database_url,
        ca_pem,
        concurrency: args.concurrency,
        mode: if args.dry_run {
            super::Mode::Plan
        } else {
            super::Mode::Apply
        },
    };
    let results = super::run(&found, &options, &cancel).await;
    let printed = match args.output {
        OutputArg::Text => {
            if args.dry_run {
                print!("{}", super::render::plan(&results));
            }
            print!("{}", super::render::summary(&results));
            Ok(())
        }
        OutputArg::Yaml => results.iter().try_for_each(|result| {
            serde_saphyr::to_string(result)
                .map(|text| print!("---\n{text}"))
                .map_err(|e| e.to_string())
        }),
        OutputArg::Json => serde_json::to_string_pretty(&results)
            .map(|text| println!("{text}"))
            .map_err(|e| e.to_string()),
    };
    if args.output != OutputArg::Text {
        eprint!("{}", super::render::summary(&results));
    }
    if let Err(error) = printed {
        eprintln!("{NAME}: cannot print the results: {error}");
        return ExitCode::FAILURE;
    }
    ExitCode::from(super::worst(&results).exit_code())
}
