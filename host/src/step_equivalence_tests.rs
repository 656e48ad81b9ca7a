//! Property test of the one phase step: random phase graphs, existing objects and worker answers
//! run through the controller's effects (against a fake API server) and the simulator's; both
//! must leave the same objects and status, and end each step the same way.

use crate::authoring::simulate::{SimulatedCluster, World};
use crate::controller::cluster_effects::{ClusterEffects, Read};
use crate::controller::test_operator::operator_context;
use crate::crd::KindRef;
use crate::definition::OperatorDefinition;
use crate::modules::ModuleCache;
use crate::offline::{ObjectsByKind, OfflineReads};
use crate::pipeline::step::{self, PhaseStep, Samples, StepOutcome};
use crate::pipeline::ReconcileError;
use crate::sandbox::{Sandbox, SandboxLimits};
use kube::api::DynamicObject;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use wasmpilot_runtime::mock_api_server::{scripted_component_dir, FakeApiServer};

const COMPONENT: &str = "wasmpilot_test_scripted.wasm";
const NAMESPACE: &str = "team-a";
const UID: &str = "w1-uid";
const NAMES: [&str; 4] = ["a", "b", "c", "d"];
const NOW: &str = "2026-03-01T10:00:00Z";

/// A small deterministic generator (xorshift), so a failing case is found again by its seed.
struct Random(u64);

impl Random {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }

    fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }
}

/// A random operator: phases P0.. (non-final, each applying ConfigMaps and moving to some of
/// the phases or the final Done), some of which read their own ConfigMaps as an input.
fn random_definition(random: &mut Random) -> (OperatorDefinition, Vec<String>) {
    let count = 2 + random.below(3);
    let names: Vec<String> = (0..count).map(|i| format!("P{i}")).collect();
    let mut phases = Vec::new();
    for (i, name) in names.iter().enumerate() {
        let mut next: Vec<String> = names
            .iter()
            .chain(std::iter::once(&"Done".to_string()))
            .filter(|_| random.chance(50))
            .cloned()
            .collect();
        if next.is_empty() {
            next.push("Done".into());
        }
        let inputs = if random.chance(50) {
            json!([{"name": "mine", "apiVersion": "v1", "kind": "ConfigMap", "owned": true}])
        } else {
            json!([])
        };
        phases.push(json!({
            "name": name, "initial": i == 0,
            "module": {"file": {"path": COMPONENT}},
            "inputs": inputs,
            "outputs": [{"apiVersion": "v1", "kind": "ConfigMap"}],
            "next": next,
        }));
    }
    phases.push(json!({"name": "Done", "final": true}));
    let spec: crate::crd::WasmOperatorSpec = serde_json::from_value(json!({
        "resource": {"apiVersion": "examples.io/v1", "kind": "Widget"},
        "phases": phases,
    }))
    .expect("a WasmOperator spec");
    let def = OperatorDefinition::validate("widgets", &spec).expect("a valid definition");
    (def, names)
}

/// What the scripted worker does in each phase: a next phase (now and then one it may not
/// move to), some ConfigMaps, status info, and sometimes a fatal error.
fn random_script(random: &mut Random, def: &OperatorDefinition, phases: &[String]) -> Value {
    let mut script = serde_json::Map::new();
    for phase in phases {
        let allowed = def.phase(phase).map(|p| p.next.clone()).unwrap_or_default();
        let next = match random.below(10) {
            0 => "Nowhere".to_string(),
            1 => phases[random.below(phases.len())].clone(),
            _ => allowed[random
                .below(allowed.len().max(1))
                .min(allowed.len().saturating_sub(1))]
            .clone(),
        };
        let mut outputs = Vec::new();
        for name in NAMES {
            if random.chance(40) {
                outputs.push(json!({"apiVersion": "v1", "kind": "ConfigMap",
                       "metadata": {"name": name, "namespace": NAMESPACE},
                       "data": {"v": format!("{}", random.below(3))}}));
            }
        }
        let mode = if random.chance(8) { "fatal" } else { "ok" };
        script.insert(
            phase.clone(),
            json!({"mode": mode, "next": next, "outputs": outputs,
                   "statusInfo": {"n": random.below(3)}, "countInputs": random.chance(50)}),
        );
    }
    Value::Object(script)
}

