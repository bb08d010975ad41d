//! The release commands for humans: `history`, `show`, `rollback`, `unlock`.
//!
//! Formatting is pure (tested by table); the commands connect to each selected target, read
//! its records, and for `rollback` re-apply a chosen revision as a new one.

use serde_json::Value;

use crate::redact;
use crate::release::ReleaseRecord;

/// Output format of `show`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ShowFormat {
    #[default]
    Yaml,
    Json,
}

impl std::str::FromStr for ShowFormat {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "yaml" | "yml" => Ok(ShowFormat::Yaml),
            "json" => Ok(ShowFormat::Json),
            other => Err(format!("unknown output format `{other}`: use yaml or json")),
        }
    }
}

/// "1m05s", "42s", "1h02m".
pub fn human_duration(d: std::time::Duration) -> String {
    let secs = d.as_secs();
    match secs {
        0..60 => format!("{secs}s"),
        60..3600 => format!("{}m{:02}s", secs / 60, secs % 60),
        _ => format!("{}h{:02}m", secs / 3600, (secs % 3600) / 60),
    }
}

/// Short commit for a table: "abc1234 first line" (trimmed to 50 chars).
pub fn short_commit(record: &ReleaseRecord) -> String {
    let Some(commit) = &record.commit else {
        return "-".to_string();
    };
    let sha: String = commit.sha.chars().take(7).collect();
    match &commit.message {
        Some(m) if !m.is_empty() => {
            let mut text = format!("{sha} {m}");
            if text.chars().count() > 50 {
                text = text.chars().take(49).collect::<String>() + "…";
            }
            text
        }
        _ => sha,
    }
}

