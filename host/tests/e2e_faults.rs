//! Faults on a real cluster: two hosts with leader election (exactly one reconciles; the other
//! takes over when the leader is SIGKILLed), a host SIGKILLed mid-reconcile and restarted, and
//! the kube-apiserver stopped and started under a running host. Nothing may be lost or doubled.

mod common;

use anyhow::{ensure, Context};
use common::cluster::*;
use kube::Client;
use serde_json::{json, Value};
use std::process::Command;
use std::time::{Duration, Instant};

const T: Duration = Duration::from_secs(60);
const AR: (&str, &str) = ("examples.io/v1", "AutoRoute");
const LEASE: Duration = Duration::from_secs(4);

fn deployment(name: &str, group: &str, port: i32) -> String {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "labels": {"group": group}},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}},
                         "spec": {"containers": [{"name": "main", "image": "nginx", "ports": [{"containerPort": port}]}]}}
        }
    })
    .to_string()
}

fn route(name: &str, group: &str) -> String {
    json!({"apiVersion": "examples.io/v1", "kind": "AutoRoute", "metadata": {"name": name},
           "spec": {"deploymentSelector": {"matchLabels": {"group": group}}}})
    .to_string()
}

/// A route `name` selecting `n` fresh deployments `<name>-<i>`.
async fn create_route(client: &Client, ns: &str, name: &str, n: usize) -> anyhow::Result<()> {
    for i in 0..n {
        apply_yaml(
            client,
            &deployment(&format!("{name}-{i}"), name, 8000 + i as i32),
            Some(ns),
        )
        .await?;
    }
    apply_yaml(client, &route(name, name), Some(ns)).await
}

async fn wait_ready(client: &Client, ns: &str, name: &str, n: usize) -> anyhow::Result<Value> {
    let want: Vec<String> = (0..n).map(|i| format!("{name}-{i}")).collect();
    wait_for(
        &format!("AutoRoute {name} Ready with {n} deployments"),
        T,
        || async {
            let Some(o) = get(client, AR.0, AR.1, Some(ns), name).await? else {
                return Ok(None);
            };
            let ok = o["status"]["phase"] == "Ready"
                && str_list(&o["status"]["syncedDeployments"]) == want
                && o["status"]["observedGeneration"] == o["metadata"]["generation"];
            Ok(ok.then_some(o))
        },
    )
    .await
}

/// Exactly the outputs of `name`: one Service per deployment, owned by it, nothing extra.
async fn check_outputs(client: &Client, ns: &str, name: &str, n: usize) -> anyhow::Result<()> {
    let api = dynamic_api(client, "v1", "Service", Some(ns)).await?;
    let services = api
        .list(&kube::api::ListParams::default().labels("wasmpilot.io/operator=autoroute"))
        .await?;
    let mine: Vec<_> = services
        .items
        .iter()
        .filter(|s| {
            s.metadata
                .name
                .as_deref()
                .is_some_and(|n| n.starts_with(&format!("{name}-")))
        })
        .collect();
    ensure!(
        mine.len() == n,
        "{name}: {} Services, expected {n}",
        mine.len()
    );
    // One VirtualService per deployment (`<deployment>.<route>`) and one Gateway, each
    // controlled by the route.
    let uid =
        must(get(client, AR.0, AR.1, Some(ns), name).await?, name)?["metadata"]["uid"].clone();
    let controlled_by_route = |o: &kube::api::DynamicObject| {
        o.metadata
            .owner_references
            .iter()
            .flatten()
            .any(|r| r.controller == Some(true) && json!(r.uid) == uid)
    };
    let vs_api = dynamic_api(
        client,
        "networking.istio.io/v1alpha3",
        "VirtualService",
        Some(ns),
    )
    .await?;
    let vs = vs_api
        .list(&kube::api::ListParams::default().labels("wasmpilot.io/operator=autoroute"))
        .await?;
    let vs: Vec<_> = vs
        .items
        .iter()
        .filter(|o| {
            o.metadata
                .name
                .as_deref()
                .is_some_and(|n| n.ends_with(&format!(".{name}")))
        })
        .collect();
    ensure!(
        vs.len() == n && vs.iter().all(|o| controlled_by_route(o)),
        "{name}: {} VirtualServices (expected {n}, each controlled by the route)",
        vs.len()
    );
    let gw_api = dynamic_api(client, "networking.istio.io/v1alpha3", "Gateway", Some(ns)).await?;
    let gw = gw_api.get(name).await?;
    ensure!(
        controlled_by_route(&gw),
        "{name}: the Gateway is controlled by the route"
    );
    ensure!(
        mine.iter().all(|o| controlled_by_route(o)),
        "{name}: every Service is controlled by the route"
    );
    Ok(())
}

async fn lease_holder(client: &Client, id: &str) -> anyhow::Result<Option<String>> {
    let api: kube::Api<k8s_openapi::api::coordination::v1::Lease> =
        kube::Api::namespaced(client.clone(), "default");
    Ok(api
        .get_opt(id)
        .await?
        .and_then(|l| l.spec)
        .and_then(|s| s.holder_identity))
}

