//! A decision case: the exact request a phase worker received, which module decided and what
//! (or why it could not), as one JSON document. Recordings, captures and shadow differences
//! are cases; `wasmpilot replay` runs them again and compares.

use crate::diff::{diff, Change};
use crate::pipeline::decision::Decision;
use crate::pipeline::ReconcileError;
use crate::sandbox::{NamedObjects, RequestDigest, SyncRequest};
use crate::worker_text::{bounded, MESSAGE_BYTES};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{Map, Value};
use std::time::Duration;

/// The format of a case; readers refuse others.
pub const CASE_FORMAT: &str = "wasmpilot.io/decision-case/v1";

/// A case could not be made from, or turned back into, a request.
#[derive(Debug, thiserror::Error)]
pub enum CaseError {
    #[error("{what} is not JSON: {source}")]
    NotJson {
        what: String,
        #[source]
        source: serde_json::Error,
    },
    #[error("the case's format is {found:?}, not {CASE_FORMAT:?}")]
    Format { found: String },
}

/// Where a case comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum CaseSource {
    /// A live reconcile, recorded by the host (`wasmpilot run --record-dir`).
    Recorded,
    /// `wasmpilot capture`: the request a live resource would get, decided by its current module.
    Captured,
    /// A shadow module decided differently from the live one on this request.
    Shadow,
}

/// One decision and exactly what it was made from.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DecisionCase {
    pub format: String,
    pub source: CaseSource,
    /// When the decision was made (the host's clock), RFC 3339.
    pub recorded_at: String,
    /// The resource, as `namespace/name` (or `name`), for people and for `--expect-different`.
    pub resource: String,
    /// `sha256:` of the request ([`RequestDigest`]); reproducible from `request`.
    pub input_hash: String,
    /// The digest of the module that decided.
    pub module: String,
    /// Wall time of the worker call, when it was measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_us: Option<u64>,
    /// The trace of the reconcile that decided, when the host exported spans (`--otlp-endpoint`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_id: Option<String>,
    pub request: RecordedRequest,
    pub result: RecordedResult,
    /// For [`CaseSource::Shadow`]: the shadow module and what it decided.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shadow: Option<ShadowResult>,
}

/// The shadow side of a differing case.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ShadowResult {
    pub module: String,
    pub result: RecordedResult,
}

/// A [`SyncRequest`] with its JSON texts embedded verbatim (not re-serialized), so the request
/// read back is byte for byte the one the worker received.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RecordedRequest {
    pub operator: String,
    pub phase: String,
    pub now: String,
    pub resource: Box<RawValue>,
    pub inputs: Vec<RecordedInput>,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct RecordedInput {
    pub name: String,
    pub objects: Vec<Box<RawValue>>,
}

/// What a worker decided, after the host's checks, or why there was no decision.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "camelCase")]
pub enum RecordedResult {
    Decided(DecidedResult),
    /// The worker failed, or the host refused its decision (`reason` as in the Condition).
    Error {
        reason: String,
        message: String,
    },
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DecidedResult {
    pub next_phase: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_info: Option<Map<String, Value>>,
    /// The outputs as the host would apply them (namespace and ownerReference set).
    pub outputs: Vec<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requeue_after_ms: Option<u64>,
}

impl RecordedRequest {
    /// Embeds a request's JSON texts. Fails only on a text that is not JSON (the host builds
    /// them all by serializing, so that is a host bug, not the worker's).
    pub fn of(request: &SyncRequest) -> Result<Self, CaseError> {
        let raw = |what: &str, text: &str| {
            RawValue::from_string(text.to_string()).map_err(|source| CaseError::NotJson {
                what: what.to_string(),
                source,
            })
        };
        Ok(RecordedRequest {
            operator: request.operator.clone(),
            phase: request.phase.clone(),
            now: request.now.clone(),
            resource: raw("the resource", &request.resource)?,
            inputs: request
                .inputs
                .iter()
                .map(|input| {
                    Ok(RecordedInput {
                        name: input.name.clone(),
                        objects: input
                            .objects
                            .iter()
                            .map(|o| raw(&format!("an object of input {}", input.name), o))
                            .collect::<Result<_, CaseError>>()?,
                    })
                })
                .collect::<Result<_, CaseError>>()?,
        })
    }

