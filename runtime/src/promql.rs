//! Metric inputs: a phase's declared PromQL queries, rendered from the resource by explicit field
//! paths and run against Prometheus by the host, handed to the worker as data (samples).

use crate::crd::QuerySpec;
use crate::sandbox::NamedObjects;
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

/// Default per-query timeout.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);

/// The longest a WasmOperator may set `spec.prometheus.timeout` to, and the longest all the
/// queries of one phase step may take together (they run while its worker slot is held).
pub const MAX_TIMEOUT: Duration = Duration::from_secs(10);

/// The largest answer read from Prometheus for one query.
pub const MAX_ANSWER_BYTES: usize = 4 << 20;

/// The longest query sent, once a resource's fields fill its placeholders: the fields are the
/// resource author's text, and the query goes into a URL.
pub const MAX_RENDERED_BYTES: usize = 16 << 10;

/// Bytes of a Prometheus error message kept in a Condition.
const ERROR_MESSAGE_BYTES: usize = 256;

/// A query could not be rendered or answered.
#[derive(Debug, thiserror::Error)]
pub enum QueryError {
    #[error("query {query}: parameter {param} reads {path}, which the resource does not have")]
    MissingField {
        query: String,
        param: String,
        path: String,
    },
    /// The resource's fields made the query longer than the host sends.
    #[error("query {query}: with the resource's fields filled in it is {bytes} bytes, more than {MAX_RENDERED_BYTES}")]
    TooLong { query: String, bytes: usize },
    #[error("query {query}: no Prometheus configured (set `wasmpilot run --prometheus-url` or spec.prometheus.url)")]
    NoPrometheus { query: String },
    #[error("query {query} against {url}: {problem}")]
    Failed {
        query: String,
        url: String,
        problem: String,
    },
    /// Prometheus answered, but not with samples (an error, or an unsupported result).
    #[error("query {query} against {url}: {source}")]
    UnusableAnswer {
        query: String,
        url: String,
        #[source]
        source: AnswerError,
    },
}

/// A query declaration does not hold together. The message is the problem alone, for a
/// `DefinitionError` that names the field.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum QueryDeclarationError {
    #[error("placeholder {{{{{placeholder}}}}} has no entry in params")]
    PlaceholderWithoutParam { placeholder: String },
    #[error("param {param:?} is not used in the query")]
    UnusedParam { param: String },
    #[error("query must not be empty")]
    EmptyQuery,
}

/// A Prometheus `/api/v1/query` answer could not be turned into samples.
#[derive(Debug, thiserror::Error)]
pub enum AnswerError {
    #[error("Prometheus answered {error_type}: {message}")]
    PrometheusError { error_type: String, message: String },
    #[error("sample without a timestamp")]
    SampleWithoutTimestamp,
    #[error("sample without a value")]
    SampleWithoutValue,
    #[error("sample value {raw:?} is not a number")]
    SampleValueNotANumber {
        raw: String,
        #[source]
        source: std::num::ParseFloatError,
    },
    /// `result_type` is the answer's `resultType`, if it has one.
    #[error("unsupported result type {result_type:?} (use an instant vector or scalar query)")]
    UnsupportedResultType { result_type: Option<String> },
}

impl QueryError {
    /// A missing field is the resource's fault (fatal until it changes); Prometheus trouble is transient.
    pub fn is_fatal(&self) -> bool {
        matches!(
            self,
            QueryError::MissingField { .. }
                | QueryError::NoPrometheus { .. }
                | QueryError::TooLong { .. }
        )
    }
}

/// The `{{name}}` placeholders of a template, in order of appearance.
pub fn placeholders(template: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = template;
    while let Some(start) = rest.find("{{") {
        let after = &rest[start + 2..];
        let Some(end) = after.find("}}") else { break };
        out.push(after[..end].trim().to_string());
        rest = &after[end + 2..];
    }
    out
}

/// Checks a query declaration: placeholders and params match one to one.
pub fn check(q: &QuerySpec) -> Result<(), QueryDeclarationError> {
    let used: BTreeSet<String> = placeholders(&q.query).into_iter().collect();
    let declared: BTreeSet<String> = q.params.keys().cloned().collect();
    if let Some(p) = used.difference(&declared).next() {
        return Err(QueryDeclarationError::PlaceholderWithoutParam {
            placeholder: p.clone(),
        });
    }
    if let Some(p) = declared.difference(&used).next() {
        return Err(QueryDeclarationError::UnusedParam { param: p.clone() });
    }
    if q.query.trim().is_empty() {
        return Err(QueryDeclarationError::EmptyQuery);
    }
    Ok(())
}

