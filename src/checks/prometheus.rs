//! The Prometheus HTTP API: `GET /api/v1/query?query=...&time=...`, and its JSON answer read
//! into one reading (a value, no data, or an error that says what to do).

use std::time::Duration;

use base64::Engine;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::client::{CallError, HttpClient, snippet};
use super::judge::Reading;
use super::template::percent_encode;
use crate::config::Auth;
use crate::report::redact;

/// The request headers of `auth` (its values taught to the scrubber first).
pub fn auth_headers(auth: &Auth) -> Vec<(http::HeaderName, String)> {
    for secret in auth.secrets() {
        redact::learn_value(secret.as_bytes());
    }
    match auth {
        Auth::None => Vec::new(),
        Auth::Bearer(token) => vec![(
            http::header::AUTHORIZATION,
            format!("Bearer {}", token.reveal()),
        )],
        Auth::Basic { user, password } => {
            let pair = format!("{}:{}", user.reveal(), password.reveal());
            let encoded = base64::engine::general_purpose::STANDARD.encode(pair.as_bytes());
            redact::learn_value(encoded.as_bytes());
            vec![(http::header::AUTHORIZATION, format!("Basic {encoded}"))]
        }
    }
}

/// The URL of an instant query of `query` at `time` (unix seconds) on the server at `base`.
pub fn query_url(base: &str, query: &str, time: f64) -> String {
    format!(
        "{}/api/v1/query?query={}&time={time:.3}",
        base.trim_end_matches('/'),
        percent_encode(query)
    )
}

/// Runs `query` now on the server at `base`, under the retry policy within `deadline`.
pub async fn read(
    client: &HttpClient,
    base: &str,
    query: &str,
    headers: &[(http::HeaderName, String)],
    deadline: Duration,
    cancel: &CancellationToken,
) -> Option<Reading> {
    let now = jiff::Timestamp::now().as_millisecond() as f64 / 1000.0;
    let url = query_url(base, query, now);
    match client.get(&url, headers, deadline, cancel).await {
        Ok(answer) => Some(reading(answer.status, &answer.body)),
        Err(CallError::Cancelled) => None,
        Err(CallError::Status { status, body, .. }) => Some(reading(status, &body)),
        Err(e) => Some(Reading::Error(redact::scrub(&format!("Prometheus: {e}")))),
    }
}

