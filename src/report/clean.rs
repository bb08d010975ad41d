//! The one gate between what a run knows and what it shows: [`Clean`] is a report (or plan)
//! whose every string went through the secret scrubber. Every sink renders a `Clean` value
//! (the terminal table, the JSON file, the markdown of the PR comment, step summary and plan
//! comment, the step outputs, the annotations), so text is scrubbed first and escaped for its
//! medium second, and a new sink cannot skip the scrubber: it has no other way to get a report.

use std::ops::Deref;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

/// A value with every string (and map key) scrubbed of the secret values the run knows.
#[derive(Debug, Clone, PartialEq)]
pub struct Clean<T>(T);

impl<T: Serialize + DeserializeOwned + Clone> Clean<T> {
    /// Scrubbed with the process-wide scrubber ([`super::redact::scrub`]).
    pub fn new(value: &T) -> Clean<T> {
        Clean::with(value, &super::redact::scrub)
    }

    /// Scrubbed with `scrub` (tests give their own).
    pub fn with(value: &T, scrub: &dyn Fn(&str) -> String) -> Clean<T> {
        let Ok(mut tree) = serde_json::to_value(value) else {
            return Clean(value.clone());
        };
        walk(&mut tree, scrub);
        // A value that does not come back (a marker in a timestamp, for a "secret" such as
        // "2026") is kept as it is: every sink scrubs its rendered text once more as a
        // second line, so it is still scrubbed, only after its escaping.
        match serde_json::from_value(tree) {
            Ok(clean) => Clean(clean),
            Err(e) => {
                tracing::debug!(
                    "the scrubbed report does not read back ({e}); the sinks' second scrub covers it"
                );
                Clean(value.clone())
            }
        }
    }
}

impl<T> Deref for Clean<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

/// Every string (and map key) of a JSON tree through the process-wide scrubber: for documents
/// that are not a report (`history -o json|yaml`, `show`), before they are rendered.
pub fn scrub_tree(v: &mut Value) {
    walk(v, &super::redact::scrub);
}

fn walk(v: &mut Value, scrub: &dyn Fn(&str) -> String) {
    match v {
        Value::String(s) => *s = scrub(s),
        Value::Array(items) => items.iter_mut().for_each(|i| walk(i, scrub)),
        Value::Object(map) => {
            let old = std::mem::take(map);
            for (key, mut value) in old {
                walk(&mut value, scrub);
                map.insert(scrub(&key), value);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::model::TargetOutcome;
    use crate::report::model::tests::{report, target};

    #[test]
    fn every_string_is_scrubbed() {
        let mut t = target("eu", TargetOutcome::Failed);
        t.message = Some("token s3cr3t-v4lue quoted".into());
        let mut rollback =
            crate::report::model::RollbackReport::new(TargetOutcome::RolledBack, Some(3));
        rollback.why = Some("policy rollback-all: s3cr3t-v4lue failed".into());
        rollback.started_at = Some(crate::report::model::tests::ts(5));
        t.rollback = Some(rollback);
        let r = report(vec![t]);
        let scrub = |s: &str| s.replace("s3cr3t-v4lue", "<redacted>");
        let clean = Clean::with(&r, &scrub);
        let text = serde_json::to_string(&*clean).unwrap();
        assert!(!text.contains("s3cr3t-v4lue"), "{text}");
        assert!(text.contains("token <redacted> quoted"), "{text}");
        let why = clean.targets[0]
            .rollback
            .as_ref()
            .and_then(|rb| rb.why.as_deref());
        assert_eq!(why, Some("policy rollback-all: <redacted> failed"));
        // Nothing else changes.
        assert_eq!(Clean::with(&r, &|s: &str| s.to_string()).targets, r.targets);
    }
}