/// Escapes a value for the inside of a PromQL double-quoted string.
fn escape(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            other => out.push(other),
        }
    }
    out
}

fn field<'a>(resource: &'a Value, path: &str) -> Option<&'a Value> {
    path.trim_start_matches('.')
        .split('.')
        .try_fold(resource, |v, key| v.get(key))
}

/// Renders a query for one resource.
pub fn render(q: &QuerySpec, resource: &Value) -> Result<String, QueryError> {
    let mut out = q.query.clone();
    for (param, path) in &q.params {
        let value = field(resource, path)
            .filter(|v| !v.is_null())
            .ok_or_else(|| QueryError::MissingField {
                query: q.name.clone(),
                param: param.clone(),
                path: path.clone(),
            })?;
        let text = match value {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        let escaped = escape(&text);
        for form in [format!("{{{{{param}}}}}"), format!("{{{{ {param} }}}}")] {
            // Measured before it is built: a long field in many placeholders would be large.
            let uses = out.matches(&form).count();
            let bytes = out.len() - uses * form.len() + uses.saturating_mul(escaped.len());
            if bytes > MAX_RENDERED_BYTES {
                return Err(QueryError::TooLong {
                    query: q.name.clone(),
                    bytes,
                });
            }
            out = out.replace(&form, &escaped);
        }
    }
    Ok(out)
}

/// Converts a Prometheus `/api/v1/query` answer into samples `{labels, value, timestamp}`.
pub fn samples(answer: &Value) -> Result<Vec<Value>, AnswerError> {
    if answer["status"] != "success" {
        return Err(AnswerError::PrometheusError {
            error_type: answer["errorType"]
                .as_str()
                .unwrap_or("an error")
                .to_string(),
            message: crate::worker_text::bound_owned(
                answer["error"]
                    .as_str()
                    .unwrap_or("(no message)")
                    .to_string(),
                ERROR_MESSAGE_BYTES,
            ),
        });
    }
    let sample = |labels: &Value, pair: &Value| -> Result<Value, AnswerError> {
        let ts = pair[0]
            .as_f64()
            .ok_or(AnswerError::SampleWithoutTimestamp)?;
        let raw = pair[1].as_str().ok_or(AnswerError::SampleWithoutValue)?;
        let value: f64 = raw
            .parse()
            .map_err(|source| AnswerError::SampleValueNotANumber {
                raw: raw.to_string(),
                source,
            })?;
        // NaN/Inf are not JSON numbers: pass them as null, the worker decides.
        let value = if value.is_finite() {
            json!(value)
        } else {
            Value::Null
        };
        Ok(json!({"labels": labels, "value": value, "timestamp": ts}))
    };
    let data = &answer["data"];
    match data["resultType"].as_str() {
        Some("vector") => data["result"]
            .as_array()
            .map(|items| {
                items
                    .iter()
                    .map(|i| sample(&i["metric"], &i["value"]))
                    .collect()
            })
            .unwrap_or_else(|| Ok(vec![])),
        Some("scalar") => Ok(vec![sample(&json!({}), &data["result"])?]),
        other => Err(AnswerError::UnsupportedResultType {
            result_type: other.map(str::to_string),
        }),
    }
}

/// Where a phase's queries go.
#[derive(Clone, Copy, Debug)]
pub struct Endpoint<'a> {
    pub url: &'a str,
    /// Per query, at most [`MAX_TIMEOUT`].
    pub timeout: Duration,
    /// Named by the WasmOperator (hostile input): connected to only where the host's egress
    /// policy allows, redirects never followed. The host's own `--prometheus-url` is not.
    pub operator_chosen: bool,
}

