//! A test-only worker whose behaviour is scripted by the resource: `spec.phases.<Phase>` says what
//! the phase worker does (decide, fail, trap, loop, allocate without bound, …) and `spec.finalize`
//! what the finalizer does. Used by the host's sandbox tests and end-to-end tests.

use serde::Deserialize;
use serde_json::Value;
use std::collections::BTreeMap;
use std::time::Duration;
use wasmpilot_guest::{
    Context, Finalized, FinalizerWorker, Inputs, Outcome, PhaseWorker, WorkerError,
};

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct Script {
    #[serde(default)]
    phases: BTreeMap<String, Step>,
    #[serde(default)]
    finalize: Option<Step>,
}

#[derive(Deserialize, Default, Clone)]
#[serde(rename_all = "camelCase")]
pub struct Step {
    /// ok | fatal | retryable | loop | alloc | panic | print | chatty | bloat | probe | sleep |
    /// bignext | bigfatal | bigstatus | random | leak
    #[serde(default)]
    mode: String,
    #[serde(default)]
    next: Option<String>,
    #[serde(default)]
    outputs: Vec<Value>,
    #[serde(default)]
    status_info: Option<Value>,
    #[serde(default)]
    requeue_after_ms: Option<u64>,
    #[serde(default)]
    message: Option<String>,
    /// For `ok`: also report how many objects each input held, as status info `inputCounts`.
    #[serde(default)]
    count_inputs: bool,
    /// For `ok`: also report the objects of each input as received, as status info `inputs`.
    #[serde(default)]
    echo_inputs: bool,
    /// For `chatty`: log lines to send; for `bloat`: bytes of data in the ConfigMap returned;
    /// for `sleep`: milliseconds to sleep (in a WASI poll, where no guest code runs); for
    /// `bignext`, `bigfatal`, `bigstatus`: bytes of the next phase, the fatal error's message,
    /// the status info's `blob`.
    #[serde(default)]
    count: usize,
}

#[derive(Deserialize)]
pub struct Resource {
    #[serde(default)]
    spec: Script,
}

/// What a misbehaving guest does instead of deciding.
fn misbehave(step: &Step) -> Option<WorkerError> {
    match step.mode.as_str() {
        "fatal" => Some(WorkerError::fatal(
            step.message
                .clone()
                .unwrap_or_else(|| "scripted fatal error".into()),
        )),
        "retryable" => Some(WorkerError::retryable(
            step.message
                .clone()
                .unwrap_or_else(|| "scripted retryable error".into()),
        )),
        "loop" => {
            let mut x: u64 = 0;
            loop {
                x = std::hint::black_box(x.wrapping_add(1));
            }
        }
        "alloc" => {
            let mut hog: Vec<Vec<u8>> = Vec::new();
            loop {
                hog.push(vec![1u8; 1 << 20]);
                std::hint::black_box(&hog);
            }
        }
        "panic" => panic!(
            "{}",
            step.message
                .clone()
                .unwrap_or_else(|| "scripted panic".into())
        ),
        "sleep" => {
            std::thread::sleep(Duration::from_millis(step.count as u64));
            None
        }
        "bigfatal" => Some(WorkerError::fatal("F".repeat(step.count))),
        "print" => {
            for i in 0..10_000 {
                println!("flooding stdout line {i}");
            }
            None
        }
        _ => None,
    }
}

/// What the guest can reach of the world outside its request, as the `probe` mode reports it
/// (status info `probe`): environment, arguments, files, network, the wall clock.
fn probe() -> Value {
    let connect = std::net::TcpStream::connect("127.0.0.1:6443");
    let resolve = std::net::ToSocketAddrs::to_socket_addrs(&("kubernetes.default", 443));
    let udp = std::net::UdpSocket::bind("0.0.0.0:0");
    let wall = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    serde_json::json!({
        "env": std::env::vars().count(),
        "args": std::env::args().count(),
        "cwd": std::env::current_dir().ok().map(|d| d.display().to_string()),
        "readRoot": std::fs::read_dir("/").is_ok(),
        "readEtc": std::fs::read("/etc/hostname").is_ok(),
        "writeTmp": std::fs::write("/tmp/escape", b"x").is_ok(),
        "tcpConnect": connect.is_ok(),
        "nameLookup": resolve.is_ok(),
        "udpBind": udp.is_ok(),
        "wallClockSecs": wall,
    })
}

#[derive(Default)]
pub struct Scripted;

impl PhaseWorker for Scripted {
    type Resource = Resource;

