//! The kubelet stand-in: what a pod's status looks like at a given moment of its life.
//!
//! A pod's status is a pure function of its spec, the behaviour of each container's image,
//! and the simulated time since the kubelet started it (`base`). The controller loop
//! re-evaluates it when `next_change` comes due, so no state is kept beyond `base`.

use std::time::Duration;

use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

use super::meta::{self, add};
use crate::controllers::rules::{Behaviour, ImageScript};

/// Time from the kubelet taking a pod to its containers starting (sandbox + image present).
pub const CREATE_DELAY: Duration = Duration::from_millis(500);
/// Time from container start to Ready when no readiness probe says otherwise.
pub const DEFAULT_READY_DELAY: Duration = Duration::from_millis(500);
/// `slowstart` images are Ready this long after the kubelet takes the pod.
pub const SLOW_START: Duration = Duration::from_secs(20);
/// How long a crashing container runs before it exits.
pub const RUN_BEFORE_CRASH: Duration = Duration::from_secs(1);
/// How long a run-to-completion container (restartPolicy Never/OnFailure) runs.
pub const RUN_TO_COMPLETION: Duration = Duration::from_secs(2);
/// How long a pull that succeeds takes (after failed ones: the kubelet's retry).
pub const PULL_OK: Duration = Duration::from_millis(400);
/// How long ErrImagePull shows before the kubelet backs off.
pub const PULL_ATTEMPT: Duration = Duration::from_secs(2);
/// The kubelet's back-off cap.
pub const MAX_BACKOFF: Duration = Duration::from_secs(300);

/// The kubelet's back-off after the `n`-th failure (0-based): 10 s doubling to 300 s.
pub fn backoff(n: u32) -> Duration {
    let secs = 10u64.saturating_mul(1u64 << n.min(10));
    Duration::from_secs(secs).min(MAX_BACKOFF)
}

/// What one container is doing at a moment.
#[derive(Debug, Clone, PartialEq)]
pub enum State {
    Waiting {
        reason: String,
        message: Option<String>,
    },
    Running {
        started: Duration,
    },
    Terminated {
        exit_code: i64,
        reason: String,
        started: Duration,
        finished: Duration,
    },
}

/// One container's simulated status, with offsets relative to the pod's `base`.
#[derive(Debug, Clone, PartialEq)]
pub struct ContainerView {
    pub state: State,
    /// The previous run's termination (exit code, reason, started, finished).
    pub last_terminated: Option<(i64, String, Duration, Duration)>,
    pub restart_count: u32,
    pub ready: bool,
    /// When readiness last changed (offset), for the pod's Ready condition.
    pub ready_changed: Duration,
    /// Has this container finished for good (will not be restarted)?
    pub done: bool,
    /// When this container's status changes next, if ever.
    pub next_change: Option<Duration>,
}

/// What the kubelet needs to know about a container, besides its image behaviour.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ContainerSpec {
    /// Delay from start to Ready (readinessProbe.initialDelaySeconds, or a short default).
    pub ready_delay: Duration,
    /// restartPolicy Always (a serving container) rather than Never/OnFailure.
    pub restart_always: bool,
    /// restartPolicy OnFailure: failed runs are restarted, successful ones are not.
    pub restart_on_failure: bool,
}

impl ContainerSpec {
    pub fn from_pod(pod: &Value, container: &Value) -> Self {
        let policy = pod["spec"]["restartPolicy"].as_str().unwrap_or("Always");
        // Capped (ten years) so that offsets cannot overflow.
        let delay = container["readinessProbe"]["initialDelaySeconds"]
            .as_u64()
            .map(|s| Duration::from_secs(s.min(315_360_000)))
            .unwrap_or(DEFAULT_READY_DELAY);
        Self {
            ready_delay: delay,
            restart_always: policy == "Always",
            restart_on_failure: policy == "OnFailure",
        }
    }
}

fn waiting(reason: &str, message: Option<String>) -> State {
    State::Waiting {
        reason: reason.to_string(),
        message,
    }
}

/// The kubelet's view of one container `elapsed` after it took the pod.
pub fn container_at(
    script: &ImageScript,
    spec: ContainerSpec,
    image: &str,
    labels: &CrashLabels<'_>,
    elapsed: Duration,
) -> ContainerView {
    let behaviour = script.behaviour;
    let mut view = ContainerView {
        state: waiting("ContainerCreating", None),
        last_terminated: None,
        restart_count: 0,
        ready: false,
        ready_changed: Duration::ZERO,
        done: false,
        next_change: None,
    };
    if elapsed < CREATE_DELAY {
        view.next_change = Some(CREATE_DELAY);
        return view;
    }
    match behaviour {
        // SlowStart with `after:`: a healthy container whose readiness takes that long.
        Behaviour::SlowStart if script.after.is_some() => {
            let slow = ContainerSpec {
                ready_delay: spec.ready_delay.max(script.after.unwrap_or_default()),
                ..spec
            };
            run_ready(
                &mut view,
                Behaviour::Ready,
                slow,
                CREATE_DELAY,
                None,
                elapsed,
            );
        }
        Behaviour::Ready | Behaviour::NeverReady | Behaviour::SlowStart => {
            let unready_after = script.after.filter(|_| behaviour == Behaviour::NeverReady);
            run_ready(
                &mut view,
                behaviour,
                spec,
                CREATE_DELAY,
                unready_after,
                elapsed,
            );
        }
        Behaviour::CrashLoopBackOff | Behaviour::OomKilled => {
            let (exit_code, reason) = if behaviour == Behaviour::OomKilled {
                (137, "OOMKilled")
            } else {
                (1, "Error")
            };
            let exit = Exit {
                code: script.exit_code.unwrap_or(exit_code),
                reason,
                healthy_for: script.after,
            };
            crash_loop(&mut view, spec, &exit, labels, elapsed);
        }
        Behaviour::ImagePullBackOff => pulls(&mut view, script, spec, image, elapsed),
        Behaviour::CreateContainerConfigError => {
            view.state = waiting(
                "CreateContainerConfigError",
                Some("secret \"sim-missing-config\" not found".into()),
            );
        }
        Behaviour::CreateContainerError => {
            view.state = waiting(
                "CreateContainerError",
                Some("failed to generate container spec: context deadline exceeded".to_string()),
            );
        }
        Behaviour::InvalidImageName => {
            view.state = waiting(
                "InvalidImageName",
                Some(format!(
                    "Failed to apply default image tag \"{image}\": couldn't parse image name \
                     \"{image}\": invalid reference format"
                )),
            );
        }
    }
    view
}

