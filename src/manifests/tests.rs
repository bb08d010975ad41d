//! Table tests of the manifests: parse, load, render, order, the corpus.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::load::*;
use super::model::*;
use super::parse::*;
use super::render::*;

use crate::config::{self, Overrides};
use crate::util::shared::shared_path;

fn parse_str(text: &str) -> Result<Vec<ManifestObject>, Vec<String>> {
    parse(text, Path::new("k8s/app.yaml"))
        .map_err(|e| e.issues().iter().map(|i| i.to_string()).collect())
}

#[test]
fn multi_document_with_comments_crlf_and_empty_docs() {
    let text = "# header\r\n---\r\napiVersion: v1\r\nkind: ConfigMap\r\nmetadata:\r\n  name: a\r\ndata: {k: v}\r\n---\r\n---\r\n# only a comment\r\n---\r\napiVersion: apps/v1\r\nkind: Deployment\r\nmetadata: {name: web, namespace: shop}\r\n";
    let objs = parse_str(text).unwrap();
    assert_eq!(objs.len(), 2);
    assert_eq!(objs[0].origin.to_string(), "k8s/app.yaml:3");
    assert_eq!(objs[0].body["data"]["k"], "v");
    assert_eq!(objs[1].display_name(), "Deployment shop/web");
    assert_eq!(objs[1].origin.line, 12);
    assert_eq!(objs[1].group(), "apps");
    assert_eq!(objs[1].version(), "v1");
    assert_eq!(objs[0].group(), "");
    assert_eq!(objs[0].version(), "v1");
}

#[test]
fn lists_are_flattened_with_item_lines() {
    let text = "apiVersion: v1\nkind: List\nitems:\n  - apiVersion: v1\n    kind: ConfigMap\n    metadata: {name: a}\n  - apiVersion: v1\n    kind: ConfigMapList\n    items:\n      - apiVersion: v1\n        kind: ConfigMap\n        metadata: {name: b}\n";
    let objs = parse_str(text).unwrap();
    let names: Vec<(&str, usize)> = objs
        .iter()
        .map(|o| (o.name.as_str(), o.origin.line))
        .collect();
    assert_eq!(names, vec![("a", 4), ("b", 10)]);
}

#[test]
fn json_objects_may_not_repeat_a_key() {
    let text = "{\"apiVersion\": \"v1\", \"kind\": \"ConfigMap\",\n \"metadata\": {\"name\": \"a\",\n  \"name\": \"b\"}}\n";
    let err = parse(text, Path::new("x.json")).unwrap_err().to_string();
    assert!(
        err.starts_with(
            "x.json:3: not valid JSON: key \"name\" is given twice in one object; keep one"
        ),
        "{err}"
    );
    // Numbers, nesting and streams read as before.
    let ok = "{\"apiVersion\": \"v1\", \"kind\": \"ConfigMap\", \"metadata\": {\"name\": \"a\"}, \"data\": {\"n\": \"1\"}, \"x\": [1, 2.5, -3, true, null]}";
    let objs = parse(ok, Path::new("x.json")).unwrap();
    assert_eq!(
        objs[0].body["x"],
        serde_json::json!([1, 2.5, -3, true, null])
    );
}

#[test]
fn json_files_single_and_stream() {
    let text = "{\"apiVersion\": \"v1\", \"kind\": \"List\", \"items\": [{\"apiVersion\": \"v1\", \"kind\": \"Secret\", \"metadata\": {\"name\": \"s\"}}]}\n\n{\"apiVersion\": \"v1\", \"kind\": \"ConfigMap\", \"metadata\": {\"name\": \"c\"}}\n";
    let objs = parse(text, Path::new("x.json")).unwrap();
    assert_eq!(objs.len(), 2);
    assert_eq!(objs[1].origin.line, 3);
    let err = parse("{\"a\": ", Path::new("x.json")).unwrap_err();
    assert!(
        err.to_string().starts_with("x.json:1: not valid JSON"),
        "{err}"
    );
}

