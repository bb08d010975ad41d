//! The deploy run: one target's run, the fleet of targets, and the conclusion (policy, rollback).

pub mod conclude;
pub mod fleet;
pub mod overlap;
pub mod target_run;
