use super::*;
use crate::release::{ReleaseRecord, RunInfo};

fn ts(s: &str) -> Timestamp {
    s.parse().expect("timestamp")
}

fn commit(sha: &str, message: Option<&str>) -> CommitInfo {
    CommitInfo {
        sha: sha.into(),
        r#ref: None,
        message: message.map(str::to_string),
        dirty: false,
    }
}

fn rec(revision: u64, status: ReleaseStatus, sha: &str) -> ReleaseRecord {
    ReleaseRecord {
        commit: Some(commit(sha, Some("bump web"))),
        started_at: ts("2026-12-01T09:00:00Z"),
        finished_at: Some(ts("2026-12-01T09:01:00Z")),
        run: RunInfo {
            url: None,
            host: "ci-7".into(),
            id: None,
        },
        ..ReleaseRecord::for_test(revision, status)
    }
}

fn obj(object: &str, status: &str) -> ObjectHealth {
    ObjectHealth {
        object: object.into(),
        status: status.into(),
        reason: None,
        message: format!("{object} is {status}"),
    }
}

fn healthy() -> Option<Result<Vec<ObjectHealth>, ApplyError>> {
    Some(Ok(vec![
        obj("ConfigMap shop/cfg", "Current"),
        obj("Deployment shop/web", "Current"),
    ]))
}

const A: &str = "a1b2c3d4e5f60718293a4b5c6d7e8f9012345678";
const B: &str = "e4f5a6b7c8d90718293a4b5c6d7e8f9012345678";

fn row(target: &str, records: Vec<ReleaseRecord>) -> TargetStatus {
    let observed = Observed {
        records,
        objects: healthy(),
        ..Observed::default()
    };
    build_row(
        target,
        Ok(observed),
        &HashMap::new(),
        ts("2026-12-01T10:00:00Z"),
    )
}

fn down(target: &str) -> TargetStatus {
    build_row(
        target,
        Err(StatusError::Unreachable(
            crate::cluster::connect::TargetError::new(
                "ConnectionRefused",
                "connection to https://127.0.0.1:1/ refused",
            ),
        )),
        &HashMap::new(),
        ts("2026-12-01T10:00:00Z"),
    )
}

#[test]
fn rows_from_records() {
    // (case, records, revision, on last good, last good)
    type Case = (
        &'static str,
        Vec<ReleaseRecord>,
        Option<u64>,
        bool,
        Option<u64>,
    );
    let cases: Vec<Case> = vec![
        ("no release", vec![], None, false, None),
        (
            "deployed",
            vec![
                rec(1, ReleaseStatus::Superseded, A),
                rec(2, ReleaseStatus::Deployed, A),
            ],
            Some(2),
            true,
            Some(2),
        ),
        (
            "failed, left as it was",
            vec![
                rec(1, ReleaseStatus::Deployed, A),
                rec(2, ReleaseStatus::Failed, B),
            ],
            Some(2),
            false,
            Some(1),
        ),
        (
            "a deploy running",
            vec![
                rec(1, ReleaseStatus::Deployed, A),
                rec(2, ReleaseStatus::Pending, B),
            ],
            Some(2),
            false,
            Some(1),
        ),
    ];
    for (case, records, revision, on_last_good, last_good) in cases {
        let r = row("eu", records);
        assert!(r.reachable, "{case}");
        assert_eq!(r.revision, revision, "{case}");
        assert_eq!(r.on_last_good, on_last_good, "{case}");
        assert_eq!(r.last_good, last_good, "{case}");
    }
    let r = row("eu", vec![rec(1, ReleaseStatus::Deployed, A)]);
    assert_eq!(r.deployed_at, Some(ts("2026-12-01T09:01:00Z")));
    assert_eq!(r.deployed_by.as_deref(), Some("ci-7"));
    let mut in_ci = rec(1, ReleaseStatus::Deployed, A);
    in_ci.run.url = Some("https://github.com/o/r/actions/runs/9".into());
    let r = row("eu", vec![in_ci]);
    assert_eq!(
        r.deployed_by.as_deref(),
        Some("https://github.com/o/r/actions/runs/9")
    );
    // Objects that could not be read: the health is unknown, and says why.
    let observed = Observed {
        records: vec![rec(1, ReleaseStatus::Deployed, A)],
        objects: Some(Err(ApplyError::UnservedKinds(vec![
            "example.com/v1 Widget".into(),
        ]))),
        ..Observed::default()
    };
    let r = build_row(
        "eu",
        Ok(observed),
        &HashMap::new(),
        ts("2026-12-01T10:00:00Z"),
    );
    let health = r.health.expect("a revision has a health");
    assert_eq!(health.verdict, Verdict::Unknown);
    assert!(
        health
            .summary
            .contains("does not serve example.com/v1 Widget"),
        "{}",
        health.summary
    );
    assert_eq!(
        exit_code(&[row("us", vec![rec(1, ReleaseStatus::Deployed, A)])]),
        0
    );
    let r = down("ap");
    assert!(!r.reachable && r.revision.is_none());
    assert!(r.error.as_deref().is_some_and(|e| e.contains("refused")));
}

