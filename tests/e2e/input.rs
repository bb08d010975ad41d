//! Bad input: exit 2 and nothing written anywhere.

use crate::harness::{TestEnv, config, rollguard, small_app};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_manifest_anywhere_writes_nothing() {
    let env = TestEnv::start(3, "").await;
    env.write("rollguard.yaml", &config(3, "60s"));
    env.write("k8s/a-good.yaml", &small_app("example.com/web:v1"));
    // No metadata.name: refused before any cluster is touched.
    env.write(
        "k8s/b-bad.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  generateName: x-\n",
    );
    let run = env.deploy(&[]).await;
    assert_eq!(run.code, 2, "{}", run.output());
    assert!(
        run.stderr.contains("b-bad.yaml"),
        "the message names the file: {}",
        run.output()
    );
    for cluster in 1..=3 {
        assert_eq!(env.writes(cluster), 0, "sim-{cluster} got a write");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unparseable_document_writes_nothing() {
    let env = TestEnv::start(2, "").await;
    env.write("rollguard.yaml", &config(2, "60s"));
    env.write(
        "k8s/app.yaml",
        &format!("{}---\nkind: [unclosed\n", small_app("example.com/web:v1")),
    );
    let run = env.deploy(&[]).await;
    assert_eq!(run.code, 2, "{}", run.output());
    for cluster in 1..=2 {
        assert_eq!(env.writes(cluster), 0, "sim-{cluster} got a write");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_config_and_flags_exit_2() {
    let env = TestEnv::start(1, "").await;
    env.write(
        "rollguard.yaml",
        &format!("{}unknown_key: 1\n", config(1, "60s")),
    );
    env.write("k8s/app.yaml", &small_app("example.com/web:v1"));
    let run = env.deploy(&[]).await;
    assert_eq!(run.code, 2, "{}", run.output());
    env.write("rollguard.yaml", &config(1, "60s"));
    let run = env.deploy(&["--on-failure", "sometimes"]).await;
    assert_eq!(run.code, 2, "{}", run.output());
    assert_eq!(env.writes(1), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schema_prints_json() {
    let dir = tempfile::tempdir().expect("tempdir");
    let run = rollguard(&["schema".to_string()], dir.path(), &[]).await;
    assert_eq!(run.code, 0, "{}", run.output());
    let schema: serde_json::Value = serde_json::from_str(&run.stdout).expect("schema is JSON");
    // What editors rely on: every top-level key of rollguard.yaml, no other, the required ones.
    let mut keys: Vec<&str> = schema["properties"]
        .as_object()
        .map(|p| p.keys().map(String::as_str).collect())
        .unwrap_or_default();
    keys.sort_unstable();
    assert_eq!(
        keys,
        [
            "app",
            "checks",
            "concurrency",
            "github",
            "history",
            "lock",
            "manifests",
            "memory_budget",
            "namespace",
            "on_cancel",
            "on_failure",
            "pipeline",
            "preflight",
            "prune",
            "render",
            "render_hooks",
            "rollback",
            "rollback_order",
            "targets",
            "wait",
            "waves"
        ],
        "{schema:#}"
    );
    assert_eq!(
        schema["additionalProperties"], false,
        "unknown keys are errors"
    );
    assert_eq!(schema["required"], serde_json::json!(["app", "targets"]));
    assert_eq!(
        schema["properties"]["targets"]["items"]["required"],
        serde_json::json!(["name"])
    );
    assert!(
        schema["properties"]["wait"]["properties"]["timeout"].is_object(),
        "{schema:#}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn durations_past_the_maximum_are_bad_input() {
    let env = TestEnv::start(1, "").await;
    env.write("k8s/app.yaml", &small_app("example.com/web:v1"));
    // u64::MAX seconds overflowed `Instant + Duration` once; every source of a duration is bounded.
    // A bare number past i64 is refused by the YAML reader already, with its line.
    let too_long = "longer than the maximum of 24h";
    for (file_timeout, flags, said) in [
        ("60s", &["--timeout", "18446744073709551615s"][..], too_long),
        ("60s", &["--lock-timeout", "25h"][..], too_long),
        (
            "18446744073709551615",
            &[][..],
            "rollguard.yaml:5: not valid YAML: number 18446744073709551615 does not fit in a 64-bit integer",
        ),
        ("9223372036854775807", &[][..], too_long),
        ("2d", &[][..], too_long),
    ] {
        env.write("rollguard.yaml", &config(1, file_timeout));
        let run = env.deploy(flags).await;
        assert_eq!(run.code, 2, "{flags:?} / {file_timeout}: {}", run.output());
        assert!(run.stderr.contains(said), "{}", run.output());
        assert!(!run.stderr.contains("panicked"), "{}", run.output());
    }
    assert_eq!(env.writes(1), 0);
}

/// A kubeconfig for one user `u` with these credentials, never contacted.
fn kubeconfig_with_user(user: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\nclusters:\n- name: k\n  cluster:\n    server: https://127.0.0.1:9\ncontexts:\n- name: c\n  context: {{cluster: k, user: u}}\nusers:\n- name: u\n  user:\n{user}"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_access_on_one_target_is_bad_input_with_zero_writes() {
    let env = TestEnv::start(3, "").await;
    env.write("k8s/app.yaml", &small_app("example.com/web:v1"));
    env.write("garbage.kubeconfig", "clusters: [oops\n");
    env.write(
        "exec.kubeconfig",
        &kubeconfig_with_user(
            "    exec:\n      apiVersion: client.authentication.k8s.io/v1\n      command: rollguard-no-such-plugin\n",
        ),
    );
    env.write(
        "tokenfile.kubeconfig",
        &kubeconfig_with_user("    tokenFile: /nonexistent/token\n"),
    );
    env.write(
        "nouser.kubeconfig",
        &kubeconfig_with_user("    token: abc\n").replace("user: u}", "user: ghost}"),
    );
    // 200 MB (sparse): refused from its size before kube reads it into memory.
    std::fs::File::create(env.path("huge.kubeconfig"))
        .unwrap()
        .set_len(200 * 1024 * 1024)
        .unwrap();
    let good = "  - name: eu\n    context: sim-1\n  - name: ap\n    context: sim-3\n";
    // (the bad target's entry, what the message must say)
    let cases = [
        (
            "    context: sim-9\n",
            "context \"sim-9\" is not in kubeconfig",
        ),
        (
            "    kubeconfig_env: KUBECONFIG_US\n",
            "KUBECONFIG_US (kubeconfig_env) is not set",
        ),
        ("    kubeconfig: garbage.kubeconfig\n", "garbage.kubeconfig"),
        (
            "    kubeconfig: exec.kubeconfig\n",
            "\"rollguard-no-such-plugin\" is not found on PATH",
        ),
        (
            "    kubeconfig: tokenfile.kubeconfig\n",
            "tokenFile /nonexistent/token",
        ),
        (
            "    kubeconfig: nouser.kubeconfig\n",
            "names user \"ghost\", which is not in kubeconfig",
        ),
        (
            "    kubeconfig: huge.kubeconfig\n",
            "huge.kubeconfig is 200 MiB, over the 16 MiB cap on a kubeconfig file: is it the right file?",
        ),
    ];
    for (entry, want) in cases {
        env.write(
            "rollguard.yaml",
            &format!(
                "app: shop\nnamespace: shop\nmanifests: [k8s/]\ntargets:\n{good}  - name: us\n{entry}"
            ),
        );
        let run = env.deploy(&[]).await;
        assert_eq!(run.code, 2, "{entry}: {}", run.output());
        // The config file, the target's line and name, and the reason.
        assert!(
            run.stderr.contains("rollguard.yaml:9: target \"us\""),
            "{entry}: {}",
            run.output()
        );
        assert!(
            run.stderr.contains(want),
            "{entry}: want {want:?}: {}",
            run.output()
        );
        for cluster in 1..=3 {
            assert_eq!(env.writes(cluster), 0, "{entry}: sim-{cluster} got a write");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panic_is_one_line_and_a_distinct_exit_code() {
    let env = TestEnv::start(2, "").await;
    env.write("rollguard.yaml", &config(2, "60s"));
    env.write("k8s/app.yaml", &small_app("example.com/web:v1"));
    let mut args: Vec<String> = [
        "deploy",
        "--config",
        &env.path("rollguard.yaml").display().to_string(),
        "--kubeconfig",
        &env.kubeconfig.display().to_string(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();

    // In a target's task: that target fails, the run goes on to the end (report, exit 1).
    let run = rollguard(&args, env.dir.path(), &[("ROLLGUARD_TEST_PANIC", "target")]).await;
    assert_eq!(run.code, 1, "{}", run.output());
    assert!(run.stdout.contains("InternalError"), "{}", run.output());
    assert!(
        run.stderr.contains("rollguard: internal error at src/"),
        "{}",
        run.output()
    );
    assert!(!run.stderr.contains("panicked at"), "{}", run.output());

    // Outside a target: exit 4, said once. The locks the panicking targets held were
    // released, not left to lapse: this run does not wait for them.
    args.extend(["--on-failure".to_string(), "none".to_string()]);
    let run = rollguard(
        &args,
        env.dir.path(),
        &[("ROLLGUARD_TEST_PANIC", "conclude")],
    )
    .await;
    assert_eq!(run.code, 4, "{}", run.output());
    assert!(!run.stderr.contains("is held by"), "{}", run.output());
    assert_eq!(
        run.stderr
            .matches("rollguard: internal error at src/engine/conclude.rs")
            .count(),
        1,
        "{}",
        run.output()
    );
    assert!(!run.stderr.contains("panicked at"), "{}", run.output());
    // Its locks too.
    let run = rollguard(&args, env.dir.path(), &[]).await;
    assert_eq!(run.code, 0, "{}", run.output());
    assert!(!run.stderr.contains("is held by"), "{}", run.output());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nul_in_a_stage_or_a_shell_not_on_path_is_bad_input_and_writes_nothing() {
    let env = TestEnv::start(2, "").await;
    env.write("k8s/app.yaml", &small_app("example.com/web:v1"));
    // (pipeline, what stderr says, at which line of rollguard.yaml); config(2, ..) is 10 lines.
    let cases = [
        (
            "  - apply\n  - script:\n      name: smoke\n      run: ./smoke.sh\n      env:\n        TOKEN: \"a\\0b\"\n",
            "stage \"smoke\": env TOKEN contains a NUL byte",
            "rollguard.yaml:17",
        ),
        (
            "  - script:\n      name: migrate\n      run: \"echo \\0 up\"\n  - apply\n",
            "stage \"migrate\" run contains a NUL byte",
            "rollguard.yaml:14",
        ),
        (
            "  - script:\n      name: migrate\n      run: echo up\n      shell: no-such-shell-here -c\n  - apply\n",
            "stage \"migrate\": shell program \"no-such-shell-here\" is not on PATH",
            "rollguard.yaml:13",
        ),
    ];
    for (pipeline, want, line) in cases {
        env.write(
            "rollguard.yaml",
            &format!("{}pipeline:\n{pipeline}", config(2, "60s")),
        );
        let run = env.deploy(&[]).await;
        assert_eq!(run.code, 2, "{want}: {}", run.output());
        assert!(
            run.stderr.contains(&format!("{line}: {want}")),
            "want {line}: {want}\n{}",
            run.output()
        );
        for cluster in 1..=2 {
            assert_eq!(env.writes(cluster), 0, "{want}: sim-{cluster} got a write");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panic_while_planning_exits_4_naming_its_place() {
    let env = TestEnv::start(1, "").await;
    env.write("rollguard.yaml", &config(1, "60s"));
    env.write("k8s/app.yaml", &small_app("example.com/web:v1"));
    let panic = [("ROLLGUARD_TEST_PANIC", "plan")];
    let run = env.deploy_with_env(&[], &panic).await;
    assert_eq!(run.code, 4, "{}", run.output());
    assert_eq!(
        run.stderr
            .matches("rollguard: internal error at src/commands/deploy.rs")
            .count(),
        1,
        "said once, with its place: {}",
        run.output()
    );
    assert!(!run.stderr.contains("panicked at"), "{}", run.output());
    // `diff --exit-code` too: a bug is neither "changes" (2) nor a target's failure (1).
    let run = env.command_env("diff", &["--exit-code"], &panic).await;
    assert_eq!(run.code, 4, "{}", run.output());
    assert_eq!(env.writes(1), 0);
}

/// A config of two targets in waves 0 (eu, sim-1) and 1 (us, sim-2), then `rest`.
fn two_waves(rest: &str) -> String {
    format!(
        "app: shop\nnamespace: shop\nmanifests: [k8s/]\ntargets:\n  - {{name: eu, context: sim-1}}\n  - {{name: us, context: sim-2, wave: 1}}\n{rest}"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_waves_are_bad_input_at_their_line_and_nothing_is_asked() {
    let env = TestEnv::start(2, "").await;
    env.write("k8s/app.yaml", &small_app("example.com/web:v1"));
    // (the rest of the config from line 7, what stderr says at which line)
    let cases = [
        (
            "waves:\n  - {wave: 0, max_parallel: 0}\n",
            "rollguard.yaml:8: wave 0 max_parallel must be at least 1, not 0",
        ),
        (
            "waves:\n  - {wave: 1, bake: 1m}\n  - {wave: 1, bake: 2m}\n",
            "rollguard.yaml:9: duplicate entry for wave 1 in waves (first at line 8)",
        ),
        (
            "waves:\n  - {wave: 2, bake: 1m}\n",
            "rollguard.yaml:8: waves: no target is in wave 2 (the targets are in waves 0 and 1)",
        ),
        (
            "waves:\n  - {wave: 0, bak: 1m}\n",
            "rollguard.yaml:8: unknown key \"bak\" in waves[0]; did you mean \"bake\"?",
        ),
        (
            "waves:\n  - {wave: 0, bake: soon}\n",
            "rollguard.yaml:8: wave 0 bake: invalid duration \"soon\"",
        ),
        (
            "wait:\n  bake: soon\n",
            "rollguard.yaml:8: wait.bake: invalid duration \"soon\"",
        ),
        (
            "  - {name: ap, context: sim-2, namespace: other, wave: -1}\n",
            "rollguard.yaml:7: target \"ap\" wave must be at least 0, not -1",
        ),
    ];
    for (rest, want) in cases {
        env.write("rollguard.yaml", &two_waves(rest));
        let run = env.deploy(&[]).await;
        assert_eq!(run.code, 2, "{want}: {}", run.output());
        assert!(run.stderr.contains(want), "want {want}\n{}", run.output());
        for cluster in 1..=2 {
            assert_eq!(env.requests(cluster), 0, "{want}: sim-{cluster} was asked");
            assert_eq!(env.writes(cluster), 0, "{want}: sim-{cluster} got a write");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wave_flag_that_selects_no_target_is_bad_input() {
    let env = TestEnv::start(2, "").await;
    env.write("k8s/app.yaml", &small_app("example.com/web:v1"));
    env.write("rollguard.yaml", &two_waves(""));
    for (flags, want) in [
        (
            &["--wave", "7"][..],
            "--wave: no target is in wave 7: the targets are in waves 0 and 1",
        ),
        (
            &["--wave", "7", "--dry-run"][..],
            "--wave: no target is in wave 7: the targets are in waves 0 and 1",
        ),
        (
            &["--target", "eu", "--wave", "1"][..],
            "--wave: --wave 1 and --target eu select no target: the targets selected are in wave 0",
        ),
    ] {
        let run = env.deploy(flags).await;
        assert_eq!(run.code, 2, "{flags:?}: {}", run.output());
        assert!(run.stderr.contains(want), "want {want}\n{}", run.output());
        for cluster in 1..=2 {
            assert_eq!(
                env.requests(cluster),
                0,
                "{flags:?}: sim-{cluster} was asked"
            );
            assert_eq!(
                env.writes(cluster),
                0,
                "{flags:?}: sim-{cluster} got a write"
            );
        }
    }
}
