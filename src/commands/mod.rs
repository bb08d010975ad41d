//! One module per user command.

pub mod demo;
pub mod diff;
pub mod release;
