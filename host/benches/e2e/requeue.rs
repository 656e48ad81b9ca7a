//! Targeted requeue (issue 14 §2): N AutoRoutes in one namespace, each selecting its own
//! Deployment by `spec.deploymentSelector`; then one Deployment's labels change. Counts the
//! reconciles that change triggers (the host's `wasmpilot_reconciles_total`) and the time until
//! the host is quiet again, with the host's selector-targeted requeue ("after") against the
//! same host with `--requeue-whole-namespace` (the rule before: every route of the namespace).

use crate::{
    create_all, create_namespaces, delete_namespaces, gvk_resource, settle_deployments,
    HostVariant, Killed, AUTOROUTE,
};
use anyhow::{bail, Context};
use kube::api::{DynamicObject, ListParams, Patch, PatchParams};
use kube::{Api, Client};
use serde_json::json;
use std::process::Stdio;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// No reconcile for this long: the host has settled.
const QUIET: Duration = Duration::from_secs(3);

/// One label change and what it caused.
struct Change {
    /// Reconciles counted from the change until the host was quiet.
    reconciles: f64,
    /// From the change to the last reconcile it caused (0 when it caused none).
    settle: Duration,
}

pub async fn run(client: &Client, hosts: &[HostVariant], routes: usize) -> anyhow::Result<()> {
    println!(
        "\nTargeted requeue: {routes} AutoRoutes in one namespace (one Deployment each), one \
         Deployment's labels change; reconciles triggered and time until the host is quiet\n"
    );
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_millis()
        % 100_000;
    let ns = format!("bench-requeue-{stamp}");
    create_namespaces(client, std::slice::from_ref(&ns)).await?;
    let deployments = (0..routes)
        .map(|i| (format!("r{i}-d0"), format!("r{i}")))
        .chain(std::iter::once(("bystander".into(), "nobody".into())))
        .map(|(name, route)| (ns.clone(), crate::deployment(&name, &route, 8000)))
        .collect::<Vec<_>>();
    create_all(
        client,
        ("apps", "v1", "Deployment"),
        deployments.into_iter(),
        16,
    )
    .await?;
    let autoroutes = (0..routes).map(|i| {
        let obj = json!({"apiVersion": "examples.io/v1", "kind": "AutoRoute", "metadata": {"name": format!("r{i}")},
                         "spec": {"deploymentSelector": {"matchLabels": {"route": format!("r{i}")}}}});
        (ns.clone(), obj)
    });
    create_all(client, AUTOROUTE, autoroutes, 16).await?;
    settle_deployments(client, std::slice::from_ref(&ns)).await?;

    // The rule before first, then this tree's hosts as configured.
    let mut variants: Vec<(String, std::process::Command)> = Vec::new();
    let mut before = hosts[0].run_command();
    before.arg("--requeue-whole-namespace");
    variants.push((format!("{} (whole namespace)", hosts[0].label), before));
    for host in hosts {
        variants.push((format!("{} (selected)", host.label), host.run_command()));
    }
    println!(
        "{:<36} {:>10} {:>16} {:>10} {:>16} {:>10}",
        "host", "start s", "unselected: rec.", "settle s", "moved: rec.", "settle s"
    );
    let mut result = Ok(());
    for (v, (label, mut command)) in variants.into_iter().enumerate() {
        match measure(client, &ns, routes, v, &mut command).await {
            Ok((start, unselected, moved)) => println!(
                "{label:<36} {start:>10.2} {:>16.0} {:>10.2} {:>16.0} {:>10.2}",
                unselected.reconciles,
                unselected.settle.as_secs_f64(),
                moved.reconciles,
                moved.settle.as_secs_f64()
            ),
            Err(e) => {
                result = Err(e.context(label));
                break;
            }
        }
    }
    delete_namespaces(client, std::slice::from_ref(&ns)).await?;
    result
}

