//! Table tests of the records' pure decisions and their encoding.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;

use super::codec::*;
use super::*;
use crate::util::git::CommitInfo;
use ReleaseStatus::*;

#[test]
fn next_revision_table() {
    let cases: &[(&[u64], u64)] = &[(&[], 1), (&[1], 2), (&[3, 1, 2], 4), (&[7, 9], 10)];
    for (existing, want) in cases {
        assert_eq!(next_revision(existing), *want, "{existing:?}");
    }
}

#[test]
fn fleet_revision_table() {
    // Per target the revisions it keeps; the run's revision is one above them all.
    let cases: &[(&[&[u64]], u64)] = &[
        (&[], 1),
        (&[&[], &[]], 1),
        (&[&[1, 2], &[]], 3),
        // eu at v10, us at v8 (partial deploys): the run is v11 on both.
        (&[&[8, 9, 10], &[7, 8]], 11),
        (&[&[3], &[5], &[4]], 6),
    ];
    for (histories, want) in cases {
        let histories: Vec<Vec<u64>> = histories.iter().map(|h| h.to_vec()).collect();
        assert_eq!(fleet_revision(&histories), *want, "{histories:?}");
    }
}

#[test]
fn ambiguous_revision_table() {
    let rec = |kind: ReleaseKind, to: Option<u64>, sha: &str| {
        let mut r = ReleaseRecord::for_test(38, Deployed);
        r.kind = kind;
        r.rollback_of = to;
        r.commit = Some(CommitInfo {
            sha: sha.to_string(),
            ..Default::default()
        });
        r
    };
    let deploy_a = rec(ReleaseKind::Deploy, None, "aaaaaaaaaa");
    let deploy_b = rec(ReleaseKind::Deploy, None, "bbbbbbbbbb");
    let rollback = rec(ReleaseKind::Rollback, Some(36), "aaaaaaaaaa");
    let mut later = deploy_a.clone();
    later.started_at = jiff::Timestamp::from_second(60).expect("time");
    let mut other_run = deploy_a.clone();
    other_run.run.id = Some("2-2".into());
    // Per case: each target's record of v38, and a part of the refusal (None: no refusal).
    type Case<'a> = (Vec<(&'a str, &'a ReleaseRecord)>, Option<&'a str>);
    let cases: Vec<Case> = vec![
        (vec![], None),
        (vec![("eu", &deploy_a)], None),
        // One run on two targets: its records start moments apart.
        (vec![("eu", &deploy_a), ("ap", &later)], None),
        (
            vec![("eu", &deploy_a), ("ap", &rollback)],
            Some("eu: deploy of aaaaaaa, started 1970-01-01T00:00:00Z; ap: rollback to v36"),
        ),
        (
            vec![("eu", &deploy_a), ("us", &deploy_b)],
            Some("us: deploy of bbbbbbb"),
        ),
        // Two runs of one commit (`--target eu`, then `--target us`).
        (
            vec![("eu", &deploy_a), ("us", &other_run)],
            Some("us: deploy of aaaaaaa"),
        ),
    ];
    for (records, want) in cases {
        let got = ambiguous_revision(38, &records);
        match want {
            None => assert_eq!(got, None, "{records:?}"),
            Some(part) => assert!(
                got.as_deref()
                    .is_some_and(|g| g.contains(part) && g.contains("--target")),
                "{got:?}"
            ),
        }
    }
}

#[test]
fn revision_on_target_never_goes_back() {
    let cases: &[(&[u64], Option<u64>, u64)] = &[
        (&[], None, 1),
        (&[1, 2], None, 3),
        // The run's number, skipping on the target that is behind.
        (&[1, 2], Some(7), 7),
        (&[], Some(4), 4),
        // A target already past the run's number (a record the fleet could not read):
        // its own next one.
        (&[1, 9], Some(5), 10),
        (&[1, 4], Some(5), 5),
    ];
    for (existing, wanted, want) in cases {
        assert_eq!(
            revision_on_target(existing, *wanted),
            *want,
            "{existing:?} {wanted:?}"
        );
    }
}

