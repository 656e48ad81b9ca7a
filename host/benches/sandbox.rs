//! Issue 7, parts 1 and 2: what running business logic in the sandbox costs, as ratios against
//! a baseline measured in the same run.
//!
//! 1. Sandbox overhead: one AutoRoute Syncing call as the host performs it vs the same worker
//!    compiled natively (through `wasmpilot_guest::testing`, the code path of the Wasm export),
//!    for 1, 100 and 1,000 realistic Deployments; the fixed cost of a trivial call; and
//!    variants with less data per object, to show how much of a call is parsing.
//! 2. Module load: compiling component bytes vs loading a precompiled (`.cwasm`) artifact.
//! 3. Languages (issue 16): the AutoRoute phases as Python and JavaScript components beside the
//!    Rust one and native Rust — size, compile, cache load, fixed cost, 100 Deployments.
//!
//! Run everything with `deploy/local/bench.sh` (builds the guest components first). By hand:
//! `cargo bench -p wasmpilot --bench sandbox [-- FILTER…]` runs the groups whose title contains
//! a filter; `WASMPILOT_BENCH_SECONDS` sets the time budget per group (default 5).
//! Without `--bench` (`cargo test --benches`) every case runs once, as a smoke test.
//!
//! Each group runs its cases round-robin (one call of each per round, after a warm-up), so a
//! baseline and its subjects see the same machine load; it prints median and p90 per case and
//! the ratio of medians against the group's first case. The languages' groups also run native
//! and each language in runs of their own calls ([`RUN_OF_CALLS`]): a call after calls of
//! another language starts on caches that language took.

mod fixtures;

use autoroute_initializing::Initializing;
use autoroute_syncing::Syncing;
use autoroute_types::phases::{initializing, syncing};
use futures::executor::block_on;
use kube::api::DynamicObject;
use serde_json::Value;
use std::collections::HashMap;
use std::hint::black_box;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};
use wasmpilot::crd::{InputSpec, KindRef, WasmOperator};
use wasmpilot::definition::{OperatorDefinition, PhaseDefinition};
use wasmpilot::modules::compile_cache::CompileCache;
use wasmpilot::modules::digest_of;
use wasmpilot::pipeline::inputs::{self, ObjectSource, WorkerObject};
use wasmpilot::pipeline::outputs::{self, Owner};
use wasmpilot::sandbox::bindings::finalizer::wasmpilot::operator::finalizer_inputs;
use wasmpilot::sandbox::bindings::phase::wasmpilot::operator::{log, types};
use wasmpilot::sandbox::bindings::phase::{Phase, PhasePre};
use wasmpilot::sandbox::{
    InstanceMemory, LimitOverride, LogField, LogLevel, PhaseModule, Sandbox, SandboxLimits,
    SyncRequest, SyncResult, DEFAULT_KEEP_RESIDENT,
};
use wasmpilot_guest::testing::SyncTest;
use wasmtime::component::{Component, Linker, ResourceTable};
use wasmtime::{
    Config, Enabled, Engine, InstanceAllocationStrategy, PoolingAllocationConfig, Store,
    StoreLimits, StoreLimitsBuilder,
};
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

/// The clock every request carries.
const NOW: &str = "2025-06-01T12:00:00Z";

/// Set in the measuring child process (see `main`).
const CHILD: &str = "WASMPILOT_BENCH_CHILD";

/// Issue 7's targets.
const TARGET_RATIO_AT_100: f64 = 1.3;
const TARGET_FIXED_COST: Duration = Duration::from_micros(60);

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let bench = Bench {
        measure: args.iter().any(|a| a == "--bench"),
        filters: args
            .iter()
            .filter(|a| !a.starts_with('-'))
            .cloned()
            .collect(),
        budget: Duration::from_secs_f64(
            std::env::var("WASMPILOT_BENCH_SECONDS")
                .ok()
                .and_then(|s| s.parse().ok())
                .unwrap_or(5.0),
        ),
    };
    let wasm = WasmDir::find();
    if std::env::var_os(CHILD).is_none() {
        // The native workers echo every log line to stderr (the guest SDK's testing module
        // does): on a terminal the baseline would pay for that. Measure in a child whose
        // stderr is discarded; it reports panics on stdout.
        let status = std::process::Command::new(std::env::current_exe().expect("bench binary"))
            .args(&args)
            .env(CHILD, "1")
            .stderr(std::process::Stdio::null())
            .status()
            .expect("runs the benchmark process");
        std::process::exit(status.code().unwrap_or(1));
    }
    std::panic::set_hook(Box::new(|info| println!("error: {info}")));
    print_machine();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let env = Env::new(&wasm);
    let mut summary = Summary::default();

    for n in [1, 100, 1000] {
        overhead(&bench, &rt, &env, n, &mut summary);
    }
    fixed_cost(&bench, &rt, &env, &wasm, &mut summary);
    breakdown(&bench, &rt, &env, &wasm, 100, &mut summary);
    for n in [100, 1000] {
        parsing_share(&bench, &rt, &env, n, &mut summary);
    }
    for file in [SYNCING, INITIALIZING] {
        module_load(&bench, &env, &wasm, file, &mut summary);
    }
    languages(&bench, &rt, &env, &wasm, &mut summary);
    summary.print(&bench);
}

// ---------------------------------------------------------------------------------------------
// The cases

const SYNCING: &str = "autoroute_syncing.wasm";
const INITIALIZING: &str = "autoroute_initializing.wasm";

/// What every case shares: the AutoRoute operator as the host validates it, and one sandbox
/// with the host's default limits (outputs raised to the ceiling: 1,000 Deployments make
/// ~1,200 outputs, a per-phase override an operator would declare).
struct Env {
    sandbox: Arc<Sandbox>,
    definition: OperatorDefinition,
    syncing: PhaseModule,
    initializing: PhaseModule,
    namespaced: HashMap<KindRef, bool>,
    /// The host's sandbox before the instance pool (fresh mmapped memory per call).
    on_demand: Variant,
}

/// A sandbox with other settings than the host's defaults, and the two modules loaded in it.
struct Variant {
    sandbox: Arc<Sandbox>,
    syncing: PhaseModule,
    initializing: PhaseModule,
}

impl Variant {
    fn new(wasm: &WasmDir, limits: SandboxLimits) -> Self {
        let sandbox = Sandbox::new(limits).expect("sandbox");
        // 1,000 Deployments: 1,201 outputs and a log line per Deployment (per-phase overrides).
        let call_limits = sandbox.call_limits(&LimitOverride {
            max_outputs: Some(10_000),
            log_lines: Some(10_000),
            log_bytes: Some(1 << 20),
            ..Default::default()
        });
        let load = |file: &str| {
            let component = sandbox.compile(&wasm.read(file)).expect("compiles");
            sandbox
                .phase_module(&format!("sha256:{file}"), &component)
                .expect("a phase worker")
                .with_limits(call_limits)
        };
        Variant {
            syncing: load(SYNCING),
            initializing: load(INITIALIZING),
            sandbox,
        }
    }

    /// `calls` calls of `run_sync` one after the other inside one runtime task, as a reconcile
    /// makes them (the bench's own hop into the runtime is shared by all of them).
    fn run_in_task(
        &self,
        rt: &tokio::runtime::Runtime,
        module: &PhaseModule,
        request: &SyncRequest,
        calls: u32,
    ) {
        let (sandbox, module, request) = (self.sandbox.clone(), module.clone(), request.clone());
        rt.block_on(rt.spawn(async move {
            for _ in 0..calls {
                black_box(
                    sandbox
                        .run_sync(&module, request.clone())
                        .await
                        .expect("the worker call"),
                );
            }
        }))
        .expect("the task");
    }
}

