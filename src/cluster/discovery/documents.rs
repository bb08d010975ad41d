//! Aggregated discovery documents asked for with `If-None-Match`. A kube-apiserver tags
//! each document with an ETag (the hash of its content) and answers 304 Not Modified, with
//! no body, when the client sends back the tag of the document it has. The clusters of a
//! fleet mostly serve the same documents, so after the first target the others send the
//! tag of the newest document seen and get 304: the `/apis` document is not sent again
//! (18 KB from kube-sim; a real cluster's grows with its CRDs, to hundreds of KB).

use std::sync::{Arc, Mutex, MutexGuard};

use http::header::{ACCEPT, ETAG, IF_NONE_MATCH};
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Limited};
use kube::Client;
use kube::client::Body;
use kube::core::Status;
use kube::core::discovery::v2::ACCEPT_AGGREGATED_DISCOVERY_V2;

/// Documents kept per path (distinct answers of distinct clusters); only the newest one's
/// tag is sent, the one the next cluster most likely serves too.
const KEPT: usize = 8;
/// A larger document is refused (a real one is tens of KB): a hostile server must not make
/// rollguard hold what it sends.
const MAX_DOCUMENT: usize = 32 * 1024 * 1024;

struct Document {
    path: String,
    etag: String,
    text: Arc<str>,
}

/// A document as fetched, and whether the server said the kept one is current (304).
#[derive(Debug)]
pub struct Fetched {
    pub text: String,
    pub not_modified: bool,
}

/// The documents seen, newest last.
pub struct Documents {
    kept: Mutex<Vec<Document>>,
}

/// One cache for the process: a document is the server's, named by its own tag.
pub static DOCUMENTS: Documents = Documents::new();

