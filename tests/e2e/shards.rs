//! Issue 25.5: a fleet split over a CI job matrix. Three `rollguard deploy --shard I/3`
//! processes over nine kube-sim clusters, `report merge` of their reports, and `conclude`
//! applying the failure policy across the shards.

use std::path::Path;

use rollguard::util::shard::owner;
use serde_json::Value;

use crate::harness::{Run, TestEnv, rollguard, small_app};
use crate::release::{GOOD, assert_runs, first_good_deploy, image, records, web};

const BAD: &str = "example.com/web:v2";

/// Nine target names, three in each shard of 3 (by the deploy's own hashing), in config
/// order: the shards' slices are as even as the test needs, whatever the hash.
fn nine_names() -> Vec<String> {
    let mut taken = [0; 3];
    let mut names = Vec::new();
    for i in 0.. {
        let name = format!("edge-{i:02}");
        let shard = owner(&name, 3) as usize - 1;
        if taken[shard] < 3 {
            taken[shard] += 1;
            names.push(name);
        }
        if names.len() == 9 {
            break;
        }
    }
    names
}

/// `app: shop` with the targets on sim-1.. in order and `extra` top-level settings.
fn fleet_config(names: &[String], extra: &str) -> String {
    let mut text =
        String::from("app: shop\nnamespace: shop\nmanifests: [k8s/]\nwait:\n  timeout: 60s\n");
    text.push_str(extra);
    text.push_str("targets:\n");
    for (i, name) in names.iter().enumerate() {
        text.push_str(&format!("  - {{name: {name}, context: sim-{}}}\n", i + 1));
    }
    text
}

/// Runs the three shards at once, as three matrix jobs: each its own process and report
/// (`reports/shard-I/report.json`), in GitHub Actions with a step summary file it must
/// leave alone.
async fn deploy_in_three_shards(env: &TestEnv) -> Vec<Run> {
    let mut children = Vec::new();
    for index in 1..=3 {
        let report = format!("reports/shard-{index}/report.json");
        env.write(&report, "");
        let shard = format!("{index}/3");
        let summary = env.path(&format!("summary-{index}.md"));
        let summary = summary.display().to_string();
        let child = env.spawn_deploy_to(
            &report,
            &[
                ("ROLLGUARD_SHARD", shard.as_str()),
                ("GITHUB_ACTIONS", "true"),
                ("GITHUB_STEP_SUMMARY", summary.as_str()),
            ],
        );
        children.push((report, child));
    }
    let mut runs = Vec::new();
    for (report, child) in children {
        runs.push(env.finish(child, &report).await);
    }
    runs
}

fn merge_args(env: &TestEnv, dir: &str, out: &str, config: bool) -> Vec<String> {
    let mut args = vec![
        "report".to_string(),
        "merge".into(),
        env.path(dir).display().to_string(),
        "--out".into(),
        env.path(out).display().to_string(),
        "--no-github".into(),
    ];
    if config {
        args.extend([
            "--config".into(),
            env.path("rollguard.yaml").display().to_string(),
        ]);
    }
    args
}

fn read_json(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}: {text}", path.display()))
}

