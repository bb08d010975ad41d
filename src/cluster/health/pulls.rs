//! Image-pull errors judged by what they say: a pull that cannot succeed fails the target at
//! once (as soon as the kubelet backs off from it); any other pull error is tolerated per
//! container for `pull_grace`, counted from that container's first pull error, across
//! ErrImagePull and ImagePullBackOff alike.
//!
//! Pure: the messages are the kubelet's (see shared/kubelet-pull-errors.md for real ones per
//! runtime), and time is a monotonic offset given by the caller, so a node's or another
//! machine's clock never decides.

use std::time::Duration;

/// Container waiting reasons that are about pulling the image.
pub const PULL_REASONS: &[&str] = &[
    "ErrImagePull",
    "ImagePullBackOff",
    "InvalidImageName",
    "ErrImageNeverPull",
];

/// What a pull error says about the pull's future.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PullClass {
    /// Cannot succeed by retrying; the text says why ("the image or tag does not exist").
    Definitive(&'static str),
    /// May succeed at the kubelet's next retry (timeouts, refused connections, TLS
    /// handshakes, 5xx, 429, and anything not known to be definitive).
    Transient,
    /// The message says nothing about the error (an older kubelet's bare
    /// `Back-off pulling image "x"`): the container's earlier messages decide.
    Silent,
}

/// Words that make a pull error certain, with what they mean. Matched as whole words, in
/// the error's own text (image names, URLs and quoted parts left out).
const DEFINITIVE: &[(&str, &str)] = &[
    ("not found", "the image or tag does not exist"),
    ("code = notfound", "the image or tag does not exist"),
    ("manifest unknown", "the image or tag does not exist"),
    ("unauthorized", "the registry refused the credentials"),
    (
        "authentication required",
        "the registry refused the credentials",
    ),
    ("denied", "the registry denied access"),
    ("403", "the registry denied access"),
];

/// Words of an error that may pass: when one is present the error is transient even if a
/// definitive word is there too (a failure must be certain).
const TRANSIENT: &[&str] = &[
    "toomanyrequests",
    "429",
    "500",
    "502",
    "503",
    "504",
    "timeout",
    "timed out",
    "deadline exceeded",
    "connection refused",
    "connection reset",
    "tls handshake",
    "canceled",
    "cancelled",
    "eof",
    "registryunavailable",
    "temporarily unavailable",
];

/// The class of a pull error from its waiting reason and message.
pub fn classify(reason: &str, message: &str) -> PullClass {
    match reason {
        "InvalidImageName" => return PullClass::Definitive("the image name is invalid"),
        "ErrImageNeverPull" => {
            return PullClass::Definitive(
                "the image is not on the node and imagePullPolicy is Never",
            );
        }
        _ => {}
    }
    let text = error_words(message);
    if text.trim().is_empty() {
        return PullClass::Silent;
    }
    if TRANSIENT.iter().any(|w| has_word(&text, w)) {
        return PullClass::Transient;
    }
    DEFINITIVE
        .iter()
        .find(|(w, _)| has_word(&text, w))
        .map_or(PullClass::Transient, |(_, why)| PullClass::Definitive(why))
}

/// The part of a kubelet pull message that is the registry's or runtime's own words,
/// lowercased: without the `Back-off pulling image "x"` / `Failed to pull image "x"` lead,
/// CRI-O's OCI-artifact fallback (its `; artifact err: ...` is about another kind of pull),
/// quoted parts and words with `/` or `@` (image references, URLs, paths), so that an image
/// called `denied` or a digest with `403` in it decides nothing.
fn error_words(message: &str) -> String {
    let message = message.split("; artifact err: ").next().unwrap_or(message);
    let mut out = String::with_capacity(message.len());
    let mut quoted = false;
    for c in message.chars() {
        if c == '"' {
            quoted = !quoted;
            out.push(' ');
        } else if !quoted {
            out.push(c);
        }
    }
    let words: Vec<&str> = out
        .split_whitespace()
        .filter(|w| !w.contains('/') && !w.contains('@'))
        .collect();
    let text = words.join(" ").to_lowercase();
    // What is left of the lead once its quoted image is gone.
    let lead = ["back-off pulling image", "failed to pull image"];
    let mut rest = text.as_str();
    for l in lead {
        if let Some(r) = rest.strip_prefix(l) {
            rest = r.trim_start_matches([':', ' ']);
        }
    }
    let rest = rest
        .strip_prefix("errimagepull:")
        .unwrap_or(rest)
        .trim_start();
    rest.to_string()
}

