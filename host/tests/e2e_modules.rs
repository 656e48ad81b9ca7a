//! Modules from OCI registries and URLs, and the on-disk compile cache.
//!
//! Without a cluster: a `url` module from an in-process HTTP server (plain http through the
//! explicit `ModuleCache::allow_plain_http_urls` test switch; WasmOperators may only name https
//! URLs), and a restart that loads compiled code from the disk cache instead of recompiling.
//!
//! On a real cluster (KUBECONFIG) with real registries (Debian's docker-registry on loopback,
//! started here through deploy/local/registry.sh): `wasmpilot push` the scripted test component,
//! a WasmOperator whose module is `oci:` goes Ready and reconciles a Probe; a wrong sha256 pin is
//! refused with a message naming the mismatch while the previous controller keeps running; a
//! reference by manifest digest swaps controllers; a private registry (htpasswd) refuses an
//! anonymous pull and works with a pull Secret; a restarted host loads from the compile cache.

mod common;

use anyhow::{ensure, Context};
use common::cluster::*;
use kube::api::{Patch, PatchParams};
use kube::Client;
use serde_json::{json, Value};
use std::net::TcpListener as StdListener;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};
use wasmpilot::crd::{FileModule, ModuleRef, UrlModule};
use wasmpilot::modules::{digest_of, ModuleCache};
use wasmpilot::sandbox::{Sandbox, SandboxLimits, SyncRequest};

const T: Duration = Duration::from_secs(60);
const OPS: (&str, &str) = ("wasmpilot.io/v1alpha1", "WasmOperator");
const PROBE: (&str, &str) = ("test.wasmpilot.io/v1", "Probe");
const SCRIPTED: &str = "wasmpilot_test_scripted.wasm";
const PUBLIC_OP: &str = "e2e-oci-probe";
const PRIVATE_OP: &str = "e2e-oci-private";
const USER: &str = "wasmpilot";
const PASSWORD: &str = "e2e-registry-pw";

// ---------------------------------------------------------------- without a cluster

fn sandbox() -> Arc<Sandbox> {
    Sandbox::new(SandboxLimits::default()).expect("sandbox")
}

fn probe_request(step: Value) -> SyncRequest {
    let resource = json!({
        "apiVersion": "test.wasmpilot.io/v1", "kind": "Probe",
        "metadata": {"name": "p", "namespace": "default"},
        "spec": {"phases": {"Start": step}}
    });
    SyncRequest {
        operator: "probe".into(),
        phase: "Start".into(),
        resource: resource.to_string(),
        inputs: vec![],
        now: "2026-01-01T00:00:00Z".into(),
    }
}

/// Serves `body` at every path over plain HTTP on loopback; returns the base URL.
async fn serve_bytes(body: Vec<u8>) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let body = Arc::new(body);
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            let body = body.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 4096];
                let _ = sock.read(&mut buf).await;
                let head = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: application/wasm\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    body.len()
                );
                let _ = sock.write_all(head.as_bytes()).await;
                let _ = sock.write_all(&body).await;
            });
        }
    });
    format!("http://{addr}")
}

#[tokio::test]
#[ignore = "needs a cluster: deploy/local/test.sh starts one"]
async fn url_modules_download_verify_and_compile() -> anyhow::Result<()> {
    let bytes = common::component(SCRIPTED);
    let digest = digest_of(&bytes);
    let base = serve_bytes(bytes).await;
    let url = format!("{base}/modules/{SCRIPTED}?token=not-for-logs");
    let module = |sha256: &str| ModuleRef {
        url: Some(UrlModule {
            url: url.clone(),
            sha256: sha256.into(),
        }),
        ..Default::default()
    };
    let loopback = wasmpilot::egress::EgressPolicy::allowing(&["127.0.0.1".into()])?;
    let cache = ModuleCache::new(sandbox(), None, None)
        .allow_plain_http_urls()
        .with_egress(loopback);
    let m = cache
        .phase("test", &module(&digest))
        .await
        .expect("url module loads");
    assert_eq!(m.digest, digest);
    let r = cache
        .sandbox()
        .run_sync(&m, probe_request(json!({"mode": "ok", "next": "Done"})))
        .await
        .expect("the downloaded worker decides");
    assert_eq!(r.next_phase, "Done");

    let zeros = "0".repeat(64);
    let e = cache
        .phase("test", &module(&zeros))
        .await
        .err()
        .expect("mismatch");
    let msg = e.to_string();
    assert!(
        msg.contains("sha256 mismatch") && msg.contains(&zeros) && msg.contains("URL http://"),
        "{msg}"
    );
    assert!(!msg.contains("not-for-logs"), "query leaked: {msg}");

    // Without the explicit switch, plain http is refused.
    let strict = ModuleCache::new(sandbox(), None, None);
    let e = strict
        .phase("test", &module(&digest))
        .await
        .err()
        .expect("refused");
    assert!(e.to_string().contains("must be https"), "{e}");
    // And a loopback address, unless the host's policy allows it (`--allow-fetch-from`).
    let public_only = ModuleCache::new(sandbox(), None, None)
        .allow_plain_http_urls()
        .with_egress(wasmpilot::egress::EgressPolicy::default());
    let e = public_only
        .phase("test", &module(&digest))
        .await
        .err()
        .expect("refused");
    assert!(e.to_string().contains("a loopback address"), "{e}");
    Ok(())
}