fn host_args<'a>(lease_id: &'a str, identity: &'a str) -> Vec<&'a str> {
    vec![
        "--leader-elect",
        "--leader-election-namespace",
        "default",
        "--leader-election-id",
        lease_id,
        "--identity",
        identity,
        "--lease-duration",
        "4s",
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn faults_on_a_real_cluster() {
    let client = client().await;
    let root = common::repo_root();
    let status = Command::new(env!("CARGO_BIN_EXE_wasmpilot"))
        .args(["deploy", "--no-build", "examples/autoroute"])
        .current_dir(&root)
        .status()
        .expect("running wasmpilot deploy");
    assert!(
        status.success(),
        "wasmpilot deploy examples/autoroute failed"
    );
    let ns = create_namespace(&client, "e2e-faults")
        .await
        .expect("namespace");
    let result = scenarios(&client, &ns).await;
    let api: kube::Api<k8s_openapi::api::core::v1::Namespace> = kube::Api::all(client.clone());
    let _ = api.delete(&ns, &Default::default()).await;
    if let Err(e) = result {
        panic!("{e:#}");
    }
}

async fn scenarios(client: &Client, ns: &str) -> anyhow::Result<()> {
    // 1. Two hosts, one Lease: exactly one reconciles.
    let lease_id = format!("e2e-faults-{}", std::process::id());
    let mut a = Host::start(&host_args(&lease_id, "host-a"), "wasmpilot-faults-a");
    let mut b = Host::start(&host_args(&lease_id, "host-b"), "wasmpilot-faults-b");
    let leader = wait_for("a leader", T, || async {
        lease_holder(client, &lease_id).await
    })
    .await?;
    create_route(client, ns, "le1", 2).await?;
    wait_ready(client, ns, "le1", 2)
        .await
        .context("reconciled under leader election")?;
    let (leader_host, standby_host) = if leader == "host-a" {
        (&mut a, &mut b)
    } else {
        (&mut b, &mut a)
    };
    let marker = format!("resource={ns}/le1");
    ensure!(
        leader_host.log_text().contains(&marker),
        "the leader reconciled le1"
    );
    ensure!(
        !standby_host.log_text().contains(&marker),
        "the standby must not reconcile"
    );

    // 2. The leader is SIGKILLed (no release): the standby takes over within the lease duration.
    leader_host.kill();
    let killed = Instant::now();
    let standby = if leader == "host-a" {
        "host-b"
    } else {
        "host-a"
    };
    wait_for("the standby to take the Lease", T, || async {
        Ok(lease_holder(client, &lease_id)
            .await?
            .filter(|h| h == standby)
            .map(|_| ()))
    })
    .await?;
    let takeover = killed.elapsed();
    eprintln!("takeover after {takeover:?} (lease duration {LEASE:?})");
    ensure!(
        takeover <= LEASE + Duration::from_secs(4),
        "takeover took {takeover:?}"
    );
    create_route(client, ns, "le2", 1).await?;
    wait_ready(client, ns, "le2", 1)
        .await
        .context("the new leader reconciles")?;
    drop(a);
    drop(b);

    // 3. SIGKILL mid-reconcile, restart: converges, no duplicated outputs, consistent status.
    let mut host = Host::start(&[], "wasmpilot-faults-kill");
    for i in 0..10 {
        create_route(client, ns, &format!("k{i}"), 3).await?;
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    host.kill();
    let mut host = Host::start(&[], "wasmpilot-faults-restarted");
    for i in 0..10 {
        let name = format!("k{i}");
        wait_ready(client, ns, &name, 3).await?;
        check_outputs(client, ns, &name, 3).await?;
    }

    // 4. The apiserver stops and starts under the running host: watches resume, nothing lost.
    if std::env::var("WASMPILOT_LOCAL_CLUSTER").as_deref() != Ok("1") {
        eprintln!("apiserver restart skipped: not the project's local cluster (WASMPILOT_LOCAL_CLUSTER != 1)");
        return Ok(());
    }
    create_route(client, ns, "before-stop", 2).await?;
    let cluster = common::repo_root().join("deploy/local/cluster.sh");
    let ok = Command::new(&cluster)
        .arg("stop-apiserver")
        .status()?
        .success();
    ensure!(ok, "cluster.sh stop-apiserver failed");
    tokio::time::sleep(Duration::from_secs(3)).await;
    let ok = Command::new(&cluster)
        .arg("start-apiserver")
        .status()?
        .success();
    ensure!(ok, "cluster.sh start-apiserver failed");
    let client = self::client().await;
    wait_ready(&client, ns, "before-stop", 2)
        .await
        .context("a route created just before the stop")?;
    // New events after the restart reach the host: a new deployment for k0, a new route.
    apply_yaml(&client, &deployment("k0-3", "k0", 8003), Some(ns)).await?;
    wait_ready(&client, ns, "k0", 4)
        .await
        .context("an input change after the restart")?;
    create_route(&client, ns, "after-start", 1).await?;
    wait_ready(&client, ns, "after-start", 1)
        .await
        .context("a route created after the restart")?;
    ensure!(host.is_alive(), "the host survived the apiserver restart");
    Ok(())
}
