//! A real Prometheus for the checks' tests: started on an ephemeral port with a temporary
//! config and data folder, scraping a small exporter this process serves on loopback whose
//! values per `cluster` label the test sets. The same exporter answers `/healthz/<target>`
//! with a status the test sets, for HTTP probes.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tempfile::TempDir;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The metric the exporter serves, one series per cluster: `error_rate{cluster="canary"}`.
pub const METRIC: &str = "error_rate";

#[derive(Default)]
struct State {
    values: BTreeMap<String, f64>,
    statuses: BTreeMap<String, u16>,
}

/// The exporter: `/metrics` (Prometheus text format) and `/healthz/<target>`.
pub struct Exporter {
    pub port: u16,
    state: Arc<Mutex<State>>,
    task: tokio::task::JoinHandle<()>,
}

impl Exporter {
    /// Serves `values` (cluster -> error rate) until dropped.
    pub async fn start(values: &[(&str, f64)]) -> Exporter {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let state = Arc::new(Mutex::new(State::default()));
        let task = tokio::spawn({
            let state = state.clone();
            async move {
                while let Ok((stream, _)) = listener.accept().await {
                    tokio::spawn(answer(stream, state.clone()));
                }
            }
        });
        let exporter = Exporter { port, state, task };
        for (cluster, value) in values {
            exporter.set(cluster, *value);
        }
        exporter
    }

    pub fn set(&self, cluster: &str, value: f64) {
        self.state
            .lock()
            .expect("state")
            .values
            .insert(cluster.to_string(), value);
    }

    /// `/healthz/<target>` answers `status` (default 200).
    pub fn set_status(&self, target: &str, status: u16) {
        self.state
            .lock()
            .expect("state")
            .statuses
            .insert(target.to_string(), status);
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
}

impl Drop for Exporter {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn answer(mut stream: TcpStream, state: Arc<Mutex<State>>) {
    let mut request = Vec::new();
    let mut buf = [0u8; 4096];
    while !request.windows(4).any(|w| w == b"\r\n\r\n") && request.len() < 65536 {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => request.extend_from_slice(&buf[..n]),
        }
    }
    let text = String::from_utf8_lossy(&request);
    let path = text.split_whitespace().nth(1).unwrap_or("/").to_string();
    let (status, body) = {
        let state = state.lock().expect("state");
        if path.starts_with("/metrics") {
            let mut body = format!("# TYPE {METRIC} gauge\n");
            for (cluster, value) in &state.values {
                body.push_str(&format!("{METRIC}{{cluster=\"{cluster}\"}} {value}\n"));
            }
            (200, body)
        } else if let Some(target) = path.strip_prefix("/healthz/") {
            let status = state.statuses.get(target).copied().unwrap_or(200);
            (
                status,
                format!("{target}: {}\n", if status == 200 { "ok" } else { "down" }),
            )
        } else {
            (404, "not found\n".to_string())
        }
    };
    let response = format!(
        "HTTP/1.1 {status} X\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = stream.write_all(response.as_bytes()).await;
    let _ = stream.shutdown().await;
}

/// A running Prometheus, killed when dropped.
pub struct Prometheus {
    pub url: String,
    child: Option<std::process::Child>,
    _dir: TempDir,
}

impl Prometheus {
    /// Starts Prometheus scraping `exporter` every second and waits until it has its
    /// series. None (after a visible skip line) when the binary is missing; under
    /// ROLLGUARD_REQUIRE_SHARED=1 (.ci/run, which installs it) that fails instead.
    pub async fn start(test: &str, exporter: &Exporter) -> Option<Prometheus> {
        if !crate::harness::needs_program(test, "prometheus", "apt-get install prometheus") {
            return None;
        }
        let dir = tempfile::tempdir().expect("tempdir");
        let config = dir.path().join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n  - job_name: exporter\n    static_configs:\n      - targets: ['127.0.0.1:{}']\n",
                exporter.port
            ),
        )
        .expect("write prometheus.yml");
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let child = std::process::Command::new("prometheus")
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .arg("--log.level=warn")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("prometheus starts");
        let prometheus = Prometheus {
            url: format!("http://127.0.0.1:{port}"),
            child: Some(child),
            _dir: dir,
        };
        let wanted = exporter.state.lock().expect("state").values.len();
        prometheus.wait_for_series(port, wanted).await;
        Some(prometheus)
    }

    /// Waits (at most 60 s) until a query of the metric returns `wanted` series.
    async fn wait_for_series(&self, port: u16, wanted: usize) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        loop {
            let body = get(port, &format!("/api/v1/query?query=count({METRIC})")).await;
            if body.contains(&format!("\"{wanted}\"]")) {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "Prometheus did not get the exporter's {wanted} series within 60 s; last answer: {body}"
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// Stops Prometheus now (the checks then find it down).
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A plain HTTP/1.1 GET on loopback; the whole answer ("" when there is none).
async fn get(port: u16, path: &str) -> String {
    let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)).await else {
        return String::new();
    };
    let request = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
    if stream.write_all(request.as_bytes()).await.is_err() {
        return String::new();
    }
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut out)).await;
    String::from_utf8_lossy(&out).into_owned()
}
