//! CanaryDeployment's Waiting phase, the steady one. During an analysis it waits for the next
//! measurement (`requeue_after`, no polling); between analyses it waits for a new revision of
//! the target Deployment, or for a changed CanaryDeployment spec (then Initializing again).

use std::time::Duration;

use canary_types::phases::waiting::{Export, Inputs, Next, Outcome, Worker};
use canary_types::{
    find, revision, status_patch, template_source, CanaryDeployment, CanaryDeploymentStatus,
    InvalidSpec, Names, Settings,
};
use wasmpilot_guest::{Context, WorkerError};

/// Decides from the status and the clock (`ctx.now()`) alone during an analysis, and from the
/// target's pod template between analyses. Returns no outputs.
#[derive(Default)]
pub struct Waiting;

impl Worker for Waiting {
    type Resource = CanaryDeployment;

    fn sync(
        &self,
        ctx: &Context,
        cd: CanaryDeployment,
        inputs: Inputs,
    ) -> Result<Outcome, WorkerError> {
        let settings = Settings::from_spec(&cd.spec).map_err(invalid)?;
        let names = Names::of(&cd).map_err(invalid)?;
        let status = cd.status.clone().unwrap_or_default();

        if let Some(started) = &status.started_at {
            // An analysis runs: the next measurement is due one interval after the last one.
            let last = status
                .last_measurement
                .as_ref()
                .map_or(started.0, |m| m.time.0);
            let due = last
                .checked_add(settings.measurement_interval)
                .map_err(|err| WorkerError::fatal(format!("next measurement time: {err}")))?;
            let now = ctx.now();
            if now >= due {
                ctx.debug("measurement due", &[("due", &due)]);
                return Ok(Outcome::next(Next::Evaluating));
            }
            let wait = due.duration_since(now).unsigned_abs();
            ctx.debug(
                "waiting for the next measurement",
                &[("due", &due), ("in", &format!("{wait:?}"))],
            );
            return Ok(Outcome::next(Next::Waiting).requeue_after(wait.max(Duration::from_secs(1))));
        }

        // No analysis runs. A changed spec (new ports, another target) means initializing again.
        if cd.metadata.generation != status.initialized_generation {
            ctx.info(
                "the CanaryDeployment changed, initializing again",
                &[("generation", &cd.metadata.generation.unwrap_or_default())],
            );
            return Ok(Outcome::next(Next::Initializing).status(message(format!(
                "generation {} of the spec: initializing again",
                cd.metadata.generation.unwrap_or_default()
            ))?));
        }

        let deployments = inputs.deployments()?;
        let Some(target) = find(&deployments, &names.target) else {
            ctx.warn(
                "the target Deployment is missing",
                &[("target", &names.target)],
            );
            return Ok(Outcome::next(Next::Waiting).status(message(format!(
                "the target Deployment {} does not exist; waiting for it",
                names.target
            ))?));
        };
        let target_revision = revision(&template_source(target).map_err(invalid)?.template);
        let (next, text) = if status.primary_revision.as_deref() == Some(&target_revision) {
            (
                Next::Waiting,
                format!(
                    "primary {} runs revision {target_revision} of Deployment {}; waiting for a new revision",
                    names.primary, names.target
                ),
            )
        } else if status.failed_revision.as_deref() == Some(&target_revision) {
            (
                Next::Waiting,
                format!(
                    "revision {target_revision} of Deployment {} was rolled back; waiting for a new revision",
                    names.target
                ),
            )
        } else {
            ctx.info(
                "new revision of the target, starting the analysis",
                &[("target", &names.target), ("revision", &target_revision)],
            );
            (
                Next::Evaluating,
                format!(
                    "new revision {target_revision} of Deployment {}: starting the analysis",
                    names.target
                ),
            )
        };
        Ok(Outcome::next(next).status(message(text)?))
    }
}

/// A status patch that sets only `message` (the host writes nothing when it is unchanged).
fn message(text: String) -> Result<serde_json::Value, WorkerError> {
    let status = CanaryDeploymentStatus {
        message: Some(text),
        ..CanaryDeploymentStatus::default()
    };
    Ok(status_patch(&status, &[])?)
}

fn invalid(err: InvalidSpec) -> WorkerError {
    WorkerError::fatal(format!("invalid CanaryDeployment: {err}"))
}

wasmpilot_guest::export!(phase = Export<Waiting>);

#[cfg(test)]
#[allow(dead_code)]
mod fixtures {
    include!("../../testdata/fixtures.rs");
}

#[cfg(test)]
mod tests {
    use super::fixtures::*;
    use super::*;
    use canary_types::Role;
    use serde_json::{json, Value};
    use wasmpilot_guest::testing::{FailedRun, SyncReport, SyncTest};

