//! Test support (the crate's own tests, and the `testing` feature for the tools crate's): a
//! scripted mock API server (tower-test, as kube-rs tests its client: each test states the
//! requests, in order, that the host must make and no others, and the answers), a stateful fake
//! API server, and the repository's guest components built on first use.

use anyhow::{bail, Context};
use http::{Method, Request, Response, StatusCode};
use kube::client::Body;
use kube::Client;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Command;
use tokio::task::JoinHandle;

/// Checks one request's head (query string, headers) and JSON body (`Null` when there is none).
type RequestCheck = Box<dyn Fn(&http::request::Parts, &Value) + Send>;

/// One request the host must make, and the API server's answer.
pub struct Exchange {
    method: Method,
    /// The request's path; a trailing `*` matches any rest.
    path: String,
    check: RequestCheck,
    status: StatusCode,
    answer: Value,
}

impl Exchange {
    pub fn new(method: Method, path: &str, status: StatusCode, answer: Value) -> Self {
        Exchange {
            method,
            path: path.to_string(),
            check: Box::new(|_, _| {}),
            status,
            answer,
        }
    }

    pub fn checking(
        mut self,
        check: impl Fn(&http::request::Parts, &Value) + Send + 'static,
    ) -> Self {
        self.check = Box::new(check);
        self
    }
}

/// A `Status` failure as the API server sends it.
pub fn failure(code: u16, reason: &str, message: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
           "message": message, "reason": reason, "code": code})
}

