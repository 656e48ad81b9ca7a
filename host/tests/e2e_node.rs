//! The local cluster's node runs real pods: MyOwnShell's Deployment gets `spec.size` busybox
//! pods Running (the image built on this machine from Debian's busybox-static), resized when the
//! spec changes; and a pod reaches the API server through the `kubernetes` Service, as the
//! in-cluster host does. Needs a cluster with a node (deploy/local/cluster.sh starts one unless
//! WASMPILOT_NODE=0; on a cluster without nodes this test fails, saying so).

mod common;

use anyhow::{ensure, Context};
use common::cluster::*;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{ListParams, Patch, PatchParams};
use kube::{Api, Client};
use serde_json::json;
use std::time::Duration;

const T: Duration = Duration::from_secs(120);
const MOS: (&str, &str) = ("shell.examples.io/v1", "MyOwnShell");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a cluster: deploy/local/test.sh starts one"]
async fn pods_run_on_the_node() {
    let client = client().await;
    let nodes: Api<Node> = Api::all(client.clone());
    let ready = nodes
        .list(&ListParams::default())
        .await
        .expect("listing nodes")
        .items
        .into_iter()
        .filter(|n| {
            n.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
        })
        .count();
    assert!(
        ready > 0,
        "no Ready node: start the local cluster with its node (deploy/local/cluster.sh up, without WASMPILOT_NODE=0)"
    );
    deploy_example("examples/myownshell");
    let mut host = Host::start(&[], "wasmpilot-e2e-node");
    let ns = create_namespace(&client, "e2e-node")
        .await
        .expect("namespace");
    let result = async {
        api_server_from_a_pod(&client, &ns)
            .await
            .context("a pod reaching the API server")?;
        myownshell_pods(&client, &ns)
            .await
            .context("MyOwnShell's pods")
    }
    .await;
    let alive = host.is_alive();
    if let Ok(api) = dynamic_api(&client, MOS.0, MOS.1, Some(&ns)).await {
        let _ = api
            .patch(
                "shell",
                &PatchParams::default(),
                &Patch::Merge(&json!({"metadata": {"finalizers": null}})),
            )
            .await;
    }
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    let _ = namespaces.delete(&ns, &Default::default()).await;
    assert!(alive, "the host process died");
    if let Err(e) = result {
        match node_pressure(&client).await {
            Some(pressure) => panic!("{e:#}\n{pressure}"),
            None => panic!("{e:#}"),
        }
    }
}

/// The pods of `app` in `ns` that are Running, by name.
async fn running(client: &Client, ns: &str, app: &str) -> anyhow::Result<Vec<String>> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let list = pods
        .list(&ListParams::default().labels(&format!("app={app}")))
        .await?;
    Ok(list
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
        .filter_map(|p| p.metadata.name)
        .collect())
}

async fn wait_running(client: &Client, ns: &str, app: &str, n: usize) -> anyhow::Result<()> {
    wait_for(&format!("exactly {n} {app} pods Running"), T, || async {
        let pods = running(client, ns, app).await?;
        let pods_api: Api<Pod> = Api::namespaced(client.clone(), ns);
        let all = pods_api
            .list(&ListParams::default().labels(&format!("app={app}")))
            .await?
            .items
            .len();
        Ok((pods.len() == n && all == n).then_some(()))
    })
    .await
}

async fn myownshell_pods(client: &Client, ns: &str) -> anyhow::Result<()> {
    let shell = json!({"apiVersion": MOS.0, "kind": MOS.1, "metadata": {"name": "shell"}, "spec": {"size": 2}});
    apply_yaml(client, &shell.to_string(), Some(ns)).await?;
    wait_running(client, ns, "shell", 2).await?;
    let api = dynamic_api(client, MOS.0, MOS.1, Some(ns)).await?;
    for size in [3, 1] {
        api.patch(
            "shell",
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"size": size}})),
        )
        .await?;
        wait_running(client, ns, "shell", size).await?;
    }
    // The pods run the image built here: the busybox shell answers.
    let pod = running(client, ns, "shell")
        .await?
        .into_iter()
        .next()
        .context("a shell pod")?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let spec = pods.get(&pod).await?.spec.context("pod spec")?;
    ensure!(
        spec.containers[0].image.as_deref() == Some("busybox:1.36"),
        "{:?}",
        spec.containers[0].image
    );
    Ok(())
}

/// A busybox pod fetches the API server's /version through the `kubernetes` Service's cluster
/// IP (kube-proxy's rules, the API server's advertised address): what an in-cluster client does.
async fn api_server_from_a_pod(client: &Client, ns: &str) -> anyhow::Result<()> {
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "reach-api", "labels": {"app": "reach-api"}},
        "spec": {
            "restartPolicy": "Never",
            "containers": [{
                "name": "probe", "image": "busybox:1.36",
                "command": ["sh", "-c",
                    "wget -q -O - --no-check-certificate https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT/version; echo; echo exit=$?"]
            }]
        }
    });
    // A new namespace's pods wait for its default ServiceAccount's token.
    wait_for_token(client, ns, "default").await?;
    apply_yaml(client, &pod.to_string(), Some(ns)).await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    wait_for("the probe pod to finish", T, || async {
        let p = pods.get("reach-api").await?;
        let phase = p.status.and_then(|s| s.phase).unwrap_or_default();
        Ok((phase == "Succeeded" || phase == "Failed").then_some(()))
    })
    .await?;
    let logs = pods.logs("reach-api", &Default::default()).await?;
    // /version is readable without credentials only with anonymous auth; an answer of any
    // kind (JSON from the API server, even 401/403) proves the Service routes to it.
    ensure!(
        logs.contains("gitVersion")
            || logs.contains("401")
            || logs.contains("403")
            || logs.contains("Unauthorized"),
        "the pod did not reach the API server through the kubernetes Service: {logs}"
    );
    Ok(())
}
