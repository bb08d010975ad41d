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
