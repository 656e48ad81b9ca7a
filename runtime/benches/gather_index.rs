//! Issue 31, goals 2 and 4: what gathering one resource's inputs costs the host, at 1,000 and
//! 10,000 resources in one namespace. Each resource (an AutoRoute) selects its own two
//! Deployments by `spec.deploymentSelector` and reads the two Services it controls (an `owned`
//! input), as AutoRoute's Ready phase does; the namespace holds 2 × n of each.
//!
//! Baseline, in the same run: the gather before the index — every object of the kind in the
//! namespace handed to the filter, per input, per call. Subject: the informer cache's
//! [`ObjectIndex::candidates`] (what the controller's input and output caches read), narrowing
//! to the controller's objects or to the smallest label posting first. Both go through the same
//! [`inputs::gather`]. Five runs per case, interleaved; each times 2,000 gathers (200 for the
//! baseline at 10,000). Prints per gather the median of the runs with min–max, the index's
//! upkeep per watch update (a status change; a relabel), and its memory: the heap a cache of
//! these objects holds with its indexes against the same cache indexed by name only (a
//! counting allocator; deterministic, one run).
//!
//! `cargo bench -p wasmpilot-runtime --bench gather_index --profile e2e-bench`

mod timing;

use kube::api::DynamicObject;
use serde_json::json;
use std::hint::black_box;
use std::sync::Arc;
use std::time::Instant;
use wasmpilot_runtime::controller::object_index::ObjectIndex;
use wasmpilot_runtime::crd::{InputSpec, KindRef};
use wasmpilot_runtime::pipeline::inputs::{self, ObjectSource, Reader, Wanted, WorkerObject};

const RUNS: usize = 5;

/// The system allocator, counting the bytes live: what a cache holds is the difference before
/// and after it is filled.
struct Counting;

static LIVE: std::sync::atomic::AtomicIsize = std::sync::atomic::AtomicIsize::new(0);

unsafe impl std::alloc::GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, std::sync::atomic::Ordering::Relaxed);
        // SAFETY: forwarded as received.
        unsafe { std::alloc::System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: std::alloc::Layout) {
        LIVE.fetch_sub(layout.size() as isize, std::sync::atomic::Ordering::Relaxed);
        // SAFETY: forwarded as received.
        unsafe { std::alloc::System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn live_bytes() -> isize {
    LIVE.load(std::sync::atomic::Ordering::Relaxed)
}

/// Heap bytes per object that an index of `objects` holds (the objects themselves not counted:
/// they are allocated before), labels indexed or not.
fn index_bytes_per_object(objects: &[Arc<WorkerObject>], by_labels: bool) -> f64 {
    let before = live_bytes();
    let mut index = ObjectIndex::new(by_labels);
    for o in objects {
        index.insert(o.clone());
    }
    let bytes = live_bytes() - before;
    drop(index);
    bytes as f64 / objects.len() as f64
}

const NS: &str = "bench";

fn route(i: usize) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "examples.io/v1", "kind": "AutoRoute",
        "metadata": {"name": format!("r{i}"), "namespace": NS, "uid": format!("uid-{i}"),
                     "resourceVersion": "1", "generation": 1},
        "spec": {"deploymentSelector": {"matchLabels": {"route": format!("r{i}")}}},
    }))
    .expect("a route")
}

fn deployment(route: usize, k: usize, version: usize) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": format!("r{route}-d{k}"), "namespace": NS,
                     "uid": format!("d-{route}-{k}"), "resourceVersion": version.to_string(),
                     "labels": {"app": "bench", "route": format!("r{route}")}},
        "spec": {"replicas": 1, "template": {"spec": {"containers": [
            {"name": "web", "image": "nginx", "ports": [{"containerPort": 8080}]}]}}},
        "status": {"readyReplicas": version % 2},
    }))
    .expect("a deployment")
}

fn service(route: usize, k: usize) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": format!("r{route}-s{k}"), "namespace": NS, "uid": format!("s-{route}-{k}"),
                     "resourceVersion": "1",
                     "labels": {"app": "bench", "wasmpilot.dev/operator": "autoroute"},
                     "ownerReferences": [{"apiVersion": "examples.io/v1", "kind": "AutoRoute",
                         "name": format!("r{route}"), "uid": format!("uid-{route}"), "controller": true}]},
        "spec": {"ports": [{"port": 80, "targetPort": 8080}]},
    }))
    .expect("a service")
}

fn inputs_read() -> Vec<InputSpec> {
    serde_json::from_value(json!([
        {"name": "deployments", "apiVersion": "apps/v1", "kind": "Deployment",
         "selectorFrom": "spec.deploymentSelector"},
        {"name": "services", "apiVersion": "v1", "kind": "Service", "owned": true},
    ]))
    .expect("inputs")
}

/// The caches of one namespace's objects, read through the index or (baseline) whole.
struct Caches {
    deployments: ObjectIndex<WorkerObject>,
    services: ObjectIndex<WorkerObject>,
    indexed: bool,
}

impl ObjectSource for Caches {
    fn worker_objects(&self, input: &InputSpec, wanted: &Wanted<'_>) -> Vec<Arc<WorkerObject>> {
        let cache = match input.kind.as_str() {
            "Deployment" => &self.deployments,
            _ => &self.services,
        };
        if self.indexed {
            cache.candidates(wanted)
        } else {
            cache.in_namespace(wanted.namespace)
        }
    }
}

fn worker_object(o: &DynamicObject) -> Arc<WorkerObject> {
    let types = o.types.clone().expect("typed");
    Arc::new(WorkerObject::new(
        o,
        &KindRef::new(types.api_version, types.kind),
        None,
    ))
}

