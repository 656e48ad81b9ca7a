//! What the dashboard shows, computed from objects already read: per operator the resources in
//! each phase, those stuck or failing with their Conditions, shadow agreement; one resource's timeline.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Serialize;
use serde_json::Value;

use crate::crd::{ShadowStatus, WasmOperator};
use crate::definition::OperatorDefinition;
use crate::worker_text::bounded;

/// Longest Condition message or reason shown (they hold worker-supplied text).
pub const MAX_MESSAGE: usize = 512;
/// Most resources listed as needing attention per operator (the count says how many in all).
pub const MAX_LISTED: usize = 200;

/// One WasmOperator as the dashboard shows it.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct OperatorOverview {
    pub name: String,
    /// `apiVersion kind` of the resources it manages.
    pub resource: String,
    /// The WasmOperator's own `Ready` condition: status, reason, message.
    pub ready: Option<ConditionView>,
    /// Why the definition could not be read (the rest is then empty).
    pub definition_error: Option<String>,
    /// Why its resources could not be listed.
    pub list_error: Option<String>,
    pub phases: Vec<PhaseCount>,
    /// Resources in a phase the definition does not declare (one with no phase yet is in the
    /// initial phase: its worker is what runs).
    pub unphased: usize,
    pub total: usize,
    /// Stalled, failing or stuck resources, most urgent first (at most [`MAX_LISTED`]).
    pub attention: Vec<ResourceRow>,
    pub attention_total: usize,
    pub shadows: Vec<ShadowStatus>,
    /// The phase graph with the counts (SVG), when the definition is valid.
    #[serde(skip)]
    pub graph_svg: Option<String>,
}

/// Resources in one declared phase.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PhaseCount {
    pub name: String,
    pub is_final: bool,
    pub ready: bool,
    pub count: usize,
}

/// A Condition as shown: text bounded.
#[derive(Clone, Debug, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ConditionView {
    pub type_: String,
    pub status: String,
    pub reason: String,
    pub message: String,
    pub last_transition_time: String,
}

/// Why a resource is listed.
#[derive(Clone, Copy, Debug, Serialize, PartialEq, Eq, PartialOrd, Ord)]
pub enum Attention {
    /// `Stalled=True`: a fatal error, refused outputs or a missing grant; nothing retries.
    Stalled,
    /// `Synced=False`: the last reconcile failed and is being retried.
    Failing,
    /// In a phase that is neither final nor ready for longer than the stuck threshold.
    Stuck,
}

impl Attention {
    pub fn label(self) -> &'static str {
        match self {
            Attention::Stalled => "stalled",
            Attention::Failing => "failing",
            Attention::Stuck => "stuck",
        }
    }
}

/// One resource needing attention.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceRow {
    pub namespace: Option<String>,
    pub name: String,
    pub phase: String,
    pub attention: Attention,
    /// Seconds in the current phase, when known.
    pub in_phase_seconds: Option<u64>,
    pub conditions: Vec<ConditionView>,
}

/// One resource's page: phase, Conditions and `.status.history`.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceDetail {
    pub operator: String,
    pub namespace: Option<String>,
    pub name: String,
    pub generation: Option<i64>,
    pub phase: String,
    pub conditions: Vec<ConditionView>,
    /// Oldest first.
    pub history: Vec<TransitionView>,
}

/// One entry of `.status.history`.
#[derive(Clone, Debug, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct TransitionView {
    pub from: String,
    pub to: String,
    pub time: String,
    pub generation: Option<i64>,
    pub module: Option<String>,
    pub input_hash: Option<String>,
    pub applied: u64,
    pub pruned: u64,
}

fn text(v: &Value, max: usize) -> String {
    bounded(v.as_str().unwrap_or_default(), max).into_owned()
}

