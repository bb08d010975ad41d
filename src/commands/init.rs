//! `rollguard init`: a first rollguard.yaml for a newcomer, from the contexts of the
//! kubeconfig a deploy would read and the manifests folder of the repository, each key with a
//! comment that says what it does. It never overwrites a config without `--force`.

use std::collections::HashMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use crate::cli::InitArgs;
use crate::error::{Error, exit};

/// The folders a repository's manifests are usually in, in the order they are tried.
pub const MANIFEST_FOLDERS: [&str; 4] = ["k8s", "manifests", "deploy", "kubernetes"];

/// How deep a manifests folder is searched, and how many files are looked at: enough for any
/// app's manifests, bounded for a folder that is something else.
const MAX_DEPTH: usize = 4;
const MAX_FILES: usize = 500;
/// What is read of a file to see whether it holds a Kubernetes object.
const SNIFF_BYTES: u64 = 64 * 1024;

/// What was found to deploy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Found {
    /// A folder of plain manifests (`files` of them hold an `apiVersion`).
    Folder { folder: String, files: usize },
    /// A kustomize folder (a kustomization.yaml at its top): rendered, not read as files.
    Kustomize { folder: String },
    /// A Helm chart (a Chart.yaml at its top): rendered with `helm template`.
    Chart { folder: String },
}

/// One target of the generated file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InitTarget {
    pub name: String,
    pub context: String,
}

/// Writes the first config; exit 0, or bad input (exit 2) that says what to do.
pub async fn run(args: InitArgs, env: HashMap<String, String>) -> Result<i32, Error> {
    let out = args.out.clone();
    if out.exists() && !args.force {
        return Err(Error::Usage(format!(
            "{} already exists: rollguard init does not overwrite a config. Edit it, \
             write a new one elsewhere with --out PATH, or replace it with --force",
            out.display()
        )));
    }
    let lookup = |k: &str| env.get(k).cloned();
    let (kubeconfig, source) =
        crate::cluster::connect::read_default_kubeconfig(args.kubeconfig.as_deref(), &lookup)
            .map_err(|e| Error::Usage(format!("rollguard init: {}", e.message)))?;
    let contexts: Vec<String> = kubeconfig.contexts.iter().map(|c| c.name.clone()).collect();
    let chosen = choose_contexts(&contexts, &args.contexts, &source)?;
    let targets = targets_for(&chosen);
    let base = config_folder(&out);
    let app = match &args.app {
        Some(app) => match crate::config::dns_label_problem(app) {
            Some(problem) => {
                return Err(Error::Usage(format!(
                    "rollguard init: --app {app:?}: the app's name {problem} (it names the \
                     release records and the lock), e.g. --app shop"
                )));
            }
            None => app.clone(),
        },
        None => app_name_from(&base),
    };
    let found = MANIFEST_FOLDERS
        .iter()
        .find_map(|folder| inspect_folder(&base, folder));
    let text = render(&app, found.as_ref(), &targets, &source);
    write_config(&out, &text, args.force)?;
    for line in summary(&out, &app, found.as_ref(), &targets, &source) {
        println!("{line}");
    }
    Ok(exit::OK)
}

/// The contexts to make targets of: every one, or those `--context` names (each must exist).
fn choose_contexts(
    contexts: &[String],
    wanted: &[String],
    source: &str,
) -> Result<Vec<String>, Error> {
    if contexts.is_empty() {
        return Err(Error::Usage(format!(
            "rollguard init: the kubeconfig {source} has no contexts: add your clusters to it \
             (e.g. `aws eks update-kubeconfig`, `gcloud container clusters get-credentials`, \
             `kind create cluster`) or name another with --kubeconfig PATH"
        )));
    }
    let wanted: Vec<&str> = wanted
        .iter()
        .flat_map(|w| w.split(','))
        .map(str::trim)
        .filter(|w| !w.is_empty())
        .collect();
    if wanted.is_empty() {
        return Ok(contexts.to_vec());
    }
    let missing: Vec<&str> = wanted
        .iter()
        .copied()
        .filter(|w| !contexts.iter().any(|c| c == w))
        .collect();
    if !missing.is_empty() {
        return Err(Error::Usage(format!(
            "rollguard init: --context {}: not a context of the kubeconfig {source}, which has: {}",
            missing.join(", "),
            contexts.join(", ")
        )));
    }
    Ok(contexts
        .iter()
        .filter(|c| wanted.contains(&c.as_str()))
        .cloned()
        .collect())
}