/// ConfigMaps that exist before the first step: this resource's from earlier phases (labelled
/// as the host labels them), someone else's, and one without a controller.
fn random_objects(random: &mut Random, phases: &[String]) -> Vec<Value> {
    let mut objects = Vec::new();
    for (i, name) in NAMES.iter().enumerate() {
        let mut object = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": NAMESPACE, "uid": format!("{name}-uid"),
                         "resourceVersion": format!("{}", 10 + i)},
            "data": {"v": "old"}});
        let owner = |uid: &str| {
            json!([{"apiVersion": "examples.io/v1", "kind": "Widget", "name": "w1",
                    "uid": uid, "controller": true}])
        };
        match random.below(4) {
            0 => continue,
            1 => {
                let phase = &phases[random.below(phases.len())];
                object["metadata"]["ownerReferences"] = owner(UID);
                object["metadata"]["labels"] =
                    json!({crate::OPERATOR_LABEL: "widgets", crate::PHASE_LABEL: phase});
            }
            2 => object["metadata"]["ownerReferences"] = owner("someone-else"),
            _ => {}
        }
        objects.push(object);
    }
    objects
}

/// How a step ended, as both sides must agree on it.
fn ending(outcome: &Result<StepOutcome, ReconcileError>) -> String {
    match outcome {
        Ok(StepOutcome::Final) => "final".into(),
        Ok(StepOutcome::Restarted { .. }) => "restarted".into(),
        Ok(StepOutcome::Decided(d)) => format!(
            "{} -> {}: {} applied, {} pruned, status written: {}",
            d.decision.phase,
            d.decision.next_phase,
            d.applied,
            d.pruned,
            d.written.is_some()
        ),
        Err(e) => format!("{}: {e}", e.reason()),
    }
}

/// An object as both sides keep it, without what only an API server adds (uid, version).
fn comparable(object: &Value) -> Value {
    let mut object = object.clone();
    if let Some(m) = object["metadata"].as_object_mut() {
        m.remove("uid");
        m.remove("resourceVersion");
    }
    object
}

