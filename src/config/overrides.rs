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

/// A flag or environment value that does not parse (the parsers of durations and sizes
/// have their own error types).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SettingError {
    #[error("{value:?} {problem}")]
    NotDnsLabel {
        value: String,
        problem: &'static str,
    },
    #[error("concurrency must be a whole number of at least 1, not {0:?}")]
    Concurrency(String),
}

/// Why `--wave` selects nothing (see [`select_wave`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WaveSelectionError {
    #[error(
        "no target is in wave {wave}: the targets are in {} (a target without `wave:` is in wave 0); pick one of them",
        waves_text(all_waves)
    )]
    NoSuchWave { wave: u32, all_waves: Vec<u32> },
    #[error(
        "--wave {wave} and --target {} select no target: the targets selected are in {}; pick another wave or add a target of wave {wave}",
        wanted.join(","),
        waves_text(selected)
    )]
    NoneSelected {
        wave: u32,
        wanted: Vec<String>,
        selected: Vec<u32>,
    },
}

/// Where the settings come from besides the file: the flag if given, else the environment
/// (`ROLLGUARD_*`, then `INPUT_*`). The one place that decides that precedence.
struct Layers<'a> {
    env: &'a dyn Fn(&str) -> Option<String>,
    issues: &'a mut Vec<ConfigIssue>,
}

impl Layers<'_> {
    fn issue(&mut self, location: String, message: String) {
        self.issues.push(ConfigIssue { location, message });
    }

    /// The flag if given, else the variable parsed; one that does not parse becomes an
    /// issue located at the variable (`$ROLLGUARD_TIMEOUT`), and counts as unset.
    fn get<T, E: std::fmt::Display>(
        &mut self,
        flag: Option<T>,
        name: &str,
        parse: impl Fn(&str) -> Result<T, E>,
    ) -> Option<T> {
        if flag.is_some() {
            return flag;
        }
        let (text, location) = env_setting(self.env, name)?;
        match parse(text.as_str()) {
            Ok(v) => Some(v),
            Err(e) => {
                self.issue(location, e.to_string());
                None
            }
        }
    }
}

fn dns_label(s: &str) -> Result<String, SettingError> {
    match dns_label_problem(s) {
        None => Ok(s.to_string()),
        Some(problem) => Err(SettingError::NotDnsLabel {
            value: s.to_string(),
            problem,
        }),
    }
}

fn concurrency(s: &str) -> Result<usize, SettingError> {
    match s.parse::<usize>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err(SettingError::Concurrency(s.to_string())),
    }
}

/// Applies flags, then `ROLLGUARD_*` / `INPUT_*` settings, to a parsed config; a setting that
/// does not parse becomes an issue located at its flag or variable.
pub(super) fn apply_overrides(
    issues: &mut Vec<ConfigIssue>,
    config: &mut Config,
    flags: &Overrides,
    env: &dyn Fn(&str) -> Option<String>,
) {
    let mut layers = Layers { env, issues };
    apply_settings(&mut layers, config, flags);
    // Every wave and target of the config, before `--target` narrows the targets down.
    let all_waves = wave_numbers(&config.targets);
    let every_target = config.targets.clone();
    let (wanted, selected) = select_targets(&mut layers, config, flags);
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
            Err(e) if selected || !all_waves.contains(&wave) => {
                layers.issue("--wave".to_string(), e.to_string());
            }
            Err(_) => {}
        }
    }
}