#[test]
fn validation_error_table() {
    let cases = [
        (
            "kind: ConfigMap\nmetadata: {name: a}\n",
            "k8s/app.yaml:1: ConfigMap \"a\" is missing apiVersion",
        ),
        (
            "apiVersion: v1\nmetadata: {name: a}\n",
            "k8s/app.yaml:1: object \"a\" is missing kind",
        ),
        (
            "apiVersion: v1\nkind: ConfigMap\n",
            "k8s/app.yaml:1: ConfigMap is missing metadata.name",
        ),
        (
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {namespace: x}\n",
            "k8s/app.yaml:1: ConfigMap is missing metadata.name",
        ),
        (
            "apiVersion: batch/v1\nkind: Job\nmetadata: {generateName: migrate-}\n",
            "k8s/app.yaml:1: Job with generateName \"migrate-\" cannot be applied: server-side apply needs metadata.name",
        ),
        (
            "- a\n- b\n",
            "k8s/app.yaml:1: this document is a list, not a Kubernetes object",
        ),
        (
            "just a string\n",
            "k8s/app.yaml:1: this document is a string, not a Kubernetes object",
        ),
        (
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a\n",
            "k8s/app.yaml:",
        ),
        (
            "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [a.yaml]\n",
            "k8s/app.yaml:1: Kustomization is a kustomize input, not a manifest: use `render: kustomize build <dir>`",
        ),
        (
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a, namespace: 5}\n",
            "k8s/app.yaml:1: ConfigMap \"a\": metadata.namespace must be a non-empty string",
        ),
    ];
    for (text, want) in cases {
        let errs = parse_str(text).unwrap_err();
        assert!(
            errs.iter().any(|e| e.starts_with(want)),
            "want {want:?}, got {errs:#?}"
        );
    }
}

#[test]
fn all_problems_of_a_file_are_reported() {
    let text = "apiVersion: v1\nkind: ConfigMap\n---\nkey: [unclosed\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: ok}\n---\nkind: Secret\nmetadata: {name: s}\n";
    let errs = parse_str(text).unwrap_err();
    assert_eq!(errs.len(), 3, "{errs:#?}");
    assert!(errs[0].starts_with("k8s/app.yaml:1:"), "{errs:#?}");
    assert!(
        errs[1].starts_with("k8s/app.yaml:4: not valid YAML"),
        "{errs:#?}"
    );
    assert!(errs[2].starts_with("k8s/app.yaml:10:"), "{errs:#?}");
}

#[test]
fn in_namespace_fills_only_missing() {
    let objs = parse_str("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: b, namespace: x}\n").unwrap();
    let a = objs[0].in_namespace("shop");
    assert_eq!(a.display_name(), "ConfigMap shop/a");
    assert_eq!(a.body["metadata"]["namespace"], "shop");
    let b = objs[1].in_namespace("shop");
    assert_eq!(b.display_name(), "ConfigMap x/b");
    assert_eq!(b.body["metadata"]["namespace"], "x");
}

#[test]
fn managed_fields_are_stripped() {
    let objs = parse_str("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n  managedFields: [{manager: kubectl}]\n").unwrap();
    assert!(objs[0].body["metadata"].get("managedFields").is_none());
}

fn obj(api_version: &str, kind: &str, name: &str, ns: Option<&str>, line: usize) -> ManifestObject {
    let mut body =
        serde_json::json!({"apiVersion": api_version, "kind": kind, "metadata": {"name": name}});
    if let Some(ns) = ns {
        body["metadata"]["namespace"] = ns.into();
    }
    ManifestObject {
        api_version: api_version.into(),
        kind: kind.into(),
        name: name.into(),
        namespace: ns.map(str::to_string),
        origin: Origin {
            file: "a.yaml".into(),
            line,
        },
        body,
        source: None,
    }
}

#[test]
fn duplicates_name_both_places() {
    let objs = vec![
        obj("apps/v1", "Deployment", "web", Some("shop"), 1),
        obj("apps/v1", "Deployment", "web", None, 20),
        obj("apps/v1", "Deployment", "web", Some("other"), 30),
        obj("v1", "Namespace", "shop", None, 40),
        obj("v1", "Namespace", "shop", Some("ignored"), 50),
        obj("extensions/v1beta1", "Deployment", "web", Some("shop"), 60),
    ];
    let err = ManifestSet::new(objs, Some("shop")).unwrap_err();
    let msgs: Vec<String> = err.issues().iter().map(|i| i.to_string()).collect();
    assert_eq!(
        msgs,
        vec![
            "a.yaml:20: duplicate object Deployment shop/web: also defined at a.yaml:1",
            "a.yaml:50: duplicate object Namespace ignored/shop: also defined at a.yaml:40",
        ]
    );
}

