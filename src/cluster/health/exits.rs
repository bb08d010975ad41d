//! How a container last ended, from its status: exit code, reason, signal, run time,
//! restarts and memory limit, said as "exit 137 (OOMKilled, memory limit 128Mi) after 2s,
//! restarted 5 times". Pure functions of the pod's JSON.

use serde_json::Value;

use super::status::{at, int_at, str_at};

/// What is known of a container and its last termination.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ContainerFacts {
    pub image: Option<String>,
    pub exit_code: Option<i64>,
    /// "Error", "OOMKilled", "Completed", ...: the kubelet's termination reason.
    pub exit_reason: Option<String>,
    /// The signal by name when the exit code is 128 + its number.
    pub signal: Option<String>,
    /// Seconds the last run lasted (finishedAt - startedAt).
    pub ran_for_secs: Option<i64>,
    pub restarts: Option<i64>,
    /// resources.limits.memory of the container in the pod spec.
    pub memory_limit: Option<String>,
    /// The termination message the container wrote (terminationMessagePath).
    pub message: Option<String>,
}

/// The name of the signal behind an exit code of 128 + N (Linux numbering), as shells
/// and container runtimes report a killed process.
pub fn signal_name(exit_code: i64) -> Option<&'static str> {
    const NAMES: [&str; 31] = [
        "SIGHUP",
        "SIGINT",
        "SIGQUIT",
        "SIGILL",
        "SIGTRAP",
        "SIGABRT",
        "SIGBUS",
        "SIGFPE",
        "SIGKILL",
        "SIGUSR1",
        "SIGSEGV",
        "SIGUSR2",
        "SIGPIPE",
        "SIGALRM",
        "SIGTERM",
        "SIGSTKFLT",
        "SIGCHLD",
        "SIGCONT",
        "SIGSTOP",
        "SIGTSTP",
        "SIGTTIN",
        "SIGTTOU",
        "SIGURG",
        "SIGXCPU",
        "SIGXFSZ",
        "SIGVTALRM",
        "SIGPROF",
        "SIGWINCH",
        "SIGIO",
        "SIGPWR",
        "SIGSYS",
    ];
    let n = exit_code.checked_sub(129)?;
    usize::try_from(n).ok().and_then(|i| NAMES.get(i)).copied()
}

/// The facts of container status `cs` of `pod`: its last termination (`lastState`, else the
/// current state when it is terminated), restarts, image and memory limit.
pub fn container_facts(pod: &Value, cs: &Value) -> ContainerFacts {
    let name = str_at(cs, &["name"]).unwrap_or_default();
    let spec = ["containers", "initContainers"]
        .iter()
        .filter_map(|key| at(pod, &["spec", key]).and_then(Value::as_array))
        .flatten()
        .find(|c| str_at(c, &["name"]) == Some(name));
    let terminated =
        at(cs, &["lastState", "terminated"]).or_else(|| at(cs, &["state", "terminated"]));
    let exit_code = terminated.and_then(|t| int_at(t, &["exitCode"]));
    let time =
        |t: &Value, key: &str| str_at(t, &[key]).and_then(|s| s.parse::<jiff::Timestamp>().ok());
    let ran_for_secs = terminated.and_then(|t| {
        let (start, end) = (time(t, "startedAt")?, time(t, "finishedAt")?);
        Some(end.duration_since(start).as_secs().max(0))
    });
    ContainerFacts {
        image: spec
            .and_then(|c| str_at(c, &["image"]))
            .or_else(|| str_at(cs, &["image"]))
            .map(str::to_string),
        exit_code,
        exit_reason: terminated
            .and_then(|t| str_at(t, &["reason"]))
            .map(str::to_string),
        signal: exit_code.and_then(signal_name).map(str::to_string),
        ran_for_secs,
        restarts: int_at(cs, &["restartCount"]),
        memory_limit: spec
            .and_then(|c| at(c, &["resources", "limits", "memory"]))
            .and_then(|m| {
                m.as_str()
                    .map(str::to_string)
                    .or_else(|| m.as_i64().map(|n| n.to_string()))
            }),
        message: terminated
            .and_then(|t| str_at(t, &["message"]))
            .map(str::trim)
            .filter(|m| !m.is_empty())
            .map(str::to_string),
    }
}

impl ContainerFacts {
    /// True when the container's last run was killed for using too much memory.
    pub fn oom_killed(&self) -> bool {
        self.exit_reason.as_deref() == Some("OOMKilled")
    }