impl Env {
    fn new(wasm: &WasmDir) -> Self {
        let manifest = repo_root().join("examples/autoroute/operator.yaml");
        let doc = wasmpilot::offline::read_documents(&manifest)
            .expect("examples/autoroute/operator.yaml")
            .remove(0);
        let operator: WasmOperator = serde_json::from_value(doc).expect("a WasmOperator");
        let definition = OperatorDefinition::validate("autoroute", &operator.spec)
            .expect("the AutoRoute operator validates");
        let Variant {
            sandbox,
            syncing,
            initializing,
        } = Variant::new(wasm, SandboxLimits::default());
        let namespaced = definition
            .output_kinds()
            .into_iter()
            .map(|k| (k, true))
            .collect();
        Env {
            sandbox,
            definition,
            syncing,
            initializing,
            namespaced,
            on_demand: Variant::new(
                wasm,
                SandboxLimits {
                    instance_memory: InstanceMemory::OnDemand,
                    ..SandboxLimits::default()
                },
            ),
        }
    }

    fn phase(&self, name: &str) -> &PhaseDefinition {
        self.definition.phase(name).expect("declared phase")
    }

    /// The request the host builds: resource and inputs serialized from the cached objects.
    fn request(&self, phase: &str, route: &DynamicObject, cache: &Cache) -> SyncRequest {
        SyncRequest {
            operator: self.definition.name.clone(),
            phase: phase.into(),
            resource: inputs::to_worker_json(route, &self.definition.resource),
            inputs: inputs::gather(&self.phase(phase).inputs, inputs::Reader::of(route), cache)
                .expect("valid selectors"),
            now: NOW.into(),
        }
    }

    /// The host's default sandbox as a [`Variant`].
    fn default_variant(&self) -> Variant {
        Variant {
            sandbox: self.sandbox.clone(),
            syncing: self.syncing.clone(),
            initializing: self.initializing.clone(),
        }
    }

    /// `run_sync` of another sandbox, called like [`Env::run`].
    fn run_with(
        &self,
        rt: &tokio::runtime::Runtime,
        sandbox: &Sandbox,
        module: &PhaseModule,
        r: SyncRequest,
    ) -> SyncResult {
        rt.block_on(sandbox.run_sync(module, r))
            .unwrap_or_else(|e| panic!("the worker call failed: {e}"))
    }

    /// `Sandbox::run_sync` as the reconciler awaits it.
    fn run(
        &self,
        rt: &tokio::runtime::Runtime,
        module: &PhaseModule,
        r: SyncRequest,
    ) -> SyncResult {
        rt.block_on(self.sandbox.run_sync(module, r))
            .unwrap_or_else(|e| panic!("the worker call failed: {e}"))
    }

    /// What the reconciler does with a result before applying it: status info parsed, every
    /// output parsed and checked against the phase's declaration.
    fn check(&self, phase: &str, route: &DynamicObject, result: &SyncResult) -> usize {
        if let Some(s) = &result.status_info {
            black_box(serde_json::from_str::<Value>(s).expect("status info"));
        }
        let owner = Owner {
            api_version: &self.definition.resource.api_version,
            kind: &self.definition.resource.kind,
            name: route.metadata.name.as_deref().unwrap_or_default(),
            uid: route.metadata.uid.as_deref().unwrap_or_default(),
            namespace: route.metadata.namespace.as_deref(),
        };
        let no_secrets = wasmpilot::redaction::Redactor::default();
        outputs::check(
            self.phase(phase),
            &owner,
            &self.namespaced,
            &result.outputs,
            &no_secrets,
        )
        .expect("outputs pass the host's checks")
        .len()
    }
}

/// The watch caches: with `cached_json`, objects as the informers keep them (serialized — and
/// cut to the input's declared `fields` — once, on arrival); else serialized on every call from
/// the parsed objects.
struct Cache {
    objects: Vec<Arc<DynamicObject>>,
    kept: Option<std::sync::OnceLock<Vec<Arc<WorkerObject>>>>,
}

impl Cache {
    fn new(objects: Vec<Arc<DynamicObject>>, cached_json: bool) -> Self {
        let kept = cached_json.then(std::sync::OnceLock::new);
        Cache { objects, kept }
    }
}

impl ObjectSource for Cache {
    fn worker_objects(
        &self,
        input: &InputSpec,
        wanted: &inputs::Wanted<'_>,
    ) -> Vec<Arc<WorkerObject>> {
        match &self.kept {
            Some(kept) => kept
                .get_or_init(|| inputs::worker_objects_of(&self.objects, input, None))
                .clone(),
            None => inputs::worker_objects_of(&self.objects, input, wanted.namespace),
        }
    }
}

fn dynamic(v: &Value) -> Arc<DynamicObject> {
    Arc::new(serde_json::from_value(v.clone()).expect("a Kubernetes object"))
}

/// The native baseline: the worker's export code path (parse request, decide, serialize
/// outputs) on the same request strings, and the outputs parsed back.
fn native_test(request: &SyncRequest) -> SyncTest {
    let resource: Value = serde_json::from_str(&request.resource).expect("resource JSON");
    let mut test = SyncTest::new(resource)
        .operator(&request.operator)
        .phase(&request.phase)
        .now(&request.now);
    for input in &request.inputs {
        test = test.input_json(&input.name, input.objects.iter().cloned());
    }
    test
}

/// The sandbox result parsed as the native `SyncReport` is (outputs and status to JSON values).
fn parse_result(r: &SyncResult) -> (usize, Option<Value>) {
    let outputs: Vec<Value> = r
        .outputs
        .iter()
        .map(|o| serde_json::from_str(o).expect("output JSON"))
        .collect();
    let status = r
        .status_info
        .as_deref()
        .map(|s| serde_json::from_str(s).expect("status JSON"));
    (black_box(outputs).len(), status)
}

fn request_bytes(r: &SyncRequest) -> usize {
    r.resource.len()
        + r.inputs
            .iter()
            .flat_map(|i| &i.objects)
            .map(String::len)
            .sum::<usize>()
}

/// Part 1: Syncing with `n` Deployments — native, sandbox only, the host's whole path.
fn overhead(bench: &Bench, rt: &tokio::runtime::Runtime, env: &Env, n: usize, sum: &mut Summary) {
    let title = format!("overhead: AutoRoute Syncing, {n} Deployments");
    if !bench.selected(&title) {
        return;
    }
    let route = dynamic(&fixtures::route());
    let objects = fixtures::deployments(n);
    let cached: Vec<Arc<DynamicObject>> = objects.iter().map(dynamic).collect();
    let per_call = Cache::new(cached.clone(), false);
    let json_cache = Cache::new(cached, true);
    let request = env.request("Syncing", &route, &per_call);
    assert_eq!(
        env.request("Syncing", &route, &json_cache).inputs[0].objects,
        request.inputs[0].objects
    );
    let native = native_test(&request);
    let full_bytes: usize = objects.iter().map(|o| o.to_string().len()).sum();

    // Same logic, same answer: the native report and the component's result agree.
    let report = native
        .run(&syncing::Export(Syncing))
        .expect("native Syncing succeeds");
    let result = env.run(rt, &env.syncing, request.clone());
    let expected_outputs = 1 + 2 * fixtures::routable_count(n);
    assert_eq!(report.outputs.len(), expected_outputs);
    assert_eq!(
        parse_result(&result),
        (expected_outputs, report.status.clone())
    );
    assert_eq!(env.check("Syncing", &route, &result), expected_outputs);

    let note = format!(
        "{} outputs; {} of worker JSON sent ({} per object; {} as cached, with managedFields)",
        expected_outputs,
        kib(request_bytes(&request)),
        kib(request_bytes(&request) / n),
        kib(full_bytes),
    );
    let stats = bench.group(
        &title,
        &note,
        1,
        vec![
            Case::new("native (baseline)", || {
                black_box(native.run(&syncing::Export(Syncing)).expect("native"));
            }),
            Case::new("sandbox only", || {
                let r = env.run(rt, &env.syncing, request.clone());
                black_box(parse_result(&r));
            }),
            Case::new("host path (cached JSON, as reconcile does)", || {
                let r = env.request("Syncing", &route, &json_cache);
                let result = env.run(rt, &env.syncing, r);
                black_box(env.check("Syncing", &route, &result));
            }),
            Case::new("host path, to_worker_json every call", || {
                let r = env.request("Syncing", &route, &per_call);
                let result = env.run(rt, &env.syncing, r);
                black_box(env.check("Syncing", &route, &result));
            }),
            Case::new("  of which the request, cached JSON", || {
                black_box(env.request("Syncing", &route, &json_cache));
            }),
            Case::new("  of which the request, to_worker_json", || {
                black_box(env.request("Syncing", &route, &per_call));
            }),
            Case::new("host path, on-demand memory (before the pool)", || {
                let r = env.request("Syncing", &route, &json_cache);
                let v = &env.on_demand;
                let result = env.run_with(rt, &v.sandbox, &v.syncing, r);
                black_box(env.check("Syncing", &route, &result));
            }),
        ],
    );
    if let Some(s) = stats {
        sum.row(
            format!("Syncing, {n} Deployments"),
            &s,
            &[
                ("sandbox only", 1),
                ("host path (cached JSON)", 2),
                ("host path (to_worker_json per call)", 3),
                ("host path, on-demand memory (before)", 6),
            ],
        );
        sum.serialize_share
            .push((n, s[5].median, s[3].median, s[4].median));
        if n == 100 {
            sum.ratio_at_100 = Some([1, 2, 3].map(|i| paired(&s[i], &s[0])));
        }
    }
}

