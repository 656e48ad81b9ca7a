//! The record sink (`wasmpilot run --record-dir DIR`): every decision as a [`DecisionCase`], one
//! JSON line each, in rotating segment files whose total size stays under a cap. A reconcile only
//! hands its call over (a bounded, non-blocking queue); a writer thread builds and writes the
//! case, and what does not fit in the queue is dropped and counted, never waited for.

use super::case::{CaseSource, DecisionCase, RecordedResult, CASE_FORMAT};
use crate::sandbox::RequestDigest;
use crate::sandbox::SyncRequest;
use std::collections::VecDeque;
use std::fs::{self, File};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender, TryRecvError, TrySendError};
use std::sync::Arc;

/// One live worker call of a reconcile, kept when the operator records or shadows its phase
/// (the controller's evidence step hands it to the record sink and the shadow lane).
pub struct LiveCall {
    pub request: SyncRequest,
    /// The live decision after the host's checks, or why there was none.
    pub result: RecordedResult,
    /// The digest of the live module.
    pub module: String,
    pub duration: Duration,
    /// The reconcile's trace, when spans are exported.
    pub trace_id: Option<String>,
}
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Segments the cap is split into: the oldest goes when the total would exceed the cap.
const SEGMENTS: u64 = 8;
/// Records waiting for the writer, at most.
const QUEUE_RECORDS: usize = 4096;
/// Prefix and suffix of segment file names (`decisions-<unix ms>-<seq>.jsonl`).
const SEGMENT_PREFIX: &str = "decisions-";
const SEGMENT_SUFFIX: &str = ".jsonl";

/// The sink could not start.
#[derive(Debug, thiserror::Error)]
pub enum RecordSinkError {
    #[error("record directory {dir}: {source}")]
    Directory {
        dir: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the record size cap must be at least 1 MiB")]
    CapTooSmall,
}

/// One worker call, handed from a reconcile to the writer.
#[derive(Clone)]
pub struct PendingRecord {
    pub source: CaseSource,
    pub resource: String,
    pub request: SyncRequest,
    pub module: String,
    pub result: RecordedResult,
    pub duration: Option<Duration>,
    /// For shadow cases: the shadow module and its result.
    pub shadow: Option<(String, RecordedResult)>,
    /// The live reconcile's trace, when spans are exported.
    pub trace_id: Option<String>,
}

impl PendingRecord {
    /// The record as kept: every Secret among the request's inputs with its values replaced
    /// (keys kept), and those values replaced wherever the results carry them (outputs, status,
    /// errors), whatever reads the record directory or `/shadow-cases` later.
    pub fn without_secret_data(mut self) -> Self {
        let redactor = crate::redaction::Redactor::of_objects(
            self.request
                .inputs
                .iter()
                .flat_map(|i| i.objects.iter().map(String::as_str)),
        );
        if !redactor.is_empty() {
            self.result.redact(&redactor);
            if let Some((_, shadow)) = &mut self.shadow {
                shadow.redact(&redactor);
            }
        }
        for input in &mut self.request.inputs {
            crate::redaction::without_secret_data(&mut input.objects);
        }
        self
    }

    fn approximate_bytes(&self) -> usize {
        self.request.resource.len()
            + self
                .request
                .inputs
                .iter()
                .flat_map(|i| i.objects.iter())
                .map(String::len)
                .sum::<usize>()
    }

    /// The case this call makes, as one JSON line (without the newline): the shape of
    /// [`DecisionCase`], written directly — the request's JSON texts are copied, not parsed
    /// and re-serialized (the host made them all by serializing, so they are JSON).
    pub fn to_line(&self) -> Result<Vec<u8>, serde_json::Error> {
        fn field(
            out: &mut Vec<u8>,
            key: &str,
            value: &impl serde::Serialize,
        ) -> Result<(), serde_json::Error> {
            out.push(b',');
            serde_json::to_writer(&mut *out, key)?;
            out.push(b':');
            serde_json::to_writer(&mut *out, value)
        }
        let request = &self.request;
        let mut out = Vec::with_capacity(self.approximate_bytes() + 2048);
        out.extend_from_slice(b"{\"format\":");
        serde_json::to_writer(&mut out, CASE_FORMAT)?;
        field(&mut out, "source", &self.source)?;
        field(
            &mut out,
            "recordedAt",
            &crate::pipeline::step::now_rfc3339(),
        )?;
        field(&mut out, "resource", &self.resource)?;
        let input_hash = RequestDigest::of_sync(request).to_prefixed_hex();
        field(&mut out, "inputHash", &input_hash)?;
        field(&mut out, "module", &self.module)?;
        if let Some(d) = self.duration {
            field(&mut out, "durationUs", &(d.as_micros() as u64))?;
        }
        if let Some(trace_id) = &self.trace_id {
            field(&mut out, "traceId", trace_id)?;
        }
        out.extend_from_slice(b",\"request\":{\"operator\":");
        serde_json::to_writer(&mut out, &request.operator)?;
        field(&mut out, "phase", &request.phase)?;
        field(&mut out, "now", &request.now)?;
        out.extend_from_slice(b",\"resource\":");
        out.extend_from_slice(request.resource.as_bytes());
        out.extend_from_slice(b",\"inputs\":[");
        for (i, input) in request.inputs.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            out.extend_from_slice(b"{\"name\":");
            serde_json::to_writer(&mut out, &input.name)?;
            out.extend_from_slice(b",\"objects\":[");
            for (j, object) in input.objects.iter().enumerate() {
                if j > 0 {
                    out.push(b',');
                }
                out.extend_from_slice(object.as_bytes());
            }
            out.extend_from_slice(b"]}");
        }
        out.extend_from_slice(b"]}");
        field(&mut out, "result", &self.result)?;
        if let Some((module, result)) = &self.shadow {
            field(
                &mut out,
                "shadow",
                &serde_json::json!({ "module": module, "result": result }),
            )?;
        }
        out.push(b'}');
        Ok(out)
    }
}