/// The folder the config is written in (its manifest paths are relative to it).
fn config_folder(out: &Path) -> PathBuf {
    match out.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// The app's name from the repository's folder name, made a DNS label ("app" if nothing is
/// left of it).
pub fn app_name_from(folder: &Path) -> String {
    let absolute = std::fs::canonicalize(folder).unwrap_or_else(|_| folder.to_path_buf());
    let name = absolute
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let label = dns_label(&name.to_ascii_lowercase(), 63);
    if label.is_empty() {
        "app".to_string()
    } else {
        label
    }
}

/// `text` with every run of characters other than `[a-z0-9]` as one '-', trimmed of '-',
/// at most `max` long.
fn dns_label(text: &str, max: usize) -> String {
    let mut out = String::new();
    for c in text.chars() {
        if c.is_ascii_lowercase() || c.is_ascii_digit() {
            out.push(c);
        } else if !out.is_empty() && !out.ends_with('-') {
            out.push('-');
        }
    }
    out.truncate(max);
    out.trim_matches('-').to_string()
}

/// A target name for a context: the cluster's own part of the cloud providers' long names
/// (`arn:aws:eks:...:cluster/prod` -> prod, `gke_project_zone_prod` -> prod), kept to the
/// characters target names allow.
pub fn target_name(context: &str) -> String {
    let short = if let Some((_, cluster)) = context.rsplit_once('/') {
        cluster
    } else if let Some(rest) = context.strip_prefix("gke_") {
        rest.rsplit('_').next().unwrap_or(rest)
    } else {
        context
    };
    let mut name: String = short
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '-'
            }
        })
        .collect();
    name.truncate(60);
    let name = name.trim_matches('-').to_string();
    if name.is_empty() {
        "target".to_string()
    } else {
        name
    }
}

/// One target per context, with names made unique (`prod`, `prod-2`).
pub fn targets_for(contexts: &[String]) -> Vec<InitTarget> {
    let mut targets: Vec<InitTarget> = Vec::new();
    for context in contexts {
        let base = target_name(context);
        let mut name = base.clone();
        let mut n = 2;
        while targets.iter().any(|t| t.name == name) {
            name = format!("{base}-{n}");
            n += 1;
        }
        targets.push(InitTarget {
            name,
            context: context.clone(),
        });
    }
    targets
}

/// What `folder` (under `base`) holds to deploy, if anything.
pub fn inspect_folder(base: &Path, folder: &str) -> Option<Found> {
    let dir = base.join(folder);
    if !dir.is_dir() {
        return None;
    }
    let folder = folder.to_string();
    let has = |name: &str| dir.join(name).is_file();
    if has("kustomization.yaml") || has("kustomization.yml") || has("Kustomization") {
        return Some(Found::Kustomize { folder });
    }
    if has("Chart.yaml") {
        return Some(Found::Chart { folder });
    }
    let mut files = 0;
    let mut seen = 0;
    count_manifests(&dir, 0, &mut seen, &mut files);
    (files > 0).then_some(Found::Folder { folder, files })
}

/// Counts the .yaml/.yml files under `dir` that hold an `apiVersion`, bounded in depth and
/// in files looked at.
fn count_manifests(dir: &Path, depth: usize, seen: &mut usize, files: &mut usize) {
    if depth > MAX_DEPTH {
        return;
    }
    let Ok(read) = std::fs::read_dir(dir) else {
        return;
    };
    let mut entries: Vec<PathBuf> = read.filter_map(Result::ok).map(|e| e.path()).collect();
    entries.sort();
    for path in entries {
        if *seen >= MAX_FILES {
            return;
        }
        let hidden = path
            .file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with('.'));
        if hidden {
            continue;
        }
        if path.is_dir() {
            count_manifests(&path, depth + 1, seen, files);
        } else if path
            .extension()
            .is_some_and(|e| matches!(e.to_str(), Some("yaml" | "yml")))
        {
            *seen += 1;
            if holds_api_version(&path) {
                *files += 1;
            }
        }
    }
}

