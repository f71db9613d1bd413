//! Drift: a Ready table altered behind the operator's back, seen in the database and reported by
//! the controller.

mod controller;
mod database;
