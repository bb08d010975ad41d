//! Which log lines reach stderr when `RUST_LOG` is not set.
//!
//! Only rollguard's own crates log by default. Library crates (kube, hyper, rustls, h2,
//! tower, octocrab, ...) are off: what they would say at warn or error (kube's
//! `failed with error client error (Connect)` for an unreachable cluster, a 500 for a
//! misspelt field) is the error rollguard itself reports, with the target, the address and
//! what to do, and a second, rawer line before it only confuses. `RUST_LOG` brings them
//! back (e.g. `RUST_LOG=warn` or `RUST_LOG=kube_client=debug,rollguard=info`).

use tracing::Level;
use tracing_subscriber::filter::{LevelFilter, Targets};

/// The tracing target of script stages' output lines (`stages`), shown at info in CI logs.
pub const SCRIPT_OUTPUT_TARGET: &str = "rollguard::script";

/// The crates whose log lines are rollguard's own messages (kube-sim runs in the process
/// for `rollguard demo`).
pub const OWN_CRATES: [&str; 2] = ["rollguard", "kube_sim"];

/// The default filter of the stderr log. On a terminal the live progress and the final
/// table say what went wrong and log lines would break the redrawn lines, so only errors;
/// in CI logs warnings too, and script stages' output line by line as it comes.
pub fn default_filter(stderr_is_terminal: bool) -> Targets {
    let own = if stderr_is_terminal {
        Level::ERROR
    } else {
        Level::WARN
    };
    let mut filter = Targets::new().with_default(LevelFilter::OFF);
    for krate in OWN_CRATES {
        filter = filter.with_target(krate, own);
    }
    if !stderr_is_terminal {
        filter = filter.with_target(SCRIPT_OUTPUT_TARGET, Level::INFO);
    }
    filter
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn libraries_are_off_and_rollguard_speaks() {
        let script = SCRIPT_OUTPUT_TARGET;
        // (terminal, target, level, shown)
        let cases: &[(bool, &str, Level, bool)] = &[
            (false, "kube_client::client::builder", Level::ERROR, false),
            (true, "kube_client::client::builder", Level::ERROR, false),
            (false, "hyper_util::client::legacy", Level::WARN, false),
            (false, "rustls::common_state", Level::WARN, false),
            (false, "h2::proto", Level::ERROR, false),
            (false, "tower::buffer", Level::ERROR, false),
            (false, "octocrab", Level::ERROR, false),
            (false, "rollguard::engine::target_run", Level::WARN, true),
            (false, "rollguard::engine::target_run", Level::INFO, false),
            (true, "rollguard::release::store", Level::WARN, false),
            (true, "rollguard::release::store", Level::ERROR, true),
            (false, script, Level::INFO, true),
            (true, script, Level::INFO, false),
            (false, "kube_sim::http", Level::WARN, true),
        ];
        for (terminal, target, level, shown) in cases {
            assert_eq!(
                default_filter(*terminal).would_enable(target, level),
                *shown,
                "terminal={terminal} {target} at {level}"
            );
        }
    }
}
