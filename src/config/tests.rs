//! Table tests of the config: parsing, overrides, names, the schema.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};

use super::parse::*;
use super::*;

fn no_env(_: &str) -> Option<String> {
    None
}

fn parse_ok(text: &str) -> Config {
    parse(
        text,
        Path::new("rollguard.yaml"),
        &Overrides::default(),
        &no_env,
    )
    .unwrap_or_else(|e| panic!("{e}"))
}

fn errors(text: &str) -> Vec<String> {
    match parse(
        text,
        Path::new("rollguard.yaml"),
        &Overrides::default(),
        &no_env,
    ) {
        Ok(_) => panic!("expected errors for:\n{text}"),
        Err(e) => e.issues().iter().map(|i| i.to_string()).collect(),
    }
}

const MINIMAL: &str = r#"app: shop
namespace: shop            # default namespace for namespaced objects without one
manifests: [k8s/]          # files, folders, globs; or `render: "kustomize build k8s"`,
                           # a command whose stdout is the manifests
targets:
  - name: eu               # the name used in every report
    context: sim-1         # a context of --kubeconfig / $KUBECONFIG
  - name: us
    kubeconfig_env: KUBECONFIG_US   # whole kubeconfig in an env var (raw or base64), as CI secrets hold it
wait:
  timeout: 5m
"#;

#[test]
fn minimal_file_from_the_issue() {
    let c = parse_ok(MINIMAL);
    assert_eq!(c.app, "shop");
    assert_eq!(c.namespace.as_deref(), Some("shop"));
    assert_eq!(c.manifests, ManifestSource::Paths(vec!["k8s/".into()]));
    assert_eq!(c.targets.len(), 2);
    assert_eq!(c.targets[0].name, "eu");
    assert_eq!(c.targets[0].context.as_deref(), Some("sim-1"));
    assert_eq!(c.targets[0].line, 6);
    assert_eq!(
        c.targets[1].kubeconfig_env.as_deref(),
        Some("KUBECONFIG_US")
    );
    assert_eq!(c.wait.timeout, Duration::from_secs(300));
    assert_eq!(c.concurrency, 64);
    assert_eq!(c.history.keep, 10);
    assert_eq!(c.history.secrets, SecretsPolicy::Digest);
    assert_eq!(c.on_failure, FailurePolicy::RollbackAll);
    assert_eq!(c.on_cancel, CancelPolicy::Rollback);
    assert_eq!(c.rollback_order, RollbackOrder::Pipeline);
    assert_eq!(c.lock.timeout, Duration::from_secs(120));
    assert_eq!(c.rollback_timeout(), Duration::from_secs(300));
    assert_eq!(c.history_namespace(&c.targets[0], "ctx"), "shop");
    assert_eq!(c.history_namespace(&c.targets[1], "ctx"), "shop");
    assert_eq!(c.wait.fail_fast, FailFastConfig::default());
    assert_eq!(c.base_dir, PathBuf::from("."));
    assert_eq!(c.pipeline, default_pipeline());
}