#[test]
fn apply_order_and_phases() {
    let objs = vec![
        obj("autoscaling/v2", "HorizontalPodAutoscaler", "web", None, 1),
        obj("apps/v1", "Deployment", "web", None, 2),
        obj("v1", "Service", "web", None, 3),
        obj("rbac.authorization.k8s.io/v1", "RoleBinding", "rb", None, 4),
        obj("example.com/v1", "Widget", "w", None, 5),
        obj("rbac.authorization.k8s.io/v1", "Role", "r", None, 6),
        obj("v1", "ConfigMap", "cfg", None, 7),
        obj(
            "apiextensions.k8s.io/v1",
            "CustomResourceDefinition",
            "widgets.example.com",
            None,
            8,
        ),
        obj("v1", "ServiceAccount", "sa", None, 9),
        obj("v1", "Namespace", "shop", None, 10),
        obj("batch/v1", "Job", "migrate", None, 11),
        obj("apps/v1", "StatefulSet", "db", None, 12),
    ];
    let set = ManifestSet::new(objs, None).unwrap();
    let order: Vec<&str> = set.objects.iter().map(|o| o.name.as_str()).collect();
    assert_eq!(
        order,
        vec![
            "widgets.example.com",
            "shop",
            "r",
            "cfg",
            "sa",
            "rb",
            "web",
            "web",
            "migrate",
            "db",
            "web",
            "w"
        ]
    );
    let phases = set.phases();
    let summary: Vec<(&str, usize, bool)> = phases
        .iter()
        .map(|p| (p.name, p.objects.len(), p.wait_for_crds))
        .collect();
    assert_eq!(
        summary,
        vec![
            ("namespaces-and-crds", 2, true),
            ("config-storage-rbac", 3, false),
            ("bindings", 1, false),
            ("services", 1, false),
            ("workloads", 3, false),
            ("other", 2, false),
        ]
    );
    let no_crd = ManifestSet::new(vec![obj("v1", "Namespace", "shop", None, 1)], None).unwrap();
    assert!(!no_crd.phases()[0].wait_for_crds);
}

#[test]
fn yaml_round_trip_and_digest() {
    let Some(_shared) = crate::util::shared::shared_for_test("yaml_round_trip_and_digest") else {
        return;
    };
    let text = std::fs::read_to_string(
        corpus().join("microservices-demo/release/kubernetes-manifests.yaml"),
    )
    .unwrap();
    let mut objs = parse(&text, Path::new("m.yaml")).unwrap();
    // Values that YAML would retype if written carelessly.
    objs.push(ManifestObject {
            body: serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "tricky"},
                "data": {"a": "5", "b": "true", "c": "null", "d": "0x1F", "e": "", "f": "line1\nline2\n", "g": "- x", "h": "#no", "i": "1e3", "j": "~", "k": "yes", "l": "010"}}),
            ..obj("v1", "ConfigMap", "tricky", None, 1)
        });
    let set = ManifestSet::new(objs, None).unwrap();
    let yaml_text = set.to_yaml();
    let back =
        ManifestSet::new(parse(&yaml_text, Path::new("record.yaml")).unwrap(), None).unwrap();
    let bodies = |s: &ManifestSet| s.objects.iter().map(|o| o.body.clone()).collect::<Vec<_>>();
    assert_eq!(bodies(&back), bodies(&set));
    assert_eq!(back.digest(), set.digest());
    assert!(set.digest().starts_with("sha256:"), "{}", set.digest());
    assert_eq!(set.digest().len(), "sha256:".len() + 64);
    let mut changed = set.clone();
    changed.objects[0].body["metadata"]["labels"] = serde_json::json!({"x": "y"});
    assert_ne!(changed.digest(), set.digest());
}

fn corpus() -> PathBuf {
    shared_path("corpus")
}