impl Documents {
    pub const fn new() -> Documents {
        Documents {
            kept: Mutex::new(Vec::new()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Vec<Document>> {
        self.kept.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The newest document kept for `path`: (its tag, its text).
    fn newest(&self, path: &str) -> Option<(String, Arc<str>)> {
        self.lock()
            .iter()
            .rev()
            .find(|d| d.path == path)
            .map(|d| (d.etag.clone(), d.text.clone()))
    }

    fn remember(&self, path: &str, etag: String, text: &str) {
        let mut kept = self.lock();
        kept.retain(|d| !(d.path == path && d.etag == etag));
        if kept.iter().filter(|d| d.path == path).count() >= KEPT
            && let Some(oldest) = kept.iter().position(|d| d.path == path)
        {
            kept.remove(oldest);
        }
        kept.push(Document {
            path: path.to_string(),
            etag,
            text: text.into(),
        });
    }

    /// `path`'s aggregated document, sending the newest kept document's tag: on 304 that
    /// document is the answer. A document that comes with a tag is kept. An error status is
    /// a `kube::Error::Api`, as `Client::request_text` gives it.
    pub async fn fetch(&self, client: &Client, path: &str) -> Result<Fetched, kube::Error> {
        let known = self.newest(path);
        let mut request = Request::get(path).header(ACCEPT, ACCEPT_AGGREGATED_DISCOVERY_V2);
        if let Some((etag, _)) = &known {
            request = request.header(IF_NONE_MATCH, etag.as_str());
        }
        let request = request
            .body(Body::empty())
            .map_err(kube::Error::HttpError)?;
        let response = client.send(request).await?;
        let status = response.status();
        if status == StatusCode::NOT_MODIFIED
            && let Some((_, text)) = known
        {
            return Ok(Fetched {
                text: text.to_string(),
                not_modified: true,
            });
        }
        let etag = response
            .headers()
            .get(ETAG)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let bytes = Limited::new(response.into_body(), MAX_DOCUMENT)
            .collect()
            .await
            .map_err(|e| too_large_or(path, e))?
            .to_bytes();
        let text = String::from_utf8(bytes.to_vec()).map_err(kube::Error::FromUtf8)?;
        if status.is_client_error() || status.is_server_error() {
            return Err(api_error(status, &text));
        }
        if let Some(etag) = etag.filter(|_| status == StatusCode::OK) {
            self.remember(path, etag, &text);
        }
        Ok(Fetched {
            text,
            not_modified: false,
        })
    }
}

/// A body that could not be read: over the cap, said with the path and the cap, or the
/// transport's error as it is.
fn too_large_or(path: &str, e: Box<dyn std::error::Error + Send + Sync>) -> kube::Error {
    if e.is::<http_body_util::LengthLimitError>() {
        return kube::Error::Service(Box::new(std::io::Error::other(format!(
            "the server's {path} discovery document is over the {} MiB rollguard reads (a Kubernetes API server's is tens of KB): is the kubeconfig's server address an API server?",
            MAX_DOCUMENT / (1024 * 1024)
        ))));
    }
    kube::Error::Service(e)
}

/// The error of a status >= 400: the server's `Status` when the body is one, else one made
/// from the text, as kube's client makes it.
fn api_error(status: StatusCode, text: &str) -> kube::Error {
    let status = serde_json::from_str::<Status>(text).unwrap_or_else(|_| {
        Status::failure(text.trim(), "Failed to parse error data").with_code(status.as_u16())
    });
    kube::Error::Api(status.boxed())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Against a cluster: the first fetch keeps the document, the next one sends its tag and
    /// gets 304 (the same text, no body sent); a changed document (a CRD installed) comes
    /// whole again under a new tag.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_known_document_comes_back_as_not_modified_and_a_changed_one_whole() {
        let cluster = crate::util::test_cluster::TestCluster::start().await;
        let client = cluster.client();
        let documents = Documents::new();
        let first = documents.fetch(&client, "/apis").await.expect("fetch");
        assert!(!first.not_modified);
        assert!(first.text.contains("APIGroupDiscoveryList"));
        let again = documents.fetch(&client, "/apis").await.expect("fetch");
        assert!(again.not_modified, "the kept tag is current");
        assert_eq!(again.text, first.text);
        // Another path has its own documents.
        let core = documents.fetch(&client, "/api").await.expect("fetch");
        assert!(!core.not_modified);
        let core_again = documents.fetch(&client, "/api").await.expect("fetch");
        assert!(
            core_again.not_modified,
            "the core group's tag is current too"
        );
        assert_eq!(core_again.text, core.text);

        let crd = serde_json::json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": "widgets.example.com"},
            "spec": {
                "group": "example.com",
                "scope": "Namespaced",
                "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
                "versions": [{"name": "v1", "served": true, "storage": true,
                    "schema": {"openAPIV3Schema": {"type": "object",
                        "x-kubernetes-preserve-unknown-fields": true}}}],
            },
        });
        let create = Request::post("/apis/apiextensions.k8s.io/v1/customresourcedefinitions")
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(crd.to_string().into_bytes())
            .expect("request");
        client
            .request_text(create)
            .await
            .expect("the CRD is created");
        let changed = documents.fetch(&client, "/apis").await.expect("fetch");
        assert!(!changed.not_modified);
        assert!(changed.text.contains("widgets"));
        let (_, newest) = documents.newest("/apis").expect("kept");
        assert_eq!(&*newest, changed.text.as_str());
    }

    #[test]
    fn the_oldest_document_of_a_path_goes_first_and_a_tag_is_kept_once() {
        let documents = Documents::new();
        for i in 0..KEPT + 2 {
            documents.remember("/apis", format!("\"{i}\""), &format!("doc {i}"));
        }
        documents.remember("/api", "\"core\"".into(), "core");
        documents.remember("/apis", "\"9\"".into(), "doc 9");
        let kept = documents.lock();
        let apis: Vec<&str> = kept
            .iter()
            .filter(|d| d.path == "/apis")
            .map(|d| d.etag.as_str())
            .collect();
        assert_eq!(apis.len(), KEPT);
        assert_eq!(apis.first(), Some(&"\"2\""));
        assert_eq!(apis.last(), Some(&"\"9\""));
        drop(kept);
        assert_eq!(
            documents.newest("/api").map(|(tag, _)| tag),
            Some("\"core\"".to_string())
        );
    }

    #[tokio::test]
    async fn a_document_over_the_cap_is_said_with_its_path_and_the_cap() {
        let body = http_body_util::Full::new(bytes::Bytes::from(vec![b' '; 10]));
        let e = Limited::new(body, 4)
            .collect()
            .await
            .expect_err("over the limit");
        let said = too_large_or("/apis", e).to_string();
        assert!(said.contains("/apis") && said.contains("32 MiB"), "{said}");
    }

    #[test]
    fn an_error_status_is_the_servers_status_or_one_made_from_its_text() {
        let body = r#"{"kind":"Status","apiVersion":"v1","status":"Failure","message":"forbidden: no","reason":"Forbidden","code":403}"#;
        let kube::Error::Api(s) = api_error(StatusCode::FORBIDDEN, body) else {
            panic!("an API error");
        };
        assert_eq!((s.code, s.reason.as_str()), (403, "Forbidden"));
        let kube::Error::Api(s) = api_error(StatusCode::BAD_GATEWAY, "<html>bad gateway</html>\n")
        else {
            panic!("an API error");
        };
        assert_eq!(s.code, 502);
        assert_eq!(s.message, "<html>bad gateway</html>");
    }
}