/// `word` in `text` with no letter or digit right before or after it.
fn has_word(text: &str, word: &str) -> bool {
    let bytes = text.as_bytes();
    text.match_indices(word).any(|(at, _)| {
        let before = at.checked_sub(1).map(|i| bytes[i]);
        let after = bytes.get(at + word.len()).copied();
        !before.is_some_and(|b| b.is_ascii_alphanumeric())
            && !after.is_some_and(|b| b.is_ascii_alphanumeric())
    })
}

/// What is known of one container's pulls so far.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PullWatch {
    /// When the watcher first saw this container fail a pull (monotonic offset).
    pub first_error: Duration,
    /// Set once a message said the pull cannot succeed: why.
    pub definitive: Option<(&'static str, String)>,
    /// The last message that said something, for the failure.
    pub last_message: String,
}

/// The verdict on a container's pull error now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PullVerdict {
    /// Cannot succeed: fail now, with this message.
    Fails(String),
    /// Tolerated so far: fail at `until` unless the pull succeeds first.
    Tolerated { until: Duration },
    /// Transient past its grace: fail, with this message.
    GraceOver(String),
}

/// Judges one observation of a pull error (`reason`, `message`) at `now`, given what was
/// seen of the same container before.
pub fn judge(
    seen: Option<&PullWatch>,
    reason: &str,
    message: &str,
    now: Duration,
    grace: Duration,
) -> (PullWatch, PullVerdict) {
    let class = classify(reason, message);
    let mut watch = seen.cloned().unwrap_or(PullWatch {
        first_error: now,
        definitive: None,
        last_message: message.to_string(),
    });
    if class != PullClass::Silent {
        watch.last_message = message.to_string();
    }
    if let PullClass::Definitive(why) = class {
        watch.definitive = Some((why, message.to_string()));
    }
    let until = watch.first_error + grace;
    let verdict = match &watch.definitive {
        // The kubelet shows ErrImagePull only until its next sync, then backs off: the
        // verdict waits for that (about a second), so that a certain failure is always
        // reported under the same reason, ImagePullBackOff.
        Some(_) if reason == "ErrImagePull" && now < until => PullVerdict::Tolerated { until },
        Some((why, said)) => PullVerdict::Fails(format!("{said} (cannot succeed: {why})")),
        None => {
            if now >= until {
                PullVerdict::GraceOver(format!(
                    "{} (image pulls have failed for {}, past pull_grace {})",
                    watch.last_message,
                    crate::util::duration::format_duration(now - watch.first_error),
                    crate::util::duration::format_duration(grace)
                ))
            } else {
                PullVerdict::Tolerated { until }
            }
        }
    };
    (watch, verdict)
}

#[cfg(test)]
mod tests {
    use super::*;
    use PullClass::*;

    const NOT_FOUND: &str = "the image or tag does not exist";
    const CREDENTIALS: &str = "the registry refused the credentials";
    const DENIED: &str = "the registry denied access";