#[tokio::test]
async fn the_controller_and_the_simulator_write_the_same_for_random_operators() {
    let dir = scripted_component_dir();
    let modules = ModuleCache::new(
        Sandbox::new(SandboxLimits::default()).expect("a sandbox"),
        None,
        Some(dir.clone()),
    );
    let bytes = std::fs::read(dir.join(COMPONENT)).expect("the component");
    let sandbox = Sandbox::new(SandboxLimits::default()).expect("a sandbox");
    let compiled = sandbox.compile(&bytes).expect("the scripted component");
    let module = sandbox
        .phase_module(&crate::modules::digest_of(&bytes), &compiled)
        .expect("a phase worker");
    let cases = 300;
    let (mut decided, mut refused, mut pruned, mut failed) = (0, 0, 0, 0);
    for seed in 1..=cases {
        let mut random = Random(0x9e37_79b9_7f4a_7c15 ^ seed);
        let (def, phases) = random_definition(&mut random);
        let script = random_script(&mut random, &def, &phases);
        let objects = random_objects(&mut random, &phases);
        let resource = json!({"apiVersion": "examples.io/v1", "kind": "Widget",
            "metadata": {"name": "w1", "namespace": NAMESPACE, "uid": UID,
                         "resourceVersion": "1", "generation": 1},
            "spec": {"phases": script}});
        let widget_path = format!("/apis/examples.io/v1/namespaces/{NAMESPACE}/widgets/w1");
        let mut store: BTreeMap<String, Value> = objects
            .iter()
            .map(|o| {
                let name = o["metadata"]["name"].as_str().unwrap_or_default();
                (
                    format!("/api/v1/namespaces/{NAMESPACE}/configmaps/{name}"),
                    o.clone(),
                )
            })
            .collect();
        store.insert(widget_path.clone(), resource.clone());
        let (client, fake, server) = FakeApiServer::start(store);
        let dynamic: Vec<DynamicObject> = objects
            .iter()
            .map(|o| serde_json::from_value(o.clone()).expect("a ConfigMap"))
            .collect();
        let ctx = operator_context(&def, &client, &sandbox, &module, &dynamic);
        let api = ctx.api_for(Some(NAMESPACE));
        let mut world = World {
            resource: serde_json::from_value(resource.clone()).expect("a Widget"),
            objects: objects
                .iter()
                .map(|o| {
                    let name = o["metadata"]["name"].as_str().unwrap_or_default();
                    let key = (
                        KindRef::new("v1", "ConfigMap"),
                        Some(NAMESPACE.to_string()),
                        name.to_string(),
                    );
                    (key, o.clone())
                })
                .collect(),
        };
        let mut on_cluster: DynamicObject =
            serde_json::from_value(resource.clone()).expect("a Widget");
        let namespaced = ctx.namespaced.clone();
        for number in 1..=4 {
            let cluster_step = PhaseStep {
                definition: &def,
                resource: &on_cluster,
                now: NOW,
                sandbox: &ctx.sandbox,
                namespaced: &namespaced,
            };
            let mut effects = ClusterEffects {
                ctx: &ctx,
                api: &api,
                resource: &on_cluster,
                on_server: &on_cluster,
                read: Read::FromCache,
                // Each step is compared with the simulator's, written.
                may_hold: false,
                held: false,
                live: None,
            };
            let cluster = step::run(cluster_step, &mut effects).await;

            let simulated = world.resource.clone();
            let source: ObjectsByKind = world.source().expect("the world's objects");
            let reads = OfflineReads::new(&modules, &source, Samples::Given(Vec::new()));
            let mut effects = SimulatedCluster::new(reads, &mut world, &def.name);
            let simulated_step = PhaseStep {
                definition: &def,
                resource: &simulated,
                now: NOW,
                sandbox: modules.sandbox(),
                namespaced: &namespaced,
            };
            let simulator = step::run(simulated_step, &mut effects).await;

            let context = format!("seed {seed}, step {number}, script {script}");
            assert_eq!(ending(&cluster), ending(&simulator), "{context}");
            let stored = fake.objects.lock().expect("the store").clone();
            let cluster_objects: BTreeMap<String, Value> = stored
                .iter()
                .filter(|(path, _)| path.contains("/configmaps/"))
                .map(|(_, o)| (o["metadata"]["name"].to_string(), comparable(o)))
                .collect();
            let world_objects: BTreeMap<String, Value> = world
                .objects
                .values()
                .map(|o| (o["metadata"]["name"].to_string(), comparable(o)))
                .collect();
            assert_eq!(cluster_objects, world_objects, "objects: {context}");
            let cluster_objects_bookkeeping: BTreeMap<String, (Value, Value)> = stored
                .values()
                .map(|o| {
                    let m = &o["metadata"];
                    (
                        m["name"].to_string(),
                        (m["uid"].clone(), m["resourceVersion"].clone()),
                    )
                })
                .collect();
            let cluster_status = &stored[&widget_path]["status"];
            assert_eq!(
                cluster_status,
                world.resource.data.get("status").unwrap_or(&Value::Null),
                "status: {context}"
            );
            match &cluster {
                Ok(StepOutcome::Decided(d)) => {
                    decided += 1;
                    pruned += usize::from(d.pruned > 0);
                }
                Err(ReconcileError::Apply { .. }) => refused += 1,
                Err(_) => failed += 1,
                _ => {}
            }
            let Ok(StepOutcome::Decided(d)) = cluster else {
                break;
            };
            if let Some(written) = d.written {
                on_cluster = written;
            }
            // The simulated world keeps no uids or resourceVersions (workers see them): aligned
            // with the API server's before the next step.
            world.resource.metadata.resource_version = on_cluster.metadata.resource_version.clone();
            for object in world.objects.values_mut() {
                let name = object["metadata"]["name"].to_string();
                if let Some(stored) = cluster_objects_bookkeeping.get(&name) {
                    object["metadata"]["uid"] = stored.0.clone();
                    object["metadata"]["resourceVersion"] = stored.1.clone();
                }
            }
        }
        drop(ctx);
        drop(api);
        drop(client);
        server.await.expect("the fake API server");
    }
    // The premise: the cases reached each kind of write and failure.
    eprintln!("{decided} decided steps ({pruned} pruning), {refused} refused, {failed} failed");
    assert!(
        decided > 150 && pruned > 15 && refused > 30 && failed > 30,
        "{decided} decided steps ({pruned} pruning), {refused} refused, {failed} failed"
    );
}
