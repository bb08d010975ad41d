//! Scripted pod behaviour: which image does what, per cluster.
//!
//! A rules file (`--rules FILE`) is a YAML list such as
//! `[{cluster: sim-2, image: "*:v2", behaviour: ImagePullBackOff}]`. The first rule whose
//! cluster (absent = every cluster) and image glob match wins; when none matches, the built-in
//! image words decide (`doesnotexist`, `crashloop`, `neverready`, `slowstart`). A pull rule
//! may script the registry: `{image: "*:v2", behaviour: ImagePullBackOff, times: 2,
//! message: "...503 Service Unavailable"}` fails the first two pulls with that text, then
//! the image pulls and the container starts. A rule with `after: 5s` (simulated time) lets
//! the container run and be Ready first and shows its behaviour that long after the container
//! started: `{image: "*:v2", behaviour: CrashLoopBackOff, after: 5s}` crashes then (the pod
//! turns not Ready, its Deployment loses availability) and crash-loops from there on.
//! With `SlowStart`, `after:` is how long the container takes to be Ready instead of 20 s:
//! `{cluster: sim-3, image: "*:v2", behaviour: SlowStart, after: 60s}` makes one cluster's
//! rollout slow but healthy.
//! Any rule may give the lines each run of the container logs (`logs: [LINE, ...]`, with
//! `{restart}` replaced by the run's restart count; see [`crate::controllers::logs`]), and a
//! CrashLoopBackOff rule the exit code of each run (`exit_code: 3`).

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

/// What the simulated kubelet does with a container whose image matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
pub enum Behaviour {
    /// Starts and is Ready after a short delay (or the readiness probe's initial delay).
    #[default]
    Ready,
    /// ErrImagePull, then ImagePullBackOff, alternating with a growing back-off.
    #[serde(alias = "ErrImagePull")]
    ImagePullBackOff,
    /// Runs, exits 1, and is restarted with a growing back-off.
    CrashLoopBackOff,
    /// Runs but never passes readiness.
    NeverReady,
    /// Ready only after 20 simulated seconds (or the rule's `after:` from the container's
    /// start).
    SlowStart,
    /// The container cannot be created because its configuration is invalid.
    CreateContainerConfigError,
    /// The runtime fails to create the container.
    CreateContainerError,
    /// The image reference is invalid.
    InvalidImageName,
    /// Runs, then is killed for using too much memory (exit 137), restarted with back-off.
    #[serde(alias = "OOMKilled")]
    OomKilled,
}

/// One line of a rules file.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rule {
    /// The cluster (context name, e.g. `sim-2`) this rule applies to; absent = every cluster.
    #[serde(default)]
    pub cluster: Option<String>,
    /// Glob over the image reference: `*` matches any run of characters, `?` one character.
    pub image: String,
    pub behaviour: Behaviour,
    /// With `ImagePullBackOff`: only the first N pulls (of each pod's container) fail, then
    /// the image pulls and the container starts.
    #[serde(default)]
    pub times: Option<u32>,
    /// With `ImagePullBackOff`: the pull error as the kubelet shows it (the ErrImagePull
    /// message); default containerd's NotFound text.
    #[serde(default)]
    pub message: Option<String>,
    /// With `CrashLoopBackOff`, `OomKilled` or `NeverReady`: the container first runs and is
    /// Ready as a healthy one, then shows the behaviour this long (simulated time) after it
    /// started: the first run exits (and the crash loop goes on from there), or readiness
    /// fails. With `SlowStart`: the container is Ready this long after it started.
    /// Written `500ms`, `5s`, `1.5s`, `2m`.
    #[serde(default, deserialize_with = "deserialize_after")]
    pub after: Option<Duration>,
    /// The lines each run of the container writes to its log (`{restart}` in a line becomes
    /// the run's restart count); default a few lines that depend on the behaviour.
    #[serde(default)]
    pub logs: Option<Vec<String>>,
    /// With `CrashLoopBackOff`: the exit code of each run (default 1).
    #[serde(default)]
    pub exit_code: Option<i64>,
}

/// Behaviours that take `after:`: a running container can crash or fail its readiness probe
/// after a healthy start, and a slow one is Ready after that long; none of this applies to a
/// container that fails to pull or cannot be created.
const LATE_BEHAVIOURS: &[Behaviour] = &[
    Behaviour::CrashLoopBackOff,
    Behaviour::OomKilled,
    Behaviour::NeverReady,
    Behaviour::SlowStart,
];

fn deserialize_after<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<Duration>, D::Error> {
    let text = String::deserialize(deserializer)?;
    parse_duration(&text).map(Some).ok_or_else(|| {
        serde::de::Error::custom(format!(
            "`after: {text}` is not a duration like 500ms, 5s, 1.5s or 2m"
        ))
    })
}

