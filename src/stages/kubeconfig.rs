//! The kubeconfig a script gets: only its own target's cluster, user and context (cut out by
//! `kube::connect::single_context`; a fleet script: every target's, each context named after
//! its target), in a file of mode 0600 in a private temporary directory (0700), both removed
//! when the script is done, when its run is cancelled, and before a hard exit on a second
//! signal.

use std::collections::HashSet;
use std::io::Write as _;
use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use kube::config::Kubeconfig;

type Config = Kubeconfig;

/// Every target's single-context kubeconfig in one (no current-context: a fleet script names
/// the target it means with `--context <target>`).
pub fn merged<'a>(parts: impl IntoIterator<Item = &'a Kubeconfig>) -> Kubeconfig {
    let mut out = Kubeconfig {
        kind: Some("Config".into()),
        api_version: Some("v1".into()),
        ..Kubeconfig::default()
    };
    for part in parts {
        out.clusters.extend(part.clusters.iter().cloned());
        out.auth_infos.extend(part.auth_infos.iter().cloned());
        out.contexts.extend(part.contexts.iter().cloned());
    }
    out
}

/// The private directories of the temporary kubeconfigs that exist right now. Process-wide on
/// purpose: they hold credentials and are deleted on a signal and at exit (`remove_all_now`
/// in main.rs, after the runtime is gone), where no run context is reachable.
static LIVE_FILES: Mutex<Option<HashSet<PathBuf>>> = Mutex::new(None);

fn live_files(f: impl FnOnce(&mut HashSet<PathBuf>)) {
    let mut guard = LIVE_FILES.lock().unwrap_or_else(|p| p.into_inner());
    f(guard.get_or_insert_with(HashSet::new));
}

/// Remove every temporary kubeconfig (before a hard exit, when no destructor runs).
pub fn remove_all_now() {
    live_files(|files| {
        for dir in files.drain() {
            let _ = std::fs::remove_dir_all(dir);
        }
    });
}

/// A kubeconfig written for one script run, in a private directory of its own; both are
/// removed on drop (and by [`remove_all_now`] before a hard exit).
#[derive(Debug)]
pub struct TempKubeconfig {
    dir: PathBuf,
    path: PathBuf,
}

impl TempKubeconfig {
    /// Writes `config` (as JSON, which kubectl and every client read as YAML) to a new file
    /// of mode 0600 in a new directory of mode 0700 under the temporary directory.
    pub fn write(config: &Config) -> std::io::Result<TempKubeconfig> {
        let text = serde_json::to_vec_pretty(config).map_err(std::io::Error::other)?;
        // A name no one else can take, created 0700 (tempfile's default follows the umask).
        let dir = tempfile::Builder::new()
            .prefix("rollguard-kubeconfig-")
            .permissions(std::fs::Permissions::from_mode(0o700))
            .tempdir()?
            .keep();
        live_files(|files| {
            files.insert(dir.clone());
        });
        let temp = TempKubeconfig {
            path: dir.join("kubeconfig.yaml"),
            dir,
        };
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&temp.path)?;
        file.write_all(&text)?;
        file.flush()?;
        Ok(temp)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for TempKubeconfig {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
        let dir = self.dir.clone();
        live_files(|files| {
            files.remove(&dir);
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::connect::single_context;

    const FULL: &str = r#"
apiVersion: v1
kind: Config
current-context: b
clusters:
  - name: ca
    cluster: {server: "https://a:1"}
  - name: cb
    cluster: {server: "https://b:1"}
users:
  - name: ua
    user: {token: token-a}
  - name: ub
    user: {token: token-b}
contexts:
  - name: a
    context: {cluster: ca, user: ua, namespace: nsa}
  - name: b
    context: {cluster: cb, user: ub}
"#;

    fn full() -> Kubeconfig {
        Kubeconfig::from_yaml(FULL).unwrap_or_default()
    }

    #[test]
    fn only_the_one_context() {
        let one = single_context(&full(), Some("a"), None).unwrap_or_default();
        let text = serde_json::to_string(&one).unwrap_or_default();
        assert!(
            text.contains("https://a:1") && text.contains("token-a"),
            "{text}"
        );
        assert!(
            !text.contains("https://b:1") && !text.contains("token-b"),
            "{text}"
        );
        assert_eq!(one.current_context.as_deref(), Some("a"));
        // None: the current-context.
        let current = single_context(&full(), None, None).unwrap_or_default();
        assert_eq!(current.contexts[0].name, "b");
        assert!(single_context(&full(), Some("zz"), None).is_err());
    }

    #[test]
    fn renamed_parts_merge_without_clashes() {
        let eu = single_context(&full(), Some("a"), Some("eu")).unwrap_or_default();
        let us = single_context(&full(), Some("a"), Some("us")).unwrap_or_default();
        let fleet = merged([&eu, &us]);
        let names: Vec<&str> = fleet.contexts.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, vec!["eu", "us"]);
        assert_eq!(
            fleet.contexts[1]
                .context
                .as_ref()
                .map(|c| c.cluster.as_str()),
            Some("us")
        );
        assert_eq!(fleet.current_context, None);
    }

    #[test]
    fn temp_file_is_private_and_removed() {
        use std::os::unix::fs::PermissionsExt;
        let one = single_context(&full(), Some("a"), None).unwrap_or_default();
        let temp = TempKubeconfig::write(&one).unwrap_or_else(|e| panic!("{e}"));
        let path = temp.path().to_path_buf();
        let mode = std::fs::metadata(&path).map(|m| m.permissions().mode() & 0o777);
        assert_eq!(mode.ok(), Some(0o600));
        let dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
        let dir_mode = std::fs::metadata(&dir).map(|m| m.permissions().mode() & 0o777);
        assert_eq!(dir_mode.ok(), Some(0o700));
        let back = Kubeconfig::read_from(&path).unwrap_or_default();
        assert_eq!(back.contexts.len(), 1);
        drop(temp);
        assert!(!path.exists() && !dir.exists());
    }
}
