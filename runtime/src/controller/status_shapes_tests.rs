//! Every WasmOperator status the host writes, checked against the CRD's own schema as the API
//! server checks it: the status the merge patch leaves must fit `status` of the CRD.
//! Kubernetes 1.20's validator refuses an empty string where the schema says `type: string`
//! without `nullable` (it takes the zero value for null): a failed shadow's `module: ""` was
//! refused that way on every write, so `status.shadows` never reported it.

use crate::controller::manager::{loading_patch, report_patch, Failure};
use crate::controller::shadow::{counts_patch, initial_counts};
use crate::crd::{ShadowStatus, WasmOperator};
use kube::CustomResourceExt;
use serde_json::{json, Value};
use std::collections::BTreeMap;

/// Why `value` does not fit `schema` (OpenAPI v3 as a CRD states it), by field path.
fn violations(schema: &Value, value: &Value, path: &str, found: &mut Vec<String>) {
    let nullable = schema["nullable"] == true;
    let empty_string = value.as_str().is_some_and(str::is_empty);
    if value.is_null() || (empty_string && schema["type"] == "string") {
        if !nullable {
            found.push(format!(
                "{path}: null (or \"\") where the schema wants {}",
                schema["type"]
            ));
        }
        return;
    }
    let fits = match schema["type"].as_str() {
        Some("string") => value.is_string(),
        Some("integer") => value.is_i64() || value.is_u64(),
        Some("number") => value.is_number(),
        Some("boolean") => value.is_boolean(),
        Some("array") => value.is_array(),
        Some("object") => value.is_object(),
        _ => true,
    };
    if !fits {
        found.push(format!("{path}: {value} is not of type {}", schema["type"]));
        return;
    }
    if let Some(items) = value.as_array() {
        for (i, item) in items.iter().enumerate() {
            violations(&schema["items"], item, &format!("{path}[{i}]"), found);
        }
    }
    if let Some(fields) = value.as_object() {
        for required in schema["required"].as_array().into_iter().flatten() {
            let name = required.as_str().unwrap_or_default();
            if !fields.contains_key(name) {
                found.push(format!("{path}.{name}: required"));
            }
        }
        for (name, v) in fields {
            let field = if let Some(s) = schema["properties"].get(name) {
                s
            } else if schema["additionalProperties"].is_object() {
                &schema["additionalProperties"]
            } else {
                // Unknown fields are pruned by the API server, not refused.
                continue;
            };
            violations(field, v, &format!("{path}.{name}"), found);
        }
    }
}

/// The status after merge-patching `patch` onto `op`, checked against the CRD.
fn check(op: &WasmOperator, patch: &Value, what: &str) -> Value {
    let crd = serde_json::to_value(WasmOperator::crd()).expect("the CRD");
    let schema = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"];
    let mut object = serde_json::to_value(op).expect("the WasmOperator");
    json_patch::merge(&mut object, patch);
    let mut found = Vec::new();
    violations(schema, &object["status"], "status", &mut found);
    assert!(
        found.is_empty(),
        "{what}: the API server would refuse {found:?} in {patch}"
    );
    object["status"].clone()
}

fn operator(status: Option<Value>) -> WasmOperator {
    serde_json::from_value(json!({
        "apiVersion": "wasmpilot.io/v1alpha1", "kind": "WasmOperator",
        "metadata": {"name": "autoroute", "generation": 3},
        "spec": {"resource": {"apiVersion": "examples.io/v1", "kind": "AutoRoute"},
                 "phases": [{"name": "Syncing", "initial": true,
                             "module": {"file": {"path": "s.wasm"}},
                             "shadow": {"file": {"path": "c.wasm", "sha256": "0".repeat(64)}}}]},
        "status": status,
    }))
    .expect("a WasmOperator")
}