#[test]
fn a_subject_from_git_fills_a_record_without_one() {
    let mut bare = rec(1, ReleaseStatus::Deployed, A);
    bare.commit = Some(commit(A, None));
    let subjects = HashMap::from([(A.to_string(), "from git".to_string())]);
    let observed = Observed {
        records: vec![bare],
        ..Observed::default()
    };
    let r = build_row("eu", Ok(observed), &subjects, ts("2026-12-01T10:00:00Z"));
    assert_eq!(
        r.commit.and_then(|c| c.message).as_deref(),
        Some("from git")
    );
}

#[test]
fn lock_held_or_expired() {
    let lease = |holder: Option<&str>, renewed: &str| LeaseState {
        holder: holder.map(str::to_string),
        acquired_at: Some(ts("2026-12-01T09:00:00Z")),
        renewed_at: Some(ts(renewed)),
        duration_seconds: 60,
        transitions: 0,
    };
    let now = ts("2026-12-01T09:10:00Z");
    // (holder, renewed at, shown, expired)
    let cases = [
        (Some("ci#1@h:1"), "2026-12-01T09:09:30Z", true, false),
        (Some("ci#1@h:1"), "2026-12-01T09:05:00Z", true, true),
        (None, "2026-12-01T09:09:30Z", false, false),
    ];
    for (holder, renewed, shown, expired) in cases {
        let got = lock_status(&lease(holder, renewed), now);
        assert_eq!(got.is_some(), shown, "{holder:?} {renewed}");
        if let Some(l) = got {
            assert_eq!(l.expired, expired, "{renewed}");
            assert_eq!(l.since, Some(ts("2026-12-01T09:00:00Z")));
        }
    }
}

#[test]
fn health_is_the_worst_object() {
    // (statuses, verdict, summary contains)
    let cases: &[(&[&str], Verdict, &str)] = &[
        (&[], Verdict::Healthy, "healthy"),
        (&["Current", "Current"], Verdict::Healthy, "healthy"),
        (
            &["Current", "InProgress"],
            Verdict::Progressing,
            "progressing: o1 InProgress",
        ),
        (
            &["InProgress", "Failed", "NotFound"],
            Verdict::Unhealthy,
            "unhealthy: o1 Failed: o1 is Failed (+2 more)",
        ),
        (&["Unknown", "InProgress"], Verdict::Unknown, "unknown: o0"),
    ];
    for (statuses, verdict, summary) in cases {
        let objects = statuses
            .iter()
            .enumerate()
            .map(|(i, s)| obj(&format!("o{i}"), s))
            .collect();
        let h = health_of(objects);
        assert_eq!(h.verdict, *verdict, "{statuses:?}");
        assert!(h.summary.contains(summary), "{statuses:?}: {}", h.summary);
    }
    let mut failed = obj("Deployment shop/web", "Failed");
    failed.reason = Some("ProgressDeadlineExceeded".into());
    let h = health_of(vec![failed]);
    assert!(
        h.summary
            .starts_with("unhealthy: Deployment shop/web Failed (ProgressDeadlineExceeded)"),
        "{}",
        h.summary
    );
}

#[test]
fn the_mixed_fleet_line() {
    let on = |t: &str, sha: &str| row(t, vec![rec(1, ReleaseStatus::Deployed, sha)]);
    // (rows, line)
    let cases: Vec<(Vec<TargetStatus>, Option<&str>)> = vec![
        (vec![on("eu", A), on("us", A)], None),
        (
            vec![on("eu", A), on("ap", B), on("us", A)],
            Some("2 versions across 3 targets: a1b2c3d on eu, us; e4f5a6b on ap"),
        ),
        (
            vec![on("eu", B), on("us", A)],
            Some("2 versions across 2 targets: e4f5a6b on eu; a1b2c3d on us"),
        ),
        (
            vec![on("eu", A), row("us", vec![])],
            Some("1 version across 2 targets: a1b2c3d on eu; no recorded commit on us"),
        ),
        // An unreachable target runs nothing we know: not a version.
        (vec![on("eu", A), down("ap")], None),
    ];
    for (rows, line) in cases {
        let versions = fleet_versions(&rows);
        assert_eq!(mixed_fleet_line(&versions).as_deref(), line);
    }
}

