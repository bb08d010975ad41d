//! What a person reads when a cluster is down, refuses the credentials or a field, or the
//! kubeconfig is missing: every command says it once, in rollguard's words (the reason, the
//! server's address, what to do), with the same exit code, and no library log line comes
//! before it. And `show` / `history` print one document for several targets.

use serde_json::Value;

use crate::harness::{DEFAULT_LOGS, Run, TestEnv, config, rollguard, small_app};

/// Every command that connects, with what it needs to run against target `eu` (sim-1).
const COMMANDS: [&[&str]; 8] = [
    &["deploy"],
    &["diff"],
    &["plan"],
    &["history"],
    &["show", "--revision", "1"],
    &["rollback", "--yes"],
    &["unlock"],
    &["status"],
];

/// The log lines of stderr whose tracing target is not one of rollguard's crates (kube,
/// hyper, rustls, h2, tower, octocrab...). A log line is `TIME LEVEL span{..}: target: text`.
fn library_lines(stderr: &str) -> Vec<&str> {
    const LEVELS: [&str; 5] = ["ERROR", "WARN", "INFO", "DEBUG", "TRACE"];
    stderr
        .lines()
        .filter(|line| {
            let words: Vec<&str> = line.split_whitespace().collect();
            let Some(level) = words.iter().position(|w| LEVELS.contains(w)) else {
                return false;
            };
            let target = words[level + 1..]
                .iter()
                .find(|w| w.ends_with(':') && !w.contains('{'));
            target.is_some_and(|t| !t.starts_with("rollguard") && !t.starts_with("kube_sim"))
        })
        .collect()
}

/// Runs `words` (a command and its flags) against the env's config and kubeconfig with the
/// binary's default log filter.
async fn run(env: &TestEnv, words: &[&str]) -> Run {
    env.command_env(words[0], &words[1..], &[DEFAULT_LOGS])
        .await
}

