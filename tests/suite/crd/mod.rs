//! The CustomResourceDefinition: the checked-in golden file, what its schema refuses at apply time,
//! bad inputs and fuzzed identifiers.

mod bad_inputs;
mod golden;
mod identifier_fuzz;
mod schema;
