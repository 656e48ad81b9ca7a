//! Where an operator's resources stand, for dashboards and alerts: per declared phase, how many
//! resources are in it and when the one longest there entered it, read from the watch's store.

use crate::definition::OperatorDefinition;
use crate::metrics::{PhaseStateLabels, METRICS};
use kube::api::DynamicObject;
use kube::runtime::reflector::Store;
use std::collections::BTreeMap;
use std::time::Duration;

/// How often the gauges are computed from the store.
pub const REFRESH: Duration = Duration::from_secs(10);

/// Per phase: how many resources, and the earliest time (Unix seconds) one of them entered it.
pub type PhaseCounts = BTreeMap<String, (i64, Option<f64>)>;

/// Counts `resources` by the phase each is in (`.status.phase`, else the initial phase), every
/// declared phase present (0 when empty), with when the one longest there entered it: its last
/// `.status.history` transition into that phase, else its creation.
pub fn count<'a>(
    def: &OperatorDefinition,
    resources: impl IntoIterator<Item = &'a DynamicObject>,
) -> PhaseCounts {
    let mut counts: PhaseCounts = def
        .phases
        .iter()
        .map(|p| (p.name.clone(), (0, None)))
        .collect();
    for resource in resources {
        let status = &resource.data["status"];
        let phase = status["phase"]
            .as_str()
            .filter(|p| !p.is_empty())
            .unwrap_or(&def.initial_phase);
        let Some(entry) = counts.get_mut(phase) else {
            continue;
        };
        entry.0 += 1;
        let entered = status["history"]
            .as_array()
            .and_then(|h| h.iter().rev().find(|t| t["to"] == phase))
            .and_then(|t| t["time"].as_str())
            .map(str::to_string)
            .or_else(|| {
                resource
                    .metadata
                    .creation_timestamp
                    .as_ref()
                    .map(|t| t.0.to_string())
            })
            .and_then(|t| t.parse::<jiff::Timestamp>().ok())
            .map(|t| t.as_millisecond() as f64 / 1000.0);
        if let Some(at) = entered {
            entry.1 = Some(entry.1.map_or(at, |oldest: f64| oldest.min(at)));
        }
    }
    counts
}

fn labels(def: &OperatorDefinition, phase: &str) -> PhaseStateLabels {
    PhaseStateLabels {
        operator: def.name.clone(),
        phase: phase.to_string(),
        ready: def.phase(phase).is_some_and(|p| p.ready).to_string(),
    }
}

/// Sets the operator's gauges from `counts`; a phase that holds no resource has no
/// oldest-entry series.
pub fn export(def: &OperatorDefinition, counts: &PhaseCounts) {
    for (phase, (count, oldest)) in counts {
        let labels = labels(def, phase);
        METRICS.resources.get_or_create(&labels).set(*count);
        match oldest {
            Some(at) => {
                METRICS.phase_oldest_entered.get_or_create(&labels).set(*at);
            }
            None => {
                METRICS.phase_oldest_entered.remove(&labels);
            }
        }
    }
}

/// Removes the operator's series (its controller stopped).
pub fn forget(def: &OperatorDefinition) {
    for phase in &def.phases {
        let labels = labels(def, &phase.name);
        METRICS.resources.remove(&labels);
        METRICS.phase_oldest_entered.remove(&labels);
    }
}

/// Exports the gauges from `store` every [`REFRESH`] until aborted.
pub async fn run(def: OperatorDefinition, store: Store<DynamicObject>) {
    let mut tick = tokio::time::interval(REFRESH);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let state = store.state();
        export(&def, &count(&def, state.iter().map(|o| o.as_ref())));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn object(v: Value) -> DynamicObject {
        serde_json::from_value(v).expect("an object")
    }

    #[test]
    fn resources_are_counted_by_phase_with_the_oldest_entry() {
        let spec: crate::crd::WasmOperatorSpec = serde_json::from_value(json!({
            "resource": {"apiVersion": "examples.io/v1", "kind": "Widget"},
            "phases": [
                {"name": "Syncing", "initial": true, "module": {"file": {"path": "s.wasm"}}},
                {"name": "Ready", "ready": true, "module": {"file": {"path": "r.wasm"}}},
                {"name": "Done", "final": true},
            ],
        }))
        .expect("a spec");
        let def = OperatorDefinition::validate("gauges-test", &spec).expect("valid");
        let new = object(json!({"apiVersion": "examples.io/v1", "kind": "Widget",
            "metadata": {"name": "new", "creationTimestamp": "2026-01-01T00:00:10Z"}}));
        let synced = |name: &str, at: &str| {
            object(json!({"apiVersion": "examples.io/v1", "kind": "Widget",
                "metadata": {"name": name, "creationTimestamp": "2026-01-01T00:00:00Z"},
                "status": {"phase": "Ready", "history": [
                    {"from": "Syncing", "to": "Ready", "time": "2026-01-01T00:00:05Z"},
                    {"from": "Ready", "to": "Syncing", "time": "2026-01-01T00:00:30Z"},
                    {"from": "Syncing", "to": "Ready", "time": at}]}}))
        };
        let resources = [
            new,
            synced("a", "2026-01-01T00:01:40Z"),
            synced("b", "2026-01-01T00:00:40Z"),
        ];
        let counts = count(&def, resources.iter());
        assert_eq!(counts["Syncing"], (1, Some(1_767_225_610.0)));
        // The last entry into Ready counts, not an earlier one.
        assert_eq!(counts["Ready"], (2, Some(1_767_225_640.0)));
        assert_eq!(counts["Done"], (0, None));
        export(&def, &counts);
        let text = METRICS.encode();
        assert!(
            text.contains(
                r#"wasmpilot_resources{operator="gauges-test",phase="Ready",ready="true"} 2"#
            ),
            "{text}"
        );
        assert!(
            text.contains(r#"wasmpilot_phase_oldest_entered_timestamp_seconds{operator="gauges-test",phase="Syncing",ready="false"} 1767225610"#),
            "{text}"
        );
        forget(&def);
        assert!(!METRICS.encode().contains(r#"operator="gauges-test""#));
    }
}