#[test]
fn full_file() {
    let c = parse_ok(
        r#"
app: shop
render: "kustomize build k8s"
targets:
  - {name: eu, context: ctx-eu, namespace: shop-eu}
  - {name: us, kubeconfig: clusters/us.yaml, context: admin, environment: production-us}
wait:
  timeout: 90s
  fail_fast:
    reasons: [ImagePullBackOff, CrashLoopBackOff]
    pull_grace: 20s
    crash_loop_restarts: 3
    unschedulable: fail
    unschedulable_grace: 2m
concurrency: 4
history: {namespace: rollguard-system, keep: 5, secrets: store}
on_failure: rollback-if-all-fail
on_cancel: leave
rollback: {timeout: 3m}
rollback_order: reverse
lock: {timeout: 30}
github: {deployments: true, timeout: 10s}
pipeline:
  - script:
      name: migrate
      run: ["./migrate.sh", "--up"]
      rollback: ./migrate.sh --down
      timeout: 10m
      env: {DB: main, RETRIES: 3}
  - apply
  - script: {name: smoke, run: curl -fsS https://shop.example.com/healthz}
"#,
    );
    assert_eq!(
        c.manifests,
        ManifestSource::Render {
            command: "kustomize build k8s".into()
        }
    );
    assert_eq!(c.targets[0].namespace.as_deref(), Some("shop-eu"));
    assert_eq!(c.targets[0].environment, None);
    assert_eq!(c.targets[1].environment.as_deref(), Some("production-us"));
    assert_eq!(
        c.github,
        GithubConfig {
            deployments: true,
            timeout: Duration::from_secs(10)
        }
    );
    assert_eq!(
        c.targets[1].kubeconfig,
        Some(PathBuf::from("clusters/us.yaml"))
    );
    assert_eq!(c.wait.timeout, Duration::from_secs(90));
    let ff = &c.wait.fail_fast;
    assert_eq!(ff.reasons, vec!["ImagePullBackOff", "CrashLoopBackOff"]);
    assert_eq!(ff.pull_grace, Duration::from_secs(20));
    assert_eq!(ff.crash_loop_restarts, 3);
    assert_eq!(c.wait.log_lines, DEFAULT_LOG_LINES, "20 unless set");
    assert_eq!(ff.unschedulable, UnschedulablePolicy::Fail);
    assert_eq!(ff.unschedulable_grace, Duration::from_secs(120));
    assert_eq!(c.concurrency, 4);
    assert_eq!(
        c.history_namespace(&c.targets[1], "ctx"),
        "rollguard-system"
    );
    assert_eq!(c.namespace_for(&c.targets[0]), Some("shop-eu"));
    assert_eq!(c.namespace_for(&c.targets[1]), None);
    assert_eq!(
        c.history_namespace(&c.targets[0], "ctx"),
        "rollguard-system"
    );
    assert_eq!(c.default_namespace(&c.targets[0], "ctx"), "shop-eu");
    assert_eq!(c.default_namespace(&c.targets[1], "ctx"), "ctx");
    assert_eq!(c.history.keep, 5);
    assert_eq!(c.history.secrets, SecretsPolicy::Store);
    assert_eq!(c.on_failure, FailurePolicy::RollbackIfAllFail);
    assert_eq!(c.on_cancel, CancelPolicy::Leave);
    assert_eq!(c.rollback_timeout(), Duration::from_secs(180));
    assert_eq!(c.rollback_order, RollbackOrder::Reverse);
    assert_eq!(c.lock.timeout, Duration::from_secs(30));
    assert_eq!(c.pipeline.len(), 3);
    let scripts: Vec<&ScriptStage> = script_stages(&c.pipeline).collect();
    let m = scripts[0];
    assert_eq!(
        m.run,
        ScriptCommand::Argv(vec!["./migrate.sh".into(), "--up".into()])
    );
    assert_eq!(
        m.rollback,
        Some(ScriptCommand::Shell("./migrate.sh --down".into()))
    );
    assert_eq!(c.pipeline[1], PipelineStage::Apply);
    assert_eq!(m.timeout, Duration::from_secs(600));
    assert_eq!(m.env.get("RETRIES").map(String::as_str), Some("3"));
    assert_eq!(scripts[1].name, "smoke");
}

/// A config with one target, to which each case adds its mistake.
const ONE_TARGET: &str = "app: shop\nmanifests: [k8s/]\ntargets:\n  - name: eu\n    context: c\n";

/// Each text's errors include one that starts with its wanted message.
fn assert_first_words(cases: Vec<(String, &str)>) {
    for (text, want) in cases {
        let errs = errors(&text);
        assert!(
            errs.iter().any(|e| e.starts_with(want)),
            "want {want:?}\ngot {errs:#?}\nfor:\n{text}"
        );
    }
}

/// Misspelt keys and values of a fixed set: the line, the place, and the nearest name.
#[test]
fn unknown_keys_and_choices_name_the_nearest() {
    let base = ONE_TARGET;
    assert_first_words(vec![
        (
            format!("{base}github:\n  deployment: true\n"),
            "rollguard.yaml:7: unknown key \"deployment\" in github; did you mean \"deployments\"?",
        ),
        (
            format!("{base}wait:\n  timout: 5m\n"),
            "rollguard.yaml:7: unknown key \"timout\" in wait; did you mean \"timeout\"?",
        ),
        (
            format!("{base}targts: []\n"),
            "rollguard.yaml:6: unknown key \"targts\" in the top level; did you mean \"targets\"?",
        ),
        (
            format!("{base}  - name: us\n    contxt: c2\n"),
            "rollguard.yaml:7: unknown key \"contxt\" in targets[1]; did you mean \"context\"?",
        ),
        (
            format!("{base}rollback_order: revers\n"),
            "rollguard.yaml:6: rollback_order: \"revers\" is not one of pipeline, reverse; did you mean \"reverse\"?",
        ),
        (
            format!("{base}render_hooks: aply\n"),
            "rollguard.yaml:6: render_hooks: \"aply\" is not one of skip, apply; did you mean \"apply\"?",
        ),
        (
            format!("{base}zzz: 1\n"),
            "rollguard.yaml:6: unknown key \"zzz\" in the top level (known keys: app,",
        ),
        (
            format!("{base}history:\n  keep: 2\n  secrets: digests\n"),
            "rollguard.yaml:8: history.secrets: \"digests\" is not one of store, digest; did you mean \"digest\"?",
        ),
        (
            format!("{base}on_failure: rollback-al\n"),
            "rollguard.yaml:6: on_failure: \"rollback-al\" is not one of rollback-all, rollback-failed, rollback-if-all-fail, none; did you mean \"rollback-all\"?",
        ),
        (
            format!("{base}wait:\n  fail_fast:\n    unschedulable: maybe\n"),
            "rollguard.yaml:8: wait.fail_fast.unschedulable: \"maybe\" is not one of warn, fail",
        ),
        (
            format!("{base}wait:\n  fail_fast:\n    reasons: [ImagePullBackof]\n"),
            "rollguard.yaml:8: unknown fail-fast reason \"ImagePullBackof\"; did you mean \"ImagePullBackOff\"?",
        ),
        (
            format!("{base}stages:\n  - name: m\n    script: x\n    when: before\n"),
            "rollguard.yaml:6: `stages:` is gone: list the stages in order under `pipeline:`",
        ),
        (
            format!("{base}wait:\n  fail_fast:\n    err_image_pull_grace: 10s\n"),
            "rollguard.yaml:8: `wait.fail_fast.err_image_pull_grace` is gone: use `pull_grace`",
        ),
    ]);
}

/// Values of the wrong type or range, and files of the wrong shape: the line and what to write.
#[test]
fn bad_values_and_shapes_say_the_line() {
    let base = ONE_TARGET;
    assert_first_words(vec![
        (
            format!("{base}github:\n  deployments: yes please\n"),
            "rollguard.yaml:7: github.deployments must be true or false, not a string",
        ),
        (
            base.replace("app: shop", "app: Shop_1"),
            "rollguard.yaml:1: app \"Shop_1\" must be a DNS label",
        ),
        (
            format!("{base}  - name: eu\n    context: c2\n"),
            "rollguard.yaml:6: duplicate target name \"eu\" (first at line 4)",
        ),
        (
            format!("{base}  - name: \"\"\n    context: c2\n"),
            "rollguard.yaml:6: target name \"\" must not be empty",
        ),
        (
            format!("{base}  - name: us\n"),
            "rollguard.yaml:6: target \"us\" needs one of `context`",
        ),
        (
            format!("{base}  - name: us\n    kubeconfig: a\n    kubeconfig_env: B\n"),
            "rollguard.yaml:6: target \"us\": set `kubeconfig` or `kubeconfig_env`, not both",
        ),
        (
            format!("{base}  - context: c2\n"),
            "rollguard.yaml:6: targets[1] needs a `name`",
        ),
        (
            format!("{base}wait:\n  timeout: 5 minutes\n"),
            "rollguard.yaml:7: wait.timeout: invalid duration \"5 minutes\"",
        ),
        (
            format!("{base}wait:\n  timeout: 18446744073709551615\n"),
            "rollguard.yaml:7: not valid YAML: number 18446744073709551615 does not fit in a 64-bit integer (the widest Kubernetes has); quote it if it is text",
        ),
        (
            format!("{base}lock:\n  timeout: 18446744073709551615s\n"),
            "rollguard.yaml:7: lock.timeout: invalid duration \"18446744073709551615s\": longer than the maximum of 24h",
        ),
        (
            format!("{base}history:\n  keep: 0\n"),
            "rollguard.yaml:7: history.keep must be at least 1, not 0",
        ),
        (
            format!("{base}wait:\n  timeout: 1m\n  log_lines: -1\n"),
            "rollguard.yaml:8: wait.log_lines must be at least 0, not -1",
        ),
        (
            format!("{base}wait:\n  log_lines: [20]\n"),
            "rollguard.yaml:7: wait.log_lines must be an integer, not a list",
        ),
        (
            format!("{base}concurrency: many\n"),
            "rollguard.yaml:6: concurrency must be an integer, not a string",
        ),
        (
            format!("{base}render: make manifests\n"),
            "rollguard.yaml:6: use either `manifests` (files, folders, globs) or `render` (a command), not both",
        ),
        (
            "app: shop\ntargets:\n  - {name: eu, context: c}\n".into(),
            "rollguard.yaml: missing required key \"manifests\"",
        ),
        (
            "app: shop\nmanifests: [k8s]\n".into(),
            "rollguard.yaml: missing required key \"targets\"",
        ),
        (
            "app: shop\nmanifests: [k8s]\ntargets: []\n".into(),
            "rollguard.yaml:3: targets must list at least one target",
        ),
        ("".into(), "rollguard.yaml: the file is empty"),
        (
            "- a\n- b\n".into(),
            "rollguard.yaml:1: the top level must be a mapping, not a list",
        ),
        ("app: shop\n  bad: [\n".into(), "rollguard.yaml:"),
    ]);
}

#[test]
fn all_errors_are_reported_at_once() {
    let errs = errors(
        "app: Bad\nmanifests: [k8s]\ntargets:\n  - name: eu\nwait:\n  timout: 1\nconcurency: 2\n",
    );
    assert_eq!(errs.len(), 4, "{errs:#?}");
}

fn env_of(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
    move |k| {
        pairs
            .iter()
            .find(|(n, _)| *n == k)
            .map(|(_, v)| v.to_string())
    }
}

#[test]
fn precedence_flags_over_rollguard_env_over_input_env_over_file() {
    let file = "app: shop\nmanifests: [k8s]\ntargets: [{name: eu, context: c}]\nwait: {timeout: 1m}\non_failure: none\n";
    let src = Path::new("rollguard.yaml");
    type Case = (
        Overrides,
        &'static [(&'static str, &'static str)],
        u64,
        FailurePolicy,
    );
    let cases: Vec<Case> = vec![
        (Overrides::default(), &[], 60, FailurePolicy::None),
        (
            Overrides::default(),
            &[
                ("INPUT_TIMEOUT", "2m"),
                ("INPUT_ON_FAILURE", "rollback-failed"),
            ],
            120,
            FailurePolicy::RollbackFailed,
        ),
        (
            Overrides::default(),
            &[("INPUT_TIMEOUT", "2m"), ("ROLLGUARD_TIMEOUT", "3m")],
            180,
            FailurePolicy::None,
        ),
        (
            Overrides::default(),
            &[("INPUT_TIMEOUT", ""), ("INPUT_ON_FAILURE", "")],
            60,
            FailurePolicy::None,
        ),
        (
            Overrides {
                timeout: Some(Duration::from_secs(240)),
                on_failure: Some(FailurePolicy::RollbackAll),
                ..Default::default()
            },
            &[
                ("INPUT_TIMEOUT", "2m"),
                ("ROLLGUARD_TIMEOUT", "3m"),
                ("ROLLGUARD_ON_FAILURE", "none"),
            ],
            240,
            FailurePolicy::RollbackAll,
        ),
    ];
    for (flags, env, secs, policy) in cases {
        let c = parse(file, src, &flags, &env_of(env)).unwrap();
        assert_eq!(c.wait.timeout, Duration::from_secs(secs), "{env:?}");
        assert_eq!(c.on_failure, policy, "{env:?}");
    }
}

#[test]
fn env_overrides_other_settings_and_errors() {
    let file = "app: shop\nmanifests: [k8s]\ntargets: [{name: eu, context: c}]\n";
    let env = env_of(&[
        ("INPUT_CONCURRENCY", "3"),
        ("ROLLGUARD_ON_CANCEL", "leave"),
        ("INPUT_LOCK_TIMEOUT", "10s"),
        ("INPUT_ROLLBACK_TIMEOUT", "1m"),
        ("INPUT_KUBECONFIG", "/tmp/kc"),
        ("INPUT_NAMESPACE", "web"),
    ]);
    let c = parse(
        file,
        Path::new("x/rollguard.yaml"),
        &Overrides::default(),
        &env,
    )
    .unwrap();
    assert_eq!(c.concurrency, 3);
    assert_eq!(c.on_cancel, CancelPolicy::Leave);
    assert_eq!(c.lock.timeout, Duration::from_secs(10));
    assert_eq!(c.rollback.timeout, Some(Duration::from_secs(60)));
    assert_eq!(c.kubeconfig, Some(PathBuf::from("/tmp/kc")));
    assert_eq!(c.namespace.as_deref(), Some("web"));
    assert_eq!(c.base_dir, PathBuf::from("x"));

    let with_kc = "app: shop\nmanifests: [k8s]\ntargets: [{name: eu, kubeconfig: kc/eu.yaml}, {name: us, kubeconfig: /abs/us.yaml}]\n";
    let c = parse(
        with_kc,
        Path::new("deploy/rollguard.yaml"),
        &Overrides::default(),
        &no_env,
    )
    .unwrap();
    assert_eq!(
        c.targets[0].kubeconfig,
        Some(PathBuf::from("deploy/kc/eu.yaml"))
    );
    assert_eq!(c.targets[1].kubeconfig, Some(PathBuf::from("/abs/us.yaml")));

    let bad = env_of(&[("INPUT_TIMEOUT", "soon"), ("ROLLGUARD_CONCURRENCY", "0")]);
    let err = parse(
        file,
        Path::new("rollguard.yaml"),
        &Overrides::default(),
        &bad,
    )
    .unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("$INPUT_TIMEOUT: invalid duration \"soon\""),
        "{text}"
    );
    assert!(
        text.contains("$ROLLGUARD_CONCURRENCY: concurrency must be"),
        "{text}"
    );
}

