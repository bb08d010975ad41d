//! Secret values never leave the process, by two lines of defence:
//!
//! 1. **By structure** ([`redact_object`]): before an object is shown (`show`, diffs, plans,
//!    reports), every value of a Secret's `data` and `stringData`, and every annotation of
//!    that Secret that embeds one (kubectl's last-applied copy, or any other), becomes
//!    `<redacted sha256:1f2e3d4c>`: a short hash of the value, so that a change is visible
//!    without the value. `data` is hashed decoded, so the same value has the same marker
//!    under `data` and `stringData`.
//! 2. **By value** ([`Scrubber`]): every secret value rollguard has seen (in the manifests, in
//!    records, in live Secrets) and every credential it holds (GitHub token, kubeconfig
//!    tokens, passwords and keys, exec plugin tokens, token files, `kubeconfig_env` values),
//!    with its base64, URL-encoded and escaped forms, is replaced by its marker
//!    in any text rollguard writes: the log writer ([`ScrubbingStderr`]), the terminal and
//!    report writers ([`print_out`], [`print_err`], [`scrub`]), error messages. This is what
//!    the GitHub runner does for registered secrets; it catches a value quoted in a server's
//!    error message, a render command's stderr or a script's output.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::hash::BuildHasherDefault;
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{OnceLock, RwLock};

use base64::Engine;
use serde_json::Value;
use sha2::{Digest, Sha256};

/// Annotation in which `kubectl apply` keeps a full copy of the object (values included).
pub const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Values shorter than this are not scrubbed from free text: replacing every "1" or "ab"
/// would make logs unreadable and protect nothing. Structural redaction still covers them.
pub const MIN_SCRUB_LEN: usize = 4;

/// The marker for a secret value: `<redacted sha256:XXXXXXXX>` (first 8 hex digits).
pub fn marker(value: &[u8]) -> String {
    let digest = Sha256::digest(value);
    format!("<redacted sha256:{}>", hex::encode(&digest[..4]))
}

/// Whether an object body is a core Secret.
pub fn is_secret(body: &Value) -> bool {
    body.get("kind").and_then(Value::as_str) == Some("Secret")
        && body.get("apiVersion").and_then(Value::as_str) == Some("v1")
}

/// The bytes of a `data` value: base64-decoded when it decodes, else the text itself.
fn data_bytes(value: &Value) -> Vec<u8> {
    match value.as_str() {
        Some(text) => base64::engine::general_purpose::STANDARD
            .decode(text.trim())
            .unwrap_or_else(|_| text.as_bytes().to_vec()),
        None => value.to_string().into_bytes(),
    }
}

fn string_bytes(value: &Value) -> Vec<u8> {
    match value.as_str() {
        Some(text) => text.as_bytes().to_vec(),
        None => value.to_string().into_bytes(),
    }
}

/// The secret values of a Secret body (decoded `data`, raw `stringData`); none for others.
pub fn secret_values(body: &Value) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    if body.get("kind").and_then(Value::as_str) == Some("List") {
        for item in body
            .get("items")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            out.extend(secret_values(item));
        }
        return out;
    }
    if !is_secret(body) {
        return out;
    }
    for (key, bytes) in [("data", true), ("stringData", false)] {
        for value in body
            .get(key)
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
        {
            out.push(if bytes {
                data_bytes(value.1)
            } else {
                string_bytes(value.1)
            });
        }
    }
    out
}

/// A copy of the object with Secret values redacted; other objects are returned unchanged.
/// Nested `kind: List` items are handled too.
pub fn redact_object(body: &Value) -> Value {
    let mut out = body.clone();
    redact_in_place(&mut out);
    out
}

/// Redact every object of a list.
pub fn redact_objects(bodies: &[Value]) -> Vec<Value> {
    bodies.iter().map(redact_object).collect()
}