#[test]
fn the_exit_decision() {
    let good = |t: &str| row(t, vec![rec(1, ReleaseStatus::Deployed, A)]);
    let mut unhealthy = good("us");
    unhealthy.health = Some(health_of(vec![obj("Deployment shop/web", "Failed")]));
    let mut drifted = good("us");
    drifted.drift = Some(Drift {
        drifted: true,
        changed: vec![],
        missing: vec!["ConfigMap shop/cfg".into()],
        errors: vec![],
    });
    let mut clean = good("us");
    clean.drift = Some(Drift {
        drifted: false,
        changed: vec![],
        missing: vec![],
        errors: vec![],
    });
    let mut no_health = good("us");
    no_health.health = None;
    // (case, rows, code)
    let cases: Vec<(&str, Vec<TargetStatus>, i32)> = vec![
        ("all good", vec![good("eu"), good("us")], 0),
        ("no targets", vec![], 0),
        ("no drift", vec![good("eu"), clean], 0),
        ("one down", vec![good("eu"), down("us")], 1),
        ("one unhealthy", vec![good("eu"), unhealthy], 1),
        ("one drifted", vec![good("eu"), drifted], 1),
        ("health unread", vec![good("eu"), no_health], 1),
        (
            "two commits",
            vec![
                good("eu"),
                row("us", vec![rec(1, ReleaseStatus::Deployed, B)]),
            ],
            1,
        ),
        (
            "not on last good",
            vec![
                good("eu"),
                row(
                    "us",
                    vec![
                        rec(1, ReleaseStatus::Deployed, A),
                        rec(2, ReleaseStatus::Failed, A),
                    ],
                ),
            ],
            1,
        ),
        ("no release", vec![good("eu"), row("us", vec![])], 1),
    ];
    for (case, rows, code) in cases {
        assert_eq!(exit_code(&rows), code, "{case}");
    }
}

#[test]
fn the_table_fits_the_width() {
    let mut failed = rec(2, ReleaseStatus::Failed, B);
    failed.commit = Some(commit(B, Some(&"a long subject ".repeat(10))));
    failed.run.url = Some(format!(
        "https://github.com/owner/repo/actions/runs/{}",
        "9".repeat(30)
    ));
    let mut eu = row("eu", vec![rec(1, ReleaseStatus::Deployed, A), failed]);
    eu.health = Some(health_of(vec![obj(
        "Deployment shop/web",
        &format!("Failed{}", "x".repeat(100)),
    )]));
    eu.lock = Some(LockStatus {
        holder: Some("owner/repo#123.1@runner-abcdef:4242".into()),
        since: Some(ts("2026-12-01T09:00:00Z")),
        expires_at: None,
        expired: false,
    });
    let rows = vec![
        eu,
        row("us", vec![rec(1, ReleaseStatus::Deployed, A)]),
        down("ap"),
    ];
    for width in [80, 120, 200] {
        let text = status_table(&rows, true, width);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 4, "{text}");
        for line in &lines {
            assert!(display_width(line) <= width, "{width}: {line}");
        }
        assert!(lines[0].contains("TARGET") && lines[0].contains("DRIFT"));
        assert!(lines[1].contains("v2 failed"), "{text}");
        assert!(lines[3].contains("ap") && lines[3].contains("unreachable: Connection"));
    }
    let wide = status_table(&rows, false, 1000);
    let lines: Vec<&str> = wide.lines().collect();
    assert!(!lines[0].contains("DRIFT"));
    assert!(
        lines[1].contains("v1 (a1b2c3d)"),
        "last good differs: {wide}"
    );
    assert!(
        lines[1].contains("held by owner/repo#123.1@runner-abcdef:4242 since 2026-12-01 09:00Z")
    );
    assert!(
        lines[2].contains("a1b2c3d bump web") && lines[2].contains("2026-12-01 09:01Z by ci-7")
    );
    assert!(
        lines[2].contains("free") && lines[2].ends_with("healthy"),
        "{wide}"
    );
}

