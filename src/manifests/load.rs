//! Load the manifests of a config: resolve files, folders and globs (or run the render
//! command), parse each file, validate and order the whole set.

use std::collections::HashSet;
use std::path::{Component, Path, PathBuf};

use super::model::*;
use super::parse::parse;
use super::render::{RENDER_ORIGIN, render};
use crate::config::{Config, ManifestSource, RenderHooks};
use crate::util::bounded;

/// Loads, validates and orders the manifests of `config`.
pub fn load(config: &Config) -> Result<ManifestSet, ManifestError> {
    load_noting(config).map(|(set, _)| set)
}

/// [`load`], with the warnings for the user: the Helm hooks left out.
pub fn load_noting(config: &Config) -> Result<(ManifestSet, Vec<String>), ManifestError> {
    let (objects, issues, what) = match &config.manifests {
        ManifestSource::Paths(entries) => {
            let (files, mut issues) = resolve_paths(&config.base_dir, entries, &config.source);
            // Files are named as the user would type them: relative to where rollguard runs
            // (the repository root in CI) when they are below it.
            let cwd = std::env::current_dir().ok();
            let shown = |file: &Path| match cwd.as_deref().map(|c| file.strip_prefix(c)) {
                Some(Ok(relative)) => relative.to_path_buf(),
                _ => file.to_path_buf(),
            };
            let mut objects = Vec::new();
            let mut total: u64 = 0;
            for file in &files {
                let problem = |line: usize, message: String| ManifestIssue {
                    origin: Origin {
                        file: shown(file),
                        line,
                    },
                    message,
                };
                // The total is checked from the sizes before reading, so a set of files
                // over it is refused without holding them.
                let size = std::fs::metadata(file).map_or(0, |m| m.len());
                if size <= bounded::MAX_MANIFEST_FILE {
                    total = total.saturating_add(size);
                }
                if total > bounded::MAX_MANIFESTS_TOTAL {
                    issues.push(problem(
                        0,
                        format!(
                            "all manifest files together pass the {} cap here ({} files in all); deploy fewer objects per app",
                            bounded::size_text(bounded::MAX_MANIFESTS_TOTAL),
                            files.len()
                        ),
                    ));
                    break;
                }
                match bounded::read_file(file, bounded::MAX_MANIFEST_FILE, "one manifest file") {
                    Ok(text) => match parse(&text, &shown(file)) {
                        Ok(mut objs) => objects.append(&mut objs),
                        Err(e) => issues.extend(e.issues().iter().cloned()),
                    },
                    Err(e) => issues.push(problem(e.line(), e.to_string())),
                }
            }
            (objects, issues, format!("manifests {}", entries.join(", ")))
        }
        ManifestSource::Render { command } => {
            let text = render(command, &config.base_dir)?;
            let (objects, issues) = match parse(&text, Path::new(RENDER_ORIGIN)) {
                Ok(objs) => (objs, Vec::new()),
                Err(e) => (Vec::new(), e.issues().to_vec()),
            };
            (objects, issues, format!("the output of `{command}`"))
        }
    };
    let (objects, hooks) = match config.render_hooks {
        RenderHooks::Apply => (objects, Vec::new()),
        RenderHooks::Skip => without_hooks(objects),
    };
    let warnings: Vec<String> = (!hooks.is_empty())
        .then(|| {
            format!(
                "left out {} Helm hook object{} (helm.sh/hook annotation; Helm runs them around its own install, applied on every deploy they would pile up): {}. Set `render_hooks: apply` in {} to apply them as ordinary objects",
                hooks.len(),
                if hooks.len() == 1 { "" } else { "s" },
                hooks.join(", "),
                config.source.display()
            )
        })
        .into_iter()
        .collect();
    // Duplicates among what did parse are reported together with the per-file problems.
    let mut issues = issues;
    issues.extend(duplicates(&objects, config.namespace.as_deref()));
    if !issues.is_empty() {
        return Err(ManifestError::Invalid(issues));
    }
    if objects.is_empty() {
        return Err(ManifestError::Empty(what));
    }
    Ok((
        ManifestSet::new(objects, config.namespace.as_deref())?,
        warnings,
    ))
}

/// The objects without those carrying a `helm.sh/hook` annotation, and the names of those
/// (with their file and line).
pub fn without_hooks(objects: Vec<ManifestObject>) -> (Vec<ManifestObject>, Vec<String>) {
    let (hooks, kept): (Vec<_>, Vec<_>) = objects.into_iter().partition(|o| {
        o.body
            .pointer("/metadata/annotations")
            .and_then(|a| a.get("helm.sh/hook"))
            .is_some()
    });
    let names = hooks
        .iter()
        .map(|o| format!("{} ({})", o.display_name(), o.origin))
        .collect();
    (kept, names)
}