    /// "exit 137 (OOMKilled, memory limit 128Mi) after 2s, restarted 5 times",
    /// "exit 1 after 2s, restarted 1 time", "exit 139 (SIGSEGV) after 0s"; with the
    /// termination message after a colon. Empty when nothing ended yet and nothing restarted.
    pub fn summary(&self) -> String {
        let mut text = String::new();
        if let Some(code) = self.exit_code {
            text = format!("exit {code}");
            let mut why: Vec<String> = Vec::new();
            match self.exit_reason.as_deref() {
                Some("OOMKilled") => {
                    why.push("OOMKilled".into());
                    if let Some(limit) = &self.memory_limit {
                        why.push(format!("memory limit {limit}"));
                    }
                }
                Some("Error" | "Completed") | None => {}
                Some(other) => why.push(other.to_string()),
            }
            if let Some(signal) = &self.signal
                && !self.oom_killed()
            {
                why.push(signal.clone());
            }
            if !why.is_empty() {
                text.push_str(&format!(" ({})", why.join(", ")));
            }
            if let Some(secs) = self.ran_for_secs {
                text.push_str(&format!(" after {}", human_secs(secs)));
            }
        }
        match self.restarts {
            Some(n) if n > 0 => {
                if !text.is_empty() {
                    text.push_str(", ");
                }
                let times = if n == 1 { "time" } else { "times" };
                text.push_str(&format!("restarted {n} {times}"));
            }
            _ => {}
        }
        if let Some(message) = &self.message
            && !text.is_empty()
        {
            text.push_str(&format!(": {message}"));
        }
        text
    }
}

/// "2s", "1m5s", "2h3m": short, whole seconds.
fn human_secs(secs: i64) -> String {
    match secs {
        s if s < 60 => format!("{s}s"),
        s if s < 3600 => format!("{}m{}s", s / 60, s % 60),
        s => format!("{}h{}m", s / 3600, (s % 3600) / 60),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn signals_by_name() {
        let cases = [
            (137, Some("SIGKILL")),
            (143, Some("SIGTERM")),
            (139, Some("SIGSEGV")),
            (134, Some("SIGABRT")),
            (129, Some("SIGHUP")),
            (159, Some("SIGSYS")),
            (160, None),
            (128, None),
            (1, None),
            (0, None),
            (-1, None),
            (i64::MIN, None),
        ];
        for (code, want) in cases {
            assert_eq!(signal_name(code), want, "{code}");
        }
    }

    fn pod(limit: Option<&str>) -> Value {
        let mut c = json!({"name": "web", "image": "example/web:v2"});
        if let Some(l) = limit {
            c["resources"] = json!({"limits": {"memory": l}});
        }
        json!({"spec": {"containers": [c]}})
    }

    fn status(code: i64, reason: &str, restarts: i64) -> Value {
        json!({"name": "web", "restartCount": restarts,
            "state": {"waiting": {"reason": "CrashLoopBackOff"}},
            "lastState": {"terminated": {"exitCode": code, "reason": reason,
                "startedAt": "2026-01-01T00:00:01Z", "finishedAt": "2026-01-01T00:00:03Z"}}})
    }

    #[test]
    fn summaries() {
        let mut with_message = status(2, "Error", 1);
        with_message["lastState"]["terminated"]["message"] = json!(" config missing \n");
        let mut running = json!({"name": "web", "restartCount": 0, "state": {"running": {}}});
        let cases: Vec<(Value, Value, &str)> = vec![
            (
                pod(Some("128Mi")),
                status(137, "OOMKilled", 5),
                "exit 137 (OOMKilled, memory limit 128Mi) after 2s, restarted 5 times",
            ),
            (
                pod(None),
                status(137, "OOMKilled", 1),
                "exit 137 (OOMKilled) after 2s, restarted 1 time",
            ),
            (
                pod(None),
                status(1, "Error", 5),
                "exit 1 after 2s, restarted 5 times",
            ),
            (
                pod(None),
                status(137, "Error", 2),
                "exit 137 (SIGKILL) after 2s, restarted 2 times",
            ),
            (
                pod(None),
                status(139, "Error", 0),
                "exit 139 (SIGSEGV) after 2s",
            ),
            (
                pod(None),
                status(0, "Completed", 3),
                "exit 0 after 2s, restarted 3 times",
            ),
            (
                pod(None),
                status(3, "ContainerCannotRun", 3),
                "exit 3 (ContainerCannotRun) after 2s, restarted 3 times",
            ),
            (
                pod(None),
                with_message,
                "exit 2 after 2s, restarted 1 time: config missing",
            ),
            (pod(None), running.clone(), ""),
        ];
        for (p, cs, want) in cases {
            assert_eq!(container_facts(&p, &cs).summary(), want, "{cs}");
        }
        running["restartCount"] = json!(4);
        assert_eq!(
            container_facts(&pod(None), &running).summary(),
            "restarted 4 times"
        );
    }

    #[test]
    fn facts_are_structured() {
        let facts = container_facts(&pod(Some("128Mi")), &status(137, "OOMKilled", 5));
        assert_eq!(
            facts,
            ContainerFacts {
                image: Some("example/web:v2".into()),
                exit_code: Some(137),
                exit_reason: Some("OOMKilled".into()),
                signal: Some("SIGKILL".into()),
                ran_for_secs: Some(2),
                restarts: Some(5),
                memory_limit: Some("128Mi".into()),
                message: None,
            }
        );
        assert!(facts.oom_killed());
        // Hostile or partial input: nothing known, nothing said, no panic.
        let odd = container_facts(
            &json!({"spec": 3}),
            &json!({"lastState": {"terminated": {"exitCode": "x", "startedAt": "soon"}}}),
        );
        assert_eq!(odd.summary(), "");
        assert_eq!(human_secs(65), "1m5s");
        assert_eq!(human_secs(7300), "2h1m");
    }
}
