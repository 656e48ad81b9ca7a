//! CanaryDeployment's Rollback phase: all traffic back to the primary, the canary scaled to
//! zero, the revision recorded as failed (not analysed again until the target changes); then
//! Waiting for the next revision.

use canary_types::phases::rollback::{Export, Inputs, Next, Outcome, Worker};
use canary_types::{
    deployment, find, revision, revision_annotation, status_patch, template_source,
    virtual_service, CanaryDeployment, CanaryDeploymentStatus, InvalidSpec, Names, Role,
    RolloutResult, Settings, StatusField, ROLLED_BACK,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use wasmpilot_guest::{Context, WorkerError};

/// Returns the canary Deployment (its spec kept, zero replicas) and the VirtualService at
/// 100/0; the primary is left as it is. Records the result and the reason.
#[derive(Default)]
pub struct Rollback;

impl Worker for Rollback {
    type Resource = CanaryDeployment;

    fn sync(
        &self,
        ctx: &Context,
        cd: CanaryDeployment,
        inputs: Inputs,
    ) -> Result<Outcome, WorkerError> {
        Settings::from_spec(&cd.spec).map_err(invalid)?;
        let names = Names::of(&cd).map_err(invalid)?;
        let status = cd.status.clone().unwrap_or_default();
        let deployments = inputs.deployments()?;

        // Keep what the canary runs (scaled to zero): after a rollback it shows what failed.
        // Without a canary Deployment, one is made from the target, scaled to zero.
        let (source, source_revision) = match find(&deployments, &names.canary)
            .and_then(|d| Some((template_source(d).ok()?, revision_annotation(d)?.to_owned())))
        {
            Some(found) => found,
            None => {
                let target = find(&deployments, &names.target).ok_or_else(|| {
                    WorkerError::retryable(format!(
                        "neither Deployment {} nor the target {} exists: nothing to scale down",
                        names.canary, names.target
                    ))
                })?;
                let spec = template_source(target).map_err(invalid)?;
                (spec, revision(&spec.template))
            }
        };
        let canary = deployment(&names, Role::Canary, source, 0, &source_revision);
        let routes = virtual_service(&cd, &names, 0).map_err(invalid)?;

        let failed = status
            .canary_revision
            .clone()
            .unwrap_or_else(|| source_revision.clone());
        let reason = match status.last_measurement.as_ref() {
            Some(m) => match m.success_rate {
                Some(rate) => format!(
                    "success rate {rate:.4} below {} at canary weight {}%",
                    cd.spec.success_threshold, m.canary_weight
                ),
                None => format!(
                    "no traffic measured by the end of the analysis period ({})",
                    cd.spec.analysis_period
                ),
            },
            None => "rolled back before any measurement".to_owned(),
        };
        ctx.info(
            "rolling back the canary",
            &[("revision", &failed), ("reason", &reason)],
        );
        let patch = CanaryDeploymentStatus {
            failed_revision: Some(failed.clone()),
            canary_weight: Some(0),
            last_result: Some(RolloutResult {
                result: ROLLED_BACK.to_owned(),
                revision: failed.clone(),
                time: Time(ctx.now()),
                reason: reason.clone(),
            }),
            message: Some(format!(
                "revision {failed} rolled back ({reason}); waiting for a new revision"
            )),
            ..CanaryDeploymentStatus::default()
        };
        Ok(Outcome::next(Next::Waiting)
            .deployment(&canary)?
            .virtual_service(&routes)?
            .status(status_patch(&patch, &[StatusField::StartedAt])?))
    }
}

fn invalid(err: InvalidSpec) -> WorkerError {
    WorkerError::fatal(format!("invalid CanaryDeployment: {err}"))
}

wasmpilot_guest::export!(phase = Export<Rollback>);

#[cfg(test)]
#[allow(dead_code)]
mod fixtures {
    include!("../../testdata/fixtures.rs");
}

#[cfg(test)]
mod tests {
    use super::fixtures::*;
    use super::*;
    use canary_types::canary_weight_of;
    use serde_json::{json, Value};
    use wasmpilot_guest::testing::{FailedRun, SyncReport, SyncTest};

    fn run(cd: Value, deployments: &[Value]) -> Result<SyncReport, FailedRun> {
        SyncTest::new(cd)
            .input("deployments", deployments)
            .now(NOW)
            .run(&Export(Rollback))
    }

    fn rolling_back(rate: Value) -> Value {
        canary_with(json!({
            "phase": "Rollback", "primaryRevision": rev(1), "initializedGeneration": 1,
            "canaryRevision": rev(2), "startedAt": STARTED, "canaryWeight": 20,
            "lastMeasurement": { "time": NOW, "successRate": rate, "canaryWeight": 20 },
        }))
    }

    fn assert_rolled_back(report: &SyncReport, canary_image: &str) {
        assert_eq!(report.next_phase, "Waiting");
        let kinds: Vec<(&str, &str)> = report
            .outputs
            .iter()
            .map(|o| {
                (
                    o["kind"].as_str().unwrap(),
                    o["metadata"]["name"].as_str().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            kinds,
            [("Deployment", "web-canary"), ("VirtualService", "web")],
            "the primary is not touched"
        );
        let canary = report.output("Deployment", "web-canary").unwrap();
        assert_eq!(canary["spec"]["replicas"], 0);
        assert_eq!(image(canary), canary_image);
        let vs = report.output("VirtualService", "web").unwrap();
        assert_eq!(canary_weight_of(vs), Some(0));
        assert_eq!(vs["spec"]["http"][0]["route"][0]["weight"], 100);
    }

    #[test]
    fn scales_the_canary_down_and_records_why() {
        let deployments = [
            target(2),
            managed(Role::Primary, 1, 2),
            managed(Role::Canary, 2, 2),
        ];
        let report = run(rolling_back(json!(0.5)), &deployments).unwrap();
        assert_rolled_back(&report, "registry.example.com/web:2");
        let status = report.status.unwrap();
        assert_eq!(status["failedRevision"], rev(2));
        assert_eq!(status["canaryWeight"], 0);
        assert_eq!(status["startedAt"], Value::Null);
        assert!(status.get("primaryRevision").is_none(), "unchanged");
        let result = &status["lastResult"];
        assert_eq!(result["result"], "RolledBack");
        assert_eq!(result["revision"], rev(2));
        assert_eq!(
            result["reason"],
            "success rate 0.5000 below 0.99 at canary weight 20%"
        );
        assert!(status["message"]
            .as_str()
            .unwrap()
            .contains("waiting for a new revision"));
    }

    #[test]
    fn no_traffic_is_a_reason_too() {
        let deployments = [target(2), managed(Role::Canary, 2, 2)];
        let report = run(rolling_back(Value::Null), &deployments).unwrap();
        let reason = &report.status.unwrap()["lastResult"]["reason"];
        assert!(reason.as_str().unwrap().starts_with("no traffic measured"));
    }

    #[test]
    fn without_a_canary_deployment_one_is_made_from_the_target_at_zero() {
        let report = run(rolling_back(json!(0.5)), &[target(2)]).unwrap();
        assert_rolled_back(&report, "registry.example.com/web:2");

        let failed = run(rolling_back(json!(0.5)), &[other()]).unwrap_err();
        assert!(failed.error.is_retryable());
        assert!(failed.error.message().contains("nothing to scale down"));
    }
}