    /// Real kubelet messages (shared/kubelet-pull-errors.md, row ids in the comments), as
    /// the waiting message of ErrImagePull shows them (the `Failed to pull image "x": `
    /// event lead left on some, as the event shows it): (reason, message, class).
    const REAL_MESSAGES: &[(&str, &str, PullClass)] = &[
        // containerd 1: NotFound (1.x).
        (
            "ErrImagePull",
            "rpc error: code = NotFound desc = failed to pull and unpack image \"docker.io/cvisionai/tator_online:b51d8990fc4c560c0a2c64d6ddd753aedb9bdeab\": failed to resolve reference \"docker.io/cvisionai/tator_online:b51d8990fc4c560c0a2c64d6ddd753aedb9bdeab\": docker.io/cvisionai/tator_online:b51d8990fc4c560c0a2c64d6ddd753aedb9bdeab: not found",
            Definitive(NOT_FOUND),
        ),
        // containerd 1b: NotFound (2.x), with the event's lead.
        (
            "ErrImagePull",
            "Failed to pull image \"gcr.io/kubebuilder/kube-rbac-proxy:v0.8.0\": rpc error: code = NotFound desc = failed to pull and unpack image \"gcr.io/kubebuilder/kube-rbac-proxy:v0.8.0\": failed to resolve image: gcr.io/kubebuilder/kube-rbac-proxy:v0.8.0: not found",
            Definitive(NOT_FOUND),
        ),
        // containerd 2: 401.
        (
            "ErrImagePull",
            "rpc error: code = Unknown desc = failed to pull and unpack image \"registry.app.xxx.net/spm2fog/partsgo42:GitActionsNew-2e7e78f7bb157128f1853b0dc06bf7ccd13156d7\": failed to resolve reference \"registry.app.xxx.net/spm2fog/partsgo42:GitActionsNew-2e7e78f7bb157128f1853b0dc06bf7ccd13156d7\": pulling from host registry.app.xxx.net failed with status code [manifests GitActionsNew-2e7e78f7bb157128f1853b0dc06bf7ccd13156d7]: 401 Unauthorized",
            Definitive(CREDENTIALS),
        ),
        // containerd 2b: pull access denied, no prefix.
        (
            "ErrImagePull",
            "failed to pull and unpack image \"docker.io/library/kubefleet-dashboard:latest\": failed to resolve reference \"docker.io/library/kubefleet-dashboard:latest\": pull access denied, repository does not exist or may require authorization: server message: insufficient_scope: authorization failed",
            Definitive(DENIED),
        ),
        // containerd 3: 403.
        (
            "ErrImagePull",
            "rpc error: code = Unknown desc = failed to pull and unpack image \"k8s.gcr.io/sig-storage/csi-node-driver-registrar:v2.2.0\": failed to resolve reference \"k8s.gcr.io/sig-storage/csi-node-driver-registrar:v2.2.0\": pulling from host k8s.gcr.io failed with status code [manifests v2.2.0]: 403 Forbidden",
            Definitive(DENIED),
        ),
        // containerd 4: 429 (its digest must not read as 403 or a 5xx).
        (
            "ErrImagePull",
            "rpc error: code = Unknown desc = failed to pull and unpack image \"docker.io/library/centos:latest\": failed to copy: httpReaderSeeker: failed open: unexpected status code https://registry-1.docker.io/v2/library/centos/manifests/sha256:dbbacecc49b088458781c16f3775f2a2ec7521079034a7ba499c8b0bb7f86875: 429 Too Many Requests - Server message: toomanyrequests: You have reached your pull rate limit. You may increase the limit by authenticating and upgrading: https://www.docker.com/increase-rate-limit",
            Transient,
        ),
        // containerd 5a: dial i/o timeout.
        (
            "ErrImagePull",
            "rpc error: code = DeadlineExceeded desc = failed to pull and unpack image \"k8s.gcr.io/conformance:v1.28.5\": failed to resolve reference \"k8s.gcr.io/conformance:v1.28.5\": failed to do request: Head \"https://k8s.gcr.io/v2/conformance/manifests/v1.28.5\": dial tcp 64.233.189.82:443: i/o timeout",
            Transient,
        ),
        // containerd 5b: connection refused.
        (
            "ErrImagePull",
            "rpc error: code = Unknown desc = failed to pull and unpack image \"localhost:5000/brokerage-api:tilt-b655dbb021099edd\": failed to resolve reference \"localhost:5000/brokerage-api:tilt-b655dbb021099edd\": failed to do request: Head \"http://localhost:5000/v2/brokerage-api/manifests/tilt-b655dbb021099edd\": dial tcp 127.0.0.1:5000: connect: connection refused",
            Transient,
        ),
        // containerd 6b: TLS handshake timeout.
        (
            "ErrImagePull",
            "rpc error: code = Unknown desc = failed to pull and unpack image \"docker.io/library/ubuntu:latest\": failed to resolve reference \"docker.io/library/ubuntu:latest\": failed to do request: Head \"https://registry-1.docker.io/v2/library/ubuntu/manifests/latest\": net/http: TLS handshake timeout",
            Transient,
        ),
        // containerd 7: 502.
        (
            "ErrImagePull",
            "rpc error: code = Unknown desc = failed to pull and unpack image \"quay.io/bitnami/sealed-secrets-controller:v0.17.1\": failed to copy: httpReaderSeeker: failed open: unexpected status code https://quay.io/v2/bitnami/sealed-secrets-controller/manifests/sha256:e121ad7f4863747e902d0398c096d2bbfab89e7ff1641b6cefedf1f14ea20ea2: 502 Bad Gateway",
            Transient,
        ),
        // containerd 7c: 503.
        (
            "ErrImagePull",
            "rpc error: code = Unknown desc = failed to pull and unpack image \"sealos.hub:5000/kube-proxy:v1.24.0\": failed to resolve reference \"sealos.hub:5000/kube-proxy:v1.24.0\": pulling from host sealos.hub:5000 failed with status code [manifests v1.24.0]: 503 Service Unavailable",
            Transient,
        ),
        // containerd 9b: cancelled for no progress.
        (
            "ErrImagePull",
            "rpc error: code = Canceled desc = failed to pull and unpack image \"private_registery.mydomain/idrac_to_kafka:20250428T1620\": failed to copy: httpReadSeeker: failed open: failed to do request: Get \"https://private_registery.mydomain/v2/csg/idrac_to_kafka/blobs/sha256:d0157ca575c725b6dbdc6c7b843b8614963fda6ca619af9932bfbbb39c450c5a\": context canceled",
            Transient,
        ),
        // containerd 10a: the back-off message carries the pull error.
        (
            "ImagePullBackOff",
            "Back-off pulling image \"ghcr.io/alexsjones/sympozium/node-probe:v0.1.8\": ErrImagePull: rpc error: code = NotFound desc = failed to pull and unpack image \"ghcr.io/alexsjones/sympozium/node-probe:v0.1.8\": failed to resolve reference \"ghcr.io/alexsjones/sympozium/node-probe:v0.1.8\": ghcr.io/alexsjones/sympozium/node-probe:v0.1.8: not found",
            Definitive(NOT_FOUND),
        ),
        // containerd 10b: an older kubelet's back-off says nothing.
        (
            "ImagePullBackOff",
            "Back-off pulling image \"registry.k8s.io/nfd/node-feature-discovery:v0.12.1\"",
            Silent,
        ),
        ("ImagePullBackOff", "", Silent),
        // CRI-O 1: manifest unknown.
        (
            "ErrImagePull",
            "rpc error: code = Unknown desc = Error reading manifest latest in docker.io/e2eteam/dnsutils: manifest unknown: manifest unknown",
            Definitive(NOT_FOUND),
        ),
        // CRI-O 1c: the >= 1.34 wrapper.
        (
            "ErrImagePull",
            "unable to pull image or OCI artifact: pull image err: initializing source docker://gcr.io/kubebuilder/kube-rbac-proxy@sha256:db06cc4c084dd0253134f156dddaaf53ef1c3fb3cc809e5d81711baa4029ea4c: reading manifest sha256:db06cc4c084dd0253134f156dddaaf53ef1c3fb3cc809e5d81711baa4029ea4c in gcr.io/kubebuilder/kube-rbac-proxy: manifest unknown: Requested entity was not found.; artifact err: get manifest: build image source: reading manifest sha256:db06cc4c084dd0253134f156dddaaf53ef1c3fb3cc809e5d81711baa4029ea4c in gcr.io/kubebuilder/kube-rbac-proxy: manifest unknown: Requested entity was not found.",
            Definitive(NOT_FOUND),
        ),
        // CRI-O 2: 401.
        (
            "ErrImagePull",
            "rpc error: code = Unknown desc = Error reading manifest latest in image-registry.openshift-image-registry.svc:5000/thoth-middletier-stage/graph-sync-job: unauthorized: authentication required",
            Definitive(CREDENTIALS),
        ),
        // CRI-O 2b: Docker Hub denied.
        (
            "ErrImagePull",
            "rpc error: code = Unknown desc = Error reading manifest latest in docker.io/library/si-bandit: errors: denied: requested access to the resource is denied unauthorized: authentication required",
            Definitive(CREDENTIALS),
        ),
        // CRI-O 3: 403 (crictl's text).
        (
            "ErrImagePull",
            "rpc error: code = Unknown desc = Requesting bearer token: invalid status code from registry 403 (Forbidden)",
            Definitive(DENIED),
        ),
        // CRI-O 4: 429.
        (
            "ErrImagePull",
            "rpc error: code = Unknown desc = reading manifest v3.6.0 in docker.io/openshift/hello-openshift: toomanyrequests: You have reached your unauthenticated pull rate limit. https://www.docker.com/increase-rate-limit",
            Transient,
        ),
        // CRI-O 5a: DNS read i/o timeout.
        (
            "ErrImagePull",
            "rpc error: code = Unknown desc = pinging container registry image-registry.openshift-image-registry.svc:5000: Get \"https://image-registry.openshift-image-registry.svc:5000/v2/\": dial tcp: lookup image-registry.openshift-image-registry.svc on 223.5.5.5:53: read udp 10.253.25.6:33734->223.5.5.5:53: i/o timeout",
            Transient,
        ),
        // CRI-O 5b: RegistryUnavailable.
        (
            "ErrImagePull",
            "RegistryUnavailable: pinging container registry localhost:7439: Get \"http://localhost:7439/v2/\": dial tcp [::1]:7439: connect: connection refused",
            Transient,
        ),
        // CRI-O 6a: TLS, unknown authority (not in the definitive list: tolerated for
        // the grace, then failed).
        (
            "ErrImagePull",
            "rpc error: code = Unknown desc = error pinging docker registry m1.dev: Get \"https://m1.dev/v2/\": x509: certificate signed by unknown authority",
            Transient,
        ),
        // CRI-O 7: 500.
        (
            "ErrImagePull",
            "rpc error: code = Unknown desc = Error reading manifest sha256:67cc7cb47d56237adcf0ecc2ee76446785add5fa236cd08746b55f578b9200a5 in registry.svc.ci.openshift.org/origin/release: received unexpected HTTP status: 500 Internal Server Error",
            Transient,
        ),
        // CRI-O 9a: deadline exceeded.
        (
            "ErrImagePull",
            "rpc error: code = 4 desc = context deadline exceeded",
            Transient,
        ),
        // CRI-O 10b: back-off with the >= 1.34 wrapper.
        (
            "ImagePullBackOff",
            "Back-off pulling image \"image-registry.openshift-image-registry.svc:5000/demo1-compromised-dependency/vulnerable-app:latest\": ErrImagePull: unable to pull image or OCI artifact: pull image err: initializing source docker://image-registry.openshift-image-registry.svc:5000/demo1-compromised-dependency/vulnerable-app:latest: reading manifest latest in image-registry.openshift-image-registry.svc:5000/demo1-compromised-dependency/vulnerable-app: manifest unknown",
            Definitive(NOT_FOUND),
        ),
        // Docker 2: pull access denied.
        (
            "ErrImagePull",
            "rpc error: code = Unknown desc = Error response from daemon: pull access denied for rmeuser-auth, repository does not exist or may require 'docker login'",
            Definitive(DENIED),
        ),
        // Docker 6b: TLS handshake timeout.
        (
            "ErrImagePull",
            "rpc error: code = Unknown desc = Error response from daemon: Get https://registry-1.docker.io/v2/: net/http: TLS handshake timeout",
            Transient,
        ),
        // Kubelet-made reasons.
        (
            "InvalidImageName",
            "Failed to apply default image tag \"redacted.dkr.ecr.us-east-1.amazonaws.com/redacted/redacted:\": couldn't parse image reference \"redacted.dkr.ecr.us-east-1.amazonaws.com/redacted/redacted:\": invalid reference format",
            Definitive("the image name is invalid"),
        ),
        (
            "ErrImageNeverPull",
            "Container image \"nginx:latest\" is not present with pull policy of Never",
            Definitive("the image is not on the node and imagePullPolicy is Never"),
        ),
        // Words inside image names decide nothing.
        (
            "ErrImagePull",
            "rpc error: code = Unknown desc = failed to pull and unpack image \"docker.io/acme/denied:403\": failed to resolve reference \"docker.io/acme/denied:403\": pulling from host docker.io failed with status code [manifests 403]: 503 Service Unavailable",
            Transient,
        ),
        // Unknown words: tolerated for the grace.
        ("ErrImagePull", "something went sideways", Transient),
    ];

