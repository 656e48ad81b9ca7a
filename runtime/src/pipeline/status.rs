//! Writes what a reconcile decided: the status patch (phase, merged status info, observedGeneration,
//! Conditions, deciding module digest) through the status subresource, and Kubernetes Events.

use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::{DynamicObject, Patch, PatchParams};
use kube::runtime::events::{Event, EventType, Recorder};
use kube::Api;
use serde_json::{json, Map, Value};

/// The condition the host maintains on every resource: whether its last reconcile completed.
pub const SYNCED: &str = "Synced";

/// kstatus's and `kubectl wait`'s condition: True in a final phase, or a phase the definition
/// marks `ready`, with its outputs applied and no error.
pub const READY: &str = "Ready";

/// kstatus's "abnormal-true" condition: True while the resource moves between phases (its
/// reason is the phase it is in).
pub const RECONCILING: &str = "Reconciling";

/// kstatus's "abnormal-true" condition: True when the resource cannot go on by itself (a fatal
/// worker error, a refused output, a missing grant), with that error's reason.
pub const STALLED: &str = "Stalled";

/// A condition to set (upserted by type).
#[derive(Clone, Debug, PartialEq)]
pub struct ConditionUpdate {
    pub type_: &'static str,
    pub status: bool,
    pub reason: String,
    pub message: String,
}

impl ConditionUpdate {
    pub fn new(
        type_: &'static str,
        status: bool,
        reason: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        ConditionUpdate {
            type_,
            status,
            reason: reason.into(),
            message: message.into(),
        }
    }
}

/// The kstatus conditions of a resource now in `phase` (`ready`: final, or marked `ready`)
/// with no error: Ready, Reconciling and Stalled, each set either way so a stale one is cleared.
pub fn progress_conditions(phase: &str, ready: bool) -> [ConditionUpdate; 3] {
    [
        ConditionUpdate::new(
            READY,
            ready,
            if ready { "PhaseReady" } else { phase },
            match ready {
                true => format!("in phase {phase}"),
                false => format!("in phase {phase}, on the way to a ready phase"),
            },
        ),
        ConditionUpdate::new(
            RECONCILING,
            !ready,
            phase,
            match ready {
                true => format!("in ready phase {phase}"),
                false => format!("reconciling phase {phase} (not a ready one)"),
            },
        ),
        ConditionUpdate::new(STALLED, false, phase, "no error"),
    ]
}

/// The kstatus conditions of a resource whose reconcile in `phase` failed with `reason`:
/// `stalled` (it cannot go on by itself) sets Stalled, otherwise Reconciling (retried).
pub fn failure_conditions(
    phase: &str,
    reason: &str,
    message: &str,
    stalled: bool,
) -> [ConditionUpdate; 3] {
    [
        ConditionUpdate::new(READY, false, reason, message),
        ConditionUpdate::new(
            RECONCILING,
            !stalled,
            phase,
            match stalled {
                true => format!("stopped in phase {phase}: {reason}"),
                false => format!("retrying phase {phase}: {reason}"),
            },
        ),
        ConditionUpdate::new(STALLED, stalled, reason, message),
    ]
}

/// Everything the host writes into `.status` after one reconcile.
#[derive(Clone, Debug, Default)]
pub struct StatusUpdate {
    pub phase: Option<String>,
    /// Merged into `.status` with JSON merge patch semantics (null deletes a key).
    pub status_info: Option<Map<String, Value>>,
    pub observed_generation: Option<i64>,
    pub module_digest: Option<String>,
    /// Upserted by type, in this order.
    pub conditions: Vec<ConditionUpdate>,
    /// The generation the conditions speak of, when it is not `observed_generation` (a failed
    /// reconcile leaves `.status.observedGeneration` at the last decision).
    pub condition_generation: Option<i64>,
    /// A phase transition to append to `.status.history`, which keeps the last `history_limit`.
    pub transition: Option<Transition>,
    pub history_limit: usize,
}

/// One entry of `.status.history` (the guest SDK's `Transition` reads it): which code decided
/// a phase change, and from which request.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Transition {
    pub from: String,
    pub to: String,
    pub time: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub generation: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub module: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub input_hash: Option<String>,
    pub applied: u32,
    pub pruned: u32,
}