fn holds_api_version(path: &Path) -> bool {
    use std::io::Read as _;
    let Ok(file) = std::fs::File::open(path) else {
        return false;
    };
    let mut head = Vec::new();
    if file.take(SNIFF_BYTES).read_to_end(&mut head).is_err() {
        return false;
    }
    String::from_utf8_lossy(&head).contains("apiVersion")
}

/// A YAML double-quoted scalar: a JSON string is one (context names hold ':' and '/').
fn quoted(text: &str) -> String {
    serde_json::to_string(text).unwrap_or_else(|_| format!("{text:?}"))
}

/// The `manifests:` or `render:` lines for what was found.
fn manifests_lines(app: &str, found: Option<&Found>) -> String {
    const PATHS: &str = "# The manifests: files, folders (read with every folder below: .yaml, .yml, .json) and\n\
         # globs, relative to this file. Instead of `manifests`, `render:` runs a command whose\n\
         # output is the manifests (e.g. `render: kubectl kustomize k8s`).\n";
    match found {
        Some(Found::Folder { folder, files }) => format!(
            "{PATHS}# Found by rollguard init: {folder}/ ({files} file{} with Kubernetes objects).\nmanifests: [{folder}/]\n",
            if *files == 1 { "" } else { "s" }
        ),
        Some(Found::Kustomize { folder }) => format!(
            "# The manifests: the output of this command, run in this file's folder (rollguard init\n\
             # found a kustomization in {folder}/). Or `manifests: [files, folders, globs]`.\n\
             render: {}\n",
            quoted(&format!("kubectl kustomize {folder}"))
        ),
        Some(Found::Chart { folder }) => format!(
            "# The manifests: the output of this command, run in this file's folder (rollguard init\n\
             # found a Helm chart in {folder}/). Or `manifests: [files, folders, globs]`.\n\
             render: {}\n",
            quoted(&format!("helm template {app} {folder}"))
        ),
        None => format!(
            "{PATHS}# rollguard init found no manifests in {}/: put yours in k8s/ or change this.\nmanifests: [k8s/]\n",
            MANIFEST_FOLDERS.join("/, ")
        ),
    }
}

/// The config file's text: every key it sets with what it does, values the defaults.
pub fn render(app: &str, found: Option<&Found>, targets: &[InitTarget], source: &str) -> String {
    let mut text = format!(
        "# rollguard.yaml, written by `rollguard init` from the contexts of {source}.\n\
         # `rollguard diff` shows what a deploy would change; `rollguard deploy` deploys.\n\
         # Every key: docs/ and the README; `rollguard schema` prints the JSON Schema for editors.\n\
         \n\
         # The app's name (a DNS label): it names the app's release records and deploy lock\n\
         # on every cluster.\n\
         app: {app}\n\
         \n\
         # The namespace of the manifests' namespaced objects that name none (created when\n\
         # missing). Unset: each context's namespace, else \"default\". The release records and\n\
         # the lock live there too (or in `history: {{namespace: ...}}`).\n\
         # namespace: {app}\n\
         \n"
    );
    text.push_str(&manifests_lines(app, found));
    text.push_str(
        "\n# Where to deploy: one target per context of the kubeconfig (--kubeconfig, else\n\
         # $KUBECONFIG, else ~/.kube/config). Remove the clusters this app does not go to.\n\
         # `name` is the target's name in every report; `context` its kubeconfig context.\n\
         # A target may add `wave: 1` to deploy after wave 0 is healthy.\n\
         targets:\n",
    );
    for t in targets {
        text.push_str(&format!(
            "  - name: {}\n    context: {}\n",
            quoted(&t.name),
            quoted(&t.context)
        ));
    }
    text.push_str(
        "\n# How rollguard waits for each target's rollout.\n\
         wait:\n\
         \x20 # How long each target may take to apply and roll out before it counts as failed\n\
         \x20 # (pods that cannot start, ImagePullBackOff or CrashLoopBackOff, fail it at once).\n\
         \x20 timeout: 5m\n\
         \n\
         # What one target's failure does: rollback-all (every target that got the new version\n\
         # goes back to its last good release), rollback-failed (only the failed ones),\n\
         # rollback-if-all-fail, or none.\n\
         on_failure: rollback-all\n",
    );
    text
}