#[test]
fn context_selection() {
    let file = "app: shop\nmanifests: [k8s]\ntargets:\n  - {name: eu, context: sim-1}\n  - {name: us, context: sim-2}\n  - {name: ap, context: sim-3}\n";
    let src = Path::new("rollguard.yaml");
    let names = |flags: Overrides,
                 env: &'static [(&'static str, &'static str)]|
     -> Result<Vec<String>, String> {
        parse(file, src, &flags, &env_of(env))
            .map(|c| c.targets.into_iter().map(|t| t.name).collect())
            .map_err(|e| e.to_string())
    };
    let flags = |c: &[&str]| Overrides {
        targets: c.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    };
    assert_eq!(names(flags(&[]), &[]).unwrap(), vec!["eu", "us", "ap"]);
    assert_eq!(names(flags(&["us"]), &[]).unwrap(), vec!["us"]);
    assert_eq!(
        names(flags(&["sim-3", "eu"]), &[]).unwrap(),
        vec!["eu", "ap"]
    );
    assert_eq!(names(flags(&["eu,us"]), &[]).unwrap(), vec!["eu", "us"]);
    assert_eq!(
        names(flags(&[]), &[("INPUT_CONTEXTS", "ap\nus")]).unwrap(),
        vec!["us", "ap"]
    );
    assert_eq!(
        names(flags(&["eu"]), &[("INPUT_CONTEXTS", "ap")]).unwrap(),
        vec!["eu"]
    );
    let err = names(flags(&["ue"]), &[]).unwrap_err();
    assert!(
        err.starts_with("--target: no target is named \"ue\""),
        "{err}"
    );
    assert!(err.contains("did you mean \"us\"?"), "{err}");
}

#[test]
fn config_path_precedence() {
    assert_eq!(config_path(None, &no_env), PathBuf::from("rollguard.yaml"));
    assert_eq!(
        config_path(None, &env_of(&[("INPUT_CONFIG", "deploy/rg.yaml")])),
        PathBuf::from("deploy/rg.yaml")
    );
    assert_eq!(
        config_path(
            Some(Path::new("a.yaml")),
            &env_of(&[("INPUT_CONFIG", "b.yaml")])
        ),
        PathBuf::from("a.yaml")
    );
}

#[test]
fn load_reads_file_and_reports_missing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rollguard.yaml");
    std::fs::write(&path, MINIMAL).unwrap();
    let c = load(&path, &Overrides::default(), &no_env).unwrap();
    assert_eq!(c.base_dir, dir.path());
    let err = load(
        &dir.path().join("nope.yaml"),
        &Overrides::default(),
        &no_env,
    )
    .unwrap_err();
    assert!(err.to_string().contains("cannot read config file"), "{err}");
}

#[test]
fn nearest_table() {
    let keys = TOP_KEYS;
    let cases = [
        ("timout", Some("timeout"), &["timeout"][..]),
        ("targets", Some("targets"), keys),
        ("targts", Some("targets"), keys),
        ("Namespace", Some("namespace"), keys),
        ("onfailure", Some("on_failure"), keys),
        ("xyz", None, keys),
        ("histroy", Some("history"), keys),
    ];
    for (word, want, candidates) in cases {
        assert_eq!(nearest(word, candidates), want, "{word}");
    }
}

/// Every key the parser accepts is in the schema, and nothing else.
#[test]
fn schema_matches_parser_keys() {
    let schema = json_schema();
    let keys = |v: &Value| -> Vec<String> {
        let mut k: Vec<String> = v["properties"]
            .as_object()
            .unwrap()
            .keys()
            .cloned()
            .collect();
        k.sort();
        k
    };
    let sorted = |k: &[&str]| -> Vec<String> {
        let mut v: Vec<String> = k.iter().map(|s| s.to_string()).collect();
        v.sort();
        v
    };
    let p = &schema["properties"];
    assert_eq!(keys(&schema), sorted(TOP_KEYS));
    assert_eq!(keys(&p["targets"]["items"]), sorted(TARGET_KEYS));
    assert_eq!(keys(&p["wait"]), sorted(WAIT_KEYS));
    assert_eq!(
        keys(&p["wait"]["properties"]["fail_fast"]),
        sorted(FAIL_FAST_KEYS)
    );
    assert_eq!(keys(&p["history"]), sorted(HISTORY_KEYS));
    assert_eq!(keys(&p["rollback"]), sorted(ROLLBACK_KEYS));
    assert_eq!(keys(&p["lock"]), sorted(LOCK_KEYS));
    assert_eq!(keys(&p["github"]), sorted(GITHUB_KEYS));
    assert_eq!(keys(&p["waves"]["items"]), sorted(WAVE_KEYS));
    let scopes: Vec<&str> = Scope::ALL.iter().map(|s| s.as_str()).collect();
    assert_eq!(
        p["pipeline"]["items"]["oneOf"][1]["properties"]["script"]["properties"]["scope"]["enum"],
        json!(scopes)
    );
    assert_eq!(
        keys(&p["pipeline"]["items"]["oneOf"][1]["properties"]["script"]),
        sorted(super::pipeline::SCRIPT_KEYS)
    );
    assert_eq!(
        schema["$schema"],
        "https://json-schema.org/draft/2020-12/schema"
    );
    let policies: Vec<&str> = FailurePolicy::ALL.iter().map(|p| p.as_str()).collect();
    assert_eq!(
        parse_failure_policy("rollback_failed"),
        Some(FailurePolicy::RollbackFailed)
    );
    assert_eq!(parse_failure_policy("sometimes"), None);
    assert_eq!(p["on_failure"]["enum"], json!(policies));
}

/// docs/config-schema.json is `json_schema()`; regenerate with UPDATE_SCHEMAS=1.
#[test]
fn docs_schema_is_current() {
    crate::util::generated_docs::assert_current("config-schema.json", &json_schema());
}

/// The `pipeline:` walk.
mod pipeline {
    use super::super::*;
    use std::path::{Path, PathBuf};
    use std::time::Duration;

    const BASE: &str = "app: shop\nmanifests: [k8s]\ntargets:\n  - {name: eu, context: a}\n";

    fn parse_text(text: &str) -> Result<Vec<PipelineStage>, Vec<String>> {
        parse(
            text,
            Path::new("ci/rollguard.yaml"),
            &Overrides::default(),
            &|_| None,
        )
        .map(|c| c.pipeline)
        .map_err(|e| e.issues().iter().map(ToString::to_string).collect())
    }

    fn script(stage: &PipelineStage) -> &ScriptStage {
        match stage {
            PipelineStage::Script(s) => s,
            PipelineStage::Apply => panic!("script stage expected"),
        }
    }

