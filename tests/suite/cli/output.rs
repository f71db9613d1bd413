//! Every command that prints, with a reader that has gone away before the output comes (`plan ...
//! | head -1`): the command ends quietly, with the exit code it would have had, never a panic.

use std::path::Path;
use std::process::{Command, Stdio};

use crate::support;

/// What a command did with its stdout a pipe whose reader is already closed.
struct Run {
    code: Option<i32>,
    stderr: String,
}

fn with_closed_stdout(args: &[&str]) -> Run {
    let (reader, writer) = std::io::pipe().unwrap();
    // Every write to the pipe fails with EPIPE from the first byte: the reader is gone.
    drop(reader);
    let out = Command::new(env!("CARGO_BIN_EXE_boxtable-operator"))
        .args(args)
        .env_remove("DATABASE_URL")
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(writer)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
        .wait_with_output()
        .unwrap();
    Run {
        code: out.status.code(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn assert_quiet(run: &Run, code: i32, what: &str) {
    assert_eq!(run.code, Some(code), "{what}: {}", run.stderr);
    for noise in ["panicked", "Broken pipe", "writing to stdout failed"] {
        assert!(
            !run.stderr.contains(noise),
            "{what} says {noise:?}: {}",
            run.stderr
        );
    }
}

fn write(dir: &Path, name: &str, body: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, body).unwrap();
    path.to_str().unwrap().to_owned()
}

#[test]
fn key_and_crd_end_quietly_with_exit_0_when_the_reader_is_gone() {
    assert_quiet(&with_closed_stdout(&["key", "--table", "outbox"]), 0, "key");
    assert_quiet(&with_closed_stdout(&["crd"]), 0, "crd");
}

#[tokio::test]
async fn plan_and_migrate_end_quietly_with_their_own_exit_code_when_the_reader_is_gone() {
    let db = support::fresh_db().await;
    let dir = tempfile::tempdir().unwrap();
    let file = write(
        dir.path(),
        "outbox.yaml",
        "apiVersion: brighter.dev/v1alpha1\nkind: BoxTable\nmetadata:\n  name: orders\n  namespace: shop\n\
         spec:\n  box: Outbox\n  database:\n    secretRef:\n      name: shop-db\n",
    );
    let url = db.url.as_str();

    // Changes pending: 2, in every format.
    for format in ["text", "yaml", "json"] {
        let run = with_closed_stdout(&["plan", "-f", &file, "--database-url", url, "-o", format]);
        assert_quiet(&run, 2, &format!("plan -o {format}"));
    }
    // The run happens (the results are printed after it), and exits 0.
    let run = with_closed_stdout(&["migrate", "-f", &file, "--database-url", url, "-o", "yaml"]);
    assert_quiet(&run, 0, "migrate -o yaml");
    assert!(
        run.stderr.contains("Ready"),
        "the summary still goes to stderr: {}",
        run.stderr
    );
    let history = support::migrate::history_versions(&db.connect().await, "public").await;
    assert_eq!(history.len(), 1, "{history:?}");
    let run = with_closed_stdout(&["migrate", "-f", &file, "--database-url", url]);
    assert_quiet(&run, 0, "migrate");
}
