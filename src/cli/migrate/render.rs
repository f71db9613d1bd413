//! The `migrate` command's output as text: the summary table, and a plan's statements.
//! (`-o yaml` and `-o json` serialise [`TableResult`]s as they are.)

use std::fmt::Write as _;

use super::TableResult;

/// The summary: one row per BoxTable document with its table, database, result and reason,
/// then the message of every row that is not Ready, and the drift a run found (its status's
/// `Drifted` condition).
pub fn summary(results: &[TableResult]) -> String {
    let header = ["BOXTABLE", "TABLE", "DATABASE", "RESULT", "REASON"];
    let rows: Vec<[String; 5]> = results
        .iter()
        .map(|r| {
            [
                r.display_name(),
                r.table.clone().unwrap_or_else(|| "-".to_owned()),
                r.database
                    .as_ref()
                    .map_or_else(|| "-".to_owned(), ToString::to_string),
                format!("{:?}", r.result),
                r.reason_label().to_owned(),
            ]
        })
        .collect();
    let mut widths = header.map(str::len);
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let mut line = |cells: &[String]| {
        let mut text = String::new();
        for (i, cell) in cells.iter().enumerate() {
            if i + 1 == cells.len() {
                text.push_str(cell);
            } else {
                let _ = write!(text, "{cell:<width$}   ", width = widths[i]);
            }
        }
        out.push_str(text.trim_end());
        out.push('\n');
    };
    line(&header.map(str::to_owned));
    for row in &rows {
        line(row);
    }
    for r in results {
        if r.result != super::Verdict::Ready && !r.message.is_empty() {
            let _ = writeln!(out, "{}: {}", r.display_name(), r.message);
        }
        if let Some(drift) = r.drift() {
            let _ = writeln!(out, "{}: DRIFT: {drift}", r.display_name());
        }
    }
    out
}

/// A plan as text: per table, what a run would do and each statement exactly as it is sent,
/// its parameters in a comment after it.
pub fn plan(results: &[TableResult]) -> String {
    let mut out = String::new();
    for r in results {
        let Some(plan) = &r.plan else { continue };
        let database = r
            .database
            .as_ref()
            .map_or_else(String::new, |d| format!(" in {d}"));
        let _ = writeln!(
            out,
            "# {} ({}): {}{database}",
            r.display_name(),
            r.source,
            r.table.as_deref().unwrap_or("-")
        );
        let _ = writeln!(
            out,
            "# path {}, version {} -> {} (target {}): {}",
            plan.path.as_str(),
            plan.from_version,
            plan.to_version,
            plan.target_version,
            r.message
        );
        if let Some(drift) = &plan.drift {
            let label = if drift.drifted { "DRIFT" } else { "no drift" };
            let _ = writeln!(out, "# {label}: {}", drift.message);
        }
        if plan.statements.is_empty() {
            out.push('\n');
            continue;
        }
        let _ = writeln!(
            out,
            "# {} statements in one transaction, under advisory lock {}",
            plan.statements.len(),
            plan.lock_key
        );
        for statement in &plan.statements {
            let _ = writeln!(out, "{}", statement.sql);
            if !statement.parameters.is_empty() {
                let params: Vec<String> = statement
                    .parameters
                    .iter()
                    .enumerate()
                    .map(|(i, p)| match p {
                        serde_json::Value::String(s) => {
                            format!("${} = '{}'", i + 1, s.replace('\'', "''"))
                        }
                        other => format!("${} = {other}", i + 1),
                    })
                    .collect();
                let _ = writeln!(out, "-- parameters: {}", params.join(", "));
            }
        }
        out.push('\n');
    }
    out
}