    #[test]
    fn the_issue_example_and_defaults() {
        let text = format!(
            "{BASE}pipeline:
  - script: {{name: migrate, run: ./db/migrate up, rollback: ./db/migrate down, timeout: 2m, scope: fleet}}
  - apply
  - script: {{name: smoke, run: [./scripts/smoke.sh, --fast], timeout: 1m}}
"
        );
        let p = parse_text(&text).unwrap_or_else(|e| panic!("{e:#?}"));
        assert_eq!(p.len(), 3);
        assert_eq!(p[1], PipelineStage::Apply);
        let m = script(&p[0]);
        assert_eq!(m.name, "migrate");
        assert_eq!(m.scope, Scope::Fleet);
        assert_eq!(m.timeout, Duration::from_secs(120));
        assert_eq!(
            m.rollback,
            Some(ScriptCommand::Shell("./db/migrate down".into()))
        );
        assert_eq!(m.argv(&m.run), vec!["sh", "-c", "./db/migrate up"]);
        assert_eq!(m.working_dir, PathBuf::from("ci"));
        assert_eq!(m.kill_grace, DEFAULT_KILL_GRACE);
        assert!(!m.continue_on_error && !m.dry_run && !m.always);
        let s = script(&p[2]);
        assert_eq!(s.scope, Scope::Target);
        assert_eq!(s.argv(&s.run), vec!["./scripts/smoke.sh", "--fast"]);
        assert_eq!(s.rollback, None);
        // Without `pipeline:` there is only the apply stage.
        assert_eq!(parse_text(BASE).unwrap_or_default(), default_pipeline());
    }

    #[test]
    fn scope_wave() {
        let text = format!(
            "{BASE}pipeline:\n  - script: {{name: warm, run: ./warm.sh, scope: wave}}\n  - apply\n"
        );
        let p = parse_text(&text).unwrap_or_else(|e| panic!("{e:#?}"));
        let w = script(&p[0]);
        assert_eq!(w.scope, Scope::Wave);
        assert_eq!(w.scope.as_str(), "wave");
        assert!(w.scope.is_shared() && Scope::Fleet.is_shared() && !Scope::Target.is_shared());
        let errs = parse_text(&format!(
            "{BASE}pipeline:\n  - apply\n  - script: {{name: s, run: x, scope: wav}}\n"
        ))
        .expect_err("wav is not a scope");
        assert!(
            errs.iter().any(|e| e.starts_with(
                "ci/rollguard.yaml:7: stage \"s\" scope must be \"target\" (once per target), \"fleet\" (once for the whole deploy) or \"wave\" (once per wave), not \"wav\"; did you mean \"wave\"?"
            )),
            "{errs:#?}"
        );
    }