#[test]
fn every_corpus_file_loads_or_is_refused_clearly() {
    let Some(_shared) =
        crate::util::shared::shared_for_test("every_corpus_file_loads_or_is_refused_clearly")
    else {
        return;
    };
    let files = walk_dir(&corpus());
    assert_eq!(files.len(), 23, "{files:#?}");
    let mut kinds: HashMap<String, usize> = HashMap::new();
    let mut refused = Vec::new();
    let mut loaded_docs = 0;
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        match parse(&text, file) {
            Ok(objs) => {
                assert!(!objs.is_empty(), "{}", file.display());
                loaded_docs += objs.len();
                for o in objs {
                    assert!(o.origin.line >= 1);
                    *kinds
                        .entry(format!("{}/{}", o.api_version, o.kind))
                        .or_default() += 1;
                }
            }
            Err(e) => refused.push((file.clone(), e.to_string())),
        }
    }
    assert_eq!(refused.len(), 1, "{refused:#?}");
    assert!(
        refused[0]
            .0
            .ends_with("podinfo/kustomize/kustomization.yaml")
    );
    assert!(
        refused[0].1.contains(
            ":1: is a kustomize input, not a manifest: use `render: kustomize build <dir>`"
        ),
        "{}",
        refused[0].1
    );
    assert_eq!(loaded_docs, 58);
    let want = [
        ("apps/v1/Deployment", 20),
        ("v1/Service", 19),
        ("v1/ServiceAccount", 13),
        ("autoscaling/v2/HorizontalPodAutoscaler", 3),
        ("rbac.authorization.k8s.io/v1/Role", 1),
        ("rbac.authorization.k8s.io/v1/RoleBinding", 1),
        ("v1/Namespace", 1),
    ];
    assert_eq!(kinds.len(), want.len(), "{kinds:#?}");
    for (k, n) in want {
        assert_eq!(kinds.get(k), Some(&n), "{k}");
    }
}

/// The corpus INDEX.md lists, per file, each document's `apiVersion / kind`: the objects
/// parsed from every file must be exactly those, in order.
#[test]
fn corpus_matches_its_index() {
    let Some(_shared) = crate::util::shared::shared_for_test("corpus_matches_its_index") else {
        return;
    };
    let index = std::fs::read_to_string(corpus().join("INDEX.md")).unwrap();
    let mut expected: Vec<(String, Vec<String>)> = Vec::new();
    for line in index.lines() {
        if let Some(rest) = line.strip_prefix("- `") {
            let path = rest.split('`').next().unwrap().to_string();
            expected.push((path, Vec::new()));
        } else if let Some(doc) = line.strip_prefix("  - ") {
            let last = expected.last_mut().expect("document before file");
            if doc != "(empty document)" {
                last.1.push(doc.to_string());
            }
        }
    }
    assert_eq!(expected.len(), 23);
    for (rel, docs) in expected {
        let path = corpus().join(&rel);
        let text = std::fs::read_to_string(&path).unwrap();
        match parse(&text, &path) {
            Ok(objs) => {
                let got: Vec<String> = objs
                    .iter()
                    .map(|o| format!("{} / {}", o.api_version, o.kind))
                    .collect();
                assert_eq!(got, docs, "{rel}");
            }
            Err(e) => {
                assert_eq!(
                    docs,
                    vec!["kustomize.config.k8s.io/v1beta1 / Kustomization"],
                    "{rel}: {e}"
                );
            }
        }
    }
}

#[test]
fn microservices_demo_loads_in_phases() {
    let Some(_shared) = crate::util::shared::shared_for_test("microservices_demo_loads_in_phases")
    else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let demo = corpus().join("microservices-demo/release");
    let body = format!(
        "app: shop\nnamespace: shop\nmanifests: [{}]\ntargets: [{{name: eu, context: c}}]\n",
        demo.display()
    );
    let set = load(&config_for(dir.path(), &body)).unwrap();
    assert_eq!(set.len(), 35);
    let phases: Vec<(String, usize)> = set
        .phases()
        .into_iter()
        .map(|p| (p.name.to_string(), p.objects.len()))
        .collect();
    assert_eq!(
        phases,
        vec![
            ("config-storage-rbac".to_string(), 11),
            ("services".to_string(), 12),
            ("workloads".to_string(), 12),
        ]
    );
    assert!(set.objects.iter().all(|o| o.origin.line > 0));
}

fn config_for(dir: &Path, body: &str) -> config::Config {
    let path = dir.join("rollguard.yaml");
    std::fs::write(&path, body).unwrap();
    config::load(&path, &Overrides::default(), &|_| None).unwrap()
}

