//! Targets that would share one place: refused at validation, before any cluster is touched.
//!
//! Two targets on the same cluster and namespace (or the same history namespace) of one app
//! would apply the same objects, share one Lease and one release history: each would wait
//! for the other's lock until the timeout, and one would be rolled back over the other.

/// Where one target deploys, as resolved offline from its kubeconfig.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    pub target: String,
    /// The config file line of the target (0 when unknown).
    pub line: usize,
    /// The cluster's API server URL.
    pub server: String,
    /// Where namespaced objects without a namespace go.
    pub namespace: String,
    /// Where the lock and the release records live.
    pub history_namespace: String,
}

/// Pairs of targets (first, second, in config order) that resolve to the same cluster and
/// namespace, or the same cluster and history namespace. Pure; table-tested below.
pub fn overlapping(placements: &[Placement]) -> Vec<(&Placement, &Placement)> {
    use std::collections::HashMap;
    let servers: Vec<String> = placements
        .iter()
        .map(|p| p.server.trim().trim_end_matches('/').to_ascii_lowercase())
        .collect();
    // The first target at each (cluster, namespace) and (cluster, history namespace): one
    // pass, as a fleet of thousands would make every pair's comparison a million.
    let mut by_namespace: HashMap<(&str, &str), usize> = HashMap::new();
    let mut by_history: HashMap<(&str, &str), usize> = HashMap::new();
    let mut pairs = Vec::new();
    for (j, b) in placements.iter().enumerate() {
        let server = servers[j].as_str();
        let first = by_namespace
            .entry((server, b.namespace.as_str()))
            .or_insert(j);
        let first_history = by_history
            .entry((server, b.history_namespace.as_str()))
            .or_insert(j);
        // Each later target is named once, with the first one it collides with.
        let a = (*first).min(*first_history);
        if a < j {
            pairs.push((&placements[a], b));
        }
    }
    pairs
}

/// The error text for overlapping targets, one line per pair.
pub fn describe(pairs: &[(&Placement, &Placement)], config_file: &str) -> String {
    pairs
        .iter()
        .map(|(a, b)| {
            let place = if a.namespace == b.namespace {
                format!("namespace {}", a.namespace)
            } else {
                format!("history namespace {}", a.history_namespace)
            };
            format!(
                "{config_file}:{}: targets {} and {} (line {}) both resolve to cluster {} and {place}: they would share one lock and one release history and block each other; give one a different namespace (targets[].namespace) or drop it",
                b.line, a.target, b.target, a.line, a.server
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(target: &str, server: &str, namespace: &str, history: &str) -> Placement {
        Placement {
            target: target.into(),
            line: 0,
            server: server.into(),
            namespace: namespace.into(),
            history_namespace: history.into(),
        }
    }

    #[test]
    fn overlap_table() {
        type Case<'a> = (Vec<Placement>, Vec<(&'a str, &'a str)>);
        let cases: Vec<Case> = vec![
            (
                vec![
                    at("eu", "https://a", "shop", "shop"),
                    at("us", "https://b", "shop", "shop"),
                ],
                vec![],
            ),
            (
                vec![
                    at("eu", "https://a", "shop", "shop"),
                    at("us", "https://a", "shop2", "shop2"),
                ],
                vec![],
            ),
            (
                vec![
                    at("eu", "https://a", "shop", "shop"),
                    at("us", "https://a", "shop", "shop"),
                ],
                vec![("eu", "us")],
            ),
            // Same server spelt differently.
            (
                vec![
                    at("eu", "https://A:6443/", "shop", "shop"),
                    at("us", "https://a:6443", "shop", "shop"),
                ],
                vec![("eu", "us")],
            ),
            // Different namespaces, one history namespace: one Lease, one history.
            (
                vec![
                    at("eu", "https://a", "x", "rg"),
                    at("us", "https://a", "y", "rg"),
                ],
                vec![("eu", "us")],
            ),
            (
                vec![
                    at("eu", "https://a", "s", "s"),
                    at("us", "https://a", "s", "s"),
                    at("ap", "https://a", "s", "s"),
                ],
                vec![("eu", "us"), ("eu", "ap")],
            ),
            // The first earlier target it collides with, by either namespace.
            (
                vec![
                    at("eu", "https://a", "x", "h1"),
                    at("us", "https://a", "y", "h2"),
                    at("ap", "https://a", "y", "h1"),
                    at("za", "https://a", "z", "h2"),
                ],
                vec![("eu", "ap"), ("us", "za")],
            ),
        ];
        for (placements, want) in cases {
            let got: Vec<(&str, &str)> = overlapping(&placements)
                .iter()
                .map(|(a, b)| (a.target.as_str(), b.target.as_str()))
                .collect();
            assert_eq!(got, want, "{placements:?}");
        }
    }
}
