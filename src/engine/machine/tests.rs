use super::*;

use FailurePolicy::{None as NoRollback, RollbackAll, RollbackFailed, RollbackIfAllFail};

fn at(second: i64) -> Timestamp {
    Timestamp::from_second(1_700_000_000 + second).expect("a valid instant")
}

fn settings(policy: FailurePolicy, concurrency: usize) -> Settings {
    Settings {
        policy,
        rollback_on_cancel: true,
        concurrency,
        max_parallel: Vec::new(),
        rollbacks_at_once: 64,
    }
}

/// A fleet of `names` ("eu" wave 0, "us@1" wave 1).
fn fleet(settings: Settings, names: &[&str]) -> Fleet {
    let targets = names
        .iter()
        .map(|n| match n.split_once('@') {
            Some((name, wave)) => (name.to_string(), wave.parse().expect("a wave number")),
            None => (n.to_string(), 0),
        })
        .collect();
    Fleet::new(settings, targets)
}

/// Commands in words: "start eu", "stop us", "rollback us: failed", "end ap: skipped".
fn words(fleet: &Fleet, commands: &[Command]) -> Vec<String> {
    let name = |t: &TargetId| fleet.targets()[*t].name.clone();
    commands
        .iter()
        .map(|c| match c {
            Command::Start(t) => format!("start {}", name(t)),
            Command::FleetStage { wave, targets } => format!(
                "stage {wave}: {}",
                targets.iter().map(name).collect::<Vec<_>>().join(" ")
            ),
            Command::Stop(t) => format!("stop {}", name(t)),
            Command::RollBack { target, why } => format!("rollback {}: {why}", name(target)),
            Command::End { target, why } => {
                format!("end {}: {}", name(target), why.outcome().as_str())
            }
        })
        .collect()
}

/// An event in words: "changed eu", "healthy eu", "baked eu", "failed eu", "lost eu",
/// "stopped eu", "rolled-back eu", "rollback-failed eu", "cancel".
fn event(fleet: &Fleet, text: &str) -> Event {
    let (verb, name) = text.split_once(' ').unwrap_or((text, ""));
    let t = fleet
        .targets()
        .iter()
        .position(|target| target.name == name)
        .unwrap_or(usize::MAX);
    match verb {
        "changed" => Event::Changed(t),
        "healthy" => Event::Healthy(t),
        "reached" => Event::Reached(t),
        "passed" => Event::StagePassed(t),
        "baked" => Event::Baked(t),
        "failed" => Event::Failed {
            target: t,
            lock_lost: false,
        },
        "lost" => Event::Failed {
            target: t,
            lock_lost: true,
        },
        "stopped" => Event::Stopped(t),
        "rolled-back" => Event::RollbackEnded {
            target: t,
            ok: true,
        },
        "rollback-failed" => Event::RollbackEnded {
            target: t,
            ok: false,
        },
        "cancel" => Event::Cancel { signal: "SIGINT" },
        other => panic!("no such event in the tests: {other}"),
    }
}

/// Runs `steps` (an event, then the commands it must give) from the start, then checks
/// every target's final outcome ("eu=rolled-back").
fn run(mut fleet: Fleet, first: &[&str], steps: &[(&str, &[&str])], outcomes: &[&str]) {
    let started = fleet.start();
    assert_eq!(words(&fleet, &started), first, "the first commands");
    for (i, (text, want)) in steps.iter().enumerate() {
        let e = event(&fleet, text);
        let got = fleet.handle(e, at(i as i64));
        assert_eq!(words(&fleet, &got), *want, "after step {i}: {text}");
    }
    let got: Vec<String> = fleet
        .targets()
        .iter()
        .map(|t| match t.phase {
            Phase::Ended(outcome) => format!("{}={}", t.name, outcome.as_str()),
            other => format!("{}={other:?}", t.name),
        })
        .collect();
    assert_eq!(got, outcomes, "the outcomes");
    assert!(fleet.settled());
}

#[test]
fn every_target_healthy_is_deployed_at_the_end_under_every_policy() {
    for policy in FailurePolicy::ALL {
        run(
            fleet(settings(policy, 8), &["eu", "us"]),
            &["start eu", "start us"],
            &[
                ("changed eu", &[]),
                ("healthy eu", &[]),
                ("baked eu", &[]),
                ("changed us", &[]),
                ("healthy us", &[]),
                ("baked us", &["end eu: deployed", "end us: deployed"]),
            ],
            &["eu=deployed", "us=deployed"],
        );
    }
}

