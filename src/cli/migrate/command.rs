//! The `migrate` and `plan` commands' body: where the database comes from, the manifests, the
//! output format and the exit code.

use std::process::ExitCode;

use boxtable_operator::{manifests, report};
use futures::FutureExt as _;
use futures::future::FusedFuture as _;
use tokio_util::sync::CancellationToken;
use zeroize::Zeroizing;

use crate::cli::args::{MigrateArgs, OutputArg};
use crate::cli::output::{self, note};
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
    let env_url = std::env::var(DATABASE_URL_ENV).ok().map(Zeroizing::new);
    let database_url = if args.database_url_from_env {
        let Some(url) = env_url else {
            note!("{NAME}: --database-url-from-env was given but {DATABASE_URL_ENV} is not set");
            return ExitCode::FAILURE;
        };
        note!(
            "{NAME}: every table uses the database in {DATABASE_URL_ENV} (--database-url-from-env)"
        );
        Some(url)
    } else {
        if env_url.is_some() {
            note!(
                "{NAME}: {DATABASE_URL_ENV} is set in the environment and ignored; pass --database-url-from-env to use it"
            );
        }
        match &args.database_url_file {
            Some(path) => match std::fs::read(path) {
                Ok(bytes) => match String::from_utf8(bytes) {
                    Ok(text) => {
                        let text = Zeroizing::new(text);
                        if text.trim().is_empty() {
                            note!("{NAME}: --database-url-file {} is empty", path.display());
                            return ExitCode::FAILURE;
                        }
                        Some(Zeroizing::new(text.trim_end().to_owned()))
                    }
                    Err(_) => {
                        note!(
                            "{NAME}: --database-url-file {} is not UTF-8 text",
                            path.display()
                        );
                        return ExitCode::FAILURE;
                    }
                },
                Err(error) => {
                    note!(
                        "{NAME}: reading --database-url-file {} failed: {error}",
                        path.display()
                    );
                    return ExitCode::FAILURE;
                }
            },
            None => args
                .database_url
                .as_ref()
                .map(|url| Zeroizing::new(url.expose().to_owned())),
        }
    };
    let ca_pem = match &args.ca_file {
        Some(path) => match std::fs::read(path) {
            Ok(pem) => Some(pem),
            Err(error) => {
                note!("{NAME}: cannot read {}: {error}", path.display());
                return ExitCode::FAILURE;
            }
        },
        None => None,
    };
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
    // The manifests are read and judged on a thread of their own while the first session opens
    // (both take a few milliseconds); a reading that fails does not wait for the connection.
    let sessions = super::sessions(options.concurrency);
    let files = args.files.clone();
    let mut reading = tokio::task::spawn_blocking(move || manifests::read(&files));
    let opening = super::open_ahead(&sessions, &options).fuse();
    let mut opening = std::pin::pin!(opening);
    let read = tokio::select! {
        read = &mut reading => read,
        () = &mut opening => reading.await,
    };
    let found = match read {
        Ok(Ok(found)) => found,
        Ok(Err(error)) => {
            note!("{NAME}: {}", report::chain(&error));
            return ExitCode::FAILURE;
        }
        Err(error) => {
            note!("{NAME}: reading the manifests failed: {error}");
            return ExitCode::FAILURE;
        }
    };
    for skipped in &found.skipped {
        note!("{NAME}: skipped {skipped}");
    }
    for problem in &found.problems {
        note!("{NAME}: error: {problem}");
    }
    if found.boxtables.is_empty() && found.problems.is_empty() {
        note!("{NAME}: no BoxTable manifests in the given files");
        return ExitCode::FAILURE;
    }
    let cancel = CancellationToken::new();
    cancel_on_signal(cancel.clone());
    // The first table's checkout waits for the session being opened ahead.
    let (results, ()) = tokio::join!(super::run(&found, &options, &sessions, &cancel), async {
        if !opening.is_terminated() {
            opening.await;
        }
    });
    let rendered = match args.output {
        OutputArg::Text => {
            let plan = if args.dry_run {
                super::render::plan(&results)
            } else {
                String::new()
            };
            Ok(format!("{plan}{}", super::render::summary(&results)))
        }
        OutputArg::Yaml => results
            .iter()
            .map(|result| serde_saphyr::to_string(result).map(|text| format!("---\n{text}")))
            .collect::<Result<String, _>>()
            .map_err(|e| e.to_string()),
        OutputArg::Json => serde_json::to_string_pretty(&results)
            .map(|text| format!("{text}\n"))
            .map_err(|e| e.to_string()),
    };
    let printed = match rendered {
        Ok(text) => output::stdout(&text),
        Err(error) => {
            note!("{NAME}: cannot print the results: {error}");
            return ExitCode::FAILURE;
        }
    };
    if args.output != OutputArg::Text {
        output::stderr(&super::render::summary(&results));
    }
    output::exit_code(
        NAME,
        printed,
        ExitCode::from(super::worst(&results).exit_code()),
    )
}