#[test]
fn library_lines_are_found() {
    // The reader must see the line of the issue, or the tests below pass vacuously.
    let stderr = "2026-12-01T10:00:00.1Z ERROR target{target=us}: kube_client::client::builder: failed with error client error (Connect)\n\
                  2026-12-01T10:00:00.2Z  WARN target{target=us}: rollguard::engine::target_run: a warning of ours\n\
                  target us: ConnectionRefused: connection to https://127.0.0.1:1/ refused\n";
    assert_eq!(library_lines(stderr).len(), 1, "{stderr}");
    assert!(library_lines(stderr)[0].contains("kube_client"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_cluster_is_said_once_by_rollguard_with_no_library_line() {
    let env = TestEnv::start(2, "").await;
    env.cluster(2).set_down(true);
    env.write("rollguard.yaml", &config(2, "60s"));
    env.write("k8s/app.yaml", &small_app("example.com/web:v1"));
    let run = env
        .deploy_with_env(&["--on-failure", "none"], &[DEFAULT_LOGS])
        .await;
    assert_eq!(run.code, 1, "{}", run.output());
    assert_eq!(run.outcome("eu"), "deployed", "{}", run.output());
    assert!(
        library_lines(&run.stderr).is_empty(),
        "library log lines:\n{}",
        run.output()
    );
    let said = format!("connection to {}/ refused", env.cluster(2).url());
    assert_eq!(
        run.stderr.matches(&said).count(),
        1,
        "rollguard says it once on stderr:\n{}",
        run.output()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_error_for_a_misspelt_field_is_said_once_by_rollguard_with_no_library_line() {
    let env = TestEnv::start(1, "").await;
    env.write("rollguard.yaml", &config(1, "60s"));
    let misspelt = small_app("example.com/web:v1").replace(
        "          image: example.com/web:v1\n",
        "          image: example.com/web:v1\n          imagePullPolice: Always\n",
    );
    env.write("k8s/app.yaml", &misspelt);
    let run = env
        .deploy_with_env(&["--on-failure", "none"], &[DEFAULT_LOGS])
        .await;
    // Refused in the preflight dry run: bad input.
    assert_eq!(run.code, 2, "{}", run.output());
    assert_eq!(
        run.target("eu")["failures"][0]["reason"],
        "FieldNotDeclared",
        "{}",
        run.output()
    );
    assert!(
        library_lines(&run.stderr).is_empty(),
        "library log lines:\n{}",
        run.output()
    );
    assert_eq!(
        run.stderr.matches("imagePullPolice is not a field").count(),
        1,
        "rollguard says it once on stderr:\n{}",
        run.output()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_command_says_an_unreachable_cluster_with_its_address_and_what_to_do() {
    let env = TestEnv::start(1, "").await;
    env.write("rollguard.yaml", &config(1, "60s"));
    env.write("k8s/app.yaml", &small_app("example.com/web:v1"));
    assert_eq!(env.deploy(&[]).await.code, 0);
    env.cluster(1).set_down(true);
    let said = format!(
        "ConnectionRefused: connection to {}/ refused: is the cluster up and the address right?",
        env.cluster(1).url()
    );
    for words in COMMANDS {
        let run = run(&env, words).await;
        assert_eq!(run.code, 1, "{words:?}: {}", run.output());
        // deploy and diff say it in their report on stdout, the others on stderr.
        let output = format!("{}{}", run.stdout, run.stderr);
        assert!(output.contains(&said), "{words:?}: {}", run.output());
        assert!(
            library_lines(&run.stderr).is_empty(),
            "{words:?}: library log lines:\n{}",
            run.output()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_command_says_refused_credentials_the_same_way() {
    let env = TestEnv::start(1, "").await;
    env.write("rollguard.yaml", &config(1, "60s"));
    env.write("k8s/app.yaml", &small_app("example.com/web:v1"));
    assert_eq!(env.deploy(&[]).await.code, 0);
    let text = std::fs::read_to_string(&env.kubeconfig).expect("kubeconfig");
    let token = env.cluster(1).token().to_string();
    assert!(text.contains(&token), "the kubeconfig holds the token");
    std::fs::write(&env.kubeconfig, text.replace(&token, "wrong-token")).expect("write");
    let said = format!(
        "Unauthorized: {}/ refused the credentials (401 Unauthorized): check the token",
        env.cluster(1).url()
    );
    for words in COMMANDS {
        let run = run(&env, words).await;
        assert_eq!(run.code, 1, "{words:?}: {}", run.output());
        let output = format!("{}{}", run.stdout, run.stderr);
        assert!(output.contains(&said), "{words:?}: {}", run.output());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_command_says_a_missing_kubeconfig_or_context_as_bad_input_the_same_way() {
    let env = TestEnv::start(1, "").await;
    env.write("k8s/app.yaml", &small_app("example.com/web:v1"));
    let home = tempfile::tempdir().expect("tempdir");
    let missing = format!(
        "kubeconfig {}/.kube/config does not exist (the default: neither --kubeconfig nor $KUBECONFIG is set): give one with --kubeconfig PATH, with $KUBECONFIG, or in the target's entry of the config file with `kubeconfig_env`",
        home.path().display()
    );
    let home_env = [("HOME", home.path().to_str().expect("utf-8 path"))];
    for words in COMMANDS {
        // No --kubeconfig, no $KUBECONFIG, an empty home; three targets, one problem.
        env.write("rollguard.yaml", &config(3, "60s"));
        let mut args: Vec<String> = words.iter().map(|w| w.to_string()).collect();
        args.extend([
            "--config".into(),
            env.path("rollguard.yaml").display().to_string(),
        ]);
        let run = rollguard(&args, env.dir.path(), &home_env).await;
        assert_eq!(run.code, 2, "{words:?}: {}", run.output());
        assert_eq!(
            run.stderr.matches(&missing).count(),
            1,
            "{words:?}: {}",
            run.output()
        );
        assert!(
            run.stderr.contains(&format!(
                "targets \"eu\", \"us\", \"ap\": Kubeconfig: {missing}"
            )),
            "{words:?}: {}",
            run.output()
        );
        assert_eq!(env.requests(1), 0, "{words:?} asked no cluster");

        // A context the kubeconfig lacks.
        env.write(
            "rollguard.yaml",
            &config(1, "60s").replace("context: sim-1", "context: sim-9"),
        );
        let run = env.command(words[0], &words[1..]).await;
        assert_eq!(run.code, 2, "{words:?}: {}", run.output());
        assert!(
            run.stderr.contains(&format!(
                "rollguard.yaml:7: target \"eu\": ContextNotFound: context \"sim-9\" is not in kubeconfig {} (it has: sim-1)",
                env.kubeconfig.display()
            )),
            "{words:?}: {}",
            run.output()
        );
        assert_eq!(env.requests(1), 0, "{words:?} asked no cluster");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn show_and_history_print_one_document_for_several_targets() {
    let env = TestEnv::start(3, "").await;
    env.write("rollguard.yaml", &config(3, "60s"));
    for image in ["example.com/web:v1", "example.com/web:v2"] {
        env.write("k8s/app.yaml", &small_app(image));
        let run = env.deploy(&[]).await;
        assert_eq!(run.code, 0, "{}", run.output());
    }
    let names = ["eu", "us", "ap"];
    // serde_json's map sorts its keys: the config's order is checked on the text.
    let keys = |v: &Value| -> Vec<String> {
        let mut keys: Vec<String> = v
            .as_object()
            .map(|o| o.keys().cloned().collect())
            .unwrap_or_default();
        keys.sort_by_key(|k| names.iter().position(|n| n == k));
        keys
    };
    let in_config_order = |text: &str| {
        let at: Vec<Option<usize>> = names
            .iter()
            .map(|n| text.find(&format!("\"{n}\": {{")))
            .collect();
        at.iter().all(Option::is_some) && at.windows(2).all(|w| w[0] < w[1])
    };

    let shown = env
        .command("show", &["--revision", "1", "-o", "json"])
        .await;
    assert_eq!(shown.code, 0, "{}", shown.output());
    let doc: Value = serde_json::from_str(&shown.stdout).expect("one JSON document");
    assert_eq!(keys(&doc), names, "{doc:#}");
    assert!(in_config_order(&shown.stdout), "{}", shown.stdout);
    for name in names {
        assert_eq!(doc[name]["revision"], 1, "{doc:#}");
        assert!(doc[name]["manifests"].is_array(), "{doc:#}");
    }
    let shown = env.command("show", &["--revision", "2"]).await;
    assert_eq!(shown.code, 0, "{}", shown.output());
    let docs: Vec<Value> = serde_saphyr::from_multiple(&shown.stdout).expect("a YAML stream");
    assert_eq!(docs.len(), 3, "{}", shown.stdout);
    for (doc, name) in docs.iter().zip(names) {
        assert_eq!(keys(doc), [name], "{}", shown.stdout);
        assert_eq!(doc[name]["revision"], 2, "{}", shown.stdout);
    }

    let history = env.command("history", &["-o", "json"]).await;
    assert_eq!(history.code, 0, "{}", history.output());
    let doc: Value = serde_json::from_str(&history.stdout).expect("one JSON document");
    assert_eq!(keys(&doc), names, "{doc:#}");
    for name in names {
        let revisions: Vec<&Value> = doc[name]
            .as_array()
            .map(|rs| rs.iter().map(|r| &r["revision"]).collect())
            .unwrap_or_default();
        assert_eq!(revisions, [1, 2], "{doc:#}");
    }
    let history = env
        .command(
            "history",
            &["-o", "yaml", "--target", "us", "--context", "sim-3"],
        )
        .await;
    assert_eq!(history.code, 0, "{}", history.output());
    let docs: Vec<Value> = serde_saphyr::from_multiple(&history.stdout).expect("a YAML stream");
    assert_eq!(docs.len(), 2, "{}", history.stdout);
    assert_eq!(docs[0]["us"][1]["status"], "deployed", "{}", history.stdout);
    assert_eq!(
        docs[1]["ap"][0]["status"], "superseded",
        "{}",
        history.stdout
    );

    // A revision that does not exist is the same mistake for show and rollback: exit 2.
    for words in [
        &["show", "--revision", "99"][..],
        &["rollback", "--revision", "99", "--yes"],
    ] {
        let run = env.command(words[0], &words[1..]).await;
        assert_eq!(run.code, 2, "{words:?}: {}", run.output());
        assert!(
            run.stderr.contains("revision 99") && run.stderr.contains("does not exist"),
            "{words:?}: {}",
            run.output()
        );
    }
}
