//! Where the commands write: their output on stdout, what they have to say about it on stderr.
//! Every command prints through here (`print!` and `eprint!` are denied in the binary), so a
//! reader that goes away early (`plan ... | head -1`) is handled once: the rest of the output is
//! dropped and the command ends with the exit code it would have had.

use std::fmt;
use std::io::{self, Write};
use std::process::ExitCode;

/// Writes `text` to stdout and flushes it.
///
/// # Errors
/// The write error; a closed pipe is not one (the reader has read all it wanted).
pub fn stdout(text: &str) -> io::Result<()> {
    let mut out = io::stdout().lock();
    let written = out.write_all(text.as_bytes()).and_then(|()| out.flush());
    match written {
        Err(error) if error.kind() == io::ErrorKind::BrokenPipe => Ok(()),
        other => other,
    }
}

/// Writes `text` to stderr as it is. A failure is not reported: stderr is where failures go.
pub fn stderr(text: &str) {
    let mut err = io::stderr().lock();
    let _ = err.write_all(text.as_bytes()).and_then(|()| err.flush());
}

/// Writes `line` and a newline to stderr (see [`stderr`]); the [`note!`] macro formats it.
pub fn note_line(line: fmt::Arguments<'_>) {
    stderr(&format!("{line}\n"));
}

/// The exit code once the output is printed: `code` when `printed` succeeded (a closed pipe
/// included), else a failure, with `command: writing to stdout failed: ...` on stderr.
pub fn exit_code(command: &str, printed: io::Result<()>, code: ExitCode) -> ExitCode {
    match printed {
        Ok(()) => code,
        Err(error) => {
            note_line(format_args!("{command}: writing to stdout failed: {error}"));
            ExitCode::FAILURE
        }
    }
}

/// `eprintln!` for the commands: one line to stderr through [`note_line`], never a panic.
macro_rules! note {
    ($($arg:tt)*) => {
        $crate::cli::output::note_line(format_args!($($arg)*))
    };
}

pub(crate) use note;
