//! The one table of the environment variables rollguard reads: the code looks every setting
//! up through it, and docs/configuration.md's list is generated from it (a test keeps them
//! equal).

/// A setting read from the environment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EnvSetting {
    /// The part after the prefix: `TIMEOUT` is `ROLLGUARD_TIMEOUT` and `INPUT_TIMEOUT`.
    pub name: &'static str,
    /// Also read as `INPUT_<name>` (what GitHub Actions passes for an action input).
    pub input: bool,
    /// What it sets, for docs/configuration.md.
    pub meaning: &'static str,
}

impl EnvSetting {
    /// The variables it is read from, in the order they are looked up.
    pub fn variables(&self) -> Vec<String> {
        let mut vars = vec![format!("ROLLGUARD_{}", self.name)];
        if self.input {
            vars.push(format!("INPUT_{}", self.name));
        }
        vars
    }
}

const fn both(name: &'static str, meaning: &'static str) -> EnvSetting {
    EnvSetting {
        name,
        input: true,
        meaning,
    }
}

/// Every `ROLLGUARD_*` / `INPUT_*` variable rollguard reads. A flag wins over its variable,
/// `ROLLGUARD_*` over `INPUT_*`, and an empty value counts as unset. (The `ROLLGUARD_*`
/// variables a script stage gets are set by rollguard, not read: see the script table.)
pub const ENV_SETTINGS: &[EnvSetting] = &[
    both(
        "CONFIG",
        "the config file, as `--config` (default `./rollguard.yaml`)",
    ),
    both("KUBECONFIG", "the kubeconfig path, as `--kubeconfig`"),
    both(
        "CONTEXTS",
        "the targets to deploy, by target or context name, as `--context` (separated by commas, spaces or new lines)",
    ),
    both("CONTEXT", "the same as `CONTEXTS`, when that is not set"),
    both(
        "TIMEOUT",
        "the rollout deadline per target, as `--timeout` (`wait.timeout`)",
    ),
    both(
        "ON_FAILURE",
        "the failure policy, as `--on-failure` (`on_failure`)",
    ),
    both(
        "ON_CANCEL",
        "what a cancel does to targets that got the new revision (`on_cancel`: `rollback` or `leave`)",
    ),
    both(
        "CONCURRENCY",
        "how many targets at once, as `--concurrency` (`concurrency`)",
    ),
    EnvSetting {
        name: "MEMORY_BUDGET",
        input: false,
        meaning: "the memory the targets in flight may use, as `--memory-budget` (`memory_budget`, e.g. `1GiB`; default 512MiB): the default concurrency follows from it",
    },
    both(
        "LOCK_TIMEOUT",
        "how long to wait for the deploy lock, as `--lock-timeout` (`lock.timeout`)",
    ),
    both(
        "ROLLBACK_TIMEOUT",
        "the deadline of a rollback's rollout (`rollback.timeout`)",
    ),
    both(
        "NAMESPACE",
        "the default namespace of namespaced objects (`namespace`)",
    ),
    both(
        "HISTORY_NAMESPACE",
        "where the release records and the lock live (`history.namespace`)",
    ),
    EnvSetting {
        name: "SHARD",
        input: false,
        meaning: "the slice of the targets to deploy, as `--shard I/N` (`deploy`, `diff`)",
    },
    EnvSetting {
        name: "REQUEST_TIMEOUT",
        input: false,
        meaning: "how long a request (not a watch) may wait for the server's next bytes (default 30s)",
    },
    EnvSetting {
        name: "EXEC_TIMEOUT",
        input: false,
        meaning: "the deadline of a kubeconfig exec credential plugin (default 30s)",
    },
    EnvSetting {
        name: "GIT_TIMEOUT",
        input: false,
        meaning: "the deadline of each git command (reading an older commit, fetching one into a shallow clone; default 60s)",
    },
    EnvSetting {
        name: "LEASE_SECONDS",
        input: false,
        meaning: "the deploy lock's Lease duration in whole seconds, at least 1 (default 30; for tests and demos)",
    },
];

/// The setting named `name`. Every name the code reads is in the table (a test checks).
pub fn setting(name: &str) -> Option<&'static EnvSetting> {
    ENV_SETTINGS.iter().find(|s| s.name == name)
}

/// docs/configuration.md's list, between its markers.
pub fn readme_table() -> String {
    let mut out = String::from("| variable | sets |\n|---|---|\n");
    for s in ENV_SETTINGS {
        let vars: Vec<String> = s.variables().iter().map(|v| format!("`{v}`")).collect();
        out.push_str(&format!("| {} | {} |\n", vars.join(", "), s.meaning));
    }
    out
}