#[test]
fn prune_table() {
    type Case<'a> = (&'a [(u64, ReleaseStatus)], usize, &'a [u64]);
    let cases: &[Case] = &[
        // Under the limit: nothing.
        (&[(1, Superseded), (2, Deployed)], 10, &[]),
        // Oldest go first.
        (&[(1, Superseded), (2, Superseded), (3, Deployed)], 2, &[1]),
        // The last good one stays even when it is the oldest.
        (
            &[(1, Deployed), (2, Failed), (3, Failed), (4, Failed)],
            2,
            &[2, 3],
        ),
        // keep 1 keeps the last good one, and the newest (so no revision repeats).
        (&[(1, Superseded), (2, Deployed), (3, Failed)], 1, &[1]),
        // Pending records are never pruned.
        (&[(1, Failed), (2, Failed), (3, Pending)], 1, &[1, 2]),
        // keep 0 is treated as 1.
        (&[(1, Failed), (2, Failed)], 0, &[1]),
        // No last good: newest stay.
        (&[(1, Failed), (2, Failed), (3, Failed)], 2, &[1]),
    ];
    for (records, keep, want) in cases {
        assert_eq!(
            prune_choice(records, *keep),
            want.to_vec(),
            "{records:?} keep {keep}"
        );
    }
}

#[test]
fn supersede_and_abandon_table() {
    let records = [
        (1, Superseded),
        (2, Deployed),
        (3, Failed),
        (4, Pending),
        (5, Deployed),
        (6, Pending),
    ];
    assert_eq!(supersede_choice(&records, 5), vec![2]);
    assert_eq!(supersede_choice(&records, 7), vec![2, 5]);
    assert_eq!(supersede_choice(&records, 1), Vec::<u64>::new());
    assert_eq!(abandoned_choice(&records), vec![4, 6]);
}

#[test]
fn transitions_table() {
    let cases = [
        (Pending, Deployed, true),
        (Pending, Failed, true),
        (Deployed, Superseded, true),
        (Deployed, Failed, true),
        (Superseded, Deployed, false),
        (Failed, Deployed, false),
        (Failed, Pending, false),
        (Failed, Failed, true),
    ];
    for (from, to, want) in cases {
        assert_eq!(transition_allowed(from, to), want, "{from} -> {to}");
    }
}

fn record(revision: u64, status: ReleaseStatus) -> ReleaseRecord {
    ReleaseRecord {
        commit: Some(CommitInfo {
            sha: "abc".into(),
            r#ref: Some("refs/heads/main".into()),
            message: Some("fix".into()),
            dirty: false,
        }),
        digest: Some("d".into()),
        manifests: Some(vec![serde_json::json!({"kind": "ConfigMap"})]),
        ..ReleaseRecord::for_test(revision, status)
    }
}

#[test]
fn last_good_is_newest_deployed() {
    let records = vec![
        record(1, Deployed),
        record(2, Deployed),
        record(3, Failed),
        record(4, Superseded),
    ];
    assert_eq!(last_good(&records).map(|r| r.revision), Some(2));
    assert!(last_good(&[record(1, Failed)]).is_none());
}

fn bodies_of(record: &ReleaseRecord) -> Vec<serde_json::Value> {
    record.manifests.clone().unwrap_or_default()
}

#[test]
fn secret_data_roundtrip_keeps_manifests_apart() {
    let full = record(1, Deployed);
    let manifests = EncodedManifests::encode(&bodies_of(&full)).unwrap();
    let (data, omitted) = secret_data(&full, Some(manifests.gz.to_vec())).unwrap();
    assert!(!omitted);
    assert_eq!(record_from_data(&data, true).unwrap(), full);
    // A list reads the record alone; its JSON never holds the manifests.
    let head = record_from_data(&data, false).unwrap();
    assert_eq!(head.manifests, None);
    assert_eq!(head.commit, full.commit);
    let record_json: serde_json::Value = gunzip_json(&data[DATA_KEY].0).unwrap();
    assert!(record_json.get("manifests").is_none());
}