/// Part 1: the fixed cost of a call (Initializing: parse the route, log a line, decide), and
/// where it goes: wasmtime itself (on-demand vs pooling allocator), the host's thread hand-off.
fn fixed_cost(
    bench: &Bench,
    rt: &tokio::runtime::Runtime,
    env: &Env,
    wasm: &WasmDir,
    sum: &mut Summary,
) {
    let title = "fixed cost: instantiate + trivial sync (Initializing) + drop";
    if !bench.selected(title) {
        return;
    }
    let route = dynamic(&fixtures::route());
    let request = env.request("Initializing", &route, &Cache::new(vec![], false));
    let native = native_test(&request);
    assert_eq!(
        native
            .run(&initializing::Export(Initializing))
            .expect("native")
            .next_phase,
        "Syncing"
    );
    assert_eq!(
        env.run(rt, &env.initializing, request.clone()).next_phase,
        "Syncing"
    );

    let raw = RawWorkers::new(&wasm.read(INITIALIZING), &request, "Syncing");
    let mut warm = raw.on_demand.warm();

    let stats = bench.group(
        title,
        RAW_NOTE,
        1,
        vec![
            Case::new("native (baseline)", || {
                black_box(native.run(&initializing::Export(Initializing)).expect("native"));
            }),
            Case::batched("Sandbox::run_sync in a runtime task (host)", 10, || {
                let v = &env.default_variant();
                v.run_in_task(rt, &v.initializing, &request, 10);
            }),
            Case::new("raw: fresh instance, on-demand allocator", || {
                black_box(raw.on_demand.call(&request));
            }),
            Case::new("raw: fresh instance, pooling", || {
                black_box(raw.pooling.call(&request));
            }),
            Case::new("raw: fresh instance, pooling + keep resident", || {
                black_box(raw.resident.call(&request));
            }),
            Case::new("raw: warm instance (no fresh memory)", || {
                black_box(warm.call(&request));
            }),
            Case::new("raw: keep resident + pagemap scan (host's)", || {
                black_box(raw.pagemap.call(&request));
            }),
            Case::new("  instantiate + drop only, on-demand", || {
                raw.on_demand.instantiate_only();
            }),
            Case::new("  instantiate + drop only, pooling", || {
                raw.pooling.instantiate_only();
            }),
            Case::new("  spawn_blocking round trip (hand-off before)", || {
                rt.block_on(async { tokio::task::spawn_blocking(|| black_box(1)).await })
                    .expect("spawn_blocking");
            }),
            Case::batched("Sandbox::run_sync in a task, on-demand memory", 10, || {
                let v = &env.on_demand;
                v.run_in_task(rt, &v.initializing, &request, 10);
            }),
            Case::new("Sandbox::run_sync via block_on from outside", || {
                black_box(env.run(rt, &env.initializing, request.clone()));
            }),
            Case::new("  one native log line echo (stderr: /dev/null)", || {
                eprintln!(
                    "[autoroute Syncing] Info routing deployment deployment={} hostname={}.bench port={}",
                    black_box("svc-00001"),
                    black_box("svc-00001"),
                    black_box(8001)
                );
            }),
        ],
    );
    if let Some(s) = stats {
        sum.row(
            "fixed cost (Initializing)".into(),
            &s,
            &[
                ("Sandbox::run_sync", 1),
                ("raw, on-demand", 2),
                ("raw, pooling", 3),
                ("raw, keep resident", 4),
                ("raw, warm instance", 5),
                ("raw, pagemap scan", 6),
            ],
        );
        sum.fixed = Some(FixedCost {
            native: s[0].median,
            host: s[1].median,
            raw: s[2].median,
            raw_pooling: s[3].median,
            raw_resident: s[4].median,
            warm: s[5].median,
            raw_pagemap: s[6].median,
            instantiate: s[7].median,
            instantiate_pooling: s[8].median,
            spawn_blocking: s[9].median,
            on_demand: s[10].median,
            outside: s[11].median,
            log_line: s[12].median,
        });
    }
}

const RAW_NOTE: &str =
    "raw = wasmtime driven directly with the sandbox's engine settings, linker and \
    WASI context, on the calling thread (no semaphore or stdio forwarding); keep resident = \
    pooling with linear_memory_keep_resident(8 MiB), resetting the low 8 MiB with memset unless \
    pagemap scan finds the dirty pages. Sandbox::run_sync uses the host's defaults: instance pool \
    keeping 8 MiB resident, pagemap scan, the call on a fiber of the calling task";

/// Evidence: where the time of a data-heavy call goes — fresh memory per call (on-demand vs
/// pooling allocator vs a warm instance) against the native baseline.
fn breakdown(
    bench: &Bench,
    rt: &tokio::runtime::Runtime,
    env: &Env,
    wasm: &WasmDir,
    n: usize,
    sum: &mut Summary,
) {
    let title = format!("breakdown: Syncing, {n} Deployments, fresh vs warm instance");
    if !bench.selected(&title) {
        return;
    }
    let route = dynamic(&fixtures::route());
    let objects = fixtures::deployments(n);
    let request = env.request(
        "Syncing",
        &route,
        &Cache::new(objects.iter().map(dynamic).collect(), false),
    );
    let native = native_test(&request);
    let raw = RawWorkers::new(&wasm.read(SYNCING), &request, "Ready");
    let mut warm = raw.on_demand.warm();
    let stats = bench.group(
        &title,
        RAW_NOTE,
        1,
        vec![
            Case::new("native (baseline)", || {
                black_box(native.run(&syncing::Export(Syncing)).expect("native"));
            }),
            Case::new("Sandbox::run_sync (sandbox only)", || {
                black_box(parse_result(&env.run(rt, &env.syncing, request.clone())));
            }),
            Case::new("raw: fresh instance, on-demand allocator", || {
                black_box(parse_result(&raw.on_demand.call(&request)));
            }),
            Case::new("raw: fresh instance, pooling", || {
                black_box(parse_result(&raw.pooling.call(&request)));
            }),
            Case::new("raw: fresh instance, pooling + keep resident", || {
                black_box(parse_result(&raw.resident.call(&request)));
            }),
            Case::new("raw: warm instance (no fresh memory)", || {
                black_box(parse_result(&warm.call(&request)));
            }),
            Case::new("Sandbox::run_sync, on-demand memory (before)", || {
                let v = &env.on_demand;
                black_box(parse_result(&env.run_with(
                    rt,
                    &v.sandbox,
                    &v.syncing,
                    request.clone(),
                )));
            }),
            Case::batched("×10 in a runtime task", 10, || {
                let v = &env.default_variant();
                v.run_in_task(rt, &v.syncing, &request, 10);
            }),
        ],
    );
    if let Some(s) = stats {
        sum.row(
            format!("breakdown, Syncing, {n} Deployments"),
            &s,
            &[
                ("Sandbox::run_sync", 1),
                ("raw, on-demand", 2),
                ("raw, pooling", 3),
                ("raw, keep resident", 4),
                ("raw, warm instance", 5),
            ],
        );
        println!(
            "   Sandbox::run_sync with on-demand memory (before the instance pool) {:.2}×; from \
             inside a runtime task (per call, without parsing) {:.2}×",
            paired(&s[6], &s[0]),
            paired(&s[7], &s[0])
        );
    }
}