impl StatusUpdate {
    /// After a worker's decision: the next phase (`ready`: final, or marked ready), its status
    /// info, the generation it saw and the component that decided, with `Synced=True` and the
    /// kstatus conditions ([`progress_conditions`]).
    pub fn phase_completed(
        next: &str,
        ready: bool,
        status_info: Option<Map<String, Value>>,
        observed_generation: Option<i64>,
        module_digest: &str,
    ) -> Self {
        let mut conditions = vec![ConditionUpdate::new(
            SYNCED,
            true,
            "PhaseCompleted",
            format!("now in phase {next}"),
        )];
        conditions.extend(progress_conditions(next, ready));
        StatusUpdate {
            phase: Some(next.to_string()),
            status_info,
            observed_generation,
            module_digest: Some(module_digest.to_string()),
            conditions,
            ..Default::default()
        }
    }

    /// Records `transition` in `.status.history`, keeping the last `limit`.
    pub fn with_transition(mut self, transition: Transition, limit: usize) -> Self {
        self.transition = Some(transition);
        self.history_limit = limit;
        self
    }

    /// A resource in final phase `current` whose spec changed (generation): back to `initial`
    /// (`initial_ready`: marked ready), recorded in the history as the host's own transition (no
    /// module, no request).
    pub fn restart_after_final(
        current: &str,
        initial: &str,
        initial_ready: bool,
        generation: Option<i64>,
        now: &str,
        history_limit: usize,
    ) -> Self {
        let transition = Transition {
            from: current.to_string(),
            to: initial.to_string(),
            time: now.to_string(),
            generation,
            ..Default::default()
        };
        StatusUpdate {
            transition: Some(transition),
            history_limit,
            phase: Some(initial.to_string()),
            conditions: [ConditionUpdate::new(
                SYNCED,
                true,
                "SpecChanged",
                format!(
                    "generation {} changed after final phase {current}; restarting at {initial}",
                    generation.unwrap_or(0)
                ),
            )]
            .into_iter()
            .chain(progress_conditions(initial, initial_ready))
            .collect(),
            ..Default::default()
        }
    }
}

/// Keys the host owns in `.status`; a worker's status info cannot set them.
pub const HOST_KEYS: [&str; 5] = [
    "phase",
    "observedGeneration",
    "conditions",
    "moduleDigest",
    "history",
];

/// Builds the merge patch for `.status`, or `None` when it would change nothing.
pub fn status_patch(current: Option<&Value>, update: &StatusUpdate, now: &str) -> Option<Value> {
    let empty = Value::Object(Map::new());
    let current = current.filter(|v| v.is_object()).unwrap_or(&empty);
    let mut patch = Map::new();
    if let Some(info) = &update.status_info {
        for (k, v) in info {
            if !HOST_KEYS.contains(&k.as_str()) {
                patch.insert(k.clone(), v.clone());
            }
        }
    }
    if let Some(p) = &update.phase {
        patch.insert("phase".into(), json!(p));
    }
    if let Some(g) = update.observed_generation {
        patch.insert("observedGeneration".into(), json!(g));
    }
    if !update.conditions.is_empty() {
        let mut conditions = current.get("conditions").cloned();
        for c in &update.conditions {
            conditions = Some(upsert_condition(
                conditions.as_ref(),
                c,
                update.condition_generation.or(update.observed_generation),
                now,
            ));
        }
        if let Some(conditions) = conditions {
            patch.insert("conditions".into(), conditions);
        }
    }
    if let (Some(t), true) = (&update.transition, update.history_limit > 0) {
        let mut history: Vec<Value> = current
            .get("history")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        history.push(serde_json::to_value(t).unwrap_or(Value::Null));
        let keep = history.len().saturating_sub(update.history_limit);
        patch.insert("history".into(), Value::Array(history.split_off(keep)));
    }
    let mut patch = Value::Object(patch);
    let mut merged = current.clone();
    json_patch::merge(&mut merged, &patch);
    if &merged == current {
        // moduleDigest names the component that made the last change; a worker that only
        // confirms the current state (e.g. a steady phase's first run) writes nothing.
        return None;
    }
    if let Some(d) = &update.module_digest {
        patch["moduleDigest"] = json!(d);
    }
    Some(patch)
}

/// The status `current` becomes with `update` applied (what [`status_patch`] would write), or
/// `None` when the update changes nothing.
pub fn status_after(current: Option<&Value>, update: &StatusUpdate, now: &str) -> Option<Value> {
    let patch = status_patch(current, update, now)?;
    let mut after = current
        .filter(|v| v.is_object())
        .cloned()
        .unwrap_or_else(|| Value::Object(Map::new()));
    json_patch::merge(&mut after, &patch);
    Some(after)
}

