//! Image pulls judged by what the error says: a registry hiccup is waited out, a pull that
//! cannot succeed fails at once, a hiccup that outlasts `pull_grace` fails saying how long.

use crate::harness::{TestEnv, small_app};

const GOOD: &str = "example.com/web:v1";
const NEXT: &str = "example.com/web:v2";

/// containerd's 503 text for the next image (labring/sealos#1047's form).
const E503: &str = "rpc error: code = Unknown desc = failed to pull and unpack image \\\"example.com/web:v2\\\": failed to resolve reference \\\"example.com/web:v2\\\": pulling from host example.com failed with status code [manifests v2]: 503 Service Unavailable";
/// containerd's NotFound text for the next image (cvisionai/tator#439's form).
const NOT_FOUND: &str = "rpc error: code = NotFound desc = failed to pull and unpack image \\\"example.com/web:v2\\\": failed to resolve reference \\\"example.com/web:v2\\\": example.com/web:v2: not found";

/// One cluster where the next image's first `times` pulls fail with `message` (every pull
/// when `times` is None), and a good first release deployed there.
async fn env_with_pulls(times: Option<u32>, message: &str, fail_fast: &str) -> TestEnv {
    let times = times.map(|t| format!(", times: {t}")).unwrap_or_default();
    let rules = format!(
        "- {{image: \"{NEXT}\", behaviour: ImagePullBackOff{times}, message: \"{message}\"}}\n"
    );
    let env = TestEnv::start(1, &rules).await;
    env.write(
        "rollguard.yaml",
        &format!(
            "app: shop\nnamespace: shop\nmanifests: [k8s/]\nwait:\n  timeout: 5m\n  fail_fast:\n{fail_fast}targets:\n  - name: eu\n    context: sim-1\n"
        ),
    );
    env.write("k8s/app.yaml", &small_app(GOOD));
    let first = env.deploy(&[]).await;
    assert_eq!(first.code, 0, "{}", first.output());
    env.write("k8s/app.yaml", &small_app(NEXT));
    env
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registry_503_twice_then_a_pull_deploys_and_nothing_is_rolled_back() {
    let env = env_with_pulls(Some(2), E503, "    pull_grace: 60s\n").await;
    // The default policy rolls back on failure: a verdict on the 503 would roll back.
    let run = env.deploy(&[]).await;
    assert_eq!(run.code, 0, "{}", run.output());
    assert_eq!(run.outcome("eu"), "deployed", "{}", run.output());
    assert!(run.target("eu")["rollback"].is_null(), "{}", run.output());
    assert_eq!(
        run.target("eu")["failures"].as_array().map(Vec::len),
        Some(0),
        "{}",
        run.output()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_not_found_pull_fails_at_once() {
    // The same script with NotFound's words; a grace longer than the wait cannot decide.
    let env = env_with_pulls(Some(2), NOT_FOUND, "    pull_grace: 24h\n").await;
    let run = env.deploy(&["--on-failure", "none"]).await;
    assert_eq!(run.code, 1, "{}", run.output());
    assert_eq!(run.outcome("eu"), "failed", "{}", run.output());
    let failure = run.target("eu")["failures"][0].clone();
    // Decided once the kubelet backed off from the first pull.
    assert_eq!(failure["reason"], "ImagePullBackOff", "{failure:#}");
    let message = failure["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("example.com/web:v2: not found")
            && message.ends_with("(cannot succeed: the image or tag does not exist)"),
        "{failure:#}"
    );
    // Decided by order, not by a clock: before the kubelet's second pull (10 simulated
    // seconds after the first back-off began), so the pull error was seen once (a repeated
    // event would read `(x2)`).
    let events = failure["events"].as_array().cloned().unwrap_or_default();
    let pulls: Vec<&str> = events
        .iter()
        .filter_map(|e| e.as_str())
        .filter(|e| e.contains("Failed to pull image"))
        .collect();
    assert!(!pulls.is_empty(), "{failure:#}");
    assert!(pulls.iter().all(|e| !e.contains("(x")), "{failure:#}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transient_pull_error_past_pull_grace_fails_saying_how_long() {
    // Every pull fails with a 503; 2 s of grace are 40 simulated seconds at this time
    // scale: two pulls and their back-offs.
    let env = env_with_pulls(None, E503, "    pull_grace: 2s\n").await;
    let run = env.deploy(&["--on-failure", "none"]).await;
    assert_eq!(run.code, 1, "{}", run.output());
    assert_eq!(run.outcome("eu"), "failed", "{}", run.output());
    let failure = run.target("eu")["failures"][0].clone();
    let message = failure["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("503 Service Unavailable")
            && message.contains("(image pulls have failed for ")
            && message.ends_with(", past pull_grace 2s)"),
        "{failure:#}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn err_image_pull_grace_is_refused_naming_pull_grace() {
    let env = TestEnv::start(1, "").await;
    env.write(
        "rollguard.yaml",
        "app: shop\nnamespace: shop\nmanifests: [k8s/]\nwait:\n  fail_fast:\n    err_image_pull_grace: 10s\ntargets:\n  - name: eu\n    context: sim-1\n",
    );
    env.write("k8s/app.yaml", &small_app(GOOD));
    let run = env.deploy(&[]).await;
    assert_eq!(run.code, 2, "{}", run.output());
    assert!(
        run.stderr.contains("rollguard.yaml:6")
            && run.stderr.contains("err_image_pull_grace")
            && run.stderr.contains("use `pull_grace`"),
        "{}",
        run.output()
    );
    assert_eq!(env.writes(1), 0, "{}", run.output());
}