#[test]
fn the_schema_check_refuses_what_the_api_server_refused() {
    // Premise: the check sees what Kubernetes 1.20 refuses (its message for the shadow that
    // did not load: `status.shadows.module: Invalid value: "null": … must be of type string`;
    // `module` is optional now, so here `phase`, which is not).
    let refused = json!({"status": {"shadows": [
        {"phase": "", "same": 0, "different": 0, "errors": 0, "message": "x"}]}});
    let crd = serde_json::to_value(WasmOperator::crd()).expect("the CRD");
    let schema = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"];
    let mut found = Vec::new();
    violations(schema, &refused["status"], "status", &mut found);
    assert_eq!(
        found,
        ["status.shadows[0].phase: null (or \"\") where the schema wants \"string\""]
    );
}

#[test]
fn every_wasmoperator_status_the_host_writes_fits_its_crd() {
    let now = "2026-11-26T00:00:00Z";
    let digests = BTreeMap::from([("Syncing".to_string(), format!("sha256:{}", "a".repeat(64)))]);

    // Never started: the first load failed.
    let never = operator(None);
    let failed = report_patch(
        &never,
        Some(Failure {
            reason: "ModuleDigestMismatch",
            retried: true,
        }),
        "phase Syncing: sha256 mismatch",
        &BTreeMap::new(),
        now,
    )
    .expect("a status to write");
    let after_failure = check(&never, &failed, "an operator that never started");
    // kstatus reads Reconciling and Stalled: a failure the host retries is in progress.
    let condition = |status: &Value, type_: &str| {
        status["conditions"]
            .as_array()
            .and_then(|cs| cs.iter().find(|c| c["type"] == type_))
            .map(|c| (c["status"].clone(), c["reason"].clone()))
    };
    assert_eq!(
        condition(&after_failure, "Reconciling"),
        Some((json!("True"), json!("ModuleDigestMismatch")))
    );
    assert_eq!(
        condition(&after_failure, "Stalled").map(|c| c.0),
        Some(json!("False"))
    );

    // Running, after that failure.
    let running = report_patch(
        &operator(Some(after_failure)),
        None,
        "controller running for AutoRoute",
        &digests,
        now,
    )
    .expect("a status to write");
    let running_status = check(&never, &running, "a running operator");
    for type_ in ["Reconciling", "Stalled"] {
        assert_eq!(
            condition(&running_status, type_),
            Some((json!("False"), json!("ControllerRunning"))),
            "{type_}"
        );
    }

    // Its shadow counts: one loaded, one that did not load (no module), then counted.
    let loaded = BTreeMap::from([("Syncing".to_string(), format!("sha256:{}", "b".repeat(64)))]);
    let not_loaded = BTreeMap::from([(
        "Ready".to_string(),
        "shadow not loaded (ModuleDigestMismatch): sha256 mismatch".to_string(),
    )]);
    let mut counts: Vec<ShadowStatus> = initial_counts(loaded, not_loaded).into_values().collect();
    let with_shadows = operator(Some(running_status));
    let status = check(
        &with_shadows,
        &counts_patch(&counts),
        "shadows, one not loaded",
    );
    assert!(status["shadows"][0].get("module").is_none(), "{status}");
    assert_eq!(
        status["shadows"][1]["module"],
        format!("sha256:{}", "b".repeat(64))
    );
    counts[1].same = 4;
    counts[1].different = 1;
    counts[1].last_difference = Some(format!("{now} team-a/r1"));
    let status = check(&with_shadows, &counts_patch(&counts), "shadow counts");

    // Reloaded after a failure while shadows are reported; then the shadow removed from the
    // spec, which clears the counts.
    let reloading = operator(Some(status.clone()));
    let failed_again = report_patch(
        &reloading,
        Some(Failure {
            reason: "InvalidDefinition",
            retried: false,
        }),
        "spec.resource: not served",
        &BTreeMap::new(),
        now,
    )
    .expect("a status to write");
    let stalled = check(
        &reloading,
        &failed_again,
        "a load failure with shadows reported",
    );
    // One that waits for an edit: Stalled, so kstatus says Failed.
    assert_eq!(
        condition(&stalled, "Stalled"),
        Some((json!("True"), json!("InvalidDefinition")))
    );
    assert_eq!(
        condition(&stalled, "Reconciling").map(|c| c.0),
        Some(json!("False"))
    );
    let mut unshadowed = operator(Some(status));
    unshadowed.spec.phases[0].shadow = None;
    let cleared = report_patch(
        &unshadowed,
        None,
        "controller running for AutoRoute",
        &digests,
        now,
    )
    .expect("a status to write");
    let status = check(&unshadowed, &cleared, "shadows cleared");
    assert!(status.get("shadows").is_none(), "{status}");
}

