//! The image's runtime stage without a Docker engine: the static binary in the root that
//! `dist/rootfs.sh` assembles (exactly what the Dockerfile's `FROM scratch` stage holds),
//! entered with chroot as the image's non-root uid, as PID 1 of its own PID namespace, like
//! a container's main process. It deploys to kube-sim clusters by host name (the root has no
//! NSS modules, only the /etc/hosts a container runtime provides), fails and rolls back, and
//! on SIGTERM from outside (what `docker stop` sends) rolls back and exits 130; and through
//! the image's sh, as a CI job script, its git fetches a commit into a shallow clone for
//! `rollback --from-git`.
//!
//! Needs root (chroot, unshare) and the assembled root in `ROLLGUARD_RUNTIME_ROOT`; .ci/run
//! builds both and runs these tests as root. Without the variable they print why they skip;
//! with it they never skip: anything missing fails them.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::harness::{TestEnv, config, deployment_available, list, small_app};

/// The uid and gid the image runs as (Dockerfile `USER`, dist/rootfs.sh).
const IMAGE_UID: u32 = 10001;
const ROOT_ENV: &str = "ROLLGUARD_RUNTIME_ROOT";
const GOOD: &str = "example.com/web:v1";
const BAD: &str = "example.com/web:v2";

/// The assembled root, or None (with the reason printed) when the variable is unset.
fn runtime_root(test: &str) -> Option<PathBuf> {
    let Some(root) = std::env::var_os(ROOT_ENV).filter(|v| !v.is_empty()) else {
        kube_sim::skip_test(
            test,
            &format!(
                "{ROOT_ENV} not set (.ci/run sets it to a root built by dist/rootfs.sh and runs this as root)"
            ),
        );
        return None;
    };
    let root = PathBuf::from(root);
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    assert_eq!(
        euid, 0,
        "{ROOT_ENV} is set, but chroot and unshare need root; run as root or unset it"
    );
    let binary = root.join("usr/local/bin/rollguard");
    assert!(
        binary.is_file(),
        "{} is missing; build the root with dist/rootfs.sh",
        binary.display()
    );
    assert!(
        !has_interpreter(&binary),
        "{} asks for a dynamic loader: it must be the static build of dist/build-static.sh",
        binary.display()
    );
    Some(root)
}

/// A host tool's absolute path, from this process's PATH.
fn host_tool(name: &str) -> PathBuf {
    crate::harness::on_path(name)
        .unwrap_or_else(|| panic!("{name} is not on PATH; it comes with util-linux / coreutils"))
}

/// True when the ELF file has a PT_INTERP program header (it is dynamically linked).
fn has_interpreter(path: &Path) -> bool {
    let elf = std::fs::read(path).expect("binary readable");
    assert!(
        elf.len() > 64 && &elf[..4] == b"\x7fELF" && elf[4] == 2,
        "not a 64-bit ELF"
    );
    let u16_at = |o: usize| u16::from_le_bytes([elf[o], elf[o + 1]]) as usize;
    let phoff = u64::from_le_bytes(elf[32..40].try_into().expect("8 bytes")) as usize;
    let (phentsize, phnum) = (u16_at(54), u16_at(56));
    (0..phnum).any(|i| {
        let at = phoff + i * phentsize;
        u32::from_le_bytes(elf[at..at + 4].try_into().expect("4 bytes")) == 3 // PT_INTERP
    })
}

/// A work folder inside the root owned by the image's uid, with the config, manifests and a
/// kubeconfig that reaches the clusters as `localhost` (resolved from the root's /etc/hosts).
struct Work {
    dir: tempfile::TempDir,
    /// The folder as the chrooted process sees it.
    inside: String,
}

