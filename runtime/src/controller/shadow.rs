//! Shadow modules: a phase may name a second component that runs on the identical request
//! after the live decision was applied, in one lane per operator beside the reconciles. Its
//! decision is only compared — counted in metrics and the WasmOperator's status, differences
//! kept as replay cases and reported as rate-limited `ShadowDiffered` Events — never applied.

use crate::crd::{KindRef, ShadowStatus, WasmOperator};
use crate::definition::OperatorDefinition;
use crate::evidence::case::{compare, summarize, CaseSource, RecordedResult, Verdict};
use crate::evidence::record::{LiveCall, PendingRecord, RecordSink};
use crate::pipeline::decision::{self, DecisionInput};
use crate::pipeline::status;
use crate::sandbox::{PhaseModule, Sandbox};
use crate::worker_text::{bounded, MESSAGE_BYTES};
use kube::api::{ApiResource, DynamicObject, Patch, PatchParams};
use kube::runtime::events::Recorder;
use kube::{Api, Client, Resource, ResourceExt};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, LazyLock, Mutex, Weak};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

/// Live decisions waiting for their shadow run, per operator; more are skipped (counted).
const QUEUE: usize = 1024;
/// Bytes of the requests (resource and inputs) waiting for or in their shadow run, per
/// operator; a call past it is skipped (counted): one operator's lane holds a bounded share of
/// the host's memory however large its inputs.
const QUEUE_BYTES: usize = 64 << 20;
/// At most one `ShadowDiffered` Event per resource in this interval.
const EVENT_INTERVAL: Duration = Duration::from_secs(300);
/// The WasmOperator's shadow counts are written at most this often.
const STATUS_INTERVAL: Duration = Duration::from_secs(5);
/// Differing cases kept per operator (served at `/shadow-cases`).
const KEPT_CASES: usize = 10;
/// Changed fields named in one Event.
const EVENT_CHANGES: usize = 3;

/// One operator's shadows: the components by phase and where their runs go.
pub struct Shadows {
    operator: String,
    modules: Arc<HashMap<String, PhaseModule>>,
    queue: mpsc::Sender<ShadowJob>,
    /// Bytes of the jobs queued or running (see [`QUEUE_BYTES`]).
    queued_bytes: Arc<std::sync::atomic::AtomicUsize>,
    stats: Arc<Mutex<BTreeMap<String, ShadowStatus>>>,
    /// Held while the operator is loaded: its queued jobs see it gone once these shadows are.
    alive: Arc<()>,
}

/// A job's share of its operator's [`QUEUE_BYTES`], given back when the job is done or dropped.
struct QueuedBytes {
    counter: Arc<std::sync::atomic::AtomicUsize>,
    bytes: usize,
}

impl QueuedBytes {
    /// `bytes` more, unless the counter would pass `limit`.
    fn take(
        counter: &Arc<std::sync::atomic::AtomicUsize>,
        bytes: usize,
        limit: usize,
    ) -> Option<Self> {
        use std::sync::atomic::Ordering;
        let before = counter.fetch_add(bytes, Ordering::AcqRel);
        if before.saturating_add(bytes) > limit {
            counter.fetch_sub(bytes, Ordering::AcqRel);
            return None;
        }
        Some(QueuedBytes {
            counter: counter.clone(),
            bytes,
        })
    }
}

impl Drop for QueuedBytes {
    fn drop(&mut self) {
        self.counter
            .fetch_sub(self.bytes, std::sync::atomic::Ordering::AcqRel);
    }
}

/// What a request weighs in a shadow queue: its resource's and inputs' JSON.
fn request_bytes(request: &crate::sandbox::SyncRequest) -> usize {
    request.resource.len()
        + request
            .inputs
            .iter()
            .flat_map(|i| &i.objects)
            .map(String::len)
            .sum::<usize>()
}