/// Evidence: the same call with less data per object — what the sandbox spends on parsing
/// fields the worker never reads.
fn parsing_share(
    bench: &Bench,
    rt: &tokio::runtime::Runtime,
    env: &Env,
    n: usize,
    sum: &mut Summary,
) {
    let title = format!("parsing share: Syncing, {n} Deployments, less data per object");
    if !bench.selected(&title) {
        return;
    }
    let route = dynamic(&fixtures::route());
    let all = fixtures::deployments(n);
    let as_sent = env.request(
        "Syncing",
        &route,
        &Cache::new(all.iter().map(dynamic).collect(), false),
    );
    // The host selects the route's Deployments: every variant carries the same ones.
    let selected: std::collections::HashSet<String> = as_sent.inputs[0]
        .objects
        .iter()
        .map(|o| {
            let o: Value = serde_json::from_str(o).expect("object JSON");
            o["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        })
        .collect();
    let objects: Vec<&Value> = all
        .iter()
        .filter(|o| selected.contains(o["metadata"]["name"].as_str().unwrap_or_default()))
        .collect();
    let variant = |objects: Vec<String>| {
        let mut r = as_sent.clone();
        r.inputs[0].objects = objects;
        r
    };
    // The first is the baseline's data: what the host sends today.
    let variants = [
        ("as sent (the operator's fields)", as_sent.clone()),
        (
            "with managedFields",
            variant(objects.iter().map(|o| o.to_string()).collect()),
        ),
        (
            "trimmed (- last-applied, - status)",
            variant(
                objects
                    .iter()
                    .map(|o| fixtures::trimmed(o).to_string())
                    .collect(),
            ),
        ),
        (
            "projected (fields read)",
            variant(
                objects
                    .iter()
                    .map(|o| fixtures::projected(o).to_string())
                    .collect(),
            ),
        ),
    ];
    // Big inputs need a bigger memory limit (a per-phase override) when managedFields stay.
    let module = env
        .syncing
        .clone()
        .with_limits(env.sandbox.call_limits(&LimitOverride {
            memory_bytes: Some(256 << 20),
            max_outputs: Some(10_000),
            log_lines: Some(10_000),
            log_bytes: Some(1 << 20),
            ..Default::default()
        }));
    let expected = 1 + 2 * fixtures::routable_count(n);
    let natives: Vec<SyncTest> = variants.iter().map(|(_, r)| native_test(r)).collect();
    for ((_, r), native) in variants.iter().zip(&natives) {
        assert_eq!(
            native
                .run(&syncing::Export(Syncing))
                .expect("native")
                .outputs
                .len(),
            expected
        );
        assert_eq!(parse_result(&env.run(rt, &module, r.clone())).0, expected);
    }
    let mut cases = Vec::new();
    let mut labels = Vec::new();
    for ((name, r), native) in variants.iter().zip(&natives) {
        let per_object = request_bytes(r) / r.inputs[0].objects.len().max(1);
        labels.push(format!("{name}, {}/object", kib(per_object)));
        cases.push(Case::new(format!("native, {name}"), move || {
            black_box(native.run(&syncing::Export(Syncing)).expect("native"));
        }));
        let module = &module;
        cases.push(Case::new(format!("sandbox, {name}"), move || {
            black_box(parse_result(&env.run(rt, module, r.clone())));
        }));
    }
    let stats = bench.group(
        &title,
        "baseline: native on the objects as the host sends them today; sandbox only \
         (request built in advance)",
        1,
        cases,
    );
    if let Some(s) = stats {
        let rows: Vec<VariantRow> = labels
            .into_iter()
            .enumerate()
            .map(|(i, label)| {
                let (native, sandbox) = (&s[2 * i], &s[2 * i + 1]);
                (label, paired(sandbox, native), paired(sandbox, &s[1]))
            })
            .collect();
        println!(
            "   per variant (paired): sandbox / native on the same data; sandbox vs sandbox as sent:"
        );
        for (label, same_data, vs_as_sent) in &rows {
            println!(
                "      {label:<52} {same_data:>5.2}×   {:>+5.0} %",
                (vs_as_sent - 1.0) * 100.0
            );
        }
        sum.parsing.push((n, rows));
    }
}

/// Part 2: compile from bytes vs load a precompiled artifact (raw wasmtime, and the host's
/// own compile cache, which verifies a sha256 sidecar before deserializing).
fn module_load(bench: &Bench, env: &Env, wasm: &WasmDir, file: &str, sum: &mut Summary) {
    let title = format!("module load: {file}");
    if !bench.selected(&title) {
        return;
    }
    let bytes = wasm.read(file);
    let engine = env.sandbox.engine();
    let digest = digest_of(&bytes);
    let cwasm = engine.precompile_component(&bytes).expect("precompiles");
    let dir = tempfile::tempdir().expect("temp dir");
    let cwasm_path = dir.path().join("module.cwasm");
    std::fs::write(&cwasm_path, &cwasm).expect("writes the artifact");
    let cache = CompileCache::open(&dir.path().join("cache"), engine).expect("compile cache");
    cache.store(&digest, &cwasm).expect("stores the entry");
    let cached = cache.load(engine, &digest).expect("a verified entry");
    env.sandbox
        .phase_module(&digest, &cached)
        .expect("a cached component links like a compiled one");
    let compiled = env.sandbox.compile(&bytes).expect("compiles");
    let note = format!(
        "{} component, {} precompiled artifact; the sandbox's own engine",
        kib(bytes.len()),
        kib(cwasm.len())
    );
    let stats = bench.group(
        &title,
        &note,
        5,
        vec![
            Case::new("Sandbox::compile (baseline)", || {
                black_box(env.sandbox.compile(&bytes).expect("compiles"));
            }),
            Case::new("Engine::precompile_component", || {
                black_box(engine.precompile_component(&bytes).expect("precompiles"));
            }),
            Case::new("CompileCache::load (read, verify, deserialize)", || {
                black_box(cache.load(engine, &digest).expect("loads"));
            }),
            Case::new("Component::deserialize (bytes in memory)", || {
                // SAFETY: the artifact was produced above by this engine.
                black_box(unsafe { Component::deserialize(engine, &cwasm) }.expect("loads"));
            }),
            Case::new("Component::deserialize_file", || {
                // SAFETY: as above; the file is in this process's private temp dir.
                black_box(unsafe { Component::deserialize_file(engine, &cwasm_path) })
                    .expect("loads");
            }),
            Case::new("  Sandbox::phase_module (link)", || {
                black_box(env.sandbox.phase_module(&digest, &compiled).expect("links"));
            }),
        ],
    );
    if let Some(s) = stats {
        sum.row(
            format!("module load, {file}"),
            &s,
            &[
                ("CompileCache::load", 2),
                ("Component::deserialize", 3),
                ("deserialize_file", 4),
            ],
        );
    }
}

/// Issue 16: the AutoRoute phases as Python and JavaScript components (the examples, built by
/// `deploy/local/build-guest-examples.sh` into `<target>/guest-components/`) beside the Rust
/// component and native Rust: size, compile, load from the compile cache (one-shot timings),
/// then the fixed cost of a call and Syncing with 100 Deployments as ratios against native.
fn languages(
    bench: &Bench,
    rt: &tokio::runtime::Runtime,
    env: &Env,
    wasm: &WasmDir,
    sum: &mut Summary,
) {
    let title = "languages: AutoRoute in Rust, Python and JavaScript components";
    if !bench.selected(title) && !bench.selected("languages") {
        return;
    }
    // `WASMPILOT_BENCH_GUEST_COMPONENTS=<dir>`: another build's components (an SDK before and
    // after a change, say), in the same layout.
    let guests = std::env::var_os("WASMPILOT_BENCH_GUEST_COMPONENTS")
        .map(PathBuf::from)
        .or_else(|| {
            wasm.0
                .parent()
                .and_then(|p| p.parent())
                .map(|t| t.join("guest-components"))
        })
        .unwrap_or_default();
    let dirs = [
        ("Rust", wasm.0.clone()),
        ("Python", guests.join("autoroute-python")),
        ("JavaScript", guests.join("autoroute-js")),
    ];
    if let Some((lang, dir)) = dirs.iter().find(|(_, d)| !d.join(SYNCING).is_file()) {
        println!(
            "\n== {title} ==\n   SKIPPED: no {lang} components in {} (build them: deploy/local/build-guest-examples.sh)",
            dir.display()
        );
        return;
    }
    let engine = env.sandbox.engine();
    let limits = env.syncing.limits;
    let cache_dir = tempfile::tempdir().expect("temp dir");
    let cache = CompileCache::open(cache_dir.path(), engine).expect("compile cache");
    let mut loaded = Vec::new();
    println!("\n== {title}: components ==");
    println!(
        "   {:<11} {:>10} {:>14} {:>14} {:>16}",
        "language", "Syncing", "compile", "cache load", "link (instantiate_pre)"
    );
    for (lang, dir) in &dirs {
        let mut modules = Vec::new();
        for file in [INITIALIZING, SYNCING] {
            let bytes = std::fs::read(dir.join(file)).expect("component");
            let digest = digest_of(&bytes);
            let started = Instant::now();
            let compiled = env.sandbox.compile(&bytes).expect("compiles");
            let compile = started.elapsed();
            cache
                .store(
                    &digest,
                    &engine.precompile_component(&bytes).expect("precompiles"),
                )
                .expect("stores");
            let loads: Vec<Duration> = (0..5)
                .map(|_| {
                    let t = Instant::now();
                    black_box(cache.load(engine, &digest).expect("loads"));
                    t.elapsed()
                })
                .collect();
            let started = Instant::now();
            let module = env
                .sandbox
                .phase_module(&digest, &compiled)
                .expect("a phase worker")
                .with_limits(limits);
            let link = started.elapsed();
            if file == SYNCING {
                println!(
                    "   {lang:<11} {:>10} {:>14} {:>14} {:>16}",
                    kib(bytes.len()),
                    fmt(compile),
                    fmt(stats(loads).median),
                    fmt(link)
                );
            }
            modules.push(module);
        }
        loaded.push((*lang, modules));
    }

    let route = dynamic(&fixtures::route());
    let initializing = env.request("Initializing", &route, &Cache::new(vec![], false));
    let cached: Vec<Arc<DynamicObject>> = fixtures::deployments(100).iter().map(dynamic).collect();
    let syncing = env.request("Syncing", &route, &Cache::new(cached, true));
    let native_init = native_test(&initializing);
    let native_sync = native_test(&syncing);
    // Same answer in every language (the comparison test checks every case; this one too).
    let expected = parse_result(&env.run(rt, &env.syncing, syncing.clone()));
    for (lang, modules) in &loaded {
        let r = env.run(rt, &modules[1], syncing.clone());
        assert_eq!(parse_result(&r), expected, "{lang} decides as Rust");
    }
    for (label, request, index) in [
        ("languages: fixed cost (Initializing)", &initializing, 0),
        ("languages: Syncing, 100 Deployments", &syncing, 1),
    ] {
        let native: Box<dyn Fn()> = if index == 0 {
            Box::new(|| {
                black_box(
                    native_init
                        .run(&initializing::Export(Initializing))
                        .expect("native"),
                );
            })
        } else {
            Box::new(|| {
                black_box(native_sync.run(&syncing::Export(Syncing)).expect("native"));
            })
        };
        let mut cases = vec![Case::new("native Rust (baseline)", &native)];
        for (lang, modules) in &loaded {
            let module = &modules[index];
            cases.push(Case::new(format!("{lang} component"), move || {
                black_box(env.run(rt, module, request.clone()));
            }));
        }
        if let Some(s) = bench.group(label, "the host's sandbox, default limits", 5, cases) {
            sum.row(
                label.trim_start_matches("languages: ").to_string(),
                &s,
                &[("Rust", 1), ("Python", 2), ("JavaScript", 3)],
            );
        }
        // The group above runs native, Rust, Python and JavaScript calls in turn, so each call
        // starts after the other languages' calls have taken the caches (native's most: its
        // call is a few microseconds of work on cold caches). Here each language and native
        // run in runs of calls of their own, as when one operator's resources are reconciled
        // one after another: each case's time is a call after calls of its own kind.
        let calls = if index == 0 {
            RUN_OF_CALLS
        } else {
            RUN_OF_CALLS / 4
        };
        for (lang, modules) in &loaded {
            let module = &modules[index];
            let cases = vec![
                Case::batched("native Rust (baseline)", calls, || {
                    for _ in 0..calls {
                        native();
                    }
                }),
                Case::batched(format!("{lang} component"), calls, move || {
                    for _ in 0..calls {
                        black_box(env.run(rt, module, request.clone()));
                    }
                }),
            ];
            let title = format!("{label}, {lang} and native in runs of {calls} calls");
            let note = "the host's sandbox, default limits; a case's time is one call's";
            if let Some(s) = bench.group(&title, note, 5, cases) {
                sum.row(
                    format!(
                        "{}, {lang} and native in runs of {calls}",
                        label.trim_start_matches("languages: ")
                    ),
                    &s,
                    &[(lang, 1)],
                );
            }
        }
    }
    interpreter_fixed_cost(bench, rt, env, &dirs, &loaded, [&initializing, &syncing]);
    modules_loaded(bench, rt, env, &dirs, &cache, &initializing, sum);
}

/// Calls in a row of one case in the languages' groups that run each language apart (a quarter
/// of them for Syncing).
const RUN_OF_CALLS: u32 = 20;

/// Calls of each group's run, going round the modules.
const MODULES_LOADED_CALLS: u32 = 30;

/// Modules of the larger round (the smaller has 3): ten operators' three phases.
const MODULES_LOADED: usize = 30;

/// Issue 31, goal 5's last part: a call with 30 modules loaded against 3, the calls going round
/// the modules as several operators' calls do. Each copy is loaded from the compile cache as a
/// module of its own (another digest, as another operator's is), so the instance pool's memory
/// slots keep the images of as many modules as they have slots and no more.
fn modules_loaded(
    bench: &Bench,
    rt: &tokio::runtime::Runtime,
    env: &Env,
    dirs: &[(&str, PathBuf)],
    cache: &CompileCache,
    request: &SyncRequest,
    sum: &mut Summary,
) {
    let title = "languages: 3 against 30 modules loaded (Initializing)";
    if !bench.selected(title) && !bench.selected("languages") {
        return;
    }
    let engine = env.sandbox.engine();
    let limits = env.syncing.limits;
    for (lang, dir) in dirs {
        let bytes = std::fs::read(dir.join(INITIALIZING)).expect("component");
        let digest = digest_of(&bytes);
        let copies: Vec<PhaseModule> = (0..MODULES_LOADED)
            .map(|i| {
                let component = cache.load(engine, &digest).expect("stored by `languages`");
                env.sandbox
                    .phase_module(&format!("{digest}-copy-{i}"), &component)
                    .expect("a phase worker")
                    .with_limits(limits)
            })
            .collect();
        let round = |loaded: usize| {
            let copies = &copies[..loaded];
            let mut next = 0;
            Case::batched(
                format!("{lang}: {loaded} modules, calls round them"),
                MODULES_LOADED_CALLS,
                move || {
                    for _ in 0..MODULES_LOADED_CALLS {
                        black_box(env.run(rt, &copies[next % copies.len()], request.clone()));
                        next += 1;
                    }
                },
            )
        };
        let label = format!("{title}, {lang}");
        let note = format!(
            "{} calls per run; the pool has {} worker slots",
            MODULES_LOADED_CALLS,
            env.sandbox.limits().concurrency
        );
        let [anon, file, shared] = rss_mib();
        let stats = bench.group(&label, &note, 5, vec![round(3), round(MODULES_LOADED)]);
        let [anon_after, file_after, shared_after] = rss_mib();
        println!(
            "   the process's RSS, anonymous / file / shared: {anon:.0} / {file:.0} / {shared:.0} MiB \
             before these calls, {anon_after:.0} / {file_after:.0} / {shared_after:.0} MiB after"
        );
        // Minor page faults per call once every module was called (the process's: calls may
        // run on the runtime's threads).
        let faults_per_call = |loaded: usize| {
            let calls = 2 * MODULES_LOADED;
            let before = minor_faults();
            for i in 0..calls {
                black_box(env.run(rt, &copies[i % loaded], request.clone()));
            }
            (minor_faults() - before) / calls as u64
        };
        println!(
            "   minor page faults per call: {} with 3 modules, {} with {MODULES_LOADED}",
            faults_per_call(3),
            faults_per_call(MODULES_LOADED)
        );
        if let Some(s) = stats {
            sum.row(
                format!("{lang}: {MODULES_LOADED} modules loaded against 3"),
                &s,
                &[("30", 1)],
            );
        }
    }
}

/// Where an interpreted call's fixed cost goes: the host's call against a bare instantiation
/// (the same pool settings, no call) and a call into a warm instance (no fresh instance: the
/// interpreter's own work), with the page faults per call. For a profile:
/// `WASMPILOT_BENCH_PROFILE_LOOP=<seconds>` runs only fresh-instance calls per language (attach
/// `perf record -p <pid>` when it prints its pid; `WASMPILOT_BENCH_PROFILE_PHASE=Syncing` loops
/// on the Syncing call at 100 Deployments instead), `WASMPILOT_BENCH_PERFMAP=1` names the guests'
/// functions in `/tmp/perf-<pid>.map`.
fn interpreter_fixed_cost(
    bench: &Bench,
    rt: &tokio::runtime::Runtime,
    env: &Env,
    dirs: &[(&str, PathBuf)],
    loaded: &[(&str, Vec<PhaseModule>)],
    [request, syncing]: [&SyncRequest; 2],
) {
    let title = "languages: where the fixed cost goes (Initializing)";
    if !bench.selected(title) && !bench.selected("languages") {
        return;
    }
    for ((lang, dir), (_, modules)) in dirs.iter().zip(loaded).skip(1) {
        let bytes = std::fs::read(dir.join(INITIALIZING)).expect("component");
        let raw = RawWorker::new(&bytes, Alloc::PoolingPagemap);
        if let Some(seconds) = std::env::var("WASMPILOT_BENCH_PROFILE_LOOP")
            .ok()
            .and_then(|s| s.parse::<f64>().ok())
        {
            let (raw, module, request) = if std::env::var_os("WASMPILOT_BENCH_PROFILE_PHASE")
                .is_some_and(|p| p == "Syncing")
            {
                let bytes = std::fs::read(dir.join(SYNCING)).expect("component");
                (
                    RawWorker::new(&bytes, Alloc::PoolingPagemap),
                    &modules[1],
                    syncing,
                )
            } else {
                (raw, &modules[0], request)
            };
            // Fresh-instance calls and nothing else, for a profiler attached meanwhile.
            println!("profiling loop: {lang}, pid {}", std::process::id());
            let until = Instant::now() + Duration::from_secs_f64(seconds);
            let mut calls = 0u64;
            // `WASMPILOT_BENCH_PROFILE_HOST=1`: the host's call rather than the raw one.
            let host = std::env::var_os("WASMPILOT_BENCH_PROFILE_HOST").is_some();
            while Instant::now() < until {
                if host {
                    black_box(env.run(rt, module, request.clone()));
                } else {
                    black_box(raw.call(request));
                }
                calls += 1;
            }
            println!("profiling loop done: {calls} calls");
            continue;
        }
        let resident = RawWorker::new(&bytes, Alloc::PoolingPagemapAllResident);
        let mut warm = raw.warm();
        let module = &modules[0];
        let faults = |call: &mut dyn FnMut()| {
            let calls = 20;
            let before = minor_faults();
            for _ in 0..calls {
                call();
            }
            (minor_faults() - before) / calls
        };
        let note = format!(
            "minor page faults per call: {} the host's, {} raw, {} raw with all resident",
            faults(&mut || {
                black_box(env.run(rt, module, request.clone()));
            }),
            faults(&mut || {
                black_box(raw.call(request));
            }),
            faults(&mut || {
                black_box(resident.call(request));
            }),
        );
        bench.group(
            &format!("languages: where the fixed cost goes, {lang} (Initializing)"),
            &note,
            5,
            vec![
                Case::new("the host's call", || {
                    black_box(env.run(rt, module, request.clone()));
                }),
                Case::new("raw: fresh instance and call (pooling, pagemap)", || {
                    black_box(raw.call(request));
                }),
                Case::new("raw: the same, memory, tables, stack resident", || {
                    black_box(resident.call(request));
                }),
                Case::new("raw: instantiate and drop (pooling, pagemap)", || {
                    raw.instantiate_only();
                }),
                Case::new("raw: call a warm instance (no fresh instance)", || {
                    black_box(warm.call(request));
                }),
            ],
        );
    }
}

/// The process's minor page faults so far (`/proc/self/stat`, field 10).
fn minor_faults() -> u64 {
    std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|s| {
            let after = s.rsplit_once(')')?.1.to_string();
            after.split_whitespace().nth(7)?.parse().ok()
        })
        .unwrap_or(0)
}

/// The process's resident memory in MiB: anonymous (heaps, what calls wrote and the pool kept),
/// file-backed and shared (memory images mapped), from `/proc/self/status`.
fn rss_mib() -> [f64; 3] {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    ["RssAnon:", "RssFile:", "RssShmem:"].map(|key| {
        status
            .lines()
            .find(|l| l.starts_with(key))
            .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
            .map_or(0.0, |kib| kib / 1024.0)
    })
}

// ---------------------------------------------------------------------------------------------
// Raw wasmtime: the sandbox's work without the host around it, to split the fixed cost.

/// How a raw engine allocates instances.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Alloc {
    /// wasmtime's default (what the sandbox uses today): fresh mmap per instance.
    OnDemand,
    /// The pooling instance allocator (slots reused; memory reset with madvise).
    Pooling,
    /// Pooling, resetting up to 8 MiB of each memory with memset instead (fewer page faults).
    PoolingResident,
    /// Keep resident, resetting only the pages a call dirtied (PAGEMAP_SCAN): the host's default.
    PoolingPagemap,
    /// As `PoolingPagemap`, keeping all of each memory (512 MiB) resident rather than 8 MiB, 4 MiB
    /// of each table rather than 64 KiB, and 1 MiB of each fiber stack (zeroed, not decommitted).
    PoolingPagemapAllResident,
}

/// An engine configured like `Sandbox::new` (epoch interruption, component model), with the
/// given instance allocator.
fn sandbox_engine(alloc: Alloc) -> Engine {
    let mut config = Config::new();
    config.epoch_interruption(true);
    config.wasm_component_model(true);
    if std::env::var_os("WASMPILOT_BENCH_PERFMAP").is_some() {
        // Names the guests' functions for `perf report` (/tmp/perf-<pid>.map).
        config.profiler(wasmtime::ProfilingStrategy::PerfMap);
    }
    if alloc != Alloc::OnDemand {
        let mut pool = PoolingAllocationConfig::default();
        pool.total_component_instances(16)
            .total_core_instances(128)
            .total_memories(64)
            .total_tables(128)
            .max_memory_size(512 << 20);
        if alloc != Alloc::Pooling {
            let all = alloc == Alloc::PoolingPagemapAllResident;
            pool.linear_memory_keep_resident(if all {
                512 << 20
            } else {
                DEFAULT_KEEP_RESIDENT
            })
            .table_keep_resident(if all { 4 << 20 } else { 64 << 10 });
            if all {
                pool.async_stack_keep_resident(1 << 20);
            }
        }
        if !matches!(alloc, Alloc::Pooling | Alloc::PoolingResident) {
            pool.pagemap_scan(Enabled::Auto);
        }

        config.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
    }
    Engine::new(&config).expect("engine")
}

struct RawState {
    wasi: WasiCtx,
    table: ResourceTable,
    limits: StoreLimits,
}

impl WasiView for RawState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl log::Host for RawState {
    fn log(
        &mut self,
        _level: LogLevel,
        message: String,
        fields: Vec<LogField>,
    ) -> wasmtime::Result<()> {
        black_box((message, fields));
        Ok(())
    }
}

impl types::Host for RawState {}

impl finalizer_inputs::Host for RawState {
    fn inputs(&mut self) -> Vec<wasmpilot::sandbox::NamedObjects> {
        Vec::new()
    }
}

/// One component under each allocator, checked to decide `next` on `request`.
struct RawWorkers {
    on_demand: RawWorker,
    pooling: RawWorker,
    resident: RawWorker,
    pagemap: RawWorker,
}

impl RawWorkers {
    fn new(bytes: &[u8], request: &SyncRequest, next: &str) -> Self {
        let workers = RawWorkers {
            on_demand: RawWorker::new(bytes, Alloc::OnDemand),
            pooling: RawWorker::new(bytes, Alloc::Pooling),
            resident: RawWorker::new(bytes, Alloc::PoolingResident),
            pagemap: RawWorker::new(bytes, Alloc::PoolingPagemap),
        };
        for w in [
            &workers.on_demand,
            &workers.pooling,
            &workers.resident,
            &workers.pagemap,
        ] {
            assert_eq!(w.call(request).next_phase, next);
        }
        let mut warm = workers.on_demand.warm();
        for _ in 0..3 {
            assert_eq!(warm.call(request).next_phase, next);
        }
        workers
    }
}

struct RawWorker {
    engine: Engine,
    pre: PhasePre<RawState>,
}

impl RawWorker {
    fn new(bytes: &[u8], alloc: Alloc) -> Self {
        let engine = sandbox_engine(alloc);
        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut linker).expect("WASI");
        log::add_to_linker::<_, wasmtime::component::HasSelf<_>>(&mut linker, |s: &mut RawState| s)
            .expect("log import");
        // The Rust SDK's components serve either role, so they import the finalizer's inputs too.
        finalizer_inputs::add_to_linker::<_, wasmtime::component::HasSelf<_>>(
            &mut linker,
            |s: &mut RawState| s,
        )
        .expect("finalizer-inputs import");
        let component = Component::new(&engine, bytes).expect("compiles");
        let pre = PhasePre::new(linker.instantiate_pre(&component).expect("links"))
            .expect("a phase worker");
        RawWorker { engine, pre }
    }

    fn store(&self) -> Store<RawState> {
        let wasi = WasiCtxBuilder::new()
            .stdout(MemoryOutputPipe::new(16 << 10))
            .stderr(MemoryOutputPipe::new(16 << 10))
            .build();
        let state = RawState {
            wasi,
            table: ResourceTable::new(),
            limits: StoreLimitsBuilder::new().memory_size(64 << 20).build(),
        };
        let mut store = Store::new(&self.engine, state);
        store.limiter(|s| &mut s.limits);
        store.set_epoch_deadline(200);
        store.epoch_deadline_trap();
        store
    }

    /// Fresh store and instance, one call, dropped: what the sandbox does per call.
    fn call(&self, request: &SyncRequest) -> SyncResult {
        self.warm().call(request)
    }

    fn instantiate_only(&self) {
        let mut store = self.store();
        black_box(block_on(self.pre.instantiate_async(&mut store)).expect("instantiates"));
    }

    /// A store and instance to call repeatedly (not what the host does: state would leak
    /// between calls; here it isolates the cost of fresh memory).
    fn warm(&self) -> WarmInstance {
        let mut store = self.store();
        let instance = block_on(self.pre.instantiate_async(&mut store)).expect("instantiates");
        WarmInstance { store, instance }
    }
}