/// Redact in place (see [`redact_object`]).
pub fn redact_in_place(body: &mut Value) {
    if body.get("kind").and_then(Value::as_str) == Some("List") {
        if let Some(items) = body.get_mut("items").and_then(Value::as_array_mut) {
            items.iter_mut().for_each(redact_in_place);
        }
        return;
    }
    if !is_secret(body) {
        return;
    }
    let values = secret_values(body);
    if let Some(data) = body.get_mut("data").and_then(Value::as_object_mut) {
        for value in data.values_mut() {
            *value = Value::String(marker(&data_bytes(value)));
        }
    }
    if let Some(data) = body.get_mut("stringData").and_then(Value::as_object_mut) {
        for value in data.values_mut() {
            *value = Value::String(marker(&string_bytes(value)));
        }
    }
    if let Some(annotations) = body
        .pointer_mut("/metadata/annotations")
        .and_then(Value::as_object_mut)
    {
        for (key, value) in annotations.iter_mut() {
            let text = string_bytes(value);
            if key == LAST_APPLIED || embeds_any(&text, &values) {
                *value = Value::String(marker(&text));
            }
        }
    }
}

/// Whether `text` contains any of the values, as they are or in base64.
fn embeds_any(text: &[u8], values: &[Vec<u8>]) -> bool {
    let text = String::from_utf8_lossy(text);
    values
        .iter()
        .filter(|v| v.len() >= MIN_SCRUB_LEN)
        .any(|v| forms(v).iter().any(|form| text.contains(form.as_str())))
}

/// The forms in which a value may appear in text: as it is (when it is text), each of its
/// lines when it has several, escaped as JSON and Rust's `{:?}` would print it, URL-encoded,
/// and base64 (standard, URL-safe, with and without padding, each also URL-encoded).
fn forms(value: &[u8]) -> Vec<String> {
    use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD};
    let mut out = Vec::new();
    if let Ok(text) = std::str::from_utf8(value) {
        out.push(text.to_string());
        let json = Value::String(text.to_string()).to_string();
        out.push(json[1..json.len() - 1].to_string());
        let debug = format!("{text:?}");
        out.push(debug[1..debug.len() - 1].to_string());
        if text.contains('\n') {
            out.extend(
                text.lines()
                    .map(str::trim)
                    .filter(|l| l.len() >= MIN_SCRUB_LEN)
                    .map(str::to_string),
            );
        }
    }
    for engine in [&STANDARD, &STANDARD_NO_PAD, &URL_SAFE, &URL_SAFE_NO_PAD] {
        let encoded = engine.encode(value);
        // base64 is URL-encoded in its turn (a token in a query string, a form).
        out.push(url_encoded(encoded.as_bytes()));
        out.push(encoded);
    }
    out.push(url_encoded(value));
    out.retain(|f| f.len() >= MIN_SCRUB_LEN);
    out.sort();
    out.dedup();
    out
}

/// `value` percent-encoded as a URL query or form encodes it: every byte but the unreserved
/// `A-Z a-z 0-9 - . _ ~` becomes `%XX` (upper-case hex, as Go's and Rust's encoders write).
fn url_encoded(value: &[u8]) -> String {
    let mut out = String::with_capacity(value.len());
    for &b in value {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Every known secret value in every form it may take, each with its marker.
///
/// A fleet learns every target's credentials (1,000 targets: about 5,000 forms) and every
/// progress line, log event and report string is scrubbed: a text is therefore read once,
/// position by position, looking each position's first bytes up among the needles' first
/// bytes ([`KEY`]), instead of being searched once per needle; and learning a value costs
/// the same however many are known.
#[derive(Debug, Clone, Default)]
pub struct Scrubber {
    /// (needle, marker), in the order learned.
    needles: Vec<(String, String)>,
    /// Indices into `needles` by their first [`KEY`] bytes (every needle is at least
    /// [`MIN_SCRUB_LEN`] = `KEY` bytes long).
    by_key: HashMap<[u8; KEY], Vec<usize>, BuildHasherDefault<KeyHasher>>,
    /// Every needle, to learn each once.
    known: HashSet<String>,
}

/// How many first bytes of a needle index it.
const KEY: usize = MIN_SCRUB_LEN;

/// A multiplicative hash for the 4-byte keys (SipHash would be most of a scrub's time).
#[derive(Default)]
struct KeyHasher(u64);

impl std::hash::Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.0 ^ (self.0 >> 29)
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }
}

impl Scrubber {
    /// Learns one secret value (values shorter than [`MIN_SCRUB_LEN`] are ignored).
    pub fn add_value(&mut self, value: &[u8]) {
        self.add_forms(value, forms(value));
    }

