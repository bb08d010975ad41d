//! kube-sim (issue 2): applies per second, 100 watchers, memory for 10,000 objects.
//! The server is the real `kube-sim serve --plain-http` binary in a child process (pinned to
//! one core with taskset when available); the client is a minimal keep-alive HTTP/1.1 client.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::BodyExt;

use crate::support::http::{self, Conn, Endpoint, HttpError};
use crate::support::procs::{self, KubeSimBuildError};
use crate::support::table::{Row, mib, quantile, why};

const CONNECTIONS: usize = 4;
const APPLY_SECONDS: f64 = 4.0;
const WATCHERS: usize = 100;
const BURST: usize = 500;
// 10,000 stored objects once the controllers add a ReplicaSet, a Pod and 7 Events per
// Deployment.
const STORED_CONFIG_MAPS: usize = 7_500;
const STORED_DEPLOYMENTS: usize = 250;

/// Why a kube-sim figure could not be measured.
#[derive(Debug, thiserror::Error)]
pub enum SimSectionError {
    #[error("kube-sim serve")]
    Spawn(#[source] std::io::Error),
    #[error("no stdout")]
    NoStdout,
    #[error("reading kube-sim's stdout")]
    ReadReady(#[source] std::io::Error),
    #[error("kube-sim printed {0:?} instead of ready")]
    NotReady(String),
    /// Reading the kubeconfig kube-sim wrote.
    #[error(transparent)]
    Kubeconfig(std::io::Error),
    #[error(transparent)]
    Http(#[from] HttpError),
    #[error(transparent)]
    Join(#[from] tokio::task::JoinError),
    #[error("watch: HTTP {0}")]
    WatchStatus(hyper::StatusCode),
    #[error("watch stream")]
    WatchStream(#[source] hyper::Error),
    #[error("only {ready} of {WATCHERS} watches started")]
    WatchesStarted { ready: usize },
    #[error("no /proc status")]
    NoProcStatus,
}

/// A `kube-sim serve` child, stopped on drop.
struct Server {
    child: Child,
    endpoint: Endpoint,
    pinned: bool,
}

impl Server {
    fn start(bin: &Path, dir: &Path, pin: bool) -> Result<Server, SimSectionError> {
        let kubeconfig = dir.join(format!("kubeconfig-{}", rand::random::<u32>()));
        let pinned = pin && procs::on_path("taskset");
        let mut cmd = if pinned {
            let mut c = Command::new("taskset");
            c.args(["-c", "0"]).arg(bin);
            c
        } else {
            Command::new(bin)
        };
        cmd.args(["serve", "--clusters", "1", "--plain-http", "--kubeconfig"])
            .arg(&kubeconfig)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        let mut child = cmd.spawn().map_err(SimSectionError::Spawn)?;
        let stdout = child.stdout.take().ok_or(SimSectionError::NoStdout)?;
        let mut line = String::new();
        BufReader::new(stdout)
            .read_line(&mut line)
            .map_err(SimSectionError::ReadReady)?;
        if line.trim() != "ready" {
            let _ = child.kill();
            let _ = child.wait();
            return Err(SimSectionError::NotReady(line));
        }
        let text = std::fs::read_to_string(&kubeconfig).map_err(SimSectionError::Kubeconfig)?;
        let endpoint = Endpoint::from_kubeconfig(&text)?;
        Ok(Server {
            child,
            endpoint,
            pinned,
        })
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        // SAFETY: signalling our own, not yet reaped child.
        unsafe {
            libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM);
        }
        let _ = self.child.wait();
    }
}

/// `bin`: the release kube-sim binary, built before the section's clock starts.
pub async fn run(scratch: &Path, bin: &Result<PathBuf, KubeSimBuildError>) -> Vec<Row> {
    let bin = match bin {
        Ok(bin) => bin,
        Err(e) => return vec![Row::skipped("kube-sim", why(e))],
    };
    let mut rows = Vec::new();
    match applies_and_watchers(bin, scratch).await {
        Ok(mut r) => rows.append(&mut r),
        Err(e) => rows.push(Row::skipped("applies and watchers", why(&e))),
    }
    match stored_memory(bin, scratch).await {
        Ok(mut r) => rows.append(&mut r),
        Err(e) => rows.push(Row::skipped("10,000 stored objects", why(&e))),
    }
    rows
}

async fn applies_and_watchers(bin: &Path, scratch: &Path) -> Result<Vec<Row>, SimSectionError> {
    let server = Server::start(bin, scratch, true)?;
    let ep = server.endpoint.clone();

    // Warm-up: connections open, the namespace-less path cached, 200 applies.
    let mut conns = Vec::new();
    for _ in 0..CONNECTIONS {
        conns.push(Conn::open(&ep).await?);
    }
    for i in 0..200u64 {
        let name = format!("warm-{}", i % 50);
        conns[0]
            .apply(
                &http::object_path("configmaps", "default", &name),
                &http::config_map("default", &name, i),
            )
            .await?;
    }
    let (mut rows, mut conns) = applies(&server, conns).await?;

    // Watchers: WATCHERS streams on one namespace, then a burst of BURST applies there.
    let ns = "watchbench";
    conns[0]
        .apply(
            &format!("/api/v1/namespaces/{ns}"),
            &serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}),
        )
        .await?;
    let sent: Arc<Mutex<Vec<Option<Instant>>>> = Arc::new(Mutex::new(vec![None; BURST]));
    let (ready_tx, mut ready_rx) = tokio::sync::mpsc::channel::<()>(WATCHERS);
    let watchers: Vec<_> = (0..WATCHERS)
        .map(|_| watcher(ep.clone(), ns, sent.clone(), ready_tx.clone()))
        .collect();
    drop(ready_tx);
    let mut ready = 0;
    while ready < WATCHERS {
        match tokio::time::timeout(Duration::from_secs(20), ready_rx.recv()).await {
            Ok(Some(())) => ready += 1,
            _ => break,
        }
    }
    if ready < WATCHERS {
        return Err(SimSectionError::WatchesStarted { ready });
    }
    // The server subscribes each watch in a task of its own: give them a moment.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let burst_secs = burst(conns, ns, &sent).await?;
    let mut all = Vec::new();
    let mut complete = 0;
    for w in watchers {
        let lat = w.await??;
        if lat.len() == BURST {
            complete += 1;
        }
        all.extend(lat);
    }
    all.sort_by(f64::total_cmp);
    rows.push(Row::goal(
        format!("watchers receiving all {BURST} events of a burst"),
        format!("{WATCHERS} of {WATCHERS}"),
        format!(
            "{complete} of {WATCHERS} ({} deliveries; burst written in {burst_secs:.2} s)",
            all.len()
        ),
        complete == WATCHERS,
    ));
    rows.push(Row::info(
        "  delivery latency p50 / p99 / max (write sent -> event read)",
        format!(
            "{:.1} / {:.1} / {:.1} ms",
            quantile(&all, 0.5) * 1e3,
            quantile(&all, 0.99) * 1e3,
            all.last().copied().unwrap_or(f64::NAN) * 1e3
        ),
    ));
    drop(server);
    Ok(rows)
}

/// Applies: CONNECTIONS loops for APPLY_SECONDS; every apply changes a ConfigMap (1,000
/// names, so the first round creates and later rounds update). Its rows, and the
/// connections back.
async fn applies(
    server: &Server,
    conns: Vec<Conn>,
) -> Result<(Vec<Row>, Vec<Conn>), SimSectionError> {
    let cpu_before = procs::cpu_time(server.pid()).unwrap_or_default();
    let started = Instant::now();
    let until = started + Duration::from_secs_f64(APPLY_SECONDS);
    let mut tasks = Vec::new();
    for (c, mut conn) in conns.into_iter().enumerate() {
        tasks.push(tokio::spawn(async move {
            let mut n = 0u64;
            while Instant::now() < until {
                let name = format!("cm-{c}-{}", n % 250);
                conn.apply(
                    &http::object_path("configmaps", "default", &name),
                    &http::config_map("default", &name, n),
                )
                .await?;
                n += 1;
            }
            Ok::<(u64, Conn), HttpError>((n, conn))
        }));
    }
    let mut applies = 0u64;
    let mut conns = Vec::new();
    for t in tasks {
        let (n, conn) = t.await??;
        applies += n;
        conns.push(conn);
    }
    let wall = started.elapsed().as_secs_f64();
    let cpu = (procs::cpu_time(server.pid()).unwrap_or_default() - cpu_before).as_secs_f64();
    let per_sec = applies as f64 / wall;
    let per_cpu_sec = if cpu > 0.0 {
        applies as f64 / cpu
    } else {
        f64::NAN
    };
    let rows = vec![
        Row::goal(
            format!(
                "SSA applies/s, 1 cluster, {CONNECTIONS} keep-alive conns, server {}",
                if server.pinned {
                    "on 1 core"
                } else {
                    "unpinned"
                }
            ),
            ">= 2000/s",
            format!("{per_sec:.0}/s ({applies} in {wall:.1} s)"),
            per_sec >= 2000.0,
        ),
        Row::info(
            "  same, per second of server CPU (user+sys)",
            format!(
                "{per_cpu_sec:.0}/CPU-s ({:.0} us CPU per apply)",
                cpu * 1e6 / applies.max(1) as f64
            ),
        ),
    ];
    Ok((rows, conns))
}

/// One watch on `ns`'s ConfigMaps, on a connection of its own: says when it is ready, then
/// reads until it has every event of the burst (or 60 s pass); each event's latency from
/// the moment its write was sent (`sent`).
fn watcher(
    ep: Endpoint,
    ns: &'static str,
    sent: Arc<Mutex<Vec<Option<Instant>>>>,
    ready_tx: tokio::sync::mpsc::Sender<()>,
) -> tokio::task::JoinHandle<Result<Vec<f64>, SimSectionError>> {
    tokio::spawn(async move {
        let mut conn = Conn::open(&ep).await?;
        let resp = conn
            .start(
                "GET",
                &format!("/api/v1/namespaces/{ns}/configmaps?watch=true"),
                None,
                Bytes::new(),
            )
            .await?;
        if resp.status() != 200 {
            return Err(SimSectionError::WatchStatus(resp.status()));
        }
        let _ = ready_tx.send(()).await;
        let mut body = resp.into_body();
        let mut buf: Vec<u8> = Vec::new();
        let mut latencies = Vec::with_capacity(BURST);
        let mut seen = vec![false; BURST];
        let deadline = Instant::now() + Duration::from_secs(60);
        while latencies.len() < BURST {
            let left = deadline.saturating_duration_since(Instant::now());
            let frame = match tokio::time::timeout(left, body.frame()).await {
                Ok(Some(Ok(f))) => f,
                Ok(Some(Err(e))) => return Err(SimSectionError::WatchStream(e)),
                Ok(None) | Err(_) => break,
            };
            let Ok(data) = frame.into_data() else {
                continue;
            };
            let now = Instant::now();
            buf.extend_from_slice(&data);
            while let Some(pos) = buf.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = buf.drain(..=pos).collect();
                if let Some(i) = burst_index(&line)
                    && i < BURST
                    && !seen[i]
                {
                    seen[i] = true;
                    let at = sent.lock().map(|s| s[i]).unwrap_or(None);
                    if let Some(at) = at {
                        latencies.push(now.saturating_duration_since(at).as_secs_f64());
                    }
                }
            }
        }
        Ok(latencies)
    })
}

/// The burst: BURST applies into `ns` over the connections, each noting when it was sent.
/// Its duration (seconds).
async fn burst(
    conns: Vec<Conn>,
    ns: &'static str,
    sent: &Arc<Mutex<Vec<Option<Instant>>>>,
) -> Result<f64, SimSectionError> {
    let burst_started = Instant::now();
    let mut writers = Vec::new();
    for (c, mut conn) in conns.into_iter().enumerate() {
        let sent = sent.clone();
        writers.push(tokio::spawn(async move {
            let mut i = c;
            while i < BURST {
                let name = format!("w-{i}");
                if let Ok(mut s) = sent.lock() {
                    s[i] = Some(Instant::now());
                }
                conn.apply(
                    &http::object_path("configmaps", ns, &name),
                    &http::config_map(ns, &name, i as u64),
                )
                .await?;
                i += CONNECTIONS;
            }
            Ok::<(), HttpError>(())
        }));
    }
    for w in writers {
        w.await??;
    }
    Ok(burst_started.elapsed().as_secs_f64())
}

/// `w-123` in a watch event line -> 123.
fn burst_index(line: &[u8]) -> Option<usize> {
    let needle = b"\"name\":\"w-";
    let at = line.windows(needle.len()).position(|w| w == needle)? + needle.len();
    let digits: Vec<u8> = line[at..]
        .iter()
        .take_while(|b| b.is_ascii_digit())
        .copied()
        .collect();
    std::str::from_utf8(&digits).ok()?.parse().ok()
}

async fn stored_memory(bin: &Path, scratch: &Path) -> Result<Vec<Row>, SimSectionError> {
    let server = Server::start(bin, scratch, false)?;
    let ep = server.endpoint.clone();
    let (base_rss, _) = procs::rss_kib(server.pid()).ok_or(SimSectionError::NoProcStatus)?;
    let ns = "store";
    let mut conn = Conn::open(&ep).await?;
    conn.apply(
        &format!("/api/v1/namespaces/{ns}"),
        &serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}),
    )
    .await?;
    let total = STORED_CONFIG_MAPS + STORED_DEPLOYMENTS;
    let mut tasks = Vec::new();
    for c in 0..CONNECTIONS {
        let ep = ep.clone();
        tasks.push(tokio::spawn(async move {
            let mut conn = Conn::open(&ep).await?;
            let mut i = c;
            while i < total {
                if i < STORED_CONFIG_MAPS {
                    let name = format!("cm-{i}");
                    conn.apply(
                        &http::object_path("configmaps", ns, &name),
                        &http::config_map(ns, &name, i as u64),
                    )
                    .await?;
                } else {
                    let name = format!("app-{i}");
                    conn.apply(
                        &http::object_path("deployments", ns, &name),
                        &http::deployment(ns, &name),
                    )
                    .await?;
                }
                i += CONNECTIONS;
            }
            Ok::<(), HttpError>(())
        }));
    }
    for t in tasks {
        t.await??;
    }
    // Let the controllers make every ReplicaSet and pod (bounded wait; the pod list is small).
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let pods = conn
            .get_json(&format!("/api/v1/namespaces/{ns}/pods"))
            .await?;
        if pods["items"].as_array().map_or(0, Vec::len) >= STORED_DEPLOYMENTS
            || Instant::now() > deadline
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    // RSS before the big list answers below (they allocate); the peak so far is beside it.
    let (rss, hwm) = procs::rss_kib(server.pid()).ok_or(SimSectionError::NoProcStatus)?;
    let mut counts = Vec::new();
    for (label, path) in [
        ("configmaps", format!("/api/v1/namespaces/{ns}/configmaps")),
        (
            "deployments",
            format!("/apis/apps/v1/namespaces/{ns}/deployments"),
        ),
        (
            "replicasets",
            format!("/apis/apps/v1/namespaces/{ns}/replicasets"),
        ),
        ("pods", format!("/api/v1/namespaces/{ns}/pods")),
        ("events", format!("/api/v1/namespaces/{ns}/events")),
    ] {
        let list = conn.get_json(&path).await?;
        counts.push((label, list["items"].as_array().map_or(0, Vec::len)));
    }
    let stored: usize = counts.iter().map(|c| c.1).sum();
    let detail = counts
        .iter()
        .map(|(l, n)| format!("{n} {l}"))
        .collect::<Vec<_>>()
        .join(", ");
    Ok(vec![
        Row::goal(
            format!("server VmRSS with {stored} stored objects"),
            "< 200 MiB",
            format!("{} (VmHWM so far {})", mib(rss), mib(hwm)),
            rss < 200 * 1024,
        ),
        Row::info("  objects stored", detail),
        Row::info("  server RSS right after start", mib(base_rss)),
    ])
}
