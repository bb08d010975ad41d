//! Starting simulated clusters in-process: store, controllers and API server per cluster.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::controllers::rules::{self, Rule};
use crate::controllers::{self, ControllerContext};
use crate::http::faults::{ConnectionCounter, Connections, CounterSet, Counters, Faults};
use crate::http::server::{self, ClusterState};
use crate::model::clock::Clock;
use crate::sim::kubeconfig;
use crate::sim::tls;
use crate::storage::store::Store;

/// How to start the simulator.
#[derive(Clone, Debug)]
pub struct SimOptions {
    /// Number of clusters, named sim-1 .. sim-N.
    pub clusters: usize,
    /// Simulated time (the controllers' and the kubelet's delays) runs this many times
    /// faster than real time; timestamps in objects stay on the wall clock.
    pub time_scale: f64,
    /// A rules file (YAML) making images behave differently per cluster.
    pub rules_path: Option<PathBuf>,
    /// Rules given directly (added after those from `rules_path`).
    pub rules: Vec<Rule>,
    /// Serve HTTPS (the default) or plain HTTP.
    pub tls: bool,
    /// Serve HTTP/1.1 only: no `h2` offered by ALPN, no HTTP/2 preface accepted (the
    /// default serves both, as kube-apiserver does).
    pub http1_only: bool,
}

