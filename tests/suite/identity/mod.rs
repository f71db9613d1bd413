//! Who owns a table: ownership records in the database, and BoxTables re-created, restored or
//! re-installed.

mod ownership_records;
mod table_ownership;