struct WarmInstance {
    store: Store<RawState>,
    instance: Phase,
}

impl WarmInstance {
    fn call(&mut self, request: &SyncRequest) -> SyncResult {
        block_on(
            self.instance
                .wasmpilot_operator_phase_worker()
                .call_sync(&mut self.store, request),
        )
        .expect("no trap")
        .unwrap_or_else(|e| panic!("worker error: {e:?}"))
    }
}

// ---------------------------------------------------------------------------------------------
// The harness: round-robin timing, median and p90, ratios against the first case.

struct Bench {
    /// `cargo bench` passes `--bench`; without it (`cargo test --benches`) each case runs once.
    measure: bool,
    filters: Vec<String>,
    budget: Duration,
}

struct Case<'a> {
    label: String,
    run: Box<dyn FnMut() + 'a>,
    /// Calls one run makes: its time is divided by this.
    calls: u32,
}

impl<'a> Case<'a> {
    fn new(label: impl Into<String>, run: impl FnMut() + 'a) -> Self {
        Case {
            label: label.into(),
            run: Box::new(run),
            calls: 1,
        }
    }

    /// A case whose run makes `calls` calls (e.g. several inside one runtime task).
    fn batched(label: impl Into<String>, calls: u32, run: impl FnMut() + 'a) -> Self {
        Case {
            calls,
            ..Case::new(label, run)
        }
    }
}

