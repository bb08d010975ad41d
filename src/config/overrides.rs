//! Flags and `ROLLGUARD_*` / `INPUT_*` environment settings over the file's values, and the
//! target selection by `--target` (also spelt `--context`).

use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use super::model::{
    CancelPolicy, Config, ConfigIssue, FailurePolicy, TargetConfig, wave_numbers, waves_text,
};
use super::names::{dns_label_problem, nearest};
use crate::util::duration::parse_duration;

/// Settings given on the command line (the commands fill them from the flags); they win
/// over env and file.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Overrides {
    pub kubeconfig: Option<PathBuf>,
    /// Pick targets by target name or context name (`--target a,b` or repeated).
    pub targets: Vec<String>,
    pub timeout: Option<Duration>,
    pub on_failure: Option<FailurePolicy>,
    pub on_cancel: Option<CancelPolicy>,
    pub concurrency: Option<usize>,
    /// `--memory-budget` in bytes.
    pub memory_budget: Option<u64>,
    pub lock_timeout: Option<Duration>,
    pub rollback_timeout: Option<Duration>,
    pub namespace: Option<String>,
    pub history_namespace: Option<String>,
    /// `deploy --wave N`: only the targets of wave N (after the `--target` selection).
    pub wave: Option<u32>,
}

/// Looks a setting up as `ROLLGUARD_<NAME>`, then `INPUT_<NAME>` (GitHub Action inputs).
/// Empty values count as unset: GitHub passes every declared input, empty when not given.
pub(super) fn env_setting(
    env: &dyn Fn(&str) -> Option<String>,
    name: &str,
) -> Option<(String, String)> {
    // A name missing from the table is read nowhere (a test checks that none is missing).
    super::env_vars::setting(name)?
        .variables()
        .into_iter()
        .find_map(|var| {
            env(&var)
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty())
                .map(|v| (v, format!("${var}")))
        })
}