/// A duration such as `500ms`, `5s`, `1.5s`, `2m` or `1h`; None when it is not one.
pub fn parse_duration(text: &str) -> Option<Duration> {
    let text = text.trim();
    let split = text.find(|c: char| !(c.is_ascii_digit() || c == '.'))?;
    let (number, unit) = text.split_at(split);
    let number: f64 = number.parse().ok()?;
    let seconds = match unit {
        "ms" => number / 1000.0,
        "s" => number,
        "m" => number * 60.0,
        "h" => number * 3600.0,
        _ => return None,
    };
    Duration::try_from_secs_f64(seconds).ok()
}

/// What the kubelet does with one image: its behaviour, and for pulls that fail, how.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ImageScript {
    pub behaviour: Behaviour,
    /// Pulls that fail before one succeeds (None: every pull fails).
    pub failing_pulls: Option<u32>,
    /// The pull error's text (None: containerd's NotFound for the image).
    pub pull_message: Option<String>,
    /// The container runs healthy first and shows `behaviour` this long after it started.
    pub after: Option<Duration>,
    /// The lines each run writes to its log (None: the behaviour's default lines).
    pub logs: Option<Vec<String>>,
    /// A crashing container's exit code (None: 1, or 137 when OOMKilled).
    pub exit_code: Option<i64>,
}

impl From<Behaviour> for ImageScript {
    fn from(behaviour: Behaviour) -> Self {
        ImageScript {
            behaviour,
            ..ImageScript::default()
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum RulesError {
    #[error("cannot read rules file {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "invalid rules file {where_}: {message}\n  expected a YAML list like \
         `- {{cluster: sim-2, image: \"*:v2\", behaviour: ImagePullBackOff}}` with behaviour one of \
         Ready, ImagePullBackOff, CrashLoopBackOff, NeverReady, SlowStart, \
         CreateContainerConfigError, CreateContainerError, InvalidImageName, OomKilled \
         (an ImagePullBackOff rule may add `times: N` and `message: TEXT`; a CrashLoopBackOff, \
         OomKilled, NeverReady or SlowStart rule `after: 5s`; any rule `logs: [LINE, ...]`; a \
         CrashLoopBackOff rule `exit_code: N`)"
    )]
    Parse { where_: String, message: String },
    #[error("invalid rules file {where_}: rule {index} has an empty image pattern")]
    EmptyImage { where_: String, index: usize },
    #[error(
        "invalid rules file {where_}: rule {index} has `times` or `message`, which only \
         `behaviour: ImagePullBackOff` uses"
    )]
    PullScriptWithoutPull { where_: String, index: usize },
    #[error(
        "invalid rules file {where_}: rule {index} has `after` with behaviour {behaviour:?}; only \
         CrashLoopBackOff, OomKilled and NeverReady can come after a healthy start, and \
         SlowStart takes it as its time to Ready"
    )]
    AfterWithoutLateBehaviour {
        where_: String,
        index: usize,
        behaviour: Behaviour,
    },
    #[error(
        "invalid rules file {where_}: rule {index} has `exit_code` with behaviour {behaviour:?}; \
         only a CrashLoopBackOff container exits with a code of choice (an OomKilled one exits 137)"
    )]
    ExitCodeWithoutCrash {
        where_: String,
        index: usize,
        behaviour: Behaviour,
    },
}

