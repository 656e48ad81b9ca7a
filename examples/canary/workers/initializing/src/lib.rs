//! CanaryDeployment's Initializing phase: from the target Deployment, the primary and canary
//! Deployments, the three Services and the VirtualService (100 % primary), then Waiting.

use canary_types::phases::initializing::{Export, Inputs, Next, Outcome, Worker};
use canary_types::{
    deployment, find, replicas_of, revision, revision_annotation, services, status_patch,
    template_source, virtual_service, CanaryDeployment, CanaryDeploymentStatus, InvalidSpec, Names,
    Role, Settings,
};
use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
use wasmpilot_guest::{Context, WorkerError};

/// Sets up (or, after a spec change, sets up again) every object of the CanaryDeployment.
///
/// The primary starts as a copy of the target with the target's replica count (at least 1);
/// the canary as a copy scaled to zero. When they exist already (a re-initialization), each
/// keeps the template it runs: initializing again never rolls a version out unanalysed.
#[derive(Default)]
pub struct Initializing;

impl Worker for Initializing {
    type Resource = CanaryDeployment;

    fn sync(
        &self,
        ctx: &Context,
        cd: CanaryDeployment,
        inputs: Inputs,
    ) -> Result<Outcome, WorkerError> {
        Settings::from_spec(&cd.spec).map_err(invalid)?;
        let names = Names::of(&cd).map_err(invalid)?;
        let deployments = inputs.deployments()?;
        let target = find(&deployments, &names.target).ok_or_else(|| {
            WorkerError::retryable(format!(
                "the target Deployment {} does not exist in namespace {} (yet)",
                names.target, names.namespace
            ))
        })?;
        let target_spec = template_source(target).map_err(invalid)?;
        let target_revision = revision(&target_spec.template);
        let replicas = replicas_of(Some(target));

        let (primary_source, primary_revision) =
            existing(&deployments, &names.primary).unwrap_or((target_spec, &target_revision));
        let (canary_source, canary_revision) =
            existing(&deployments, &names.canary).unwrap_or((target_spec, &target_revision));
        let primary = deployment(
            &names,
            Role::Primary,
            primary_source,
            replicas,
            primary_revision,
        );
        let canary = deployment(&names, Role::Canary, canary_source, 0, canary_revision);
        let services = services(&cd, &names).map_err(invalid)?;
        let routes = virtual_service(&cd, &names, 0).map_err(invalid)?;

        let message = format!(
            "primary {} runs revision {primary_revision} of Deployment {} ({replicas} replicas); waiting for a new revision",
            names.primary, names.target
        );
        ctx.info(
            "initialized",
            &[
                ("target", &names.target),
                ("primaryRevision", &primary_revision),
                ("replicas", &replicas),
            ],
        );
        let status = CanaryDeploymentStatus {
            primary_deployment: Some(names.primary.clone()),
            canary_deployment: Some(names.canary.clone()),
            primary_revision: Some(primary_revision.to_owned()),
            canary_weight: Some(0),
            initialized_generation: cd.metadata.generation,
            message: Some(message),
            ..CanaryDeploymentStatus::default()
        };
        let patch = status_patch(&status, &[])?;
        Ok(Outcome::next(Next::Waiting)
            .deployment(&primary)?
            .deployment(&canary)?
            .services(&services)?
            .virtual_service(&routes)?
            .status(patch))
    }
}

/// An existing primary or canary this operator made (it has the revision annotation): the spec
/// to keep, and its revision.
fn existing<'a>(
    deployments: &'a [Deployment],
    name: &str,
) -> Option<(&'a DeploymentSpec, &'a str)> {
    let d = find(deployments, name)?;
    let revision = revision_annotation(d)?;
    Some((template_source(d).ok()?, revision))
}

fn invalid(err: InvalidSpec) -> WorkerError {
    WorkerError::fatal(format!("invalid CanaryDeployment: {err}"))
}