fn rows(report: &Value) -> Vec<(String, String)> {
    report["targets"]
        .as_array()
        .map(|ts| {
            ts.iter()
                .map(|t| {
                    let s = |k: &str| t[k].as_str().unwrap_or_default().to_string();
                    (s("name"), s("outcome"))
                })
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_shards_merge_into_one_report_and_conclude_rolls_the_others_back() {
    let names = nine_names();
    // The first target of shard 2 cannot pull the new image.
    let failing = names
        .iter()
        .position(|n| owner(n, 3) == 2)
        .expect("shard 2 has targets");
    let rules = format!(
        "- {{cluster: sim-{}, image: \"{BAD}\", behaviour: ImagePullBackOff}}\n- {{image: \"*\", behaviour: Ready}}\n",
        failing + 1
    );
    let env = TestEnv::start(9, &rules).await;
    env.write("rollguard.yaml", &fleet_config(&names, ""));
    first_good_deploy(&env).await;
    env.write("k8s/app.yaml", &small_app(BAD));

    let runs = deploy_in_three_shards(&env).await;
    for (i, run) in runs.iter().enumerate() {
        let index = i as u32 + 1;
        let want = if index == 2 { 1 } else { 0 };
        assert_eq!(run.code, want, "shard {index}: {}", run.output());
        assert!(
            run.stderr.contains(&format!(
                "shard {index}/3: no PR comment, step summary or Deployments from this job"
            )),
            "{}",
            run.output()
        );
        assert_eq!(
            env.read(&format!("summary-{index}.md")),
            "",
            "shard {index} wrote a step summary"
        );
        let report = run.report.as_ref().expect("each shard writes its report");
        assert_eq!(report["shard"]["index"], index);
        assert_eq!(report["shard"]["count"], 3);
        // Exactly its own three targets.
        let mine: Vec<String> = names
            .iter()
            .filter(|n| owner(n, 3) == index)
            .cloned()
            .collect();
        let got: Vec<String> = rows(report).into_iter().map(|(n, _)| n).collect();
        assert_eq!(got, mine, "shard {index}");
    }
    // The failing shard's policy rolled back its own targets.
    assert_eq!(runs[1].outcome(&names[failing]), "rolled-back");

    // One report of nine rows in config order, exit code as a whole-fleet run's.
    let summary = env.path("summary.md").display().to_string();
    let merge = rollguard(
        &merge_args(&env, "reports", "merged.json", true),
        env.dir.path(),
        &[
            ("GITHUB_ACTIONS", "true"),
            ("GITHUB_STEP_SUMMARY", summary.as_str()),
        ],
    )
    .await;
    assert_eq!(merge.code, 1, "{}", merge.output());
    let merged = read_json(&env.path("merged.json"));
    let merged_rows = rows(&merged);
    let order: Vec<&String> = merged_rows.iter().map(|(n, _)| n).collect();
    assert_eq!(order, names.iter().collect::<Vec<_>>());
    for (name, outcome) in &merged_rows {
        let want = if owner(name, 3) == 2 {
            "rolled-back"
        } else {
            "deployed"
        };
        assert_eq!(outcome, want, "{name}: {}", merge.output());
    }
    assert_eq!(merged["outcome"], "rolled-back");
    assert!(merged.get("shard").is_none(), "{merged:#}");
    // Written into the folder it reads, the merged report is not taken for a shard's.
    let again = rollguard(
        &merge_args(&env, "reports", "reports/merged.json", false),
        env.dir.path(),
        &[],
    )
    .await;
    assert_eq!(again.code, 1, "{}", again.output());
    assert_eq!(rows(&read_json(&env.path("reports/merged.json"))).len(), 9);
    // Nor when another merge (or conclude, below) reads that folder.
    let again = rollguard(
        &merge_args(&env, "reports", "merged-again.json", false),
        env.dir.path(),
        &[],
    )
    .await;
    assert_eq!(again.code, 1, "{}", again.output());
    assert_eq!(rows(&read_json(&env.path("merged-again.json"))).len(), 9);
    assert!(
        again
            .stderr
            .contains("merged.json: the report of a run without --shard"),
        "{}",
        again.output()
    );
    let step_summary = env.read("summary.md");
    for name in &names {
        assert!(
            step_summary.contains(name.as_str()),
            "{name}: {step_summary}"
        );
    }

    // rollback-failed: each shard's policy has decided, nothing more to do.
    let deployed: Vec<usize> = (0..9).filter(|i| owner(&names[*i], 3) != 2).collect();
    let reports = env.path("reports").display().to_string();
    let keep = env
        .command(
            "conclude",
            &["--reports", &reports, "--on-failure", "rollback-failed"],
        )
        .await;
    assert_eq!(keep.code, 0, "{}", keep.output());
    assert!(
        keep.stdout.contains("nothing to roll back"),
        "{}",
        keep.output()
    );
    for &i in &deployed {
        assert_eq!(image(&web(&env, i + 1).await), BAD, "{}", names[i]);
    }

    // rollback-all (the config's): the six targets the other shards deployed go back.
    let conclude = env.command("conclude", &["--reports", &reports]).await;
    assert_eq!(conclude.code, 0, "{}", conclude.output());
    for &i in &deployed {
        let name = &names[i];
        assert!(
            conclude.stdout.contains(&format!(
                "{name}: rolling back to its last good release: on_failure is rollback-all and {} rolled-back",
                names[failing]
            )),
            "{name}: {}",
            conclude.output()
        );
        assert!(
            conclude
                .stdout
                .contains(&format!("{name}: rolled-back to v1")),
            "{name}: {}",
            conclude.output()
        );
        assert_runs(&env, i + 1, GOOD).await;
        // v1 good, v2 the shard's deploy, v3 the rollback to v1.
        let revisions: Vec<u64> = records(&env, i + 1)
            .await
            .iter()
            .map(|r| r.revision)
            .collect();
        assert_eq!(revisions, [1, 2, 3], "{name}");
    }
    for i in (0..9).filter(|i| !deployed.contains(i)) {
        let name = &names[i];
        assert!(
            conclude.stdout.contains(&format!(
                "{name}: nothing to do: rolled-back in its own shard"
            )),
            "{}",
            conclude.output()
        );
        assert_runs(&env, i + 1, GOOD).await;
    }

    // A re-run of the conclude job rolls nothing back again: each target's newest release
    // is the rollback now, not what its shard deployed.
    let again = env.command("conclude", &["--reports", &reports]).await;
    assert_eq!(again.code, 0, "{}", again.output());
    assert!(
        again
            .stdout
            .contains("rollguard conclude: nothing to roll back"),
        "{}",
        again.output()
    );
    for &i in &deployed {
        assert!(
            again.stdout.contains(&format!(
                "{}: nothing to do: its newest release is v3, not v2 that its shard deployed",
                names[i]
            )),
            "{}",
            again.output()
        );
        assert_eq!(records(&env, i + 1).await.len(), 3, "{}", names[i]);
    }

    // A shard that never reported (its job was cancelled) counts as failed, with its
    // targets when the config names them.
    for index in [1, 2] {
        let from = env.path(&format!("reports/shard-{index}/report.json"));
        env.write(
            &format!("partial/shard-{index}.json"),
            &std::fs::read_to_string(from).expect("the shard's report"),
        );
    }
    let partial = rollguard(
        &merge_args(&env, "partial", "partial.json", true),
        env.dir.path(),
        &[],
    )
    .await;
    assert_eq!(partial.code, 1, "{}", partial.output());
    assert!(
        partial.stderr.contains("shard 3/3 wrote no report"),
        "{}",
        partial.output()
    );
    let merged = read_json(&env.path("partial.json"));
    assert_eq!(rows(&merged).len(), 9, "{merged:#}");
    for (name, outcome) in rows(&merged) {
        if owner(&name, 3) == 3 {
            assert_eq!(outcome, "failed", "{name}");
        }
    }
    let without_config = rollguard(
        &merge_args(&env, "partial", "partial.json", false),
        env.dir.path(),
        &[],
    )
    .await;
    assert_eq!(without_config.code, 1, "{}", without_config.output());
    let merged = read_json(&env.path("partial.json"));
    assert!(
        rows(&merged).contains(&("shard 3/3".to_string(), "failed".to_string())),
        "{merged:#}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_shard_succeeds_and_a_bad_shard_is_refused() {
    let env = TestEnv::start(2, "- {image: \"*\", behaviour: Ready}\n").await;
    let names = vec!["eu".to_string(), "us".to_string()];
    env.write("rollguard.yaml", &fleet_config(&names, ""));
    env.write("k8s/app.yaml", &small_app(GOOD));
    let empty = (1..=20)
        .find(|i| names.iter().all(|n| owner(n, 20) != *i))
        .expect("some shard of 20 has neither target");
    let shard = format!("{empty}/20");
    let run = env.deploy(&["--shard", &shard]).await;
    assert_eq!(run.code, 0, "{}", run.output());
    assert!(
        run.stdout.contains(&format!("shard {shard} has no target")),
        "{}",
        run.output()
    );
    let report = run
        .report
        .as_ref()
        .expect("an empty shard writes its report");
    assert_eq!(report["shard"]["index"], empty);
    assert_eq!(rows(report), Vec::<(String, String)>::new());
    assert_eq!(
        env.writes(1) + env.writes(2),
        0,
        "an empty shard writes nothing"
    );
    // A plan job's `diff --shard` of that slice: the same, and no plan comment from it.
    let plan = env.command("diff", &["--shard", &shard]).await;
    assert_eq!(plan.code, 0, "{}", plan.output());
    assert!(
        plan.stdout
            .contains(&format!("shard {shard} has no target"))
            && plan.stderr.contains("no plan comment from this job"),
        "{}",
        plan.output()
    );

    for (bad, says) in [
        ("4/3", "shards count from 1 to N"),
        ("1/0", "there are no shards"),
        ("2", "is not I/N"),
    ] {
        let run = env.deploy(&["--shard", bad]).await;
        assert_eq!(run.code, 2, "{bad}: {}", run.output());
        assert!(run.stderr.contains(says), "{bad}: {}", run.output());
        let run = env.deploy_with_env(&[], &[("ROLLGUARD_SHARD", bad)]).await;
        assert_eq!(run.code, 2, "{bad}: {}", run.output());
        assert!(
            run.stderr.contains("$ROLLGUARD_SHARD") && run.stderr.contains(says),
            "{bad}: {}",
            run.output()
        );
    }
}