impl Work {
    fn new(root: &Path, env: &TestEnv, targets: usize) -> Work {
        let dir = tempfile::Builder::new()
            .prefix("work-")
            .tempdir_in(root)
            .expect("work folder in the root");
        let inside = format!(
            "/{}",
            dir.path().file_name().expect("name").to_string_lossy()
        );
        let kubeconfig = std::fs::read_to_string(&env.kubeconfig).expect("kubeconfig");
        assert!(kubeconfig.contains("https://127.0.0.1:"), "{kubeconfig}");
        let work = Work { dir, inside };
        work.write(
            "kubeconfig",
            &kubeconfig.replace("https://127.0.0.1:", "https://localhost:"),
        );
        work.write("rollguard.yaml", &config(targets, "60s"));
        // A container runtime gives every container the OCI default devices (git opens
        // /dev/null and /dev/urandom, Rust's Stdio::null /dev/null) and writes /etc/hosts.
        std::fs::create_dir_all(root.join("dev")).expect("dev");
        for (name, minor) in [
            ("null", 3),
            ("zero", 5),
            ("full", 7),
            ("random", 8),
            ("urandom", 9),
        ] {
            let dev = root.join("dev").join(name);
            if dev.exists() {
                continue;
            }
            let c_path = std::ffi::CString::new(dev.as_os_str().as_encoded_bytes()).expect("path");
            // SAFETY: c_path is a valid C string; 1:minor are the memory devices.
            let made = unsafe {
                libc::mknod(
                    c_path.as_ptr(),
                    libc::S_IFCHR | 0o666,
                    libc::makedev(1, minor),
                )
            };
            let error = std::io::Error::last_os_error();
            // Tests run in parallel and may race to make the same node.
            assert!(
                made == 0 || error.kind() == std::io::ErrorKind::AlreadyExists,
                "mknod {}: {error}",
                dev.display()
            );
            std::fs::set_permissions(&dev, std::os::unix::fs::PermissionsExt::from_mode(0o666))
                .expect("chmod device");
        }
        std::fs::create_dir_all(root.join("etc")).expect("etc");
        std::fs::write(
            root.join("etc/hosts"),
            "127.0.0.1 localhost\n::1 localhost\n",
        )
        .expect("hosts");
        work
    }

    fn write(&self, rel: &str, text: &str) {
        let path = self.dir.path().join(rel);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(&path, text).expect("write");
        chown_tree(self.dir.path());
    }

    fn report(&self) -> Value {
        let text = std::fs::read_to_string(self.dir.path().join("report.json"))
            .expect("the report was written inside the root");
        serde_json::from_str(&text).expect("report is JSON")
    }

    /// `unshare --pid --fork chroot --userspec=UID:GID ROOT rollguard deploy ...` with only
    /// the environment the image sets, plus the kubeconfig.
    fn spawn_deploy(&self, root: &Path) -> tokio::process::Child {
        let _ = std::fs::remove_file(self.dir.path().join("report.json"));
        let args = [
            "/usr/local/bin/rollguard".to_string(),
            "deploy".into(),
            "--config".into(),
            format!("{}/rollguard.yaml", self.inside),
            "--report".into(),
            format!("{}/report.json", self.inside),
        ];
        self.spawn(root, &args)
    }

    /// `unshare --pid --fork chroot --userspec=UID:GID ROOT ARGS...` with only the
    /// environment the image sets, plus the kubeconfig.
    fn spawn(&self, root: &Path, args: &[String]) -> tokio::process::Child {
        // The environment is the image's, so the host tools go by absolute path.
        let mut cmd = tokio::process::Command::new(host_tool("unshare"));
        cmd.args(["--pid", "--fork", "--kill-child"])
            .arg(host_tool("chroot"))
            .arg(format!("--userspec={IMAGE_UID}:{IMAGE_UID}"))
            .arg(root)
            .args(args)
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env("HOME", "/home/rollguard")
            .env("SSL_CERT_FILE", "/etc/ssl/certs/ca-certificates.crt")
            .env("KUBECONFIG", format!("{}/kubeconfig", self.inside))
            .env("RUST_LOG", "rollguard=info")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        cmd.spawn().expect("unshare runs")
    }

    async fn deploy(&self, root: &Path) -> (i32, String) {
        finish(self.spawn_deploy(root)).await
    }
}