/// The JSON merge patch that turns `from` into `to` (objects compared key by key, a key `to`
/// lacks set to null, anything else replaced whole), or `None` when they are equal. Several
/// status updates held in memory are written as one such patch.
pub fn merge_patch_between(from: &Value, to: &Value) -> Option<Value> {
    if from == to {
        return None;
    }
    let (Value::Object(from), Value::Object(to)) = (from, to) else {
        return Some(to.clone());
    };
    let mut patch = Map::new();
    for (key, value) in to {
        match from.get(key) {
            // A null value cannot be set through a merge patch; it is taken as absent.
            Some(old) if !value.is_null() => {
                if let Some(p) = merge_patch_between(old, value) {
                    patch.insert(key.clone(), p);
                }
            }
            _ if !value.is_null() => {
                patch.insert(key.clone(), value.clone());
            }
            _ => {
                if from.get(key).is_some_and(|v| !v.is_null()) {
                    patch.insert(key.clone(), Value::Null);
                }
            }
        }
    }
    for key in from.keys() {
        if !to.contains_key(key) {
            patch.insert(key.clone(), Value::Null);
        }
    }
    (!patch.is_empty()).then_some(Value::Object(patch))
}

/// Replaces the condition of the same type, keeping lastTransitionTime when the status is unchanged.
fn upsert_condition(
    existing: Option<&Value>,
    c: &ConditionUpdate,
    generation: Option<i64>,
    now: &str,
) -> Value {
    let status = if c.status { "True" } else { "False" };
    let mut list: Vec<Value> = existing
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let previous = list.iter().position(|x| x["type"] == c.type_);
    let transition = match previous.map(|i| &list[i]) {
        Some(p) if p["status"] == status => p["lastTransitionTime"].clone(),
        _ => json!(now),
    };
    let message =
        crate::worker_text::bounded(&c.message, crate::worker_text::CONDITION_MESSAGE_BYTES);
    let mut cond = json!({
        "type": c.type_,
        "status": status,
        "reason": c.reason,
        "message": message,
        "lastTransitionTime": transition,
    });
    if let Some(g) = generation {
        cond["observedGeneration"] = json!(g);
    }
    match previous {
        Some(i) => list[i] = cond,
        None => list.push(cond),
    }
    Value::Array(list)
}

/// Applies a status patch, conditional on the resourceVersion the decision was based on, so a
/// decision made from a stale object is never written (the API server answers 409 instead).
/// Returns the object as written.
pub async fn patch_status(
    api: &Api<DynamicObject>,
    name: &str,
    resource_version: Option<&str>,
    status: Value,
) -> Result<DynamicObject, kube::Error> {
    let mut body = json!({ "status": status });
    if let Some(rv) = resource_version {
        body["metadata"] = json!({ "resourceVersion": rv });
    }
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(&body))
        .await
}

/// Publishes an Event on the WasmOperator `operator` with `uid` (see [`publish_event`]).
pub async fn publish_operator_event(
    recorder: &Recorder,
    operator: &str,
    uid: Option<String>,
    warning: bool,
    reason: &str,
    action: &str,
    note: String,
) {
    use crate::crd::WasmOperator;
    use kube::Resource;
    let reference = ObjectReference {
        api_version: Some(WasmOperator::api_version(&()).into_owned()),
        kind: Some(WasmOperator::kind(&()).into_owned()),
        name: Some(operator.to_string()),
        uid,
        // WasmOperators are cluster-scoped; the events API (1.20) insists that the event's
        // namespace matches the object's, so both say `default`.
        namespace: Some("default".into()),
        ..Default::default()
    };
    publish_event(recorder, &reference, warning, reason, action, note).await;
}

/// Whether the API server refused a write for the object's shape (422 Invalid: the body does
/// not fit the schema), which no retry of the same body will change.
pub fn refused_for_shape(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 422)
}

/// Publishes an Event; failures are logged, never fatal to the reconcile.
pub async fn publish_event(
    recorder: &Recorder,
    reference: &ObjectReference,
    warning: bool,
    reason: &str,
    action: &str,
    note: String,
) {
    let event = Event {
        type_: if warning {
            EventType::Warning
        } else {
            EventType::Normal
        },
        reason: reason.to_string(),
        note: Some(truncate(note, 1000)),
        action: action.to_string(),
        secondary: None,
    };
    if let Err(e) = recorder.publish(&event, reference).await {
        tracing::warn!(error = %crate::error_report::Brief(&e), reason, "could not publish event");
    }
}

