//! The `key` command.

use std::process::ExitCode;

use boxtable_operator::ident::QualifiedName;
use boxtable_operator::lock::LockIdentity;

use super::args::KeyArgs;

/// The `key` command: the lock identity of a box table, and a query that shows its holder.
pub fn execute(args: &KeyArgs) -> ExitCode {
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