fn main() {
    let smoke = !std::env::args().any(|a| a == "--bench");
    let spec = inputs_read();
    println!(
        "{:<46} {:>12} {:>22}",
        "one route's inputs gathered (4 objects)", "per gather", "(min–max of 5 runs)"
    );
    let mut per_size = Vec::new();
    for n in [1_000usize, 10_000] {
        let routes: Vec<DynamicObject> = (0..n).map(route).collect();
        let mut caches = Caches {
            deployments: ObjectIndex::new(true),
            services: ObjectIndex::new(true),
            indexed: true,
        };
        for r in 0..n {
            for k in 0..2 {
                caches
                    .deployments
                    .insert(worker_object(&deployment(r, k, 1)));
                caches.services.insert(worker_object(&service(r, k)));
            }
        }
        let gather = |caches: &Caches, i: usize| {
            let resource = &routes[(i * 7919) % n];
            let gathered =
                inputs::gather(&spec, Reader::of(resource), caches).expect("selectors parse");
            black_box(&gathered)
                .iter()
                .map(|input| input.objects.len())
                .sum::<usize>()
        };
        let (mut indexed, mut scanned) = (Vec::new(), Vec::new());
        let runs = if smoke { 1 } else { RUNS };
        for _ in 0..runs {
            caches.indexed = true;
            let calls = if smoke { 10 } else { 2_000 };
            indexed.push(timing::per_call(
                calls,
                4,
                "each route sees its 2 Deployments and 2 Services",
                |i| gather(&caches, i),
            ));
            caches.indexed = false;
            let calls = if smoke {
                2
            } else if n > 1_000 {
                200
            } else {
                2_000
            };
            scanned.push(timing::per_call(
                calls,
                4,
                "each route sees its 2 Deployments and 2 Services",
                |i| gather(&caches, i),
            ));
        }
        // The index's upkeep: a watch update that keeps the labels (a status change), and one
        // that moves a Deployment to another route.
        let updates = if smoke { 10 } else { 20_000 };
        let prepared: Vec<Arc<WorkerObject>> = (0..updates)
            .map(|i| worker_object(&deployment((i * 7919) % n, 0, i + 2)))
            .collect();
        let started = Instant::now();
        for o in &prepared {
            black_box(caches.deployments.insert(o.clone()));
        }
        let status_update = started.elapsed() / updates as u32;
        let relabelled: Vec<Arc<WorkerObject>> = (0..updates)
            .map(|i| {
                let mut d = deployment((i * 7919) % n, 1, i + 2);
                let labels = d.metadata.labels.get_or_insert_with(Default::default);
                labels.insert("route".into(), format!("r{}", (i * 7919 + 1) % n));
                worker_object(&d)
            })
            .collect();
        let started = Instant::now();
        for o in &relabelled {
            black_box(caches.deployments.insert(o.clone()));
        }
        let relabel = started.elapsed() / updates as u32;

        let (im, imin, imax) = timing::summary(indexed);
        let (sm, smin, smax) = timing::summary(scanned);
        println!(
            "{:<46} {:>12.2?} {:>22}",
            format!("{n} routes: whole namespace filtered (before)"),
            sm,
            format!("({smin:.2?}–{smax:.2?})")
        );
        println!(
            "{:<46} {:>12.2?} {:>22}   {:.0}× less",
            format!("{n} routes: owner and label indexes"),
            im,
            format!("({imin:.2?}–{imax:.2?})"),
            sm.as_secs_f64() / im.as_secs_f64().max(1e-12)
        );
        println!(
            "{:<46} {:>12.2?} {:>22}",
            format!("{n} routes: index upkeep per status update"),
            status_update,
            "(one run)"
        );
        println!(
            "{:<46} {:>12.2?} {:>22}",
            format!("{n} routes: index upkeep per relabel"),
            relabel,
            "(one run)"
        );
        per_size.push((im, sm));
    }
    // The indexes' memory: the same objects indexed by name only (labels off; Services
    // without their owner reference), then with the label or controller index.
    for n in [1_000usize, 10_000] {
        let objects = |make: &dyn Fn(usize, usize) -> DynamicObject| -> Vec<Arc<WorkerObject>> {
            (0..n)
                .flat_map(|r| (0..2).map(move |k| (r, k)))
                .map(|(r, k)| worker_object(&make(r, k)))
                .collect()
        };
        let deployments = objects(&|r, k| deployment(r, k, 1));
        let services = objects(&service);
        let unowned = objects(&|r, k| {
            let mut s = service(r, k);
            s.metadata.owner_references = None;
            s
        });
        let by_name = index_bytes_per_object(&deployments, false);
        let by_label = index_bytes_per_object(&deployments, true);
        let unowned = index_bytes_per_object(&unowned, false);
        let by_controller = index_bytes_per_object(&services, false);
        println!(
            "{n} routes: index bytes per object: Deployments by name {by_name:.0}, and by label \
             {by_label:.0} (+{:.0}); Services by name {unowned:.0}, and by controller \
             {by_controller:.0} (+{:.0})",
            by_label - by_name,
            by_controller - unowned
        );
    }
    if let [(i1, s1), (i10, s10)] = per_size[..] {
        println!(
            "10,000 vs 1,000 routes, per gather: indexes {:.2}×, whole namespace {:.2}×",
            i10.as_secs_f64() / i1.as_secs_f64().max(1e-12),
            s10.as_secs_f64() / s1.as_secs_f64().max(1e-12)
        );
    }
}