/// Where decisions are recorded. Cloning shares the writer.
#[derive(Clone)]
pub struct RecordSink {
    queue: SyncSender<PendingRecord>,
    queued_bytes: Arc<AtomicUsize>,
    max_queued_bytes: usize,
    dir: PathBuf,
}

impl RecordSink {
    /// Starts the writer thread for `dir` (created if missing), keeping at most `max_bytes` of
    /// segments there (older segments from a previous run count, and go first).
    pub fn start(dir: &Path, max_bytes: u64) -> Result<Self, RecordSinkError> {
        if max_bytes < 1 << 20 {
            return Err(RecordSinkError::CapTooSmall);
        }
        let fail = |source| RecordSinkError::Directory {
            dir: dir.to_path_buf(),
            source,
        };
        fs::create_dir_all(dir).map_err(fail)?;
        let segments = existing_segments(dir).map_err(fail)?;
        let (queue, receiver) = mpsc::sync_channel(QUEUE_RECORDS);
        let queued_bytes = Arc::new(AtomicUsize::new(0));
        let writer = Writer {
            dir: dir.to_path_buf(),
            max_bytes,
            segment_bytes: max_bytes / SEGMENTS,
            segments,
            current: None,
            sequence: 0,
            queued_bytes: queued_bytes.clone(),
        };
        std::thread::Builder::new()
            .name("wasmpilot-record".into())
            .spawn(move || writer.run(receiver))
            .map_err(fail)?;
        Ok(RecordSink {
            queue,
            queued_bytes,
            // The queue holds at most a segment's worth of requests (and never more than 64 MiB).
            max_queued_bytes: (max_bytes / SEGMENTS).min(64 << 20) as usize,
            dir: dir.to_path_buf(),
        })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Hands a call to the writer; never waits. A full queue drops it (counted).
    pub fn record(&self, record: PendingRecord) {
        let metrics = &crate::metrics::METRICS;
        let bytes = record.approximate_bytes();
        if self.queued_bytes.load(Ordering::Relaxed) + bytes > self.max_queued_bytes {
            metrics.record_drops("queue_full");
            return;
        }
        self.queued_bytes.fetch_add(bytes, Ordering::Relaxed);
        match self.queue.try_send(record) {
            Ok(()) => {}
            Err(TrySendError::Full(r)) | Err(TrySendError::Disconnected(r)) => {
                self.queued_bytes
                    .fetch_sub(r.approximate_bytes(), Ordering::Relaxed);
                metrics.record_drops("queue_full");
            }
        }
    }
}

/// A segment on disk.
struct Segment {
    path: PathBuf,
    bytes: u64,
}

/// The segment files already in `dir`, oldest first (their names sort by time).
fn existing_segments(dir: &Path) -> std::io::Result<VecDeque<Segment>> {
    let mut found = Vec::new();
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with(SEGMENT_PREFIX) && name.ends_with(SEGMENT_SUFFIX) {
            found.push(Segment {
                bytes: entry.metadata()?.len(),
                path: entry.path(),
            });
        }
    }
    found.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(found.into())
}

struct Writer {
    dir: PathBuf,
    max_bytes: u64,
    segment_bytes: u64,
    /// Closed segments, oldest first.
    segments: VecDeque<Segment>,
    current: Option<(BufWriter<File>, Segment)>,
    sequence: u64,
    queued_bytes: Arc<AtomicUsize>,
}