/// An answer of `/api/v1/query`, read. Pure; table-tested below.
pub fn reading(status: u16, body: &str) -> Reading {
    let json: Value = match serde_json::from_str(body) {
        Ok(json) => json,
        Err(_) => {
            return Reading::Error(format!(
                "Prometheus answered {status} with a body that is not its JSON API ({}); is the url the Prometheus server (not Grafana, not a proxy's login page)?",
                snippet(body)
            ));
        }
    };
    if json.get("status").and_then(Value::as_str) != Some("success") {
        let kind = json
            .get("errorType")
            .and_then(Value::as_str)
            .unwrap_or("error");
        let error = json
            .get("error")
            .and_then(Value::as_str)
            .unwrap_or("no message");
        return Reading::Error(redact::scrub(&format!(
            "Prometheus answered {status}: {kind}: {error}"
        )));
    }
    let data = json.get("data").unwrap_or(&Value::Null);
    let result = data.get("result").unwrap_or(&Value::Null);
    match data.get("resultType").and_then(Value::as_str) {
        Some("scalar") => sample_value(result),
        Some("vector") => match result.as_array().map(Vec::as_slice) {
            None | Some([]) => Reading::NoData,
            Some([one]) => sample_value(one.get("value").unwrap_or(&Value::Null)),
            Some(series) => Reading::Error(format!(
                "the query returned {} series, not one: {}; aggregate them (sum, max, avg) or narrow the labels",
                series.len(),
                series
                    .iter()
                    .take(5)
                    .map(|s| labels(s.get("metric").unwrap_or(&Value::Null)))
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
        },
        Some(other) => Reading::Error(format!(
            "the query returned a {other}, not one number; an instant vector or a scalar is needed (drop a [range] selector, aggregate with sum or max)"
        )),
        None => Reading::Error("Prometheus answered without a resultType".into()),
    }
}

/// `[time, "value"]` -> the value.
fn sample_value(pair: &Value) -> Reading {
    match pair
        .get(1)
        .and_then(Value::as_str)
        .map(|v| v.parse::<f64>())
    {
        Some(Ok(v)) => Reading::Value(v),
        _ => Reading::Error(format!(
            "Prometheus answered a sample rollguard cannot read: {pair}"
        )),
    }
}

/// `{cluster="a", code="500"}`.
fn labels(metric: &Value) -> String {
    let pairs: Vec<String> = metric
        .as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| {
                    format!(
                        "{k}={}",
                        v.as_str().map_or(v.to_string(), |s| format!("{s:?}"))
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    format!("{{{}}}", pairs.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_read() {
        let table: &[(u16, &str, Reading)] = &[
            (
                200,
                r#"{"status":"success","data":{"resultType":"vector","result":[{"metric":{"cluster":"canary"},"value":[1700000000.1,"0.2"]}]}}"#,
                Reading::Value(0.2),
            ),
            (
                200,
                r#"{"status":"success","data":{"resultType":"scalar","result":[1700000000.1,"3"]}}"#,
                Reading::Value(3.0),
            ),
            (
                200,
                r#"{"status":"success","data":{"resultType":"vector","result":[]}}"#,
                Reading::NoData,
            ),
            (
                200,
                r#"{"status":"success","data":{"resultType":"vector","result":[{"metric":{"cluster":"a"},"value":[1,"1"]},{"metric":{"cluster":"b"},"value":[1,"2"]}]}}"#,
                Reading::Error("the query returned 2 series, not one: {cluster=\"a\"}, {cluster=\"b\"}; aggregate them (sum, max, avg) or narrow the labels".into()),
            ),
            (
                400,
                r#"{"status":"error","errorType":"bad_data","error":"invalid parameter \"query\": 1:5: parse error"}"#,
                Reading::Error("Prometheus answered 400: bad_data: invalid parameter \"query\": 1:5: parse error".into()),
            ),
            (
                200,
                r#"{"status":"success","data":{"resultType":"matrix","result":[]}}"#,
                Reading::Error("the query returned a matrix, not one number; an instant vector or a scalar is needed (drop a [range] selector, aggregate with sum or max)".into()),
            ),
            (
                502,
                "<html>Bad gateway</html>",
                Reading::Error("Prometheus answered 502 with a body that is not its JSON API (<html>Bad gateway</html>); is the url the Prometheus server (not Grafana, not a proxy's login page)?".into()),
            ),
        ];
        for (status, body, want) in table {
            assert_eq!(reading(*status, body), *want, "{body}");
        }
        assert!(matches!(
            reading(200, r#"{"status":"success","data":{"resultType":"scalar","result":[1,"NaN"]}}"#),
            Reading::Value(v) if v.is_nan()
        ));
    }

    #[test]
    fn the_query_is_encoded_and_the_token_is_scrubbed() {
        assert_eq!(
            query_url("http://p:9090/", "sum(x{a=\"b c\"})", 1.5),
            "http://p:9090/api/v1/query?query=sum%28x%7Ba%3D%22b%20c%22%7D%29&time=1.500"
        );
        let headers = auth_headers(&Auth::Bearer(crate::config::Credential::new(
            "checks-test-token-0451",
        )));
        assert_eq!(headers[0].1, "Bearer checks-test-token-0451");
        assert!(!redact::scrub("said checks-test-token-0451").contains("0451"));
    }
}

/// The client against a scripted server on loopback: retries, auth, scrubbing.
#[cfg(test)]
mod client_tests {
    use super::*;
    use std::sync::{Arc, Mutex};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// Answers each request with the next of `answers` (status, body); records the requests.
    async fn server(answers: Vec<(u16, String)>) -> (String, Arc<Mutex<Vec<String>>>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        tokio::spawn(async move {
            for (status, body) in answers {
                let Ok((mut stream, _)) = listener.accept().await else {
                    return;
                };
                let mut request = Vec::new();
                let mut buf = [0u8; 4096];
                while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                    match stream.read(&mut buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => request.extend_from_slice(&buf[..n]),
                    }
                }
                log.lock()
                    .expect("log")
                    .push(String::from_utf8_lossy(&request).into_owned());
                let answer = format!(
                    "HTTP/1.1 {status} X\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = stream.write_all(answer.as_bytes()).await;
                let _ = stream.shutdown().await;
            }
        });
        (url, seen)
    }

    const ONE: &str = r#"{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1,"0.043"]}]}}"#;

    #[tokio::test]
    async fn a_503_is_retried_and_the_token_is_sent() {
        let (url, seen) = server(vec![(503, "busy".into()), (200, ONE.into())]).await;
        let client = HttpClient::new().expect("client");
        let headers = auth_headers(&Auth::Bearer(crate::config::Credential::new(
            "tok-client-test-1234",
        )));
        let reading = read(
            &client,
            &url,
            "up{a=\"b\"}",
            &headers,
            Duration::from_secs(5),
            &CancellationToken::new(),
        )
        .await;
        assert_eq!(reading, Some(Reading::Value(0.043)));
        let seen = seen.lock().expect("log");
        assert_eq!(seen.len(), 2, "{seen:#?}");
        assert!(
            seen[1].starts_with("GET /api/v1/query?query=up%7Ba%3D%22b%22%7D&time="),
            "{}",
            seen[1]
        );
        assert!(
            seen[1]
                .to_ascii_lowercase()
                .contains("authorization: bearer tok-client-test-1234"),
            "{}",
            seen[1]
        );
    }

    #[tokio::test]
    async fn a_401_is_not_retried_and_its_echoed_credentials_are_scrubbed() {
        let body = r#"{"status":"error","errorType":"unauthorized","error":"bad user reader:pw-client-test-5678"}"#;
        let (url, seen) = server(vec![(401, body.into()), (200, ONE.into())]).await;
        let client = HttpClient::new().expect("client");
        let headers = auth_headers(&Auth::Basic {
            user: crate::config::Credential::new("reader"),
            password: crate::config::Credential::new("pw-client-test-5678"),
        });
        let reading = read(
            &client,
            &url,
            "up",
            &headers,
            Duration::from_secs(5),
            &CancellationToken::new(),
        )
        .await;
        let Some(Reading::Error(text)) = reading else {
            panic!("{reading:?}")
        };
        assert!(
            text.starts_with("Prometheus answered 401: unauthorized: bad user <redacted"),
            "{text}"
        );
        assert!(!text.contains("pw-client-test-5678"), "{text}");
        assert_eq!(seen.lock().expect("log").len(), 1);
        let sent = seen.lock().expect("log")[0].to_ascii_lowercase();
        // base64("reader:pw-client-test-5678")
        assert!(
            sent.contains("authorization: basic cmvhzgvyonb3lwnsawvudc10zxn0ltu2nzg="),
            "{sent}"
        );
    }
}
