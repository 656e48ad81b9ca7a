//! The kube-apiserver stopped and started under a running host: watches resume, nothing is lost.
//! It stops the API server, so it runs only on the project's local cluster, alone in its own test
//! binary: ignored by a plain `cargo test` (reported as ignored, not passed), run by
//! `deploy/local/test.sh` with `--ignored` when it started `deploy/local/cluster.sh` itself.

mod common;

use anyhow::{ensure, Context};
use common::autoroute::{create_route, deployment, wait_ready};
use common::cluster::*;
use kube::Client;
use std::process::Command;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "stops the kube-apiserver: needs the project's local cluster (deploy/local/test.sh runs it)"]
async fn apiserver_restart_under_a_running_host() {
    // Ignored tests run only when asked for; asked for on another cluster, this fails loudly
    // rather than pass without having stopped anything.
    assert_eq!(
        std::env::var("WASMPILOT_LOCAL_CLUSTER").as_deref(),
        Ok("1"),
        "this test stops and starts the API server of deploy/local/cluster.sh: run it through deploy/local/test.sh"
    );
    let client = client().await;
    deploy_example("examples/autoroute");
    let ns = create_namespace(&client, "e2e-restart")
        .await
        .expect("namespace");
    let result = scenario(&client, &ns).await;
    let client = self::client().await;
    let api: kube::Api<k8s_openapi::api::core::v1::Namespace> = kube::Api::all(client);
    let _ = api.delete(&ns, &Default::default()).await;
    if let Err(e) = result {
        panic!("{e:#}");
    }
}

async fn scenario(client: &Client, ns: &str) -> anyhow::Result<()> {
    let mut host = Host::start(&[], "wasmpilot-apiserver-restart");
    create_route(client, ns, "k0", 3).await?;
    wait_ready(client, ns, "k0", 3).await?;
    create_route(client, ns, "before-stop", 2).await?;
    let cluster = common::repo_root().join("deploy/local/cluster.sh");
    let ok = Command::new(&cluster)
        .arg("stop-apiserver")
        .status()?
        .success();
    ensure!(ok, "cluster.sh stop-apiserver failed");
    // Premise: the API server is really down.
    let down = client.apiserver_version().await;
    ensure!(
        down.is_err(),
        "the API server still answers after stop-apiserver"
    );
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