    /// The request exactly as recorded.
    pub fn to_request(&self) -> SyncRequest {
        SyncRequest {
            operator: self.operator.clone(),
            phase: self.phase.clone(),
            resource: self.resource.get().to_string(),
            inputs: self
                .inputs
                .iter()
                .map(|i| NamedObjects {
                    name: i.name.clone(),
                    objects: i.objects.iter().map(|o| o.get().to_string()).collect(),
                })
                .collect(),
            now: self.now.clone(),
        }
    }
}

impl RecordedResult {
    pub fn of(decision: &Result<Decision, ReconcileError>) -> Self {
        match decision {
            Ok(d) => RecordedResult::Decided(DecidedResult {
                next_phase: d.next_phase.clone(),
                status_info: d.status_info.clone(),
                outputs: d.outputs.iter().map(|o| o.object.clone()).collect(),
                requeue_after_ms: d.requeue_after_ms,
            }),
            Err(e) => RecordedResult::Error {
                reason: e.reason().to_string(),
                message: bounded(&e.to_string(), MESSAGE_BYTES).into_owned(),
            },
        }
    }

    /// The result with every one of `redactor`'s Secret values replaced: what a record keeps.
    pub fn redact(&mut self, redactor: &crate::redaction::Redactor) {
        match self {
            RecordedResult::Decided(d) => {
                d.next_phase = redactor.owned(std::mem::take(&mut d.next_phase));
                if let Some(info) = d.status_info.as_mut() {
                    redactor.json_map(info);
                }
                d.outputs.iter_mut().for_each(|o| redactor.json(o));
            }
            RecordedResult::Error { message, .. } => {
                *message = redactor.owned(std::mem::take(message));
            }
        }
    }

    /// The result as compared: outputs keyed by `Kind/name` (so a reordering or one more output
    /// reads as such, not as every later index changing).
    fn comparable(&self) -> Value {
        match self {
            RecordedResult::Decided(d) => {
                let mut outputs = Map::new();
                for o in &d.outputs {
                    let mut key = format!(
                        "{}/{}",
                        o["kind"].as_str().unwrap_or("?"),
                        o["metadata"]["name"].as_str().unwrap_or("?")
                    );
                    if outputs.contains_key(&key) {
                        key = format!("{key} ({})", o["apiVersion"].as_str().unwrap_or("?"));
                    }
                    outputs.insert(key, o.clone());
                }
                serde_json::json!({
                    "nextPhase": d.next_phase,
                    "statusInfo": d.status_info,
                    "outputs": outputs,
                    "requeueAfterMs": d.requeue_after_ms,
                })
            }
            RecordedResult::Error { reason, message } => {
                serde_json::json!({ "error": { "reason": reason, "message": message } })
            }
        }
    }
}

/// How a candidate's result compares with a recorded one.
#[derive(Clone, Debug, PartialEq)]
pub enum Verdict {
    /// The same decision (or the same error).
    Same,
    /// Another decision; the changes from the recorded result to the candidate's.
    Different(Vec<Change>),
    /// The candidate made no decision where the recorded module did (reason: message).
    Error(String),
}

impl Verdict {
    pub fn label(&self) -> &'static str {
        match self {
            Verdict::Same => "same",
            Verdict::Different(_) => "different",
            Verdict::Error(_) => "error",
        }
    }
}

/// Compares a candidate's result with the recorded one.
pub fn compare(recorded: &RecordedResult, candidate: &RecordedResult) -> Verdict {
    if let (RecordedResult::Decided(_), RecordedResult::Error { reason, message }) =
        (recorded, candidate)
    {
        return Verdict::Error(format!("{reason}: {message}"));
    }
    let changes = diff(&recorded.comparable(), &candidate.comparable());
    if changes.is_empty() {
        Verdict::Same
    } else {
        Verdict::Different(changes)
    }
}

/// The first `max` changes as lines, and how many more there are.
pub fn summarize(changes: &[Change], max: usize) -> String {
    let mut lines: Vec<String> = changes.iter().take(max).map(|c| c.to_string()).collect();
    if changes.len() > max {
        lines.push(format!("… and {} more changes", changes.len() - max));
    }
    lines.join("\n")
}