/// What a shadow run needs of its operator, handed to its lane when the operator loads (the
/// lane holds no reference back to the operator's context).
pub struct LaneHandles {
    pub definition: OperatorDefinition,
    /// Whether each output kind is namespaced (the decision's output checks).
    pub namespaced: HashMap<KindRef, bool>,
    pub sandbox: Arc<Sandbox>,
    /// The operator's resource kind (Events name its objects).
    pub resource_api: ApiResource,
    /// Events on the operator's resources, as the operator's account.
    pub recorder: Recorder,
    /// Where differing cases are recorded, if anywhere.
    pub record_sink: Option<RecordSink>,
}

/// A live call to shadow. It does not keep its operator alive: once the operator's controller
/// is stopped or swapped, its queued shadow runs are dropped.
pub struct ShadowJob {
    alive: Weak<()>,
    resource: Arc<DynamicObject>,
    call: LiveCall,
    _bytes: QueuedBytes,
}

impl Shadows {
    /// Shadows for `modules` (phase → component) plus `failed` (phase → why it did not load);
    /// starts the operator's shadow lane, which writes the counts to the WasmOperator `operator`
    /// (as `client`, its Events through `recorder`).
    pub fn start(
        client: Client,
        recorder: Recorder,
        handles: LaneHandles,
        modules: HashMap<String, PhaseModule>,
        failed: BTreeMap<String, String>,
    ) -> Self {
        let operator = handles.definition.name.clone();
        let digests = modules
            .iter()
            .map(|(phase, m)| (phase.clone(), m.digest.clone()))
            .collect();
        let stats = Arc::new(Mutex::new(initial_counts(digests, failed)));
        let (queue, jobs) = mpsc::channel(QUEUE);
        let writer = CountsWriter {
            client,
            recorder,
            operator: operator.clone(),
            written: None,
            refused: None,
        };
        let modules = Arc::new(modules);
        let runs = ShadowRuns {
            handles,
            modules: modules.clone(),
            stats: stats.clone(),
            last_event: HashMap::new(),
        };
        tokio::spawn(lane(writer, jobs, runs));
        Shadows {
            operator,
            modules,
            queue,
            queued_bytes: Default::default(),
            stats,
            alive: Arc::new(()),
        }
    }

    pub fn has(&self, phase: &str) -> bool {
        self.modules.contains_key(phase)
    }

    /// The counts so far, by phase.
    pub fn counts(&self) -> Vec<ShadowStatus> {
        lock(&self.stats).values().cloned().collect()
    }