    /// Learns a whole document (a kubeconfig held in a variable): its forms as a whole, never
    /// its lines one by one, which would scrub every `kind: Config` from the logs. The
    /// credentials inside are learned on their own.
    pub fn add_document(&mut self, value: &[u8]) {
        let mut whole = forms(value);
        if let Ok(text) = std::str::from_utf8(value)
            && text.contains('\n')
        {
            whole.retain(|f| !text.lines().any(|l| l.trim() == f && l != text));
        }
        self.add_forms(value, whole);
    }

    fn add_forms(&mut self, value: &[u8], forms: Vec<String>) {
        if value.len() < MIN_SCRUB_LEN {
            return;
        }
        let mark = marker(value);
        for form in forms {
            self.add_needle(form, &mark);
        }
    }

    fn add_needle(&mut self, needle: String, mark: &str) {
        let Some(key) = key_of(needle.as_bytes()) else {
            return;
        };
        if !self.known.insert(needle.clone()) {
            return;
        }
        self.by_key.entry(key).or_default().push(self.needles.len());
        self.needles.push((needle, mark.to_string()));
    }

    /// A scrubber of the Secret values among `bodies` (e.g. the manifests, for a script's
    /// output).
    pub fn from_objects<'a>(bodies: impl IntoIterator<Item = &'a Value>) -> Scrubber {
        let mut scrubber = Scrubber::default();
        for body in bodies {
            scrubber.add_object(body);
        }
        scrubber
    }

    /// Learns the values of a Secret body (nothing for other objects).
    pub fn add_object(&mut self, body: &Value) {
        for value in secret_values(body) {
            self.add_value(&value);
        }
    }

    /// Learns every value `other` knows.
    pub fn merge(&mut self, other: &Scrubber) {
        for (needle, mark) in &other.needles {
            self.add_needle(needle.clone(), mark);
        }
    }

    pub fn is_empty(&self) -> bool {
        self.needles.is_empty()
    }

    /// The text with every known value replaced by its marker.
    pub fn scrub(&self, text: &str) -> String {
        self.scrub_cow(text).into_owned()
    }

    /// [`Scrubber::scrub`] without a copy when nothing is found. The needles found in the
    /// text are replaced longest first, so a longer form is replaced before a part of it.
    pub fn scrub_cow<'a>(&self, text: &'a str) -> Cow<'a, str> {
        let mut out = Cow::Borrowed(text);
        for i in self.found_in(text) {
            let (needle, mark) = &self.needles[i];
            if out.contains(needle.as_str()) {
                out = Cow::Owned(out.replace(needle.as_str(), mark));
            }
        }
        out
    }

    /// The needles that occur in `text`, longest first (then by their text).
    fn found_in(&self, text: &str) -> Vec<usize> {
        let bytes = text.as_bytes();
        if self.needles.is_empty() || bytes.len() < KEY {
            return Vec::new();
        }
        let mut found: Vec<usize> = Vec::new();
        for start in 0..=bytes.len() - KEY {
            let candidates: Option<&Vec<usize>> =
                key_of(&bytes[start..]).and_then(|k| self.by_key.get(&k));
            let Some(candidates) = candidates else {
                continue;
            };
            found.extend(
                candidates
                    .iter()
                    .filter(|&&i| bytes[start..].starts_with(self.needles[i].0.as_bytes())),
            );
        }
        found.sort_by(|&a, &b| {
            let (a, b) = (&self.needles[a].0, &self.needles[b].0);
            b.len().cmp(&a.len()).then_with(|| a.cmp(b))
        });
        found.dedup();
        found
    }
}

fn key_of(bytes: &[u8]) -> Option<[u8; KEY]> {
    bytes.get(..KEY)?.try_into().ok()
}

/// The process-wide scrubber: secrets are learned as soon as they are read, and every sink
/// scrubs with it (one list, like the runner's registered secrets). Process-wide on purpose:
/// the stderr writer of the tracing subscriber (itself process-wide) and `print_err` (main's
/// last words) scrub with it, and a value learned by one target must be hidden in every
/// other target's lines.
fn global() -> &'static RwLock<Scrubber> {
    static GLOBAL: OnceLock<RwLock<Scrubber>> = OnceLock::new();
    GLOBAL.get_or_init(|| RwLock::new(Scrubber::default()))
}

/// Teaches the process-wide scrubber the values of these objects (Secrets only).
pub fn learn<'a>(bodies: impl IntoIterator<Item = &'a Value>) {
    let mut scrubber = match global().write() {
        Ok(guard) => guard,
        Err(poisoned) => poisoned.into_inner(),
    };
    for body in bodies {
        scrubber.add_object(body);
    }
}

