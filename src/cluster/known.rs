//! Credentials known to the scrubber before the first request: a kubeconfig user's token,
//! password and client key (inline or in files), its token file's content, an auth
//! provider's tokens, and every token an exec plugin hands out (`exec_auth`).

use std::path::Path;

use base64::Engine as _;

/// Teaches the scrubber every credential of a kubeconfig user, before the first request:
/// its token, password and client key (inline or in files), its token file's content and an
/// auth provider's tokens. An exec plugin's token is learned when it is fetched
/// ([`exec_auth`](crate::cluster::exec_auth)).
pub fn learn_credentials(auth: &kube::config::AuthInfo) {
    use crate::report::redact::learn_value;
    use secrecy::ExposeSecret as _;
    for secret in [&auth.token, &auth.password, &auth.client_key_data]
        .into_iter()
        .flatten()
    {
        let text = secret.expose_secret();
        learn_value(text.trim().as_bytes());
    }
    if let Some(data) = &auth.client_key_data
        && let Ok(pem) =
            base64::engine::general_purpose::STANDARD.decode(data.expose_secret().trim())
    {
        learn_value(&pem);
    }
    for file in [&auth.token_file, &auth.client_key].into_iter().flatten() {
        if let Some(text) = read_small(Path::new(file)) {
            learn_value(text.trim().as_bytes());
        }
    }
    if let Some(provider) = &auth.auth_provider {
        for key in ["access-token", "id-token", "refresh-token", "client-secret"] {
            if let Some(value) = provider.config.get(key) {
                learn_value(value.trim().as_bytes());
            }
        }
    }
}

/// A credential file's text, when it is a file of a sensible size (a token or a key).
pub fn read_small(path: &Path) -> Option<String> {
    let meta = std::fs::metadata(path).ok()?;
    (meta.is_file() && meta.len() <= crate::util::bounded::MAX_KUBECONFIG_FILE)
        .then(|| std::fs::read_to_string(path).ok())
        .flatten()
}
