//! The words every layer speaks: resource types, API errors, simulated time.

pub mod clock;
pub mod error;
pub mod resource;