/// A container that runs from `start` (Ready, NeverReady or SlowStart). `unready_after`
/// (NeverReady with `after:`): Ready as a healthy container first, then readiness fails
/// that long after the start and never passes again.
fn run_ready(
    view: &mut ContainerView,
    behaviour: Behaviour,
    spec: ContainerSpec,
    start: Duration,
    unready_after: Option<Duration>,
    elapsed: Duration,
) {
    let unready_at = unready_after.map(|after| start + after);
    let ready_at = match behaviour {
        Behaviour::Ready => Some(start + spec.ready_delay),
        Behaviour::NeverReady if unready_at.is_some() => Some(start + spec.ready_delay),
        Behaviour::SlowStart => Some(SLOW_START.max(start + spec.ready_delay)),
        _ => None,
    };
    let finish_at = (!spec.restart_always)
        .then(|| (start + RUN_TO_COMPLETION).max(ready_at.unwrap_or_default() + RUN_TO_COMPLETION));
    // A never-ready container in a Job still runs to completion.
    if let Some(finish) = finish_at.filter(|&f| elapsed >= f) {
        view.state = State::Terminated {
            exit_code: 0,
            reason: "Completed".into(),
            started: start,
            finished: finish,
        };
        view.ready_changed = finish;
        view.done = true;
        return;
    }
    view.state = State::Running { started: start };
    let unready = unready_at.filter(|&u| elapsed >= u);
    match ready_at {
        Some(at) if unready.is_some() => {
            // Ready from `at` until readiness failed (never, when it failed first).
            let unready = unready.unwrap_or_default();
            view.ready_changed = if unready > at {
                unready
            } else {
                Duration::ZERO
            };
            view.next_change = finish_at;
        }
        Some(at) if elapsed >= at => {
            view.ready = true;
            view.ready_changed = at;
            view.next_change = [finish_at, unready_at].into_iter().flatten().min();
        }
        Some(at) => view.next_change = Some(at),
        None => view.next_change = finish_at,
    }
}

/// ErrImagePull for one pull attempt, then ImagePullBackOff for a growing back-off; with
/// `failing_pulls`, the attempt after them pulls the image and the container starts.
fn pulls(
    view: &mut ContainerView,
    script: &ImageScript,
    spec: ContainerSpec,
    image: &str,
    elapsed: Duration,
) {
    let error = script
        .pull_message
        .clone()
        .unwrap_or_else(|| pull_error(image));
    let mut t = CREATE_DELAY;
    let mut n = 0u32;
    loop {
        if script.failing_pulls.is_some_and(|times| n >= times) {
            // This pull succeeds: the container runs once the image is in.
            if elapsed < t + PULL_OK {
                // The kubelet's status keeps the last back-off until the pull is done.
                view.state = if n == 0 {
                    waiting("ContainerCreating", None)
                } else {
                    waiting("ImagePullBackOff", Some(backoff_message(image, &error)))
                };
                view.next_change = Some(t + PULL_OK);
            } else {
                run_ready(view, Behaviour::Ready, spec, t + PULL_OK, None, elapsed);
            }
            return;
        }
        if elapsed < t + PULL_ATTEMPT {
            view.state = waiting("ErrImagePull", Some(error));
            view.next_change = Some(t + PULL_ATTEMPT);
            return;
        }
        t += PULL_ATTEMPT;
        let wait = backoff(n);
        if elapsed < t + wait {
            view.state = waiting("ImagePullBackOff", Some(backoff_message(image, &error)));
            view.next_change = Some(t + wait);
            return;
        }
        t += wait;
        n += 1;
    }
}

/// The kubelet's ImagePullBackOff message since Kubernetes 1.32: the back-off with the
/// previous pull error.
fn backoff_message(image: &str, error: &str) -> String {
    format!("Back-off pulling image \"{image}\": ErrImagePull: {error}")
}

/// Names used in the CrashLoopBackOff message: container, pod, namespace, uid.
pub struct CrashLabels<'a> {
    pub container: &'a str,
    pub pod: &'a str,
    pub namespace: &'a str,
    pub uid: &'a str,
}

/// How a crashing container exits.
struct Exit<'a> {
    code: i64,
    reason: &'a str,
    /// `after:` of the rule: the first run is a healthy one (Ready after the ready delay)
    /// that lasts this long, instead of crashing after `RUN_BEFORE_CRASH`.
    healthy_for: Option<Duration>,
}

fn crash_loop(
    view: &mut ContainerView,
    spec: ContainerSpec,
    exit: &Exit<'_>,
    labels: &CrashLabels<'_>,
    elapsed: Duration,
) {
    let (exit_code, reason) = (exit.code, exit.reason);
    let restarts = spec.restart_always || spec.restart_on_failure;
    let mut start = CREATE_DELAY;
    let mut run = 0u32;
    loop {
        let healthy_run = exit.healthy_for.filter(|_| run == 0);
        let finish = start + healthy_run.unwrap_or(RUN_BEFORE_CRASH);
        view.restart_count = run;
        if elapsed < finish {
            view.state = State::Running { started: start };
            view.ready_changed = if run == 0 { Duration::ZERO } else { start };
            view.next_change = Some(finish);
            let ready_at = start + spec.ready_delay;
            if healthy_run.is_some() && ready_at < finish {
                if elapsed >= ready_at {
                    view.ready = true;
                    view.ready_changed = ready_at;
                } else {
                    view.next_change = Some(ready_at);
                }
            }
            return;
        }
        view.ready_changed = finish;
        if !restarts {
            view.state = State::Terminated {
                exit_code,
                reason: reason.to_string(),
                started: start,
                finished: finish,
            };
            view.done = true;
            return;
        }
        // The first restart is immediate (a short gap showing the termination); later
        // ones wait out the kubelet's doubling back-off.
        let (gap, shows_backoff) = if run == 0 {
            (Duration::from_secs(1), false)
        } else {
            (backoff(run - 1), true)
        };
        if elapsed < finish + gap {
            let terminated = (exit_code, reason.to_string(), start, finish);
            if shows_backoff {
                view.state = waiting(
                    "CrashLoopBackOff",
                    Some(format!(
                        "back-off {}s restarting failed container={} pod={}_{}({})",
                        gap.as_secs(),
                        labels.container,
                        labels.pod,
                        labels.namespace,
                        labels.uid
                    )),
                );
                view.last_terminated = Some(terminated);
            } else {
                view.state = State::Terminated {
                    exit_code,
                    reason: reason.to_string(),
                    started: start,
                    finished: finish,
                };
            }
            view.next_change = Some(finish + gap);
            return;
        }
        view.last_terminated = Some((exit_code, reason.to_string(), start, finish));
        start = finish + gap;
        run += 1;
    }
}

/// The kubelet's ErrImagePull message for an image that does not exist (containerd).
pub fn pull_error(image: &str) -> String {
    let full = normalize_image(image);
    format!(
        "rpc error: code = NotFound desc = failed to pull and unpack image \"{full}\": failed to \
         resolve reference \"{full}\": {full}: not found"
    )
}

