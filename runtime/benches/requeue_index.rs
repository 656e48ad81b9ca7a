//! Issue 31, goal 4: what one input change costs the host to find the resources it concerns,
//! at 1,000 and 10,000 resources in one namespace. Each resource (an AutoRoute) selects its own
//! Deployment by `spec.deploymentSelector`; the change moves one Deployment's label from one
//! route to another, so two resources match whatever the namespace holds.
//!
//! Baseline: the rule before the selector index, measured in the same run — every resource of
//! the namespace looked at, its selector parsed from its spec, per change. Subject:
//! [`SelectorIndex::selecting`], which looks only at the resources filed under the object's
//! labels. Five runs per case, interleaved; each run times 2,000 changes (200 for the baseline
//! at 10,000). Prints per change the median of the runs with min–max.
//!
//! `cargo bench -p wasmpilot-runtime --bench requeue_index --profile e2e-bench`

mod timing;

use kube::api::DynamicObject;
use kube::discovery::ApiResource;
use kube::runtime::reflector::{store::Writer, ObjectRef, Store};
use kube::runtime::watcher;
use serde_json::json;
use std::collections::BTreeMap;
use std::hint::black_box;
use wasmpilot_runtime::controller::selector_index::{ObjectAt, SelectorIndex};
use wasmpilot_runtime::crd::InputSpec;
use wasmpilot_runtime::pipeline::inputs;

const RUNS: usize = 5;

fn autoroutes() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &kube::core::GroupVersionKind::gvk("examples.io", "v1", "AutoRoute"),
        "autoroutes",
    )
}

fn route(i: usize) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "examples.io/v1", "kind": "AutoRoute",
        "metadata": {"name": format!("r{i}"), "namespace": "bench", "uid": format!("uid-{i}"),
                     "resourceVersion": "1", "generation": 1},
        "spec": {"deploymentSelector": {"matchLabels": {"route": format!("r{i}")}}},
    }))
    .expect("a route")
}

fn input() -> InputSpec {
    serde_json::from_value(json!({"name": "deployments", "apiVersion": "apps/v1",
        "kind": "Deployment", "selectorFrom": "spec.deploymentSelector"}))
    .expect("an input")
}

/// The rule before the index: every resource of the namespace, its selector parsed, per change.
fn scan(
    store: &Store<DynamicObject>,
    spec: &InputSpec,
    ns: &str,
    new: &BTreeMap<String, String>,
    old: &BTreeMap<String, String>,
) -> Vec<ObjectRef<DynamicObject>> {
    store
        .state()
        .iter()
        .filter(|o| o.metadata.namespace.as_deref() == Some(ns))
        .filter(
            |o| match inputs::input_selector(spec, inputs::Reader::of(o.as_ref())) {
                Ok(selector) => selector.matches(Some(new)) || selector.matches(Some(old)),
                Err(_) => true,
            },
        )
        .map(|o| ObjectRef::from_obj_with(o.as_ref(), autoroutes()))
        .collect()
}

fn labels(route: usize) -> BTreeMap<String, String> {
    BTreeMap::from([("route".to_string(), format!("r{route}"))])
}

fn main() {
    let smoke = !std::env::args().any(|a| a == "--bench");
    let spec = input();
    println!(
        "{:<44} {:>14} {:>22}",
        "one Deployment relabelled (2 routes match)", "per change", "(min–max of 5 runs)"
    );
    let mut per_size = Vec::new();
    for n in [1_000usize, 10_000] {
        let index = SelectorIndex::new(autoroutes(), vec![spec.clone()]);
        let mut writer = Writer::<DynamicObject>::new(autoroutes());
        for i in 0..n {
            let event = watcher::Event::Apply(route(i));
            index.observe(&event);
            writer.apply_watcher_event(&event);
        }
        let store = writer.as_reader();
        let pair = |i: usize| (labels((i * 7919) % n), labels((i * 7919 + 1) % n));
        let (mut indexed, mut scanned) = (Vec::new(), Vec::new());
        let runs = if smoke { 1 } else { RUNS };
        for _ in 0..runs {
            let changes = if smoke { 10 } else { 2_000 };
            indexed.push(timing::per_call(
                changes,
                2,
                "each change concerns two routes",
                |i| {
                    let (new, old) = pair(i);
                    black_box(index.selecting(&ObjectAt {
                        namespace: Some("bench"),
                        name: Some("changed"),
                        labels: Some(&new),
                        labels_before: Some(Some(&old)),
                    }))
                    .len()
                },
            ));
            let changes = if smoke {
                2
            } else if n > 1_000 {
                200
            } else {
                2_000
            };
            scanned.push(timing::per_call(
                changes,
                2,
                "each change concerns two routes",
                |i| {
                    let (new, old) = pair(i);
                    black_box(scan(&store, &spec, "bench", &new, &old)).len()
                },
            ));
        }
        let (im, imin, imax) = timing::summary(indexed);
        let (sm, smin, smax) = timing::summary(scanned);
        println!(
            "{:<44} {:>14.2?} {:>22}",
            format!("{n} routes: every route looked at (before)"),
            sm,
            format!("({smin:.2?}–{smax:.2?})")
        );
        println!(
            "{:<44} {:>14.2?} {:>22}   {:.0}× less",
            format!("{n} routes: selector index"),
            im,
            format!("({imin:.2?}–{imax:.2?})"),
            sm.as_secs_f64() / im.as_secs_f64().max(1e-12)
        );
        per_size.push((im, sm));
    }
    if let [(i1, s1), (i10, s10)] = per_size[..] {
        println!(
            "10,000 vs 1,000 routes, per change: index {:.2}×, every route looked at {:.2}×",
            i10.as_secs_f64() / i1.as_secs_f64().max(1e-12),
            s10.as_secs_f64() / s1.as_secs_f64().max(1e-12)
        );
    }
}
