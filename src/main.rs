//! The `boxtable-operator` binary: the command line and wiring. The only place that prints and exits.

use std::process::ExitCode;

use boxtable_operator::ident::QualifiedName;
use boxtable_operator::lock::LockIdentity;
use clap::{Parser, Subcommand};

/// Provisions Brighter outbox and inbox tables in PostgreSQL from BoxTable resources.
#[derive(Debug, Parser)]
#[command(name = "boxtable-operator", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Print the lock identity of a box table: lockKey, key, hex, pg_locks classid/objid and a
    /// query that shows the lock's holder.
    Key(KeyArgs),
}

#[derive(Debug, clap::Args)]
struct KeyArgs {
    /// A lockKey taken verbatim, e.g. BrighterMigration_public.outbox.
    #[arg(conflicts_with_all = ["schema", "table"], required_unless_present = "table")]
    lock_key: Option<String>,
    /// The box table's schema (lowercased like Brighter does).
    #[arg(long, requires = "table")]
    schema: Option<String>,
    /// The box table's name (lowercased like Brighter does).
    #[arg(long)]
    table: Option<String>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Some(Command::Key(args)) => key(&args),
        None => {
            eprintln!("boxtable-operator: no command given; see --help");
            ExitCode::from(2)
        }
    }
}

fn key(args: &KeyArgs) -> ExitCode {
    let identity = match (&args.lock_key, &args.table) {
        (Some(lock_key), _) => LockIdentity::from_lock_key(lock_key),
        (None, Some(table)) => match QualifiedName::parse(args.schema.as_deref(), table) {
            Ok(name) => LockIdentity::for_table(&name),
            Err(error) => {
                eprintln!("boxtable-operator key: {error}");
                return ExitCode::from(2);
            }
        },
        (None, None) => {
            eprintln!("boxtable-operator key: give a lockKey or --table");
            return ExitCode::from(2);
        }
    };
    println!("lockKey:  {}", identity.lock_key());
    println!("key:      {}", identity.key());
    println!("keyHex:   {}", identity.key_hex());
    println!("classid:  {}", identity.classid());
    println!("objid:    {}", identity.objid());
    println!("objsubid: 1");
    println!();
    println!("-- who holds this lock (run in the box table's database):");
    println!("{}", identity.holder_query());
    ExitCode::SUCCESS
}