/// A load begun: kstatus's Reconciling (progressing) for the generation loading; Ready and the
/// modules of a definition still running stay; once said, it is not written again.
#[test]
fn a_load_begun_is_reported_as_reconciling_and_fits_the_crd() {
    let now = "2026-12-01T00:00:00Z";
    let digests = BTreeMap::from([("Syncing".to_string(), format!("sha256:{}", "a".repeat(64)))]);
    let condition = |status: &Value, type_: &str| {
        status["conditions"]
            .as_array()
            .and_then(|cs| cs.iter().find(|c| c["type"] == type_))
            .cloned()
    };

    let new = operator(None);
    let loading = loading_patch(&new, now).expect("a status to write");
    let status = check(&new, &loading, "a first load begun");
    let reconciling = condition(&status, "Reconciling").expect("Reconciling");
    assert_eq!(
        (&reconciling["status"], &reconciling["reason"]),
        (&json!("True"), &json!("Loading"))
    );
    assert_eq!(reconciling["observedGeneration"], json!(3), "{status}");
    assert!(condition(&status, "Ready").is_none(), "{status}");
    assert!(status.get("observedGeneration").is_none(), "{status}");
    assert!(
        loading_patch(&operator(Some(status)), now).is_none(),
        "said once"
    );
    // A failure being retried already says Reconciling (and why): its retries write nothing.
    let failed = report_patch(
        &new,
        Some(Failure {
            reason: "ModuleFetchFailed",
            retried: true,
        }),
        "phase Syncing: the registry did not answer",
        &BTreeMap::new(),
        now,
    )
    .expect("a failure");
    let retried = operator(Some(check(&new, &failed, "a failure retried")));
    assert!(
        loading_patch(&retried, now).is_none(),
        "a retry of a failure"
    );

    // A new generation of a running operator: its Ready and modules stay while it loads.
    let running = report_patch(&new, None, "controller running", &digests, now).expect("running");
    let running = check(&new, &running, "a running operator");
    let edited = operator(Some(running));
    let loading = loading_patch(&edited, now).expect("a status to write");
    let status = check(&edited, &loading, "a swap's load begun");
    assert_eq!(
        condition(&status, "Ready").map(|c| c["status"].clone()),
        Some(json!("True"))
    );
    assert_eq!(
        condition(&status, "Reconciling").map(|c| c["reason"].clone()),
        Some(json!("Loading"))
    );
    assert_eq!(
        status["modules"]["Syncing"],
        json!(format!("sha256:{}", "a".repeat(64)))
    );
}

#[test]
fn the_sharding_status_replicas_write_fits_the_crd() {
    let op = operator(None);
    let first = crate::controller::buckets::sharding_patch("pod-a", 16, &[0, 3, 5], 210, &[]);
    let status = check(&op, &first, "a replica's first share");
    assert_eq!(
        status["sharding"]["replicas"]["pod-a"]["buckets"],
        json!([0, 3, 5])
    );
    // A second replica's write keeps the first's entry (merge patch); a replica gone is removed.
    let op = operator(Some(status));
    let second =
        crate::controller::buckets::sharding_patch("pod-b", 16, &[1], 40, &["pod-a".to_string()]);
    let status = check(&op, &second, "a second replica, the first gone");
    assert!(
        status["sharding"]["replicas"].get("pod-a").is_none(),
        "{status}"
    );
    assert_eq!(status["sharding"]["replicas"]["pod-b"]["resources"], 40);
    let third = crate::controller::buckets::sharding_patch("pod-c", 16, &[], 0, &[]);
    let status = check(
        &operator(Some(status)),
        &third,
        "a replica holding nothing yet",
    );
    assert_eq!(
        status["sharding"]["replicas"].as_object().map(|m| m.len()),
        Some(2)
    );
}