fn truncate(mut s: String, max: usize) -> String {
    if s.len() > max {
        let mut cut = max;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
        s.push('…');
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn synced(ok: bool, msg: &str) -> ConditionUpdate {
        ConditionUpdate {
            type_: SYNCED,
            status: ok,
            reason: "R".into(),
            message: msg.into(),
        }
    }

    #[test]
    fn status_info_merges_and_host_keys_win() {
        let current = json!({"phase": "Syncing", "keep": 1, "drop": 2});
        let info = json!({"phase": "Hacked", "drop": null, "syncedDeployments": ["a"]});
        let update = StatusUpdate {
            phase: Some("Ready".into()),
            status_info: info.as_object().cloned(),
            observed_generation: Some(3),
            module_digest: Some("sha256:x".into()),
            conditions: vec![synced(true, "ok")],
            ..Default::default()
        };
        let patch = status_patch(Some(&current), &update, "2026-01-01T00:00:00Z").unwrap();
        assert_eq!(patch["phase"], "Ready");
        assert_eq!(patch["drop"], Value::Null);
        assert_eq!(patch["syncedDeployments"], json!(["a"]));
        assert_eq!(patch["conditions"][0]["status"], "True");
        assert_eq!(patch["conditions"][0]["observedGeneration"], 3);
        let mut merged = current.clone();
        json_patch::merge(&mut merged, &patch);
        assert_eq!(merged["keep"], 1);
        assert!(merged.get("drop").is_none());
    }

    /// The kstatus conditions: Ready only in a ready phase, Reconciling while moving on,
    /// Stalled only on a failure that cannot go on by itself; each with the generation.
    #[test]
    fn kstatus_conditions_follow_the_phase_and_the_failure() {
        let of = |patch: &Value, type_: &str| {
            patch["conditions"]
                .as_array()
                .and_then(|l| l.iter().find(|c| c["type"] == type_).cloned())
                .unwrap_or(Value::Null)
        };
        let moving = StatusUpdate::phase_completed("Syncing", false, None, Some(2), "sha256:m");
        let patch = status_patch(None, &moving, "t1").unwrap();
        assert_eq!(of(&patch, SYNCED)["status"], "True");
        assert_eq!(of(&patch, READY)["status"], "False");
        assert_eq!(of(&patch, RECONCILING)["status"], "True");
        assert_eq!(of(&patch, RECONCILING)["reason"], "Syncing");
        assert_eq!(of(&patch, STALLED)["status"], "False");
        assert_eq!(of(&patch, READY)["observedGeneration"], 2);

        let mut current = json!({});
        json_patch::merge(&mut current, &patch);
        let done = StatusUpdate::phase_completed("Ready", true, None, Some(2), "sha256:m");
        let patch = status_patch(Some(&current), &done, "t2").unwrap();
        assert_eq!(of(&patch, READY)["status"], "True");
        assert_eq!(of(&patch, READY)["lastTransitionTime"], "t2");
        assert_eq!(of(&patch, RECONCILING)["status"], "False");
        assert_eq!(
            of(&patch, STALLED)["lastTransitionTime"],
            "t1",
            "unchanged: kept"
        );

        json_patch::merge(&mut current, &patch);
        let mut conditions = vec![ConditionUpdate::new(
            SYNCED,
            false,
            "WorkerFatalError",
            "boom",
        )];
        conditions.extend(failure_conditions(
            "Ready",
            "WorkerFatalError",
            "boom",
            true,
        ));
        let failed = StatusUpdate {
            conditions,
            condition_generation: Some(3),
            ..Default::default()
        };
        let patch = status_patch(Some(&current), &failed, "t3").unwrap();
        assert_eq!(of(&patch, STALLED)["status"], "True");
        assert_eq!(of(&patch, STALLED)["reason"], "WorkerFatalError");
        assert_eq!(of(&patch, STALLED)["observedGeneration"], 3);
        assert_eq!(of(&patch, READY)["status"], "False");
        assert_eq!(of(&patch, RECONCILING)["status"], "False");
        assert!(patch.get("observedGeneration").is_none(), "{patch}");
        let retried = failure_conditions("Syncing", "WorkerDeadlineExceeded", "slow", false);
        assert!(retried[1].status && !retried[2].status, "{retried:?}");
    }

    #[test]
    fn unchanged_status_writes_nothing_and_transition_time_is_kept() {
        let update = StatusUpdate {
            phase: Some("Ready".into()),
            conditions: vec![synced(true, "ok")],
            ..Default::default()
        };
        let first = status_patch(None, &update, "t1").unwrap();
        let mut current = json!({});
        json_patch::merge(&mut current, &first);
        assert!(status_patch(Some(&current), &update, "t2").is_none());

        let changed = StatusUpdate {
            conditions: vec![synced(true, "other message")],
            ..update.clone()
        };
        let second = status_patch(Some(&current), &changed, "t3").unwrap();
        assert_eq!(second["conditions"][0]["lastTransitionTime"], "t1");

        let failed = StatusUpdate {
            conditions: vec![synced(false, "boom")],
            ..update
        };
        let third = status_patch(Some(&current), &failed, "t4").unwrap();
        assert_eq!(third["conditions"][0]["lastTransitionTime"], "t4");
        assert_eq!(third["conditions"][0]["status"], "False");
    }

    #[test]
    fn another_module_confirming_the_state_writes_nothing() {
        let syncing =
            StatusUpdate::phase_completed("Ready", false, None, Some(1), "sha256:syncing");
        let first = status_patch(None, &syncing, "t1").unwrap();
        assert_eq!(first["moduleDigest"], "sha256:syncing");
        let mut current = json!({});
        json_patch::merge(&mut current, &first);
        // Ready's own worker decides "stay Ready": same state, only another digest.
        let ready = StatusUpdate::phase_completed("Ready", false, None, Some(1), "sha256:ready");
        assert!(status_patch(Some(&current), &ready, "t2").is_none());
        // A real change names the module that made it.
        let info = json!({"syncedDeployments": ["a"]});
        let changed = StatusUpdate::phase_completed(
            "Ready",
            false,
            info.as_object().cloned(),
            Some(1),
            "sha256:ready",
        );
        let patch = status_patch(Some(&current), &changed, "t3").unwrap();
        assert_eq!(patch["moduleDigest"], "sha256:ready");
    }

    #[test]
    fn history_keeps_the_last_transitions() {
        let step = |to: &str, n: u32| Transition {
            from: "A".into(),
            to: to.into(),
            time: format!("t{n}"),
            input_hash: Some(format!("sha256:{n}")),
            applied: n,
            ..Default::default()
        };
        let mut current = json!({});
        for n in 0..5 {
            let update =
                StatusUpdate::phase_completed(&format!("P{n}"), false, None, Some(1), "sha256:m")
                    .with_transition(step(&format!("P{n}"), n), 3);
            let patch = status_patch(Some(&current), &update, "now").unwrap();
            json_patch::merge(&mut current, &patch);
        }
        let history = current["history"].as_array().unwrap();
        assert_eq!(history.len(), 3);
        assert_eq!(history[0]["to"], "P2");
        assert_eq!(history[2]["inputHash"], "sha256:4");
        assert_eq!(history[2]["applied"], 4);
        // A worker cannot write the history.
        let forged = StatusUpdate {
            status_info: json!({"history": []}).as_object().cloned(),
            ..Default::default()
        };
        assert!(status_patch(Some(&current), &forged, "now").is_none());
    }

    #[test]
    fn long_notes_are_truncated_on_a_char_boundary() {
        let s = truncate("é".repeat(600), 1001);
        assert!(s.len() <= 1004);
        assert!(s.ends_with('…'));
    }

    #[test]
    fn held_updates_are_written_as_one_patch_that_reaches_the_same_status() {
        let on_server = json!({"phase": "Initializing", "gone": {"a": 1}, "nested": {"x": 1, "y": 2},
                               "list": [1, 2]});
        let now = "2026-01-01T00:00:00Z";
        let first = StatusUpdate::phase_completed("Syncing", false, None, Some(1), "sha256:i");
        let held = status_after(Some(&on_server), &first, now).expect("a change");
        let info = json!({"gone": null, "nested": {"y": 3}, "list": [3], "new": "n"});
        let second = StatusUpdate::phase_completed(
            "Ready",
            true,
            info.as_object().cloned(),
            Some(1),
            "sha256:s",
        );
        let last = status_after(Some(&held), &second, now).expect("a change");
        let patch = merge_patch_between(&on_server, &last).expect("a patch");
        assert_eq!(patch["gone"], Value::Null, "a key removed is set to null");
        assert_eq!(
            patch["nested"],
            json!({"y": 3}),
            "objects are patched key by key"
        );
        let mut written = on_server.clone();
        json_patch::merge(&mut written, &patch);
        assert_eq!(
            written, last,
            "one patch reaches what the held updates made"
        );
        assert_eq!(written["phase"], "Ready");
        assert_eq!(written["moduleDigest"], "sha256:s");
        assert!(merge_patch_between(&last, &last).is_none());
        assert!(
            status_after(Some(&last), &second, now).is_none(),
            "the same update again changes nothing"
        );
    }
}
