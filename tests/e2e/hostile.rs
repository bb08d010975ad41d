//! Hostile input files through the real binary: each is bad input (exit 2) said in one line
//! with its file and line, and nothing is written to the cluster.

use crate::harness::{TestEnv, config, small_app};

#[path = "../../src/util/yaml_fixtures.rs"]
mod yaml_fixtures;

/// The lib tests' alias bomb, 12 levels deep.
fn alias_bomb() -> String {
    yaml_fixtures::alias_bomb(12)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_manifests_are_bad_input_with_file_and_line_and_zero_writes() {
    let env = TestEnv::start(1, "").await;
    env.write("rollguard.yaml", &config(1, "60s"));
    let cm = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n";
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("alias bomb", format!("{cm}---\n{}", alias_bomb()).into_bytes(), "k8s/x.yaml:10: not valid YAML: its aliases (`*name`) expand past the cap of 200,000 replayed nodes"),
        (
            "nesting 10,000 deep",
            format!("{cm}---\nx: {}{}\n", "[".repeat(10_000), "]".repeat(10_000)).into_bytes(),
            "k8s/x.yaml:5: not valid YAML: nested deeper than 100 levels (the cap)",
        ),
        ("100,000 tiny documents", "a: 1\n---\n".repeat(100_000).into_bytes(), "k8s/x.yaml:20000: more than 10000 YAML documents"),
        ("invalid UTF-8", b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: \xff}\n".to_vec(), "k8s/x.yaml:3: is not UTF-8 text: byte 0xff at line 3"),
        ("NUL byte", b"apiVersion: v1\nkind: Config\0Map\n".to_vec(), "k8s/x.yaml:2: contains a NUL byte"),
        ("duplicate keys", format!("{cm}data: {{}}\ndata: {{}}\n").into_bytes(), "k8s/x.yaml:5: not valid YAML: duplicate mapping key: data"),
        ("colliding keys", format!("{cm}data:\n  1: a\n  \"1\": b\n").into_bytes(), "k8s/x.yaml:6: not valid YAML: key \"1\" collides with key 1 at line 5"),
        ("colliding merge keys", format!("{cm}x: &x {{\"1\": a}}\ndata:\n  <<: *x\n  1: b\n").into_bytes(), "k8s/x.yaml:6: not valid YAML: key \"1\" collides with key 1 at line 7"),
        (
            "integer past i64",
            b"apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: w}\nspec:\n  replicas: 99999999999999999999999\n".to_vec(),
            "k8s/x.yaml:5: not valid YAML: number 1e23 does not fit in a 64-bit integer",
        ),
    ];
    for (what, bytes, expected) in cases {
        // A good file beside the hostile one: it must not be applied either.
        env.write("k8s/a-good.yaml", &small_app("example.com/web:v1"));
        std::fs::write(env.path("k8s/x.yaml"), &bytes).unwrap();
        let run = env.deploy(&[]).await;
        assert_eq!(run.code, 2, "{what}: {}", run.output());
        assert!(run.stderr.contains(expected), "{what}: {}", run.output());
        assert!(
            run.stderr.len() < 4096,
            "{what}: {} bytes of stderr",
            run.stderr.len()
        );
        assert_eq!(env.writes(1), 0, "{what}: sim-1 got a write");
    }

    // JSON too: serde_json would keep the last of two equal keys silently.
    std::fs::remove_file(env.path("k8s/x.yaml")).unwrap();
    env.write(
        "k8s/x.json",
        "{\"apiVersion\": \"v1\", \"kind\": \"ConfigMap\",\n \"metadata\": {\"name\": \"a\",\n  \"name\": \"b\"}}\n",
    );
    let run = env.deploy(&[]).await;
    assert_eq!(run.code, 2, "{}", run.output());
    assert!(
        run.stderr.contains(
            "k8s/x.json:3: not valid JSON: key \"name\" is given twice in one object; keep one"
        ),
        "{}",
        run.output()
    );
    assert_eq!(env.writes(1), 0);
    std::fs::remove_file(env.path("k8s/x.json")).unwrap();

    // 200 MB: refused from its size (sparse: nothing to read anyway).
    let big = std::fs::File::create(env.path("k8s/x.yaml")).unwrap();
    big.set_len(200 * 1024 * 1024).unwrap();
    let run = env.deploy(&[]).await;
    assert_eq!(run.code, 2, "{}", run.output());
    assert!(
        run.stderr
            .contains("k8s/x.yaml: is 200 MiB, over the 16 MiB cap on one manifest file"),
        "{}",
        run.output()
    );
    assert_eq!(env.writes(1), 0);

    // Endless render output: stopped at its cap, said so.
    env.write(
        "rollguard.yaml",
        &config(1, "60s").replace("manifests: [k8s/]", "render: \"yes\""),
    );
    let run = env.deploy(&[]).await;
    assert_eq!(run.code, 2, "{}", run.output());
    assert!(
        run.stderr
            .contains("its output passed the 32 MiB cap on render output"),
        "{}",
        run.output()
    );
    assert_eq!(env.writes(1), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hostile_config_file_is_bad_input_with_its_line() {
    let env = TestEnv::start(1, "").await;
    env.write("k8s/app.yaml", &small_app("example.com/web:v1"));
    let cases: Vec<(String, &str)> = vec![
        (
            format!("{}x: &x [1]\n{}", config(1, "60s"), alias_bomb()),
            "rollguard.yaml:",
        ),
        (
            format!("{}concurrency: 99999999999999999999999\n", config(1, "60s")),
            "does not fit in a 64-bit integer",
        ),
        (
            format!("{}1: a\n\"1\": b\n", config(1, "60s")),
            "collides with key 1",
        ),
    ];
    for (text, expected) in cases {
        env.write("rollguard.yaml", &text);
        let run = env.deploy(&[]).await;
        assert_eq!(run.code, 2, "{}", run.output());
        assert!(run.stderr.contains(expected), "{}", run.output());
        assert_eq!(env.writes(1), 0);
    }
    std::fs::write(env.path("rollguard.yaml"), b"app: sh\xffop\n").unwrap();
    let run = env.deploy(&[]).await;
    assert_eq!(run.code, 2, "{}", run.output());
    assert!(
        run.stderr
            .contains("rollguard.yaml:1: is not UTF-8 text: byte 0xff at line 1"),
        "{}",
        run.output()
    );
}
