//! One module per benchmark section.

pub mod apply;
pub mod detect;
pub mod fleet;
pub mod fuzz;
pub mod helm;
pub mod preflight;
pub mod rollback;
pub mod safe;
pub mod scale;
pub mod sim;
pub mod start;