#[test]
fn rollback_all_decides_at_the_first_failure() {
    let policy_why = "policy rollback-all: us failed at 22:13:21"; // step 1
    let rollback_eu = format!("rollback eu: {policy_why}");
    run(
        fleet(settings(RollbackAll, 8), &["eu", "us", "ap"]),
        &["start eu", "start us", "start ap"],
        &[
            // us fails 2 s in while eu is still waiting and ap has written nothing yet:
            // eu stops at once, ap stops, us rolls back. Nobody waits for eu's rollout.
            ("changed us", &[]),
            ("failed us", &["rollback us: failed", "stop eu", "stop ap"]),
            ("changed eu", &[]),
            // A healthy eu after the stop is absorbed; its stop answer rolls it back.
            ("healthy eu", &[]),
            ("stopped eu", &[&rollback_eu]),
            ("stopped ap", &["end ap: skipped"]),
            ("rolled-back us", &[]),
            ("rolled-back eu", &[]),
        ],
        &["eu=rolled-back", "us=rolled-back", "ap=skipped"],
    );
}

#[test]
fn rollback_all_rolls_back_healthy_and_baking_targets_at_once() {
    run(
        fleet(settings(RollbackAll, 8), &["eu", "us", "ap"]),
        &["start eu", "start us", "start ap"],
        &[
            ("changed eu", &[]),
            ("healthy eu", &[]),
            ("baked eu", &[]),
            ("changed ap", &[]),
            ("healthy ap", &[]),
            ("changed us", &[]),
            (
                "failed us",
                &[
                    "rollback us: failed",
                    "rollback eu: policy rollback-all: us failed at 22:13:26",
                    "rollback ap: policy rollback-all: us failed at 22:13:26",
                ],
            ),
            ("rolled-back eu", &[]),
            ("rollback-failed ap", &[]),
            ("rolled-back us", &[]),
        ],
        &["eu=rolled-back", "us=rolled-back", "ap=rollback-failed"],
    );
}

#[test]
fn rollback_all_skips_queued_targets_with_no_write() {
    run(
        fleet(settings(RollbackAll, 1), &["eu", "us", "ap", "sa"]),
        &["start eu"],
        &[
            ("changed eu", &[]),
            (
                "failed eu",
                &[
                    "rollback eu: failed",
                    "end us: skipped",
                    "end ap: skipped",
                    "end sa: skipped",
                ],
            ),
            ("rolled-back eu", &[]),
        ],
        &["eu=rolled-back", "us=skipped", "ap=skipped", "sa=skipped"],
    );
}

#[test]
fn a_failure_before_any_write_has_nothing_to_roll_back() {
    run(
        fleet(settings(RollbackAll, 8), &["eu", "us"]),
        &["start eu", "start us"],
        &[
            ("failed eu", &["end eu: failed", "stop us"]),
            ("stopped us", &["end us: skipped"]),
        ],
        &["eu=failed", "us=skipped"],
    );
}

#[test]
fn rollback_failed_rolls_back_at_once_while_the_others_go_on() {
    run(
        fleet(settings(RollbackFailed, 8), &["eu", "us"]),
        &["start eu", "start us"],
        &[
            ("changed us", &[]),
            ("failed us", &["rollback us: failed"]),
            // us is back before eu's slow rollout ends.
            ("rolled-back us", &[]),
            ("changed eu", &[]),
            ("healthy eu", &[]),
            ("baked eu", &["end eu: deployed"]),
        ],
        &["eu=deployed", "us=rolled-back"],
    );
}

#[test]
fn none_leaves_a_failed_target_failed() {
    run(
        fleet(settings(NoRollback, 8), &["eu", "us"]),
        &["start eu", "start us"],
        &[
            ("changed us", &[]),
            ("failed us", &["end us: failed"]),
            ("changed eu", &[]),
            ("healthy eu", &[]),
            ("baked eu", &["end eu: deployed"]),
        ],
        &["eu=deployed", "us=failed"],
    );
}