/// Teaches the process-wide scrubber one value (e.g. a token a script stage receives).
pub fn learn_value(value: &[u8]) {
    match global().write() {
        Ok(mut guard) => guard.add_value(value),
        Err(poisoned) => poisoned.into_inner().add_value(value),
    }
}

/// Teaches the process-wide scrubber a whole document (see [`Scrubber::add_document`]).
pub fn learn_document(value: &[u8]) {
    match global().write() {
        Ok(mut guard) => guard.add_document(value),
        Err(poisoned) => poisoned.into_inner().add_document(value),
    }
}

/// A copy of the process-wide scrubber (for a script's output: every value known when it
/// starts, its own kubeconfig's credentials included).
pub fn snapshot() -> Scrubber {
    match global().read() {
        Ok(guard) => guard.clone(),
        Err(poisoned) => poisoned.into_inner().clone(),
    }
}

/// Whether stdout and stderr are read by a GitHub Actions runner, which runs any line that
/// starts with `::` as a workflow command (set once at start, from `GITHUB_ACTIONS`).
static ACTIONS_LOG: AtomicBool = AtomicBool::new(false);

/// Says that stdout and stderr are a GitHub Actions log (see [`log_text`]).
pub fn set_actions_log(on: bool) {
    ACTIONS_LOG.store(on, Ordering::Relaxed);
}

/// Text for stdout or stderr: scrubbed first, then, in GitHub Actions, escaped for the runner
/// so that no line of it can be read as a workflow command (rollguard's own commands are
/// written apart from this, by `github::workflow`).
pub fn log_text(text: &str) -> String {
    let clean = scrub(text);
    if ACTIONS_LOG.load(Ordering::Relaxed) {
        super::escape::actions_log(&clean).into_owned()
    } else {
        clean
    }
}

/// `text` with every secret value known to the process replaced by its marker.
pub fn scrub(text: &str) -> String {
    let scrubber = match global().read() {
        Ok(guard) => guard,
        Err(poisoned) => poisoned.into_inner(),
    };
    scrubber.scrub(text)
}

/// Prints a line on stdout, scrubbed and escaped for the log ([`log_text`]).
pub fn print_out(text: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{}", log_text(text));
}

/// Prints a line on stderr, scrubbed and escaped for the log ([`log_text`]).
pub fn print_err(text: &str) {
    let mut err = std::io::stderr().lock();
    let _ = writeln!(err, "{}", log_text(text));
}

/// The log writer: stderr, every event scrubbed before it is written (use with
/// `tracing_subscriber::fmt().with_writer(ScrubbingStderr)`).
#[derive(Debug, Clone, Copy, Default)]
pub struct ScrubbingStderr;

/// One log event, buffered whole so that a value is never split across two writes.
#[derive(Debug, Default)]
pub struct ScrubbedEvent {
    buf: Vec<u8>,
}

