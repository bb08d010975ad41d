//! The deploy run, as data walks through it: the plan (its concurrency from the memory
//! budget: `budget.rs`); the fleet (`fleet.rs`: preflight,
//! every lock, every history); the coordinator (`coordinator.rs`), one loop that feeds the
//! machine (`machine.rs`: every target's state and the failure policy, pure) and sends its
//! commands to one executor per target (`executor.rs`); a target's run (`target_run.rs`:
//! apply and wait, its scripts); its end (`conclude.rs`: record, rollback by re-apply, unlock;
//! `prune.rs`: what the manifests dropped, pruned after a healthy end).

pub mod budget;
pub mod conclude;
pub mod coordinator;
pub mod executor;
pub mod fleet;
pub mod machine;
pub mod overlap;
pub mod plan;
pub mod policy;
pub mod preflight;
pub mod prune;
pub mod reapply;
pub mod saved_plan;
pub mod scripts;
pub mod target_run;
pub mod wave_gate;