    #[test]
    fn every_key() {
        let text = format!(
            "{BASE}pipeline:
  - apply
  - script:
      name: smoke
      run: ./smoke
      timeout: 30s
      env: {{URL: http://x, RETRIES: 3, LOUD: true}}
      working_dir: /srv
      shell: bash -eu -c
      continue_on_error: true
      scope: target
      kill_grace: 1s
      dry_run: true
      always: true
      pass_env: [GITHUB_TOKEN, NPM_TOKEN]
"
        );
        let p = parse_text(&text).unwrap_or_else(|e| panic!("{e:#?}"));
        let s = script(&p[1]);
        assert_eq!(s.pass_env, vec!["GITHUB_TOKEN", "NPM_TOKEN"]);
        assert_eq!(s.timeout, Duration::from_secs(30));
        assert_eq!(s.env.get("RETRIES").map(String::as_str), Some("3"));
        assert_eq!(s.env.get("LOUD").map(String::as_str), Some("true"));
        assert_eq!(s.working_dir, PathBuf::from("/srv"));
        assert_eq!(s.argv(&s.run), vec!["bash", "-eu", "-c", "./smoke"]);
        assert!(s.continue_on_error && s.dry_run && s.always);
        assert_eq!(s.kill_grace, Duration::from_secs(1));
    }

    #[test]
    fn errors_name_file_and_line() {
        let p = |body: &str| format!("{BASE}pipeline:\n{body}");
        let cases: Vec<(String, &str)> = vec![
            (
                format!("{BASE}stages:\n  - name: m\n    script: x\n    when: before\n"),
                "ci/rollguard.yaml:5: `stages:` is gone: list the stages in order under `pipeline:`",
            ),
            (
                p("  - script: {name: m, run: x}\n"),
                "ci/rollguard.yaml:6: pipeline has no `apply` stage",
            ),
            (
                p("  - apply\n  - apply\n"),
                "ci/rollguard.yaml:7: `apply` may appear only once in pipeline (first at line 6)",
            ),
            (
                p("  - aply\n"),
                "ci/rollguard.yaml:6: pipeline[0] must be `apply` or `script: {name: ..., run: ...}`; did you mean \"apply\"?",
            ),
            (
                p("  - apply\n  - script: {name: s, run: x, timout: 1m}\n"),
                "ci/rollguard.yaml:7: unknown key \"timout\" in pipeline[1].script; did you mean \"timeout\"?",
            ),
            (
                p("  - apply\n  - script: {run: x}\n"),
                "ci/rollguard.yaml:7: pipeline[1].script needs a `name`",
            ),
            (
                p("  - apply\n  - script: {name: s}\n"),
                "ci/rollguard.yaml:7: stage \"s\" needs `run`",
            ),
            (
                p("  - apply\n  - script: {name: wait, run: x}\n"),
                "ci/rollguard.yaml:7: stage name \"wait\" is reserved",
            ),
            (
                p("  - apply\n  - script: {name: s, run: x}\n  - script: {name: s, run: y}\n"),
                "ci/rollguard.yaml:8: duplicate stage name \"s\" (first at line 7)",
            ),
            (
                p("  - apply\n  - script: {name: s, run: x, scope: fleat}\n"),
                "ci/rollguard.yaml:7: stage \"s\" scope must be \"target\"",
            ),
            (
                p("  - apply\n  - script: {name: s, run: x, timeout: soon}\n"),
                "ci/rollguard.yaml:7: stage \"s\" timeout:",
            ),
            (
                p("  - apply\n  - script: {name: s, run: x, timeout: 0s}\n"),
                "ci/rollguard.yaml:7: stage \"s\" timeout must be more than 0s",
            ),
            (
                p("  - apply\n  - script: {name: s, run: x, continue_on_error: yes please}\n"),
                "ci/rollguard.yaml:7: stage \"s\" continue_on_error must be true or false",
            ),
            (
                p("  - apply\n  - script: {name: s, run: []}\n"),
                "ci/rollguard.yaml:7: stage \"s\" run must not be an empty list",
            ),
            (
                p("  - apply\n  - script: {name: s, run: x, env: {1X: y}}\n"),
                "ci/rollguard.yaml:7: stage \"s\": env name \"1X\" is not a valid variable name",
            ),
            (
                p("  - apply\n  - script: {name: s, run: x, env: {A: \"a\\0b\"}}\n"),
                "ci/rollguard.yaml:7: stage \"s\": env A contains a NUL byte",
            ),
            (
                p("  - apply\n  - script:\n      name: s\n      run: \"echo \\0\"\n"),
                "ci/rollguard.yaml:9: stage \"s\" run contains a NUL byte",
            ),
            (
                p("  - apply\n  - script: {name: s, run: [echo, \"\\0\"]}\n"),
                "ci/rollguard.yaml:7: stage \"s\" run contains a NUL byte",
            ),
            (
                p("  - apply\n  - script: {name: s, run: x, rollback: \"y\\0\"}\n"),
                "ci/rollguard.yaml:7: stage \"s\" rollback contains a NUL byte",
            ),
            (
                p("  - apply\n  - script: {name: s, run: x, shell: \"ba\\0sh -c\"}\n"),
                "ci/rollguard.yaml:7: stage \"s\" shell contains a NUL byte",
            ),
            (
                p(
                    "  - apply\n  - script:\n      name: s\n      run: x\n      pass_env: GITHUB_TOKEN\n",
                ),
                "ci/rollguard.yaml:10: stage \"s\" pass_env must be a list of variable names",
            ),
            (
                p(
                    "  - apply\n  - script:\n      name: s\n      run: x\n      pass_env:\n        - GITHUB_TOKEN\n        - 9X\n",
                ),
                "ci/rollguard.yaml:12: stage \"s\" pass_env: \"9X\" is not a valid variable name",
            ),
            (
                p(
                    "  - apply\n  - script:\n      name: s\n      run: x\n      pass_env: [A_TOKEN, A_TOKEN]\n",
                ),
                "ci/rollguard.yaml:10: stage \"s\" pass_env: \"A_TOKEN\" is listed twice",
            ),
            (
                p("  - {apply: {}}\n"),
                "ci/rollguard.yaml:6: pipeline[0]: `apply` takes no settings",
            ),
            (
                format!("{BASE}pipeline: apply\n"),
                "ci/rollguard.yaml:5: pipeline must be a list of stages",
            ),
        ];
        for (text, want) in cases {
            let errs = parse_text(&text).expect_err(&text);
            assert!(
                errs.iter().any(|e| e.starts_with(want)),
                "want {want:?}\ngot {errs:#?}\nfor:\n{text}"
            );
        }
    }
}

#[test]
fn a_shell_that_cannot_be_found_is_bad_input() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().expect("tempdir");
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).expect("mkdir");
    let program = bin.join("myshell");
    std::fs::write(&program, "#!/bin/sh\n").expect("write");
    std::fs::set_permissions(&program, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let bin_path = format!("{}:/usr/bin:/bin", bin.display());
    // (the stage's settings, whether it is refused)
    let cases: Vec<(String, bool)> = vec![
        ("run: x".into(), false),
        ("run: x, shell: myshell -c".into(), false),
        ("run: x, shell: nosuchshell -c".into(), true),
        ("run: x, shell: ./bin/myshell".into(), false),
        ("run: x, shell: ./bin/nosuch".into(), true),
        (format!("run: x, shell: {}", program.display()), false),
        // Only a string command goes through the shell.
        ("run: [x], shell: nosuchshell".into(), false),
        ("run: [x], rollback: y, shell: nosuchshell".into(), true),
        // The stage's own PATH is the one the script gets.
        ("run: x, shell: myshell, env: {PATH: /nowhere}".into(), true),
    ];
    for (settings, refused) in cases {
        let text = format!(
            "app: shop\nmanifests: [k8s]\ntargets:\n  - {{name: eu, context: a}}\npipeline:\n  - apply\n  - script: {{name: s, {settings}}}\n"
        );
        let env = |k: &str| (k == "PATH").then(|| bin_path.clone());
        let config = parse(
            &text,
            &dir.path().join("rollguard.yaml"),
            &Overrides::default(),
            &env,
        )
        .unwrap_or_else(|e| panic!("{settings}: {e}"));
        let issues = missing_shells(&config, &env);
        assert_eq!(!issues.is_empty(), refused, "{settings}: {issues:?}");
        if let Some(issue) = issues.first() {
            assert!(issue.location.ends_with("rollguard.yaml:7"), "{issue}");
            assert!(
                issue.message.contains("stage \"s\": shell program"),
                "{issue}"
            );
        }
    }
}

#[test]
fn readme_lists_every_env_variable() {
    crate::util::generated_docs::assert_doc_section(
        "docs/configuration.md",
        "env-vars",
        &super::env_vars::readme_table(),
    );
}

/// The names after `prefix` in string literals of `text` (`"ROLLGUARD_TIMEOUT"` -> TIMEOUT).
fn names_after(text: &str, prefix: &str) -> Vec<String> {
    text.match_indices(prefix)
        .map(|(i, _)| {
            text[i + prefix.len()..]
                .chars()
                .take_while(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == '_')
                .collect::<String>()
        })
        .filter(|name| !name.is_empty())
        .collect()
}

#[test]
fn every_env_variable_the_code_reads_is_in_the_table() {
    use super::env_vars::{ENV_SETTINGS, setting};
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = vec![src.clone()];
    let mut read = Vec::new();
    while let Some(path) = files.pop() {
        if path.is_dir() {
            files.extend(std::fs::read_dir(&path).unwrap().map(|e| e.unwrap().path()));
            continue;
        }
        let rel = path.strip_prefix(&src).unwrap().display().to_string();
        // Test code, the variables rollguard sets for scripts (docs/pipeline-stages.md's
        // script table), and the test-only fault hook (read by debug builds alone).
        if !rel.ends_with(".rs")
            || rel.ends_with("tests.rs")
            || rel == "stages/env.rs"
            || rel == "util/fault.rs"
        {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let code = text.split("#[cfg(test)]\nmod tests").next().unwrap_or("");
        for prefix in ["\"ROLLGUARD_", "\"INPUT_"] {
            for name in names_after(code, prefix) {
                read.push((rel.clone(), format!("{}{name}", &prefix[1..])));
            }
        }
        // Settings looked up by name: `env_setting(env, "X")`, `env_setting(layers.env, "X")`
        // and `layers.get(flag, "X", parse)`.
        for prefix in ["env_setting(env, \"", "env_setting(layers.env, \""] {
            for name in names_after(code, prefix) {
                read.push((rel.clone(), format!("ROLLGUARD_{name}")));
            }
        }
        for line in code.lines().filter(|l| l.contains("layers.get(")) {
            if let Some((_, after)) = line.split_once(", \"") {
                for name in names_after(&format!("\"{after}"), "\"") {
                    read.push((rel.clone(), format!("ROLLGUARD_{name}")));
                }
            }
        }
    }
    assert!(
        read.iter().any(|(_, v)| v == "ROLLGUARD_TIMEOUT")
            && read.iter().any(|(_, v)| v == "ROLLGUARD_LEASE_SECONDS"),
        "the scan found too little: {read:?}"
    );
    let listed: Vec<String> = ENV_SETTINGS.iter().flat_map(|s| s.variables()).collect();
    // The runner sets this one in its children's environment; rollguard never reads it.
    read.retain(|(_, var)| var != crate::util::process_group::MARKER_VAR);
    for (file, var) in &read {
        assert!(
            listed.contains(var),
            "src/{file} reads {var}, which config::env_vars::ENV_SETTINGS does not list: add it there (and run UPDATE_README=1 cargo test --lib readme)"
        );
    }
    // And the other way: every listed setting is read somewhere.
    for s in ENV_SETTINGS {
        let var = format!("ROLLGUARD_{}", s.name);
        assert!(
            read.iter().any(|(_, v)| *v == var),
            "{var} is listed in ENV_SETTINGS but nothing in src/ reads it: remove it"
        );
        assert_eq!(setting(s.name), Some(s));
    }
}

#[test]
fn env_settings_are_read_as_rollguard_then_input() {
    let env = env_of(&[("INPUT_TIMEOUT", "2m"), ("ROLLGUARD_TIMEOUT", "3m")]);
    assert_eq!(
        super::overrides::env_setting(&env, "TIMEOUT"),
        Some(("3m".to_string(), "$ROLLGUARD_TIMEOUT".to_string()))
    );
    let env = env_of(&[("INPUT_TIMEOUT", "2m"), ("ROLLGUARD_TIMEOUT", " ")]);
    assert_eq!(
        super::overrides::env_setting(&env, "TIMEOUT"),
        Some(("2m".to_string(), "$INPUT_TIMEOUT".to_string()))
    );
    // LEASE_SECONDS has no INPUT_ form; a name outside the table reads nothing.
    let env = env_of(&[("INPUT_LEASE_SECONDS", "3"), ("ROLLGUARD_BOGUS", "x")]);
    assert_eq!(super::overrides::env_setting(&env, "LEASE_SECONDS"), None);
    assert_eq!(super::overrides::env_setting(&env, "BOGUS"), None);
}

/// `wave:` on targets, `waves:`, `wait.bake`, their accessors and `--wave`.
mod waves {
    use super::super::parse::*;
    use super::super::*;
    use super::{errors, no_env, parse_ok};
    use std::path::Path;
    use std::time::Duration;

    /// The example of issue 22.
    const EXAMPLE: &str = "app: shop
manifests: [k8s]
concurrency: 8
targets:
  - {name: canary, context: eu-1, wave: 0}
  - {name: eu, context: eu-2, wave: 1}
  - {name: us, context: us-1, wave: 1}
waves:
  - {wave: 0, bake: 10m}
  - {wave: 1, max_parallel: 1}
wait:
  bake: 2m
";

    const BASE: &str = "app: shop\nmanifests: [k8s]\ntargets:\n  - {name: eu, context: a}\n  - {name: us, context: b, wave: 2}\n";

    #[test]
    fn the_issue_example_parses() {
        let c = parse_ok(EXAMPLE);
        let waves: Vec<(&str, u32)> = c
            .targets
            .iter()
            .map(|t| (t.name.as_str(), t.wave))
            .collect();
        assert_eq!(waves, vec![("canary", 0), ("eu", 1), ("us", 1)]);
        assert_eq!(
            c.waves,
            vec![
                WaveConfig {
                    wave: 0,
                    bake: Some(Duration::from_secs(600)),
                    max_parallel: None,
                    checks: Vec::new(),
                    line: 9,
                },
                WaveConfig {
                    wave: 1,
                    bake: None,
                    max_parallel: Some(1),
                    checks: Vec::new(),
                    line: 10,
                },
            ]
        );
        assert_eq!(c.wait.bake, Duration::from_secs(120));
    }

    #[test]
    fn defaults() {
        let c = parse_ok("app: shop\nmanifests: [k8s]\ntargets:\n  - {name: eu, context: a}\n");
        assert_eq!(c.targets[0].wave, 0);
        assert!(c.waves.is_empty());
        assert_eq!(c.wait.bake, Duration::ZERO);
        assert_eq!(c.bake(0), Duration::ZERO);
        assert_eq!(c.max_parallel(0), 64);
        assert_eq!(c.wave_numbers(), vec![0]);
        // Block style, and an empty `waves:`.
        let c = parse_ok(&format!(
            "{BASE}waves:\n  - wave: 2\n    bake: 30s\n    max_parallel: 3\n"
        ));
        assert_eq!(c.bake(2), Duration::from_secs(30));
        assert_eq!(c.max_parallel(2), 3);
        assert_eq!(c.waves[0].line, 7);
        assert!(parse_ok(&format!("{BASE}waves:\n")).waves.is_empty());
        assert!(parse_ok(&format!("{BASE}waves: []\n")).waves.is_empty());
    }

    #[test]
    fn bake_is_the_entry_s_else_wait_bake() {
        let c = parse_ok(EXAMPLE);
        assert_eq!(c.bake(0), Duration::from_secs(600), "its own");
        assert_eq!(c.bake(1), Duration::from_secs(120), "no bake in its entry");
        assert_eq!(c.bake(5), Duration::from_secs(120), "no entry");
    }

    #[test]
    fn max_parallel_is_the_entry_s_else_concurrency() {
        let c = parse_ok(EXAMPLE);
        assert_eq!(c.max_parallel(1), 1, "its own");
        assert_eq!(c.max_parallel(0), 8, "no max_parallel in its entry");
        assert_eq!(c.max_parallel(5), 8, "no entry");
    }

    #[test]
    fn wave_numbers_are_sorted_and_distinct() {
        let c = parse_ok(
            "app: shop\nmanifests: [k8s]\ntargets:\n  - {name: a, context: a, wave: 3}\n  - {name: b, context: b}\n  - {name: c, context: c, wave: 3}\n  - {name: d, context: d, wave: 1}\n",
        );
        assert_eq!(c.wave_numbers(), vec![0, 1, 3]);
        assert_eq!(waves_text(&[]), "no wave");
        assert_eq!(waves_text(&[4]), "wave 4");
        assert_eq!(waves_text(&[0, 1, 3]), "waves 0, 1 and 3");
    }

    #[test]
    fn error_table() {
        let cases: Vec<(String, &str)> = vec![
            (
                format!("{BASE}  - {{name: ap, context: c, wave: -1}}\n"),
                "rollguard.yaml:6: target \"ap\" wave must be at least 0, not -1",
            ),
            (
                format!("{BASE}  - {{name: ap, context: c, wave: first}}\n"),
                "rollguard.yaml:6: target \"ap\" wave must be an integer, not a string",
            ),
            (
                format!("{BASE}  - {{name: ap, context: c, wave: 1.5}}\n"),
                "rollguard.yaml:6: target \"ap\" wave must be an integer, not",
            ),
            (
                format!("{BASE}  - {{name: ap, context: c, wave: 4294967296}}\n"),
                "rollguard.yaml:6: target \"ap\" wave must be at most 4294967295, not 4294967296",
            ),
            (
                format!("{BASE}  - {{name: ap, context: c, wav: 1}}\n"),
                "rollguard.yaml:6: unknown key \"wav\" in targets[2]; did you mean \"wave\"?",
            ),
            (
                format!("{BASE}waves: {{wave: 0}}\n"),
                "rollguard.yaml:6: waves must be a list of wave settings",
            ),
            (
                format!("{BASE}waves:\n  - {{wave: 0, bak: 1m}}\n"),
                "rollguard.yaml:7: unknown key \"bak\" in waves[0]; did you mean \"bake\"?",
            ),
            (
                format!("{BASE}waves:\n  - {{wave: 0}}\n  - {{max_paralel: 2, wave: 2}}\n"),
                "rollguard.yaml:8: unknown key \"max_paralel\" in waves[1]; did you mean \"max_parallel\"?",
            ),
            (
                format!("{BASE}waves:\n  - {{bake: 1m}}\n"),
                "rollguard.yaml:7: waves[0] needs `wave`",
            ),
            (
                format!("{BASE}waves:\n  - 0\n"),
                "rollguard.yaml:7: waves[0] must be a mapping, not",
            ),
            (
                format!("{BASE}waves:\n  - {{wave: 2, bake: 1m}}\n  - {{wave: 0}}\n  - wave: 2\n"),
                "rollguard.yaml:9: duplicate entry for wave 2 in waves (first at line 7); set each wave once",
            ),
            (
                format!("{BASE}waves:\n  - {{wave: 0}}\n  - {{wave: 1, bake: 1m}}\n"),
                "rollguard.yaml:8: waves: no target is in wave 1 (the targets are in waves 0 and 2); set `wave: 1` on a target or remove this entry",
            ),
            (
                format!("{BASE}waves:\n  - {{wave: 0, max_parallel: 0}}\n"),
                "rollguard.yaml:7: wave 0 max_parallel must be at least 1, not 0",
            ),
            (
                format!("{BASE}waves:\n  - {{wave: 0, max_parallel: all}}\n"),
                "rollguard.yaml:7: wave 0 max_parallel must be an integer, not a string",
            ),
            (
                format!("{BASE}waves:\n  - {{wave: 0, bake: 10 minutes}}\n"),
                "rollguard.yaml:7: wave 0 bake: invalid duration \"10 minutes\"",
            ),
            (
                format!("{BASE}waves:\n  - {{wave: 0, bake: 25h}}\n"),
                "rollguard.yaml:7: wave 0 bake: invalid duration \"25h\": longer than the maximum of 24h",
            ),
            (
                format!("{BASE}waves:\n  - {{wave: -2}}\n"),
                "rollguard.yaml:7: waves[0].wave must be at least 0, not -2",
            ),
            (
                format!("{BASE}wait:\n  bake: later\n"),
                "rollguard.yaml:7: wait.bake: invalid duration \"later\"",
            ),
            (
                format!("{BASE}wait:\n  bak: 1m\n"),
                "rollguard.yaml:7: unknown key \"bak\" in wait; did you mean \"bake\"?",
            ),
            (
                format!("{BASE}wave:\n  - {{wave: 0}}\n"),
                "rollguard.yaml:6: unknown key \"wave\" in the top level; did you mean \"waves\"?",
            ),
        ];
        for (text, want) in cases {
            let errs = errors(&text);
            assert!(
                errs.iter().any(|e| e.starts_with(want)),
                "want {want:?}\ngot {errs:#?}\nfor:\n{text}"
            );
        }
    }

    /// `--wave N` after `--target`: the result, or the message at `--wave`.
    fn select(targets: &[&str], wave: Option<u32>) -> Result<Vec<String>, Vec<String>> {
        let overrides = Overrides {
            targets: targets.iter().map(|s| s.to_string()).collect(),
            wave,
            ..Default::default()
        };
        parse(EXAMPLE, Path::new("rollguard.yaml"), &overrides, &no_env)
            .map(|c| c.targets.into_iter().map(|t| t.name).collect())
            .map_err(|e| e.issues().iter().map(ToString::to_string).collect())
    }

    #[test]
    fn wave_flag_selects_the_wave_s_targets() {
        assert_eq!(select(&[], None).unwrap(), vec!["canary", "eu", "us"]);
        assert_eq!(select(&[], Some(1)).unwrap(), vec!["eu", "us"]);
        assert_eq!(select(&[], Some(0)).unwrap(), vec!["canary"]);
        assert_eq!(select(&["us", "canary"], Some(1)).unwrap(), vec!["us"]);
        // The waves of the settings stay: the coordinator asks them by number.
        let overrides = Overrides {
            wave: Some(1),
            ..Default::default()
        };
        let c = parse(EXAMPLE, Path::new("rollguard.yaml"), &overrides, &no_env)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(c.wave_numbers(), vec![1]);
        assert_eq!(c.max_parallel(1), 1);
    }

    /// The targets `deploy --wave N` checks first: every target of the file below wave N.
    #[test]
    fn wave_flag_keeps_the_earlier_waves_targets() {
        let earlier = |targets: &[&str], wave: Option<u32>| {
            let overrides = Overrides {
                targets: targets.iter().map(|s| s.to_string()).collect(),
                wave,
                ..Default::default()
            };
            let c = parse(EXAMPLE, Path::new("rollguard.yaml"), &overrides, &no_env)
                .unwrap_or_else(|e| panic!("{e}"));
            c.earlier_waves
                .into_iter()
                .map(|t| t.name)
                .collect::<Vec<_>>()
        };
        assert!(earlier(&[], None).is_empty());
        assert!(earlier(&[], Some(0)).is_empty());
        assert_eq!(earlier(&[], Some(1)), vec!["canary"]);
        // `--target` picks what deploys, not what wave 1 follows.
        assert_eq!(earlier(&["us"], Some(1)), vec!["canary"]);
    }

    #[test]
    fn wave_flag_errors() {
        assert_eq!(
            select(&[], Some(7)).unwrap_err(),
            vec![
                "--wave: no target is in wave 7: the targets are in waves 0 and 1 (a target without `wave:` is in wave 0); pick one of them"
            ]
        );
        assert_eq!(
            select(&["canary"], Some(1)).unwrap_err(),
            vec![
                "--wave: --wave 1 and --target canary select no target: the targets selected are in wave 0; pick another wave or add a target of wave 1"
            ]
        );
        // A wrong `--target` is said once, not again as an empty wave.
        let errs = select(&["canry"], Some(1)).unwrap_err();
        assert_eq!(errs.len(), 1, "{errs:#?}");
        assert!(
            errs[0].starts_with("--target: no target is named \"canry\""),
            "{errs:#?}"
        );
        // Both wrong: both said.
        assert_eq!(select(&["canry"], Some(7)).unwrap_err().len(), 2);
    }
}

mod checks {
    use super::*;

    const CHECKS: &str = r#"app: shop
manifests: [k8s/]
targets:
  - name: canary
    context: c
    vars: {region: eu-west}
  - name: eu
    context: e
    wave: 1
    vars: {region: eu}
checks:
  - name: error-rate
    prometheus:
      url_env: PROM_URL
      token_env: PROM_TOKEN
      query: sum(rate(x{cluster="{{target}}",region="{{ vars.region }}"}[1m]))
    fail_if: "> 0.01"
    interval: 2s
    failures_allowed: 1
    no_data: fail
waves:
  - wave: 0
    bake: 6s
    checks:
      - name: healthz
        http:
          url: "https://{{target}}.shop.example.com/healthz"
          expect_status: [200, 204]
          expect_body: "ok|fine"
          timeout: 3s
        interval: 5s
        on_error: pass
"#;

    fn env(name: &str) -> Option<String> {
        match name {
            "PROM_URL" => Some("http://prom:9090".into()),
            "PROM_TOKEN" => Some("s3cret-token".into()),
            _ => None,
        }
    }

    fn parse_with(text: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<Config, Vec<String>> {
        parse(
            text,
            Path::new("rollguard.yaml"),
            &Overrides::default(),
            env,
        )
        .map_err(|e| e.issues().iter().map(|i| i.to_string()).collect())
    }

    #[test]
    fn top_level_and_wave_checks_parse() {
        let c = parse_with(CHECKS, &env).unwrap_or_else(|e| panic!("{e:#?}"));
        let canary: Vec<&str> = c
            .checks_for(&c.targets[0])
            .iter()
            .map(|c| c.name.as_str())
            .collect();
        assert_eq!(canary, vec!["error-rate", "healthz"]);
        let eu: Vec<&str> = c
            .checks_for(&c.targets[1])
            .iter()
            .map(|c| c.name.as_str())
            .collect();
        assert_eq!(eu, vec!["error-rate"]);
        let rate = &c.checks[0];
        assert_eq!(rate.interval, Duration::from_secs(2));
        assert_eq!(rate.failures_allowed, 1);
        assert_eq!(rate.no_data, Unclear::Fail);
        assert_eq!(rate.on_error, Unclear::Inconclusive);
        assert_eq!(
            rate.fail_if,
            Some(FailIf {
                op: Comparison::Greater,
                threshold: 0.01
            })
        );
        let CheckSource::Prometheus(p) = &rate.source else {
            panic!("{rate:?}")
        };
        assert_eq!(p.url, "http://prom:9090");
        assert_eq!(p.auth, Auth::Bearer(Credential::new("s3cret-token")));
        assert!(!format!("{c:?}").contains("s3cret-token"));
        let healthz = &c.waves[0].checks[0];
        let CheckSource::Http(h) = &healthz.source else {
            panic!("{healthz:?}")
        };
        assert_eq!(h.expect_status, vec![200, 204]);
        assert_eq!(h.expect_body.as_deref(), Some("ok|fine"));
        assert_eq!(h.timeout, Duration::from_secs(3));
        assert_eq!(healthz.interval, Duration::from_secs(5));
        assert_eq!(healthz.on_error, Unclear::Pass);
        assert_eq!(healthz.fail_if, None);
        assert_eq!(
            c.targets[0].vars.get("region").map(String::as_str),
            Some("eu-west")
        );
    }

    #[test]
    fn bad_checks_are_file_line_issues() {
        let table: &[(&str, &str, &str)] = &[
            (
                "    fail_if: \"> 0.01\"",
                "    fail_if: \"about 0.01\"",
                "rollguard.yaml:17: check \"error-rate\" fail_if: \"about 0.01\" does not start with a comparison",
            ),
            (
                "    fail_if: \"> 0.01\"",
                "    fail_if: \"> lots\"",
                "rollguard.yaml:17: check \"error-rate\" fail_if: \"lots\" is not a number",
            ),
            (
                "    interval: 2s",
                "    intervall: 2s",
                "rollguard.yaml:18: unknown key \"intervall\" in checks[0]; did you mean \"interval\"?",
            ),
            (
                "{{ vars.region }}",
                "{{ vars.zone }}",
                "target canary, eu has no `vars: {zone: ...}`",
            ),
            (
                "{{target}}\",region",
                "{{taget}}\",region",
                "unknown template {{taget}} (known: target, app, namespace, revision, commit, vars.KEY); did you mean {{target}}?",
            ),
            (
                "      - name: healthz",
                "      - name: error-rate",
                "rollguard.yaml:25: duplicate check name \"error-rate\" (first at line 12)",
            ),
            (
                "    no_data: fail",
                "    no_data: fial",
                "rollguard.yaml:20: check \"error-rate\" no_data: \"fial\" is not one of fail, pass, inconclusive",
            ),
            (
                "expect_body: \"ok|fine\"",
                "expect_body: \"ok(\"",
                "expect_body is not a regular expression",
            ),
            (
                "expect_status: [200, 204]",
                "expect_status: [200, 999]",
                "expect_status must be HTTP statuses",
            ),
        ];
        for (from, to, want) in table {
            assert!(CHECKS.contains(from), "{from}");
            let text = CHECKS.replace(from, to);
            let errs = parse_with(&text, &env).expect_err(to);
            assert!(
                errs.iter().any(|e| e.contains(want)),
                "{to}: want {want:?} in {errs:#?}"
            );
        }
        // Unset variables: said at their lines for the commands that run checks, not for
        // the release commands; the check is left out.
        let c = parse_with(CHECKS, &no_env).unwrap_or_else(|e| panic!("{e:#?}"));
        let said: Vec<String> = c.check_env_issues.iter().map(|i| i.to_string()).collect();
        assert_eq!(
            said,
            vec![
                "rollguard.yaml:14: check \"error-rate\" prometheus: url_env: $PROM_URL is not set (or empty); set it in the job's environment",
                "rollguard.yaml:15: check \"error-rate\" prometheus: token_env: $PROM_TOKEN is not set (or empty); set it in the job's environment",
            ]
        );
        assert_eq!(c.checks, Vec::new());
    }

    #[test]
    fn fail_if_parses_every_operator() {
        let table: &[(&str, Comparison, f64)] = &[
            ("> 0.01", Comparison::Greater, 0.01),
            (">=5", Comparison::GreaterOrEqual, 5.0),
            (" < 1e3 ", Comparison::Less, 1000.0),
            ("<= -2", Comparison::LessOrEqual, -2.0),
            ("== 0", Comparison::Equal, 0.0),
            ("!= 1", Comparison::NotEqual, 1.0),
        ];
        for (text, op, threshold) in table {
            let f: FailIf = text.parse().unwrap_or_else(|e| panic!("{text}: {e}"));
            assert_eq!((f.op, f.threshold), (*op, *threshold), "{text}");
        }
        for bad in ["", "0.01", "=> 1", "> ", "> NaN", "> inf", "~ 1"] {
            assert!(bad.parse::<FailIf>().is_err(), "{bad:?}");
        }
        assert_eq!(
            "> 0.01".parse::<FailIf>().map(|f| f.to_string()),
            Ok("> 0.01".to_string())
        );
    }
}

/// `wait.log_lines`: how many log lines of a failing container the report keeps; 0 reads none.
#[test]
fn log_lines_are_read_from_wait() {
    let base = "app: shop\nmanifests: [k8s/]\ntargets:\n  - name: eu\n    context: c\n";
    for (text, want) in [("5", 5), ("0", 0), ("\"7\"", 7)] {
        let c = parse_ok(&format!("{base}wait:\n  log_lines: {text}\n"));
        assert_eq!(c.wait.log_lines, want, "{text}");
    }
}

/// `memory_budget:` in the file, `ROLLGUARD_MEMORY_BUDGET`, `--memory-budget`: the bytes, or
/// the problem at its place; and where a concurrency was set (None: the budget decides).
#[test]
fn memory_budget_and_where_the_concurrency_was_set() {
    const MIB: u64 = 1024 * 1024;
    let base = "app: shop\nmanifests: [k8s]\ntargets: [{name: eu, context: sim-1}]\n";
    // (file addition, env, flag, Ok((budget, concurrency set by)) or Err(problem))
    type Case = (
        &'static str,
        &'static [(&'static str, &'static str)],
        Option<u64>,
        Result<(u64, Option<&'static str>), &'static str>,
    );
    let cases: &[Case] = &[
        ("", &[], None, Ok((512 * MIB, None))),
        ("memory_budget: 1GiB\n", &[], None, Ok((1024 * MIB, None))),
        ("memory_budget: 64Mi\n", &[], None, Ok((64 * MIB, None))),
        (
            "memory_budget: 1GiB\n",
            &[("ROLLGUARD_MEMORY_BUDGET", "256MiB")],
            None,
            Ok((256 * MIB, None)),
        ),
        (
            "memory_budget: 1GiB\n",
            &[("ROLLGUARD_MEMORY_BUDGET", "256MiB")],
            Some(8 * MIB),
            Ok((8 * MIB, None)),
        ),
        (
            "concurrency: 4\n",
            &[],
            None,
            Ok((512 * MIB, Some("rollguard.yaml:4"))),
        ),
        (
            "",
            &[("INPUT_CONCURRENCY", "3")],
            None,
            Ok((512 * MIB, Some("$INPUT_CONCURRENCY"))),
        ),
        (
            "memory_budget: 512MB\n",
            &[],
            None,
            Err("rollguard.yaml:4: memory_budget: \"512MB\" is not a memory size"),
        ),
        (
            "memory_budget: 512\n",
            &[],
            None,
            Err("rollguard.yaml:4: memory_budget must be a size like \"512MiB\""),
        ),
        (
            "memory_budget: 0GiB\n",
            &[],
            None,
            Err("rollguard.yaml:4: memory_budget: \"0GiB\" is zero"),
        ),
        (
            "",
            &[("ROLLGUARD_MEMORY_BUDGET", "lots")],
            None,
            Err("$ROLLGUARD_MEMORY_BUDGET: \"lots\" is not a memory size"),
        ),
    ];
    for &(extra, env, flag, want) in cases {
        let text = format!("{base}{extra}");
        let env = env_of(env);
        let flags = Overrides {
            memory_budget: flag,
            ..Overrides::default()
        };
        let got = parse(&text, Path::new("rollguard.yaml"), &flags, &env);
        match (got, want) {
            (Ok(c), Ok((budget, set_by))) => {
                assert_eq!(c.memory_budget, budget, "{text}");
                assert_eq!(c.concurrency_set_by.as_deref(), set_by, "{text}");
            }
            (Err(e), Err(problem)) => {
                let e = e.to_string();
                assert!(e.contains(problem), "{text}: {e}");
            }
            (got, want) => panic!("{text}: got {got:?}, want {want:?}"),
        }
    }
    let flagged = Overrides {
        concurrency: Some(2),
        ..Overrides::default()
    };
    let c = parse(
        &format!("{base}concurrency: 4\n"),
        Path::new("rollguard.yaml"),
        &flagged,
        &no_env,
    )
    .unwrap();
    assert_eq!(c.concurrency, 2);
    assert_eq!(c.concurrency_set_by.as_deref(), Some("--concurrency"));
}

/// The config examples of the README and docs/configuration.md (each ```yaml block that
/// starts with `app:`) are configs rollguard takes as they are.
#[test]
fn readme_and_docs_config_examples_parse() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut seen = 0;
    for page in ["README.md", "docs/configuration.md"] {
        let text = std::fs::read_to_string(root.join(page)).unwrap();
        for block in text.split("```yaml\n").skip(1) {
            let block = block.split("```").next().unwrap_or("");
            if !block.starts_with("app:") {
                continue;
            }
            seen += 1;
            if let Err(e) = parse(
                block,
                Path::new("rollguard.yaml"),
                &Overrides::default(),
                &no_env,
            ) {
                panic!("a config example of {page} is refused: {e}\n{block}");
            }
        }
    }
    assert!(seen >= 3, "found only {seen} config examples");
}

/// Every enumerated setting: the file, the environment and clap read one list of names (the
/// `named_choices!` table), in any case, with the extra spellings; a bad value says the list
/// and the nearest name.
#[test]
fn enumerated_settings_read_one_list_of_names() {
    use super::names::{NotOneOf, choice_names, parse_choice};
    use FailurePolicy::*;
    let not_one_of = |got: &str, near: Option<&str>| NotOneOf {
        got: got.into(),
        choices: FailurePolicy::ALL.map(|p| p.as_str().to_string()).to_vec(),
        near: near.map(str::to_string),
    };
    let cases: Vec<(&str, Result<FailurePolicy, NotOneOf>)> = vec![
        ("rollback-all", Ok(RollbackAll)),
        (" Rollback-Failed\n", Ok(RollbackFailed)),
        ("rollback_if_all_fail", Ok(RollbackIfAllFail)),
        ("ROLLBACK_ALL", Ok(RollbackAll)),
        ("NONE", Ok(None)),
        (
            "rollback-al",
            Err(not_one_of("rollback-al", Some("rollback-all"))),
        ),
        ("sometimes", Err(not_one_of("sometimes", Option::None))),
        ("", Err(not_one_of("", Option::None))),
    ];
    for (text, want) in cases {
        assert_eq!(parse_choice::<FailurePolicy>(text), want, "{text:?}");
        assert_eq!(text.parse::<FailurePolicy>(), want, "{text:?}");
    }
    assert_eq!(
        not_one_of("rollback-al", Some("rollback-all")).to_string(),
        "\"rollback-al\" is not one of rollback-all, rollback-failed, rollback-if-all-fail, none; did you mean \"rollback-all\"?"
    );
    assert_eq!(
        "inconclusiv".parse::<Unclear>().map_err(|e| e.to_string()),
        Err("\"inconclusiv\" is not one of fail, pass, inconclusive; did you mean \"inconclusive\"?".to_string())
    );
    // The names clap lists are `as_str` of every variant, in order, aliases left out; each
    // name reads back as its variant.
    fn round_trip<
        T: clap::ValueEnum + std::str::FromStr + std::fmt::Display + PartialEq + std::fmt::Debug,
    >(
        all: &[T],
    ) {
        let names: Vec<String> = all.iter().map(T::to_string).collect();
        assert_eq!(choice_names::<T>(), names);
        for (v, name) in all.iter().zip(&names) {
            assert_eq!(name.parse::<T>().ok().as_ref(), Some(v), "{name}");
        }
    }
    round_trip(&FailurePolicy::ALL);
    round_trip(&CancelPolicy::ALL);
    round_trip(&RenderHooks::ALL);
    round_trip(&RollbackOrder::ALL);
    round_trip(&SecretsPolicy::ALL);
    round_trip(&UnschedulablePolicy::ALL);
    round_trip(&Unclear::ALL);
    // The schema's enums are these names (history.secrets lists its default first).
    let schema = json_schema();
    let p = &schema["properties"];
    let mut secrets: Vec<String> =
        serde_json::from_value(p["history"]["properties"]["secrets"]["enum"].clone())
            .unwrap_or_default();
    secrets.sort();
    let mut names = choice_names::<SecretsPolicy>();
    names.sort();
    assert_eq!(secrets, names);
    assert_eq!(
        p["on_cancel"]["enum"],
        json!(choice_names::<CancelPolicy>())
    );
    assert_eq!(
        p["wait"]["properties"]["fail_fast"]["properties"]["unschedulable"]["enum"],
        json!(["warn", "fail"])
    );
}

/// `nearest`: a typo of at most a third of the word (at least one edit) is suggested.
#[test]
fn nearest_names_only_a_close_word() {
    let words = ["rollback", "leave", "apply", "inconclusive"];
    for (word, want) in [
        ("rolback", Some("rollback")),
        ("ROLLBACK", Some("rollback")),
        ("leav", Some("leave")),
        ("aply", Some("apply")),
        ("lv", None),
        ("fial", None),
        ("inconclsuive", Some("inconclusive")),
        ("something", None),
    ] {
        assert_eq!(nearest(word, &words), want, "{word}");
    }
}