/// The image reference as containerd reports it: registry and tag made explicit.
pub fn normalize_image(image: &str) -> String {
    let (name, suffix) = match image.split_once('@') {
        Some((name, digest)) => (name.to_string(), format!("@{digest}")),
        None => {
            let last = image.rsplit('/').next().unwrap_or(image);
            if last.contains(':') {
                (image.to_string(), String::new())
            } else {
                (image.to_string(), ":latest".to_string())
            }
        }
    };
    let first = name.split('/').next().unwrap_or_default();
    let has_registry =
        name.contains('/') && (first.contains('.') || first.contains(':') || first == "localhost");
    let full = if has_registry {
        name
    } else if name.contains('/') {
        format!("docker.io/{name}")
    } else {
        format!("docker.io/library/{name}")
    };
    format!("{full}{suffix}")
}

fn sha_hex(text: &str) -> String {
    hex::encode(Sha256::digest(text.as_bytes()))
}

/// Where the kubelet placed a pod: node name, node IP and pod IP.
#[derive(Debug, Clone)]
pub struct Placement {
    pub node: String,
    pub host_ip: String,
    pub pod_ip: String,
}

/// The pod's status after the kubelet has run it for `now - base`, plus when it changes next.
pub struct PodView {
    pub status: Value,
    pub next_change: Option<Duration>,
}

/// Computes a pod's status at `now`.
///
/// `behaviours[i]` is what the kubelet does with container `i`'s image (`init_behaviours` of init container
/// `i`); `blocked[i]` is `Some(message)` when container `i` references a ConfigMap/Secret (or
/// key) that does not exist. Init containers run one after the other to completion before
/// the containers start.
pub fn pod_status_at(
    pod: &Value,
    init_behaviours: &[ImageScript],
    behaviours: &[ImageScript],
    blocked: &[Option<String>],
    placement: &Placement,
    base: jiff::Timestamp,
    now: jiff::Timestamp,
) -> PodView {
    let ctx = PodClock {
        pod,
        name: meta::name(pod),
        namespace: meta::namespace(pod),
        uid: meta::uid(pod),
        base,
        elapsed: meta::since(now, base),
    };
    let init = init_containers_at(&ctx, init_behaviours);
    let main = main_containers_at(&ctx, behaviours, blocked, &init);
    let conditions = pod_conditions(&ctx, &init, &main);
    let qos = pod["status"]["qosClass"]
        .as_str()
        .map(str::to_string)
        .unwrap_or_else(|| qos_class(pod).to_string());
    let mut status = json!({
        "phase": main.phase(),
        "conditions": conditions,
        "hostIP": placement.host_ip,
        "hostIPs": [{"ip": placement.host_ip}],
        "podIP": placement.pod_ip,
        "podIPs": [{"ip": placement.pod_ip}],
        "startTime": ctx.at(Duration::ZERO),
    });
    if !init.statuses.is_empty() {
        status["initContainerStatuses"] = Value::Array(init.statuses);
    }
    status["containerStatuses"] = Value::Array(main.statuses);
    status["qosClass"] = json!(qos);
    let next_change = earliest(init.next_change, main.next_change);
    PodView {
        status,
        next_change: next_change.map(|offset| offset.saturating_sub(ctx.elapsed)),
    }
}

/// The pod's identity and clock, shared by every step of `pod_status_at`.
struct PodClock<'a> {
    pod: &'a Value,
    name: &'a str,
    namespace: &'a str,
    uid: &'a str,
    base: jiff::Timestamp,
    elapsed: Duration,
}

impl PodClock<'_> {
    fn at(&self, offset: Duration) -> Value {
        meta::time_string(add(self.base, offset))
    }

    fn labels<'b>(&'b self, container: &'b str) -> CrashLabels<'b> {
        CrashLabels {
            container,
            pod: self.name,
            namespace: self.namespace,
            uid: self.uid,
        }
    }

    fn containers(&self, key: &str) -> Vec<Value> {
        self.pod["spec"][key]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    /// The status of a container that waits for the init containers.
    fn pod_initializing(&self, container: &Value) -> Value {
        render(
            container,
            &waiting_view("PodInitializing"),
            Duration::ZERO,
            self.uid,
            &|d| self.at(d),
        )
    }
}

/// The earlier of two optional change times.
fn earliest(a: Option<Duration>, b: Option<Duration>) -> Option<Duration> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// The init containers, run in order.
struct InitOutcome {
    statuses: Vec<Value>,
    /// When the containers proper start; `None` while an init container has
    /// not completed.
    main_start: Option<Duration>,
    failed: bool,
    incomplete: Vec<String>,
    next_change: Option<Duration>,
}

fn init_containers_at(ctx: &PodClock, behaviours: &[ImageScript]) -> InitOutcome {
    let policy = ctx.pod["spec"]["restartPolicy"]
        .as_str()
        .unwrap_or("Always");
    let mut out = InitOutcome {
        statuses: Vec::new(),
        main_start: Some(Duration::ZERO),
        failed: false,
        incomplete: Vec::new(),
        next_change: None,
    };
    for (i, container) in ctx.containers("initContainers").iter().enumerate() {
        let cname = container["name"].as_str().unwrap_or_default();
        let Some(offset) = out.main_start else {
            out.statuses.push(ctx.pod_initializing(container));
            out.incomplete.push(cname.to_string());
            continue;
        };
        let spec = ContainerSpec {
            ready_delay: DEFAULT_READY_DELAY,
            restart_always: false,
            restart_on_failure: policy != "Never",
        };
        let ready = ImageScript::default();
        let behaviour = behaviours.get(i).unwrap_or(&ready);
        let image = container["image"].as_str().unwrap_or_default();
        let mut view = container_at(
            behaviour,
            spec,
            image,
            &ctx.labels(cname),
            ctx.elapsed.saturating_sub(offset),
        );
        view.ready = false;
        out.next_change = earliest(out.next_change, view.next_change.map(|c| c + offset));
        match &view.state {
            State::Terminated {
                exit_code: 0,
                finished,
                ..
            } => out.main_start = Some(offset + *finished),
            State::Terminated { .. } if view.done => {
                out.failed = true;
                out.main_start = None;
                out.incomplete.push(cname.to_string());
            }
            _ => {
                out.main_start = None;
                out.incomplete.push(cname.to_string());
            }
        }
        out.statuses
            .push(render(container, &view, offset, ctx.uid, &|d| ctx.at(d)));
    }
    out
}

/// The containers proper, which start when the init containers complete.
struct MainOutcome {
    statuses: Vec<Value>,
    all_ready: bool,
    unready: Vec<String>,
    ready_changed: Duration,
    any_started: bool,
    all_done: bool,
    any_failed: bool,
    next_change: Option<Duration>,
}