#[test]
fn manifests_over_the_size_limit_are_left_out() {
    // Random-ish text that gzip cannot shrink below the limit.
    let mut seed: u64 = 42;
    let noise: String = (0..2_000_000)
        .map(|_| {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            char::from(b'!' + ((seed >> 33) % 90) as u8)
        })
        .collect();
    let big = [serde_json::json!({"kind": "ConfigMap", "data": {"x": noise}})];
    let manifests = EncodedManifests::encode(&big).unwrap();
    let record = record(2, Pending);
    let (data, omitted) = secret_data(&record, Some(manifests.gz.to_vec())).unwrap();
    assert!(omitted);
    assert!(!data.contains_key(MANIFESTS_KEY));
    assert!(data[DATA_KEY].0.len() <= MAX_RECORD_BYTES);
    let back = record_from_data(&data, true).unwrap();
    assert!(back.manifests.is_none() && back.manifests_omitted);
    assert_eq!(back.commit, record.commit);
}

#[test]
fn the_digest_tells_namespaces_apart() {
    let m = "sha256:abc";
    assert_eq!(release_digest(m, None), m);
    assert_eq!(
        release_digest(m, Some("shop")),
        release_digest(m, Some("shop"))
    );
    assert_ne!(
        release_digest(m, Some("shop")),
        release_digest(m, Some("blog"))
    );
    assert_ne!(release_digest(m, Some("shop")), m);
}

#[test]
fn unreadable_data_is_an_error() {
    let garbage = |key: &str| BTreeMap::from([(key.to_string(), ByteString(b"x".to_vec()))]);
    assert!(record_from_data(&garbage(DATA_KEY), false).is_err());
    assert!(record_from_data(&garbage("other"), false).is_err());
    let (mut data, _) = secret_data(&record(1, Deployed), None).unwrap();
    data.insert(MANIFESTS_KEY.to_string(), ByteString(b"x".to_vec()));
    assert!(
        record_from_data(&data, false).is_ok(),
        "a list skips the manifests"
    );
    assert!(record_from_data(&data, true).is_err());
}

#[test]
fn run_url_and_notes() {
    let env = |k: &str| match k {
        "GITHUB_SERVER_URL" => Some("https://github.com/".to_string()),
        "GITHUB_REPOSITORY" => Some("acme/shop".to_string()),
        "GITHUB_RUN_ID" => Some("42".to_string()),
        _ => None,
    };
    assert_eq!(
        ci_run_url(&env).as_deref(),
        Some("https://github.com/acme/shop/actions/runs/42")
    );
    assert_eq!(ci_run_url(&|_| None), None);
    let mut r = record(3, Failed);
    r.kind = ReleaseKind::Rollback;
    r.rollback_of = Some(2);
    r.reason = Some("abandoned".into());
    assert_eq!(r.note(), "rollback to v2; abandoned");
}

#[test]
fn namespaces_filled_from_what_was_applied() {
    let mut bodies = vec![
        serde_json::json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"}}),
        serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "shop"}}),
        serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "other"}}),
    ];
    let applied = vec![
        ObjectRef {
            api_version: "apps/v1".into(),
            kind: "Deployment".into(),
            namespace: Some("shop".into()),
            name: "web".into(),
        },
        ObjectRef {
            api_version: "v1".into(),
            kind: "Namespace".into(),
            namespace: None,
            name: "shop".into(),
        },
        ObjectRef {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            namespace: Some("shop".into()),
            name: "c".into(),
        },
    ];
    fill_namespaces(&mut bodies, &applied);
    assert_eq!(bodies[0]["metadata"]["namespace"], "shop");
    assert!(bodies[1]["metadata"].get("namespace").is_none());
    assert_eq!(
        bodies[2]["metadata"]["namespace"], "other",
        "an explicit namespace stays"
    );
}

#[test]
fn object_ref_from_body_and_display() {
    let body = serde_json::json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "shop"}});
    let r = ObjectRef::from_body(&body).unwrap();
    assert_eq!(r.to_string(), "Deployment shop/web");
    assert_eq!(r.group(), "apps");
    let ns =
        serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "shop"}});
    assert_eq!(
        ObjectRef::from_body(&ns).unwrap().to_string(),
        "Namespace shop"
    );
    assert!(ObjectRef::from_body(&serde_json::json!({"kind": "X"})).is_none());
}

fn secret(namespace: Option<&str>, name: &str, value: &str) -> serde_json::Value {
    let mut body = serde_json::json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": name}, "stringData": {"password": value}});
    if let Some(ns) = namespace {
        body["metadata"]["namespace"] = ns.into();
    }
    body
}