struct Stats {
    median: Duration,
    p90: Duration,
    /// Every timing, in round order (for paired ratios).
    rounds: Vec<Duration>,
}

/// The median over rounds of `subject / baseline` timed in the same round: less sensitive to
/// load that changes between rounds than the ratio of the two medians.
fn paired(subject: &Stats, baseline: &Stats) -> f64 {
    let mut r: Vec<f64> = subject
        .rounds
        .iter()
        .zip(&baseline.rounds)
        .map(|(s, b)| ratio(*s, *b))
        .collect();
    r.sort_by(f64::total_cmp);
    r[r.len() / 2]
}

impl Bench {
    fn selected(&self, title: &str) -> bool {
        self.filters.is_empty() || self.filters.iter().any(|f| title.contains(f.as_str()))
    }

    /// Runs the cases round-robin: warm-up (a tenth of the budget, at least 2 rounds), then
    /// rounds until the budget is spent and at least `min_rounds` (and 10 if they are quick)
    /// were timed. Prints and returns each case's median and p90.
    fn group(
        &self,
        title: &str,
        note: &str,
        min_rounds: usize,
        mut cases: Vec<Case<'_>>,
    ) -> Option<Vec<Stats>> {
        println!("\n== {title} ==\n   {note}");
        if !self.measure {
            for case in &mut cases {
                (case.run)();
                println!("   ran once (smoke test): {}", case.label);
            }
            return None;
        }
        let warm_up = Instant::now();
        let mut rounds = 0;
        while rounds < 2 || warm_up.elapsed() < self.budget / 10 {
            for case in &mut cases {
                (case.run)();
            }
            rounds += 1;
        }
        let min_rounds = min_rounds.max(if rounds > 20 { 10 } else { 1 });
        let mut samples: Vec<Vec<Duration>> = vec![Vec::new(); cases.len()];
        let started = Instant::now();
        while samples[0].len() < min_rounds
            || (started.elapsed() < self.budget && samples[0].len() < 100_000)
        {
            for (case, s) in cases.iter_mut().zip(&mut samples) {
                let t = Instant::now();
                (case.run)();
                s.push(t.elapsed() / case.calls);
            }
        }
        let stats: Vec<Stats> = samples.into_iter().map(stats).collect();
        println!(
            "   {:<46} {:>10} {:>10} {:>9} {:>9}   ({} rounds)",
            "case",
            "median",
            "p90",
            "ratio",
            "paired",
            stats[0].rounds.len(),
        );
        for (case, s) in cases.iter().zip(&stats) {
            println!(
                "   {:<46} {:>10} {:>10} {:>9} {:>9}",
                case.label,
                fmt(s.median),
                fmt(s.p90),
                fmt_ratio(ratio(s.median, stats[0].median)),
                fmt_ratio(paired(s, &stats[0])),
            );
        }
        Some(stats)
    }
}