    fn run(cd: Value, deployments: &[Value], now: &str) -> Result<SyncReport, FailedRun> {
        SyncTest::new(cd)
            .input("deployments", deployments)
            .now(now)
            .run(&Export(Waiting))
    }

    fn idle(extra: Value) -> Value {
        let mut status = json!({
            "phase": "Waiting", "primaryRevision": rev(1), "canaryWeight": 0,
            "initializedGeneration": 1,
        });
        if let (Some(s), Some(e)) = (status.as_object_mut(), extra.as_object()) {
            s.extend(e.clone());
        }
        canary_with(status)
    }

    fn cluster(target_version: u32) -> Vec<Value> {
        vec![
            target(target_version),
            managed(Role::Primary, 1, 2),
            managed(Role::Canary, 1, 0),
            other(),
        ]
    }

    fn message_of(report: &SyncReport) -> String {
        report.status.as_ref().unwrap()["message"]
            .as_str()
            .unwrap()
            .to_owned()
    }

    #[test]
    fn idle_while_the_primary_runs_the_target() {
        let report = run(idle(json!({})), &cluster(1), NOW).unwrap();
        assert_eq!(report.next_phase, "Waiting");
        assert!(report.outputs.is_empty());
        assert_eq!(
            report.requeue_after, None,
            "input changes and resyncs wake it"
        );
        assert!(message_of(&report).contains("waiting for a new revision"));
        assert_eq!(report.status.unwrap().as_object().unwrap().len(), 1);
    }

    #[test]
    fn a_new_revision_starts_the_analysis() {
        let report = run(idle(json!({})), &cluster(2), NOW).unwrap();
        assert_eq!(report.next_phase, "Evaluating");
        assert!(report.outputs.is_empty());
        assert!(message_of(&report).contains(&format!("new revision {}", rev(2))));
    }

    #[test]
    fn a_rolled_back_revision_is_not_tried_again() {
        let cd = idle(json!({ "failedRevision": rev(2) }));
        let report = run(cd.clone(), &cluster(2), NOW).unwrap();
        assert_eq!(report.next_phase, "Waiting");
        assert!(message_of(&report).contains("was rolled back"));
        // The next revision is.
        let report = run(cd, &cluster(3), NOW).unwrap();
        assert_eq!(report.next_phase, "Evaluating");
    }

    #[test]
    fn a_changed_spec_initializes_again() {
        let mut cd = idle(json!({}));
        cd["metadata"]["generation"] = json!(2);
        let report = run(cd, &cluster(1), NOW).unwrap();
        assert_eq!(report.next_phase, "Initializing");
    }

    #[test]
    fn a_missing_target_is_waited_for() {
        let report = run(idle(json!({})), &[other()], NOW).unwrap();
        assert_eq!(report.next_phase, "Waiting");
        assert!(message_of(&report).contains("does not exist"));
    }

    #[test]
    fn during_an_analysis_waits_one_interval_after_the_last_measurement() {
        // Started at :00, interval 2s, nothing measured yet: due at :02.
        let analysing =
            idle(json!({ "startedAt": STARTED, "canaryRevision": rev(2), "canaryWeight": 20 }));
        let report = run(analysing.clone(), &cluster(2), "2025-06-01T12:00:01Z").unwrap();
        assert_eq!(report.next_phase, "Waiting");
        assert_eq!(report.requeue_after, Some(Duration::from_secs(1)));
        assert_eq!(report.status, None);
        let report = run(analysing.clone(), &cluster(2), "2025-06-01T12:00:02Z").unwrap();
        assert_eq!(report.next_phase, "Evaluating");

        // Measured at :06: due at :08, whatever started it. A woken-up run (an input changed)
        // just waits again for the rest of the interval.
        let mut measured = analysing;
        measured["status"]["lastMeasurement"] =
            json!({ "time": "2025-06-01T12:00:06Z", "successRate": 1.0, "canaryWeight": 40 });
        let report = run(measured.clone(), &cluster(2), "2025-06-01T12:00:06Z").unwrap();
        assert_eq!(report.next_phase, "Waiting");
        assert_eq!(report.requeue_after, Some(Duration::from_secs(2)));
        let report = run(measured, &cluster(2), "2025-06-01T12:00:09Z").unwrap();
        assert_eq!(report.next_phase, "Evaluating");
        assert!(report.outputs.is_empty());
    }

    #[test]
    fn an_invalid_spec_is_fatal() {
        let failed = run(canary(1), &cluster(1), NOW).unwrap_err();
        assert!(failed.error.is_fatal());
        assert!(failed.error.message().contains("successThreshold"));
    }
}