#[test]
fn rollback_if_all_fail_waits_for_the_last_target() {
    // One healthy: the failed one stays failed.
    run(
        fleet(settings(RollbackIfAllFail, 8), &["eu", "us"]),
        &["start eu", "start us"],
        &[
            ("changed us", &[]),
            ("failed us", &[]),
            ("changed eu", &[]),
            ("healthy eu", &[]),
            ("baked eu", &["end us: failed", "end eu: deployed"]),
        ],
        &["eu=deployed", "us=failed"],
    );
    // Every one failed: all roll back, when the last one fails.
    run(
        fleet(settings(RollbackIfAllFail, 8), &["eu", "us"]),
        &["start eu", "start us"],
        &[
            ("changed us", &[]),
            ("failed us", &[]),
            ("changed eu", &[]),
            (
                "failed eu",
                &[
                    "rollback eu: policy rollback-if-all-fail: every target failed",
                    "rollback us: policy rollback-if-all-fail: every target failed",
                ],
            ),
            ("rolled-back eu", &[]),
            ("rolled-back us", &[]),
        ],
        &["eu=rolled-back", "us=rolled-back"],
    );
}

#[test]
fn the_bound_is_a_bound_not_batches() {
    // concurrency 2: the third target starts the moment the fast one is over, while the
    // slow one still waits.
    run(
        fleet(
            settings(RollbackFailed, 2),
            &["slow", "fast", "third", "fourth"],
        ),
        &["start slow", "start fast"],
        &[
            ("changed fast", &[]),
            ("healthy fast", &[]),
            ("baked fast", &["start third"]),
            ("changed third", &[]),
            ("healthy third", &[]),
            ("baked third", &["start fourth"]),
            ("changed fourth", &[]),
            ("healthy fourth", &[]),
            ("baked fourth", &[]),
            ("changed slow", &[]),
            ("healthy slow", &[]),
            (
                "baked slow",
                &[
                    "end slow: deployed",
                    "end fast: deployed",
                    "end third: deployed",
                    "end fourth: deployed",
                ],
            ),
        ],
        &[
            "slow=deployed",
            "fast=deployed",
            "third=deployed",
            "fourth=deployed",
        ],
    );
}

#[test]
fn a_wave_starts_when_the_one_before_is_healthy_and_baked() {
    run(
        fleet(
            settings(RollbackAll, 8),
            &["canary", "eu@1", "us@1", "ap@2"],
        ),
        &["start canary"],
        &[
            ("changed canary", &[]),
            ("healthy canary", &[]),
            ("baked canary", &["start eu", "start us"]),
            ("changed eu", &[]),
            ("healthy eu", &[]),
            ("baked eu", &[]),
            ("changed us", &[]),
            ("healthy us", &[]),
            ("baked us", &["start ap"]),
            ("changed ap", &[]),
            ("healthy ap", &[]),
            (
                "baked ap",
                &[
                    "end canary: deployed",
                    "end eu: deployed",
                    "end us: deployed",
                    "end ap: deployed",
                ],
            ),
        ],
        &[
            "canary=deployed",
            "eu=deployed",
            "us=deployed",
            "ap=deployed",
        ],
    );
}

#[test]
fn a_failed_canary_skips_every_later_wave_under_every_policy() {
    for (policy, canary) in [
        (RollbackAll, "canary=rolled-back"),
        (RollbackFailed, "canary=rolled-back"),
        (NoRollback, "canary=failed"),
    ] {
        let after_failure: &[&str] = match policy {
            NoRollback => &["end eu: skipped", "end us: skipped", "end canary: failed"],
            _ => &[
                "end eu: skipped",
                "end us: skipped",
                "rollback canary: failed",
            ],
        };
        let mut steps: Vec<(&str, &[&str])> = vec![
            ("changed canary", &[]),
            ("healthy canary", &[]),
            // Its pods crash-loop during the bake.
            ("failed canary", after_failure),
        ];
        if policy != NoRollback {
            steps.push(("rolled-back canary", &[]));
        }
        run(
            fleet(settings(policy, 8), &["canary", "eu@1", "us@1"]),
            &["start canary"],
            &steps,
            &[canary, "eu=skipped", "us=skipped"],
        );
    }
}

#[test]
fn max_parallel_bounds_a_wave() {
    let mut settings = settings(RollbackFailed, 8);
    settings.max_parallel = vec![(1, 1)];
    run(
        fleet(settings, &["canary", "eu@1", "us@1"]),
        &["start canary"],
        &[
            ("healthy canary", &[]),
            ("baked canary", &["start eu"]),
            ("healthy eu", &[]),
            ("baked eu", &["start us"]),
            ("healthy us", &[]),
            (
                "baked us",
                &[
                    "end canary: deployed",
                    "end eu: deployed",
                    "end us: deployed",
                ],
            ),
        ],
        &["canary=deployed", "eu=deployed", "us=deployed"],
    );
}