impl Writer {
    fn run(mut self, receiver: Receiver<PendingRecord>) {
        let mut warned_at: Option<std::time::Instant> = None;
        loop {
            // Block for the next record, then flush once the queue is empty.
            let record = match receiver.try_recv() {
                Ok(r) => r,
                Err(TryRecvError::Empty) => {
                    self.flush();
                    match receiver.recv() {
                        Ok(r) => r,
                        Err(_) => break,
                    }
                }
                Err(TryRecvError::Disconnected) => break,
            };
            self.queued_bytes
                .fetch_sub(record.approximate_bytes(), Ordering::Relaxed);
            if let Err(e) = self.write(record) {
                crate::metrics::METRICS.record_drops("write_error");
                // One warning a minute: a full disk must not flood the log.
                if warned_at.is_none_or(|t| t.elapsed() > Duration::from_secs(60)) {
                    tracing::warn!(dir = %self.dir.display(), error = %e, "could not record a decision");
                    warned_at = Some(std::time::Instant::now());
                }
            }
        }
        self.flush();
    }

    fn flush(&mut self) {
        if let Some((file, _)) = &mut self.current {
            let _ = file.flush();
        }
    }

    fn write(&mut self, record: PendingRecord) -> anyhow::Result<()> {
        let mut line = record.to_line()?;
        line.push(b'\n');
        let len = line.len() as u64;
        if len > self.segment_bytes {
            crate::metrics::METRICS.record_drops("too_large");
            return Ok(());
        }
        let full = self
            .current
            .as_ref()
            .is_some_and(|(_, s)| s.bytes + len > self.segment_bytes);
        if full || self.current.is_none() {
            self.rotate()?;
        }
        if let Some((file, segment)) = &mut self.current {
            file.write_all(&line)?;
            segment.bytes += len;
        }
        crate::metrics::METRICS.records_written.inc();
        Ok(())
    }

    /// Closes the current segment, deletes the oldest ones while a new segment would not fit
    /// under the cap, and opens the next.
    fn rotate(&mut self) -> anyhow::Result<()> {
        if let Some((mut file, segment)) = self.current.take() {
            file.flush()?;
            self.segments.push_back(segment);
        }
        let mut total: u64 = self.segments.iter().map(|s| s.bytes).sum();
        while total + self.segment_bytes > self.max_bytes {
            let Some(oldest) = self.segments.pop_front() else {
                break;
            };
            total -= oldest.bytes;
            if let Err(e) = fs::remove_file(&oldest.path) {
                tracing::warn!(path = %oldest.path.display(), error = %e, "could not delete an old record segment");
            }
        }
        let millis = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis())
            .unwrap_or(0);
        self.sequence += 1;
        let path = self.dir.join(format!(
            "{SEGMENT_PREFIX}{millis:015}-{:06}{SEGMENT_SUFFIX}",
            self.sequence
        ));
        let file = File::create(&path)?;
        self.current = Some((BufWriter::new(file), Segment { path, bytes: 0 }));
        Ok(())
    }
}