/// One host: started (all routes Ready, the host quiet), then a label change on a Deployment
/// no route selects, then one that moves a Deployment from one route to another (variant `v`
/// moves its own, so each host sees a change it has not seen).
async fn measure(
    client: &Client,
    ns: &str,
    routes: usize,
    v: usize,
    command: &mut std::process::Command,
) -> anyhow::Result<(f64, Change, Change)> {
    let port = 19190 + v as u16;
    let started = Instant::now();
    let child = Killed(
        command
            .args(["--metrics-addr", &format!("127.0.0.1:{port}")])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .env("WASMPILOT_LOG", "warn")
            .spawn()?,
    );
    let api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), ns, &gvk_resource(AUTOROUTE));
    let deployments: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        ns,
        &gvk_resource(("apps", "v1", "Deployment")),
    );
    // Every route Ready on this host's watch, then quiet.
    loop {
        let list = api.list(&ListParams::default()).await?;
        let ready = list
            .items
            .iter()
            .filter(|o| o.data["status"]["phase"] == "Ready")
            .count();
        if ready == routes && reconciles(port).await.is_ok() {
            break;
        }
        if started.elapsed() > Duration::from_secs(900) {
            bail!("only {ready}/{routes} AutoRoutes Ready after 15 min");
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let start_seconds = started.elapsed().as_secs_f64();
    wait_quiet(port).await?;

    // A Deployment no route selects gets a new label.
    let unselected = change(port, || async {
        deployments
            .patch(
                "bystander",
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"labels": {"touched": format!("v{v}")}}})),
            )
            .await?;
        anyhow::Ok(())
    })
    .await?;

    // A Deployment moves from route `from` to route `to`: both must record it.
    let (from, to) = (10 + v, routes / 2 + v);
    let moving = format!("r{from}-d0");
    let moved = change(port, || async {
        deployments
            .patch(
                &moving,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"labels": {"route": format!("r{to}")}}})),
            )
            .await?;
        anyhow::Ok(())
    })
    .await?;
    let synced = |o: &DynamicObject| -> Vec<String> {
        o.data["status"]["syncedDeployments"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|d| d.as_str().map(str::to_string))
            .collect()
    };
    let (a, b) = (
        api.get(&format!("r{from}")).await?,
        api.get(&format!("r{to}")).await?,
    );
    if synced(&a).contains(&moving) || !synced(&b).contains(&moving) {
        bail!(
            "after moving {moving}: r{from} records {:?}, r{to} records {:?}",
            synced(&a),
            synced(&b)
        );
    }
    drop(child);
    Ok((start_seconds, unselected, moved))
}

/// Makes a change and counts the reconciles until the host has been quiet for [`QUIET`].
async fn change<F, Fut>(port: u16, make: F) -> anyhow::Result<Change>
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<()>>,
{
    let before = reconciles(port).await?;
    let start = Instant::now();
    make().await?;
    let (after, last) = wait_quiet(port).await?;
    Ok(Change {
        reconciles: after - before,
        settle: last.map_or(Duration::ZERO, |t| t.saturating_duration_since(start)),
    })
}

/// Polls the host's reconcile count until it has not moved for [`QUIET`]: the count, and when
/// it last moved (if it did).
async fn wait_quiet(port: u16) -> anyhow::Result<(f64, Option<Instant>)> {
    let mut count = reconciles(port).await?;
    let mut last_move = None;
    let mut still_since = Instant::now();
    let waiting = Instant::now();
    while still_since.elapsed() < QUIET {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let now = reconciles(port).await?;
        if now != count {
            count = now;
            last_move = Some(Instant::now());
            still_since = Instant::now();
        }
        if waiting.elapsed() > Duration::from_secs(600) {
            bail!("the host kept reconciling for 10 min");
        }
    }
    Ok((count, last_move))
}

/// The sum of `wasmpilot_reconciles_total` on the host's metrics endpoint.
async fn reconciles(port: u16) -> anyhow::Result<f64> {
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .with_context(|| format!("the host's metrics on port {port}"))?;
    stream
        .write_all(b"GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n")
        .await?;
    let mut text = String::new();
    stream.read_to_string(&mut text).await?;
    Ok(text
        .lines()
        .filter(|l| l.starts_with("wasmpilot_reconciles_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum())
}
