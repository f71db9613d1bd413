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

/// The name the command's notes start with.
const NAME: &str = "boxtable-operator migrate";

/// The `migrate` command (and `plan`, which is `migrate --dry-run`): the manifests read and
/// checked, every table run or planned, the results printed; the exit code is the worst verdict's.
pub async fn execute(args: MigrateArgs) -> ExitCode {
    if !init_logging(args.log_format) {
        return ExitCode::FAILURE;
    }
    let options = match options(&args) {
        Ok(options) => options,
        Err(message) => {
            note!("{NAME}: {message}");
            return ExitCode::FAILURE;
        }
    };
    // The manifests are decoded, then judged, on a thread of their own while the first session
    // opens. Each table's pass starts from its decoded BoxTable and reads while the judge works;
    // it changes nothing before its document's verdict (see `judged`).
    let sessions = super::sessions(options.concurrency);
    let files = args.files.clone();
    let (handover, mut decoded) = tokio::sync::oneshot::channel();
    let judging =
        tokio::task::spawn_blocking(move || super::judged::decode_and_judge(&files, handover));
    let opening = super::open_ahead(&sessions, &options).fuse();
    let mut opening = std::pin::pin!(opening);
    let decoded = tokio::select! {
        decoded = &mut decoded => decoded,
        () = &mut opening => decoded.await,
    };
    let Ok(decoded) = decoded else {
        // The thread ended before handing anything over: it says why.
        note!("{NAME}: {}", judge_failure(judging.await));
        return ExitCode::FAILURE;
    };
    for skipped in &decoded.skipped {
        note!("{NAME}: skipped {skipped}");
    }
    if decoded.empty {
        note!("{NAME}: no BoxTable manifests in the given files");
        return ExitCode::FAILURE;
    }
    if decoded.documents.len() <= options.concurrency.max(1) {
        // Every table runs at once on a session of its own: none is borrowed twice.
        sessions.keep_none();
    }
    let cancel = CancellationToken::new();
    cancel_on_signal(cancel.clone());
    // The first table's checkout waits for the session being opened ahead.
    let (ran, ()) = tokio::join!(super::run(&decoded, &options, &sessions, &cancel), async {
        if !opening.is_terminated() {
            opening.await;
        }
    });
    let found = match judging.await {
        Ok(Ok(found)) => found,
        failed => {
            note!("{NAME}: {}", judge_failure(failed));
            return ExitCode::FAILURE;
        }
    };
    for problem in &found.problems {
        note!("{NAME}: error: {problem}");
    }
    let results = ran.with(&found.problems);
    let rendered = render(args.output, args.dry_run, &results);
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

/// Why the judge's thread did not give the manifests: its error, or its panic.
fn judge_failure(
    ended: Result<
        Result<manifests::Manifests, manifests::SchemaCompileError>,
        tokio::task::JoinError,
    >,
) -> String {
    match ended {
        Ok(Err(error)) => report::chain(&error),
        Ok(Ok(_)) => "reading the manifests ended without an answer".to_owned(),
        Err(error) => format!("reading the manifests failed: {error}"),
    }
}

/// The run's options from the command line: the database URL (from the flag, a file or the
/// environment), the CA bundle, the concurrency and the mode.
///
/// # Errors
/// What is wrong with a flag, worded for the user (a file that cannot be read, an empty URL file,
/// `--database-url-from-env` without the variable).
fn options(args: &MigrateArgs) -> Result<super::Options, String> {
    let database_url = database_url(args)?;
    let ca_pem = match &args.ca_file {
        Some(path) => Some(
            std::fs::read(path)
                .map_err(|error| format!("cannot read {}: {error}", path.display()))?,
        ),
        None => None,
    };
    Ok(super::Options {
        database_url,
        ca_pem,
        concurrency: args.concurrency,
        mode: if args.dry_run {
            super::Mode::Plan
        } else {
            super::Mode::Apply
        },
    })
}

/// The database URL every table uses, if one was given: `--database-url-from-env`,
/// `--database-url-file` or `--database-url`; a `DATABASE_URL` set but not asked for is said to be
/// ignored.
///
/// # Errors
/// As [`options`].
fn database_url(args: &MigrateArgs) -> Result<Option<Zeroizing<String>>, String> {
    let env_url = std::env::var(DATABASE_URL_ENV).ok().map(Zeroizing::new);
    if args.database_url_from_env {
        let Some(url) = env_url else {
            return Err(format!(
                "--database-url-from-env was given but {DATABASE_URL_ENV} is not set"
            ));
        };
        note!(
            "{NAME}: every table uses the database in {DATABASE_URL_ENV} (--database-url-from-env)"
        );
        return Ok(Some(url));
    }
    if env_url.is_some() {
        note!(
            "{NAME}: {DATABASE_URL_ENV} is set in the environment and ignored; pass --database-url-from-env to use it"
        );
    }
    let Some(path) = &args.database_url_file else {
        return Ok(args
            .database_url
            .as_ref()
            .map(|url| Zeroizing::new(url.expose().to_owned())));
    };
    let bytes = std::fs::read(path).map_err(|error| {
        format!(
            "reading --database-url-file {} failed: {error}",
            path.display()
        )
    })?;
    let text = Zeroizing::new(
        String::from_utf8(bytes)
            .map_err(|_| format!("--database-url-file {} is not UTF-8 text", path.display()))?,
    );
    if text.trim().is_empty() {
        return Err(format!("--database-url-file {} is empty", path.display()));
    }
    Ok(Some(Zeroizing::new(text.trim_end().to_owned())))
}

/// The results as the output format asks: text (with the plan's statements on `--dry-run`),
/// YAML documents or a JSON list.
///
/// # Errors
/// Why the results could not be serialized.
fn render(
    output: OutputArg,
    dry_run: bool,
    results: &[super::TableResult],
) -> Result<String, String> {
    match output {
        OutputArg::Text => {
            let plan = if dry_run {
                super::render::plan(results)
            } else {
                String::new()
            };
            Ok(format!("{plan}{}", super::render::summary(results)))
        }
        OutputArg::Yaml => results
            .iter()
            .map(|result| serde_saphyr::to_string(result).map(|text| format!("---\n{text}")))
            .collect::<Result<String, _>>()
            .map_err(|e| e.to_string()),
        OutputArg::Json => serde_json::to_string_pretty(results)
            .map(|text| format!("{text}\n"))
            .map_err(|e| e.to_string()),
    }
}
