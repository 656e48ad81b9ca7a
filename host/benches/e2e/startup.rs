//! Cold start to first reconcile (issue 7, part 2): a controller process is started while one
//! AutoRoute and its two Deployments already wait; the clock runs from spawn to that route
//! `Ready`. wasmpilot loads its modules from a warm compile cache; the baseline is the native
//! kube-rs controller, started the same way, in the same run.

use crate::{
    cluster_api, create_all, create_namespaces, delete_namespaces, deployment, gvk_resource,
    settle_deployments, HostVariant, Killed, AUTOROUTE, WASM_OPERATOR,
};
use kube::api::{DeleteParams, DynamicObject};
use kube::{Api, Client, ResourceExt};
use serde_json::json;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Measured starts per controller (after one unmeasured start that warms the compile cache),
/// unless `WASMPILOT_BENCH_STARTUP_ROUNDS` says otherwise.
const ROUNDS: usize = 5;

pub async fn run(client: &Client, hosts: &[HostVariant]) -> anyhow::Result<()> {
    let rounds: usize = match std::env::var("WASMPILOT_BENCH_STARTUP_ROUNDS") {
        Ok(n) => n.parse()?,
        Err(_) => ROUNDS,
    };
    println!(
        "\nCold start: process spawn to one waiting AutoRoute Ready (compile cache warm), \
         median of {rounds} starts each, interleaved\n"
    );
    // Exactly the autoroute operator: another one left on the cluster (a test's, say) would be
    // loaded too, and change what a start does from one run to the next.
    let operators = cluster_api(client, WASM_OPERATOR);
    for op in operators.list(&Default::default()).await?.items {
        let name = op.name_any();
        if name != "autoroute" {
            println!(
                "(deleting WasmOperator {name}: every start loads the autoroute operator alone)"
            );
            operators.delete(&name, &DeleteParams::default()).await?;
        }
    }
    // The native controller twice: on kube's default client, as a hand-written controller is,
    // and with TCP_NODELAY, as wasmpilot's client (what that setting alone is worth).
    let native = |nodelay: bool| {
        let mut c = Command::new(std::env::current_exe().expect("the bench binary"));
        c.arg("--native-controller");
        if nodelay {
            c.arg("--nodelay");
        }
        c
    };
    let mut labels = vec![
        "native kube-rs".to_string(),
        "native kube-rs, TCP_NODELAY".to_string(),
    ];
    labels.extend(hosts.iter().map(|h| h.label.clone()));
    let mut times: Vec<Vec<f64>> = vec![Vec::new(); labels.len()];
    for round in 0..=rounds {
        for (i, times) in times.iter_mut().enumerate() {
            let mut command = match i {
                0 | 1 => native(i == 1),
                _ => hosts[i - 2].run_command(),
            };
            let seconds = start_once(client, &mut command, round, i).await?;
            if round > 0 {
                times.push(seconds);
            }
        }
    }
    let medians: Vec<f64> = times.iter_mut().map(|t| median(t)).collect();
    println!(
        "{:<30} {:>10} {:>8} {:>22}",
        "controller", "median s", "ratio", "range s"
    );
    for ((label, t), m) in labels.iter().zip(&times).zip(&medians) {
        println!(
            "{label:<30} {m:>10.3} {:>7.2}× {:>10.3} – {:<10.3}",
            m / medians[0],
            t.first().copied().unwrap_or(0.0),
            t.last().copied().unwrap_or(0.0),
        );
    }
    Ok(())
}

/// One start: a fresh namespace with a route waiting, the controller spawned, the time until
/// the route is Ready with both Deployments synced.
async fn start_once(
    client: &Client,
    command: &mut Command,
    round: usize,
    which: usize,
) -> anyhow::Result<f64> {
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_millis();
    let ns = format!("bench-start-{round}-{which}-{stamp}");
    create_namespaces(client, std::slice::from_ref(&ns)).await?;
    let deployments = (0..2).map(|j| {
        (
            ns.clone(),
            deployment(&format!("first-d{j}"), "first", 8000 + j),
        )
    });
    create_all(client, ("apps", "v1", "Deployment"), deployments, 2).await?;
    settle_deployments(client, std::slice::from_ref(&ns)).await?;
    let route = json!({"apiVersion": "examples.io/v1", "kind": "AutoRoute", "metadata": {"name": "first"},
                       "spec": {"deploymentSelector": {"matchLabels": {"route": "first"}}}});
    create_all(client, AUTOROUTE, std::iter::once((ns.clone(), route)), 1).await?;
    let api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), &ns, &gvk_resource(AUTOROUTE));

    let start = Instant::now();
    let child = Killed(
        command
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .env("WASMPILOT_LOG", "warn")
            .spawn()?,
    );
    loop {
        let o = api.get("first").await?;
        if o.data["status"]["phase"] == "Ready"
            && o.data["status"]["syncedDeployments"]
                .as_array()
                .is_some_and(|a| a.len() == 2)
        {
            break;
        }
        if start.elapsed() > Duration::from_secs(120) {
            anyhow::bail!("the first AutoRoute was not Ready 120 s after the controller started");
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let seconds = start.elapsed().as_secs_f64();
    drop(child);
    delete_namespaces(client, std::slice::from_ref(&ns)).await?;
    Ok(seconds)
}

fn median(t: &mut [f64]) -> f64 {
    t.sort_by(f64::total_cmp);
    t.get(t.len() / 2).copied().unwrap_or(0.0)
}