impl MainOutcome {
    fn phase(&self) -> &'static str {
        if self.all_done {
            if self.any_failed {
                "Failed"
            } else {
                "Succeeded"
            }
        } else if self.any_started {
            "Running"
        } else {
            "Pending"
        }
    }
}

fn main_containers_at(
    ctx: &PodClock,
    behaviours: &[ImageScript],
    blocked: &[Option<String>],
    init: &InitOutcome,
) -> MainOutcome {
    let containers = ctx.containers("containers");
    let mut out = MainOutcome {
        statuses: Vec::new(),
        all_ready: !containers.is_empty(),
        unready: Vec::new(),
        ready_changed: init.main_start.unwrap_or_default(),
        any_started: false,
        all_done: !containers.is_empty(),
        any_failed: init.failed,
        next_change: None,
    };
    for (i, container) in containers.iter().enumerate() {
        let cname = container["name"].as_str().unwrap_or_default();
        let image = container["image"].as_str().unwrap_or_default();
        let ready = ImageScript::default();
        let behaviour = behaviours.get(i).unwrap_or(&ready);
        let spec = ContainerSpec::from_pod(ctx.pod, container);
        let Some(offset) = init.main_start else {
            out.statuses.push(ctx.pod_initializing(container));
            out.all_ready = false;
            out.all_done = false;
            out.unready.push(cname.to_string());
            continue;
        };
        let local = ctx.elapsed.saturating_sub(offset);
        let view = match blocked.get(i).cloned().flatten() {
            Some(message) if local >= CREATE_DELAY => ContainerView {
                state: waiting("CreateContainerConfigError", Some(message)),
                ..waiting_view("")
            },
            _ => container_at(behaviour, spec, image, &ctx.labels(cname), local),
        };
        out.next_change = earliest(out.next_change, view.next_change.map(|c| c + offset));
        if !view.ready {
            out.all_ready = false;
            out.unready.push(cname.to_string());
        }
        out.ready_changed = out.ready_changed.max(offset + view.ready_changed);
        out.any_started |= ever_ran(&view);
        out.all_done &= view.done;
        if let State::Terminated { exit_code, .. } = view.state {
            out.any_failed |= view.done && exit_code != 0;
        }
        out.statuses
            .push(render(container, &view, offset, ctx.uid, &|d| ctx.at(d)));
    }
    if init.failed {
        out.all_done = true;
    }
    out
}

/// The pod conditions, in the order the kubelet lists them.
fn pod_conditions(ctx: &PodClock, init: &InitOutcome, main: &MainOutcome) -> Vec<Value> {
    let condition = |kind: &str, ok: bool, when: Duration| json!({"type": kind, "status": if ok { "True" } else { "False" }, "lastProbeTime": null, "lastTransitionTime": ctx.at(when)});
    let ready_cond = |kind: &str| {
        if main.all_ready {
            return condition(kind, true, main.ready_changed);
        }
        let mut c = condition(kind, false, main.ready_changed);
        if main.all_done {
            c["reason"] = json!("PodCompleted");
        } else {
            c["reason"] = json!("ContainersNotReady");
            c["message"] = json!(format!(
                "containers with unready status: [{}]",
                main.unready.join(" ")
            ));
        }
        c
    };
    let initialized = if init.main_start.is_some() || init.failed && main.all_done {
        condition("Initialized", true, init.main_start.unwrap_or_default())
    } else {
        let mut c = condition("Initialized", false, Duration::ZERO);
        c["reason"] = json!("ContainersNotInitialized");
        c["message"] = json!(format!(
            "containers with incomplete status: [{}]",
            init.incomplete.join(" ")
        ));
        c
    };
    let sandbox_ready = !main.all_done;
    vec![
        condition(
            "PodReadyToStartContainers",
            sandbox_ready,
            if sandbox_ready {
                Duration::ZERO
            } else {
                main.ready_changed
            },
        ),
        initialized,
        ready_cond("Ready"),
        ready_cond("ContainersReady"),
        condition("PodScheduled", true, Duration::ZERO),
    ]
}

fn waiting_view(reason: &str) -> ContainerView {
    ContainerView {
        state: waiting(reason, None),
        last_terminated: None,
        restart_count: 0,
        ready: false,
        ready_changed: Duration::ZERO,
        done: false,
        next_change: None,
    }
}

/// The run (0-based) whose termination `lastState` shows: while the kubelet backs off
/// (waiting), the run that just exited (its number is the restart count); once the next
/// run started, the one before it. The container ID (and so its log) follows the run.
fn last_run(view: &ContainerView) -> u32 {
    if matches!(view.state, State::Waiting { .. }) {
        view.restart_count
    } else {
        view.restart_count.saturating_sub(1)
    }
}

/// The container ID of one run of a container: the same on every status write, so that a
/// log request can tell which run an ID names.
pub fn container_id(pod_uid: &str, container: &str, run: u32) -> String {
    format!(
        "containerd://{}",
        sha_hex(&format!("{pod_uid}/{container}/{run}"))
    )
}

fn ever_ran(view: &ContainerView) -> bool {
    view.restart_count > 0
        || !matches!(view.state, State::Waiting { .. })
        || view.last_terminated.is_some()
}

