//! The GitHub sink, end to end: the real binary against kube-sim clusters and a fake GitHub
//! API, as a GitHub Actions job would run it.

use std::time::{Duration, Instant};

use crate::fake_github::{FakeGithub, TOKEN};
use crate::harness::{Run, TestEnv, config, list, small_app};

pub(crate) const GOOD: &str = "example.com/web:v1";
const BAD: &str = "example.com/web:v2";
pub(crate) const SHA: &str = "0123456789abcdef0123456789abcdef01234567";
pub(crate) const PR: u64 = 12;

/// A GitHub Actions job's environment for `event` (`pull_request` or `push`), with the API at
/// `api`, the step summary and outputs files in the test folder.
pub(crate) fn actions_env(env: &TestEnv, api: &str, event: &str) -> Vec<(String, String)> {
    let event_path = env.path("event.json");
    let payload = match event {
        "pull_request" => format!("{{\"number\": {PR}, \"pull_request\": {{\"number\": {PR}}}}}"),
        _ => "{\"ref\": \"refs/heads/main\"}".to_string(),
    };
    std::fs::write(&event_path, payload).expect("event written");
    [
        ("GITHUB_ACTIONS", "true".to_string()),
        ("GITHUB_TOKEN", TOKEN.to_string()),
        ("GITHUB_API_URL", api.to_string()),
        ("GITHUB_SERVER_URL", "https://github.com".to_string()),
        ("GITHUB_REPOSITORY", "octo/shop".to_string()),
        ("GITHUB_RUN_ID", "4242".to_string()),
        ("GITHUB_SHA", SHA.to_string()),
        ("GITHUB_REF_NAME", "main".to_string()),
        ("GITHUB_EVENT_NAME", event.to_string()),
        ("GITHUB_EVENT_PATH", event_path.display().to_string()),
        (
            "GITHUB_STEP_SUMMARY",
            env.path("summary.md").display().to_string(),
        ),
        (
            "GITHUB_OUTPUT",
            env.path("output.txt").display().to_string(),
        ),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

pub(crate) async fn deploy_in_actions(
    env: &TestEnv,
    vars: &[(String, String)],
    extra: &[&str],
) -> Run {
    let pairs: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let mut args = vec!["--commit", SHA];
    args.extend_from_slice(extra);
    env.deploy_with_env(&args, &pairs).await
}

pub(crate) fn marker_comments(gh: &FakeGithub, issue: u64) -> Vec<String> {
    gh.comments_on(issue)
        .into_iter()
        .filter(|c| c.body.starts_with("<!-- rollguard:deploy:app=shop -->"))
        .map(|c| c.body)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_comment_is_created_then_updated_in_place_across_pages() {
    let env = TestEnv::start(1, "- {image: \"*\", behaviour: Ready}\n").await;
    env.write("rollguard.yaml", &config(1, "60s"));
    env.write("k8s/app.yaml", &small_app(GOOD));
    let gh = FakeGithub::start().await;
    let vars = actions_env(&env, &gh.url(), "pull_request");

    let first = deploy_in_actions(&env, &vars, &[]).await;
    assert_eq!(first.code, 0, "{}", first.output());
    let mine = marker_comments(&gh, PR);
    assert_eq!(mine.len(), 1, "{}", first.output());
    assert!(mine[0].contains("| eu | ✅ deployed | v1 |"), "{}", mine[0]);

    // Bots and people comment in between: 150 comments, two pages after rollguard's.
    for i in 0..150 {
        gh.add_comment(
            PR,
            &format!("comment {i}: looks good <!-- rollguard:deploy:app=shop -->"),
        );
    }
    env.write("k8s/app.yaml", &small_app("example.com/web:v1b"));
    let second = deploy_in_actions(&env, &vars, &[]).await;
    assert_eq!(second.code, 0, "{}", second.output());
    let mine = marker_comments(&gh, PR);
    assert_eq!(
        mine.len(),
        1,
        "a second comment was made:\n{}",
        second.output()
    );
    assert!(
        mine[0].contains("| eu | ✅ deployed | v2 |"),
        "not updated: {}",
        mine[0]
    );
    assert_eq!(gh.comments_on(PR).len(), 151);
    let state = gh.state();
    assert!(
        state
            .requests
            .iter()
            // octocrab updates a comment with POST, which GitHub takes for PATCH.
            .any(|r| r.starts_with("POST /repos/octo/shop/issues/comments/")),
        "{:?}",
        state.requests
    );
    // The comment was on the first page: found there, the update needs no second page.
    assert_eq!(
        state
            .requests
            .iter()
            .filter(|r| r.starts_with("POST /repos/octo/shop/issues/12/comments"))
            .count(),
        1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_marked_comment_is_found_on_a_later_page() {
    let env = TestEnv::start(1, "- {image: \"*\", behaviour: Ready}\n").await;
    env.write("rollguard.yaml", &config(1, "60s"));
    env.write("k8s/app.yaml", &small_app(GOOD));
    let gh = FakeGithub::start().await;
    for i in 0..150 {
        gh.add_comment(PR, &format!("comment {i}"));
    }
    // rollguard's comment from an earlier run sits on the second page.
    gh.add_comment(PR, "<!-- rollguard:deploy:app=shop -->\nold report");
    let vars = actions_env(&env, &gh.url(), "pull_request");
    let run = deploy_in_actions(&env, &vars, &[]).await;
    assert_eq!(run.code, 0, "{}", run.output());
    let mine = marker_comments(&gh, PR);
    assert_eq!(mine.len(), 1, "{}", run.output());
    assert!(!mine[0].contains("old report"), "{}", mine[0]);
    let requests = gh.state().requests.clone();
    assert!(
        requests
            .iter()
            .any(|r| r.contains("/issues/12/comments?per_page=100&page=2")),
        "{requests:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_push_event_finds_the_pr_from_the_commit() {
    let env = TestEnv::start(1, "- {image: \"*\", behaviour: Ready}\n").await;
    env.write("rollguard.yaml", &config(1, "60s"));
    env.write("k8s/app.yaml", &small_app(GOOD));
    let gh = FakeGithub::start().await;
    gh.state().commit_prs.insert(SHA.to_string(), vec![7]);
    let vars = actions_env(&env, &gh.url(), "push");
    let run = deploy_in_actions(&env, &vars, &[]).await;
    assert_eq!(run.code, 0, "{}", run.output());
    assert_eq!(marker_comments(&gh, 7).len(), 1, "{}", run.output());

    // A commit on no PR: a note, not a warning, and the deploy's exit code.
    let other = TestEnv::start(1, "- {image: \"*\", behaviour: Ready}\n").await;
    other.write("rollguard.yaml", &config(1, "60s"));
    other.write("k8s/app.yaml", &small_app(GOOD));
    gh.state().commit_prs.clear();
    let vars = actions_env(&other, &gh.url(), "push");
    let run = deploy_in_actions(&other, &vars, &[]).await;
    assert_eq!(run.code, 0, "{}", run.output());
    assert!(run.stdout.contains("::notice title=rollguard%3A GitHub::commit 0123456789abcdef0123456789abcdef01234567 is on no pull request of octo/shop"), "{}", run.output());
    assert!(!run.stdout.contains("::warning"), "{}", run.output());
}

/// Replaces what changes from run to run: times, durations, pod names, ports, temporary
/// folders, heredoc delimiters, the timeline's numbers.
fn normalize(text: &str, dir: &std::path::Path) -> String {
    let text = text.replace(&dir.display().to_string(), "<dir>");
    let mut out = String::new();
    let mut in_gantt = false;
    for line in text.lines() {
        if line == "gantt" {
            in_gantt = true;
        } else if line == "```" {
            in_gantt = false;
        }
        // Which Warning events a pod has had by then, and how often, is up to timing.
        if line.starts_with("  - event: ") {
            if !out.ends_with("  - event: <events>\n") {
                out.push_str("  - event: <events>\n");
            }
            continue;
        }
        // How far the rollout got when the cluster went down is up to timing too.
        let progress = "Waiting for deployment \"web\" ";
        let line = match (line.find(progress), line.find(" \\(last watch error")) {
            (Some(from), Some(to)) if from + progress.len() <= to => format!(
                "{}<progress>{}",
                &line[..from + progress.len()],
                &line[to..]
            ),
            _ => line.to_string(),
        };
        let line = line.as_str();
        let line = if in_gantt && line.contains(" :") {
            // "  apply :120, 340": the phase stays, its times go.
            format!("{} :<start>, <end>", line.split(" :").next().unwrap_or(""))
        } else {
            line.split(' ')
                .map(normalize_word)
                .collect::<Vec<_>>()
                .join(" ")
        };
        out.push_str(&line);
        out.push('\n');
    }
    out
}

fn normalize_word(w: &str) -> String {
    let num = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_digit() || c == '.');
    let core = w.trim_end_matches([',', ';', '.', ')']);
    let tail = &w[core.len()..];
    // Durations: 12ms, 1.5s, 2m03s; clock times 12:00:01; dates 2026-12-01.
    let is_duration = ["ms", "s"].iter().any(|unit| {
        core.strip_suffix(unit)
            .is_some_and(|n| num(n) || (n.contains('m') && n.split('m').all(num)))
    });
    if is_duration {
        return format!("<dur>{tail}");
    }
    if core.contains(':') && core.split(':').all(num) && core.len() == 8 {
        return format!("<time>{tail}");
    }
    if core.matches('-').count() == 2 && core.split('-').all(num) {
        return format!("<date>{tail}");
    }
    let mut w = w.to_string();
    // Pod names web-<hash>-<id>.
    if let Some(i) = w.find("web-") {
        let rest = &w[i + 4..];
        let id_len = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
            .unwrap_or(rest.len());
        if rest[..id_len].contains('-') {
            w = format!("{}web-<pod>{}", &w[..i], &rest[id_len..]);
        }
    }
    if let Some(i) = w.find("127.0.0.1:") {
        let rest = &w[i + 10..];
        let port_len = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        w = format!("{}127.0.0.1:<port>{}", &w[..i], &rest[port_len..]);
    }
    if let Some(i) = w.find("ghadelimiter_") {
        w = format!("{}ghadelimiter_<random>", &w[..i]);
    }
    w
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deployed_rolled_back_and_rollback_failed_in_one_comment() {
    // eu deploys; us cannot pull the new image and rolls back; ap's new pods never become
    // ready and, while rollguard waits, ap goes down, so its rollback fails.
    let rules = format!(
        "- {{cluster: sim-2, image: \"{BAD}\", behaviour: ImagePullBackOff}}\n\
         - {{cluster: sim-3, image: \"{BAD}\", behaviour: NeverReady}}\n\
         - {{image: \"*\", behaviour: Ready}}\n"
    );
    let env = TestEnv::start(3, &rules).await;
    env.write("rollguard.yaml", &config(3, "10s"));
    env.write("k8s/app.yaml", &small_app(GOOD));
    let gh = FakeGithub::start().await;
    let vars = actions_env(&env, &gh.url(), "pull_request");
    let first = deploy_in_actions(&env, &vars, &[]).await;
    assert_eq!(first.code, 0, "{}", first.output());
    let _ = std::fs::remove_file(env.path("summary.md"));
    let _ = std::fs::remove_file(env.path("output.txt"));

    env.write("k8s/app.yaml", &small_app(BAD));
    let deploy = deploy_in_actions(&env, &vars, &["--on-failure", "rollback-failed"]);
    let take_down = async {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let client = env.client(3).await;
            let applied = list(&client, "apps/v1", "Deployment", "deployments", "shop")
                .await
                .iter()
                .any(|d| {
                    d["metadata"]["name"] == "web"
                        && d["spec"]["template"]["spec"]["containers"][0]["image"] == BAD
                });
            if applied || Instant::now() > deadline {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        env.cluster(3).set_down(true);
    };
    let (run, ()) = tokio::join!(deploy, take_down);
    assert_eq!(run.code, 3, "{}", run.output());
    assert_eq!(
        (
            run.outcome("eu").as_str(),
            run.outcome("us").as_str(),
            run.outcome("ap").as_str()
        ),
        ("deployed", "rolled-back", "rollback-failed"),
        "{}",
        run.output()
    );
    let mine = marker_comments(&gh, PR);
    assert_eq!(mine.len(), 1, "{}", run.output());
    let comment = &mine[0];
    for want in [
        "| eu | ✅ deployed | v2 |",
        "| us | ↩️ rolled-back | v2 |",
        "| ap | 🔥 rollback-failed | v2 |",
        "<details><summary>↩️ <b>us</b>: rolled-back</summary>",
        "**ImagePullBackOff**",
        "[workflow run](https://github.com/octo/shop/actions/runs/4242)",
        "```mermaid\ngantt\n",
    ] {
        assert!(
            comment.contains(want),
            "{want:?} not in\n{comment}\n{}",
            run.output()
        );
    }
    // The step summary is the same report.
    let summary = std::fs::read_to_string(env.path("summary.md")).expect("step summary");
    assert_eq!(
        summary.trim_end(),
        comment
            .trim_start_matches("<!-- rollguard:deploy:app=shop -->\n")
            .trim_end()
    );
    // One error annotation per failed target, and a log group per target.
    assert_eq!(
        run.stdout.matches("::error title=rollguard%3A ").count(),
        2,
        "{}",
        run.stdout
    );
    assert!(run.stdout.contains("::error title=rollguard%3A us rolled-back,file=k8s/app.yaml,line=8::Deployment shop/web"), "{}", run.stdout);
    for t in ["eu (deployed)", "us (rolled-back)", "ap (rollback-failed)"] {
        assert!(
            run.stdout
                .contains(&format!("::group::rollguard: {t}\n::stop-commands::")),
            "{t}: {}",
            run.stdout
        );
    }
    let outputs = std::fs::read_to_string(env.path("output.txt")).expect("outputs");
    assert!(outputs.contains("targets<<ghadelimiter_"), "{outputs}");
    assert!(
        outputs.contains("{\"ap\":\"rollback-failed\",\"eu\":\"deployed\",\"us\":\"rolled-back\"}"),
        "{outputs}"
    );
    insta::assert_snapshot!(
        "outputs_three_outcomes",
        normalize(&outputs, env.dir.path())
    );
    insta::assert_snapshot!(
        "step_summary_three_outcomes",
        normalize(&summary, env.dir.path())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_names_messages_and_subjects_come_out_escaped() {
    // A ConfigMap whose name carries markdown/Mermaid words (names must be DNS subdomains, so
    // the rest rides in the commit subject and the failure message of a missing ConfigMap ref).
    let env = TestEnv::start(1, "- {image: \"*\", behaviour: Ready}\n").await;
    env.write("rollguard.yaml", &config(1, "10s"));
    let app = small_app(GOOD).replace(
        "          image: example.com/web:v1\n",
        "          image: example.com/web:v1\n          env:\n            - name: X\n              valueFrom:\n                configMapKeyRef: {name: end.mention-admin, key: k}\n",
    );
    env.write("k8s/app.yaml", &app);
    let gh = FakeGithub::start().await;
    let vars = actions_env(&env, &gh.url(), "pull_request");
    let subject = "<img src=x onerror=alert(1)> **bold** @admin #1 [x](https://evil.example) end\n::set-output name=pwned::1";
    // The subject reaches the report through git: a repository with that commit.
    let sha = git_commit(&env, subject);
    let pairs: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let run = env.deploy_with_env(&["--commit", &sha], &pairs).await;
    assert_eq!(run.code, 1, "{}", run.output());
    let mine = marker_comments(&gh, PR);
    assert_eq!(mine.len(), 1, "{}", run.output());
    let comment = &mine[0];
    assert!(comment.contains("CreateContainerConfigError"), "{comment}");
    for bad in [
        "<img",
        "**bold**",
        "@admin",
        "#1 ",
        "](https://evil",
        "\n::set-output",
        "\nend\n",
    ] {
        assert!(!comment.contains(bad), "{bad:?} in\n{comment}");
    }
    // The annotation's message cannot start a workflow command of its own.
    for line in run.stdout.lines() {
        assert!(!line.starts_with("::set-output"), "{line}");
    }
}

/// Commits the test folder with `subject`; returns the sha.
fn git_commit(env: &TestEnv, subject: &str) -> String {
    let dir = env.dir.path();
    let git = |args: &[&str]| crate::harness::git(dir, args);
    git(&["init", "-q"]);
    git(&["add", "-A"]);
    git(&["commit", "-q", "-m", subject]);
    git(&["rev-parse", "HEAD"])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_403_on_the_comment_is_a_warning_and_the_exit_code_is_the_deploys() {
    let env = TestEnv::start(1, "- {image: \"*\", behaviour: Ready}\n").await;
    env.write("rollguard.yaml", &config(1, "60s"));
    env.write("k8s/app.yaml", &small_app(GOOD));
    let gh = FakeGithub::start().await;
    gh.state().fail_comment_writes = Some(403);
    let vars = actions_env(&env, &gh.url(), "pull_request");
    let run = deploy_in_actions(&env, &vars, &[]).await;
    assert_eq!(run.code, 0, "{}", run.output());
    let warnings: Vec<&str> = run
        .stdout
        .lines()
        .filter(|l| l.starts_with("::warning"))
        .collect();
    assert_eq!(warnings.len(), 1, "{}", run.output());
    assert!(
        warnings[0].contains("cannot create the PR comment on octo/shop#12: 403 Forbidden (Resource not accessible by integration)")
            && warnings[0].contains("pull-requests: write"),
        "{}",
        warnings[0]
    );
    assert!(!run.output().contains(TOKEN), "the token was printed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn github_unreachable_is_a_warning_and_the_exit_code_is_the_deploys() {
    let env = TestEnv::start(1, "- {cluster: sim-1, image: \"*:v2\", behaviour: ImagePullBackOff}\n- {image: \"*\", behaviour: Ready}\n").await;
    env.write("rollguard.yaml", &config(1, "60s"));
    env.write("k8s/app.yaml", &small_app("example.com/web:v2"));
    // A port nothing listens on.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let api = format!("http://{}", closed.local_addr().expect("addr"));
    drop(closed);
    let vars = actions_env(&env, &api, "pull_request");
    let run = deploy_in_actions(&env, &vars, &[]).await;
    assert_eq!(run.code, 1, "{}", run.output());
    let warnings: Vec<&str> = run
        .stdout
        .lines()
        .filter(|l| l.starts_with("::warning"))
        .collect();
    assert_eq!(warnings.len(), 1, "{}", run.output());
    assert!(
        warnings[0].contains(&format!("GitHub is unreachable at {api}")),
        "{}",
        warnings[0]
    );
    // The runner's own sinks still have the report.
    let summary = std::fs::read_to_string(env.path("summary.md")).expect("step summary");
    assert!(summary.contains("| eu | ❌ failed |"), "{summary}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deployments_get_their_statuses_in_order() {
    let rules = format!(
        "- {{cluster: sim-2, image: \"{BAD}\", behaviour: ImagePullBackOff}}\n- {{image: \"*\", behaviour: Ready}}\n"
    );
    let env = TestEnv::start(2, &rules).await;
    let cfg = config(2, "60s").replace(
        "    context: sim-2\n",
        "    context: sim-2\n    environment: production-us\n",
    ) + "github:\n  deployments: true\n";
    env.write("rollguard.yaml", &cfg);
    env.write("k8s/app.yaml", &small_app(GOOD));
    let gh = FakeGithub::start().await;
    let vars = actions_env(&env, &gh.url(), "pull_request");
    let first = deploy_in_actions(&env, &vars, &[]).await;
    assert_eq!(first.code, 0, "{}", first.output());
    gh.state().statuses.clear();
    gh.state().deployments.clear();

    env.write("k8s/app.yaml", &small_app(BAD));
    let run = deploy_in_actions(&env, &vars, &["--on-failure", "rollback-failed"]).await;
    assert_eq!(run.code, 1, "{}", run.output());
    assert_eq!(run.outcome("eu"), "deployed");
    assert_eq!(run.outcome("us"), "rolled-back");
    let state = gh.state();
    let envs: Vec<&str> = state.deployments.iter().map(|d| d.1.as_str()).collect();
    assert_eq!(envs, ["shop/eu", "production-us"]);
    assert!(state.deployments.iter().all(|d| d.2 == SHA));
    let of = |environment: &str| -> Vec<(String, String)> {
        state
            .statuses
            .iter()
            .filter(|s| s.environment == environment)
            .map(|s| (s.state.clone(), s.description.clone()))
            .collect()
    };
    assert_eq!(
        of("shop/eu"),
        [
            ("in_progress".to_string(), "deploying".to_string()),
            ("success".to_string(), "deployed as v2".to_string())
        ]
    );
    let us = of("production-us");
    assert_eq!(us.len(), 2, "{us:?}");
    assert_eq!(us[0].0, "in_progress");
    assert_eq!(us[1].0, "failure");
    assert!(
        us[1]
            .1
            .starts_with("rolled back to v1; failed: Deployment shop/web"),
        "{us:?}"
    );
    assert!(state.statuses.iter().all(|s| s.log_url.as_deref() == Some("https://github.com/octo/shop/actions/runs/4242")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_value_reaches_no_github_sink() {
    const VALUE: &str = "hunter2-very-secret-value";
    let env = TestEnv::start(1, "- {image: \"*\", behaviour: Ready}\n").await;
    env.write("rollguard.yaml", &config(1, "60s"));
    let secret = format!(
        "---\napiVersion: v1\nkind: Secret\nmetadata:\n  name: db\nstringData:\n  password: {VALUE}\n"
    );
    env.write("k8s/app.yaml", &format!("{}{secret}", small_app(GOOD)));
    // The value reaches the report through the commit subject (someone pasted it there).
    let sha = git_commit(&env, &format!("rotate the db password to {VALUE}"));
    let gh = FakeGithub::start().await;
    let vars = actions_env(&env, &gh.url(), "pull_request");
    let pairs: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let markdown = env.path("report.md");
    let markdown_arg = markdown.display().to_string();
    let run = env
        .deploy_with_env(
            &["--commit", &sha, "--report-markdown", &markdown_arg],
            &pairs,
        )
        .await;
    assert_eq!(run.code, 0, "{}", run.output());
    let comment = marker_comments(&gh, PR).pop().expect("a comment");
    assert!(comment.contains("rotate the db password to"), "{comment}");
    let sinks = [
        ("comment", comment),
        (
            "step summary",
            std::fs::read_to_string(env.path("summary.md")).expect("summary"),
        ),
        (
            "outputs",
            std::fs::read_to_string(env.path("output.txt")).expect("outputs"),
        ),
        (
            "--report-markdown",
            std::fs::read_to_string(&markdown).expect("markdown"),
        ),
        ("stdout", run.stdout.clone()),
    ];
    for (name, text) in sinks {
        assert!(
            !text.contains(VALUE),
            "the secret value is in the {name}:\n{text}"
        );
    }
}

/// `rollguard diff` posts the plan under its own marker: a PR shows one plan comment and one
/// deploy comment per app, each updated in place.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_plan_has_its_own_comment_beside_the_deploys() {
    let env = TestEnv::start(1, "- {image: \"*\", behaviour: Ready}\n").await;
    env.write("rollguard.yaml", &config(1, "60s"));
    env.write("k8s/app.yaml", &small_app(GOOD));
    let gh = FakeGithub::start().await;
    let vars = actions_env(&env, &gh.url(), "pull_request");
    let pairs: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let plans = |gh: &FakeGithub| -> Vec<String> {
        gh.comments_on(PR)
            .into_iter()
            .filter(|c| c.body.starts_with("<!-- rollguard:plan:app=shop -->"))
            .map(|c| c.body)
            .collect()
    };

    let first = env.command_env("diff", &["--commit", SHA], &pairs).await;
    assert_eq!(first.code, 0, "{}", first.output());
    let plan = plans(&gh);
    assert_eq!(plan.len(), 1, "{}", first.output());
    assert!(
        plan[0].contains("Plan (server-side dry run)"),
        "{}",
        plan[0]
    );
    assert!(
        marker_comments(&gh, PR).is_empty(),
        "a plan is no deploy comment"
    );

    let deploy = deploy_in_actions(&env, &vars, &[]).await;
    assert_eq!(deploy.code, 0, "{}", deploy.output());
    env.write("k8s/app.yaml", &small_app(BAD));
    let second = env.command_env("diff", &["--commit", SHA], &pairs).await;
    assert_eq!(second.code, 0, "{}", second.output());
    let plan = plans(&gh);
    assert_eq!(plan.len(), 1, "updated in place:\n{}", second.output());
    assert!(
        plan[0].contains(BAD),
        "the second plan shows the new image:\n{}",
        plan[0]
    );
    assert_eq!(marker_comments(&gh, PR).len(), 1);
    assert_eq!(
        gh.comments_on(PR).len(),
        2,
        "one plan and one deploy comment"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_report_file_that_cannot_be_written_is_one_warning_and_every_other_sink_is_written() {
    let env = TestEnv::start(1, "- {image: \"*\", behaviour: Ready}\n").await;
    env.write("rollguard.yaml", &config(1, "60s"));
    env.write("k8s/app.yaml", &small_app(GOOD));
    let gh = FakeGithub::start().await;
    let vars = actions_env(&env, &gh.url(), "pull_request");
    let pairs: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let args: Vec<String> = [
        "deploy",
        "--config",
        &env.path("rollguard.yaml").display().to_string(),
        "--kubeconfig",
        &env.kubeconfig.display().to_string(),
        "--commit",
        SHA,
        "--report",
        "/nonexistent/x.json",
        "--report-markdown",
        "/nonexistent/x.md",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let run = crate::harness::rollguard(&args, env.dir.path(), &pairs).await;
    // Everything deployed: the run's exit code, whatever became of the file.
    assert_eq!(run.code, 0, "{}", run.output());
    for file in ["/nonexistent/x.json", "/nonexistent/x.md"] {
        assert_eq!(
            run.stdout
                .matches(&format!(
                    "::warning title=rollguard%3A report::cannot write the report to {file}"
                ))
                .count(),
            1,
            "one warning for {file}: {}",
            run.output()
        );
    }
    let summary = env.read("summary.md");
    assert!(summary.contains("| eu | ✅ deployed |"), "{summary}");
    let outputs = env.read("output.txt");
    assert!(
        outputs.contains("outcome<<") && outputs.contains("deployed"),
        "{outputs}"
    );
    // The outputs and the summary point at no file that is not there.
    assert!(!outputs.contains("/nonexistent"), "{outputs}");
    assert!(!summary.contains("/nonexistent"), "{summary}");
    assert_eq!(marker_comments(&gh, PR).len(), 1, "{}", run.output());
}
