//! The kubelet's container logs: what `GET .../pods/NAME/log` answers.
//!
//! A simulated container writes a few deterministic lines per run: the rule's `logs:` when
//! it has them (`{restart}` becomes the run's restart count), else lines that depend on the
//! behaviour (a crash-looping one names its restart count and exit code). Which run a request
//! reads follows the kubelet: the running instance, else the last terminated one, and with
//! `previous=true` the one `lastState.terminated` names; a container that never started, or
//! has no previous instance, is the kubelet's 400.

use std::collections::HashMap;
use std::time::Duration;

use serde_json::{Map, Value, json};

use super::meta::{self, add};
use super::pods::container_id;
use super::rules::{self, Behaviour, ImageScript, Rule};
use crate::model::error::ApiError;

/// The query parameters of a log request (PodLogOptions), validated.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LogOptions {
    pub container: Option<String>,
    pub previous: bool,
    pub tail_lines: Option<usize>,
    pub limit_bytes: Option<usize>,
    pub timestamps: bool,
    pub since_seconds: Option<u64>,
    pub since_time: Option<jiff::Timestamp>,
}

/// Reads PodLogOptions from the query as the API server does: a value that is not a number
/// is a 400, a number out of range a 422 naming the field.
pub fn parse_options(query: &HashMap<String, String>, pod: &str) -> Result<LogOptions, ApiError> {
    let flag = |name: &str| matches!(query.get(name).map(String::as_str), Some("true" | "1"));
    let number = |name: &str| -> Result<Option<i64>, ApiError> {
        query
            .get(name)
            .filter(|v| !v.is_empty())
            .map(|v| {
                v.parse::<i64>().map_err(|_| {
                    ApiError::bad_request(format!(
                        "strconv.ParseInt: parsing {v:?}: invalid syntax"
                    ))
                })
            })
            .transpose()
    };
    let invalid = |field: &str, value: i64, detail: &str| {
        let mut details = Map::new();
        details.insert("name".into(), json!(pod));
        details.insert("kind".into(), json!("PodLogOptions"));
        ApiError::invalid(
            &format!("PodLogOptions \"{pod}\""),
            details,
            field,
            "FieldValueInvalid",
            &format!("Invalid value: {value}: {detail}"),
        )
    };
    let tail = number("tailLines")?;
    if let Some(n) = tail.filter(|&n| n < 0) {
        return Err(invalid(
            "tailLines",
            n,
            "must be greater than or equal to 0",
        ));
    }
    let limit = number("limitBytes")?;
    if let Some(n) = limit.filter(|&n| n < 1) {
        return Err(invalid("limitBytes", n, "must be greater than 0"));
    }
    let since = number("sinceSeconds")?;
    if let Some(n) = since.filter(|&n| n < 1) {
        return Err(invalid("sinceSeconds", n, "must be greater than 0"));
    }
    let since_time = match query.get("sinceTime").filter(|v| !v.is_empty()) {
        Some(text) => Some(text.parse::<jiff::Timestamp>().map_err(|_| {
            ApiError::bad_request(format!(
                "parsing time {text:?} as \"2006-01-02T15:04:05Z07:00\": cannot parse"
            ))
        })?),
        None => None,
    };
    if since.is_some() && since_time.is_some() {
        let mut details = Map::new();
        details.insert("name".into(), json!(pod));
        details.insert("kind".into(), json!("PodLogOptions"));
        return Err(ApiError::invalid(
            &format!("PodLogOptions \"{pod}\""),
            details,
            "sinceSeconds",
            "FieldValueForbidden",
            "Forbidden: at most one of `sinceTime` or `sinceSeconds` may be specified",
        ));
    }
    Ok(LogOptions {
        container: query.get("container").filter(|c| !c.is_empty()).cloned(),
        previous: flag("previous"),
        tail_lines: tail.and_then(|n| usize::try_from(n).ok()),
        limit_bytes: limit.and_then(|n| usize::try_from(n).ok()),
        timestamps: flag("timestamps"),
        since_seconds: since.and_then(|n| u64::try_from(n).ok()),
        since_time,
    })
}

/// The lines run `run` (0-based: its restart count) of a container writes.
pub fn run_lines(script: &ImageScript, container: &str, image: &str, run: u32) -> Vec<String> {
    if let Some(lines) = &script.logs {
        return lines
            .iter()
            .map(|line| line.replace("{restart}", &run.to_string()))
            .collect();
    }
    let start = format!("{container} starting (image {image}, restart count {run})");
    let rest: &[&str] = match script.behaviour {
        Behaviour::CrashLoopBackOff => &["loading configuration from /etc/app/config.yaml"],
        Behaviour::OomKilled => &["loading cache into memory"],
        Behaviour::NeverReady => &["waiting for a dependency: connection refused"],
        _ => &["listening on :8080"],
    };
    let mut lines = vec![start];
    lines.extend(rest.iter().map(|l| l.to_string()));
    if script.behaviour == Behaviour::CrashLoopBackOff {
        lines.push(format!(
            "fatal: cannot start, exiting with code {}",
            script.exit_code.unwrap_or(1)
        ));
    }
    lines
}