/// One entry of `containerStatuses` (or `initContainerStatuses`), with the view's offsets
/// shifted by `offset` from the pod's base time.
fn render(
    container: &Value,
    view: &ContainerView,
    offset: Duration,
    pod_uid: &str,
    at: &dyn Fn(Duration) -> Value,
) -> Value {
    let at = |d: Duration| at(offset + d);
    let cname = container["name"].as_str().unwrap_or_default();
    let image = container["image"].as_str().unwrap_or_default();
    let ran = ever_ran(view);
    let container_id = |run: u32| container_id(pod_uid, cname, run);
    let terminated =
        |exit_code: i64, reason: &str, started: Duration, finished: Duration, run: u32| {
            json!({"terminated": {
                "exitCode": exit_code,
                "reason": reason,
                "startedAt": at(started),
                "finishedAt": at(finished),
                "containerID": container_id(run),
            }})
        };
    let state = match &view.state {
        State::Waiting { reason, message } => {
            let mut w = Map::new();
            w.insert("reason".into(), json!(reason));
            if let Some(m) = message {
                w.insert("message".into(), json!(m));
            }
            json!({ "waiting": w })
        }
        State::Running { started } => json!({"running": {"startedAt": at(*started)}}),
        State::Terminated {
            exit_code,
            reason,
            started,
            finished,
        } => terminated(*exit_code, reason, *started, *finished, view.restart_count),
    };
    let last_state = match &view.last_terminated {
        Some((exit_code, reason, started, finished)) => {
            terminated(*exit_code, reason, *started, *finished, last_run(view))
        }
        None => json!({}),
    };
    let pulled = ran
        || matches!(&view.state, State::Waiting { reason, .. } if reason == "CreateContainerConfigError" || reason == "CreateContainerError");
    let normalized = normalize_image(image);
    let repo = {
        let name = normalized.split('@').next().unwrap_or_default();
        match name.rfind(':') {
            Some(i) if i > name.rfind('/').unwrap_or(0) => name[..i].to_string(),
            _ => name.to_string(),
        }
    };
    let mut status = Map::new();
    status.insert("name".into(), json!(cname));
    status.insert("state".into(), state);
    status.insert("lastState".into(), last_state);
    status.insert("ready".into(), json!(view.ready));
    status.insert("restartCount".into(), json!(view.restart_count));
    status.insert(
        "image".into(),
        json!(if pulled {
            normalized.clone()
        } else {
            image.to_string()
        }),
    );
    status.insert(
        "imageID".into(),
        json!(if pulled {
            format!("{repo}@sha256:{}", sha_hex(image))
        } else {
            String::new()
        }),
    );
    if ran {
        status.insert(
            "containerID".into(),
            json!(container_id(view.restart_count)),
        );
    }
    status.insert(
        "started".into(),
        json!(matches!(view.state, State::Running { .. })),
    );
    if let Some(mounts) = container["volumeMounts"].as_array() {
        let mounts: Vec<Value> = mounts
            .iter()
            .map(|m| {
                let mut out = json!({"name": m["name"], "mountPath": m["mountPath"]});
                if m["readOnly"].as_bool() == Some(true) {
                    out["readOnly"] = json!(true);
                    out["recursiveReadOnly"] = json!("Disabled");
                }
                out
            })
            .collect();
        status.insert("volumeMounts".into(), json!(mounts));
    }
    Value::Object(status)
}

/// The pod's QoS class from its containers' resources.
pub fn qos_class(pod: &Value) -> &'static str {
    let containers = pod["spec"]["containers"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let has_any = containers.iter().any(|c| {
        c["resources"]["requests"]
            .as_object()
            .is_some_and(|m| !m.is_empty())
            || c["resources"]["limits"]
                .as_object()
                .is_some_and(|m| !m.is_empty())
    });
    if !has_any {
        return "BestEffort";
    }
    let guaranteed = containers.iter().all(|c| {
        let limits = &c["resources"]["limits"];
        let requests = &c["resources"]["requests"];
        ["cpu", "memory"]
            .iter()
            .all(|r| limits[r].is_string() && (requests[r].is_null() || requests[r] == limits[r]))
    });
    if guaranteed {
        "Guaranteed"
    } else {
        "Burstable"
    }
}

/// Missing ConfigMap/Secret references of a container (env valueFrom and envFrom), as the
/// kubelet reports them: `configmap "x" not found`, `couldn't find key k in Secret ns/x`.
/// `lookup(kind, name)` returns the object's `data` keys when it exists.
pub fn missing_config(
    container: &Value,
    namespace: &str,
    lookup: &dyn Fn(&str, &str) -> Option<Vec<String>>,
) -> Option<String> {
    let check = |kind: &str, reference: &Value, key: Option<&str>| -> Option<String> {
        if reference["optional"].as_bool() == Some(true) {
            return None;
        }
        let name = reference["name"].as_str().unwrap_or_default();
        let (lower, title) = if kind == "ConfigMap" {
            ("configmap", "ConfigMap")
        } else {
            ("secret", "Secret")
        };
        match lookup(kind, name) {
            None => Some(format!("{lower} \"{name}\" not found")),
            Some(keys) => match key {
                Some(k) if !keys.iter().any(|have| have == k) => Some(format!(
                    "couldn't find key {k} in {title} {namespace}/{name}"
                )),
                _ => None,
            },
        }
    };
    for from in container["envFrom"].as_array().into_iter().flatten() {
        if from["configMapRef"].is_object()
            && let Some(m) = check("ConfigMap", &from["configMapRef"], None)
        {
            return Some(m);
        }
        if from["secretRef"].is_object()
            && let Some(m) = check("Secret", &from["secretRef"], None)
        {
            return Some(m);
        }
    }
    for env in container["env"].as_array().into_iter().flatten() {
        let from = &env["valueFrom"];
        if from["configMapKeyRef"].is_object() {
            let r = &from["configMapKeyRef"];
            if let Some(m) = check("ConfigMap", r, r["key"].as_str()) {
                return Some(m);
            }
        }
        if from["secretKeyRef"].is_object() {
            let r = &from["secretKeyRef"];
            if let Some(m) = check("Secret", r, r["key"].as_str()) {
                return Some(m);
            }
        }
    }
    None
}

/// Is the pod counted by its controller: not being deleted and not finished?
pub fn is_active(pod: &Value) -> bool {
    !meta::is_deleting(pod)
        && !matches!(
            pod["status"]["phase"].as_str(),
            Some("Succeeded") | Some("Failed")
        )
}

/// When the pod became Ready, if it is Ready.
pub fn ready_since(pod: &Value) -> Option<jiff::Timestamp> {
    let conditions = pod["status"]["conditions"].as_array()?;
    let ready = meta::find_condition(conditions, "Ready")?;
    if ready["status"] != "True" {
        return None;
    }
    meta::parse_time(&ready["lastTransitionTime"]).or(Some(jiff::Timestamp::UNIX_EPOCH))
}

/// Availability after `min_ready` seconds of readiness: `Ok(())` when available, `Err(Some(wait))`
/// when Ready but not yet for long enough, `Err(None)` when not Ready.
pub fn availability(
    pod: &Value,
    min_ready: i64,
    now: jiff::Timestamp,
) -> Result<(), Option<Duration>> {
    let since = ready_since(pod).ok_or(None)?;
    if min_ready <= 0 {
        return Ok(());
    }
    let at = add(since, Duration::from_secs(min_ready as u64));
    if at <= now {
        Ok(())
    } else {
        Err(Some(meta::since(at, now)))
    }
}

/// How a controller names the pods it creates.
pub enum PodName {
    /// A name of its own (a StatefulSet's ordinal pods).
    Fixed(String),
    /// A prefix the server completes (`generateName`).
    Generated(String),
}

