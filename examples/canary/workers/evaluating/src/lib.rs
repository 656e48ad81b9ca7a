//! CanaryDeployment's Evaluating phase: judges the canary's success rate (the metric query
//! `successRate`, run by the host against Prometheus) and decides: below the threshold →
//! Rollback; analysis period over → Promoting; otherwise one more step of traffic to the canary
//! and back to Waiting until the next measurement.

use canary_types::phases::evaluating::{Export, Inputs, Next, Outcome, Worker};
use canary_types::{
    deployment, find, replicas_of, revision, status_patch, template_source, virtual_service,
    CanaryDeployment, CanaryDeploymentStatus, InvalidSpec, Measurement, Names, Role, Settings,
    StatusField,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::SignedDuration;
use wasmpilot_guest::{Context, Sample, WorkerError};

/// The metric input (a `queries` entry of the phase in operator.yaml).
pub const SUCCESS_RATE: &str = "successRate";

/// Every run returns the same two objects — the canary Deployment (the target's current
/// template, scaled up) and the VirtualService (the canary's weight) — whatever it decides:
/// the host deletes objects a phase applied before and no longer returns.
#[derive(Default)]
pub struct Evaluating;

impl Worker for Evaluating {
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
        let deployments = inputs.deployments()?;
        let samples = inputs.success_rate()?;
        let target = find(&deployments, &names.target).ok_or_else(|| {
            WorkerError::retryable(format!(
                "the target Deployment {} does not exist in namespace {}; the analysis goes on when it is back",
                names.target, names.namespace
            ))
        })?;
        let target_spec = template_source(target).map_err(invalid)?;
        let target_revision = revision(&target_spec.template);
        let canary = deployment(
            &names,
            Role::Canary,
            target_spec,
            replicas_of(Some(target)),
            &target_revision,
        );
        let now = ctx.now();

        // The analysis of this revision starts here: when Waiting saw a new revision, or when
        // the target changed again during an analysis (the new revision starts over).
        let started = status
            .started_at
            .as_ref()
            .filter(|_| status.canary_revision.as_deref() == Some(target_revision.as_str()));
        let Some(started) = started else {
            let weight = settings.step_from(0);
            ctx.info(
                "starting the analysis",
                &[("revision", &target_revision), ("canaryWeight", &weight)],
            );
            let patch = CanaryDeploymentStatus {
                canary_revision: Some(target_revision.clone()),
                started_at: Some(Time(now)),
                canary_weight: Some(weight),
                message: Some(format!(
                    "analysing revision {target_revision} of Deployment {}: canary weight {weight}%",
                    names.target
                )),
                ..CanaryDeploymentStatus::default()
            };
            let routes = virtual_service(&cd, &names, weight).map_err(invalid)?;
            return Ok(Outcome::next(Next::Waiting)
                .deployment(&canary)?
                .virtual_service(&routes)?
                .status(status_patch(&patch, &[StatusField::LastMeasurement])?)
                .requeue_after(settings.measurement_interval));
        };

        let weight = status.canary_weight.unwrap_or(0);
        let rate = success_rate(&samples);
        let threshold = settings.success_threshold;
        let elapsed = now.duration_since(started.0);
        let period =
            SignedDuration::try_from(settings.analysis_period).unwrap_or(SignedDuration::MAX);
        let period_over = elapsed >= period;
        let period_text = &cd.spec.analysis_period;
        let (next, new_weight, text) = match rate {
            Some(r) if r < threshold => (
                Next::Rollback,
                weight,
                format!("success rate {r:.4} is below {threshold}: rolling back"),
            ),
            None if period_over => (
                Next::Rollback,
                weight,
                format!("no traffic measured at the end of the analysis period ({period_text}): rolling back"),
            ),
            Some(r) if period_over => (
                Next::Promoting,
                weight,
                format!("success rate {r:.4} held at or above {threshold} for {period_text}: promoting"),
            ),
            Some(r) => {
                let stepped = settings.step_from(weight);
                (
                    Next::Waiting,
                    stepped,
                    format!(
                        "success rate {r:.4} after {}s of {period_text}: canary weight {stepped}%",
                        elapsed.as_secs()
                    ),
                )
            }
            None => (
                Next::Waiting,
                weight,
                format!("no traffic measured yet: canary weight stays {weight}%"),
            ),
        };
        ctx.info(
            "measured",
            &[
                (
                    "successRate",
                    &rate.map_or("none".to_owned(), |r| r.to_string()),
                ),
                ("threshold", &threshold),
                ("elapsedSecs", &elapsed.as_secs()),
                ("canaryWeight", &new_weight),
                ("next", &next),
            ],
        );
        let patch = CanaryDeploymentStatus {
            canary_weight: Some(new_weight),
            last_measurement: Some(Measurement {
                time: Time(now),
                success_rate: rate,
                canary_weight: weight,
            }),
            message: Some(text),
            ..CanaryDeploymentStatus::default()
        };
        let routes = virtual_service(&cd, &names, new_weight).map_err(invalid)?;
        let outcome = Outcome::next(next)
            .deployment(&canary)?
            .virtual_service(&routes)?
            .status(status_patch(&patch, &[])?);
        Ok(if next == Next::Waiting {
            outcome.requeue_after(settings.measurement_interval)
        } else {
            outcome
        })
    }
}