/// One instance of a container: its run number and when it started (and finished).
#[derive(Debug, Clone, PartialEq)]
struct Instance {
    run: Option<u32>,
    started: Option<jiff::Timestamp>,
    finished: Option<jiff::Timestamp>,
}

/// The log of a pod's container, as the kubelet would serve it at `now`.
pub fn pod_log(
    pod: &Value,
    rules: &[Rule],
    cluster: &str,
    opts: &LogOptions,
    now: jiff::Timestamp,
) -> Result<String, ApiError> {
    let pod_name = meta::name(pod);
    let container = choose_container(pod, opts.container.as_deref())?;
    let name = container["name"].as_str().unwrap_or_default();
    let image = container["image"].as_str().unwrap_or_default();
    let statuses = ["containerStatuses", "initContainerStatuses"]
        .iter()
        .filter_map(|key| pod["status"][key].as_array())
        .flatten();
    let status = statuses
        .into_iter()
        .find(|s| s["name"].as_str() == Some(name))
        .cloned()
        .unwrap_or(Value::Null);
    let instance = instance_of(&status, meta::uid(pod), name, pod_name, opts.previous)?;
    let Some(run) = instance.run else {
        return Ok(String::new());
    };
    let script = rules::script_for(rules, cluster, image);
    let lines = run_lines(&script, name, image, run);
    Ok(render(&lines, &instance, opts, now))
}

/// The container a request names, or the only one; the API server's 400 otherwise.
fn choose_container<'a>(pod: &'a Value, asked: Option<&str>) -> Result<&'a Value, ApiError> {
    let pod_name = meta::name(pod);
    let list = |key: &str| -> Vec<&'a Value> {
        pod["spec"][key]
            .as_array()
            .map(|l| l.iter().collect())
            .unwrap_or_default()
    };
    let containers = list("containers");
    let inits = list("initContainers");
    let names = |l: &[&Value]| -> String {
        l.iter()
            .filter_map(|c| c["name"].as_str())
            .collect::<Vec<_>>()
            .join(" ")
    };
    match asked {
        Some(asked) => containers
            .iter()
            .chain(inits.iter())
            .find(|c| c["name"].as_str() == Some(asked))
            .copied()
            .ok_or_else(|| {
                ApiError::bad_request(format!("container {asked} is not valid for pod {pod_name}"))
            }),
        None if containers.len() == 1 => Ok(containers[0]),
        None => {
            let mut message = format!(
                "a container name must be specified for pod {pod_name}, choose one of: [{}]",
                names(&containers)
            );
            if !inits.is_empty() {
                message.push_str(&format!(
                    " or one of the init containers: [{}]",
                    names(&inits)
                ));
            }
            Err(ApiError::bad_request(message))
        }
    }
}

/// Which instance the kubelet reads (its `validateContainerLogStatus`): with `previous`, the
/// one `lastState.terminated` names; else the running one, the terminated one, the last
/// terminated one; a waiting container that never ran has no log yet.
fn instance_of(
    status: &Value,
    pod_uid: &str,
    name: &str,
    pod_name: &str,
    previous: bool,
) -> Result<Instance, ApiError> {
    let state = &status["state"];
    let last = &status["lastState"]["terminated"];
    let has_id = |v: &Value| v["containerID"].as_str().is_some_and(|id| !id.is_empty());
    let restarts = status["restartCount"].as_u64().unwrap_or(0);
    let restarts = u32::try_from(restarts).unwrap_or(u32::MAX);
    let of = |v: &Value| Instance {
        run: run_of(
            v["containerID"].as_str().unwrap_or_default(),
            pod_uid,
            name,
            restarts,
        ),
        started: meta::parse_time(&v["startedAt"]),
        finished: meta::parse_time(&v["finishedAt"]),
    };
    if previous {
        return if has_id(last) {
            Ok(of(last))
        } else {
            Err(ApiError::bad_request(format!(
                "previous terminated container \"{name}\" in pod \"{pod_name}\" not found"
            )))
        };
    }
    if state["running"].is_object() {
        return Ok(of(&state["running"]).with_run_if_missing(restarts));
    }
    if state["terminated"].is_object() {
        if has_id(&state["terminated"]) {
            return Ok(of(&state["terminated"]));
        }
        if has_id(last) {
            return Ok(of(last));
        }
        return Err(ApiError::bad_request(format!(
            "container \"{name}\" in pod \"{pod_name}\" is terminated"
        )));
    }
    if last.is_object() {
        return if has_id(last) {
            Ok(of(last))
        } else {
            Err(ApiError::bad_request(format!(
                "container \"{name}\" in pod \"{pod_name}\" is terminated"
            )))
        };
    }
    let why = match state["waiting"]["reason"].as_str() {
        Some("ErrImagePull") => "image can't be pulled".to_string(),
        Some("ImagePullBackOff") => "trying and failing to pull image".to_string(),
        Some(reason) => reason.to_string(),
        None => {
            return Err(ApiError::bad_request(format!(
                "container \"{name}\" in pod \"{pod_name}\" is waiting to start - no logs yet"
            )));
        }
    };
    Err(ApiError::bad_request(format!(
        "container \"{name}\" in pod \"{pod_name}\" is waiting to start: {why}"
    )))
}

