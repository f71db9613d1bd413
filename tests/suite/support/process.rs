//! The programs the tests run (helm, kubectl, openssl, the repository's scripts): what they
//! printed, and a failure that shows all of it when one does not succeed.

use std::process::{Command, Output};

/// Everything a program that has ended said, for failure messages: how it exited, its stdout
/// and its stderr.
pub fn printed(out: &Output) -> String {
    format!(
        "{}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The stdout of a program that has ended, failing the test with `what` and everything the
/// program printed unless it succeeded.
pub fn stdout_of_success(what: &str, out: Output) -> String {
    assert!(out.status.success(), "{what} failed:\n{}", printed(&out));
    String::from_utf8(out.stdout).unwrap()
}

/// Runs `command` to its end and returns its stdout, failing the test with `what` and everything
/// it printed unless it succeeded.
pub fn run_ok(what: &str, command: &mut Command) -> String {
    stdout_of_success(what, command.output().unwrap())
}