/// The success rate in a query result: the lowest finite value among the samples (a query
/// summing over the canary's series has one); `None` without any (no traffic: no series, or
/// NaN from 0/0).
pub fn success_rate(samples: &[Sample]) -> Option<f64> {
    samples
        .iter()
        .filter_map(|s| s.value)
        .filter(|v| v.is_finite())
        .reduce(f64::min)
}

fn invalid(err: InvalidSpec) -> WorkerError {
    WorkerError::fatal(format!("invalid CanaryDeployment: {err}"))
}

wasmpilot_guest::export!(phase = Export<Evaluating>);

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
    use std::time::Duration;
    use wasmpilot_guest::testing::{FailedRun, SyncReport, SyncTest};

    fn run(
        cd: Value,
        deployments: &[Value],
        samples: &[Sample],
        now: &str,
    ) -> Result<SyncReport, FailedRun> {
        SyncTest::new(cd)
            .input("deployments", deployments)
            .input(SUCCESS_RATE, samples)
            .now(now)
            .run(&Export(Evaluating))
    }

    fn cluster() -> Vec<Value> {
        vec![
            target(2),
            managed(Role::Primary, 1, 2),
            managed(Role::Canary, 2, 2),
        ]
    }

    /// Analysing version 2 since STARTED at `weight`.
    fn analysing(weight: i32) -> Value {
        canary_with(json!({
            "phase": "Evaluating", "primaryRevision": rev(1), "initializedGeneration": 1,
            "canaryRevision": rev(2), "startedAt": STARTED, "canaryWeight": weight,
        }))
    }

    /// The invariant pruning depends on: the canary Deployment and the VirtualService, always.
    fn assert_same_objects(report: &SyncReport) {
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
            [("Deployment", "web-canary"), ("VirtualService", "web")]
        );
        let canary = report.output("Deployment", "web-canary").unwrap();
        assert_eq!(image(canary), "registry.example.com/web:2");
        assert_eq!(canary["spec"]["replicas"], 2);
    }

    fn weight_of(report: &SyncReport) -> Option<i64> {
        canary_weight_of(report.output("VirtualService", "web").unwrap())
    }

    #[test]
    fn starts_the_analysis_with_a_first_step() {
        let cd = canary_with(json!({
            "phase": "Evaluating", "primaryRevision": rev(1), "initializedGeneration": 1,
            "canaryWeight": 0, "lastMeasurement": { "time": STARTED, "successRate": 0.5, "canaryWeight": 50 },
        }));
        let report = run(cd, &cluster(), &[], NOW).unwrap();
        assert_eq!(report.next_phase, "Waiting");
        assert_eq!(report.requeue_after, Some(Duration::from_secs(2)));
        assert_same_objects(&report);
        assert_eq!(weight_of(&report), Some(20));
        let status = report.status.unwrap();
        assert_eq!(status["canaryRevision"], rev(2));
        assert_eq!(status["startedAt"], NOW);
        assert_eq!(status["canaryWeight"], 20);
        assert_eq!(status["lastMeasurement"], Value::Null, "cleared");
    }

    #[test]
    fn a_changed_target_restarts_the_analysis() {
        let mut cluster = cluster();
        cluster[0] = target(3);
        let report = run(analysing(40), &cluster, &rate(Some(1.0)), NOW).unwrap();
        assert_eq!(report.next_phase, "Waiting");
        let canary = report.output("Deployment", "web-canary").unwrap();
        assert_eq!(image(canary), "registry.example.com/web:3");
        let status = report.status.unwrap();
        assert_eq!(status["canaryRevision"], rev(3));
        assert_eq!(status["startedAt"], NOW);
        assert_eq!(status["canaryWeight"], 20);
    }

    #[test]
    fn a_healthy_canary_gets_more_traffic_up_to_max_weight() {
        let report = run(
            analysing(20),
            &cluster(),
            &rate(Some(0.995)),
            "2025-06-01T12:00:04Z",
        )
        .unwrap();
        assert_eq!(report.next_phase, "Waiting");
        assert_eq!(report.requeue_after, Some(Duration::from_secs(2)));
        assert_same_objects(&report);
        assert_eq!(weight_of(&report), Some(40));
        let status = report.status.unwrap();
        assert_eq!(status["canaryWeight"], 40);
        assert_eq!(
            status["lastMeasurement"],
            json!({ "time": "2025-06-01T12:00:04Z", "successRate": 0.995, "canaryWeight": 20 })
        );
        assert!(status["message"]
            .as_str()
            .unwrap()
            .contains("after 4s of 10s: canary weight 40%"));

        let report = run(
            analysing(40),
            &cluster(),
            &rate(Some(1.0)),
            "2025-06-01T12:00:06Z",
        )
        .unwrap();
        assert_eq!(weight_of(&report), Some(50), "maxWeight");
    }

    #[test]
    fn below_the_threshold_rolls_back_at_once() {
        let report = run(
            analysing(20),
            &cluster(),
            &rate(Some(0.75)),
            "2025-06-01T12:00:02Z",
        )
        .unwrap();
        assert_eq!(report.next_phase, "Rollback");
        assert_eq!(report.requeue_after, None);
        assert_same_objects(&report);
        assert_eq!(weight_of(&report), Some(20), "Rollback resets it");
        let status = report.status.unwrap();
        assert_eq!(status["lastMeasurement"]["successRate"], 0.75);
        assert!(status["message"]
            .as_str()
            .unwrap()
            .contains("0.7500 is below 0.99"));
    }

    #[test]
    fn held_for_the_analysis_period_promotes() {
        let report = run(analysing(50), &cluster(), &rate(Some(0.99)), NOW).unwrap();
        assert_eq!(report.next_phase, "Promoting");
        assert_same_objects(&report);
        assert_eq!(weight_of(&report), Some(50));
        assert!(report.logged("measured"));
    }

    #[test]
    fn no_traffic_holds_the_weight_then_rolls_back_when_the_period_is_over() {
        for samples in [vec![], rate(None)] {
            let report = run(analysing(20), &cluster(), &samples, "2025-06-01T12:00:04Z").unwrap();
            assert_eq!(report.next_phase, "Waiting");
            assert_eq!(weight_of(&report), Some(20));
            assert_eq!(
                report.status.unwrap()["lastMeasurement"]["successRate"],
                Value::Null
            );
            let report = run(analysing(20), &cluster(), &samples, NOW).unwrap();
            assert_eq!(report.next_phase, "Rollback");
            assert_same_objects(&report);
        }
    }

    #[test]
    fn the_lowest_sample_counts() {
        let mut samples = rate(Some(1.0));
        samples.extend(rate(Some(0.9)));
        samples.extend(rate(None));
        assert_eq!(success_rate(&samples), Some(0.9));
        assert_eq!(success_rate(&[]), None);
    }

    #[test]
    fn a_missing_target_is_retried_and_bad_input_is_fatal() {
        let failed = run(analysing(20), &[other()], &rate(Some(1.0)), NOW).unwrap_err();
        assert!(failed.error.is_retryable());
        assert!(failed.error.message().contains("does not exist"));

        let failed = SyncTest::new(analysing(20))
            .input("deployments", cluster())
            .input_json(SUCCESS_RATE, [r#"{"value": "high"}"#.to_owned()])
            .run(&Export(Evaluating))
            .unwrap_err();
        assert!(failed.error.is_fatal());
        assert!(
            failed.error.message().contains("input `successRate`"),
            "{failed}"
        );
        let failed = SyncTest::new(analysing(20))
            .input("deployments", cluster())
            .run(&Export(Evaluating))
            .unwrap_err();
        assert!(failed
            .error
            .message()
            .contains("unknown input `successRate`"));
    }
}