fn stats(rounds: Vec<Duration>) -> Stats {
    let mut sorted = rounds.clone();
    sorted.sort_unstable();
    let at = |q: f64| sorted[((sorted.len() - 1) as f64 * q).round() as usize];
    Stats {
        median: at(0.5),
        p90: at(0.9),
        rounds,
    }
}

fn ratio(a: Duration, b: Duration) -> f64 {
    a.as_secs_f64() / b.as_secs_f64()
}

/// `1.23×`, or `1/370` for ratios far below one.
fn fmt_ratio(r: f64) -> String {
    if r >= 0.1 {
        format!("{r:.2}×")
    } else {
        format!("1/{:.0}", 1.0 / r)
    }
}

fn fmt(d: Duration) -> String {
    let us = d.as_secs_f64() * 1e6;
    if us < 1_000.0 {
        format!("{us:.1} µs")
    } else if us < 1_000_000.0 {
        format!("{:.2} ms", us / 1e3)
    } else {
        format!("{:.3} s", us / 1e6)
    }
}

fn kib(bytes: usize) -> String {
    if bytes < 10 << 10 {
        format!("{:.1} KiB", bytes as f64 / 1024.0)
    } else {
        format!("{:.0} KiB", bytes as f64 / 1024.0)
    }
}

// ---------------------------------------------------------------------------------------------
// The summary: the headline ratios and the targets.

