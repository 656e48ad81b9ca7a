//! CanaryDeployment's Promoting phase: the primary takes the analysed canary's spec, the canary
//! is scaled to zero, all traffic goes back to the primary; then Waiting for the next revision.

use canary_types::phases::promoting::{Export, Inputs, Next, Outcome, Worker};
use canary_types::{
    deployment, find, replicas_of, revision, revision_annotation, status_patch, template_source,
    virtual_service, CanaryDeployment, CanaryDeploymentStatus, InvalidSpec, Names, Role,
    RolloutResult, Settings, StatusField, PROMOTED,
};
use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use wasmpilot_guest::{Context, WorkerError};

/// Returns the primary (now the analysed revision), the canary (same spec, zero replicas) and
/// the VirtualService at 100/0, and records the result.
#[derive(Default)]
pub struct Promoting;

impl Worker for Promoting {
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
        let Some(promoted) = status.canary_revision.clone() else {
            return Err(WorkerError::fatal(
                "status.canaryRevision is not set: there is no analysed revision to promote",
            ));
        };
        let deployments = inputs.deployments()?;
        let target = find(&deployments, &names.target);
        let source = analysed_spec(&deployments, &names, target, &promoted)?;
        let primary = deployment(
            &names,
            Role::Primary,
            source,
            replicas_of(target),
            &promoted,
        );
        let canary = deployment(&names, Role::Canary, source, 0, &promoted);
        let routes = virtual_service(&cd, &names, 0).map_err(invalid)?;

        let reason = match status
            .last_measurement
            .as_ref()
            .and_then(|m| m.success_rate)
        {
            Some(rate) => format!(
                "success rate {rate:.4} held at or above {} for {}",
                cd.spec.success_threshold, cd.spec.analysis_period
            ),
            None => format!("analysis period {} completed", cd.spec.analysis_period),
        };
        ctx.info(
            "promoting the canary",
            &[("revision", &promoted), ("primary", &names.primary)],
        );
        let patch = CanaryDeploymentStatus {
            primary_revision: Some(promoted.clone()),
            canary_weight: Some(0),
            last_result: Some(RolloutResult {
                result: PROMOTED.to_owned(),
                revision: promoted.clone(),
                time: Time(ctx.now()),
                reason,
            }),
            message: Some(format!(
                "revision {promoted} promoted to {}; waiting for a new revision",
                names.primary
            )),
            ..CanaryDeploymentStatus::default()
        };
        Ok(Outcome::next(Next::Waiting)
            .deployment(&primary)?
            .deployment(&canary)?
            .virtual_service(&routes)?
            .status(status_patch(&patch, &[StatusField::StartedAt])?))
    }
}

/// The spec that was analysed: the canary Deployment's, if it runs `revision`; else the
/// target's, if it still is that revision.
fn analysed_spec<'a>(
    deployments: &'a [Deployment],
    names: &Names,
    target: Option<&'a Deployment>,
    revision_wanted: &str,
) -> Result<&'a DeploymentSpec, WorkerError> {
    let canary = find(deployments, &names.canary)
        .filter(|d| revision_annotation(d) == Some(revision_wanted))
        .and_then(|d| template_source(d).ok());
    if let Some(spec) = canary {
        return Ok(spec);
    }
    let from_target = target
        .and_then(|t| template_source(t).ok())
        .filter(|spec| revision(&spec.template) == revision_wanted);
    from_target.ok_or_else(|| {
        WorkerError::retryable(format!(
            "neither Deployment {} nor the target {} runs revision {revision_wanted} any more: nothing to promote from",
            names.canary, names.target
        ))
    })
}

fn invalid(err: InvalidSpec) -> WorkerError {
    WorkerError::fatal(format!("invalid CanaryDeployment: {err}"))
}

wasmpilot_guest::export!(phase = Export<Promoting>);

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
            .run(&Export(Promoting))
    }

    fn promoting() -> Value {
        canary_with(json!({
            "phase": "Promoting", "primaryRevision": rev(1), "initializedGeneration": 1,
            "canaryRevision": rev(2), "startedAt": STARTED, "canaryWeight": 50,
            "lastMeasurement": { "time": NOW, "successRate": 0.997, "canaryWeight": 50 },
        }))
    }

    fn assert_promoted(report: &SyncReport) {
        assert_eq!(report.next_phase, "Waiting");
        assert_eq!(report.outputs.len(), 3);
        let primary = report.output("Deployment", "web-primary").unwrap();
        assert_eq!(image(primary), "registry.example.com/web:2");
        assert_eq!(primary["spec"]["replicas"], 2);
        assert_eq!(
            primary["spec"]["template"]["metadata"]["labels"]["canary.examples.io/pod"],
            "web-primary"
        );
        assert_eq!(
            primary["spec"]["selector"]["matchLabels"],
            json!({ "canary.examples.io/pod": "web-primary" })
        );
        assert_eq!(
            primary["metadata"]["annotations"]["canary.examples.io/revision"],
            rev(2)
        );
        let canary = report.output("Deployment", "web-canary").unwrap();
        assert_eq!(canary["spec"]["replicas"], 0);
        let vs = report.output("VirtualService", "web").unwrap();
        assert_eq!(canary_weight_of(vs), Some(0));
        assert_eq!(vs["spec"]["http"][0]["route"][0]["weight"], 100);
    }

    #[test]
    fn the_primary_takes_the_canary_spec() {
        let deployments = [
            target(2),
            managed(Role::Primary, 1, 2),
            managed(Role::Canary, 2, 2),
        ];
        let report = run(promoting(), &deployments).unwrap();
        assert_promoted(&report);
        assert!(report.logged("promoting the canary"));
        let status = report.status.unwrap();
        assert_eq!(status["primaryRevision"], rev(2));
        assert_eq!(status["canaryWeight"], 0);
        assert_eq!(status["startedAt"], Value::Null, "the analysis is over");
        assert_eq!(status["lastResult"]["result"], "Promoted");
        assert_eq!(status["lastResult"]["revision"], rev(2));
        assert_eq!(status["lastResult"]["time"], NOW);
        assert!(status["lastResult"]["reason"]
            .as_str()
            .unwrap()
            .contains("0.9970 held at or above 0.99 for 10s"));
    }

    #[test]
    fn promotes_what_was_analysed_even_if_the_target_moved_on() {
        let deployments = [
            target(3),
            managed(Role::Primary, 1, 2),
            managed(Role::Canary, 2, 2),
        ];
        assert_promoted(&run(promoting(), &deployments).unwrap());
    }

    #[test]
    fn without_the_canary_deployment_the_target_of_that_revision_serves() {
        let deployments = [target(2), managed(Role::Primary, 1, 2)];
        assert_promoted(&run(promoting(), &deployments).unwrap());

        let deployments = [target(3), managed(Role::Primary, 1, 2)];
        let failed = run(promoting(), &deployments).unwrap_err();
        assert!(failed.error.is_retryable());
        assert!(failed.error.message().contains("nothing to promote from"));
    }

    #[test]
    fn nothing_analysed_is_fatal() {
        let cd = canary_with(json!({ "phase": "Promoting", "primaryRevision": rev(1) }));
        let failed = run(cd, &[target(2)]).unwrap_err();
        assert!(failed.error.is_fatal());
        assert!(failed.error.message().contains("canaryRevision"));
    }
}