/// The `history` table of one target, oldest first.
pub fn history_table(target: &str, records: &[ReleaseRecord]) -> String {
    let mut rows: Vec<[String; 6]> = vec![[
        "REVISION".into(),
        "STATUS".into(),
        "COMMIT".into(),
        "STARTED".into(),
        "DURATION".into(),
        "NOTE".into(),
    ]];
    for r in records {
        rows.push([
            r.revision.to_string(),
            r.status.to_string(),
            short_commit(r),
            format!("{:.0}", r.started_at),
            r.duration()
                .map(human_duration)
                .unwrap_or_else(|| "-".into()),
            r.note(),
        ]);
    }
    let mut widths = [0usize; 6];
    for row in &rows {
        for (i, cell) in row.iter().enumerate() {
            widths[i] = widths[i].max(cell.chars().count());
        }
    }
    let mut out = format!("target {target}:\n");
    if records.is_empty() {
        out.push_str("  no releases recorded\n");
        return out;
    }
    for row in &rows {
        let mut line = String::from(" ");
        for (i, cell) in row.iter().enumerate() {
            line.push(' ');
            line.push_str(cell);
            if i + 1 < row.len() {
                line.push_str(&" ".repeat(widths[i] - cell.chars().count() + 1));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// A record as shown to humans: Secret values redacted.
pub fn redacted_record(record: &ReleaseRecord) -> ReleaseRecord {
    let mut out = record.clone();
    if let Some(manifests) = &out.manifests {
        out.manifests = Some(redact::redact_objects(manifests));
    }
    out
}

/// `show` output: the record (Secret values redacted). YAML: the record without its
/// manifests, then each manifest as its own document; JSON: one object.
pub fn render_show(record: &ReleaseRecord, format: ShowFormat) -> Result<String, String> {
    let shown = redacted_record(record);
    match format {
        ShowFormat::Json => serde_json::to_string_pretty(&shown).map_err(|e| e.to_string()),
        ShowFormat::Yaml => {
            let mut head = shown.clone();
            head.manifests = None;
            let mut out = serde_saphyr::to_string(&head).map_err(|e| e.to_string())?;
            for manifest in shown.manifests.iter().flatten() {
                if !out.ends_with('\n') {
                    out.push('\n');
                }
                out.push_str("---\n");
                out.push_str(&serde_saphyr::to_string(manifest).map_err(|e| e.to_string())?);
            }
            Ok(out)
        }
    }
}

/// What a rollback to `to` would change, for the confirmation prompt: objects whose bodies
/// differ between the current manifests and the destination's, and those only one side has
/// (the latter stay in place: rollback never prunes). Secret values are not compared in
/// the text, only named.
pub fn change_summary(current: Option<&ReleaseRecord>, to: &ReleaseRecord) -> Vec<String> {
    let body_map = |r: Option<&ReleaseRecord>| -> Vec<(String, Value)> {
        r.and_then(|r| r.manifests.clone())
            .unwrap_or_default()
            .into_iter()
            .filter_map(|b| crate::release::ObjectRef::from_body(&b).map(|o| (o.to_string(), b)))
            .collect()
    };
    let now = body_map(current);
    let then = body_map(Some(to));
    let mut lines = Vec::new();
    for (name, body) in &then {
        match now.iter().find(|(n, _)| n == name) {
            None => lines.push(format!("  + {name} (created)")),
            Some((_, current_body)) if current_body != body => {
                lines.push(format!("  ~ {name} (changed)"))
            }
            Some(_) => {}
        }
    }
    for (name, _) in &now {
        if !then.iter().any(|(n, _)| n == name) {
            lines.push(format!(
                "  = {name} (not in v{}; left in place)",
                to.revision
            ));
        }
    }
    lines
}

/// Whether a record can be a rollback destination without `--force`.
pub fn is_good(record: &ReleaseRecord) -> bool {
    record.status.was_good()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::release::{RecordCommit, ReleaseKind, ReleaseStatus, RunInfo};
    use serde_json::json;

    fn rec(revision: u64, status: ReleaseStatus) -> ReleaseRecord {
        ReleaseRecord {
            app: "shop".into(),
            target: Some("eu".into()),
            revision,
            status,
            reason: None,
            kind: ReleaseKind::Deploy,
            rollback_of: None,
            commit: Some(RecordCommit {
                sha: "0123456789abcdef".into(),
                r#ref: None,
                message: Some("bump web to v2".into()),
            }),
            started_at: "2026-11-30T09:00:00Z".parse().unwrap(),
            finished_at: Some("2026-11-30T09:01:05Z".parse().unwrap()),
            run: RunInfo::default(),
            digest: None,
            default_namespace: None,
            objects: vec![],
            manifests: Some(vec![
                json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "db", "namespace": "shop"},
                       "stringData": {"password": "hunter2"}}),
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg", "namespace": "shop"},
                       "data": {"a": "1"}}),
            ]),
            manifests_omitted: false,
        }
    }

    #[test]
    fn durations() {
        use std::time::Duration;
        let cases = [(0, "0s"), (42, "42s"), (65, "1m05s"), (3720, "1h02m")];
        for (secs, want) in cases {
            assert_eq!(human_duration(Duration::from_secs(secs)), want);
        }
    }

    #[test]
    fn history_lists_every_revision() {
        let mut failed = rec(2, ReleaseStatus::Failed);
        failed.reason = Some("abandoned".into());
        failed.finished_at = None;
        let text = history_table("eu", &[rec(1, ReleaseStatus::Deployed), failed]);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "target eu:");
        assert!(lines[1].contains("REVISION") && lines[1].contains("NOTE"));
        assert!(lines[2].contains("deployed") && lines[2].contains("0123456 bump web to v2"));
        assert!(lines[2].contains("1m05s"), "{}", lines[2]);
        assert!(lines[3].contains("failed") && lines[3].ends_with("abandoned"));
        assert!(history_table("us", &[]).contains("no releases recorded"));
    }

    #[test]
    fn show_redacts_in_both_formats() {
        let r = rec(1, ReleaseStatus::Deployed);
        for format in [ShowFormat::Yaml, ShowFormat::Json] {
            let text = render_show(&r, format).unwrap();
            assert!(!text.contains("hunter2"), "{text}");
            assert!(text.contains("<redacted 7 bytes>"), "{text}");
            assert!(text.contains("cfg"));
        }
        let yaml = render_show(&r, ShowFormat::Yaml).unwrap();
        assert_eq!(yaml.matches("\n---\n").count(), 2, "{yaml}");
    }

    #[test]
    fn changes_for_prompt() {
        let current = rec(3, ReleaseStatus::Deployed);
        let mut to = rec(1, ReleaseStatus::Superseded);
        let manifests = to.manifests.as_mut().unwrap();
        manifests[1]["data"]["a"] = json!("2");
        manifests.remove(0);
        manifests.push(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "old", "namespace": "shop"}}));
        let lines = change_summary(Some(&current), &to);
        assert_eq!(
            lines,
            vec![
                "  ~ ConfigMap shop/cfg (changed)",
                "  + ConfigMap shop/old (created)",
                "  = Secret shop/db (not in v1; left in place)",
            ]
        );
    }
}
