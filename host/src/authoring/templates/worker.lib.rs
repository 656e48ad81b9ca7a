//! {{kind}}'s {{phase}} phase: {{summary}}

use {{types_ident}}::{phases, {{kind}}};
use wasmpilot_guest::{Context, Inputs, Outcome, PhaseWorker, WorkerError};

/// Decides the {{phase}} phase of a {{kind}}. Scaffolded by `wasmpilot init`: {{summary_lower}}
/// Read inputs with `inputs.list::<T>("name")` (declared in operator.yaml), return objects to
/// apply with `.output(&obj)?` / `.outputs(iter)?`, and record status with `.status(json)`.
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
        ctx.info("{{log_message}}", &[("resource", &name)]);
        Ok(Outcome::next(phases::{{next_const}}))
    }
}

wasmpilot_guest::export!(phase = {{phase_ident}});

#[cfg(test)]
mod tests {
    use super::*;
    use wasmpilot_guest::serde_json::json;
    use wasmpilot_guest::testing::SyncTest;

    #[test]
    fn {{test_name}}() {
        let resource = json!({
            "apiVersion": "{{api_version}}", "kind": "{{kind}}",
            "metadata": { "name": "example", "namespace": "default" },
            "spec": {},
        });
        let report = SyncTest::new(resource)
            .phase(phases::{{phase_const}})
            .run(&{{phase_ident}})
            .unwrap();
        assert_eq!(report.next_phase, phases::{{next_const}});
        assert!(report.outputs.is_empty());
        assert_eq!(report.logs[0].field("resource"), Some("example"));
    }
}
