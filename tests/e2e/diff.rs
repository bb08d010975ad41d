//! Dry runs and plans (issue 13): `rollguard diff`, `deploy --dry-run`, `plan --offline`,
//! `rollback --dry-run`, against three kube-sim clusters; nothing written, no secret shown.

use base64::Engine;
use serde_json::Value;

use crate::harness::{Run, TestEnv, config, git, small_app};

const V1: &str = "example.com/web:v1";
const V2: &str = "example.com/web:v2";

/// Deploys `manifests` for real to every cluster and checks it worked.
async fn deployed(env: &TestEnv, manifests: &str) {
    env.write("k8s/app.yaml", manifests);
    let run = env.deploy(&[]).await;
    assert_eq!(run.code, 0, "{}", run.output());
}

/// Writes (of any kind, dry runs aside) on every cluster.
fn writes(env: &TestEnv, clusters: usize) -> Vec<u64> {
    (1..=clusters).map(|n| env.writes(n)).collect()
}

fn json_plan(run: &Run) -> Value {
    serde_json::from_str(&run.stdout).unwrap_or_else(|e| panic!("-o json: {e}\n{}", run.output()))
}

/// Lines of the diff that remove and add the image.
fn image_lines(text: &str, from: &str, to: &str) -> (usize, usize) {
    let removed = text
        .lines()
        .filter(|l| l.trim_start().starts_with('-') && l.contains(&format!("image: {from}")))
        .count();
    let added = text
        .lines()
        .filter(|l| l.trim_start().starts_with('+') && l.contains(&format!("image: {to}")))
        .count();
    (removed, added)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_image_change_is_one_update_per_target_and_exit_2() {
    let env = TestEnv::start(3, "").await;
    env.write("rollguard.yaml", &config(3, "60s"));
    deployed(&env, &small_app(V1)).await;
    env.write("k8s/app.yaml", &small_app(V2));
    let before = writes(&env, 3);

    let run = env.command("diff", &["--exit-code"]).await;
    assert_eq!(
        run.code,
        2,
        "changes exit 2 under --exit-code:\n{}",
        run.output()
    );
    for name in ["eu", "us", "ap"] {
        assert!(
            run.stdout.contains(&format!(
                "target {name}: 0 to create, 1 to update, 1 unchanged\n"
            )),
            "{}",
            run.output()
        );
    }
    // The same change on the three targets is said once, with their names.
    assert_eq!(
        run.stdout
            .matches("  ~ Deployment shop/web on eu, us, ap")
            .count(),
        1,
        "{}",
        run.output()
    );
    assert_eq!(image_lines(&run.stdout, V1, V2), (1, 1), "{}", run.output());
    assert!(
        run.stdout
            .contains("would change 3 objects on 3 of 3 targets"),
        "{}",
        run.output()
    );
    crate::harness::assert_no_ansi(&run);

    // The JSON plan says the same, per target: one update with the image lines.
    let json = env.command("diff", &["-o", "json"]).await;
    assert_eq!(
        json.code,
        0,
        "without --exit-code a change is 0:\n{}",
        json.output()
    );
    let plan = json_plan(&json);
    assert_eq!(plan["version"], 1);
    assert_eq!(plan["mode"], "dry-run");
    assert_eq!(plan["changes"], 3);
    for target in plan["targets"].as_array().expect("targets") {
        assert_eq!(target["status"], "changes", "{target:#}");
        let updates = target["update"].as_array().expect("update");
        assert_eq!(updates.len(), 1, "{target:#}");
        assert_eq!(updates[0]["object"], "Deployment shop/web");
        let diff = updates[0]["diff"].as_str().expect("diff");
        assert_eq!(image_lines(diff, V1, V2), (1, 1), "{diff}");
        assert!(
            !diff.contains("managedFields") && !diff.contains("resourceVersion"),
            "{diff}"
        );
        assert_eq!(
            target["unchanged"],
            serde_json::json!(["ConfigMap shop/web-config"])
        );
    }

    // `deploy --dry-run` is the same thing.
    let dry = env.deploy(&["--dry-run", "--exit-code"]).await;
    assert_eq!(dry.code, 2, "{}", dry.output());
    assert_eq!(image_lines(&dry.stdout, V1, V2), (1, 1), "{}", dry.output());
    let report = dry.report.as_ref().expect("--report written");
    assert_eq!(report["dry_run"], true);
    assert_eq!(
        report["summary"],
        "would change 3 objects on 3 of 3 targets"
    );
    assert_eq!(report["plan"]["changes"], 3, "the report carries the plan");

    assert_eq!(writes(&env, 3), before, "a dry run writes nothing");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unchanged_app_has_no_changes_and_exit_0() {
    let env = TestEnv::start(3, "").await;
    env.write("rollguard.yaml", &config(3, "60s"));
    deployed(&env, &small_app(V1)).await;
    let before = writes(&env, 3);
    let run = env.command("diff", &["--exit-code"]).await;
    assert_eq!(run.code, 0, "{}", run.output());
    for name in ["eu", "us", "ap"] {
        assert!(
            run.stdout.contains(&format!(
                "target {name}: 0 to create, 0 to update, 2 unchanged\n"
            )),
            "{}",
            run.output()
        );
    }
    assert!(
        !run.stdout.contains("@@"),
        "no diff at all:\n{}",
        run.output()
    );
    assert!(
        run.stdout
            .contains("would change 0 objects on 0 of 3 targets"),
        "{}",
        run.output()
    );
    assert_eq!(writes(&env, 3), before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_change_shows_markers_and_no_value_anywhere() {
    let env = TestEnv::start(3, "").await;
    env.write("rollguard.yaml", &config(3, "60s"));
    let b64 = |v: &str| base64::engine::general_purpose::STANDARD.encode(v);
    let secret = |token: &str, password: &str| {
        format!(
            "---\napiVersion: v1\nkind: Secret\nmetadata:\n  name: db\n  annotations:\n    copy: \"pw={password}\"\n\
             stringData:\n  token: {token}\ndata:\n  password: {}\n",
            b64(password)
        )
    };
    let (old_token, old_password) = ("tok-OLD-4f9a2c7e", "pw-OLD-8d1b6e3a");
    let (new_token, new_password) = ("tok-NEW-17c0de55", "pw-NEW-a93f02bb");
    deployed(
        &env,
        &format!("{}{}", small_app(V1), secret(old_token, old_password)),
    )
    .await;
    env.write(
        "k8s/app.yaml",
        &format!("{}{}", small_app(V1), secret(new_token, new_password)),
    );
    let before = writes(&env, 3);

    let trace = [("RUST_LOG", "trace")];
    let report_path = env.path("plan-report.json");
    let report_arg = report_path.display().to_string();
    let text = env
        .command_env("diff", &["--report", &report_arg], &trace)
        .await;
    assert_eq!(text.code, 0, "{}", text.output());
    let json = env.command_env("diff", &["-o", "json"], &trace).await;
    assert_eq!(json.code, 0, "{}", json.output());
    let report_text = std::fs::read_to_string(&report_path).expect("report written");
    let report: rollguard::report::Report =
        serde_json::from_str(&report_text).expect("the report parses");
    let plan = report.plan.as_ref().expect("the report carries the plan");
    let markdown = rollguard::report::plan_to_markdown(
        &rollguard::report::Clean::new(plan),
        rollguard::report::COMMENT_LIMIT,
    );

    // The change is visible: a marker on each side, per value.
    let marker = |v: &str| rollguard::report::redact::marker(v.as_bytes());
    for side in [old_token, new_token, old_password, new_password] {
        assert!(
            text.stdout.contains(&marker(side)),
            "marker of a value missing:\n{}",
            text.stdout
        );
        assert!(markdown.contains(&marker(side)), "{markdown}");
    }
    assert!(
        text.stdout.contains("  ~ Secret shop/db"),
        "{}",
        text.output()
    );
    assert!(text.stderr.contains("TRACE"), "RUST_LOG=trace took effect");

    // Every byte of every output: no value, in no form.
    let outputs = [
        ("diff stdout", text.stdout.as_str()),
        ("diff stderr at trace", text.stderr.as_str()),
        ("-o json stdout", json.stdout.as_str()),
        ("-o json stderr at trace", json.stderr.as_str()),
        ("JSON report", report_text.as_str()),
        ("markdown", markdown.as_str()),
    ];
    let no_pad = |v: &str| base64::engine::general_purpose::STANDARD_NO_PAD.encode(v);
    for value in [old_token, new_token, old_password, new_password] {
        for form in [value.to_string(), b64(value), no_pad(value)] {
            for (name, output) in outputs {
                assert!(
                    !output.contains(&form),
                    "{form:?} (of a secret value) appears in the {name}"
                );
            }
        }
    }
    assert_eq!(writes(&env, 3), before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crd_and_its_resource_in_one_set_are_listed_and_nothing_is_written() {
    let env = TestEnv::start(3, "").await;
    env.write("rollguard.yaml", &config(3, "60s"));
    env.write(
        "k8s/crd.yaml",
        "apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
spec:
  group: example.com
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget}
  versions:
    - name: v1
      served: true
      storage: true
      schema:
        openAPIV3Schema:
          type: object
          properties:
            spec:
              type: object
              properties:
                size: {type: integer}
---
apiVersion: example.com/v1
kind: Widget
metadata:
  name: w1
spec:
  size: 3
",
    );
    env.write("k8s/app.yaml", &small_app(V1));
    let namespaces: Vec<Vec<String>> = {
        let mut all = Vec::new();
        for n in 1..=3 {
            all.push(env.namespaces(n).await);
        }
        all
    };
    assert!(!namespaces[0].contains(&"shop".to_string()));
    let before = writes(&env, 3);

    let run = env.command("diff", &["--exit-code"]).await;
    assert_eq!(run.code, 2, "{}", run.output());
    assert_eq!(
        run.stdout
            .matches("  + Widget shop/w1 on eu, us, ap (k8s/crd.yaml:")
            .count(),
        1,
        "{}",
        run.output()
    );
    assert!(
        run.stdout
            .contains("would create (CRD not yet on the cluster)"),
        "{}",
        run.output()
    );
    for want in [
        "  + CustomResourceDefinition widgets.example.com",
        "  + Namespace shop on eu, us, ap: would create (created by rollguard before the apply",
        "  + Deployment shop/web",
        "  + ConfigMap shop/web-config",
    ] {
        assert!(run.stdout.contains(want), "{want:?}:\n{}", run.output());
    }
    assert!(
        run.stdout
            .contains("would change 15 objects on 3 of 3 targets"),
        "{}",
        run.output()
    );

    // Nothing written, no namespace, no lock, no release record.
    assert_eq!(writes(&env, 3), before, "no write from a dry run");
    for n in 1..=3 {
        assert_eq!(
            env.namespaces(n).await,
            namespaces[n - 1],
            "no namespace created"
        );
        let counters = env.cluster(n).counters();
        assert!(counters.dry_run_writes() > 0, "the server was asked");
        assert_eq!(counters.get("create", "leases"), 0, "no lock");
        assert_eq!(counters.get("create", "secrets"), 0, "no release record");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_offline_plan_compares_two_commits_and_names_what_is_dropped() {
    let env = TestEnv::start(1, "").await;
    // A render command, so that it is run at both commits.
    env.write(
        "rollguard.yaml",
        &(config(1, "60s").replace("manifests: [k8s/]", "render: \"cat k8s/*.yaml\"")
            + "checks:\n  - name: healthz\n    http:\n      url: \"https://{{target}}.shop.example/healthz\"\n"),
    );
    let dropped =
        "---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: legacy\ndata:\n  a: b\n";
    env.write("k8s/app.yaml", &format!("{}{dropped}", small_app(V1)));
    let dir = env.dir.path();
    git(dir, &["init", "-q"]);
    git(dir, &["add", "rollguard.yaml", "k8s"]);
    git(dir, &["commit", "-q", "-m", "v1 with legacy"]);
    let first = git(dir, &["rev-parse", "HEAD"]);
    let added = "---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: fresh\ndata:\n  a: b\n";
    env.write("k8s/app.yaml", &format!("{}{added}", small_app(V2)));
    git(dir, &["add", "k8s"]);
    git(dir, &["commit", "-q", "-m", "v2 drops legacy"]);

    let plan_args = |extra: &[&str]| -> Vec<String> {
        let mut args = vec![
            "plan".to_string(),
            "--offline".into(),
            "--config".into(),
            env.path("rollguard.yaml").display().to_string(),
        ];
        args.extend(extra.iter().map(|s| s.to_string()));
        args
    };
    // Default: on the default branch, HEAD~1.
    let run = crate::harness::rollguard(&plan_args(&["--exit-code", "-v"]), dir, &[]).await;
    assert_eq!(run.code, 2, "{}", run.output());
    let compared = format!("compared with {}", &first[..7]);
    for want in [
        compared.as_str(),
        "target eu: 1 to create, 1 to update, 1 unchanged, 1 left in place\n",
        "  + ConfigMap shop/fresh",
        "  ~ Deployment shop/web",
        "  = unchanged: ConfigMap shop/web-config",
        "  - ConfigMap shop/legacy: no longer in the manifests; left in place (`prune: true` or `--prune`",
    ] {
        assert!(run.stdout.contains(want), "{want:?}:\n{}", run.output());
    }
    assert_eq!(image_lines(&run.stdout, V1, V2), (1, 1), "{}", run.output());
    // The checks each target would run, rendered for it (issue 23.5).
    assert!(
        run.stderr.contains(
            "  eu: healthz (every 10s, fails if status != 200): GET https://eu.shop.example/healthz"
        ),
        "{}",
        run.output()
    );

    let json =
        crate::harness::rollguard(&plan_args(&["--against", &first, "-o", "json"]), dir, &[]).await;
    assert_eq!(json.code, 0, "{}", json.output());
    let plan = json_plan(&json);
    assert_eq!(plan["mode"], "offline");
    assert_eq!(plan["against"]["sha"], first.as_str());
    assert_eq!(
        plan["targets"][0]["dropped"],
        serde_json::json!(["ConfigMap shop/legacy"])
    );

    // A cluster flag is refused: offline asks no cluster.
    let refused = crate::harness::rollguard(
        &plan_args(&["--kubeconfig", &env.kubeconfig.display().to_string()]),
        dir,
        &[],
    )
    .await;
    assert_eq!(refused.code, 2, "{}", refused.output());
    assert!(
        refused.stderr.contains("--kubeconfig"),
        "{}",
        refused.output()
    );
    assert_eq!(env.requests(1), 0, "no cluster was contacted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rollback_dry_run_shows_the_diff_back_to_the_last_good_revision() {
    let env = TestEnv::start(3, "").await;
    env.write("rollguard.yaml", &config(3, "60s"));
    deployed(&env, &small_app(V1)).await;
    deployed(&env, &small_app(V2)).await;
    let before = writes(&env, 3);
    let run = env.command("rollback", &["--dry-run"]).await;
    assert_eq!(run.code, 0, "{}", run.output());
    for name in ["eu", "us", "ap"] {
        assert!(
            run.stdout.contains(&format!(
                "target {name} (back to v1): 0 to create, 1 to update, 1 unchanged"
            )),
            "{}",
            run.output()
        );
    }
    assert_eq!(image_lines(&run.stdout, V2, V1), (1, 1), "{}", run.output());
    assert!(
        run.stdout.contains("--- live\n") || run.stdout.contains("    --- live"),
        "{}",
        run.output()
    );
    assert!(
        run.stdout.contains("dry run: nothing changed"),
        "{}",
        run.output()
    );
    assert_eq!(writes(&env, 3), before, "rollback --dry-run writes nothing");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_target_that_cannot_be_planned_is_an_error_and_the_others_are_planned() {
    let env = TestEnv::start(3, "").await;
    env.write("rollguard.yaml", &config(3, "20s"));
    deployed(&env, &small_app(V1)).await;
    env.write("k8s/app.yaml", &small_app(V2));
    env.cluster(3).set_down(true);
    let run = env.command("diff", &["--exit-code"]).await;
    assert_eq!(run.code, 1, "an error beats changes:\n{}", run.output());
    assert!(
        run.stdout
            .contains("target ap: could not be planned\n  ! cluster: "),
        "{}",
        run.output()
    );
    assert_eq!(image_lines(&run.stdout, V1, V2), (1, 1), "{}", run.output());
    assert!(
        run.stdout.contains("  ~ Deployment shop/web on eu, us ("),
        "{}",
        run.output()
    );
    assert!(
        run.stdout
            .contains("would change 2 objects on 2 of 3 targets; 1 could not be planned: ap"),
        "{}",
        run.output()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_null_in_the_manifests_is_no_phantom_change() {
    let env = TestEnv::start(1, "").await;
    env.write("rollguard.yaml", &config(1, "60s"));
    // `limits:` with nothing after it, as charts render an empty value: a real server drops it.
    let app = small_app(V1).replace(
        "          image: ",
        "          resources:\n            limits:\n          image: ",
    );
    deployed(&env, &app).await;
    let run = env.command("diff", &["--exit-code"]).await;
    assert_eq!(run.code, 0, "no change after a deploy:\n{}", run.output());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_exit_code_bad_input_is_1_never_the_2_of_changes() {
    let env = TestEnv::start(1, "").await;
    env.write("k8s/app.yaml", &small_app(V1));
    env.write(
        "rollguard.yaml",
        &format!("{}unknown_key: 1\n", config(1, "60s")),
    );
    for command in ["diff", "plan"] {
        let run = env.command(command, &["--exit-code"]).await;
        assert_eq!(run.code, 1, "{command}: {}", run.output());
        assert!(
            run.stderr.contains("unknown key \"unknown_key\""),
            "{command}: {}",
            run.output()
        );
        // Without --exit-code it stays bad input.
        let run = env.command(command, &[]).await;
        assert_eq!(run.code, 2, "{command}: {}", run.output());
    }
    // A flag clap refuses, the same.
    env.write("rollguard.yaml", &config(1, "60s"));
    let run = env
        .command("diff", &["--exit-code", "--no-such-flag"])
        .await;
    assert_eq!(run.code, 1, "{}", run.output());
    assert_eq!(env.writes(1), 0);
}