/// Applies flags, then `ROLLGUARD_*` / `INPUT_*` settings, to a parsed config; a setting that
/// does not parse becomes an issue located at its flag or variable.
pub(super) fn apply_overrides(
    issues: &mut Vec<ConfigIssue>,
    config: &mut Config,
    flags: &Overrides,
    env: &dyn Fn(&str) -> Option<String>,
) {
    let mut issue = |location: String, message: String| {
        issues.push(ConfigIssue { location, message });
    };
    // Each setting: the flag if given, else the environment, parsed with its location.
    macro_rules! setting {
        ($flag:expr, $name:literal, $parse:expr) => {
            match $flag {
                Some(v) => Some(v),
                None => env_setting(env, $name).and_then(|(text, location)| {
                    match $parse(text.as_str()) {
                        Ok(v) => Some(v),
                        Err(e) => {
                            issue(location, e);
                            None
                        }
                    }
                }),
            }
        };
    }
    let duration = |s: &str| parse_duration(s).map_err(|e| e.to_string());
    let label = |s: &str| match dns_label_problem(s) {
        None => Ok(s.to_string()),
        Some(p) => Err(format!("{s:?} {p}")),
    };

    if let Some(t) = setting!(flags.timeout, "TIMEOUT", duration) {
        config.wait.timeout = t;
    }
    if let Some(p) = setting!(flags.on_failure, "ON_FAILURE", FailurePolicy::from_str) {
        config.on_failure = p;
    }
    if let Some(p) = setting!(flags.on_cancel, "ON_CANCEL", CancelPolicy::from_str) {
        config.on_cancel = p;
    }
    let concurrency = |s: &str| match s.parse::<usize>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err(format!(
            "concurrency must be a whole number of at least 1, not {s:?}"
        )),
    };
    if flags.concurrency.is_some() {
        config.concurrency_set_by = Some("--concurrency".to_string());
    } else if let Some((_, location)) = env_setting(env, "CONCURRENCY") {
        config.concurrency_set_by = Some(location);
    }
    if let Some(c) = setting!(flags.concurrency, "CONCURRENCY", concurrency) {
        config.concurrency = c.max(1);
    }
    let size = |s: &str| crate::util::size::parse_size(s).map_err(|e| e.to_string());
    if let Some(b) = setting!(flags.memory_budget, "MEMORY_BUDGET", size) {
        config.memory_budget = b;
    }
    if let Some(t) = setting!(flags.lock_timeout, "LOCK_TIMEOUT", duration) {
        config.lock.timeout = t;
    }
    if let Some(t) = setting!(flags.rollback_timeout, "ROLLBACK_TIMEOUT", duration) {
        config.rollback.timeout = Some(t);
    }
    if let Some(ns) = setting!(flags.namespace.clone(), "NAMESPACE", label) {
        config.namespace = Some(ns);
    }
    if let Some(ns) = setting!(flags.history_namespace.clone(), "HISTORY_NAMESPACE", label) {
        config.history.namespace = Some(ns);
    }
    let path = |s: &str| Ok::<_, String>(PathBuf::from(s));
    config.kubeconfig = setting!(flags.kubeconfig.clone(), "KUBECONFIG", path);

    // Target selection: flags, else ROLLGUARD_CONTEXTS / INPUT_CONTEXTS (also *_CONTEXT).
    let (wanted, location) = if !flags.targets.is_empty() {
        (flags.targets.clone(), "--target".to_string())
    } else if let Some((text, location)) =
        env_setting(env, "CONTEXTS").or_else(|| env_setting(env, "CONTEXT"))
    {
        (vec![text], location)
    } else {
        (Vec::new(), String::new())
    };
    let wanted: Vec<String> = wanted
        .iter()
        .flat_map(|w| w.split([',', '\n', ' ']))
        .map(str::trim)
        .filter(|w| !w.is_empty())
        .map(str::to_string)
        .collect();
    // Every wave of the config, before `--target` narrows the targets down.
    let all_waves = wave_numbers(&config.targets);
    let every_target = config.targets.clone();
    let mut selected = true;
    if !wanted.is_empty() && !config.targets.is_empty() {
        let known: Vec<&str> = config.targets.iter().map(|t| t.name.as_str()).collect();
        for w in &wanted {
            let matches = config
                .targets
                .iter()
                .any(|t| &t.name == w || t.context.as_deref() == Some(w.as_str()));
            if !matches {
                let mut msg = format!(
                    "no target is named {w:?} or uses context {w:?}; targets: {}",
                    known.join(", ")
                );
                if let Some(near) = nearest(w, &known) {
                    msg.push_str(&format!("; did you mean {near:?}?"));
                }
                issue(location.clone(), msg);
                selected = false;
            }
        }
        config.targets.retain(|t| {
            wanted
                .iter()
                .any(|w| &t.name == w || t.context.as_deref() == Some(w.as_str()))
        });
    }
    if let Some(wave) = flags.wave
        && !all_waves.is_empty()
    {
        match select_wave(&mut config.targets, wave, &all_waves, &wanted) {
            // Every earlier target of the file, not only those `--target` picked: wave N
            // follows the whole of the waves before it.
            Ok(()) => {
                config.earlier_waves = every_target.into_iter().filter(|t| t.wave < wave).collect();
            }
            // A `--target` name already said wrong: an empty wave after it says nothing new.
            Err(message) if selected || !all_waves.contains(&wave) => {
                issue("--wave".to_string(), message);
            }
            Err(_) => {}
        }
    }
}

/// Keeps the targets of `wave` (`--wave`), from those `--target` selected (`wanted`, empty:
/// all). `all_waves`: the waves of every target of the config. Refuses a wave no target is
/// in, and a selection that leaves no target.
fn select_wave(
    targets: &mut Vec<TargetConfig>,
    wave: u32,
    all_waves: &[u32],
    wanted: &[String],
) -> Result<(), String> {
    if !all_waves.contains(&wave) {
        return Err(format!(
            "no target is in wave {wave}: the targets are in {} (a target without `wave:` is in wave 0); pick one of them",
            waves_text(all_waves)
        ));
    }
    let selected = wave_numbers(targets);
    targets.retain(|t| t.wave == wave);
    if targets.is_empty() {
        return Err(format!(
            "--wave {wave} and --target {} select no target: the targets selected are in {}; pick another wave or add a target of wave {wave}",
            wanted.join(","),
            waves_text(&selected)
        ));
    }
    Ok(())
}