#[test]
fn drift_from_a_plan() {
    use crate::report::plan::PlannedChange;
    let change = |object: &str, diff: Option<&str>| PlannedChange {
        object: object.into(),
        origin: None,
        note: None,
        diff: diff.map(str::to_string),
    };
    let mut plan = TargetPlan::new("eu");
    assert!(!drift_of(&plan).drifted, "nothing to change is no drift");
    plan.update.push(change(
        "Deployment shop/web",
        Some("-  replicas: 5\n+  replicas: 2\n"),
    ));
    plan.create.push(change("ConfigMap shop/web-config", None));
    plan.unchanged.push("Secret shop/db".into());
    let d = drift_of(&plan);
    assert!(d.drifted);
    assert_eq!(d.changed[0].object, "Deployment shop/web");
    assert_eq!(d.missing, vec!["ConfigMap shop/web-config"]);
    let mut eu = row("eu", vec![rec(3, ReleaseStatus::Deployed, A)]);
    eu.drift = Some(d);
    let text = drift_text(&[eu, row("us", vec![])], DiffStyle::plain());
    assert!(
        text.starts_with("target eu: drift from v3 (1 changed, 1 missing):"),
        "{text}"
    );
    assert!(text.contains("  ~ Deployment shop/web: changed in the cluster\n    -  replicas: 5"));
    assert!(text.contains("  - ConfigMap shop/web-config: missing (declared by v3"));
    assert!(!text.contains("target us"), "{text}");
}

#[test]
fn the_document_has_a_stable_shape() {
    let rows = vec![
        row("eu", vec![rec(1, ReleaseStatus::Deployed, A)]),
        down("ap"),
    ];
    let doc = document("shop", rows);
    let value = serde_json::to_value(&doc).expect("json");
    assert_eq!(value["version"], 1);
    assert_eq!(value["exit_code"], 1);
    assert_eq!(value["mixed"], Value::Null);
    let keys = |v: &Value| {
        let mut k: Vec<String> = v.as_object().expect("object").keys().cloned().collect();
        k.sort();
        k
    };
    // A reachable row and an unreachable one have the same keys.
    assert_eq!(keys(&value["targets"][0]), keys(&value["targets"][1]));
    for key in [
        "target",
        "reachable",
        "error",
        "revision",
        "status",
        "commit",
        "deployed_at",
        "deployed_by",
        "last_good",
        "on_last_good",
        "lock",
        "health",
        "drift",
    ] {
        assert!(value["targets"][1].get(key).is_some(), "{key}");
    }
    assert_eq!(value["targets"][0]["status"], "deployed");
    assert_eq!(value["targets"][0]["health"]["verdict"], "healthy");
    assert_eq!(value["versions"][0]["targets"], json!(["eu"]));
    let yaml = render_document(&doc, StatusFormat::Yaml).expect("yaml");
    let back: Value = serde_saphyr::from_str(&yaml).expect("parses");
    assert_eq!(back["targets"][0]["target"], "eu");
}

#[test]
fn a_row_without_figures_says_what_kind_of_problem_it_is() {
    let row = |error: StatusError| {
        build_row(
            "eu",
            Err(error),
            &HashMap::new(),
            ts("2026-12-01T10:00:00Z"),
        )
        .error
        .unwrap_or_default()
    };
    let target = |reason: &str| {
        StatusError::Unreachable(crate::cluster::connect::TargetError::new(reason, "why"))
    };
    // (reason of the first contact, the row's start)
    for (reason, start) in [
        ("Unauthorized", "credentials refused: "),
        ("Forbidden", "access denied: "),
        ("ContextNotFound", "not configured: "),
        ("ConnectionRefused", "unreachable: "),
        ("Timeout", "unreachable: "),
    ] {
        let text = row(target(reason));
        assert!(text.starts_with(start), "{reason}: {text}");
    }
    let late = row(StatusError::Deadline(Duration::from_secs(5)));
    assert!(late.starts_with("timed out: no answer within 5s"), "{late}");
}

#[test]
fn targets_read_at_once_follow_the_deploys_rule() {
    let config = |extra: &str| {
        crate::config::parse(
            &format!("app: shop\nnamespace: shop\nmanifests: [k8s/]\n{extra}targets:\n  - {{name: eu, context: a}}\n"),
            std::path::Path::new("rollguard.yaml"),
            &crate::config::Overrides::default(),
            &|_| None,
        )
        .unwrap_or_else(|e| panic!("{e}"))
    };
    // (config lines, objects of the largest current revision, targets at once)
    let cases = [
        // 512 MiB / 256 KiB: a fleet of 1,000 small targets at once, not 16 at a time.
        ("", 0, 2048),
        // With --drift each target holds its revision's objects: 512 MiB / (256 + 100 x 8 KiB).
        ("", 100, 496),
        ("memory_budget: 64Mi\n", 0, 256),
        ("concurrency: 3\n", 0, 3),
        ("concurrency: 3\n", 100, 3),
    ];
    for (extra, objects, want) in cases {
        assert_eq!(
            targets_at_once(&config(extra), objects),
            want,
            "{extra:?} {objects}"
        );
    }
}