#[tokio::test]
#[ignore = "needs a cluster: deploy/local/test.sh starts one"]
async fn compile_cache_makes_restarts_fast() {
    let cache_dir = tempfile::tempdir().unwrap();
    // A private copy: guest builds running meanwhile must not change the bytes under the test.
    let module_dir = tempfile::tempdir().unwrap();
    std::fs::write(
        module_dir.path().join(SCRIPTED),
        common::component(SCRIPTED),
    )
    .unwrap();
    let module = ModuleRef {
        file: Some(FileModule {
            path: SCRIPTED.into(),
            sha256: None,
        }),
        ..Default::default()
    };
    // Each ModuleCache gets a fresh Sandbox (a new Engine): what a restarted host has.
    let start = |dir: &std::path::Path| {
        ModuleCache::new(sandbox(), None, Some(module_dir.path().to_path_buf()))
            .with_compile_cache(Some(dir.to_path_buf()))
    };
    let cold = start(cache_dir.path());
    let t = Instant::now();
    cold.phase("test", &module).await.expect("cold load");
    let cold_time = t.elapsed();
    assert_eq!(cold.stats().compiled, 1);

    let warm = start(cache_dir.path());
    let t = Instant::now();
    let m = warm.phase("test", &module).await.expect("warm load");
    let warm_time = t.elapsed();
    assert_eq!(warm.stats().loaded_from_disk, 1, "{:?}", warm.stats());
    assert_eq!(warm.stats().compiled, 0);
    let r = warm
        .sandbox()
        .run_sync(&m, probe_request(json!({"mode": "ok", "next": "Done"})))
        .await
        .expect("the cached component runs");
    assert_eq!(r.next_phase, "Done");
    eprintln!(
        "compile cache: cold compile {:.1} ms, warm load from disk {:.1} ms",
        cold_time.as_secs_f64() * 1000.0,
        warm_time.as_secs_f64() * 1000.0
    );
    assert!(
        warm_time < cold_time,
        "warm {warm_time:?} not faster than cold {cold_time:?}"
    );

    // A damaged entry is recompiled (and rewritten), never used.
    let entry = std::fs::read_dir(cache_dir.path())
        .unwrap()
        .flat_map(|d| std::fs::read_dir(d.unwrap().path()).unwrap())
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|x| x == "cwasm"))
        .expect("a .cwasm entry");
    let mut bytes = std::fs::read(&entry).unwrap();
    let n = bytes.len();
    bytes[n / 2] ^= 0x5a;
    std::fs::write(&entry, &bytes).unwrap();
    let after = start(cache_dir.path());
    after.phase("test", &module).await.expect("recompiled");
    assert_eq!(
        after.stats().compiled,
        1,
        "a corrupt entry must be recompiled"
    );
    let again = start(cache_dir.path());
    again.phase("test", &module).await.unwrap();
    assert_eq!(again.stats().loaded_from_disk, 1, "rewritten entry is used");
}

// ---------------------------------------------------------------- registries

/// A docker-registry on a free loopback port, stopped when dropped.
struct Registry {
    child: Child,
    addr: String,
    dir: tempfile::TempDir,
}