#[test]
fn load_folder_glob_and_file_from_config() {
    let dir = tempfile::tempdir().unwrap();
    let k8s = dir.path().join("k8s");
    std::fs::create_dir_all(k8s.join("sub")).unwrap();
    std::fs::create_dir_all(k8s.join(".hidden")).unwrap();
    std::fs::write(
        k8s.join("b.yaml"),
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\n",
    )
    .unwrap();
    std::fs::write(
        k8s.join("a.yml"),
        "apiVersion: v1\nkind: Service\nmetadata: {name: web}\n",
    )
    .unwrap();
    std::fs::write(
        k8s.join("sub/c.json"),
        "{\"apiVersion\": \"v1\", \"kind\": \"ConfigMap\", \"metadata\": {\"name\": \"cfg\"}}",
    )
    .unwrap();
    std::fs::write(k8s.join("README.md"), "not yaml").unwrap();
    std::fs::write(k8s.join(".hidden/x.yaml"), "garbage: [").unwrap();
    std::fs::write(
        dir.path().join("extra.yaml"),
        "apiVersion: v1\nkind: Namespace\nmetadata: {name: shop}\n",
    )
    .unwrap();

    let c = config_for(
        dir.path(),
        "app: shop\nnamespace: shop\nmanifests: [k8s/, \"extra*.yaml\", k8s/b.yaml]\ntargets: [{name: eu, context: c}]\n",
    );
    let set = load(&c).unwrap();
    let names: Vec<String> = set.objects.iter().map(|o| o.display_name()).collect();
    assert_eq!(
        names,
        vec![
            "Namespace shop",
            "ConfigMap cfg",
            "Service web",
            "Deployment web"
        ]
    );
}

#[test]
fn load_skips_the_config_file_and_reports_bad_entries() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("cm.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cfg}\n",
    )
    .unwrap();
    let c = config_for(
        dir.path(),
        "app: shop\nmanifests: [.]\ntargets: [{name: eu, context: c}]\n",
    );
    let set = load(&c).unwrap();
    assert_eq!(set.len(), 1);

    let c = config_for(
        dir.path(),
        "app: shop\nmanifests: [nope/, \"*.json\", cm.yaml]\ntargets: [{name: eu, context: c}]\n",
    );
    let err = load(&c).unwrap_err().to_string();
    assert!(
        err.contains("manifests entry \"nope/\": no such file or folder"),
        "{err}"
    );
    assert!(
        err.contains("manifests entry \"*.json\" matches no files"),
        "{err}"
    );

    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    std::fs::write(empty.join("blank.yaml"), "# nothing here\n---\n").unwrap();
    let c = config_for(
        dir.path(),
        "app: shop\nmanifests: [empty/]\ntargets: [{name: eu, context: c}]\n",
    );
    let err = load(&c).unwrap_err();
    assert!(matches!(err, ManifestError::Empty(_)), "{err}");
    assert_eq!(
        err.to_string(),
        "no Kubernetes objects found in manifests empty/"
    );
}

