//! A minimal plain-HTTP/1.1 keep-alive client for kube-sim, so that the kube-sim figures
//! measure the server and not a heavyweight client.

use std::net::SocketAddr;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

/// Where a plain-HTTP cluster listens and the token it wants.
#[derive(Clone, Debug)]
pub struct Endpoint {
    pub addr: SocketAddr,
    pub token: String,
}

impl Endpoint {
    /// From a kubeconfig written by `kube-sim serve --plain-http` (first cluster).
    pub fn from_kubeconfig(text: &str) -> Result<Endpoint, String> {
        let v: serde_json::Value =
            serde_saphyr::from_str(text).map_err(|e| format!("kubeconfig: {e}"))?;
        let server = v["clusters"][0]["cluster"]["server"]
            .as_str()
            .ok_or("kubeconfig has no server")?;
        let token = v["users"][0]["user"]["token"]
            .as_str()
            .ok_or("kubeconfig has no token")?;
        let host = server
            .strip_prefix("http://")
            .ok_or_else(|| format!("expected a plain-HTTP server, got {server}"))?;
        Ok(Endpoint {
            addr: host.parse().map_err(|e| format!("server {server}: {e}"))?,
            token: token.to_string(),
        })
    }
}

/// One keep-alive connection.
pub struct Conn {
    send: SendRequest<Full<Bytes>>,
    token: String,
}

impl Conn {
    pub async fn open(ep: &Endpoint) -> Result<Conn, String> {
        let stream = TcpStream::connect(ep.addr)
            .await
            .map_err(|e| format!("connect {}: {e}", ep.addr))?;
        let _ = stream.set_nodelay(true);
        let (send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| format!("handshake: {e}"))?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        Ok(Conn {
            send,
            token: ep.token.clone(),
        })
    }

    /// Sends a request and returns the response with its body still streaming.
    pub async fn start(
        &mut self,
        method: &str,
        path: &str,
        content_type: Option<&str>,
        body: Bytes,
    ) -> Result<Response<Incoming>, String> {
        let mut builder = Request::builder()
            .method(method)
            .uri(path)
            .header("host", "127.0.0.1")
            .header("authorization", format!("Bearer {}", self.token))
            .header("accept", "application/json");
        if let Some(ct) = content_type {
            builder = builder.header("content-type", ct);
        }
        let req = builder
            .body(Full::new(body))
            .map_err(|e| format!("request: {e}"))?;
        self.send
            .ready()
            .await
            .map_err(|e| format!("connection: {e}"))?;
        self.send
            .send_request(req)
            .await
            .map_err(|e| format!("{method} {path}: {e}"))
    }

    /// Sends a request and reads the whole answer: (status, body).
    pub async fn call(
        &mut self,
        method: &str,
        path: &str,
        content_type: Option<&str>,
        body: Bytes,
    ) -> Result<(u16, Bytes), String> {
        let resp = self.start(method, path, content_type, body).await?;
        let status = resp.status().as_u16();
        let body = resp
            .into_body()
            .collect()
            .await
            .map_err(|e| format!("{method} {path}: body: {e}"))?
            .to_bytes();
        Ok((status, body))
    }

    /// Server-side apply of a JSON object (JSON is YAML) at `path`; Err unless 200/201.
    pub async fn apply(&mut self, path: &str, object: &serde_json::Value) -> Result<(), String> {
        let body = Bytes::from(serde_json::to_vec(object).map_err(|e| e.to_string())?);
        let url = format!("{path}?fieldManager=bench&force=true");
        let (status, body) = self
            .call("PATCH", &url, Some("application/apply-patch+yaml"), body)
            .await?;
        if status == 200 || status == 201 {
            Ok(())
        } else {
            Err(format!(
                "apply {path}: HTTP {status}: {}",
                String::from_utf8_lossy(&body)
            ))
        }
    }

    /// GET as JSON.
    pub async fn get_json(&mut self, path: &str) -> Result<serde_json::Value, String> {
        let (status, body) = self.call("GET", path, None, Bytes::new()).await?;
        if status != 200 {
            return Err(format!("GET {path}: HTTP {status}"));
        }
        serde_json::from_slice(&body).map_err(|e| format!("GET {path}: {e}"))
    }
}

/// Path of a namespaced object of the core group (`configmaps`) or `apps` (`deployments`).
pub fn object_path(resource: &str, namespace: &str, name: &str) -> String {
    match resource {
        "deployments" => format!("/apis/apps/v1/namespaces/{namespace}/deployments/{name}"),
        _ => format!("/api/v1/namespaces/{namespace}/{resource}/{name}"),
    }
}

/// A small ConfigMap as clients send it.
pub fn config_map(namespace: &str, name: &str, value: u64) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace, "labels": {"app": "bench"}},
        "data": {"value": value.to_string(), "mode": "benchmark", "owner": "team-a"}
    })
}

/// A one-replica Deployment of a good image.
pub fn deployment(namespace: &str, name: &str) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace, "labels": {"app": name}},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{
                    "name": "app",
                    "image": "example.com/bench/app:v1",
                    "ports": [{"containerPort": 8080}],
                    "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}
                }]}
            }
        }
    })
}
