//! The `key` command.

use std::process::ExitCode;

use boxtable_operator::ident::QualifiedName;
use boxtable_operator::lock::LockIdentity;

use super::args::KeyArgs;
use super::output::{self, note};

/// The `key` command: the lock identity of a box table, and a query that shows its holder.
pub fn execute(args: &KeyArgs) -> ExitCode {
    const NAME: &str = "boxtable-operator key";
    let identity = match (&args.lock_key, &args.table) {
        (Some(lock_key), _) => LockIdentity::from_lock_key(lock_key),
        (None, Some(table)) => match QualifiedName::parse(args.schema.as_deref(), table) {
            Ok(name) => LockIdentity::for_table(&name),
            Err(error) => {
                note!("{NAME}: {error}");
                return ExitCode::from(2);
            }
        },
        (None, None) => {
            note!("{NAME}: give a lockKey or --table");
            return ExitCode::from(2);
        }
    };
    let text = format!(
        "lockKey:  {}\nkey:      {}\nkeyHex:   {}\nclassid:  {}\nobjid:    {}\nobjsubid: 1\n\n\
         -- who holds this lock (run in the box table's database):\n{}\n",
        identity.lock_key(),
        identity.key(),
        identity.key_hex(),
        identity.classid(),
        identity.objid(),
        identity.holder_query()
    );
    output::exit_code(NAME, output::stdout(&text), ExitCode::SUCCESS)
}