    fn sync(
        &self,
        ctx: &Context,
        resource: Resource,
        inputs: &Inputs,
    ) -> Result<Outcome, WorkerError> {
        let step = resource
            .spec
            .phases
            .get(ctx.phase())
            .cloned()
            .unwrap_or_default();
        ctx.info(
            "scripted step",
            &[("phase", &ctx.phase()), ("mode", &step.mode)],
        );
        if step.mode == "leak" {
            // What a worker that prints a value it read does: `message` on stdout, at the end of
            // a log line of `count` more bytes, and on stderr after `count` bytes and 500 before
            // the trap's own.
            let value = step.message.clone().unwrap_or_default();
            println!("the value: {value}");
            ctx.info(&format!("{}{value}", "L".repeat(step.count)), &[]);
            eprint!("{}{value}{}", "E".repeat(step.count), ".".repeat(500));
            panic!("leaked");
        }
        if let Some(e) = misbehave(&step) {
            return Err(e);
        }
        if step.mode == "chatty" {
            for i in 0..step.count {
                ctx.info("chatty line", &[("i", &i)]);
            }
        }
        let next = match step.mode.as_str() {
            "bignext" => "P".repeat(step.count),
            _ => step.next.clone().unwrap_or_else(|| ctx.phase().to_string()),
        };
        let mut outcome = Outcome::next(next).outputs(step.outputs.iter())?;
        if step.mode == "bloat" {
            let data = "x".repeat(step.count);
            outcome = outcome.outputs([serde_json::json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "bloat"},
                "data": {"x": data},
            })])?;
        }
        let mut info = step.status_info.clone().unwrap_or(Value::Null);
        if step.mode == "probe" {
            info = serde_json::json!({ "probe": probe() });
        }
        if step.mode == "bigstatus" {
            info = serde_json::json!({ "blob": "s".repeat(step.count) });
        }
        if step.mode == "random" {
            // std's hash keys come from WASI random: what the worker would see from any RNG.
            use std::hash::BuildHasher;
            let keyed = std::collections::hash_map::RandomState::new().hash_one(1u64);
            info = serde_json::json!({ "random": format!("{keyed:016x}") });
        }
        if step.count_inputs {
            let counts: BTreeMap<String, usize> = inputs
                .names()
                .map(|n| (n.to_string(), inputs.get_raw(n).map_or(0, <[String]>::len)))
                .collect();
            if !info.is_object() {
                info = Value::Object(Default::default());
            }
            info["inputCounts"] =
                serde_json::to_value(counts).map_err(|e| WorkerError::fatal(e.to_string()))?;
        }
        if step.echo_inputs {
            let mut echoed = serde_json::Map::new();
            for name in inputs.names() {
                let objects: Vec<Value> = inputs
                    .get_raw(name)
                    .unwrap_or_default()
                    .iter()
                    .map(|o| serde_json::from_str(o).unwrap_or(Value::Null))
                    .collect();
                echoed.insert(name.to_string(), Value::Array(objects));
            }
            if !info.is_object() {
                info = Value::Object(Default::default());
            }
            info["inputs"] = Value::Object(echoed);
        }
        if !info.is_null() {
            outcome = outcome.status(info);
        }
        if let Some(ms) = step.requeue_after_ms {
            outcome = outcome.requeue_after(Duration::from_millis(ms));
        }
        Ok(outcome)
    }
}

impl FinalizerWorker for Scripted {
    type Resource = Resource;

    fn finalize(
        &self,
        ctx: &Context,
        resource: Resource,
        inputs: &Inputs,
    ) -> Result<Finalized, WorkerError> {
        let step = resource.spec.finalize.clone().unwrap_or_default();
        ctx.info("scripted finalizer", &[("mode", &step.mode)]);
        if let Some(e) = misbehave(&step) {
            return Err(e);
        }
        // With `countInputs`: the names of the finalizer's inputs' objects (`spec.finalizer.inputs`).
        let mut status = serde_json::Map::new();
        if step.count_inputs {
            let mut seen = serde_json::Map::new();
            for name in inputs.names() {
                let names: Vec<Value> = inputs
                    .get_raw(name)
                    .unwrap_or_default()
                    .iter()
                    .filter_map(|o| serde_json::from_str::<Value>(o).ok())
                    .map(|o| o["metadata"]["name"].clone())
                    .collect();
                seen.insert(name.to_string(), Value::Array(names));
            }
            // Also in its log: an operator's removal writes no status, the host log shows it.
            ctx.info(
                "scripted finalizer inputs",
                &[("seen", &Value::Object(seen.clone()).to_string())],
            );
            status.insert("finalizerInputs".into(), Value::Object(seen));
        }
        match step.mode.as_str() {
            "pending" => {
                let pending = Finalized::pending(Duration::from_millis(
                    step.requeue_after_ms.unwrap_or(1000),
                ));
                Ok(match status.is_empty() {
                    true => pending,
                    false => pending.status(Value::Object(status)),
                })
            }
            _ => {
                status.insert("finalizedAt".into(), ctx.now().to_string().into());
                Ok(Finalized::done().status(Value::Object(status)))
            }
        }
    }
}

wasmpilot_guest::export!(phase = Scripted, finalizer = Scripted);