    /// Queues a live call for its shadow run; never waits (a full queue skips it, counted).
    pub fn enqueue(&self, resource: Arc<DynamicObject>, call: LiveCall) {
        let phase = call.request.phase.clone();
        let bytes = request_bytes(&call.request);
        let queued = QueuedBytes::take(&self.queued_bytes, bytes, QUEUE_BYTES).ok_or(());
        let sent = queued.and_then(|bytes| {
            self.queue
                .try_send(ShadowJob {
                    alive: Arc::downgrade(&self.alive),
                    resource,
                    call,
                    _bytes: bytes,
                })
                .map_err(|_| ())
        });
        if sent.is_err() {
            crate::metrics::METRICS
                .shadow_skipped
                .get_or_create(&crate::metrics::PhaseLabels {
                    operator: self.operator.clone(),
                    phase,
                })
                .inc();
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Runs an operator's shadow jobs one at a time (so shadows hold at most one sandbox slot),
/// and writes the counts to the WasmOperator's status when they changed, at most every
/// [`STATUS_INTERVAL`]. Ends when the operator's controller is gone, without a last write: the
/// operator was stopped or replaced, and a replacement's lane (or the manager clearing
/// `status.shadows`) already owns the field — a late write from here would overwrite it with
/// the old module's counts, and the new lane, which writes only on change, would never fix it.
async fn lane(mut writer: CountsWriter, mut jobs: mpsc::Receiver<ShadowJob>, mut runs: ShadowRuns) {
    let mut last_write = Instant::now() - STATUS_INTERVAL;
    // The initial counts (and load failures) show up at once.
    writer.write(&runs.stats).await;
    loop {
        let wait = STATUS_INTERVAL.saturating_sub(last_write.elapsed());
        match tokio::time::timeout(wait, jobs.recv()).await {
            Ok(Some(job)) => runs.run(job).await,
            Ok(None) => break,
            Err(_) => {}
        }
        if last_write.elapsed() >= STATUS_INTERVAL {
            writer.write(&runs.stats).await;
            last_write = Instant::now();
        }
    }
}

/// The lane's side of one operator's shadows: its handles, components and counts, and when
/// each resource last got a `ShadowDiffered` Event.
struct ShadowRuns {
    handles: LaneHandles,
    modules: Arc<HashMap<String, PhaseModule>>,
    stats: Arc<Mutex<BTreeMap<String, ShadowStatus>>>,
    last_event: HashMap<String, Instant>,
}

/// The counts `status.shadows` starts with: each loaded shadow's digest, each failed one's
/// reason (and no digest).
pub fn initial_counts(
    loaded: BTreeMap<String, String>,
    failed: BTreeMap<String, String>,
) -> BTreeMap<String, ShadowStatus> {
    let mut stats = BTreeMap::new();
    for (phase, digest) in loaded {
        let status = ShadowStatus {
            phase: phase.clone(),
            module: Some(digest),
            ..Default::default()
        };
        stats.insert(phase, status);
    }
    for (phase, why) in failed {
        let status = ShadowStatus {
            phase: phase.clone(),
            message: Some(why),
            ..Default::default()
        };
        stats.insert(phase, status);
    }
    stats
}

/// The WasmOperator status patch that writes `counts` as `status.shadows`.
pub fn counts_patch(counts: &[ShadowStatus]) -> serde_json::Value {
    serde_json::json!({ "status": { "shadows": counts } })
}

/// Writes an operator's shadow counts to its WasmOperator, and reports a write the API server
/// refuses for its shape once (Event and log line), not at every retry.
struct CountsWriter {
    client: Client,
    recorder: Recorder,
    operator: String,
    /// What was last written.
    written: Option<Vec<ShadowStatus>>,
    /// The API server's last refusal, already reported.
    refused: Option<String>,
}

impl CountsWriter {
    /// Merge-patches `status.shadows` when the counts differ from what was last written.
    async fn write(&mut self, stats: &Mutex<BTreeMap<String, ShadowStatus>>) {
        let counts: Vec<ShadowStatus> = lock(stats).values().cloned().collect();
        if self.written.as_ref() == Some(&counts) {
            return;
        }
        let operator = self.operator.as_str();
        let api: Api<WasmOperator> = Api::all(self.client.clone());
        let patch = counts_patch(&counts);
        match api
            .patch_status(operator, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => {
                self.written = Some(counts);
                self.refused = None;
            }
            Err(e) if status::refused_for_shape(&e) => {
                let why = bounded(&e.to_string(), MESSAGE_BYTES).into_owned();
                if self.refused.as_deref() == Some(why.as_str()) {
                    tracing::debug!(operator, error = %why, "shadow counts still refused");
                    return;
                }
                tracing::warn!(operator, error = %why, "the API server refused the shadow counts (status.shadows); retrying every {}s", STATUS_INTERVAL.as_secs());
                let uid = api
                    .get_opt(operator)
                    .await
                    .ok()
                    .flatten()
                    .and_then(|o| o.uid());
                status::publish_operator_event(
                    &self.recorder,
                    operator,
                    uid,
                    true,
                    "StatusRefused",
                    "WriteShadowCounts",
                    format!("the API server refused status.shadows: {why}"),
                )
                .await;
                self.refused = Some(why);
            }
            Err(e) => {
                tracing::debug!(operator, error = %crate::error_report::Brief(&e), "could not write shadow counts (retrying later)")
            }
        }
    }
}

impl ShadowRuns {
    /// One shadow run: the shadow component on the live call's request, through the same decision
    /// step and checks, compared with the live result.
    async fn run(&mut self, job: ShadowJob) {
        let ShadowJob {
            alive,
            resource,
            call,
            _bytes,
        } = job;
        if alive.upgrade().is_none() {
            return;
        }
        let handles = &self.handles;
        let (stats, last_event) = (&self.stats, &mut self.last_event);
        let def = &handles.definition;
        let phase_name = call.request.phase.clone();
        let Some(phase) = def.phase(&phase_name) else {
            return;
        };
        let Some(module) = self.modules.get(&phase_name) else {
            return;
        };
        let input = DecisionInput {
            definition: def,
            phase,
            module,
            resource: &resource,
            request: call.request.clone(),
            namespaced: &handles.namespaced,
            slot: None,
        };
        let shadow = RecordedResult::of(&decision::decide(&handles.sandbox, input).await);
        let verdict = compare(&call.result, &shadow);
        crate::metrics::METRICS
            .shadow_decisions
            .get_or_create(&crate::metrics::ShadowLabels {
                operator: def.name.clone(),
                phase: phase_name.clone(),
                result: verdict.label().to_string(),
            })
            .inc();
        let key = crate::controller::schedule::resource_key(&resource);
        {
            let mut stats = lock(stats);
            let entry = stats.entry(phase_name.clone()).or_default();
            match &verdict {
                Verdict::Same => entry.same += 1,
                Verdict::Different(_) => entry.different += 1,
                Verdict::Error(_) => entry.errors += 1,
            }
            if verdict != Verdict::Same {
                entry.last_difference =
                    Some(format!("{} {key}", crate::pipeline::step::now_rfc3339()));
            }
        }
        let what = match &verdict {
            Verdict::Same => return,
            Verdict::Different(changes) => summarize(changes, EVENT_CHANGES),
            Verdict::Error(why) => format!("no decision: {why}"),
        };
        let input_hash = crate::sandbox::RequestDigest::of_sync(&call.request).to_prefixed_hex();
        tracing::info!(
            resource = %key,
            phase = %phase_name,
            shadow = %module.digest,
            input = %input_hash,
            result = verdict.label(),
            "shadow decided differently: {}",
            bounded(&what, MESSAGE_BYTES)
        );
        keep_case(handles, &key, &call, &module.digest, shadow);
        let due = last_event
            .get(&key)
            .is_none_or(|at| at.elapsed() >= EVENT_INTERVAL);
        if due {
            if last_event.len() > 10_000 {
                last_event.retain(|_, at| at.elapsed() < EVENT_INTERVAL);
            }
            last_event.insert(key, Instant::now());
            let reference = resource.object_ref(&handles.resource_api);
            let note = format!(
                "shadow {} of phase {phase_name} decided differently from {} (input {}):\n{}",
                short(&module.digest),
                short(&call.module),
                short(&input_hash),
                bounded(&what, MESSAGE_BYTES)
            );
            crate::pipeline::status::publish_event(
                &handles.recorder,
                &reference,
                false,
                "ShadowDiffered",
                "Shadow",
                note,
            )
            .await;
        }
    }
}

/// Keeps a differing case: in memory for `/shadow-cases`, and in the record directory if any.
fn keep_case(
    handles: &LaneHandles,
    resource: &str,
    call: &LiveCall,
    shadow_module: &str,
    shadow: RecordedResult,
) {
    let record = PendingRecord {
        source: CaseSource::Shadow,
        resource: resource.to_string(),
        request: call.request.clone(),
        module: call.module.clone(),
        result: call.result.clone(),
        duration: Some(call.duration),
        shadow: Some((shadow_module.to_string(), shadow)),
        trace_id: call.trace_id.clone(),
    }
    .without_secret_data();
    if let Some(sink) = &handles.record_sink {
        sink.record(record.clone());
    }
    let line = record
        .to_line()
        .map_err(anyhow::Error::from)
        .and_then(|line| Ok(String::from_utf8(line)?));
    match line {
        Ok(line) => {
            let mut cases = lock(&SHADOW_CASES);
            let kept = cases.entry(handles.definition.name.clone()).or_default();
            if kept.len() == KEPT_CASES {
                kept.pop_front();
            }
            kept.push_back(line);
        }
        Err(e) => tracing::warn!(error = %e, "could not keep a shadow case"),
    }
}

/// The last differing cases of each operator, newest last, as JSON lines.
static SHADOW_CASES: LazyLock<Mutex<HashMap<String, VecDeque<String>>>> =
    LazyLock::new(Default::default);

/// The kept differing cases of `operator` (all operators if `None`), one JSON case per line:
/// what `/shadow-cases` serves, ready for `wasmpilot replay`.
pub fn kept_cases(operator: Option<&str>) -> String {
    let cases = lock(&SHADOW_CASES);
    let mut out = String::new();
    for (name, kept) in cases.iter() {
        if operator.is_some_and(|o| o != name) {
            continue;
        }
        for line in kept {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

fn short(digest: &str) -> &str {
    digest.get(..19).unwrap_or(digest)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mock_api_server::{failure, scripted, Exchange};
    use http::{Method, StatusCode};

    #[test]
    fn queued_bytes_are_bounded_and_given_back() {
        let counter = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let first = QueuedBytes::take(&counter, 60, 100).expect("within the bound");
        assert!(
            QueuedBytes::take(&counter, 50, 100).is_none(),
            "past the bound: skipped"
        );
        let second = QueuedBytes::take(&counter, 40, 100).expect("exactly the bound");
        assert_eq!(counter.load(std::sync::atomic::Ordering::Acquire), 100);
        drop(first);
        drop(second);
        assert_eq!(
            counter.load(std::sync::atomic::Ordering::Acquire),
            0,
            "a job done gives its bytes back"
        );
    }

    /// A counts write the API server refuses for its shape is reported once, as a Warning
    /// Event on the WasmOperator naming the refusal; the same refusal again is not reported
    /// again (the writer keeps retrying quietly).
    #[tokio::test]
    async fn a_refused_counts_write_becomes_one_event_on_the_wasmoperator() {
        let path = "/apis/wasmpilot.io/v1alpha1/wasmoperators/autoroute/status";
        let refusal = || {
            Exchange::new(
                Method::PATCH,
                path,
                StatusCode::UNPROCESSABLE_ENTITY,
                failure(
                    422,
                    "Invalid",
                    "WasmOperator.wasmpilot.io \"autoroute\" is invalid: status.shadows.module: Invalid value: \"null\"",
                ),
            )
        };
        let (client, server) = scripted(vec![
            refusal(),
            Exchange::new(
                Method::GET,
                "/apis/wasmpilot.io/v1alpha1/wasmoperators/autoroute",
                StatusCode::OK,
                serde_json::json!({"apiVersion": "wasmpilot.io/v1alpha1", "kind": "WasmOperator",
                    "metadata": {"name": "autoroute", "uid": "op-uid"},
                    "spec": {"resource": {"apiVersion": "examples.io/v1", "kind": "AutoRoute"},
                             "phases": [{"name": "Syncing", "initial": true}]}}),
            ),
            Exchange::new(
                Method::POST,
                "/apis/events.k8s.io/v1/namespaces/default/events",
                StatusCode::CREATED,
                serde_json::json!({"apiVersion": "events.k8s.io/v1", "kind": "Event",
                    "metadata": {"name": "autoroute.1", "namespace": "default"}, "eventTime": null}),
            )
            .checking(|_, body| {
                assert_eq!(body["reason"], "StatusRefused", "{body}");
                assert_eq!(body["type"], "Warning", "{body}");
                assert_eq!(body["regarding"]["kind"], "WasmOperator", "{body}");
                assert_eq!(body["regarding"]["uid"], "op-uid", "{body}");
                let note = body["note"].as_str().unwrap_or_default();
                assert!(note.contains("status.shadows.module: Invalid value"), "{note}");
            }),
            refusal(),
        ]);
        let reporter = kube::runtime::events::Reporter {
            controller: "wasmpilot".into(),
            instance: None,
        };
        let mut writer = CountsWriter {
            client: client.clone(),
            recorder: Recorder::new(client.clone(), reporter),
            operator: "autoroute".into(),
            written: None,
            refused: None,
        };
        let stats = Mutex::new(initial_counts(
            BTreeMap::new(),
            BTreeMap::from([("Syncing".to_string(), "shadow not loaded".to_string())]),
        ));
        writer.write(&stats).await;
        writer.write(&stats).await;
        drop(writer);
        drop(client);
        server.await.expect("the API server's script");
    }
}