/// Reads and parses a rules file.
pub fn load(path: &Path) -> Result<Vec<Rule>, RulesError> {
    let text = std::fs::read_to_string(path).map_err(|source| RulesError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    parse_named(&text, &path.display().to_string())
}

/// Parses the YAML text of a rules file. An empty document is an empty list.
pub fn parse(yaml: &str) -> Result<Vec<Rule>, RulesError> {
    parse_named(yaml, "<inline>")
}

fn parse_named(yaml: &str, where_: &str) -> Result<Vec<Rule>, RulesError> {
    if yaml.trim().is_empty() {
        return Ok(Vec::new());
    }
    let rules: Option<Vec<Rule>> =
        serde_saphyr::from_str(yaml).map_err(|err| RulesError::Parse {
            where_: where_.to_string(),
            message: err.to_string(),
        })?;
    let rules = rules.unwrap_or_default();
    if let Some(index) = rules.iter().position(|rule| rule.image.is_empty()) {
        return Err(RulesError::EmptyImage {
            where_: where_.to_string(),
            index: index + 1,
        });
    }
    if let Some(index) = rules.iter().position(|rule| {
        rule.behaviour != Behaviour::ImagePullBackOff
            && (rule.times.is_some() || rule.message.is_some())
    }) {
        return Err(RulesError::PullScriptWithoutPull {
            where_: where_.to_string(),
            index: index + 1,
        });
    }
    if let Some(index) = rules
        .iter()
        .position(|rule| rule.after.is_some() && !LATE_BEHAVIOURS.contains(&rule.behaviour))
    {
        return Err(RulesError::AfterWithoutLateBehaviour {
            where_: where_.to_string(),
            index: index + 1,
            behaviour: rules[index].behaviour,
        });
    }
    if let Some(index) = rules
        .iter()
        .position(|rule| rule.exit_code.is_some() && rule.behaviour != Behaviour::CrashLoopBackOff)
    {
        return Err(RulesError::ExitCodeWithoutCrash {
            where_: where_.to_string(),
            index: index + 1,
            behaviour: rules[index].behaviour,
        });
    }
    Ok(rules)
}

/// The behaviour of `image` in `cluster`: the first matching rule, else the built-in words.
pub fn behaviour_for(rules: &[Rule], cluster: &str, image: &str) -> Behaviour {
    script_for(rules, cluster, image).behaviour
}

/// What the kubelet does with `image` in `cluster`: the first matching rule, else the
/// built-in words.
pub fn script_for(rules: &[Rule], cluster: &str, image: &str) -> ImageScript {
    rules
        .iter()
        .find(|rule| {
            rule.cluster.as_deref().is_none_or(|c| c == cluster) && glob_match(&rule.image, image)
        })
        .map(|rule| ImageScript {
            behaviour: rule.behaviour,
            failing_pulls: rule.times,
            pull_message: rule.message.clone(),
            after: rule.after,
            logs: rule.logs.clone(),
            exit_code: rule.exit_code,
        })
        .unwrap_or_else(|| builtin_behaviour(image).into())
}

/// The built-in image words, valid in every cluster.
pub fn builtin_behaviour(image: &str) -> Behaviour {
    if image.contains("doesnotexist") {
        Behaviour::ImagePullBackOff
    } else if image.contains("crashloop") {
        Behaviour::CrashLoopBackOff
    } else if image.contains("neverready") {
        Behaviour::NeverReady
    } else if image.contains("slowstart") {
        Behaviour::SlowStart
    } else {
        Behaviour::Ready
    }
}

/// Glob match with `*` (any run, possibly empty) and `?` (exactly one character).
pub fn glob_match(pattern: &str, text: &str) -> bool {
    let pattern: Vec<char> = pattern.chars().collect();
    let text: Vec<char> = text.chars().collect();
    // Iterative matcher with backtracking to the last star: linear in practice, no recursion.
    let (mut p, mut t) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        if p < pattern.len() && (pattern[p] == '?' || pattern[p] == text[t]) {
            p += 1;
            t += 1;
        } else if p < pattern.len() && pattern[p] == '*' {
            star = Some((p, t));
            p += 1;
        } else if let Some((star_p, star_t)) = star {
            p = star_p + 1;
            t = star_t + 1;
            star = Some((star_p, star_t + 1));
        } else {
            return false;
        }
    }
    pattern[p..].iter().all(|&c| c == '*')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs() {
        let cases = [
            ("*:v2", "example/web:v2", true),
            ("*:v2", "example/web:v21", false),
            ("example/*", "example/web:v1", true),
            ("ex?mple/web:v1", "example/web:v1", true),
            ("ex?mple/web:v1", "exmple/web:v1", false),
            ("*", "", true),
            ("", "", true),
            ("a*b*c", "aXXbYYc", true),
            ("a*b*c", "aXXbYY", false),
            ("web", "example/web", false),
        ];
        for (pattern, text, want) in cases {
            assert_eq!(glob_match(pattern, text), want, "{pattern} vs {text}");
        }
    }

    #[test]
    fn builtin_words() {
        let cases = [
            ("example/doesnotexist:v1", Behaviour::ImagePullBackOff),
            ("registry.local/crashloop", Behaviour::CrashLoopBackOff),
            ("neverready:1", Behaviour::NeverReady),
            ("x/slowstart:2", Behaviour::SlowStart),
            ("nginx:1.27", Behaviour::Ready),
        ];
        for (image, want) in cases {
            assert_eq!(behaviour_for(&[], "sim-1", image), want, "{image}");
        }
    }

    #[test]
    fn rules_override_words_per_cluster() {
        let rules = parse(
            "- {cluster: sim-2, image: \"*:v2\", behaviour: ImagePullBackOff}\n\
             - image: \"*crashloop*\"\n  behaviour: Ready\n",
        )
        .unwrap();
        assert_eq!(rules.len(), 2);
        assert_eq!(
            behaviour_for(&rules, "sim-2", "web:v2"),
            Behaviour::ImagePullBackOff
        );
        assert_eq!(behaviour_for(&rules, "sim-1", "web:v2"), Behaviour::Ready);
        assert_eq!(
            behaviour_for(&rules, "sim-1", "x/crashloop:1"),
            Behaviour::Ready
        );
    }

    #[test]
    fn pull_rules_script_times_and_message() {
        let rules = parse(
            "- {image: \"*:v2\", behaviour: ImagePullBackOff, times: 2, message: \"503 Service Unavailable\"}\n",
        )
        .unwrap();
        let script = script_for(&rules, "sim-1", "web:v2");
        assert_eq!(script.behaviour, Behaviour::ImagePullBackOff);
        assert_eq!(script.failing_pulls, Some(2));
        assert_eq!(
            script.pull_message.as_deref(),
            Some("503 Service Unavailable")
        );
        assert_eq!(
            script_for(&[], "sim-1", "x/doesnotexist:1"),
            ImageScript::from(Behaviour::ImagePullBackOff)
        );
        let err = parse("- {image: x, behaviour: Ready, times: 2}").unwrap_err();
        assert!(
            matches!(err, RulesError::PullScriptWithoutPull { index: 1, .. }),
            "{err}"
        );
    }

    #[test]
    fn after_delays_a_late_behaviour() {
        let rules = parse("- {image: \"*:v2\", behaviour: CrashLoopBackOff, after: 1.5s}").unwrap();
        let script = script_for(&rules, "sim-1", "web:v2");
        assert_eq!(script.behaviour, Behaviour::CrashLoopBackOff);
        assert_eq!(script.after, Some(Duration::from_millis(1500)));
        assert_eq!(script_for(&rules, "sim-1", "web:v1").after, None);
        let durations = [
            ("500ms", Some(Duration::from_millis(500))),
            ("5s", Some(Duration::from_secs(5))),
            ("2m", Some(Duration::from_secs(120))),
            ("1h", Some(Duration::from_secs(3600))),
            (" 3s ", Some(Duration::from_secs(3))),
            ("5", None),
            ("s", None),
            ("5d", None),
            ("-1s", None),
            ("", None),
        ];
        for (text, want) in durations {
            assert_eq!(parse_duration(text), want, "{text:?}");
        }
        let err = parse("- {image: x, behaviour: CrashLoopBackOff, after: soon}").unwrap_err();
        assert!(
            err.to_string().contains("`after: soon` is not a duration"),
            "{err}"
        );
        let err = parse("- {image: x, behaviour: ImagePullBackOff, after: 5s}").unwrap_err();
        assert!(
            matches!(err, RulesError::AfterWithoutLateBehaviour { index: 1, .. }),
            "{err}"
        );
        assert!(
            err.to_string()
                .contains("only CrashLoopBackOff, OomKilled and NeverReady"),
            "{err}"
        );
        let rules =
            parse("- {cluster: sim-3, image: \"*:v2\", behaviour: SlowStart, after: 60s}").unwrap();
        let script = script_for(&rules, "sim-3", "web:v2");
        assert_eq!(script.behaviour, Behaviour::SlowStart);
        assert_eq!(script.after, Some(Duration::from_secs(60)));
        assert_eq!(script_for(&rules, "sim-1", "web:v2").after, None);
    }

    #[test]
    fn logs_and_exit_codes_are_scripted() {
        let rules = parse(
            "- {image: \"*:v2\", behaviour: CrashLoopBackOff, exit_code: 3, logs: [a, \"b {restart}\"]}\n\
             - {image: \"*:v3\", behaviour: Ready, logs: [up]}",
        )
        .unwrap();
        let script = script_for(&rules, "sim-1", "web:v2");
        assert_eq!(script.exit_code, Some(3));
        assert_eq!(
            script.logs,
            Some(vec!["a".to_string(), "b {restart}".into()])
        );
        assert_eq!(
            script_for(&rules, "sim-1", "web:v3").logs,
            Some(vec!["up".into()])
        );
        let err = parse("- {image: x, behaviour: OomKilled, exit_code: 2}").unwrap_err();
        assert!(
            matches!(err, RulesError::ExitCodeWithoutCrash { index: 1, .. }),
            "{err}"
        );
    }

    #[test]
    fn bad_rules_are_reported_clearly() {
        let err = parse("- {image: x, behaviour: Explode}").unwrap_err();
        assert!(err.to_string().contains("Explode"), "{err}");
        assert!(err.to_string().contains("behaviour one of"), "{err}");
        let err = parse("- {image: x, behaviour: Ready, colour: red}").unwrap_err();
        assert!(err.to_string().contains("colour"), "{err}");
        let err = parse("- {image: '', behaviour: Ready}").unwrap_err();
        assert!(
            matches!(err, RulesError::EmptyImage { index: 1, .. }),
            "{err}"
        );
        assert!(parse("").unwrap().is_empty());
        let err = load(Path::new("/nonexistent/rules.yaml")).unwrap_err();
        assert!(err.to_string().contains("/nonexistent/rules.yaml"), "{err}");
    }
}