/// Files named by the `manifests` entries: files as given, folders recursively (*.yaml,
/// *.yml, *.json, sorted, hidden entries skipped), globs expanded and sorted. Each file once.
fn resolve_paths(
    base_dir: &Path,
    entries: &[String],
    config_file: &Path,
) -> (Vec<PathBuf>, Vec<ManifestIssue>) {
    let mut files = Vec::new();
    let mut issues = Vec::new();
    let mut seen = HashSet::new();
    // `manifests: [.]` must not pick up rollguard.yaml itself.
    let config_file = std::fs::canonicalize(config_file).ok();
    let mut add = |path: PathBuf, files: &mut Vec<PathBuf>| {
        let canonical = std::fs::canonicalize(&path).ok();
        if canonical.is_some() && canonical == config_file {
            return;
        }
        // One file reached by several paths (symlinks, overlapping entries) counts once.
        if seen.insert(canonical.unwrap_or_else(|| path.clone())) {
            files.push(path);
        }
    };
    for entry in entries {
        let joined = clean_path(&base_dir.join(entry));
        let problem = |message: String| ManifestIssue {
            origin: Origin {
                file: joined.clone(),
                line: 0,
            },
            message,
        };
        if entry.contains(['*', '?', '[']) {
            // Only the entry is a pattern: the config's folder may contain `[` or `*`.
            let pattern = if Path::new(entry).is_absolute() {
                entry.clone()
            } else {
                let base = glob::Pattern::escape(&base_dir.to_string_lossy());
                format!("{}/{entry}", base.trim_end_matches('/'))
            };
            match glob::glob(&pattern) {
                Ok(paths) => {
                    let mut matched: Vec<PathBuf> = paths.filter_map(Result::ok).collect();
                    matched.sort();
                    if matched.is_empty() {
                        issues.push(problem(format!(
                            "manifests entry {entry:?} matches no files"
                        )));
                    }
                    for path in matched {
                        if path.is_dir() {
                            for f in walk_dir(&path) {
                                add(f, &mut files);
                            }
                        } else {
                            add(path, &mut files);
                        }
                    }
                }
                Err(e) => issues.push(problem(format!(
                    "manifests entry {entry:?} is not a valid glob: {e}"
                ))),
            }
        } else if joined.is_dir() {
            let found = walk_dir(&joined);
            if found.is_empty() {
                issues.push(problem(format!(
                    "manifests entry {entry:?} is a folder without *.yaml, *.yml or *.json files"
                )));
            }
            for f in found {
                add(f, &mut files);
            }
        } else if joined.is_file() {
            add(joined.clone(), &mut files);
        } else {
            issues.push(problem(format!(
                "manifests entry {entry:?}: no such file or folder (paths are relative to the config file's folder)"
            )));
        }
    }
    (files, issues)
}

pub(super) fn walk_dir(dir: &Path) -> Vec<PathBuf> {
    walk_dir_depth(dir, 0)
}

/// Symlinked folders are followed (shared manifests often are), to a depth that a symlink
/// loop cannot exceed for long.
const MAX_FOLDER_DEPTH: usize = 32;

fn walk_dir_depth(dir: &Path, depth: usize) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if depth > MAX_FOLDER_DEPTH {
        return out;
    }
    let Ok(read) = std::fs::read_dir(dir) else {
        return out;
    };
    let mut entries: Vec<PathBuf> = read.filter_map(Result::ok).map(|e| e.path()).collect();
    entries.sort();
    for path in entries {
        let hidden = path
            .file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with('.'));
        if hidden {
            continue;
        }
        if path.is_dir() {
            out.extend(walk_dir_depth(&path, depth + 1));
        } else if path
            .extension()
            .is_some_and(|e| matches!(e.to_str(), Some("yaml" | "yml" | "json")))
        {
            out.push(path);
        }
    }
    out
}

/// Drops `./` components so messages read `k8s/web.yaml:3`.
fn clean_path(path: &Path) -> PathBuf {
    let cleaned: PathBuf = path
        .components()
        .filter(|c| !matches!(c, Component::CurDir))
        .collect();
    if cleaned.as_os_str().is_empty() {
        PathBuf::from(".")
    } else {
        cleaned
    }
}