#[test]
fn cancel_stops_everything_and_rolls_back_what_changed() {
    run(
        fleet(settings(RollbackAll, 1), &["eu", "us", "ap"]),
        &["start eu"],
        &[
            ("changed eu", &[]),
            (
                "cancel",
                &["stop eu", "end us: cancelled", "end ap: cancelled"],
            ),
            (
                "stopped eu",
                &["rollback eu: cancelled by SIGINT (on_cancel: rollback)"],
            ),
            // A second signal changes nothing.
            ("cancel", &[]),
            ("rolled-back eu", &[]),
        ],
        &["eu=rolled-back", "us=cancelled", "ap=cancelled"],
    );
}

#[test]
fn cancel_with_leave_keeps_what_is_there() {
    let mut settings = settings(RollbackAll, 8);
    settings.rollback_on_cancel = false;
    run(
        fleet(settings, &["eu", "us"]),
        &["start eu", "start us"],
        &[
            ("changed eu", &[]),
            ("healthy eu", &[]),
            ("baked eu", &[]),
            ("changed us", &[]),
            ("cancel", &["end eu: deployed", "stop us"]),
            ("stopped us", &["end us: cancelled"]),
        ],
        &["eu=deployed", "us=cancelled"],
    );
}

#[test]
fn cancel_during_a_rollback_lets_it_finish() {
    run(
        fleet(settings(RollbackFailed, 8), &["eu", "us"]),
        &["start eu", "start us"],
        &[
            ("changed us", &[]),
            ("failed us", &["rollback us: failed"]),
            ("cancel", &["stop eu"]),
            ("stopped eu", &["end eu: cancelled"]),
            ("rollback-failed us", &[]),
        ],
        &["eu=cancelled", "us=rollback-failed"],
    );
}

#[test]
fn a_lost_lock_is_never_rolled_back() {
    run(
        fleet(settings(RollbackAll, 8), &["eu", "us"]),
        &["start eu", "start us"],
        &[
            ("changed eu", &[]),
            ("lost eu", &["end eu: failed", "stop us"]),
            ("changed us", &[]),
            (
                "stopped us",
                &["rollback us: policy rollback-all: eu failed at 22:13:21"],
            ),
            ("rolled-back us", &[]),
        ],
        &["eu=failed", "us=rolled-back"],
    );
}

#[test]
fn racing_events_are_absorbed() {
    run(
        fleet(settings(RollbackAll, 8), &["eu", "us"]),
        &["start eu", "start us"],
        &[
            ("changed eu", &[]),
            ("changed us", &[]),
            ("failed eu", &["rollback eu: failed", "stop us"]),
            // us failed on its own before it saw the stop: it rolls back as failed.
            ("failed us", &["rollback us: failed"]),
            // The stop's answer comes after: nothing more.
            ("stopped us", &[]),
            // A failure after the rollback began is absorbed.
            ("failed eu", &[]),
            ("rolled-back eu", &[]),
            ("rolled-back eu", &[]),
            ("rolled-back us", &[]),
        ],
        &["eu=rolled-back", "us=rolled-back"],
    );
}

#[test]
fn a_script_failing_in_a_fleet_stage_is_every_targets_failure() {
    // The coordinator reports a fleet stage's failure as a failure of each target in it.
    run(
        fleet(settings(RollbackAll, 8), &["eu", "us"]),
        &["start eu", "start us"],
        &[
            ("changed eu", &[]),
            ("changed us", &[]),
            ("failed eu", &["rollback eu: failed", "stop us"]),
            ("failed us", &["rollback us: failed"]),
            ("rolled-back eu", &[]),
            ("rolled-back us", &[]),
        ],
        &["eu=rolled-back", "us=rolled-back"],
    );
}

#[test]
fn events_for_unknown_targets_change_nothing() {
    let mut f = fleet(settings(RollbackAll, 8), &["eu"]);
    let _ = f.start();
    for e in [
        Event::Changed(7),
        Event::Healthy(7),
        Event::Baked(7),
        Event::Failed {
            target: 7,
            lock_lost: false,
        },
        Event::Stopped(7),
        Event::RollbackEnded {
            target: 7,
            ok: true,
        },
    ] {
        assert!(f.handle(e, at(0)).is_empty());
    }
    assert_eq!(f.targets()[0].phase, Phase::Running);
}