/// The settings with a flag or a variable: each one's layer over the file's value.
fn apply_settings(layers: &mut Layers<'_>, config: &mut Config, flags: &Overrides) {
    if let Some(t) = layers.get(flags.timeout, "TIMEOUT", parse_duration) {
        config.wait.timeout = t;
    }
    if let Some(p) = layers.get(flags.on_failure, "ON_FAILURE", FailurePolicy::from_str) {
        config.on_failure = p;
    }
    if let Some(p) = layers.get(flags.on_cancel, "ON_CANCEL", CancelPolicy::from_str) {
        config.on_cancel = p;
    }
    if flags.concurrency.is_some() {
        config.concurrency_set_by = Some("--concurrency".to_string());
    } else if let Some((_, location)) = env_setting(layers.env, "CONCURRENCY") {
        config.concurrency_set_by = Some(location);
    }
    if let Some(c) = layers.get(flags.concurrency, "CONCURRENCY", concurrency) {
        config.concurrency = c.max(1);
    }
    let size = crate::util::size::parse_size;
    if let Some(b) = layers.get(flags.memory_budget, "MEMORY_BUDGET", size) {
        config.memory_budget = b;
    }
    if let Some(t) = layers.get(flags.lock_timeout, "LOCK_TIMEOUT", parse_duration) {
        config.lock.timeout = t;
    }
    if let Some(t) = layers.get(flags.rollback_timeout, "ROLLBACK_TIMEOUT", parse_duration) {
        config.rollback.timeout = Some(t);
    }
    if let Some(ns) = layers.get(flags.namespace.clone(), "NAMESPACE", dns_label) {
        config.namespace = Some(ns);
    }
    let history_namespace = flags.history_namespace.clone();
    if let Some(ns) = layers.get(history_namespace, "HISTORY_NAMESPACE", dns_label) {
        config.history.namespace = Some(ns);
    }
    let path = |s: &str| Ok::<_, std::convert::Infallible>(PathBuf::from(s));
    config.kubeconfig = layers.get(flags.kubeconfig.clone(), "KUBECONFIG", path);
}

/// `--target` (else `ROLLGUARD_CONTEXTS` / `INPUT_CONTEXTS`, also `*_CONTEXT`): keeps the
/// targets named, by name or context. Returns the names asked for and whether each one
/// matched a target (an issue says which did not).
fn select_targets(
    layers: &mut Layers<'_>,
    config: &mut Config,
    flags: &Overrides,
) -> (Vec<String>, bool) {
    let (wanted, location) = if !flags.targets.is_empty() {
        (flags.targets.clone(), "--target".to_string())
    } else if let Some((text, location)) =
        env_setting(layers.env, "CONTEXTS").or_else(|| env_setting(layers.env, "CONTEXT"))
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
    let mut selected = true;
    if wanted.is_empty() || config.targets.is_empty() {
        return (wanted, selected);
    }
    let picks = |t: &TargetConfig, w: &str| t.name == w || t.context.as_deref() == Some(w);
    let known: Vec<&str> = config.targets.iter().map(|t| t.name.as_str()).collect();
    for w in &wanted {
        if !config.targets.iter().any(|t| picks(t, w)) {
            let mut msg = format!(
                "no target is named {w:?} or uses context {w:?}; targets: {}",
                known.join(", ")
            );
            if let Some(near) = nearest(w, &known) {
                msg.push_str(&format!("; did you mean {near:?}?"));
            }
            layers.issue(location.clone(), msg);
            selected = false;
        }
    }
    config
        .targets
        .retain(|t| wanted.iter().any(|w| picks(t, w)));
    (wanted, selected)
}

/// Keeps the targets of `wave` (`--wave`), from those `--target` selected (`wanted`, empty:
/// all). `all_waves`: the waves of every target of the config. Refuses a wave no target is
/// in, and a selection that leaves no target.
fn select_wave(
    targets: &mut Vec<TargetConfig>,
    wave: u32,
    all_waves: &[u32],
    wanted: &[String],
) -> Result<(), WaveSelectionError> {
    if !all_waves.contains(&wave) {
        return Err(WaveSelectionError::NoSuchWave {
            wave,
            all_waves: all_waves.to_vec(),
        });
    }
    let selected = wave_numbers(targets);
    targets.retain(|t| t.wave == wave);
    if targets.is_empty() {
        return Err(WaveSelectionError::NoneSelected {
            wave,
            wanted: wanted.to_vec(),
            selected,
        });
    }
    Ok(())
}