#[test]
fn load_collects_problems_of_every_file() {
    let dir = tempfile::tempdir().unwrap();
    let k8s = dir.path().join("k8s");
    std::fs::create_dir(&k8s).unwrap();
    std::fs::write(
        k8s.join("a.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: dup}\n",
    )
    .unwrap();
    std::fs::write(
        k8s.join("b.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {generateName: x-}\n",
    )
    .unwrap();
    std::fs::write(
        k8s.join("c.yaml"),
        "\n\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: dup}\n",
    )
    .unwrap();
    let c = config_for(
        dir.path(),
        "app: shop\nmanifests: [k8s]\ntargets: [{name: eu, context: c}]\n",
    );
    let err = load(&c).unwrap_err().to_string();
    assert!(
        err.contains("b.yaml:1: ConfigMap with generateName"),
        "{err}"
    );
    let a = k8s.join("a.yaml");
    assert!(
        err.ends_with(&format!(
            "c.yaml:3: duplicate object ConfigMap dup: also defined at {}:1",
            a.display()
        )),
        "{err}"
    );
}

#[test]
fn globs_under_a_folder_with_pattern_characters_and_symlink_loops() {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().join("team [a]*");
    std::fs::create_dir_all(base.join("k8s")).unwrap();
    std::fs::write(
        base.join("k8s/cm.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cfg}\n",
    )
    .unwrap();
    #[cfg(unix)]
    std::os::unix::fs::symlink(base.join("k8s"), base.join("k8s/loop")).unwrap();
    let c = config_for(
        &base,
        "app: shop\nmanifests: [\"k8s/*.yaml\"]\ntargets: [{name: eu, context: c}]\n",
    );
    assert_eq!(load(&c).unwrap().len(), 1);
    // The folder walk follows the loop only so far, and the file counts once.
    let c = config_for(
        &base,
        "app: shop\nmanifests: [k8s, k8s/cm.yaml]\ntargets: [{name: eu, context: c}]\n",
    );
    assert_eq!(load(&c).unwrap().len(), 1);
}

#[test]
fn render_command_output_and_errors() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("in.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: from-render}\n",
    )
    .unwrap();
    let c = config_for(
        dir.path(),
        "app: shop\nrender: \"cat in.yaml; echo '---'; echo 'apiVersion: v1'\"\ntargets: [{name: eu, context: c}]\n",
    );
    let err = load(&c).unwrap_err().to_string();
    assert!(
        err.starts_with("<render>:5: object is missing kind, metadata.name"),
        "{err}"
    );

    let c = config_for(
        dir.path(),
        "app: shop\nrender: cat in.yaml\ntargets: [{name: eu, context: c}]\n",
    );
    let set = load(&c).unwrap();
    assert_eq!(set.objects[0].name, "from-render");
    assert_eq!(set.objects[0].origin.to_string(), "<render>:1");

    let c = config_for(
        dir.path(),
        "app: shop\nrender: \"echo building >&2; echo 'kustomize: no such dir' >&2; exit 3\"\ntargets: [{name: eu, context: c}]\n",
    );
    let err = load(&c).unwrap_err().to_string();
    assert!(err.starts_with("render command `echo building >&2; echo 'kustomize: no such dir' >&2; exit 3` failed (exit status: 3):\nbuilding\nkustomize: no such dir"), "{err}");
}

#[test]
fn a_failing_render_quoting_a_secret_in_stderr_is_scrubbed() {
    let dir = tempfile::tempdir().unwrap();
    let command = "printf 'apiVersion: v1\\nkind: Secret\\nmetadata: {name: s}\\nstringData: {k: render-leak-5e1f}\\n'; \
                   echo 'bad value render-leak-5e1f' >&2; exit 1";
    let err = render(command, dir.path()).unwrap_err().to_string();
    assert!(err.contains("bad value"), "{err}");
    let shown = crate::report::redact::scrub(&err);
    assert!(!shown.contains("render-leak-5e1f"), "{shown}");
    assert!(
        shown.contains(&crate::report::redact::marker(b"render-leak-5e1f")),
        "{shown}"
    );
}

#[test]
fn render_timeout_kills_the_command_and_its_children() {
    let dir = tempfile::tempdir().unwrap();
    let started = Instant::now();
    let err = render_with_timeout(
        "echo starting >&2; sleep 30 & sleep 30",
        dir.path(),
        Duration::from_millis(300),
    )
    .unwrap_err()
    .to_string();
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    assert!(err.contains("did not finish within 300ms"), "{err}");
    assert!(err.contains("starting"), "{err}");
    // Large output does not deadlock on a full pipe.
    let out = render("yes 'a: b' | head -c 2000000", dir.path()).unwrap();
    assert_eq!(out.len(), 2_000_000);
}

#[test]
fn hostile_yaml_is_refused_quickly() {
    let bomb = format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: x}}\n{}",
        crate::util::yaml_fixtures::alias_bomb(15)
    );
    let deep = format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: x}}\ndata: {}{}\n",
        "[".repeat(5000),
        "]".repeat(5000)
    );
    // How fast they are refused is the benchmark's business; here: refused, not hung or panicked.
    for text in [bomb, deep] {
        let err = parse(&text, Path::new("evil.yaml"))
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("evil.yaml:"), "{err}");
    }
}