#[test]
fn a_fleet_stage_runs_once_every_live_target_of_the_wave_reached_it() {
    // concurrency 1: a target waiting at the fleet stage gives its slot to the next.
    run(
        fleet(settings(RollbackFailed, 1), &["eu", "us", "ap@1"]),
        &["start eu"],
        &[
            ("changed eu", &[]),
            ("reached eu", &["start us"]),
            ("reached us", &["stage 0: eu us"]),
            ("passed eu", &["start eu"]),
            ("passed us", &[]),
            // A bake holds its slot.
            ("healthy eu", &[]),
            ("baked eu", &["start us"]),
            ("healthy us", &[]),
            ("baked us", &["start ap"]),
            ("healthy ap", &[]),
            (
                "baked ap",
                &["end eu: deployed", "end us: deployed", "end ap: deployed"],
            ),
        ],
        &["eu=deployed", "us=deployed", "ap=deployed"],
    );
}

#[test]
fn a_target_that_failed_before_the_fleet_stage_does_not_take_part() {
    run(
        fleet(settings(RollbackFailed, 8), &["eu", "us"]),
        &["start eu", "start us"],
        &[
            ("changed eu", &[]),
            ("failed us", &["end us: failed"]),
            ("reached eu", &["stage 0: eu"]),
            ("passed eu", &["start eu"]),
            ("healthy eu", &[]),
            ("baked eu", &["end eu: deployed"]),
        ],
        &["eu=deployed", "us=failed"],
    );
}

#[test]
fn rollback_all_rolls_back_a_target_waiting_at_the_fleet_stage() {
    run(
        fleet(settings(RollbackAll, 8), &["eu", "us"]),
        &["start eu", "start us"],
        &[
            ("changed eu", &[]),
            ("reached eu", &[]),
            ("changed us", &[]),
            (
                "failed us",
                &[
                    "rollback us: failed",
                    "rollback eu: policy rollback-all: us failed at 22:13:23",
                ],
            ),
            ("rolled-back us", &[]),
            ("rolled-back eu", &[]),
        ],
        &["eu=rolled-back", "us=rolled-back"],
    );
}

#[test]
fn a_fleet_stage_failing_fails_its_targets_and_a_cancel_in_it_stops_them() {
    run(
        fleet(settings(RollbackFailed, 8), &["eu", "us"]),
        &["start eu", "start us"],
        &[
            ("changed eu", &[]),
            ("reached eu", &[]),
            ("changed us", &[]),
            ("reached us", &["stage 0: eu us"]),
            ("failed eu", &["rollback eu: failed"]),
            ("failed us", &["rollback us: failed"]),
            ("rolled-back eu", &[]),
            ("rolled-back us", &[]),
        ],
        &["eu=rolled-back", "us=rolled-back"],
    );
    run(
        fleet(settings(RollbackFailed, 8), &["eu", "us"]),
        &["start eu", "start us"],
        &[
            ("changed eu", &[]),
            ("reached eu", &[]),
            ("reached us", &["stage 0: eu us"]),
            ("cancel", &[]),
            (
                "stopped eu",
                &["rollback eu: cancelled by SIGINT (on_cancel: rollback)"],
            ),
            ("stopped us", &["end us: cancelled"]),
            ("rolled-back eu", &[]),
        ],
        &["eu=rolled-back", "us=cancelled"],
    );
}

/// Past `rollbacks_at_once` (what the memory budget holds), a rollback waits for a running one
/// to end, in config order; the bound counts rollbacks only (the deploy's slots are apart).
#[test]
fn rollbacks_wait_for_a_turn_past_the_memory_budget() {
    let policy_why = "policy rollback-all: us failed at 22:13:24"; // step 4
    let mut bounded = settings(RollbackAll, 8);
    bounded.rollbacks_at_once = 2;
    run(
        fleet(bounded, &["eu", "us", "ap", "sa"]),
        &["start eu", "start us", "start ap", "start sa"],
        &[
            ("changed eu", &[]),
            ("changed ap", &[]),
            ("changed sa", &[]),
            ("changed us", &[]),
            // us rolls back, eu takes the second turn; ap and sa stop, then wait.
            (
                "failed us",
                &["rollback us: failed", "stop eu", "stop ap", "stop sa"],
            ),
            ("stopped eu", &[&format!("rollback eu: {policy_why}")]),
            ("stopped ap", &[]),
            ("stopped sa", &[]),
            ("rolled-back us", &[&format!("rollback ap: {policy_why}")]),
            (
                "rollback-failed eu",
                &[&format!("rollback sa: {policy_why}")],
            ),
            ("rolled-back sa", &[]),
            ("rolled-back ap", &[]),
        ],
        &[
            "eu=rollback-failed",
            "us=rolled-back",
            "ap=rolled-back",
            "sa=rolled-back",
        ],
    );
}