#[test]
fn secrets_of_other_namespaces_table() {
    let cm = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "db"}});
    let bodies = vec![
        secret(None, "here", "a"),
        secret(Some("shop"), "here-too", "b"),
        secret(Some("db"), "there", "c"),
        cm,
    ];
    let cases: &[(&str, &str, &[usize])] = &[
        ("shop", "shop", &[2]),
        ("rollguard-system", "shop", &[0, 1, 2]),
        ("db", "shop", &[0, 1]),
        ("db", "db", &[1]),
    ];
    for (history, default, want) in cases {
        assert_eq!(
            other_namespace_secrets(&bodies, history, default),
            want.to_vec(),
            "{history} {default}"
        );
    }
}

#[test]
fn digest_policy_keeps_stubs_and_git_fills_them_back() {
    let bodies = vec![
        secret(Some("db"), "there", "sekret-77"),
        secret(None, "here", "x"),
    ];
    let others = other_namespace_secrets(&bodies, "shop", "shop");
    let digested = EncodedManifests::encode_for_history(
        &bodies,
        &others,
        crate::config::SecretsPolicy::Digest,
        "shop",
    )
    .unwrap();
    let stored: Vec<serde_json::Value> = gunzip_json(&digested.gz).unwrap();
    assert!(
        !serde_json::to_string(&stored)
            .unwrap()
            .contains("sekret-77")
    );
    assert!(stub_digest(&stored[0]).is_some());
    assert_eq!(stored[1], bodies[1]);
    assert_eq!(digested.digest, crate::manifests::digest_bodies(&bodies));
    assert_eq!(
        digested.other_namespace_secrets,
        Some(OtherNamespaceSecrets {
            kept: "digest".into(),
            names: vec!["db/there".into()]
        })
    );
    let kept = EncodedManifests::encode_for_history(
        &bodies,
        &others,
        crate::config::SecretsPolicy::Store,
        "shop",
    )
    .unwrap();
    let stored_whole: Vec<serde_json::Value> = gunzip_json(&kept.gz).unwrap();
    assert_eq!(stored_whole, bodies);
    assert_eq!(kept.other_namespace_secrets.unwrap().kept, "store");

    // Filled back from git only with the very same Secret.
    let mut filled = stored.clone();
    fill_secret_stubs(&mut filled, &bodies, "shop", "abc").unwrap();
    assert_eq!(filled, bodies);
    let changed = vec![secret(Some("db"), "there", "other-value")];
    let err = fill_secret_stubs(&mut stored.clone(), &changed, "shop", "abc")
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("Secret db/there at commit abc is not the one the release applied"),
        "{err}"
    );
    let err = fill_secret_stubs(&mut stored.clone(), &[], "shop", "abc")
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("Secret db/there is not in the manifests at commit abc"),
        "{err}"
    );
    // A real Secret with data is never taken for a stub.
    assert!(stub_digest(&bodies[0]).is_none());
}

#[test]
fn abandoned_note_says_what_is_known() {
    let mut r = ReleaseRecord::for_test(4, Pending);
    r.started_at = "2026-12-01T10:00:00Z".parse().unwrap();
    let cases = [
        (
            Some("https://github.com/o/r/actions/runs/7"),
            "ci-1",
            true,
            "release v4 was left pending by run https://github.com/o/r/actions/runs/7 (host ci-1), started 2026-12-01T10:00:00Z: its lock expired unreleased, so it died or lost this cluster before it ended; marked failed (abandoned)",
        ),
        (
            None,
            "laptop",
            false,
            "release v4 was left pending by a run on host laptop, started 2026-12-01T10:00:00Z: its lock was released, so it ended but could not finish the record; marked failed (abandoned)",
        ),
        (
            None,
            "",
            true,
            "release v4 was left pending by a run of unknown origin, started 2026-12-01T10:00:00Z: its lock expired unreleased, so it died or lost this cluster before it ended; marked failed (abandoned)",
        ),
    ];
    for (url, host, expired, want) in cases {
        r.run = RunInfo {
            url: url.map(str::to_string),
            host: host.to_string(),
            id: None,
        };
        assert_eq!(abandoned_note(&r, expired), want);
    }
}