/// Writes the file; without `force`, never over one that appeared since the check.
fn write_config(out: &Path, text: &str, force: bool) -> Result<(), Error> {
    let cannot = |e: std::io::Error| {
        Error::Usage(format!(
            "rollguard init: cannot write {}: {e}; choose another place with --out PATH",
            out.display()
        ))
    };
    let mut options = std::fs::OpenOptions::new();
    options.write(true);
    if force {
        options.create(true).truncate(true);
    } else {
        options.create_new(true);
    }
    let mut file = options.open(out).map_err(cannot)?;
    file.write_all(text.as_bytes()).map_err(cannot)
}

/// What was written, and what to run next.
fn summary(
    out: &Path,
    app: &str,
    found: Option<&Found>,
    targets: &[InitTarget],
    source: &str,
) -> Vec<String> {
    let names: Vec<&str> = targets.iter().map(|t| t.name.as_str()).collect();
    let manifests = match found {
        Some(Found::Folder { folder, files }) => format!("manifests {folder}/ ({files} files)"),
        Some(Found::Kustomize { folder }) => format!("render `kubectl kustomize {folder}`"),
        Some(Found::Chart { folder }) => format!("render `helm template {app} {folder}`"),
        None => "manifests k8s/ (not there yet: put your manifests in it)".to_string(),
    };
    vec![
        format!(
            "wrote {}: app {app}, {} target{} ({}, the contexts of {source}), {manifests}",
            out.display(),
            targets.len(),
            if targets.len() == 1 { "" } else { "s" },
            names.join(", ")
        ),
        "Read it, remove the clusters this app does not go to, then:".to_string(),
        "  rollguard diff     # what a deploy would change on every target; writes nothing"
            .to_string(),
        "  rollguard deploy   # apply everywhere, watch the rollouts, roll back on failure"
            .to_string(),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{ManifestSource, Overrides};

    #[test]
    fn target_names_from_contexts() {
        let cases = [
            ("kind-kind", "kind-kind"),
            ("arn:aws:eks:eu-west-1:123456789012:cluster/prod", "prod"),
            ("gke_my-project_europe-west1-b_shop-eu", "shop-eu"),
            ("admin@k8s.local", "admin-k8s.local"),
            ("sim-1", "sim-1"),
            ("", "target"),
            ("::", "target"),
        ];
        for (context, want) in cases {
            assert_eq!(target_name(context), want, "{context:?}");
        }
        let long = "x".repeat(100);
        assert!(target_name(&long).len() <= 63);
    }

    #[test]
    fn target_names_are_made_unique() {
        let contexts = [
            "arn:aws:eks:eu-west-1:1:cluster/prod".to_string(),
            "arn:aws:eks:us-east-1:1:cluster/prod".to_string(),
            "prod".to_string(),
        ];
        let names: Vec<String> = targets_for(&contexts).into_iter().map(|t| t.name).collect();
        assert_eq!(names, ["prod", "prod-2", "prod-3"]);
    }

    #[test]
    fn app_names_are_dns_labels() {
        let cases = [
            ("My_Shop", "my-shop"),
            ("shop", "shop"),
            ("--", ""),
            ("Web.App 2", "web-app-2"),
        ];
        for (name, want) in cases {
            assert_eq!(dns_label(&name.to_ascii_lowercase(), 63), want, "{name}");
        }
        assert_eq!(dns_label(&"a".repeat(80), 63).len(), 63);
    }

    #[test]
    fn contexts_chosen_by_name_or_all() {
        let all = ["a".to_string(), "b".to_string(), "c".to_string()];
        assert_eq!(choose_contexts(&all, &[], "kc").expect("all"), all);
        let picked = choose_contexts(&all, &["c,a".to_string()], "kc").expect("picked");
        assert_eq!(picked, ["a", "c"], "in the kubeconfig's order");
        let e = choose_contexts(&all, &["z".to_string()], "kc").expect_err("unknown");
        assert_eq!(e.exit_code(), exit::BAD_INPUT);
        assert!(e.to_string().contains("--context z") && e.to_string().contains("a, b, c"));
        let e = choose_contexts(&[], &[], "/home/u/.kube/config").expect_err("no contexts");
        assert!(e.to_string().contains("has no contexts"), "{e}");
    }

    /// Every shape init writes is a config rollguard loads, with what init meant.
    #[test]
    fn the_written_file_loads() {
        let targets = targets_for(&[
            "arn:aws:eks:eu-west-1:1:cluster/prod".to_string(),
            "kind-dev".to_string(),
        ]);
        let shapes = [
            Some(Found::Folder {
                folder: "deploy".into(),
                files: 3,
            }),
            Some(Found::Kustomize {
                folder: "k8s".into(),
            }),
            Some(Found::Chart {
                folder: "chart".into(),
            }),
            None,
        ];
        for found in shapes {
            let text = render("shop", found.as_ref(), &targets, "/home/u/.kube/config");
            let config = crate::config::parse(
                &text,
                Path::new("rollguard.yaml"),
                &Overrides::default(),
                &|_| None,
            )
            .unwrap_or_else(|e| panic!("{found:?}: {e}\n{text}"));
            assert_eq!(config.app, "shop");
            assert_eq!(config.namespace, None);
            let got: Vec<(&str, Option<&str>)> = config
                .targets
                .iter()
                .map(|t| (t.name.as_str(), t.context.as_deref()))
                .collect();
            assert_eq!(
                got,
                [
                    ("prod", Some("arn:aws:eks:eu-west-1:1:cluster/prod")),
                    ("kind-dev", Some("kind-dev"))
                ]
            );
            let want = match &found {
                Some(Found::Folder { .. }) => ManifestSource::Paths(vec!["deploy/".into()]),
                Some(Found::Kustomize { .. }) => ManifestSource::Render {
                    command: "kubectl kustomize k8s".into(),
                },
                Some(Found::Chart { .. }) => ManifestSource::Render {
                    command: "helm template shop chart".into(),
                },
                None => ManifestSource::Paths(vec!["k8s/".into()]),
            };
            assert_eq!(config.manifests, want, "{text}");
            // The defaults it writes are the defaults: the file says what a deploy does.
            assert_eq!(config.wait.timeout, std::time::Duration::from_secs(300));
            assert_eq!(config.on_failure, crate::config::FailurePolicy::default());
            // Every key it sets has a comment before it.
            let lines: Vec<&str> = text.lines().collect();
            for (i, line) in lines.iter().enumerate() {
                let is_key = !line.starts_with(' ') && !line.starts_with('#') && line.contains(':');
                if is_key {
                    assert!(
                        i > 0 && lines[i - 1].starts_with('#'),
                        "{line:?} has no comment:\n{text}"
                    );
                }
            }
        }
    }

    #[test]
    fn folders_are_recognised_by_what_they_hold() {
        let dir = tempfile::tempdir().expect("tempdir");
        let base = dir.path();
        let put = |rel: &str, text: &str| {
            let path = base.join(rel);
            std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
            std::fs::write(path, text).expect("write");
        };
        put("k8s/README.md", "apiVersion in prose");
        put("k8s/values.yaml", "replicas: 2\n");
        put("manifests/app.yaml", "apiVersion: v1\nkind: ConfigMap\n");
        put(
            "manifests/nested/web.yml",
            "apiVersion: apps/v1\nkind: Deployment\n",
        );
        put("manifests/.hidden/x.yaml", "apiVersion: v1\n");
        put("deploy/kustomization.yaml", "resources: [a.yaml]\n");
        put("kubernetes/Chart.yaml", "apiVersion: v2\nname: x\n");
        assert_eq!(inspect_folder(base, "k8s"), None, "no Kubernetes object");
        assert_eq!(
            inspect_folder(base, "manifests"),
            Some(Found::Folder {
                folder: "manifests".into(),
                files: 2
            })
        );
        assert_eq!(
            inspect_folder(base, "deploy"),
            Some(Found::Kustomize {
                folder: "deploy".into()
            })
        );
        assert_eq!(
            inspect_folder(base, "kubernetes"),
            Some(Found::Chart {
                folder: "kubernetes".into()
            })
        );
        assert_eq!(inspect_folder(base, "absent"), None);
        let first = MANIFEST_FOLDERS
            .iter()
            .find_map(|f| inspect_folder(base, f));
        assert_eq!(
            first,
            Some(Found::Folder {
                folder: "manifests".into(),
                files: 2
            }),
            "k8s/ holds no manifests, so manifests/ is next"
        );
    }
}
