//! Kubeconfig documents for the simulated clusters.

use base64::Engine;

/// What one cluster contributes to a kubeconfig.
pub struct Entry<'a> {
    pub name: &'a str,
    pub server: &'a str,
    pub token: &'a str,
    /// PEM of the CA that signed the server certificate (HTTPS only).
    pub ca_pem: Option<&'a str>,
}

/// A kubeconfig with one cluster, user and context per entry (all named like the cluster);
/// the current context is the first entry's.
pub fn render(entries: &[Entry<'_>]) -> String {
    let mut out = String::from("apiVersion: v1\nkind: Config\npreferences: {}\nclusters:\n");
    for e in entries {
        out.push_str(&format!(
            "- name: {}\n  cluster:\n    server: {}\n",
            e.name, e.server
        ));
        if let Some(ca) = e.ca_pem {
            let data = base64::engine::general_purpose::STANDARD.encode(ca.as_bytes());
            out.push_str(&format!("    certificate-authority-data: {data}\n"));
        }
    }
    out.push_str("users:\n");
    for e in entries {
        out.push_str(&format!(
            "- name: {}\n  user:\n    token: {}\n",
            e.name, e.token
        ));
    }
    out.push_str("contexts:\n");
    for e in entries {
        out.push_str(&format!(
            "- name: {0}\n  context:\n    cluster: {0}\n    user: {0}\n",
            e.name
        ));
    }
    if let Some(first) = entries.first() {
        out.push_str(&format!("current-context: {}\n", first.name));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_parseable_yaml_with_contexts() {
        let text = render(&[
            Entry {
                name: "sim-1",
                server: "https://127.0.0.1:1",
                token: "t1",
                ca_pem: Some("PEM"),
            },
            Entry {
                name: "sim-2",
                server: "https://127.0.0.1:2",
                token: "t2",
                ca_pem: Some("PEM"),
            },
        ]);
        let v: serde_json::Value = serde_saphyr::from_str(&text).unwrap();
        assert_eq!(v["current-context"], "sim-1");
        assert_eq!(v["contexts"][1]["context"]["cluster"], "sim-2");
        assert_eq!(v["users"][1]["user"]["token"], "t2");
        assert_eq!(
            v["clusters"][0]["cluster"]["certificate-authority-data"],
            "UEVN"
        );
    }
}
