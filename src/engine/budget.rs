//! How many targets run at once when nobody said: as many as the memory budget
//! (`--memory-budget`, `memory_budget:`, default 512 MiB) holds at the measured memory of one
//! target in flight, at least 1. An explicit `concurrency` (flag, variable or file) wins.
//! Targets beyond the bound wait for a slot in the coordinator (a sliding bound, not batches).

use crate::report::ConcurrencyInfo;
use crate::util::size::format_size;

/// Memory of one target in flight besides its objects: its connection (TLS state, HTTP/2
/// buffers), its watches, its tasks, its lock and its report. Measured (BENCHMARKS.md, scale
/// section of 2026-12-04, the shipped binary): 0.185 MiB per added target from 1 to 1,000
/// targets (910 in flight), 0.191 MiB with all 1,000 in flight, 0.225 MiB from 1 to 200;
/// rounded up to 256 KiB. (It was 0.5 MiB, from
/// 2026-12-01's figures, before one HTTP/2 connection per target, the shared discovery and
/// the smaller watch stores: with it the default held 910 of 1,000 small targets, whose last
/// 90 then waited for the first ones' rollouts while 300 MiB of the budget stayed unused.)
pub const TARGET_BYTES: u64 = 256 * 1024;

/// Memory per object of the app, per target in flight (its applied answer, its record's
/// share, its diff). Measured (BENCHMARKS.md, 2026-12-04): 58.2 MiB peak for 50 targets x 100
/// objects against 29.0 MiB for 50 x 4, so 29.2 MiB more for 50 x 96 objects, 6.2 KiB per
/// object; rounded up to 8 KiB.
pub const OBJECT_BYTES: u64 = 8 * 1024;

/// The estimated memory of one target in flight deploying `objects` objects.
pub fn memory_per_target(objects: usize) -> u64 {
    TARGET_BYTES.saturating_add(OBJECT_BYTES.saturating_mul(objects as u64))
}

/// Targets at once that `budget` bytes hold at `per_target` bytes each; at least 1 (a budget
/// smaller than one target still deploys, one target at a time).
pub fn concurrency_for(budget: u64, per_target: u64) -> usize {
    let n = budget.checked_div(per_target).unwrap_or(u64::MAX);
    usize::try_from(n).unwrap_or(usize::MAX).max(1)
}

/// Where the concurrency came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// `--concurrency`, `ROLLGUARD_CONCURRENCY`, or `concurrency:` in the file (`by` says
    /// which).
    Set { value: usize, by: String },
    /// Derived from a memory budget in bytes.
    Budget(u64),
}

impl Source {
    /// What the config says: a concurrency someone set, else its memory budget.
    pub fn of(config: &crate::config::Config) -> Source {
        match &config.concurrency_set_by {
            Some(by) => Source::Set {
                value: config.concurrency,
                by: by.clone(),
            },
            None => Source::Budget(config.memory_budget),
        }
    }
}

/// The concurrency a run uses and why, for the report.
pub fn choose(source: &Source, objects: usize) -> ConcurrencyInfo {
    match source {
        Source::Set { value, by } => ConcurrencyInfo {
            value: (*value).max(1),
            memory_budget_bytes: None,
            per_target_bytes: None,
            reason: format!("concurrency {} (set by {by})", (*value).max(1)),
        },
        &Source::Budget(budget) => {
            let per_target = memory_per_target(objects);
            let value = concurrency_for(budget, per_target);
            ConcurrencyInfo {
                value,
                memory_budget_bytes: Some(budget),
                per_target_bytes: Some(per_target),
                reason: format!(
                    "concurrency {value} (memory budget {} / {} per target of {objects} objects)",
                    format_size(budget),
                    format_size(per_target)
                ),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1024 * 1024;

    #[test]
    fn the_budget_divides_by_the_memory_per_target_with_a_floor_of_one() {
        // (budget, per target, concurrency)
        let cases: &[(u64, u64, usize)] = &[
            (512 * MIB, 8 * MIB, 64),
            (512 * MIB, MIB / 2, 1024),
            (512 * MIB, 3 * MIB, 170),
            (MIB, 8 * MIB, 1),
            (1, 8 * MIB, 1),
            (8 * MIB, 8 * MIB, 1),
            (16 * MIB - 1, 8 * MIB, 1),
            (16 * MIB, 8 * MIB, 2),
            (u64::MAX, 1, usize::try_from(u64::MAX).unwrap_or(usize::MAX)),
            (512 * MIB, 0, usize::MAX),
        ];
        for (budget, per_target, want) in cases {
            assert_eq!(
                concurrency_for(*budget, *per_target),
                *want,
                "{budget} / {per_target}"
            );
        }
    }

    #[test]
    fn the_memory_per_target_grows_with_the_objects() {
        assert_eq!(memory_per_target(0), TARGET_BYTES);
        assert_eq!(memory_per_target(100), TARGET_BYTES + 100 * OBJECT_BYTES);
        assert!(memory_per_target(4) < memory_per_target(100));
        assert_eq!(memory_per_target(usize::MAX), u64::MAX);
    }

    #[test]
    fn a_set_concurrency_wins_and_the_budget_says_its_arithmetic() {
        // (source, objects, value, reason)
        let cases: Vec<(Source, usize, usize, String)> = vec![
            (
                Source::Set {
                    value: 3,
                    by: "--concurrency".into(),
                },
                4,
                3,
                "concurrency 3 (set by --concurrency)".into(),
            ),
            (
                Source::Set {
                    value: 0,
                    by: "rollguard.yaml:4".into(),
                },
                4,
                1,
                "concurrency 1 (set by rollguard.yaml:4)".into(),
            ),
            // The default budget, in the numbers docs/configuration.md states: every target
            // of a 1,000-cluster fleet of the small app at once.
            (
                Source::Budget(512 * MIB),
                4,
                1820,
                "concurrency 1820 (memory budget 512 MiB / 0.28 MiB per target of 4 objects)"
                    .into(),
            ),
            (
                Source::Budget(512 * MIB),
                100,
                496,
                "concurrency 496 (memory budget 512 MiB / 1.03 MiB per target of 100 objects)"
                    .into(),
            ),
            (
                Source::Budget(MIB),
                100,
                1,
                format!(
                    "concurrency 1 (memory budget 1 MiB / {} per target of 100 objects)",
                    format_size(memory_per_target(100))
                ),
            ),
        ];
        for (source, objects, value, reason) in cases {
            let info = choose(&source, objects);
            assert_eq!(info.value, value, "{source:?}");
            assert_eq!(info.reason, reason, "{source:?}");
            assert_eq!(
                info.memory_budget_bytes.is_some(),
                matches!(source, Source::Budget(_))
            );
        }
    }
}
