//! The apiextensions controller's part: a new CustomResourceDefinition gets its accepted
//! names and the NamesAccepted and Established conditions, as recorded in 06-crd-*.

use serde_json::{Value, json};

/// The CRD's next status on the way to Established, or None when it is established.
/// As the real apiextensions controllers: first the names are accepted (Established False,
/// reason Installing), then the CRD is established.
pub fn established_status(crd: &Value, now: jiff::Timestamp) -> Option<Value> {
    let names = &crd["spec"]["names"];
    let conditions = crd["status"]["conditions"].as_array();
    let is_true = |kind: &str| {
        conditions
            .into_iter()
            .flatten()
            .any(|c| c["type"] == kind && c["status"] == "True")
    };
    let accepted = is_true("NamesAccepted") && crd["status"]["acceptedNames"] == *names;
    if accepted && is_true("Established") {
        return None;
    }
    let now = crate::model::clock::format_time(now);
    let stored: Vec<Value> = crd["spec"]["versions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|v| v["storage"].as_bool() == Some(true))
        .map(|v| v["name"].clone())
        .collect();
    let stored_versions = match crd["status"]["storedVersions"].as_array() {
        Some(existing) if !existing.is_empty() => Value::Array(existing.clone()),
        _ => Value::Array(stored),
    };
    let names_accepted = json!({"type": "NamesAccepted", "status": "True", "lastTransitionTime": now, "reason": "NoConflicts", "message": "no conflicts found"});
    let established = if accepted {
        json!({"type": "Established", "status": "True", "lastTransitionTime": now, "reason": "InitialNamesAccepted", "message": "the initial names have been accepted"})
    } else {
        json!({"type": "Established", "status": "False", "lastTransitionTime": now, "reason": "Installing", "message": "the initial names have been accepted"})
    };
    let names_accepted = match conditions
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "NamesAccepted" && c["status"] == "True")
    {
        Some(existing) if accepted => existing.clone(),
        _ => names_accepted,
    };
    Some(json!({
        "conditions": [names_accepted, established],
        "acceptedNames": names,
        "storedVersions": stored_versions,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_crd_is_established_once() {
        let mut crd = json!({
            "spec": {"names": {"plural": "widgets", "singular": "widget", "shortNames": ["wg"], "kind": "Widget", "listKind": "WidgetList"},
                     "versions": [{"name": "v1", "served": true, "storage": true}]},
            "status": {"conditions": null, "acceptedNames": {"plural": "", "kind": ""}, "storedVersions": ["v1"]}
        });
        let now: jiff::Timestamp = "2026-11-30T08:55:15Z".parse().unwrap();
        let status = established_status(&crd, now).expect("needs its names accepted");
        assert_eq!(status["conditions"][1]["status"], "False");
        assert_eq!(status["conditions"][1]["reason"], "Installing");
        crd["status"] = status;
        let status = established_status(&crd, now).expect("needs establishing");
        assert_eq!(status["conditions"][1]["status"], "True");
        assert_eq!(status["conditions"][1]["reason"], "InitialNamesAccepted");
        assert_eq!(status["conditions"][0]["message"], "no conflicts found");
        assert_eq!(status["acceptedNames"]["kind"], "Widget");
        assert_eq!(status["storedVersions"], json!(["v1"]));
        crd["status"] = status;
        assert!(established_status(&crd, now).is_none());
    }
}