/// A client whose API server answers `script` in order; the task ends once the client is
/// dropped, and fails if the client made more or fewer requests than scripted.
pub fn scripted(script: Vec<Exchange>) -> (Client, JoinHandle<()>) {
    let (service, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let server = tokio::spawn(async move {
        let mut handle = std::pin::pin!(handle);
        let expected = script.len();
        for (i, exchange) in script.into_iter().enumerate() {
            let Some((request, send)) = handle.next_request().await else {
                panic!("the host made {i} requests; {expected} were scripted");
            };
            let (parts, body) = request.into_parts();
            let bytes = body.collect_bytes().await.expect("the request body");
            let body: Value = if bytes.is_empty() {
                Value::Null
            } else {
                serde_json::from_slice(&bytes).expect("a JSON request body")
            };
            // A path ending in `*` matches any path it begins (a name the host generated).
            let path = match exchange.path.strip_suffix('*') {
                Some(prefix) if parts.uri.path().starts_with(prefix) => exchange.path.as_str(),
                _ => parts.uri.path(),
            };
            assert_eq!(
                (&parts.method, path),
                (&exchange.method, exchange.path.as_str()),
                "request {i}, with body {body}"
            );
            (exchange.check)(&parts, &body);
            let answer = Response::builder()
                .status(exchange.status)
                .header("content-type", "application/json")
                .body(Body::from(
                    serde_json::to_vec(&exchange.answer).expect("JSON"),
                ))
                .expect("a response");
            send.send_response(answer);
        }
        if let Some((request, _)) = handle.next_request().await {
            panic!(
                "an unscripted request: {} {}",
                request.method(),
                request.uri()
            );
        }
    });
    (Client::new(service, "default"), server)
}

/// A tiny stateful API server for tests that compare the host's writes: objects kept by path;
/// server-side apply (one field manager: the applied object, keeping uid), merge patches of
/// `/status` (conditional on a resourceVersion in the body), JSON patches of an object's
/// metadata (a failed `test` is 422), deletes (with a uid precondition), metadata and full
/// reads; Events are kept under their path and a generated name. Anything else fails the test.
pub struct FakeApiServer {
    pub objects: std::sync::Arc<std::sync::Mutex<std::collections::BTreeMap<String, Value>>>,
    /// Every request, as `METHOD path` (`GET path (metadata)` for a metadata read).
    pub requests: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl FakeApiServer {
    /// A client of a fake API server holding `objects` (by path); it serves until the client
    /// is dropped.
    pub fn start(
        objects: std::collections::BTreeMap<String, Value>,
    ) -> (Client, FakeApiServer, JoinHandle<()>) {
        let (service, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let store = std::sync::Arc::new(std::sync::Mutex::new(objects));
        let served = store.clone();
        let requests = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let log = requests.clone();
        let server = tokio::spawn(async move {
            let mut handle = std::pin::pin!(handle);
            let mut version = 1000u64;
            while let Some((request, send)) = handle.next_request().await {
                let (parts, body) = request.into_parts();
                let bytes = body.collect_bytes().await.expect("the request body");
                let body: Value = if bytes.is_empty() {
                    Value::Null
                } else {
                    serde_json::from_slice(&bytes).expect("a JSON request body")
                };
                version += 1;
                let metadata = parts
                    .headers
                    .get("accept")
                    .and_then(|v| v.to_str().ok())
                    .is_some_and(|a| a.contains("PartialObjectMetadata"));
                log.lock().unwrap_or_else(|p| p.into_inner()).push(format!(
                    "{} {}{}",
                    parts.method,
                    parts.uri.path(),
                    if metadata { " (metadata)" } else { "" }
                ));
                let mut store = served.lock().unwrap_or_else(|p| p.into_inner());
                let (status, answer) = fake_answer(&mut store, &parts, body, version);
                drop(store);
                let answer = Response::builder()
                    .status(status)
                    .header("content-type", "application/json")
                    .body(Body::from(serde_json::to_vec(&answer).expect("JSON")))
                    .expect("a response");
                send.send_response(answer);
            }
        });
        (
            Client::new(service, "default"),
            FakeApiServer {
                objects: store,
                requests,
            },
            server,
        )
    }
}

fn fake_answer(
    store: &mut std::collections::BTreeMap<String, Value>,
    parts: &http::request::Parts,
    body: Value,
    version: u64,
) -> (StatusCode, Value) {
    let path = parts.uri.path().to_string();
    let not_found = || (StatusCode::NOT_FOUND, failure(404, "NotFound", "not found"));
    let content_type = parts
        .headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    if path.ends_with("/events") && parts.method == Method::POST {
        store.insert(format!("{path}/event-{version}"), body.clone());
        return (StatusCode::CREATED, body);
    }
    if let Some(object_path) = path.strip_suffix("/status") {
        assert_eq!(parts.method, Method::PATCH, "{path}");
        let Some(object) = store.get_mut(object_path) else {
            return not_found();
        };
        if let Some(rv) = body["metadata"]["resourceVersion"].as_str() {
            if object["metadata"]["resourceVersion"] != rv {
                return (StatusCode::CONFLICT, failure(409, "Conflict", "modified"));
            }
        }
        json_patch::merge(object, &json!({"status": body["status"]}));
        object["metadata"]["resourceVersion"] = json!(version.to_string());
        return (StatusCode::OK, object.clone());
    }
    match parts.method.clone() {
        Method::GET => match store.get(&path) {
            Some(object) => {
                let accept = parts
                    .headers
                    .get("accept")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or_default();
                if accept.contains("PartialObjectMetadata") {
                    let metadata = object["metadata"].clone();
                    (
                        StatusCode::OK,
                        json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata",
                               "metadata": metadata}),
                    )
                } else {
                    (StatusCode::OK, object.clone())
                }
            }
            None => not_found(),
        },
        Method::PATCH if content_type.starts_with("application/apply-patch") => {
            let mut object = body;
            let uid = store
                .get(&path)
                .map(|o| o["metadata"]["uid"].clone())
                .unwrap_or_else(|| json!(format!("uid-{version}")));
            object["metadata"]["uid"] = uid;
            object["metadata"]["resourceVersion"] = json!(version.to_string());
            store.insert(path, object.clone());
            (StatusCode::OK, object)
        }
        Method::PATCH if content_type.starts_with("application/json-patch") => {
            let Some(object) = store.get_mut(&path) else {
                return not_found();
            };
            let patch: json_patch::Patch = serde_json::from_value(body).expect("a JSON patch");
            let mut patched = object.clone();
            if let Err(e) = json_patch::patch(&mut patched, &patch) {
                return (
                    StatusCode::UNPROCESSABLE_ENTITY,
                    failure(422, "Invalid", &e.to_string()),
                );
            }
            patched["metadata"]["resourceVersion"] = json!(version.to_string());
            *object = patched.clone();
            (StatusCode::OK, patched)
        }
        Method::DELETE => {
            let Some(object) = store.get(&path) else {
                return not_found();
            };
            let wanted = &body["preconditions"]["uid"];
            if !wanted.is_null() && *wanted != object["metadata"]["uid"] {
                return (
                    StatusCode::CONFLICT,
                    failure(409, "Conflict", "uid differs"),
                );
            }
            store.remove(&path);
            (
                StatusCode::OK,
                json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"}),
            )
        }
        other => panic!("the fake API server does not serve {other} {path}"),
    }
}

/// Where the repository's guest components are (`WASMPILOT_WASM_DIR`, else the target
/// directory's wasm32-wasip2/release, built there first when missing), with
/// `wasmpilot_test_scripted.wasm` among them.
pub fn scripted_component_dir() -> std::path::PathBuf {
    static BUILT: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    BUILT
        .get_or_init(|| {
            if let Ok(dir) = std::env::var("WASMPILOT_WASM_DIR") {
                return std::path::PathBuf::from(dir);
            }
            let exe = std::env::current_exe().expect("the test binary's path");
            let target = exe
                .ancestors()
                .nth(3)
                .expect("<target>/<profile>/deps/<test>");
            let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .parent()
                .expect("host/ has a parent");
            repository_guests_built(repo, target)
                .unwrap_or_else(|e| panic!("the guest components: {e:#}"))
        })
        .clone()
}

/// The bytes of `wasmpilot_test_scripted.wasm` (built first when missing).
pub fn scripted_component() -> Vec<u8> {
    let path = scripted_component_dir().join("wasmpilot_test_scripted.wasm");
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The Rust guest crates of a repository laid out like this one: the workspace members of
/// `repo/Cargo.toml` under a `workers/` directory or `host/tests/guests/`, by package name (the
/// directory's `Cargo.toml`).
pub fn repository_guests(repo: &Path) -> anyhow::Result<Vec<String>> {
    let manifest = repo.join("Cargo.toml");
    let text = std::fs::read_to_string(&manifest)
        .with_context(|| format!("reading {}", manifest.display()))?;
    let mut packages = Vec::new();
    let members = text.split("default-members").next().unwrap_or_default();
    for member in members.split('"').skip(1).step_by(2) {
        if !(member.contains("/workers/") || member.starts_with("host/tests/guests/")) {
            continue;
        }
        let crate_manifest = repo.join(member).join("Cargo.toml");
        let text = std::fs::read_to_string(&crate_manifest)
            .with_context(|| format!("reading {}", crate_manifest.display()))?;
        let name = text
            .lines()
            .find_map(|l| l.strip_prefix("name = "))
            .map(|n| n.trim().trim_matches('"').to_string())
            .with_context(|| format!("{} names no package", crate_manifest.display()))?;
        packages.push(name);
    }
    Ok(packages)
}

/// `target_dir/wasm32-wasip2/release`, with every Rust guest of the repository `repo` built in
/// it ([`repository_guests`]); a guest whose component is missing is built first (one cargo
/// call for all that are): how a test that runs real components starts from a fresh clone.
pub fn repository_guests_built(repo: &Path, target_dir: &Path) -> anyhow::Result<PathBuf> {
    let out = target_dir.join("wasm32-wasip2").join("release");
    let missing: Vec<String> = repository_guests(repo)?
        .into_iter()
        .filter(|p| !out.join(format!("{}.wasm", p.replace('-', "_"))).is_file())
        .collect();
    if missing.is_empty() {
        return Ok(out);
    }
    let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    cmd.args(["build", "--release", "--target", "wasm32-wasip2"])
        .env("CARGO_TARGET_DIR", target_dir)
        .current_dir(repo);
    for p in &missing {
        cmd.args(["-p", p]);
    }
    eprintln!(
        "building the guest components {} for wasm32-wasip2 into {} …",
        missing.join(", "),
        target_dir.display()
    );
    let status = cmd.status().context("running cargo build")?;
    if !status.success() {
        bail!(
            "building the guest components failed (if the target is missing: rustup target add wasm32-wasip2; deploy/local/setup.sh installs it)"
        );
    }
    Ok(out)
}