/// The Conditions of an object's `.status.conditions`, text bounded.
pub fn conditions(obj: &Value) -> Vec<ConditionView> {
    obj["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .take(16)
        .map(|c| ConditionView {
            type_: text(&c["type"], 64),
            status: text(&c["status"], 16),
            reason: text(&c["reason"], 128),
            message: text(&c["message"], MAX_MESSAGE),
            last_transition_time: text(&c["lastTransitionTime"], 40),
        })
        .collect()
}

fn condition_is(conditions: &[ConditionView], type_: &str, status: &str) -> bool {
    conditions
        .iter()
        .any(|c| c.type_ == type_ && c.status == status)
}

fn parse_time(text: &str) -> Option<jiff::Timestamp> {
    text.parse().ok()
}

/// When the resource entered its current phase: the last history entry into it, else the
/// `Reconciling` condition's last transition, else its creation.
fn entered_phase(obj: &Value, phase: &str) -> Option<jiff::Timestamp> {
    let from_history = obj["status"]["history"]
        .as_array()
        .and_then(|h| h.last())
        .filter(|t| t["to"] == phase)
        .and_then(|t| t["time"].as_str())
        .and_then(parse_time);
    from_history
        .or_else(|| {
            obj["status"]["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|c| c["type"] == "Reconciling")
                .and_then(|c| c["lastTransitionTime"].as_str())
                .and_then(parse_time)
        })
        .or_else(|| {
            obj["metadata"]["creationTimestamp"]
                .as_str()
                .and_then(parse_time)
        })
}

/// The overview of one operator from its WasmOperator, validated definition (or why not) and
/// resources. A resource in a phase neither final nor ready for `stuck_after` is stuck.
pub fn summarize(
    op: &WasmOperator,
    definition: Result<&OperatorDefinition, &(dyn std::error::Error + 'static)>,
    resources: Result<&[Value], &(dyn std::error::Error + 'static)>,
    now: jiff::Timestamp,
    stuck_after: Duration,
) -> OperatorOverview {
    let name = op.metadata.name.clone().unwrap_or_default();
    let ready = op
        .status
        .as_ref()
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == "Ready"))
        .map(|c| ConditionView {
            type_: c.type_.clone(),
            status: c.status.clone(),
            reason: bounded(&c.reason, 128).into_owned(),
            message: bounded(&c.message, MAX_MESSAGE).into_owned(),
            last_transition_time: c.last_transition_time.0.to_string(),
        });
    let mut overview = OperatorOverview {
        name,
        resource: format!("{} {}", op.spec.resource.api_version, op.spec.resource.kind),
        ready,
        definition_error: None,
        list_error: None,
        phases: Vec::new(),
        unphased: 0,
        total: 0,
        attention: Vec::new(),
        attention_total: 0,
        shadows: op
            .status
            .as_ref()
            .map(|s| s.shadows.clone())
            .unwrap_or_default(),
        graph_svg: None,
    };
    let def = match definition {
        Ok(def) => def,
        Err(e) => {
            let e = crate::error_report::one_line(e);
            overview.definition_error = Some(bounded(&e, MAX_MESSAGE).into_owned());
            return overview;
        }
    };
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    let resources = match resources {
        Ok(r) => r,
        Err(e) => {
            let e = crate::error_report::one_line(e);
            overview.list_error = Some(bounded(&e, MAX_MESSAGE).into_owned());
            &[]
        }
    };
    let mut attention = Vec::new();
    for obj in resources {
        // No phase yet: the host runs the initial phase's worker on it, so it is in that one.
        let phase = obj["status"]["phase"]
            .as_str()
            .filter(|p| !p.is_empty())
            .unwrap_or(&def.initial_phase);
        let declared = def.phases.iter().find(|p| p.name == phase);
        match declared {
            Some(p) => *counts.entry(p.name.clone()).or_insert(0) += 1,
            None => overview.unphased += 1,
        }
        let conds = conditions(obj);
        let in_phase = entered_phase(obj, phase)
            .and_then(|t| u64::try_from(now.duration_since(t).as_secs()).ok());
        let settled = declared.is_some_and(|p| p.is_final || p.ready);
        let why = if condition_is(&conds, "Stalled", "True") {
            Some(Attention::Stalled)
        } else if condition_is(&conds, "Synced", "False") {
            Some(Attention::Failing)
        } else if !settled && in_phase.is_some_and(|s| s >= stuck_after.as_secs()) {
            Some(Attention::Stuck)
        } else {
            None
        };
        if let Some(why) = why {
            attention.push(ResourceRow {
                namespace: obj["metadata"]["namespace"].as_str().map(str::to_string),
                name: text(&obj["metadata"]["name"], 253),
                phase: bounded(phase, 63).into_owned(),
                attention: why,
                in_phase_seconds: in_phase,
                conditions: conds,
            });
        }
    }
    overview.total = resources.len();
    overview.attention_total = attention.len();
    attention.sort_by(|a, b| {
        (
            a.attention,
            std::cmp::Reverse(a.in_phase_seconds),
            &a.namespace,
            &a.name,
        )
            .cmp(&(
                b.attention,
                std::cmp::Reverse(b.in_phase_seconds),
                &b.namespace,
                &b.name,
            ))
    });
    attention.truncate(MAX_LISTED);
    overview.attention = attention;
    overview.phases = def
        .phases
        .iter()
        .map(|p| PhaseCount {
            name: p.name.clone(),
            is_final: p.is_final,
            ready: p.ready,
            count: counts.get(&p.name).copied().unwrap_or(0),
        })
        .collect();
    overview.graph_svg = Some(crate::authoring::graph::svg(def, Some(&counts)));
    overview
}

/// A resource's page from its object.
pub fn detail(operator: &str, obj: &Value) -> ResourceDetail {
    let history = obj["status"]["history"]
        .as_array()
        .into_iter()
        .flatten()
        .take(1000)
        .map(|t| TransitionView {
            from: text(&t["from"], 63),
            to: text(&t["to"], 63),
            time: text(&t["time"], 40),
            generation: t["generation"].as_i64(),
            module: t["module"].as_str().map(|m| bounded(m, 80).into_owned()),
            input_hash: t["inputHash"].as_str().map(|m| bounded(m, 80).into_owned()),
            applied: t["applied"].as_u64().unwrap_or(0),
            pruned: t["pruned"].as_u64().unwrap_or(0),
        })
        .collect();
    ResourceDetail {
        operator: operator.to_string(),
        namespace: obj["metadata"]["namespace"].as_str().map(str::to_string),
        name: text(&obj["metadata"]["name"], 253),
        generation: obj["metadata"]["generation"].as_i64(),
        phase: text(&obj["status"]["phase"], 63),
        conditions: conditions(obj),
        history,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A failure to show.
    #[derive(Debug, thiserror::Error)]
    #[error("{0}")]
    struct Failed(&'static str);

    fn operator() -> (WasmOperator, OperatorDefinition) {
        let op: WasmOperator = serde_yaml::from_str(
            r#"
apiVersion: wasmpilot.io/v1alpha1
kind: WasmOperator
metadata: {name: routes}
spec:
  resource: {apiVersion: examples.io/v1, kind: AutoRoute}
  phases:
  - {name: Initializing, initial: true, module: {file: {path: a.wasm}}, next: [Syncing]}
  - {name: Syncing, module: {file: {path: b.wasm}}, next: [Ready]}
  - {name: Ready, ready: true, module: {file: {path: c.wasm}}, next: [Syncing]}
"#,
        )
        .unwrap();
        let def = OperatorDefinition::validate("routes", &op.spec).unwrap();
        (op, def)
    }

    fn route(name: &str, phase: &str, entered: &str, conditions: Value) -> Value {
        json!({"metadata": {"name": name, "namespace": "ns", "creationTimestamp": "2026-01-01T00:00:00Z"},
               "status": {"phase": phase, "conditions": conditions,
                          "history": [{"from": "Initializing", "to": phase, "time": entered,
                                       "module": "sha256:abc", "inputHash": "sha256:def", "applied": 2, "pruned": 0}]}})
    }

    #[test]
    fn counts_per_phase_and_lists_what_needs_attention() {
        let (op, def) = operator();
        let now: jiff::Timestamp = "2026-01-01T01:00:00Z".parse().unwrap();
        let resources = vec![
            route("ok-1", "Ready", "2026-01-01T00:00:00Z", json!([])),
            route("ok-2", "Ready", "2026-01-01T00:00:00Z", json!([])),
            // Long in Syncing, no error: stuck.
            route("slow", "Syncing", "2026-01-01T00:10:00Z", json!([])),
            // Recently in Syncing: not yet stuck.
            route("moving", "Syncing", "2026-01-01T00:59:30Z", json!([])),
            route(
                "broken",
                "Syncing",
                "2026-01-01T00:59:59Z",
                json!([{"type": "Stalled", "status": "True", "reason": "OutputRefused", "message": "x".repeat(5000)}]),
            ),
            route(
                "retrying",
                "Ready",
                "2026-01-01T00:59:59Z",
                json!([{"type": "Synced", "status": "False", "reason": "DeadlineExceeded", "message": "too slow"}]),
            ),
            json!({"metadata": {"name": "new", "namespace": "ns"}}),
            route("renamed", "Gone", "2026-01-01T00:59:30Z", json!([])),
        ];
        let o = summarize(&op, Ok(&def), Ok(&resources), now, Duration::from_secs(300));
        assert_eq!(o.total, 8);
        assert_eq!(o.unphased, 1, "Gone is not declared");
        let counts: Vec<(&str, usize)> = o
            .phases
            .iter()
            .map(|p| (p.name.as_str(), p.count))
            .collect();
        assert_eq!(
            counts,
            [("Initializing", 1), ("Syncing", 3), ("Ready", 3)],
            "a resource with no phase yet is in the initial one"
        );
        let listed: Vec<(&str, Attention)> = o
            .attention
            .iter()
            .map(|r| (r.name.as_str(), r.attention))
            .collect();
        assert_eq!(
            listed,
            [
                ("broken", Attention::Stalled),
                ("retrying", Attention::Failing),
                ("slow", Attention::Stuck)
            ]
        );
        assert_eq!(o.attention[2].in_phase_seconds, Some(50 * 60));
        let message = &o.attention[0].conditions[0].message;
        assert!(message.len() < MAX_MESSAGE + 64 && message.ends_with("bytes truncated)"));
        assert!(o
            .graph_svg
            .as_deref()
            .unwrap_or_default()
            .contains(">3 resources<"));
    }

    #[test]
    fn a_definition_or_list_error_is_reported_not_hidden() {
        let (op, def) = operator();
        let now = jiff::Timestamp::now();
        let o = summarize(
            &op,
            Err(&Failed("bad phases")),
            Ok(&[]),
            now,
            Duration::ZERO,
        );
        assert_eq!(o.definition_error.as_deref(), Some("bad phases"));
        assert!(o.graph_svg.is_none());
        let o = summarize(
            &op,
            Ok(&def),
            Err(&Failed("forbidden")),
            now,
            Duration::ZERO,
        );
        assert_eq!(o.list_error.as_deref(), Some("forbidden"));
        assert_eq!(o.total, 0);
    }

    #[test]
    fn detail_reads_the_history_oldest_first() {
        let obj = route("r", "Ready", "2026-01-01T00:00:00Z", json!([]));
        let d = detail("routes", &obj);
        assert_eq!(d.history.len(), 1);
        assert_eq!(d.history[0].module.as_deref(), Some("sha256:abc"));
        assert_eq!(d.history[0].input_hash.as_deref(), Some("sha256:def"));
        assert_eq!(d.history[0].applied, 2);
    }
}