#[test]
fn truncated_and_mangled_files_never_panic() {
    let Some(_shared) =
        crate::util::shared::shared_for_test("truncated_and_mangled_files_never_panic")
    else {
        return;
    };
    for rel in [
        "corpus/microservices-demo/release/kubernetes-manifests.yaml",
        "corpus/podinfo/deploy/webapp/common/reconciler-rbac.yaml",
        "apiserver-recordings/02-deployment-final-get.json",
    ] {
        let path = shared_path(rel);
        let text = std::fs::read_to_string(&path).unwrap();
        let mut cut = 0;
        while cut < text.len() {
            if text.is_char_boundary(cut) {
                let _ = parse(&text[..cut], &path);
                let mangled = format!("{}\t: - [{}", &text[..cut], &text[cut..]);
                let _ = parse(&mangled, &path);
            }
            cut += 613;
        }
    }
}

#[test]
fn large_sets_parse_fast() {
    let mut text = String::new();
    for i in 0..500 {
        text.push_str(&format!("---\napiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: app-{i}\n  labels: {{app: app-{i}}}\nspec:\n  replicas: 2\n  selector: {{matchLabels: {{app: app-{i}}}}}\n  template:\n    metadata: {{labels: {{app: app-{i}}}}}\n    spec:\n      containers:\n        - name: c\n          image: nginx:1.27\n          ports: [{{containerPort: 80}}]\n"));
    }
    let objs = parse(&text, Path::new("big.yaml")).unwrap();
    assert_eq!(objs.len(), 500);
    assert_eq!(objs[499].origin.line, 499 * 16 + 2);
    let set = ManifestSet::new(objs, Some("shop")).unwrap();
    let _ = set.digest();
}

/// Peak RSS of this process so far (VmHWM), in KiB; 0 where /proc is missing.
fn peak_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

/// Every hostile input through the real loader (files on disk, `load`): an error naming the
/// file and line, no panic, quickly.
#[test]
fn hostile_manifest_files_are_refused_with_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let k8s = dir.path().join("k8s");
    std::fs::create_dir(&k8s).unwrap();
    let bomb = crate::util::yaml_fixtures::alias_bomb(12);
    let cm = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n";
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("bomb.yaml", format!("{cm}---\n{bomb}").into_bytes(), "k8s/bomb.yaml:10: not valid YAML: its aliases (`*name`) expand past the cap of 200,000 replayed nodes"),
        (
            "deep.yaml",
            format!("{cm}---\nx: {}{}\n", "[".repeat(10_000), "]".repeat(10_000)).into_bytes(),
            "k8s/deep.yaml:5: not valid YAML: nested deeper than 100 levels (the cap)",
        ),
        ("utf8.yaml", b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: \xff}\n".to_vec(), "k8s/utf8.yaml:3: is not UTF-8 text: byte 0xff at line 3"),
        ("nul.yaml", b"apiVersion: v1\nkind: Config\0Map\n".to_vec(), "k8s/nul.yaml:2: contains a NUL byte at line 2, column 13"),
        ("keys.yaml", format!("{cm}data:\n  1: a\n  \"1\": b\n").into_bytes(), "k8s/keys.yaml:6: not valid YAML: key \"1\" collides with key 1 at line 5"),
        ("dup.yaml", format!("{cm}data: {{}}\ndata: {{}}\n").into_bytes(), "k8s/dup.yaml:5: not valid YAML: duplicate mapping key: data"),
        (
            "merge.yaml",
            format!("{cm}x: &x {{\"1\": a}}\ndata:\n  <<: *x\n  1: b\n").into_bytes(),
            "k8s/merge.yaml:6: not valid YAML: key \"1\" collides with key 1 at line 7: both are the key \"1\"; keep one",
        ),
        (
            "int.yaml",
            b"apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: w}\nspec:\n  replicas: 99999999999999999999999\n".to_vec(),
            "k8s/int.yaml:5: not valid YAML: number 1e23 does not fit in a 64-bit integer",
        ),
        ("docs.yaml", "a: 1\n---\n".repeat(100_000).into_bytes(), "k8s/docs.yaml:20000: more than 10000 YAML documents in one file (the cap); split the file"),
    ];
    for (name, bytes, expected) in cases {
        std::fs::remove_dir_all(&k8s).unwrap();
        std::fs::create_dir(&k8s).unwrap();
        std::fs::write(k8s.join(name), &bytes).unwrap();
        let c = config_for(
            dir.path(),
            "app: shop\nmanifests: [k8s/]\ntargets: [{name: eu, context: c}]\n",
        );
        let err = load(&c).unwrap_err().to_string();
        let shown = err.replace(&format!("{}/", dir.path().display()), "");
        assert!(shown.starts_with(expected), "{name}: {shown}");
        assert_eq!(shown.lines().count(), 1, "{name}: {shown}");
    }
}