impl DecisionCase {
    /// A case for `request`, decided by `module` in `duration` with `result`.
    pub fn new(
        source: CaseSource,
        resource: String,
        request: &SyncRequest,
        module: &str,
        result: RecordedResult,
        duration: Option<Duration>,
    ) -> Result<Self, CaseError> {
        Ok(DecisionCase {
            format: CASE_FORMAT.to_string(),
            source,
            recorded_at: crate::pipeline::step::now_rfc3339(),
            resource,
            input_hash: RequestDigest::of_sync(request).to_prefixed_hex(),
            module: module.to_string(),
            duration_us: duration.map(|d| d.as_micros() as u64),
            trace_id: None,
            request: RecordedRequest::of(request)?,
            result,
            shadow: None,
        })
    }

    /// Reads one case (a JSON document), refusing other formats.
    pub fn parse(text: &str) -> Result<Self, CaseError> {
        let case: DecisionCase =
            serde_json::from_str(text).map_err(|source| CaseError::NotJson {
                what: "the case".to_string(),
                source,
            })?;
        if case.format != CASE_FORMAT {
            return Err(CaseError::Format { found: case.format });
        }
        Ok(case)
    }

    /// Whether the recorded input hash is the sha256 of the recorded request (it is, unless the
    /// file was edited or the request was not recorded verbatim).
    pub fn input_hash_reproduces(&self) -> bool {
        RequestDigest::of_sync(&self.request.to_request()).to_prefixed_hex() == self.input_hash
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request() -> SyncRequest {
        SyncRequest {
            operator: "op".into(),
            phase: "Syncing".into(),
            resource:
                r#"{"metadata":{"name":"r","namespace":"ns"},"spec":{"x":1.5e300,"s":"a\"b"}}"#
                    .into(),
            inputs: vec![NamedObjects {
                name: "things".into(),
                objects: vec![r#"{"b":1,"a":[true,null]}"#.into()],
            }],
            now: "2026-11-24T00:00:00Z".into(),
        }
    }

    fn decided(label: &str) -> RecordedResult {
        RecordedResult::Decided(DecidedResult {
            next_phase: "Ready".into(),
            status_info: None,
            outputs: vec![serde_json::json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "c", "labels": {"l": label}},
            })],
            requeue_after_ms: None,
        })
    }

    #[test]
    fn a_case_gives_back_the_request_byte_for_byte() {
        let case = DecisionCase::new(
            CaseSource::Recorded,
            "ns/r".into(),
            &request(),
            "sha256:m",
            decided("a"),
            Some(Duration::from_micros(42)),
        )
        .unwrap();
        for text in [
            serde_json::to_string(&case).unwrap(),
            serde_json::to_string_pretty(&case).unwrap(),
        ] {
            let read = DecisionCase::parse(&text).unwrap();
            let again = read.request.to_request();
            assert_eq!(again.resource, request().resource);
            assert_eq!(again.inputs[0].objects, request().inputs[0].objects);
            assert!(read.input_hash_reproduces());
            assert_eq!(read.result, decided("a"));
        }
    }

    #[test]
    fn an_edited_request_no_longer_matches_its_hash() {
        let case = DecisionCase::new(
            CaseSource::Captured,
            "ns/r".into(),
            &request(),
            "sha256:m",
            decided("a"),
            None,
        )
        .unwrap();
        let text = serde_json::to_string(&case)
            .unwrap()
            .replace("\"b\":1", "\"b\":2");
        assert!(!DecisionCase::parse(&text).unwrap().input_hash_reproduces());
        let other = serde_json::to_string(&case)
            .unwrap()
            .replace(CASE_FORMAT, "v0");
        assert!(DecisionCase::parse(&other)
            .unwrap_err()
            .to_string()
            .contains("not \"wasmpilot.io/decision-case/v1\""));
    }

    #[test]
    fn verdicts_name_the_changed_fields() {
        assert_eq!(compare(&decided("a"), &decided("a")), Verdict::Same);
        let Verdict::Different(changes) = compare(&decided("a"), &decided("b")) else {
            panic!("expected a difference");
        };
        assert_eq!(
            changes[0].to_string(),
            r#"~ outputs["ConfigMap/c"].metadata.labels.l: "a" → "b""#
        );
        let error = RecordedResult::Error {
            reason: "WorkerTrapped".into(),
            message: "boom".into(),
        };
        assert_eq!(
            compare(&decided("a"), &error),
            Verdict::Error("WorkerTrapped: boom".into())
        );
        assert_eq!(compare(&error, &error), Verdict::Same);
        assert_eq!(compare(&error, &decided("a")).label(), "different");
    }
}
