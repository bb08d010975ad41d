//! A server that completes TLS, reads the request and never answers: every command ends,
//! with the reason, instead of hanging.

use crate::harness::{TestEnv, config, rollguard, small_app};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_command_ends_with_the_reason_against_a_server_that_never_answers() {
    let env = TestEnv::start(1, "").await;
    env.write("rollguard.yaml", &config(1, "60s"));
    env.write("k8s/app.yaml", &small_app("example.com/web:v1"));
    assert_eq!(env.deploy(&[]).await.code, 0);
    env.write("k8s/app.yaml", &small_app("example.com/web:v2"));
    assert_eq!(env.deploy(&[]).await.code, 0);
    env.cluster(1).set_faults(kube_sim::faults::Faults {
        never_answer: true,
        ..Default::default()
    });
    let request_timeout = [("ROLLGUARD_REQUEST_TIMEOUT", "1s")];
    let command = |words: &[&str]| -> Vec<String> {
        let mut args: Vec<String> = words.iter().map(|w| w.to_string()).collect();
        args.extend([
            "--config".to_string(),
            env.path("rollguard.yaml").display().to_string(),
            "--kubeconfig".to_string(),
            env.kubeconfig.display().to_string(),
        ]);
        args
    };
    // The harness gives every run 120 s; a hang fails there instead of here.
    for words in [
        &["deploy", "--timeout", "3s"][..],
        &["history"][..],
        &["show", "--revision", "1"][..],
        &["rollback", "--revision", "1", "--yes"][..],
        &["unlock"][..],
    ] {
        let run = rollguard(&command(words), env.dir.path(), &request_timeout).await;
        assert_ne!(run.code, 0, "{words:?}: {}", run.output());
        let said = run.output().to_lowercase();
        assert!(
            said.contains("timeout")
                || said.contains("did not answer")
                || said.contains("timed out"),
            "{words:?} says why: {}",
            run.output()
        );
        assert!(
            !run.stderr.contains("panicked"),
            "{words:?}: {}",
            run.output()
        );
    }
}
