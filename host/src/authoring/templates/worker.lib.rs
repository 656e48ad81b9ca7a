//! {{kind}}'s {{phase}} phase. Scaffolded by `wasmpilot init`: it {{summary}}.

use {{types_ident}}::phases::{{phase_module}}::{Export, Inputs, {{next_import}}Outcome, Worker};
use {{types_ident}}::{{kind}};
use wasmpilot_guest::{Context, WorkerError};

/// Decides the {{phase}} phase of {{a_kind}}: replace the stub with what this phase does.
/// The typed API comes from operator.yaml (run `wasmpilot generate .` after changing it): read
/// each declared input with `inputs.<input name>()?`, return objects of the declared output
/// kinds with `.<kind>(&object)?`, record status with `.status(json)`, and move with
/// `Outcome::next(Next::…)` (the moves `next:` allows) or `Outcome::stay()`.
#[derive(Default)]
pub struct {{phase_ident}};

impl Worker for {{phase_ident}} {
    type Resource = {{kind}};

    fn sync(
        &self,
        ctx: &Context,
        resource: {{kind}},
        _inputs: Inputs,
    ) -> Result<Outcome, WorkerError> {
        let name = resource.metadata.name.unwrap_or_default();
        ctx.info("scaffolded worker, edit me", &[("resource", &name)]);
        Ok(Outcome::{{next_call}})
    }
}

wasmpilot_guest::export!(phase = Export<{{phase_ident}}>);

#[cfg(test)]
mod tests {
    use super::*;
    use {{types_ident}}::phases::Phase;
    use wasmpilot_guest::testing::{objects_from_yaml, SyncTest};

    #[test]
    fn {{test_name}}() {
        // The project's sample resource: keep sample.yaml valid as the spec grows.
        let sample = objects_from_yaml(include_str!("../../../sample.yaml")).unwrap();
        let report = SyncTest::new(&sample[0])
            .phase(Phase::{{phase_variant}})
            .run(&Export({{phase_ident}}))
            .unwrap();
        assert_eq!(report.next_phase, Phase::{{next_variant}}.name());
        assert!(report.outputs.is_empty());
        assert_eq!(report.logs[0].field("resource"), Some("example"));
    }
}