struct FixedCost {
    native: Duration,
    host: Duration,
    raw: Duration,
    raw_pooling: Duration,
    raw_resident: Duration,
    raw_pagemap: Duration,
    warm: Duration,
    instantiate: Duration,
    instantiate_pooling: Duration,
    spawn_blocking: Duration,
    /// `Sandbox::run_sync` with fresh mmapped memory per call (before the instance pool).
    on_demand: Duration,
    /// Called with `block_on` from outside the runtime: adds a wake-up of the calling thread.
    outside: Duration,
    log_line: Duration,
}

/// A data variant: label, sandbox / native on that data, sandbox / sandbox on data as sent.
type VariantRow = (String, f64, f64);

#[derive(Default)]
struct Summary {
    rows: Vec<String>,
    /// Sandbox only, host path with cached JSON, host path serializing per call.
    ratio_at_100: Option<[f64; 3]>,
    fixed: Option<FixedCost>,
    /// n, request built with to_worker_json, whole host path so, request built with cached JSON.
    serialize_share: Vec<(usize, Duration, Duration, Duration)>,
    parsing: Vec<(usize, Vec<VariantRow>)>,
}

impl Summary {
    /// A summary line: the baseline (case 0) and the named cases, with paired ratios.
    fn row(&mut self, what: String, stats: &[Stats], subjects: &[(&str, usize)]) {
        let subjects: Vec<String> = subjects
            .iter()
            .map(|(name, i)| {
                format!(
                    "{name} {} = {}",
                    fmt(stats[*i].median),
                    fmt_ratio(paired(&stats[*i], &stats[0]))
                )
            })
            .collect();
        self.rows.push(format!(
            "| {what} | {} | {} |",
            fmt(stats[0].median),
            subjects.join(", ")
        ));
    }

    fn print(&self, bench: &Bench) {
        if !bench.measure {
            println!("\nsmoke test passed (run `cargo bench` or deploy/local/bench.sh to measure)");
            return;
        }
        println!("\n== summary: medians, and paired ratios (median over rounds of case / baseline timed in the same round) ==");
        println!("| case | baseline | subjects |\n|---|---|---|");
        for row in &self.rows {
            println!("{row}");
        }
        println!();
        if let Some([sandbox, cached, per_call]) = self.ratio_at_100 {
            println!(
                "target ≤ {TARGET_RATIO_AT_100}× native at 100 inputs: host path {cached:.2}× (cached JSON) → {}; {per_call:.2}× (to_worker_json per call) → {}; sandbox only {sandbox:.2}× → {}",
                verdict(cached <= TARGET_RATIO_AT_100),
                verdict(per_call <= TARGET_RATIO_AT_100),
                verdict(sandbox <= TARGET_RATIO_AT_100),
            );
        }
        if let Some(f) = &self.fixed {
            println!(
                "target ≤ {} fixed cost: Sandbox::run_sync {} → {} (native {})",
                fmt(TARGET_FIXED_COST),
                fmt(f.host),
                verdict(f.host <= TARGET_FIXED_COST),
                fmt(f.native),
            );
            println!(
                "  raw fresh instance: on-demand {}, pooling {}, keep resident {}, + pagemap scan {}; \
                 warm instance {}; instantiate + drop: on-demand {}, pooling {}; spawn_blocking round \
                 trip (the host's hand-off before fibers) {}; a native log line echo {}",
                fmt(f.raw),
                fmt(f.raw_pooling),
                fmt(f.raw_resident),
                fmt(f.raw_pagemap),
                fmt(f.warm),
                fmt(f.instantiate),
                fmt(f.instantiate_pooling),
                fmt(f.spawn_blocking),
                fmt(f.log_line),
            );
            println!(
                "  Sandbox::run_sync in a runtime task with on-demand memory (no instance pool) {}; \
                 called with block_on from outside the runtime {}",
                fmt(f.on_demand),
                fmt(f.outside),
            );
        }
        for (n, serialize, host, cached) in &self.serialize_share {
            println!(
                "building the request at {n} Deployments: to_worker_json {} = {:.0} % of that host path; with cached JSON {}",
                fmt(*serialize),
                ratio(*serialize, *host) * 100.0,
                fmt(*cached),
            );
        }
        for (n, rows) in &self.parsing {
            println!(
                "at {n} Deployments, sending the whole objects (with managedFields) instead of the operator's declared fields costs {:+.0} % of the sandbox call (sandbox / native: {:.2}× as sent, {:.2}× whole)",
                (rows[1].2 - 1.0) * 100.0,
                rows[0].1,
                rows[1].1,
            );
        }
    }
}

fn verdict(met: bool) -> &'static str {
    if met {
        "MET"
    } else {
        "NOT MET"
    }
}

// ---------------------------------------------------------------------------------------------
// Where things are.

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("host/ has a parent")
        .to_path_buf()
}

/// `<target>/wasm32-wasip2/release` (this binary is `<target>/release/deps/sandbox-…`), or
/// `WASMPILOT_WASM_DIR`.
struct WasmDir(PathBuf);

impl WasmDir {
    fn find() -> Self {
        let dir = match std::env::var("WASMPILOT_WASM_DIR") {
            Ok(dir) => PathBuf::from(dir),
            Err(_) => std::env::current_exe()
                .expect("bench binary path")
                .ancestors()
                .nth(3)
                .expect("bench binary lives in <target>/<profile>/deps")
                .join("wasm32-wasip2")
                .join("release"),
        };
        let dir = WasmDir(dir);
        for file in [SYNCING, INITIALIZING] {
            dir.path(file);
        }
        dir
    }

    fn path(&self, file: &str) -> PathBuf {
        let path = self.0.join(file);
        if !path.exists() {
            eprintln!(
                "error: {} is missing. Build the guest components first (deploy/local/bench.sh does):\n  \
                 cargo build --release --target wasm32-wasip2 -p autoroute-syncing -p autoroute-initializing",
                path.display()
            );
            std::process::exit(2);
        }
        path
    }

    fn read(&self, file: &str) -> Vec<u8> {
        let path = self.path(file);
        std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    }
}

fn print_machine() {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let load: Vec<&str> = load.split_whitespace().take(3).collect();
    println!(
        "machine: {cores} cores, {cpu}, load average {}",
        load.join(" ")
    );
}