/// Reads cases from files and directories: a `.json` file holds one case, any other file one
/// case per line (a segment, or the host's `/shadow-cases`); a directory is read file by file
/// in name order (oldest segment first).
pub fn read_cases(paths: &[PathBuf]) -> anyhow::Result<Vec<(String, DecisionCase)>> {
    use anyhow::Context;
    let mut files = Vec::new();
    for path in paths {
        if path.is_dir() {
            let mut inside: Vec<PathBuf> = fs::read_dir(path)
                .with_context(|| format!("reading {}", path.display()))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.is_file())
                .collect();
            inside.sort();
            files.extend(inside);
        } else {
            files.push(path.clone());
        }
    }
    let mut cases = Vec::new();
    for file in files {
        let text =
            fs::read_to_string(&file).with_context(|| format!("reading {}", file.display()))?;
        let name = file.display().to_string();
        if file.extension().is_some_and(|e| e == "json") {
            let case = DecisionCase::parse(&text).with_context(|| format!("in {name}"))?;
            cases.push((name, case));
            continue;
        }
        for (i, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let case =
                DecisionCase::parse(line).with_context(|| format!("{name}, line {}", i + 1))?;
            cases.push((format!("{name}:{}", i + 1), case));
        }
    }
    Ok(cases)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sandbox::NamedObjects;

    fn record(payload: usize) -> PendingRecord {
        PendingRecord {
            source: CaseSource::Recorded,
            resource: "ns/r".into(),
            request: SyncRequest {
                operator: "op".into(),
                phase: "P".into(),
                resource: format!("{{\"pad\":\"{}\"}}", "x".repeat(payload)),
                inputs: vec![NamedObjects {
                    name: "i".into(),
                    objects: vec!["{}".into()],
                }],
                now: "2026-11-24T00:00:00Z".into(),
            },
            module: "sha256:m".into(),
            result: RecordedResult::Error {
                reason: "WorkerFatalError".into(),
                message: "no".into(),
            },
            duration: None,
            shadow: None,
            trace_id: None,
        }
    }

    fn dir_bytes(dir: &Path) -> u64 {
        fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().metadata().unwrap().len())
            .sum()
    }

    /// A worker that copied a Secret value it read into an output, its status and its error:
    /// the record keeps the Secret's keys, and the value nowhere, the shadow's result included.
    #[test]
    fn recorded_results_keep_no_secret_value() {
        let secret = serde_json::json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "db"}, "stringData": {"password": "hunter2-and-more"}});
        let mut r = record(10);
        r.request.inputs[0].objects = vec![secret.to_string()];
        let decided = RecordedResult::Decided(crate::evidence::case::DecidedResult {
            next_phase: "Done".into(),
            status_info: serde_json::from_value(
                serde_json::json!({"copied": "hunter2-and-more", "hunter2-and-more": 1}),
            )
            .ok(),
            outputs: vec![serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "copy"}, "data": {"password": "hunter2-and-more"}})],
            requeue_after_ms: None,
        });
        r.result = decided;
        r.shadow = Some((
            "sha256:s".into(),
            RecordedResult::Error {
                reason: "WorkerFatalError".into(),
                message: "bad password hunter2-and-more".into(),
            },
        ));
        let kept = r.without_secret_data();
        let text = format!(
            "{} {:?} {:?}",
            kept.request.inputs[0].objects[0], kept.result, kept.shadow
        );
        assert!(!text.contains("hunter2"), "{text}");
        assert!(
            text.contains("\"password\":\"[redacted]\""),
            "the keys stay: {text}"
        );
        assert!(text.contains("bad password [redacted]"), "{text}");
    }

    #[test]
    fn segments_rotate_under_the_cap_and_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let cap = 1 << 20;
        let sink = RecordSink::start(dir.path(), cap).unwrap();
        // ~10 KiB each, 400 of them: four times the cap.
        for _ in 0..400 {
            sink.record(record(10 << 10));
            // Let the writer keep up (the queue would drop otherwise, which is fine but not
            // what this test is about).
            std::thread::sleep(Duration::from_millis(1));
        }
        drop(sink);
        std::thread::sleep(Duration::from_millis(300));
        let total = dir_bytes(dir.path());
        assert!(total <= cap, "{total} bytes kept, cap {cap}");
        assert!(total > cap / 2, "only {total} bytes kept");
        let cases = read_cases(&[dir.path().to_path_buf()]).unwrap();
        assert!(cases.len() > 40, "{} cases", cases.len());
        assert!(cases.iter().all(|(_, c)| c.input_hash_reproduces()));
    }

    #[test]
    fn a_line_is_the_case_serde_writes() {
        let mut r = record(10);
        r.shadow = Some(("sha256:s".into(), r.result.clone()));
        r.trace_id = Some("4bf92f3577b34da6a3ce929d0e0e4736".into());
        let line = String::from_utf8(r.to_line().unwrap()).unwrap();
        let read = DecisionCase::parse(&line).unwrap();
        assert!(read.input_hash_reproduces());
        let mut expected = DecisionCase::new(
            r.source,
            r.resource.clone(),
            &r.request,
            &r.module,
            r.result.clone(),
            r.duration,
        )
        .unwrap();
        expected.trace_id = r.trace_id.clone();
        expected.shadow = Some(super::super::case::ShadowResult {
            module: "sha256:s".into(),
            result: r.result.clone(),
        });
        let as_value = |c: &DecisionCase| {
            let mut v = serde_json::to_value(c).unwrap();
            v.as_object_mut().unwrap().remove("recordedAt");
            v
        };
        assert_eq!(as_value(&read), as_value(&expected));
    }

    #[test]
    fn a_full_queue_drops_instead_of_waiting() {
        let dir = tempfile::tempdir().unwrap();
        let sink = RecordSink::start(dir.path(), 8 << 20).unwrap();
        let dropped = || {
            crate::metrics::METRICS
                .records_dropped
                .get_or_create(&crate::metrics::DropLabels {
                    reason: "queue_full".into(),
                })
                .get()
        };
        let before = dropped();
        let started = std::time::Instant::now();
        // 1 MiB each against a 1 MiB queue: most are dropped, none waits.
        for _ in 0..50 {
            sink.record(record(1 << 20));
        }
        assert!(started.elapsed() < Duration::from_secs(2));
        assert!(dropped() > before, "nothing was dropped");
        assert!(RecordSink::start(dir.path(), 1000).is_err());
    }
}