impl Registry {
    fn start(auth: Option<(&str, &str)>) -> Registry {
        let dir = tempfile::tempdir().expect("registry dir");
        let port = StdListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let log = std::fs::File::create(dir.path().join("registry.log")).unwrap();
        let mut cmd = Command::new(common::repo_root().join("deploy/local/registry.sh"));
        cmd.arg("serve").arg(dir.path()).arg(port.to_string());
        if let Some((u, p)) = auth {
            cmd.args([u, p]);
        }
        let child = cmd
            .stdout(Stdio::from(log.try_clone().unwrap()))
            .stderr(Stdio::from(log))
            .spawn()
            .expect("starting deploy/local/registry.sh");
        let mut r = Registry {
            child,
            addr: format!("127.0.0.1:{port}"),
            dir,
        };
        let started = Instant::now();
        while std::net::TcpStream::connect(&r.addr).is_err() {
            if started.elapsed() > Duration::from_secs(15)
                || !matches!(r.child.try_wait(), Ok(None))
            {
                panic!(
                    "the registry did not start (is docker-registry installed? deploy/local/setup.sh installs it): {}",
                    std::fs::read_to_string(r.dir.path().join("registry.log")).unwrap_or_default()
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        eprintln!("registry on {}", r.addr);
        r
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

struct Pushed {
    manifest: String,
    component: String,
}

/// `wasmpilot push` as a user runs it.
fn push(
    file: &std::path::Path,
    target: &str,
    credentials: Option<(&str, &str)>,
) -> anyhow::Result<Pushed> {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_wasmpilot"));
    cmd.arg("push").arg(file).arg(target).arg("--insecure");
    cmd.env_remove("WASMPILOT_REGISTRY_USERNAME")
        .env_remove("WASMPILOT_REGISTRY_PASSWORD");
    if let Some((u, p)) = credentials {
        cmd.args(["--username", u])
            .env("WASMPILOT_REGISTRY_PASSWORD", p);
    }
    let out = cmd.output().context("running wasmpilot push")?;
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    ensure!(
        out.status.success(),
        "wasmpilot push {target} failed: {}{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    let field = |prefix: &str| {
        stdout
            .lines()
            .find_map(|l| l.strip_prefix(prefix))
            .map(|v| v.trim().to_string())
            .with_context(|| format!("no {prefix:?} in: {stdout}"))
    };
    Ok(Pushed {
        manifest: field("manifest digest:")?,
        component: field("component sha256:")?,
    })
}

// ---------------------------------------------------------------- on a cluster

fn operator(name: &str, module: Value) -> String {
    json!({
        "apiVersion": OPS.0, "kind": OPS.1, "metadata": {"name": name},
        "spec": {
            "resource": {"apiVersion": PROBE.0, "kind": PROBE.1},
            "phases": [
                {"name": "Start", "initial": true, "module": module,
                 "outputs": [{"apiVersion": "v1", "kind": "ConfigMap"}], "next": ["Done"]},
                {"name": "Done", "final": true}
            ]
        }
    })
    .to_string()
}

/// A Probe whose Start worker (the scripted component) writes a ConfigMap and moves to Done.
async fn probe_reconciles(client: &Client, ns: &str, name: &str) -> anyhow::Result<()> {
    let out = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": format!("{name}-out")}, "data": {"from": "oci"}});
    let probe = json!({"apiVersion": PROBE.0, "kind": PROBE.1, "metadata": {"name": name},
        "spec": {"phases": {"Start": {"mode": "ok", "next": "Done", "outputs": [out]}}}});
    apply_yaml(client, &probe.to_string(), Some(ns)).await?;
    wait_for(&format!("Probe {name} Done"), T, || async {
        Ok(get(client, PROBE.0, PROBE.1, Some(ns), name)
            .await?
            .filter(|o| o["status"]["phase"] == "Done"))
    })
    .await?;
    must(
        get(client, "v1", "ConfigMap", Some(ns), &format!("{name}-out")).await?,
        "the Probe's output ConfigMap",
    )?;
    Ok(())
}

async fn ready_message(
    client: &Client,
    name: &str,
    status: &str,
    reason: &str,
) -> anyhow::Result<(String, Value)> {
    let o = wait_condition(client, OPS, None, name, ("Ready", status, reason), T).await?;
    let msg = must(
        condition(&o, "Ready").and_then(|c| c["message"].as_str()),
        "Ready message",
    )?
    .to_string();
    Ok((msg, o))
}

async fn patch_spec(client: &Client, name: &str, patch: Value) -> anyhow::Result<()> {
    dynamic_api(client, OPS.0, OPS.1, None)
        .await?
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": patch})),
        )
        .await?;
    Ok(())
}

fn start_phase(module: Value) -> Value {
    json!({"phases": [
        {"name": "Start", "initial": true, "module": module,
         "outputs": [{"apiVersion": "v1", "kind": "ConfigMap"}], "next": ["Done"]},
        {"name": "Done", "final": true}
    ]})
}

async fn cleanup(client: &Client) {
    for op in [PUBLIC_OP, PRIVATE_OP] {
        let _ = delete(client, OPS.0, OPS.1, None, op).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a cluster: deploy/local/test.sh starts one"]
async fn oci_modules_on_a_real_cluster() {
    let client = client().await;
    let root = common::repo_root();
    // Only the Probe CRD from the test manifest (its `scripted` operator belongs to e2e.rs).
    let manifest =
        std::fs::read_to_string(root.join("host/tests/manifests/scripted.yaml")).unwrap();
    for doc in wasmpilot::offline::parse_documents(&manifest).unwrap() {
        if doc["metadata"]["name"] == "probes.test.wasmpilot.io" {
            wasmpilot::deploy::apply_document(&client, doc, None)
                .await
                .expect("Probe CRD");
        }
    }
    cleanup(&client).await;

    let public = Registry::start(None);
    let private = Registry::start(Some((USER, PASSWORD)));
    let cache_dir = tempfile::tempdir().unwrap();
    let wasm_dir = common::wasm_dir();
    let args = [
        "--module-dir",
        wasm_dir.to_str().expect("utf-8 path"),
        "--cache-dir",
        cache_dir.path().to_str().expect("utf-8 path"),
        // The test registries listen on loopback, which operators may not reach otherwise.
        "--allow-fetch-from",
        "127.0.0.1",
    ];
    let mut host = Host::start(&args, "wasmpilot-e2e-modules");
    let ns = create_namespace(&client, "e2e-oci")
        .await
        .expect("namespace");

    let result = scenario(&client, &ns, &public, &private, &mut host, &args).await;
    let alive = host.is_alive();
    cleanup(&client).await;
    let _ = delete(&client, "v1", "Namespace", None, &ns).await;
    if let Err(e) = &result {
        eprintln!("---- host log ----\n{}", host.log_text());
        panic!("{e:#}");
    }
    assert!(alive, "the host process died");
}

async fn scenario(
    client: &Client,
    ns: &str,
    public: &Registry,
    private: &Registry,
    host: &mut Host,
    host_args: &[&str],
) -> anyhow::Result<()> {
    let tag = format!("{}/wasmpilot/scripted:v1", public.addr);
    // A private copy: guest builds running meanwhile must not change the bytes under the test.
    let dir = tempfile::tempdir()?;
    let file = dir.path().join(SCRIPTED);
    let bytes = common::component(SCRIPTED);
    std::fs::write(&file, &bytes)?;
    let expected = digest_of(&bytes);
    let pushed = push(&file, &format!("oci://{tag}"), None)?;
    ensure!(
        pushed.component == expected,
        "push printed component {} for a file hashing to {expected}",
        pushed.component
    );

    // 1. A tag, pinned by the component's sha256: Ready, active digest, reconciles.
    let module = json!({"oci": {"reference": tag, "sha256": pushed.component, "insecure": true}});
    apply_yaml(client, &operator(PUBLIC_OP, module), None).await?;
    let (_, o) = ready_message(client, PUBLIC_OP, "True", "ControllerRunning")
        .await
        .context("oci module by tag")?;
    ensure!(
        o["status"]["modules"]["Start"] == pushed.component.as_str(),
        "status.modules: {}",
        o["status"]["modules"]
    );
    probe_reconciles(client, ns, "p1").await.context("p1")?;

    // 2. A wrong pin is refused and named; the previous controller keeps running.
    let zeros = "0".repeat(64);
    patch_spec(
        client,
        PUBLIC_OP,
        start_phase(json!({"oci": {"reference": tag, "sha256": zeros, "insecure": true}})),
    )
    .await?;
    let (msg, o) = ready_message(client, PUBLIC_OP, "False", "ModuleDigestMismatch")
        .await
        .context("wrong pin")?;
    for w in [
        "sha256 mismatch",
        &zeros,
        &format!("OCI {tag}"),
        &pushed.component,
        "previous definition keeps running",
    ] {
        ensure!(
            msg.contains(w),
            "wrong-pin message {msg:?} should name {w:?}"
        );
    }
    ensure!(
        o["status"]["modules"]["Start"] == pushed.component.as_str(),
        "the active digest changed on a failed swap: {}",
        o["status"]["modules"]
    );
    probe_reconciles(client, ns, "p2")
        .await
        .context("the old controller still reconciles after a refused swap")?;

    // 3. By manifest digest, no pin: swaps to a new controller.
    let by_digest = format!("{}/wasmpilot/scripted@{}", public.addr, pushed.manifest);
    patch_spec(
        client,
        PUBLIC_OP,
        start_phase(json!({"oci": {"reference": by_digest, "insecure": true}})),
    )
    .await?;
    let (msg, _) = ready_message(client, PUBLIC_OP, "True", "ControllerRunning")
        .await
        .context("oci module by manifest digest")?;
    ensure!(
        msg.contains("swapped"),
        "Ready message after the swap: {msg:?}"
    );
    probe_reconciles(client, ns, "p3").await.context("p3")?;
    delete(client, OPS.0, OPS.1, None, PUBLIC_OP).await?;

    // 4. A private registry (htpasswd): anonymous pulls are refused, a pull Secret works.
    let private_tag = format!("{}/wasmpilot/scripted:v1", private.addr);
    ensure!(
        push(&file, &format!("oci://{private_tag}"), None).is_err(),
        "anonymous push to the private registry succeeded"
    );
    let pushed_private = push(
        &file,
        &format!("oci://{private_tag}"),
        Some((USER, PASSWORD)),
    )?;
    ensure!(pushed_private.component == expected);
    let anonymous = json!({"oci": {"reference": private_tag, "insecure": true}});
    apply_yaml(client, &operator(PRIVATE_OP, anonymous), None).await?;
    let (msg, _) = ready_message(client, PRIVATE_OP, "False", "ModuleFetchFailed")
        .await
        .context("anonymous pull from the private registry")?;
    ensure!(
        msg.contains(&format!("OCI {private_tag}")) && msg.to_lowercase().contains("authorized"),
        "anonymous pull message: {msg:?}"
    );
    let docker_config =
        json!({"auths": {private.addr.clone(): {"username": USER, "password": PASSWORD}}});
    // Outside the host's namespace, a Secret is used only once its owner offers it (labelled).
    let secret = |labels: Value| {
        json!({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/dockerconfigjson",
        "metadata": {"name": "registry-credentials", "labels": labels},
        "stringData": {".dockerconfigjson": docker_config.to_string()}})
        .to_string()
    };
    apply_yaml(client, &secret(json!({})), Some(ns)).await?;
    patch_spec(
        client,
        PRIVATE_OP,
        start_phase(
            json!({"oci": {"reference": private_tag, "sha256": expected, "insecure": true,
            "pullSecret": {"name": "registry-credentials", "namespace": ns}}}),
        ),
    )
    .await?;
    let (msg, _) = ready_message(client, PRIVATE_OP, "False", "ModulePullSecretFailed")
        .await
        .context("a pull Secret not offered to wasmpilot")?;
    ensure!(
        msg.contains("must be labelled wasmpilot.io/pull-secret=true"),
        "names the label: {msg}"
    );
    apply_yaml(
        client,
        &secret(json!({"wasmpilot.io/pull-secret": "true"})),
        Some(ns),
    )
    .await?;
    let (msg, _) = ready_message(client, PRIVATE_OP, "True", "ControllerRunning")
        .await
        .context("pull with a pull Secret")?;
    ensure!(!msg.contains(PASSWORD));
    probe_reconciles(client, ns, "p4").await.context("p4")?;
    let log = host.log_text();
    ensure!(
        !log.contains(PASSWORD),
        "the host logged the registry password"
    );

    // 5. A restarted host loads the compiled component from the disk cache.
    host.kill();
    *host = Host::start(host_args, "wasmpilot-e2e-modules-restart");
    wait_for(
        "the restarted host to load from the compile cache",
        T,
        || async {
            Ok(host
                .log_text()
                .contains("loaded compiled module from the compile cache")
                .then_some(()))
        },
    )
    .await?;
    probe_reconciles(client, ns, "p5")
        .await
        .context("p5 after a restart")?;
    Ok(())
}
