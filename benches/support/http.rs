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

/// Why a request to kube-sim, or reading where it listens, failed.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    #[error("kubeconfig")]
    Kubeconfig(#[source] serde_saphyr::Error),
    #[error("kubeconfig has no server")]
    NoServer,
    #[error("kubeconfig has no token")]
    NoToken,
    #[error("expected a plain-HTTP server, got {0}")]
    NotPlain(String),
    #[error("server {server}")]
    Address {
        server: String,
        #[source]
        source: std::net::AddrParseError,
    },
    #[error("connect {addr}")]
    Connect {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("handshake")]
    Handshake(#[source] hyper::Error),
    #[error("request")]
    Request(#[source] hyper::http::Error),
    #[error("connection")]
    Connection(#[source] hyper::Error),
    #[error("{method} {path}")]
    Send {
        method: String,
        path: String,
        #[source]
        source: hyper::Error,
    },
    #[error("{method} {path}: body")]
    Body {
        method: String,
        path: String,
        #[source]
        source: hyper::Error,
    },
    /// The object to apply could not be written as JSON.
    #[error(transparent)]
    Encode(serde_json::Error),
    #[error("apply {path}: HTTP {status}: {body}")]
    Rejected {
        path: String,
        status: u16,
        body: String,
    },
    #[error("GET {path}: HTTP {status}")]
    Status { path: String, status: u16 },
    #[error("GET {path}")]
    Decode {
        path: String,
        #[source]
        source: serde_json::Error,
    },
}

/// Where a plain-HTTP cluster listens and the token it wants.
#[derive(Clone, Debug)]
pub struct Endpoint {
    pub addr: SocketAddr,
    pub token: String,
}

impl Endpoint {
    /// From a kubeconfig written by `kube-sim serve --plain-http` (first cluster).
    pub fn from_kubeconfig(text: &str) -> Result<Endpoint, HttpError> {
        let v: serde_json::Value = serde_saphyr::from_str(text).map_err(HttpError::Kubeconfig)?;
        let server = v["clusters"][0]["cluster"]["server"]
            .as_str()
            .ok_or(HttpError::NoServer)?;
        let token = v["users"][0]["user"]["token"]
            .as_str()
            .ok_or(HttpError::NoToken)?;
        let host = server
            .strip_prefix("http://")
            .ok_or_else(|| HttpError::NotPlain(server.to_string()))?;
        Ok(Endpoint {
            addr: host.parse().map_err(|source| HttpError::Address {
                server: server.to_string(),
                source,
            })?,
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
    pub async fn open(ep: &Endpoint) -> Result<Conn, HttpError> {
        let stream = TcpStream::connect(ep.addr)
            .await
            .map_err(|source| HttpError::Connect {
                addr: ep.addr,
                source,
            })?;
        let _ = stream.set_nodelay(true);
        let (send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(HttpError::Handshake)?;
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
    ) -> Result<Response<Incoming>, HttpError> {
        let mut builder = Request::builder()
            .method(method)
            .uri(path)
            .header("host", "127.0.0.1")
            .header("authorization", format!("Bearer {}", self.token))
            .header("accept", "application/json");
        if let Some(ct) = content_type {
            builder = builder.header("content-type", ct);
        }
        let req = builder.body(Full::new(body)).map_err(HttpError::Request)?;
        self.send.ready().await.map_err(HttpError::Connection)?;
        self.send
            .send_request(req)
            .await
            .map_err(|source| HttpError::Send {
                method: method.to_string(),
                path: path.to_string(),
                source,
            })
    }

    /// Sends a request and reads the whole answer: (status, body).
    pub async fn call(
        &mut self,
        method: &str,
        path: &str,
        content_type: Option<&str>,
        body: Bytes,
    ) -> Result<(u16, Bytes), HttpError> {
        let resp = self.start(method, path, content_type, body).await?;
        let status = resp.status().as_u16();
        let body = resp
            .into_body()
            .collect()
            .await
            .map_err(|source| HttpError::Body {
                method: method.to_string(),
                path: path.to_string(),
                source,
            })?
            .to_bytes();
        Ok((status, body))
    }

    /// Server-side apply of a JSON object (JSON is YAML) at `path`; Err unless 200/201.
    pub async fn apply(&mut self, path: &str, object: &serde_json::Value) -> Result<(), HttpError> {
        let body = Bytes::from(serde_json::to_vec(object).map_err(HttpError::Encode)?);
        let url = format!("{path}?fieldManager=bench&force=true");
        let (status, body) = self
            .call("PATCH", &url, Some("application/apply-patch+yaml"), body)
            .await?;
        if status == 200 || status == 201 {
            Ok(())
        } else {
            Err(HttpError::Rejected {
                path: path.to_string(),
                status,
                body: String::from_utf8_lossy(&body).into_owned(),
            })
        }
    }

    /// GET as JSON.
    pub async fn get_json(&mut self, path: &str) -> Result<serde_json::Value, HttpError> {
        let (status, body) = self.call("GET", path, None, Bytes::new()).await?;
        if status != 200 {
            return Err(HttpError::Status {
                path: path.to_string(),
                status,
            });
        }
        serde_json::from_slice(&body).map_err(|source| HttpError::Decode {
            path: path.to_string(),
            source,
        })
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