/// A pod for `owner` from its pod template, as a workload controller creates it.
pub fn pod_from_template(
    owner: &Value,
    api_version: &str,
    kind: &str,
    template: &Value,
    name: PodName,
    extra_labels: &[(&str, String)],
) -> Value {
    let mut metadata = Map::new();
    match name {
        PodName::Fixed(name) => {
            metadata.insert("name".into(), json!(name));
        }
        PodName::Generated(prefix) => {
            metadata.insert("generateName".into(), json!(prefix));
        }
    }
    metadata.insert("namespace".into(), json!(meta::namespace(owner)));
    let mut labels = template["metadata"]["labels"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    for (k, v) in extra_labels {
        labels.insert((*k).to_string(), json!(v));
    }
    if !labels.is_empty() {
        metadata.insert("labels".into(), Value::Object(labels));
    }
    if let Some(annotations) = template["metadata"]["annotations"].as_object() {
        metadata.insert("annotations".into(), Value::Object(annotations.clone()));
    }
    metadata.insert(
        "ownerReferences".into(),
        json!([meta::controller_ref(owner, api_version, kind)]),
    );
    // Admission defaults (service account token volume, tolerations...) are the API
    // server's job, done when the pod is created.
    let mut spec = template["spec"].clone();
    if !spec.is_object() {
        spec = json!({});
    }
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec})
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALWAYS: ContainerSpec = ContainerSpec {
        ready_delay: DEFAULT_READY_DELAY,
        restart_always: true,
        restart_on_failure: false,
    };
    const NEVER: ContainerSpec = ContainerSpec {
        ready_delay: DEFAULT_READY_DELAY,
        restart_always: false,
        restart_on_failure: false,
    };
    const LABELS: CrashLabels<'static> = CrashLabels {
        container: "web",
        pod: "web-abc",
        namespace: "ns",
        uid: "u1",
    };

    fn at(behaviour: Behaviour, spec: ContainerSpec, secs: f64) -> ContainerView {
        container_at(
            &behaviour.into(),
            spec,
            "example/web:v1",
            &LABELS,
            Duration::from_secs_f64(secs),
        )
    }

    fn reason(view: &ContainerView) -> String {
        match &view.state {
            State::Waiting { reason, .. } => reason.clone(),
            State::Running { .. } => "Running".into(),
            State::Terminated { reason, .. } => format!("Terminated:{reason}"),
        }
    }

    #[test]
    fn timelines() {
        use Behaviour::*;
        // (behaviour, spec, seconds, state, ready, restarts)
        let cases = [
            (Ready, ALWAYS, 0.1, "ContainerCreating", false, 0),
            (Ready, ALWAYS, 0.7, "Running", false, 0),
            (Ready, ALWAYS, 1.0, "Running", true, 0),
            (Ready, ALWAYS, 5000.0, "Running", true, 0),
            (NeverReady, ALWAYS, 5000.0, "Running", false, 0),
            (SlowStart, ALWAYS, 19.0, "Running", false, 0),
            (SlowStart, ALWAYS, 20.0, "Running", true, 0),
            (ImagePullBackOff, ALWAYS, 1.0, "ErrImagePull", false, 0),
            (ImagePullBackOff, ALWAYS, 3.0, "ImagePullBackOff", false, 0),
            (ImagePullBackOff, ALWAYS, 13.0, "ErrImagePull", false, 0),
            (ImagePullBackOff, ALWAYS, 16.0, "ImagePullBackOff", false, 0),
            (CrashLoopBackOff, ALWAYS, 1.0, "Running", false, 0),
            (CrashLoopBackOff, ALWAYS, 2.0, "Terminated:Error", false, 0),
            (CrashLoopBackOff, ALWAYS, 3.0, "Running", false, 1),
            (CrashLoopBackOff, ALWAYS, 4.0, "CrashLoopBackOff", false, 1),
            (CrashLoopBackOff, ALWAYS, 14.0, "Running", false, 2),
            (CrashLoopBackOff, ALWAYS, 20.0, "CrashLoopBackOff", false, 2),
            (OomKilled, ALWAYS, 2.0, "Terminated:OOMKilled", false, 0),
            (Ready, NEVER, 1.0, "Running", true, 0),
            (Ready, NEVER, 3.0, "Terminated:Completed", false, 0),
            (CrashLoopBackOff, NEVER, 3.0, "Terminated:Error", false, 0),
            (
                CreateContainerError,
                ALWAYS,
                3.0,
                "CreateContainerError",
                false,
                0,
            ),
        ];
        for (behaviour, spec, secs, state, ready, restarts) in cases {
            let view = at(behaviour, spec, secs);
            assert_eq!(reason(&view), state, "{behaviour:?} at {secs}s");
            assert_eq!(view.ready, ready, "{behaviour:?} at {secs}s ready");
            assert_eq!(
                view.restart_count, restarts,
                "{behaviour:?} at {secs}s restarts"
            );
        }
    }

    /// `times: 2` with a 503 text: two failed pulls (ErrImagePull, back-off 10 s), then the
    /// third pull at 0.5 + 2 + 10 + 2 + 20 = 34.5 s succeeds and the container starts.
    #[test]
    fn scripted_pulls_fail_n_times_then_start() {
        const E503: &str = "failed to pull and unpack image \"docker.io/example/web:v1\": failed to resolve reference \"docker.io/example/web:v1\": pulling from host docker.io failed with status code [manifests v1]: 503 Service Unavailable";
        let script = ImageScript {
            behaviour: Behaviour::ImagePullBackOff,
            failing_pulls: Some(2),
            pull_message: Some(E503.into()),
            ..ImageScript::default()
        };
        let view = |secs: f64| {
            container_at(
                &script,
                ALWAYS,
                "example/web:v1",
                &LABELS,
                Duration::from_secs_f64(secs),
            )
        };
        let cases = [
            (1.0, "ErrImagePull", false),
            (3.0, "ImagePullBackOff", false),
            (13.0, "ErrImagePull", false),
            (20.0, "ImagePullBackOff", false),
            (34.7, "ImagePullBackOff", false),
            (35.0, "Running", false),
            (35.5, "Running", true),
            (5000.0, "Running", true),
        ];
        for (secs, state, ready) in cases {
            let v = view(secs);
            assert_eq!(reason(&v), state, "at {secs}s");
            assert_eq!(v.ready, ready, "at {secs}s");
            assert_eq!(v.restart_count, 0, "at {secs}s");
        }
        let State::Waiting { message, .. } = view(1.0).state else {
            panic!()
        };
        assert_eq!(message.as_deref(), Some(E503));
        let State::Waiting { message, .. } = view(3.0).state else {
            panic!()
        };
        assert_eq!(
            message.as_deref(),
            Some(
                format!("Back-off pulling image \"example/web:v1\": ErrImagePull: {E503}").as_str()
            )
        );
        // times: 0 pulls at once.
        let first = ImageScript {
            failing_pulls: Some(0),
            ..script.clone()
        };
        let v = container_at(&first, ALWAYS, "x", &LABELS, Duration::from_secs(2));
        assert_eq!((reason(&v), v.ready), ("Running".to_string(), true));
        // The built-in word keeps containerd's NotFound text, with every pull failing.
        let v = at(Behaviour::ImagePullBackOff, ALWAYS, 5000.0);
        assert!(reason(&v).contains("ImagePull"), "{v:?}");
        let State::Waiting { message, .. } = at(Behaviour::ImagePullBackOff, ALWAYS, 1.0).state
        else {
            panic!()
        };
        assert!(
            message.is_some_and(|m| m.starts_with("rpc error: code = NotFound desc = ")
                && m.ends_with("docker.io/example/web:v1: not found"))
        );
    }

    /// SlowStart with `after: 60s`: Running from 0.5 s, Ready 60 s after that, and the
    /// controller is woken then; without `after` it is Ready at 20 s.
    #[test]
    fn slow_start_after_sets_the_time_to_ready() {
        let slow = ImageScript {
            behaviour: Behaviour::SlowStart,
            after: Some(Duration::from_secs(60)),
            ..ImageScript::default()
        };
        let view = |script: &ImageScript, secs: f64| {
            container_at(
                script,
                ALWAYS,
                "example/web:v2",
                &LABELS,
                Duration::from_secs_f64(secs),
            )
        };
        let cases = [
            (0.2, "ContainerCreating", false),
            (1.0, "Running", false),
            (30.0, "Running", false),
            (60.4, "Running", false),
            (60.6, "Running", true),
            (5000.0, "Running", true),
        ];
        for (secs, state, ready) in cases {
            let v = view(&slow, secs);
            assert_eq!(
                (reason(&v), v.ready),
                (state.to_string(), ready),
                "at {secs}s"
            );
        }
        assert_eq!(
            view(&slow, 1.0).next_change,
            Some(Duration::from_millis(60_500))
        );
        let builtin = ImageScript::from(Behaviour::SlowStart);
        assert!(!view(&builtin, 19.9).ready);
        assert!(view(&builtin, 20.1).ready);
    }

    /// `after: 3s`: healthy (Ready) from 1 s to 3.5 s, then the behaviour: a crash loop
    /// from its first exit, or readiness that fails for good.
    #[test]
    fn after_runs_healthy_first() {
        use Behaviour::*;
        let view = |behaviour: Behaviour, secs: f64| {
            let script = ImageScript {
                behaviour,
                after: Some(Duration::from_secs(3)),
                ..ImageScript::default()
            };
            container_at(
                &script,
                ALWAYS,
                "example/web:v2",
                &LABELS,
                Duration::from_secs_f64(secs),
            )
        };
        // (behaviour, seconds, state, ready, restarts)
        let cases = [
            (CrashLoopBackOff, 0.7, "Running", false, 0),
            (CrashLoopBackOff, 1.0, "Running", true, 0),
            (CrashLoopBackOff, 3.4, "Running", true, 0),
            (CrashLoopBackOff, 3.6, "Terminated:Error", false, 0),
            (CrashLoopBackOff, 4.6, "Running", false, 1),
            (CrashLoopBackOff, 5.6, "CrashLoopBackOff", false, 1),
            (CrashLoopBackOff, 16.0, "Running", false, 2),
            (OomKilled, 3.0, "Running", true, 0),
            (OomKilled, 3.6, "Terminated:OOMKilled", false, 0),
            (NeverReady, 1.0, "Running", true, 0),
            (NeverReady, 3.4, "Running", true, 0),
            (NeverReady, 3.6, "Running", false, 0),
            (NeverReady, 5000.0, "Running", false, 0),
        ];
        for (behaviour, secs, state, ready, restarts) in cases {
            let v = view(behaviour, secs);
            assert_eq!(reason(&v), state, "{behaviour:?} at {secs}s");
            assert_eq!(v.ready, ready, "{behaviour:?} at {secs}s ready");
            assert_eq!(v.restart_count, restarts, "{behaviour:?} at {secs}s");
        }
        // The controller is woken when readiness comes and when it goes.
        assert_eq!(
            view(CrashLoopBackOff, 0.7).next_change,
            Some(Duration::from_secs(1))
        );
        assert_eq!(
            view(CrashLoopBackOff, 2.0).next_change,
            Some(Duration::from_millis(3500))
        );
        assert_eq!(
            view(NeverReady, 2.0).next_change,
            Some(Duration::from_millis(3500))
        );
        assert_eq!(
            view(NeverReady, 4.0).ready_changed,
            Duration::from_millis(3500)
        );
    }

    #[test]
    fn crash_loop_reports_backoff_and_last_state() {
        let view = at(Behaviour::CrashLoopBackOff, ALWAYS, 4.0);
        let State::Waiting { message, .. } = &view.state else {
            panic!("{view:?}")
        };
        assert_eq!(
            message.as_deref(),
            Some("back-off 10s restarting failed container=web pod=web-abc_ns(u1)")
        );
        let (code, reason, ..) = view.last_terminated.clone().unwrap();
        assert_eq!((code, reason.as_str()), (1, "Error"));
        // The back-off doubles and is capped.
        assert_eq!(backoff(0), Duration::from_secs(10));
        assert_eq!(backoff(1), Duration::from_secs(20));
        assert_eq!(backoff(9), MAX_BACKOFF);
        // The restart count keeps growing over a long time.
        assert!(at(Behaviour::CrashLoopBackOff, ALWAYS, 1000.0).restart_count >= 6);
    }

    #[test]
    fn next_change_is_always_in_the_future() {
        for behaviour in [
            Behaviour::Ready,
            Behaviour::CrashLoopBackOff,
            Behaviour::ImagePullBackOff,
            Behaviour::SlowStart,
        ] {
            for tenth in 0..400 {
                let secs = f64::from(tenth) / 10.0;
                let view = at(behaviour, ALWAYS, secs);
                if let Some(next) = view.next_change {
                    assert!(next > Duration::from_secs_f64(secs), "{behaviour:?} {secs}");
                }
            }
        }
    }

    #[test]
    fn images_are_normalized_like_containerd() {
        let cases = [
            ("nginx", "docker.io/library/nginx:latest"),
            ("nginx:1.27", "docker.io/library/nginx:1.27"),
            ("example/web:v1", "docker.io/example/web:v1"),
            ("gcr.io/x/y:1", "gcr.io/x/y:1"),
            ("localhost:5000/x", "localhost:5000/x:latest"),
            ("x@sha256:ab", "docker.io/library/x@sha256:ab"),
        ];
        for (image, want) in cases {
            assert_eq!(normalize_image(image), want);
        }
        assert!(
            pull_error("example/doesnotexist:v1")
                .contains("failed to pull and unpack image \"docker.io/example/doesnotexist:v1\"")
        );
    }

    fn pod(containers: Value) -> Value {
        json!({"metadata": {"name": "p", "namespace": "ns", "uid": "u"},
               "spec": {"restartPolicy": "Always", "containers": containers}})
    }

    fn placement() -> Placement {
        Placement {
            node: "n1".into(),
            host_ip: "172.18.0.2".into(),
            pod_ip: "10.244.0.5".into(),
        }
    }

    #[test]
    fn pod_status_has_conditions_and_phase() {
        let base: jiff::Timestamp = "2026-11-30T08:00:00Z".parse().unwrap();
        let p = pod(json!([{"name": "web", "image": "nginx:1"}]));
        let view = pod_status_at(
            &p,
            &[],
            &[Behaviour::Ready.into()],
            &[None],
            &placement(),
            base,
            add(base, Duration::from_secs(5)),
        );
        let s = &view.status;
        assert_eq!(s["phase"], "Running");
        let types: Vec<&str> = s["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["type"].as_str().unwrap())
            .collect();
        assert_eq!(
            types,
            [
                "PodReadyToStartContainers",
                "Initialized",
                "Ready",
                "ContainersReady",
                "PodScheduled"
            ]
        );
        assert_eq!(s["conditions"][2]["status"], "True");
        assert_eq!(
            s["conditions"][2]["lastTransitionTime"],
            "2026-11-30T08:00:01Z"
        );
        assert_eq!(
            s["containerStatuses"][0]["state"]["running"]["startedAt"],
            "2026-11-30T08:00:00Z"
        );
        assert_eq!(
            s["containerStatuses"][0]["image"],
            "docker.io/library/nginx:1"
        );
        assert_eq!(s["qosClass"], "BestEffort");
        assert_eq!(view.next_change, None);

        let pending = pod_status_at(
            &p,
            &[],
            &[Behaviour::ImagePullBackOff.into()],
            &[None],
            &placement(),
            base,
            add(base, Duration::from_secs(1)),
        );
        assert_eq!(pending.status["phase"], "Pending");
        assert_eq!(
            pending.status["conditions"][2]["reason"],
            "ContainersNotReady"
        );
        assert_eq!(
            pending.status["conditions"][2]["message"],
            "containers with unready status: [web]"
        );
        assert_eq!(
            pending.status["containerStatuses"][0]["state"]["waiting"]["reason"],
            "ErrImagePull"
        );

        let blocked = pod_status_at(
            &p,
            &[],
            &[Behaviour::Ready.into()],
            &[Some("configmap \"x\" not found".into())],
            &placement(),
            base,
            add(base, Duration::from_secs(9)),
        );
        assert_eq!(
            blocked.status["containerStatuses"][0]["state"]["waiting"]["reason"],
            "CreateContainerConfigError"
        );
        assert_eq!(
            blocked.status["containerStatuses"][0]["state"]["waiting"]["message"],
            "configmap \"x\" not found"
        );
    }

    #[test]
    fn init_containers_run_first() {
        let base: jiff::Timestamp = "2026-11-30T08:00:00Z".parse().unwrap();
        let mut p = pod(json!([{"name": "web", "image": "nginx:1"}]));
        p["spec"]["initContainers"] = json!([{"name": "setup", "image": "busybox"}]);
        let status_at = |init: Behaviour, secs: u64| {
            pod_status_at(
                &p,
                &[init.into()],
                &[Behaviour::Ready.into()],
                &[None],
                &placement(),
                base,
                add(base, Duration::from_secs(secs)),
            )
            .status
        };
        let early = status_at(Behaviour::Ready, 1);
        assert_eq!(early["phase"], "Pending");
        assert_eq!(early["conditions"][1]["status"], "False");
        assert_eq!(early["conditions"][1]["reason"], "ContainersNotInitialized");
        assert_eq!(
            early["containerStatuses"][0]["state"]["waiting"]["reason"],
            "PodInitializing"
        );
        assert!(early["initContainerStatuses"][0]["state"]["running"].is_object());
        let later = status_at(Behaviour::Ready, 10);
        assert_eq!(later["phase"], "Running");
        assert_eq!(later["conditions"][1]["status"], "True");
        assert_eq!(
            later["initContainerStatuses"][0]["state"]["terminated"]["reason"],
            "Completed"
        );
        assert_eq!(later["conditions"][2]["status"], "True");
        let crashing = status_at(Behaviour::CrashLoopBackOff, 20);
        assert_eq!(crashing["phase"], "Pending");
        assert_eq!(
            crashing["initContainerStatuses"][0]["state"]["waiting"]["reason"],
            "CrashLoopBackOff"
        );
    }

    #[test]
    fn job_pods_succeed_or_fail() {
        let base: jiff::Timestamp = "2026-11-30T08:00:00Z".parse().unwrap();
        let mut p = pod(json!([{"name": "job", "image": "busybox"}]));
        p["spec"]["restartPolicy"] = json!("Never");
        let later = add(base, Duration::from_secs(30));
        let ok = pod_status_at(
            &p,
            &[],
            &[Behaviour::Ready.into()],
            &[None],
            &placement(),
            base,
            later,
        );
        assert_eq!(ok.status["phase"], "Succeeded");
        assert_eq!(ok.status["conditions"][2]["reason"], "PodCompleted");
        let bad = pod_status_at(
            &p,
            &[],
            &[Behaviour::CrashLoopBackOff.into()],
            &[None],
            &placement(),
            base,
            later,
        );
        assert_eq!(bad.status["phase"], "Failed");
        assert_eq!(
            bad.status["containerStatuses"][0]["state"]["terminated"]["exitCode"],
            1
        );
    }

    #[test]
    fn missing_config_messages() {
        let lookup = |kind: &str, name: &str| -> Option<Vec<String>> {
            (kind == "ConfigMap" && name == "have").then(|| vec!["k".to_string()])
        };
        let cases = [
            (
                json!({"envFrom": [{"configMapRef": {"name": "nope"}}]}),
                Some("configmap \"nope\" not found"),
            ),
            (
                json!({"envFrom": [{"configMapRef": {"name": "nope", "optional": true}}]}),
                None,
            ),
            (
                json!({"envFrom": [{"secretRef": {"name": "s"}}]}),
                Some("secret \"s\" not found"),
            ),
            (
                json!({"env": [{"name": "A", "valueFrom": {"configMapKeyRef": {"name": "have", "key": "k"}}}]}),
                None,
            ),
            (
                json!({"env": [{"name": "A", "valueFrom": {"configMapKeyRef": {"name": "have", "key": "z"}}}]}),
                Some("couldn't find key z in ConfigMap ns/have"),
            ),
            (json!({"env": [{"name": "A", "value": "x"}]}), None),
        ];
        for (container, want) in cases {
            assert_eq!(
                missing_config(&container, "ns", &lookup).as_deref(),
                want,
                "{container}"
            );
        }
    }
}