/// Runs queries against Prometheus.
#[derive(Clone, Default)]
pub struct Prometheus {
    /// Built at the first query: building it loads the system's trust store (milliseconds a
    /// host's start would spend, though most operators never query).
    http: Arc<std::sync::OnceLock<reqwest::Client>>,
    /// The same for operator-chosen URLs, through the egress policy.
    policed: Arc<std::sync::OnceLock<Result<reqwest::Client, reqwest::Error>>>,
    egress: crate::egress::EgressPolicy,
}

impl Prometheus {
    /// Operator-chosen URLs connect only where `egress` allows (default: public addresses).
    pub fn with_egress(egress: crate::egress::EgressPolicy) -> Self {
        Prometheus {
            egress,
            ..Default::default()
        }
    }

    /// Where operator-chosen URLs may connect (the host's `--allow-fetch-from`).
    pub fn egress(&self) -> &crate::egress::EgressPolicy {
        &self.egress
    }

    fn http(&self) -> &reqwest::Client {
        self.http.get_or_init(|| {
            // Its HTTP client is built without a TLS provider of its own.
            crate::egress::install_crypto_provider();
            reqwest::Client::new()
        })
    }

    fn policed(&self) -> Result<&reqwest::Client, &reqwest::Error> {
        self.policed
            .get_or_init(|| {
                crate::egress::install_crypto_provider();
                self.egress.client_builder(0, |_| Ok(())).build()
            })
            .as_ref()
    }
}

impl Prometheus {
    /// Renders and runs every query of a phase, at time `now` (RFC 3339), all within
    /// [`MAX_TIMEOUT`].
    pub async fn run(
        &self,
        queries: &[QuerySpec],
        resource: &Value,
        endpoint: Option<Endpoint<'_>>,
        now: &str,
    ) -> Result<Vec<NamedObjects>, QueryError> {
        let first = queries.first().map(|q| q.name.clone()).unwrap_or_default();
        let url = endpoint.map(|e| e.url.to_string()).unwrap_or_default();
        tokio::time::timeout(MAX_TIMEOUT, self.run_all(queries, resource, endpoint, now))
            .await
            .map_err(|_| QueryError::Failed {
                query: first,
                url,
                problem: format!("the phase's queries took longer than {MAX_TIMEOUT:?} together"),
            })?
    }