    #[test]
    fn real_messages_are_classed() {
        for (reason, message, want) in REAL_MESSAGES {
            assert_eq!(classify(reason, message), *want, "{reason}: {message}");
        }
    }

    #[test]
    fn whole_words_only() {
        assert!(has_word("a 403 forbidden", "403"));
        assert!(!has_word("sha256:e4039", "403"));
        assert!(has_word("x: not found", "not found"));
        assert!(!has_word("eofx", "eof"));
        assert!(has_word("unexpected eof (after", "eof"));
    }

    #[test]
    fn judge_table() {
        let s = Duration::from_secs;
        let grace = s(60);
        const E503: &str = "rpc error: code = Unknown desc = failed to pull and unpack image \"docker.io/acme/web:v2\": failed to resolve reference \"docker.io/acme/web:v2\": pulling from host docker.io failed with status code [manifests v2]: 503 Service Unavailable";
        const NF: &str = "rpc error: code = NotFound desc = failed to pull and unpack image \"docker.io/acme/web:v2\": failed to resolve reference \"docker.io/acme/web:v2\": docker.io/acme/web:v2: not found";
        let backoff =
            |m: &str| format!("Back-off pulling image \"acme/web:v2\": ErrImagePull: {m}");
        let bare = "Back-off pulling image \"acme/web:v2\"";
        // Observations of one container: (reason, message, at second) and the verdict kind
        // expected: 'T' tolerated (with its end), 'F' fails now, 'G' grace over.
        type Step<'a> = (&'a str, String, u64, char, Option<u64>);
        let cases: Vec<(&str, Vec<Step>)> = vec![
            (
                "503 twice across ErrImagePull and ImagePullBackOff: tolerated from the first",
                vec![
                    ("ErrImagePull", E503.into(), 5, 'T', Some(65)),
                    ("ImagePullBackOff", backoff(E503), 7, 'T', Some(65)),
                    ("ErrImagePull", E503.into(), 17, 'T', Some(65)),
                ],
            ),
            (
                "503 past the grace",
                vec![
                    ("ErrImagePull", E503.into(), 0, 'T', Some(60)),
                    ("ImagePullBackOff", backoff(E503), 60, 'G', None),
                ],
            ),
            (
                "NotFound fails once the kubelet backs off",
                vec![
                    ("ErrImagePull", NF.into(), 3, 'T', Some(63)),
                    ("ImagePullBackOff", backoff(NF), 5, 'F', None),
                ],
            ),
            (
                "NotFound in ErrImagePull until the grace ends: certain then",
                vec![
                    ("ErrImagePull", NF.into(), 3, 'T', Some(63)),
                    ("ErrImagePull", NF.into(), 63, 'F', None),
                ],
            ),
            (
                "InvalidImageName fails at once",
                vec![(
                    "InvalidImageName",
                    "couldn't parse image name".into(),
                    3,
                    'F',
                    None,
                )],
            ),
            (
                "NotFound seen in the back-off message",
                vec![("ImagePullBackOff", backoff(NF), 3, 'F', None)],
            ),
            (
                "a bare back-off after NotFound stays certain",
                vec![
                    ("ErrImagePull", NF.into(), 3, 'T', Some(63)),
                    ("ImagePullBackOff", bare.into(), 5, 'F', None),
                ],
            ),
            (
                "a bare back-off alone is tolerated",
                vec![
                    ("ImagePullBackOff", bare.into(), 3, 'T', Some(63)),
                    ("ImagePullBackOff", bare.into(), 63, 'G', None),
                ],
            ),
            (
                "transient, then NotFound: certain from then on",
                vec![
                    ("ErrImagePull", E503.into(), 0, 'T', Some(60)),
                    ("ErrImagePull", NF.into(), 20, 'T', Some(60)),
                    ("ImagePullBackOff", bare.into(), 22, 'F', None),
                ],
            ),
        ];
        for (what, steps) in cases {
            let mut seen: Option<PullWatch> = None;
            for (reason, message, at, kind, until) in steps {
                let (watch, verdict) = judge(seen.as_ref(), reason, &message, s(at), grace);
                match (&verdict, kind) {
                    (PullVerdict::Tolerated { until: u }, 'T') => {
                        assert_eq!(Some(*u), until.map(s), "{what} at {at}")
                    }
                    (PullVerdict::Fails(m), 'F') => {
                        assert!(m.contains("cannot succeed"), "{what}: {m}")
                    }
                    (PullVerdict::GraceOver(m), 'G') => {
                        assert!(m.contains("image pulls have failed for"), "{what}: {m}")
                    }
                    _ => panic!("{what} at {at}: {verdict:?}, wanted {kind}"),
                }
                seen = Some(watch);
            }
        }
    }

    #[test]
    fn grace_over_says_how_long_and_the_last_message() {
        let s = Duration::from_secs;
        let (watch, _) = judge(None, "ErrImagePull", "dial tcp: i/o timeout", s(10), s(60));
        let (_, verdict) = judge(
            Some(&watch),
            "ImagePullBackOff",
            "Back-off pulling image \"x\"",
            s(75),
            s(60),
        );
        assert_eq!(
            verdict,
            PullVerdict::GraceOver(
                "dial tcp: i/o timeout (image pulls have failed for 1m5s, past pull_grace 1m)"
                    .into()
            )
        );
    }
}