async fn finish(child: tokio::process::Child) -> (i32, String) {
    let out = tokio::time::timeout(Duration::from_secs(120), child.wait_with_output())
        .await
        .expect("rollguard finished within 120 s")
        .expect("rollguard ran");
    (out.status.code().unwrap_or(-1), output(&out))
}

fn output(out: &std::process::Output) -> String {
    format!(
        "exit {:?}\n--- stdout\n{}\n--- stderr\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn chown_tree(dir: &Path) {
    std::os::unix::fs::chown(dir, Some(IMAGE_UID), Some(IMAGE_UID)).expect("chown");
    for entry in std::fs::read_dir(dir).expect("read_dir") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            chown_tree(&path);
        } else {
            std::os::unix::fs::chown(&path, Some(IMAGE_UID), Some(IMAGE_UID)).expect("chown");
        }
    }
}

async fn web(env: &TestEnv, cluster: usize) -> Value {
    let client = env.client(cluster).await;
    list(&client, "apps/v1", "Deployment", "deployments", "shop")
        .await
        .into_iter()
        .find(|d| d["metadata"]["name"] == "web")
        .expect("Deployment web exists")
}

fn image(d: &Value) -> String {
    d["spec"]["template"]["spec"]["containers"][0]["image"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

fn outcome(report: &Value, target: &str) -> String {
    report["targets"]
        .as_array()
        .and_then(|ts| ts.iter().find(|t| t["name"] == target))
        .and_then(|t| t["outcome"].as_str())
        .unwrap_or_else(|| panic!("no outcome for {target}: {report:#}"))
        .to_string()
}

/// The host pid of the process that `unshare --fork` started: its only child.
fn forked_child(unshare: u32) -> u32 {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
            let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
                continue;
            };
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
                continue;
            };
            // pid (comm) state ppid ...; comm may hold spaces, so read after the last ')'.
            let ppid = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().nth(1))
                .and_then(|p| p.parse::<u32>().ok());
            if ppid == Some(unshare) {
                return pid;
            }
        }
        assert!(
            Instant::now() < deadline,
            "unshare {unshare} forked no child"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runtime_root_deploys_fails_and_rolls_back_as_non_root() {
    let Some(root) = runtime_root("runtime_root_deploys_fails_and_rolls_back_as_non_root") else {
        return;
    };
    let env = TestEnv::start(
        2,
        &format!("- {{cluster: sim-2, image: \"{BAD}\", behaviour: ImagePullBackOff}}\n"),
    )
    .await;
    let work = Work::new(&root, &env, 2);

    work.write("k8s/app.yaml", &small_app(GOOD));
    let (code, out) = work.deploy(&root).await;
    assert_eq!(code, 0, "{out}");
    let report = work.report();
    assert_eq!(outcome(&report, "eu"), "deployed", "{report:#}");
    assert_eq!(outcome(&report, "us"), "deployed", "{report:#}");
    for cluster in [1, 2] {
        assert!(deployment_available(&web(&env, cluster).await), "{out}");
    }

    work.write("k8s/app.yaml", &small_app(BAD));
    let (code, out) = work.deploy(&root).await;
    assert_eq!(code, 1, "{out}");
    let report = work.report();
    let us = &report["targets"][1];
    assert_eq!(
        us["failures"][0]["reason"], "ImagePullBackOff",
        "{report:#}"
    );
    assert_eq!(outcome(&report, "us"), "rolled-back", "{report:#}");
    assert_eq!(outcome(&report, "eu"), "rolled-back", "{report:#}");
    for cluster in [1, 2] {
        let d = web(&env, cluster).await;
        assert_eq!(image(&d), GOOD, "sim-{cluster}\n{out}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runtime_root_sigterm_to_pid_1_rolls_back() {
    let Some(root) = runtime_root("runtime_root_sigterm_to_pid_1_rolls_back") else {
        return;
    };
    let env = TestEnv::start(1, "").await;
    let work = Work::new(&root, &env, 1);
    work.write("k8s/app.yaml", &small_app(GOOD));
    let (code, out) = work.deploy(&root).await;
    assert_eq!(code, 0, "{out}");

    work.write("k8s/app.yaml", &small_app("example.com/web:neverready"));
    let child = work.spawn_deploy(&root);
    let rollguard = forked_child(child.id().expect("unshare runs"));
    // The chrooted rollguard is PID 1 of its namespace, as a container's main process is.
    let status = std::fs::read_to_string(format!("/proc/{rollguard}/status")).expect("status");
    let nspid = status
        .lines()
        .find_map(|l| l.strip_prefix("NSpid:"))
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .expect("NSpid line");
    assert_eq!(nspid.last(), Some(&"1"), "{status}");

    // Mid-wait: the new spec is in the cluster and its pods never become ready.
    let deadline = Instant::now() + Duration::from_secs(60);
    while image(&web(&env, 1).await) != "example.com/web:neverready" {
        assert!(
            Instant::now() < deadline,
            "the new revision was never applied"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // SIGTERM from outside the namespace, as `docker stop` sends it to the main process.
    // SAFETY: kill has no memory preconditions; the pid is our grandchild, still running.
    assert_eq!(unsafe { libc::kill(rollguard as i32, libc::SIGTERM) }, 0);
    let out = tokio::time::timeout(Duration::from_secs(60), child.wait_with_output())
        .await
        .expect("rollguard exited after SIGTERM")
        .expect("rollguard ran");
    assert_eq!(out.status.code(), Some(130), "{}", output(&out));
    let report = work.report();
    assert_eq!(outcome(&report, "eu"), "cancelled", "{report:#}");
    assert_eq!(
        report["targets"][0]["rollback"]["to_revision"], 1,
        "{report:#}"
    );
    assert_eq!(image(&web(&env, 1).await), GOOD, "{}", output(&out));
}

/// Runs host git as root in `dir` (the test's setup, outside the root).
fn git(dir: &Path, args: &[&str]) -> String {
    // The folders belong to the image's uid (chown_tree); this git runs as root.
    crate::harness::git_with(dir, &["safe.directory=*"], args)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runtime_root_git_fallback_fetches_a_commit_into_a_shallow_clone() {
    let Some(root) =
        runtime_root("runtime_root_git_fallback_fetches_a_commit_into_a_shallow_clone")
    else {
        return;
    };
    let env = TestEnv::start(1, "").await;
    let work = Work::new(&root, &env, 1);
    // The app's repository with v1 then v3, a bare origin, and CI's shallow clone without v1.
    let repo = work.dir.path().join("repo");
    std::fs::create_dir_all(repo.join("k8s")).expect("mkdir");
    git(&repo, &["init", "-q"]);
    std::fs::write(repo.join("rollguard.yaml"), config(1, "60s")).expect("write");
    std::fs::write(repo.join("k8s/app.yaml"), small_app(GOOD)).expect("write");
    git(&repo, &["add", "."]);
    git(&repo, &["commit", "-q", "-m", "v1"]);
    let v1 = git(&repo, &["rev-parse", "HEAD"]);
    std::fs::write(repo.join("k8s/app.yaml"), small_app("example.com/web:v3")).expect("write");
    git(&repo, &["commit", "-qam", "v3"]);
    let origin = work.dir.path().join("origin.git");
    git(
        work.dir.path(),
        &["clone", "-q", "--bare", "repo", "origin.git"],
    );
    // The clone's origin is the path as seen inside the root.
    let inside_origin = format!("file://{}/origin.git", work.inside);
    git(
        work.dir.path(),
        &[
            "clone",
            "-q",
            "--depth",
            "1",
            &format!("file://{}", origin.display()),
            "ci",
        ],
    );
    git(
        &work.dir.path().join("ci"),
        &["remote", "set-url", "origin", &inside_origin],
    );
    chown_tree(work.dir.path());

    // Through the image's sh, as a GitLab job script runs: cd into the checkout, run rollguard.
    let run = |command: String| {
        work.spawn(
            &root,
            &[
                "/bin/sh".to_string(),
                "-c".into(),
                format!("cd {}/ci && {command}", work.inside),
            ],
        )
    };
    let (code, out) = finish(run("rollguard deploy".into())).await;
    assert_eq!(code, 0, "{out}");
    assert_eq!(image(&web(&env, 1).await), "example.com/web:v3", "{out}");
    let (code, out) = finish(run(format!("rollguard rollback --from-git {v1} --yes"))).await;
    assert_eq!(
        code, 0,
        "git in the runtime root fetched {v1} into the shallow clone:\n{out}"
    );
    assert_eq!(image(&web(&env, 1).await), GOOD, "{out}");

    // The default image's git has no HTTPS transport: a commit only an https origin has is
    // refused with what to do, not with git's "'remote-https' is not a git command".
    std::fs::write(repo.join("k8s/app.yaml"), small_app("example.com/web:v4")).expect("write");
    git(&repo, &["commit", "-qam", "v4"]);
    let v4 = git(&repo, &["rev-parse", "HEAD"]);
    git(
        &work.dir.path().join("ci"),
        &["remote", "set-url", "origin", "https://localhost:1/app.git"],
    );
    if root.join("usr/lib/git-core/git-remote-https").exists() {
        return; // the -git-https root: runtime_root_https_git_loads_its_transport covers it
    }
    let (code, out) = finish(run(format!("rollguard rollback --from-git {v4} --yes"))).await;
    assert_ne!(code, 0, "{out}");
    assert!(
        out.contains(&format!("commit {v4} is not in the clone at"))
            && out.contains("this git cannot fetch it: it has no HTTPS transport")
            && out.contains("GIT_DEPTH: 0"),
        "{out}"
    );
    assert!(!out.contains("is not a git command"), "{out}");
}

/// The -git-https image's root (GIT_HTTPS=1 dist/rootfs.sh, in `ROLLGUARD_RUNTIME_ROOT_GIT_HTTPS`):
/// git's curl transport and its two dozen libraries load in the empty root, as the image's uid,
/// and reach the network: an https remote nobody listens on fails to connect, not for a
/// missing helper or library.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runtime_root_https_git_loads_its_transport() {
    const HTTPS_ROOT_ENV: &str = "ROLLGUARD_RUNTIME_ROOT_GIT_HTTPS";
    let Some(root) = std::env::var_os(HTTPS_ROOT_ENV).filter(|v| !v.is_empty()) else {
        kube_sim::skip_test(
            "runtime_root_https_git_loads_its_transport",
            &format!(
                "{HTTPS_ROOT_ENV} not set (.ci/run sets it to a root built by GIT_HTTPS=1 dist/rootfs.sh)"
            ),
        );
        return;
    };
    let root = PathBuf::from(root);
    assert!(
        root.join("usr/lib/git-core/git-remote-https").exists(),
        "{} was not built with GIT_HTTPS=1",
        root.display()
    );
    let env = TestEnv::start(1, "").await;
    let work = Work::new(&root, &env, 1);
    let args = ["/usr/bin/git", "ls-remote", "https://localhost:1/app.git"].map(String::from);
    let (code, out) = finish(work.spawn(&root, &args)).await;
    assert_eq!(code, 128, "{out}");
    assert!(
        out.contains("Failed to connect to localhost port 1"),
        "{out}"
    );
}

/// A skip is not invisible under `cargo test`: it is said as it happens (past libtest's
/// capture) and counted after the summary. Runs this test binary on one skipping test.
#[test]
fn a_skip_is_said_and_counted_after_the_summary() {
    let out = std::process::Command::new(std::env::current_exe().expect("test binary"))
        .args([
            "runtime_root::runtime_root_sigterm_to_pid_1_rolls_back",
            "--exact",
        ])
        .env_remove(ROOT_ENV)
        .output()
        .expect("the test binary runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("test result: ok. 1 passed"), "{stdout}");
    let said = format!("skipped: runtime_root_sigterm_to_pid_1_rolls_back: {ROOT_ENV} not set");
    assert!(
        stderr.contains(&said) && stderr.contains("1 test passed by skipping (not run here):"),
        "{stderr}"
    );
}
