//! Leader election on a Lease, directly and with the controller.

mod controller;
mod election;