#[test]
fn errors_are_capped_per_file() {
    let text = "a: 1\n---\n".repeat(5_000);
    let issues = parse_str(&text).unwrap_err();
    assert_eq!(issues.len(), 21, "{issues:?}");
    assert!(
        issues[0].starts_with("k8s/app.yaml:1: object is missing apiVersion"),
        "{}",
        issues[0]
    );
    assert_eq!(
        issues[20],
        "k8s/app.yaml:41: ... and 4980 more problems in this file (only the first 20 are shown)"
    );
}

/// A 200 MB manifest file is refused from its size, before a byte is read: memory stays flat.
#[test]
fn size_caps_are_checked_before_reading() {
    let dir = tempfile::tempdir().unwrap();
    let k8s = dir.path().join("k8s");
    std::fs::create_dir(&k8s).unwrap();
    let big = std::fs::File::create(k8s.join("big.yaml")).unwrap();
    big.set_len(200 * 1024 * 1024).unwrap();
    let c = config_for(
        dir.path(),
        "app: shop\nmanifests: [k8s/]\ntargets: [{name: eu, context: c}]\n",
    );
    let before = peak_rss_kib();
    let err = load(&c).unwrap_err().to_string();
    let shown = err.replace(&format!("{}/", dir.path().display()), "");
    assert_eq!(
        shown,
        "k8s/big.yaml: is 200 MiB, over the 16 MiB cap on one manifest file; split it or leave out what is not deployed"
    );
    assert!(
        peak_rss_kib() < before + 50 * 1024,
        "{before} -> {}",
        peak_rss_kib()
    );

    // Three files of 12 MiB: the third passes the 32 MiB cap on all manifests together.
    std::fs::remove_file(k8s.join("big.yaml")).unwrap();
    for name in ["a.yaml", "b.yaml", "c.yaml"] {
        let line = "# padding padding padding padding padding padding padding padding\n";
        std::fs::write(k8s.join(name), line.repeat(12 * 1024 * 1024 / line.len())).unwrap();
    }
    let err = load(&c).unwrap_err().to_string();
    let shown = err.replace(&format!("{}/", dir.path().display()), "");
    assert!(
        shown.contains(
            "k8s/c.yaml: all manifest files together pass the 32 MiB cap here (3 files in all)"
        ),
        "{shown}"
    );
}

/// `render: yes` (endless output) is stopped at the cap and says so, not "exit status: 141".
#[test]
fn render_output_is_capped() {
    let dir = tempfile::tempdir().unwrap();
    let started = Instant::now();
    let err = render("yes", dir.path()).unwrap_err().to_string();
    assert!(
        err.starts_with(
            "render command `yes` failed (its output passed the 32 MiB cap on render output"
        ),
        "{err}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "{:?}",
        started.elapsed()
    );
    let err = render("printf 'a: \\377\\n'", dir.path())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("its output is not UTF-8 text: byte 0xff at line 1"),
        "{err}"
    );
}

#[test]
fn helm_hooks_are_told_apart_by_their_annotation() {
    let text = "apiVersion: v1
kind: ConfigMap
metadata: {name: app}
---
apiVersion: v1
kind: Pod
metadata:
  name: web-test-connection
  annotations: {helm.sh/hook: test}
spec: {containers: [{name: t, image: busybox}]}
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: other
  annotations: {helm.sh/hook-weight: \"1\", team: shop}
";
    let objects = parse_str(text).expect("parses");
    let (kept, hooks) = without_hooks(objects);
    let names: Vec<String> = kept.iter().map(ManifestObject::display_name).collect();
    // Only `helm.sh/hook` itself makes a hook.
    assert_eq!(names, vec!["ConfigMap app", "ConfigMap other"]);
    assert_eq!(hooks, vec!["Pod web-test-connection (k8s/app.yaml:5)"]);
}