impl Instance {
    /// A running status written without a container ID is the current run.
    fn with_run_if_missing(mut self, restarts: u32) -> Self {
        self.run = self.run.or(Some(restarts));
        self
    }
}

/// The run whose container ID is `id` (IDs are derived from pod, container and run).
fn run_of(id: &str, pod_uid: &str, name: &str, restarts: u32) -> Option<u32> {
    if id.is_empty() {
        return None;
    }
    (0..=restarts.saturating_add(1)).find(|&run| container_id(pod_uid, name, run) == id)
}

/// The log text: each line stamped a millisecond after the previous one from the start of
/// the instance, filtered by since, cut to the tail and to the byte limit.
fn render(
    lines: &[String],
    instance: &Instance,
    opts: &LogOptions,
    now: jiff::Timestamp,
) -> String {
    let start = instance.started.unwrap_or(now);
    let stamped = lines.iter().enumerate().map(|(i, line)| {
        let mut at = add(start, Duration::from_millis(i as u64));
        if let Some(finished) = instance.finished {
            at = at.min(finished.max(start));
        }
        (at, line)
    });
    let since = opts.since_time.or_else(|| {
        opts.since_seconds.map(|s| {
            jiff::SignedDuration::try_from(Duration::from_secs(s.min(315_360_000)))
                .ok()
                .and_then(|d| now.checked_sub(d).ok())
                .unwrap_or(jiff::Timestamp::MIN)
        })
    });
    let kept: Vec<_> = stamped
        .filter(|(at, _)| since.is_none_or(|since| *at >= since))
        .collect();
    let skip = opts
        .tail_lines
        .map_or(0, |tail| kept.len().saturating_sub(tail));
    let mut text = String::new();
    for (at, line) in kept.into_iter().skip(skip) {
        if opts.timestamps {
            text.push_str(&format!("{at:.9} "));
        }
        text.push_str(line);
        text.push('\n');
    }
    if let Some(limit) = opts.limit_bytes.filter(|&l| l < text.len()) {
        let mut cut = limit;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn query(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    const UID: &str = "u-1";

    fn pod(status: Value) -> Value {
        json!({
            "metadata": {"name": "web-1", "namespace": "default", "uid": UID},
            "spec": {"containers": [{"name": "web", "image": "example/crashloop:1"}]},
            "status": {"containerStatuses": [status]},
        })
    }

    fn terminated(run: u32, started: &str, finished: &str) -> Value {
        json!({"terminated": {
            "exitCode": 1, "reason": "Error", "startedAt": started, "finishedAt": finished,
            "containerID": container_id(UID, "web", run),
        }})
    }

    fn now() -> jiff::Timestamp {
        "2026-01-01T00:01:00Z".parse().unwrap()
    }

    fn log(pod: &Value, q: &[(&str, &str)]) -> Result<String, ApiError> {
        let opts = parse_options(&query(q), "web-1")?;
        pod_log(pod, &[], "sim-1", &opts, now())
    }

    #[test]
    fn a_crash_loop_reads_the_run_it_asks_for() {
        // Backing off after run 2 exited: current and previous are both run 2, as on a
        // real kubelet (no new container yet).
        let backing_off = pod(json!({
            "name": "web", "restartCount": 2,
            "state": {"waiting": {"reason": "CrashLoopBackOff"}},
            "lastState": terminated(2, "2026-01-01T00:00:30Z", "2026-01-01T00:00:31Z"),
        }));
        let text = log(&backing_off, &[("previous", "true")]).unwrap();
        assert_eq!(
            text,
            "web starting (image example/crashloop:1, restart count 2)\n\
             loading configuration from /etc/app/config.yaml\n\
             fatal: cannot start, exiting with code 1\n"
        );
        assert_eq!(log(&backing_off, &[]).unwrap(), text);
        // Running run 3: current is run 3, previous run 2.
        let running = pod(json!({
            "name": "web", "restartCount": 3,
            "state": {"running": {"startedAt": "2026-01-01T00:00:51Z",
                "containerID": container_id(UID, "web", 3)}},
            "lastState": terminated(2, "2026-01-01T00:00:30Z", "2026-01-01T00:00:31Z"),
        }));
        assert!(log(&running, &[]).unwrap().contains("restart count 3"));
        assert!(
            log(&running, &[("previous", "true")])
                .unwrap()
                .contains("restart count 2")
        );
    }

    #[test]
    fn options_cut_the_log_as_the_kubelet_does() {
        let p = pod(json!({
            "name": "web", "restartCount": 0,
            "state": {"running": {"startedAt": "2026-01-01T00:00:00Z",
                "containerID": container_id(UID, "web", 0)}},
            "lastState": {},
        }));
        let cases: &[(&[(&str, &str)], &str)] = &[
            (
                &[("tailLines", "1")],
                "fatal: cannot start, exiting with code 1\n",
            ),
            (&[("tailLines", "0")], ""),
            (&[("limitBytes", "3")], "web"),
            (
                &[
                    ("container", "web"),
                    ("tailLines", "1"),
                    ("timestamps", "true"),
                ],
                "2026-01-01T00:00:00.002000000Z fatal: cannot start, exiting with code 1\n",
            ),
            // The lines were written a minute ago.
            (&[("sinceSeconds", "10")], ""),
            (
                &[
                    ("sinceTime", "2026-01-01T00:00:00.001Z"),
                    ("tailLines", "5"),
                ],
                "loading configuration from /etc/app/config.yaml\nfatal: cannot start, exiting with code 1\n",
            ),
        ];
        for (q, want) in cases {
            assert_eq!(log(&p, q).unwrap(), *want, "{q:?}");
        }
    }

    #[test]
    fn refusals_are_the_real_servers_400_and_422() {
        let waiting = pod(json!({
            "name": "web", "restartCount": 0,
            "state": {"waiting": {"reason": "ContainerCreating"}}, "lastState": {},
        }));
        let pulling = pod(json!({
            "name": "web", "restartCount": 0,
            "state": {"waiting": {"reason": "ImagePullBackOff"}}, "lastState": {},
        }));
        // (pod, query, status code, message)
        type Case<'a> = (&'a Value, Vec<(&'a str, &'a str)>, u16, &'a str);
        let cases: Vec<Case<'_>> = vec![
            (
                &waiting,
                vec![],
                400,
                "container \"web\" in pod \"web-1\" is waiting to start: ContainerCreating",
            ),
            (
                &pulling,
                vec![],
                400,
                "container \"web\" in pod \"web-1\" is waiting to start: trying and failing to pull image",
            ),
            (
                &waiting,
                vec![("previous", "true")],
                400,
                "previous terminated container \"web\" in pod \"web-1\" not found",
            ),
            (
                &waiting,
                vec![("container", "db")],
                400,
                "container db is not valid for pod web-1",
            ),
            (
                &waiting,
                vec![("tailLines", "-1")],
                422,
                "PodLogOptions \"web-1\" is invalid: tailLines: Invalid value: -1: must be greater than or equal to 0",
            ),
            (
                &waiting,
                vec![("tailLines", "x")],
                400,
                "strconv.ParseInt: parsing \"x\": invalid syntax",
            ),
        ];
        for (p, q, code, message) in cases {
            let err = log(p, &q).unwrap_err();
            let status = err.to_status();
            assert_eq!(status["code"], json!(code), "{q:?}");
            assert_eq!(status["message"], json!(message), "{q:?}");
        }
        let mut two = waiting.clone();
        two["spec"]["containers"] = json!([{"name": "a"}, {"name": "b"}]);
        two["spec"]["initContainers"] = json!([{"name": "init"}]);
        assert_eq!(
            log(&two, &[]).unwrap_err().to_status()["message"],
            json!(
                "a container name must be specified for pod web-1, choose one of: [a b] or one of the init containers: [init]"
            )
        );
    }

    #[test]
    fn rule_lines_name_the_restart() {
        let script = ImageScript {
            behaviour: Behaviour::OomKilled,
            logs: Some(vec!["boot {restart}".into(), "alloc".into()]),
            ..ImageScript::default()
        };
        assert_eq!(run_lines(&script, "web", "x", 4), vec!["boot 4", "alloc"]);
        let ready = run_lines(&Behaviour::Ready.into(), "web", "x:1", 0);
        assert_eq!(ready.last().map(String::as_str), Some("listening on :8080"));
    }
}