impl Default for SimOptions {
    fn default() -> Self {
        Self {
            clusters: 1,
            time_scale: 1.0,
            rules_path: None,
            rules: Vec::new(),
            tls: true,
            http1_only: false,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error("loading rules: {0}")]
    Rules(#[from] rules::RulesError),
    #[error(transparent)]
    Tls(#[from] tls::TlsError),
    #[error("listening on 127.0.0.1 for cluster {cluster}: {source}")]
    Bind {
        cluster: String,
        source: std::io::Error,
    },
    #[error("writing kubeconfig {path}: {source}")]
    WriteKubeconfig {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("--clusters must be at least 1")]
    NoClusters,
}

/// One running simulated cluster.
pub struct Cluster {
    state: Arc<ClusterState>,
    url: String,
    ca_pem: Option<String>,
    tasks: Vec<JoinHandle<()>>,
}

impl Cluster {
    /// `sim-1`, `sim-2`, ...
    pub fn name(&self) -> &str {
        &self.state.name
    }

    /// `https://127.0.0.1:PORT` (or `http://` in plain mode).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The bearer token clients must send (the first one: see [`Cluster::set_tokens`]).
    pub fn token(&self) -> &str {
        &self.state.token
    }

    /// Rotates the credentials: from now on only `tokens` are accepted (what
    /// `POST /_sim/tokens` does); connections already open stay open, as on a real server.
    pub fn set_tokens(&self, tokens: Vec<String>) {
        self.state.set_tokens(tokens);
    }

    /// PEM of the CA that signed the server certificate (HTTPS only).
    pub fn ca_pem(&self) -> Option<&str> {
        self.ca_pem.as_deref()
    }

    pub fn store(&self) -> Arc<Store> {
        self.state.store.clone()
    }

    pub fn set_faults(&self, faults: Faults) {
        self.state.set_faults(faults);
    }

    pub fn faults(&self) -> Faults {
        self.state.faults()
    }

    /// Refuses connections (closing open ones) while down; comes back on the same port.
    pub fn set_down(&self, down: bool) {
        self.state.set_down(down);
    }

    pub fn counters(&self) -> Counters {
        self.state.counters.snapshot()
    }

    /// Every (verb, resource, namespace) this cluster was asked for (discovery aside), since
    /// the start or the last [`Cluster::reset_counters`].
    pub fn access(&self) -> std::collections::BTreeSet<crate::http::faults::AccessKey> {
        self.state.counters.access()
    }

    /// Connections accepted so far and the HTTP version each spoke.
    pub fn connections(&self) -> Connections {
        self.state.connections.snapshot()
    }

    /// Resets the request counters and the connection counts.
    pub fn reset_counters(&self) {
        self.state.counters.reset();
        self.state.connections.reset();
    }

    /// A kubeconfig with just this cluster (context named like the cluster).
    pub fn kubeconfig_yaml(&self) -> String {
        kubeconfig::render(&[self.kubeconfig_entry()])
    }

    fn kubeconfig_entry(&self) -> kubeconfig::Entry<'_> {
        kubeconfig::Entry {
            name: self.name(),
            server: &self.url,
            token: self.token(),
            ca_pem: self.ca_pem.as_deref(),
        }
    }

    fn stop(&mut self) {
        self.state.shutdown.send_replace(true);
        for task in self.tasks.drain(..) {
            task.abort();
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A set of running clusters. Dropping it (or `shutdown`) stops them.
pub struct Sim {
    clusters: Vec<Cluster>,
}

impl Sim {
    /// Starts the clusters; they listen once this returns.
    pub async fn start(opts: SimOptions) -> Result<Sim, SimError> {
        if opts.clusters == 0 {
            return Err(SimError::NoClusters);
        }
        let mut rules = match &opts.rules_path {
            Some(path) => rules::load(path)?,
            None => Vec::new(),
        };
        rules.extend(opts.rules.iter().cloned());
        let rules = Arc::new(rules);
        let identity = if opts.tls {
            Some(tls::generate()?)
        } else {
            None
        };
        let tls_config = identity.as_ref().map(|id| {
            if opts.http1_only {
                let mut config = (*id.config).clone();
                config.alpn_protocols = vec![b"http/1.1".to_vec()];
                Arc::new(config)
            } else {
                id.config.clone()
            }
        });
        let mut clusters = Vec::with_capacity(opts.clusters);
        for i in 1..=opts.clusters {
            let name = format!("sim-{i}");
            let listener = server::bind_ephemeral().map_err(|source| SimError::Bind {
                cluster: name.clone(),
                source,
            })?;
            let address = listener.local_addr().map_err(|source| SimError::Bind {
                cluster: name.clone(),
                source,
            })?;
            let clock = Clock::new(opts.time_scale);
            let store = Store::shared(clock.clone());
            let (down, _) = watch::channel(false);
            let (shutdown, _) = watch::channel(false);
            let state = Arc::new(ClusterState {
                name: name.clone(),
                rules: rules.clone(),
                store: store.clone(),
                token: hex::encode(rand::random::<[u8; 20]>()),
                rotated: RwLock::new(None),
                faults: RwLock::new(Faults::default()),
                counters: CounterSet::default(),
                connections: ConnectionCounter::default(),
                http1_only: opts.http1_only,
                down,
                shutdown,
                address,
                tls: tls_config.clone(),
                event_lines: crate::http::watch::EventLineCache::default(),
                in_flight: Default::default(),
            });
            let scheme = if opts.tls { "https" } else { "http" };
            let listener_task = tokio::spawn(server::run_listener(state.clone(), listener));
            let controller_task = controllers::spawn(
                store,
                ControllerContext {
                    cluster_name: name.clone(),
                    clock,
                    rules: rules.clone(),
                },
            );
            tracing::info!(cluster = %name, "listening on {scheme}://{address}");
            clusters.push(Cluster {
                state,
                url: format!("{scheme}://{address}"),
                ca_pem: identity.as_ref().map(|id| id.ca_pem.clone()),
                tasks: vec![listener_task, controller_task],
            });
        }
        Ok(Sim { clusters })
    }

    pub fn clusters(&self) -> &[Cluster] {
        &self.clusters
    }

    /// The cluster with this name (`sim-2`).
    pub fn cluster(&self, name: &str) -> Option<&Cluster> {
        self.clusters.iter().find(|c| c.name() == name)
    }

    /// One kubeconfig with contexts sim-1 .. sim-N (current: sim-1).
    pub fn kubeconfig_yaml(&self) -> String {
        let entries: Vec<kubeconfig::Entry<'_>> = self
            .clusters
            .iter()
            .map(Cluster::kubeconfig_entry)
            .collect();
        kubeconfig::render(&entries)
    }

    /// Starts the clusters and writes their kubeconfig to `path`: what the demo, the e2e
    /// harness and the benchmarks all begin with.
    pub async fn start_with_kubeconfig(options: SimOptions, path: &Path) -> Result<Sim, SimError> {
        let sim = Sim::start(options).await?;
        sim.write_kubeconfig(path)?;
        Ok(sim)
    }

    pub fn write_kubeconfig(&self, path: &Path) -> Result<(), SimError> {
        std::fs::write(path, self.kubeconfig_yaml()).map_err(|source| SimError::WriteKubeconfig {
            path: path.to_path_buf(),
            source,
        })
    }

    /// Stops every cluster (listeners, connections, controllers).
    pub fn shutdown(mut self) {
        for c in self.clusters.iter_mut() {
            c.stop();
        }
    }

    /// Stops every cluster and returns once what they held is freed (true), or at
    /// `deadline` (false: a task still holds a cluster's state).
    /// Dropping a `Sim` only asks its tasks to stop: the runtime's workers then free the
    /// stores, which for a thousand clusters takes seconds of CPU that would fall on
    /// whatever the caller runs next (a benchmark's next section).
    pub async fn stop(mut self, deadline: Duration) -> bool {
        let until = tokio::time::Instant::now() + deadline;
        for c in self.clusters.iter_mut() {
            c.state.shutdown.send_replace(true);
            for task in std::mem::take(&mut c.tasks) {
                task.abort();
                // Cancelled is the expected outcome; the point is that it has been dropped.
                let _ = tokio::time::timeout_at(until, task).await;
            }
        }
        // Connections and watch streams hold the state too; they end on the shutdown
        // signal (watch streams within their 250 ms tick).
        while tokio::time::Instant::now() < until
            && self
                .clusters
                .iter()
                .any(|c| Arc::strong_count(&c.state) > 1)
        {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let freed = self
            .clusters
            .iter()
            .all(|c| Arc::strong_count(&c.state) == 1);
        drop(self);
        freed
    }
}