impl Write for ScrubbedEvent {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        self.buf.extend_from_slice(data);
        Ok(data.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for ScrubbedEvent {
    fn drop(&mut self) {
        if self.buf.is_empty() {
            return;
        }
        let text = log_text(&String::from_utf8_lossy(&self.buf));
        let _ = std::io::stderr().lock().write_all(text.as_bytes());
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for ScrubbingStderr {
    type Writer = ScrubbedEvent;
    fn make_writer(&'a self) -> ScrubbedEvent {
        ScrubbedEvent::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn m(value: &str) -> String {
        marker(value.as_bytes())
    }

    #[test]
    fn marker_is_short_and_stable() {
        assert_eq!(m("hunter2"), m("hunter2"));
        assert_ne!(m("hunter2"), m("hunter3"));
        let text = m("hunter2");
        assert!(text.starts_with("<redacted sha256:") && text.ends_with('>'));
        assert_eq!(text.len(), "<redacted sha256:>".len() + 8, "{text}");
    }

    #[test]
    fn redact_table() {
        let cases = vec![
            (
                json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "db"},
                       "data": {"password": "aHVudGVyMg=="}, "stringData": {"user": "admin"}}),
                json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "db"},
                       "data": {"password": m("hunter2")},
                       "stringData": {"user": m("admin")}}),
            ),
            // Not base64: hash the text.
            (
                json!({"apiVersion": "v1", "kind": "Secret", "data": {"k": "!!"}}),
                json!({"apiVersion": "v1", "kind": "Secret", "data": {"k": m("!!")}}),
            ),
            // ConfigMaps are shown as they are.
            (
                json!({"apiVersion": "v1", "kind": "ConfigMap", "data": {"k": "v"}}),
                json!({"apiVersion": "v1", "kind": "ConfigMap", "data": {"k": "v"}}),
            ),
            // A CRD called Secret in another group is not a core Secret.
            (
                json!({"apiVersion": "example.com/v1", "kind": "Secret", "data": {"k": "v"}}),
                json!({"apiVersion": "example.com/v1", "kind": "Secret", "data": {"k": "v"}}),
            ),
            // Lists are walked.
            (
                json!({"apiVersion": "v1", "kind": "List", "items": [
                    {"apiVersion": "v1", "kind": "Secret", "stringData": {"t": "abc"}}]}),
                json!({"apiVersion": "v1", "kind": "List", "items": [
                    {"apiVersion": "v1", "kind": "Secret", "stringData": {"t": m("abc")}}]}),
            ),
            // kubectl's last-applied copy holds the values; so may any other annotation.
            (
                json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"annotations": {
                    LAST_APPLIED: "{\"data\":1}", "a": "b",
                    "copy": "token=s3cr3t-token", "b64": "czNjcjN0LXRva2Vu"}},
                    "stringData": {"t": "s3cr3t-token"}}),
                json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"annotations": {
                    LAST_APPLIED: m("{\"data\":1}"), "a": "b",
                    "copy": m("token=s3cr3t-token"), "b64": m("czNjcjN0LXRva2Vu")}},
                    "stringData": {"t": m("s3cr3t-token")}}),
            ),
        ];
        for (input, want) in cases {
            assert_eq!(redact_object(&input), want, "{input}");
        }
    }

    #[test]
    fn same_value_same_marker_in_data_and_string_data() {
        let a = redact_object(&json!({"apiVersion": "v1", "kind": "Secret",
            "data": {"k": "aHVudGVyMg=="}}));
        let b = redact_object(&json!({"apiVersion": "v1", "kind": "Secret",
            "stringData": {"k": "hunter2"}}));
        assert_eq!(a["data"]["k"], b["stringData"]["k"]);
    }

    #[test]
    fn no_value_survives() {
        let secret = json!({"apiVersion": "v1", "kind": "Secret",
            "data": {"a": "c2VjcmV0LXZhbHVl"}, "stringData": {"b": "another-secret"}});
        let text = serde_json::to_string(&redact_objects(&[secret])).unwrap();
        assert!(!text.contains("c2VjcmV0LXZhbHVl") && !text.contains("another-secret"));
        assert!(!text.contains("secret-value"));
    }

    #[test]
    fn scrub_table() {
        let mut s = Scrubber::from_objects([&json!({"apiVersion": "v1", "kind": "Secret",
            "data": {"a": "aHVudGVyMi1wYXNz"},
            "stringData": {"pem": "-----BEGIN-----\nAAAAsecretline\n-----END-----", "q": "say \"hi\"!"}})]);
        s.add_value(b"abc"); // too short: ignored
        let hunter = m("hunter2-pass");
        let cases: Vec<(&str, String)> = vec![
            ("nothing here", "nothing here".into()),
            ("password hunter2-pass.", format!("password {hunter}.")),
            ("b64 aHVudGVyMi1wYXNz!", format!("b64 {hunter}!")),
            ("nopad aHVudGVyMi1wYXNz", format!("nopad {hunter}")),
            // A line of a multi-line value is replaced by the whole value's marker.
            (
                "a line: AAAAsecretline",
                "a line: ".to_string() + &m("-----BEGIN-----\nAAAAsecretline\n-----END-----"),
            ),
            (
                r#"json {"q":"say \"hi\"!"}"#,
                format!(r#"json {{"q":"{}"}}"#, m("say \"hi\"!")),
            ),
            ("abc stays", "abc stays".into()),
        ];
        for (input, want) in cases {
            assert_eq!(s.scrub(input), want, "{input}");
        }
        assert!(Scrubber::default().is_empty());
    }

    /// A fleet's worth of tokens, many sharing their first bytes (as JWTs of one issuer do):
    /// each is found wherever it is, a longer value before a shorter one inside it, and text
    /// without any is left as it is.
    #[test]
    fn many_values_sharing_first_bytes_are_each_found() {
        let mut s = Scrubber::default();
        let tokens: Vec<String> = (0..2000)
            .map(|i| format!("eyJhbGciOi-{i:05}-tok"))
            .collect();
        for t in &tokens {
            s.add_value(t.as_bytes());
        }
        s.add_value(b"eyJhbGciOi-00007-tok-and-more");
        for i in [0, 7, 999, 1999] {
            let t = &tokens[i];
            assert_eq!(
                s.scrub(&format!("token {t}.")),
                format!("token {}.", m(t)),
                "{t}"
            );
        }
        assert_eq!(
            s.scrub("x eyJhbGciOi-00007-tok-and-more y eyJhbGciOi-00008-tok"),
            format!(
                "x {} y {}",
                m("eyJhbGciOi-00007-tok-and-more"),
                m("eyJhbGciOi-00008-tok")
            )
        );
        let plain = "eyJhbGciOi but no token; tok";
        assert!(matches!(s.scrub_cow(plain), Cow::Borrowed(_)));
        // Learning a value twice adds nothing.
        let before = s.needles.len();
        s.add_value(tokens[3].as_bytes());
        assert_eq!(s.needles.len(), before);
    }

    #[test]
    fn credentials_in_every_encoding() {
        let mut s = Scrubber::default();
        s.add_value(b"kube+tok/en=s3cr3t");
        let mark = m("kube+tok/en=s3cr3t");
        let cases = [
            ("Bearer kube+tok/en=s3cr3t", format!("Bearer {mark}")),
            ("?t=kube%2Btok%2Fen%3Ds3cr3t&x", format!("?t={mark}&x")),
            ("b64 a3ViZSt0b2svZW49czNjcjN0", format!("b64 {mark}")),
            ("q=a3ViZSt0b2svZW49czNjcjN0", format!("q={mark}")),
        ];
        for (input, want) in cases {
            assert_eq!(s.scrub(input), want, "{input}");
        }
        // A whole kubeconfig is known whole, never line by line.
        let mut doc = Scrubber::default();
        doc.add_document(b"apiVersion: v1\nkind: Config\nusers: []\n");
        assert_eq!(doc.scrub("kind: Config"), "kind: Config");
        let mut merged = Scrubber::default();
        merged.merge(&s);
        assert_eq!(merged.scrub("kube+tok/en=s3cr3t"), mark);
    }

    #[test]
    fn the_log_writer_scrubs_whole_events() {
        learn([&json!({"apiVersion": "v1", "kind": "Secret",
            "stringData": {"k": "writer-test-value-77"}})]);
        assert_eq!(
            scrub("x writer-test-value-77 y"),
            format!("x {} y", m("writer-test-value-77"))
        );
        let mut event = ScrubbedEvent::default();
        event.write_all(b"part writer-test-").unwrap();
        event.write_all(b"value-77\n").unwrap();
        assert_eq!(
            scrub(&String::from_utf8_lossy(&event.buf)),
            format!("part {}\n", m("writer-test-value-77"))
        );
        event.buf.clear();
    }

    #[test]
    fn scrubber_from_objects_table() {
        let secret = json!({"apiVersion": "v1", "kind": "Secret",
            "data": {"password": "aHVudGVyMg=="},
            "stringData": {"token": "tok-123456", "cert": "line-one\nline-two", "tiny": "ab"}});
        let config =
            json!({"apiVersion": "v1", "kind": "ConfigMap", "data": {"k": "public-value"}});
        let s = Scrubber::from_objects([&secret, &config]);
        let cert = m("line-one\nline-two");
        let cases = [
            (
                "connecting with hunter2",
                format!("connecting with {}", m("hunter2")),
            ),
            (
                "raw aHVudGVyMg== seen",
                format!("raw {} seen", m("hunter2")),
            ),
            (
                "Authorization: tok-123456!",
                format!("Authorization: {}!", m("tok-123456")),
            ),
            ("line-two of the cert", format!("{cert} of the cert")),
            // Too short to scrub, and ConfigMap values are not secret.
            ("ab public-value", "ab public-value".to_string()),
            ("", String::new()),
        ];
        for (input, want) in cases {
            assert_eq!(s.scrub(input), want, "{input}");
        }
        assert_eq!(Scrubber::default().scrub("hunter2"), "hunter2");
    }
}