    async fn run_all(
        &self,
        queries: &[QuerySpec],
        resource: &Value,
        endpoint: Option<Endpoint<'_>>,
        now: &str,
    ) -> Result<Vec<NamedObjects>, QueryError> {
        let url = endpoint.map(|e| e.url);
        let timeout = endpoint.map_or(DEFAULT_TIMEOUT, |e| e.timeout.min(MAX_TIMEOUT));
        let operator_chosen = endpoint.is_some_and(|e| e.operator_chosen);
        let mut inputs = Vec::with_capacity(queries.len());
        for q in queries {
            let promql = render(q, resource)?;
            let Some(url) = url else {
                return Err(QueryError::NoPrometheus {
                    query: q.name.clone(),
                });
            };
            let failed = |problem: String| QueryError::Failed {
                query: q.name.clone(),
                url: url.to_string(),
                problem,
            };
            let endpoint = format!("{}/api/v1/query", url.trim_end_matches('/'));
            let endpoint = reqwest::Url::parse_with_params(
                &endpoint,
                &[("query", promql.as_str()), ("time", now)],
            )
            .map_err(|e| failed(format!("invalid URL: {e}")))?;
            let http = if operator_chosen {
                self.egress
                    .check_url(&endpoint)
                    .map_err(|e| failed(e.to_string()))?;
                self.policed()
                    .map_err(|e| failed(format!("HTTP client: {e}")))?
            } else {
                self.http()
            };
            let mut response = http
                .get(endpoint)
                .timeout(timeout)
                .send()
                .await
                // With its causes: why it failed (an address the egress policy refused).
                .map_err(|e| {
                    failed(format!(
                        "{} (timeout {timeout:?})",
                        crate::error_report::one_line(&e)
                    ))
                })?;
            let status = response.status();
            let mut body = Vec::new();
            while let Some(chunk) = response
                .chunk()
                .await
                .map_err(|e| failed(format!("HTTP {status}: {}", e.without_url())))?
            {
                if body.len() + chunk.len() > MAX_ANSWER_BYTES {
                    return Err(failed(format!(
                        "HTTP {status}: the answer is larger than {} MiB",
                        MAX_ANSWER_BYTES >> 20
                    )));
                }
                body.extend_from_slice(&chunk);
            }
            let answer: Value = serde_json::from_slice(&body)
                .map_err(|e| failed(format!("HTTP {status}, not a Prometheus API answer: {e}")))?;
            let objects = samples(&answer).map_err(|source| QueryError::UnusableAnswer {
                query: q.name.clone(),
                url: url.to_string(),
                source,
            })?;
            tracing::debug!(query = %q.name, %promql, samples = objects.len(), "metric query");
            inputs.push(NamedObjects {
                name: q.name.clone(),
                objects: objects.iter().map(Value::to_string).collect(),
            });
        }
        Ok(inputs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn query(q: &str, params: &[(&str, &str)]) -> QuerySpec {
        QuerySpec {
            name: "rate".into(),
            query: q.into(),
            params: params
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<BTreeMap<_, _>>(),
        }
    }

    #[test]
    fn renders_by_field_path_with_promql_escaping_only() {
        let q = query(
            r#"sum(rate(req{app="{{target}}",ns="{{ ns }}"}[1m]))"#,
            &[("target", "spec.target"), ("ns", "metadata.namespace")],
        );
        assert!(check(&q).is_ok());
        let r = json!({"metadata": {"namespace": "prod"}, "spec": {"target": r#"we"b<&>\"#}});
        assert_eq!(
            render(&q, &r).unwrap(),
            r#"sum(rate(req{app="we\"b<&>\\",ns="prod"}[1m]))"#
        );
        let missing = render(&q, &json!({"metadata": {"namespace": "x"}})).unwrap_err();
        assert!(missing.to_string().contains("spec.target"), "{missing}");
        assert!(missing.is_fatal());
        // A long field is refused before the query is built (its size is counted, not made).
        let many = query(&"{{target}}".repeat(400), &[("target", "spec.target")]);
        let long = json!({"spec": {"target": "t".repeat(1 << 20)}});
        let too_long = render(&many, &long).unwrap_err();
        assert!(
            matches!(too_long, QueryError::TooLong { bytes, .. } if bytes == 400 << 20),
            "{too_long}"
        );
        assert!(too_long.to_string().len() < 256, "{too_long}");
        assert!(too_long.is_fatal());
    }

    #[test]
    fn declarations_must_match_placeholders() {
        assert_eq!(
            check(&query("up{job=\"{{job}}\"}", &[]))
                .unwrap_err()
                .to_string(),
            "placeholder {{job}} has no entry in params"
        );
        assert_eq!(
            check(&query("up", &[("job", "spec.job")]))
                .unwrap_err()
                .to_string(),
            "param \"job\" is not used in the query"
        );
        assert_eq!(
            check(&query(" ", &[])),
            Err(QueryDeclarationError::EmptyQuery)
        );
    }

    #[test]
    fn answers_become_samples() {
        let vector = json!({"status": "success", "data": {"resultType": "vector", "result": [
            {"metric": {"code": "200"}, "value": [1700000000.5, "0.97"]},
            {"metric": {"code": "500"}, "value": [1700000000.5, "NaN"]}]}});
        let s = samples(&vector).unwrap();
        assert_eq!(
            s[0],
            json!({"labels": {"code": "200"}, "value": 0.97, "timestamp": 1700000000.5})
        );
        assert_eq!(s[1]["value"], Value::Null);
        let scalar =
            json!({"status": "success", "data": {"resultType": "scalar", "result": [1.0, "3"]}});
        assert_eq!(samples(&scalar).unwrap()[0]["value"], 3.0);
        let error = json!({"status": "error", "errorType": "bad_data", "error": "parse error"});
        assert_eq!(
            samples(&error).unwrap_err().to_string(),
            "Prometheus answered bad_data: parse error"
        );
        let matrix = json!({"status": "success", "data": {"resultType": "matrix", "result": []}});
        assert_eq!(
            samples(&matrix).unwrap_err().to_string(),
            "unsupported result type Some(\"matrix\") (use an instant vector or scalar query)"
        );
        let text =
            json!({"status": "success", "data": {"resultType": "scalar", "result": [1.0, "x"]}});
        assert!(matches!(
            samples(&text),
            Err(AnswerError::SampleValueNotANumber { .. })
        ));
    }
}
