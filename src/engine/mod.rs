//! The deploy run, as data walks through it: the plan, the fleet of targets (bounded
//! concurrency, one task per target), one target's run (apply and wait), then the conclusion
//! (the failure policy, the rollbacks by re-apply).

pub mod conclude;
pub mod coordinator;
pub mod executor;
pub mod fleet;
pub mod machine;
pub mod overlap;
pub mod plan;
pub mod policy;
pub mod reapply;
pub mod scripts;
pub mod target_run;
pub mod wave_gate;
