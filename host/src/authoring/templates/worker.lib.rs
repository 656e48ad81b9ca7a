//! {{kind}}'s {{phase}} phase. Scaffolded by `wasmpilot init`: it {{summary}}.

use {{types_ident}}::{phases, {{kind}}};
use wasmpilot_guest::{Context, Inputs, Outcome, PhaseWorker, WorkerError};

/// Decides the {{phase}} phase of {{a_kind}}: replace the stub with what this phase does.
/// Read inputs with `inputs.list::<T>("name")` (declared in operator.yaml), return objects to
/// apply with `.output(&obj)?` / `.outputs(iter)?`, record status with `.status(json)`, and
/// move on with `Outcome::next(phases::…)` (allowed moves: `next:` in operator.yaml).
#[derive(Default)]
pub struct {{phase_ident}};

impl PhaseWorker for {{phase_ident}} {
    type Resource = {{kind}};

    fn sync(
        &self,
        ctx: &Context,
        resource: {{kind}},
        _inputs: &Inputs,
    ) -> Result<Outcome, WorkerError> {
        let name = resource.metadata.name.unwrap_or_default();
        ctx.info("scaffolded worker, edit me", &[("resource", &name)]);
        Ok(Outcome::next(phases::{{next_const}}))
    }
}

wasmpilot_guest::export!(phase = {{phase_ident}});

#[cfg(test)]
mod tests {
    use super::*;
    use wasmpilot_guest::testing::{objects_from_yaml, SyncTest};

    #[test]
    fn {{test_name}}() {
        // The project's sample resource: keep sample.yaml valid as the spec grows.
        let sample = objects_from_yaml(include_str!("../../../sample.yaml")).unwrap();
        let report = SyncTest::new(&sample[0])
            .phase(phases::{{phase_const}})
            .run(&{{phase_ident}})
            .unwrap();
        assert_eq!(report.next_phase, phases::{{next_const}});
        assert!(report.outputs.is_empty());
        assert_eq!(report.logs[0].field("resource"), Some("example"));
    }
}