wasmpilot_guest::export!(phase = Export<Initializing>);

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
            .phase("Initializing")
            .input("deployments", deployments)
            .now(NOW)
            .run(&Export(Initializing))
    }

    #[test]
    fn creates_every_object_from_the_target() {
        let report = run(canary(0), &[target(1), other()]).unwrap();
        assert_eq!(report.next_phase, "Waiting");
        let names: Vec<(&str, &str)> = report
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
            names,
            [
                ("Deployment", "web-primary"),
                ("Deployment", "web-canary"),
                ("Service", "web-primary"),
                ("Service", "web-canary"),
                ("Service", "web"),
                ("VirtualService", "web"),
            ]
        );
        let primary = report.output("Deployment", "web-primary").unwrap();
        assert_eq!(primary["spec"]["replicas"], 2, "the target's replicas");
        assert_eq!(image(primary), "registry.example.com/web:1");
        assert_eq!(
            primary["metadata"]["annotations"]["canary.examples.io/revision"],
            rev(1)
        );
        let canary = report.output("Deployment", "web-canary").unwrap();
        assert_eq!(canary["spec"]["replicas"], 0);
        assert_eq!(image(canary), "registry.example.com/web:1");
        let vs = report.output("VirtualService", "web").unwrap();
        assert_eq!(canary_weight_of(vs), Some(0));
        assert_eq!(vs["spec"]["http"][0]["route"][0]["weight"], 100);
        // The host sets owner references; the target itself is never an output.
        assert!(report
            .outputs
            .iter()
            .all(|o| o["metadata"].get("ownerReferences").is_none()));
        let status = report.status.unwrap();
        assert_eq!(status["primaryRevision"], rev(1));
        assert_eq!(status["canaryWeight"], 0);
        assert_eq!(status["initializedGeneration"], 1);
        assert_eq!(status["primaryDeployment"], "web-primary");
        assert_eq!(status["canaryDeployment"], "web-canary");
        assert!(status["message"]
            .as_str()
            .unwrap()
            .contains("waiting for a new revision"));
    }

    #[test]
    fn initializing_again_keeps_what_primary_and_canary_run() {
        // The spec changed (generation 2) while the target moved on to version 3, unanalysed:
        // the primary keeps version 1, the canary keeps the rolled-back version 2.
        let mut cd = canary_with(json!({ "phase": "Initializing", "failedRevision": rev(2) }));
        cd["metadata"]["generation"] = json!(2);
        cd["spec"]["ports"] = json!([8080, 9090]);
        let deployments = [
            target(3),
            managed(Role::Primary, 1, 2),
            managed(Role::Canary, 2, 0),
        ];
        let report = run(cd, &deployments).unwrap();
        let primary = report.output("Deployment", "web-primary").unwrap();
        assert_eq!(image(primary), "registry.example.com/web:1");
        let canary = report.output("Deployment", "web-canary").unwrap();
        assert_eq!(image(canary), "registry.example.com/web:2");
        assert_eq!(
            canary["metadata"]["annotations"]["canary.examples.io/revision"],
            rev(2)
        );
        let service = report.output("Service", "web").unwrap();
        assert_eq!(service["spec"]["ports"].as_array().unwrap().len(), 2);
        let status = report.status.unwrap();
        assert_eq!(status["primaryRevision"], rev(1));
        assert_eq!(status["initializedGeneration"], 2);
        assert!(
            status.get("failedRevision").is_none(),
            "left as it is: {status}"
        );
    }

    #[test]
    fn a_missing_target_is_retried() {
        let failed = run(canary(0), &[other()]).unwrap_err();
        assert!(failed.error.is_retryable());
        assert!(
            failed
                .error
                .message()
                .contains("target Deployment web does not exist in namespace shop"),
            "{failed}"
        );
    }

    #[test]
    fn an_invalid_spec_or_target_is_fatal() {
        let failed = run(canary(1), &[target(1)]).unwrap_err();
        assert!(failed.error.is_fatal());
        assert!(
            failed.error.message().contains("spec.successThreshold"),
            "{failed}"
        );

        let mut empty = target(1);
        empty["spec"]["template"]["spec"]["containers"] = json!([]);
        let failed = run(canary(0), &[empty]).unwrap_err();
        assert!(failed.error.is_fatal());
        assert!(failed.error.message().contains("no containers"), "{failed}");
    }
}
