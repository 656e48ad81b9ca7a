//! The AutoRoute operator with its workers in Rust, in Python and in JavaScript, each shipped
//! with `wasmpilot deploy` as a user does (the running host swaps it in), drives the sample to
//! Ready in a fresh namespace; the Python and JavaScript operators' outputs and status equal the
//! Rust operator's (issue 16 §4).

mod common;

use anyhow::{ensure, Context};
use common::cluster::*;
use kube::Client;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

const T: Duration = Duration::from_secs(120);
const OPERATOR: (&str, &str) = ("wasmpilot.io/v1alpha1", "WasmOperator");
const OUTPUTS: [(&str, &str); 3] = [
    ("v1", "Service"),
    ("networking.istio.io/v1alpha3", "VirtualService"),
    ("networking.istio.io/v1alpha3", "Gateway"),
];

#[tokio::test]
#[ignore = "needs a cluster: deploy/local/test.sh starts one"]
async fn python_and_javascript_operators_match_rust_on_a_real_cluster() {
    let client = client().await;
    let mut host = Host::start(&[], "wasmpilot-e2e-guest-languages");
    let mut results = BTreeMap::new();
    let mut failure = None;
    for (example, components) in [
        ("examples/autoroute", common::wasm_dir()),
        (
            "examples/autoroute-python",
            guest_components("autoroute-python"),
        ),
        ("examples/autoroute-js", guest_components("autoroute-js")),
    ] {
        match run_example(&client, example, &components).await {
            Ok(result) => {
                results.insert(example, result);
            }
            Err(e) => {
                failure = Some(format!("{example}: {e:#}"));
                break;
            }
        }
    }
    let alive = host.is_alive();
    let lifecycle = if failure.is_none() {
        modules_follow_their_operator(&client).await
    } else {
        Ok(())
    };
    // Later tests get the Rust example back.
    deploy_example("examples/autoroute");
    assert!(alive, "the host process died");
    if let Some(f) = failure {
        panic!("{f}");
    }
    if let Err(e) = lifecycle {
        panic!("{e:#}");
    }
    let rust = &results["examples/autoroute"];
    assert!(
        rust["outputs"].as_object().is_some_and(|o| o.len() == 5),
        "premise: the Rust operator routes the sample (a Gateway, two Services and VirtualServices): {rust:#}"
    );
    for example in ["examples/autoroute-python", "examples/autoroute-js"] {
        assert_eq!(
            &results[example], rust,
            "{example} differs from the Rust operator"
        );
    }
}

fn guest_components(example: &str) -> PathBuf {
    let wasm_dir = common::wasm_dir();
    wasm_dir
        .parent()
        .and_then(|p| p.parent())
        .expect("<target>/wasm32-wasip2/release")
        .join("guest-components")
        .join(example)
}

/// Deploys `example`, waits until the host runs its Syncing component, applies the sample in a
/// new namespace and returns the route's outputs and status once Ready.
async fn run_example(
    client: &Client,
    example: &str,
    components: &std::path::Path,
) -> anyhow::Result<Value> {
    deploy_example(example);
    let parts = stored_modules_are_referenced(client).await?;
    ensure!(
        (parts > 0) == (example != "examples/autoroute"),
        "premise: the Python and JavaScript components are split across ConfigMaps, the Rust ones are not ({example}: {parts} parts)"
    );
    let syncing = std::fs::read(components.join("autoroute_syncing.wasm"))
        .with_context(|| format!("{example}'s Syncing component in {}", components.display()))?;
    let digest = format!("sha256:{}", sha256_hex(&syncing));
    wait_for(
        &format!("the host to run {example}'s Syncing {digest}"),
        T,
        || async {
            let op = must(
                get(client, OPERATOR.0, OPERATOR.1, None, "autoroute").await?,
                "operator",
            )?;
            let running = op["status"]["modules"]["Syncing"] == digest.as_str()
                && op["status"]["observedGeneration"] == op["metadata"]["generation"];
            Ok(running.then_some(()))
        },
    )
    .await?;
    let ns = create_namespace(client, "languages").await?;
    let sample =
        std::fs::read_to_string(common::repo_root().join("examples/autoroute/sample.yaml"))?;
    for mut doc in wasmpilot::offline::parse_documents(&sample)? {
        if let Some(meta) = doc["metadata"].as_object_mut() {
            meta.remove("namespace");
        }
        apply_yaml(client, &doc.to_string(), Some(&ns)).await?;
    }
    // The route is applied before its Deployments: it may be Ready with some of them first.
    let route = wait_for(
        &format!("{example}: the sample AutoRoute Ready with both Deployments"),
        T,
        || async {
            let route = get(client, "examples.io/v1", "AutoRoute", Some(&ns), "example").await?;
            Ok(route.filter(|r| {
                r["status"]["phase"] == "Ready"
                    && r["status"]["syncedDeployments"]
                        == serde_json::json!(["backend", "frontend"])
            }))
        },
    )
    .await?;
    let mut outputs = serde_json::Map::new();
    for (api_version, kind) in OUTPUTS {
        let api = dynamic_api(client, api_version, kind, Some(&ns)).await?;
        for o in api.list(&Default::default()).await?.items {
            let o = serde_json::to_value(o)?;
            let name = o["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            let mut spec = o["spec"].clone();
            // The cluster assigns these to Services.
            if let Some(s) = spec.as_object_mut() {
                for assigned in [
                    "clusterIP",
                    "clusterIPs",
                    "internalTrafficPolicy",
                    "ipFamilies",
                    "ipFamilyPolicy",
                    "sessionAffinity",
                ] {
                    s.remove(assigned);
                }
            }
            let labels = o["metadata"]["labels"].clone();
            outputs.insert(
                format!("{kind}/{name}"),
                serde_json::json!({"spec": spec, "labels": labels}),
            );
        }
    }
    let mut status = route["status"].clone();
    if let Some(s) = status.as_object_mut() {
        // Which component decided, when and from what differ by construction.
        for by_construction in ["moduleDigest", "history", "conditions"] {
            s.remove(by_construction);
        }
    }
    let result = serde_json::json!({"outputs": outputs, "status": status});
    let _ = delete(client, "v1", "Namespace", None, &ns).await;
    ensure!(!outputs_is_empty(&result), "{example}: no outputs");
    Ok(result)
}

/// Deleting the WasmOperator deletes its module ConfigMaps (they are owned); deploying the Rust
/// example then stores and adopts them; deleting it and deploying again at once keeps them (the
/// garbage collector must not act on the deleted owner's references).
async fn modules_follow_their_operator(client: &Client) -> anyhow::Result<()> {
    let maps: kube::Api<k8s_openapi::api::core::v1::ConfigMap> =
        kube::Api::namespaced(client.clone(), "wasmpilot-system");
    let operator_maps = kube::api::ListParams::default().labels("wasmpilot.io/operator=autoroute");
    delete(client, OPERATOR.0, OPERATOR.1, None, "autoroute").await?;
    wait_for(
        "the garbage collector to delete the module ConfigMaps of the deleted WasmOperator",
        T,
        || async {
            Ok(maps
                .list(&operator_maps)
                .await?
                .items
                .is_empty()
                .then_some(()))
        },
    )
    .await?;
    deploy_example("examples/autoroute");
    let parts = stored_modules_are_referenced(client).await?;
    ensure!(
        parts == 0,
        "the Rust components are not split: {parts} parts"
    );
    delete(client, OPERATOR.0, OPERATOR.1, None, "autoroute").await?;
    deploy_example("examples/autoroute");
    // Time for the garbage collector to act on references to the deleted WasmOperator (it
    // deleted the ConfigMaps within this time above).
    tokio::time::sleep(Duration::from_secs(5)).await;
    stored_modules_are_referenced(client)
        .await
        .context("deleted and deployed again at once")?;
    // Moved to another namespace and back: each deploy leaves the modules in one namespace only.
    let elsewhere = create_namespace(client, "e2e-modules-elsewhere").await?;
    deploy_example_with("examples/autoroute", &["--module-namespace", &elsewhere]);
    let moved = stored_modules_are_referenced(client)
        .await
        .context("deployed with --module-namespace");
    deploy_example("examples/autoroute");
    let back = stored_modules_are_referenced(client)
        .await
        .context("deployed back to wasmpilot-system");
    let namespaces: kube::Api<k8s_openapi::api::core::v1::Namespace> =
        kube::Api::all(client.clone());
    let _ = namespaces
        .delete(&elsewhere, &kube::api::DeleteParams::default())
        .await;
    moved?;
    back?;
    Ok(())
}

/// That the module ConfigMaps of WasmOperator `autoroute` are exactly those it references, each
/// owned by it (`wasmpilot deploy` prunes what an earlier deploy stored); returns how many of them
/// are parts of a split component.
async fn stored_modules_are_referenced(client: &Client) -> anyhow::Result<usize> {
    let op = must(
        get(client, OPERATOR.0, OPERATOR.1, None, "autoroute").await?,
        "operator",
    )?;
    // (namespace, name) of each referenced ConfigMap.
    let mut referenced = std::collections::BTreeSet::new();
    let spec = &op["spec"];
    let modules = spec["phases"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|p| [&p["module"], &p["shadow"]])
        .chain([&spec["finalizer"]["module"]]);
    let mut split = 0;
    for m in modules {
        let Some(name) = m["configMap"]["name"].as_str() else {
            continue;
        };
        let namespace = m["configMap"]["namespace"]
            .as_str()
            .unwrap_or("wasmpilot-system")
            .to_string();
        match m["configMap"]["parts"].as_u64() {
            Some(n) => {
                split += n as usize;
                referenced.extend((0..n).map(|i| (namespace.clone(), format!("{name}-{i}"))));
            }
            None => {
                referenced.insert((namespace, name.to_string()));
            }
        }
    }
    // In every namespace: a deploy to another module namespace leaves none in the old one.
    let maps: kube::Api<k8s_openapi::api::core::v1::ConfigMap> = kube::Api::all(client.clone());
    let stored = maps
        .list(&kube::api::ListParams::default().labels("wasmpilot.io/operator=autoroute"))
        .await?
        .items;
    let names: std::collections::BTreeSet<(String, String)> = stored
        .iter()
        .filter_map(|c| Some((c.metadata.namespace.clone()?, c.metadata.name.clone()?)))
        .collect();
    ensure!(
        names == referenced,
        "module ConfigMaps stored {names:?}, referenced by the WasmOperator {referenced:?}"
    );
    let uid = op["metadata"]["uid"].as_str().unwrap_or_default();
    for c in &stored {
        let owned = c
            .metadata
            .owner_references
            .iter()
            .flatten()
            .any(|o| o.kind == "WasmOperator" && o.uid == uid);
        ensure!(
            owned,
            "ConfigMap {:?} is not owned by the WasmOperator",
            c.metadata.name
        );
    }
    Ok(split)
}

fn outputs_is_empty(result: &Value) -> bool {
    result["outputs"].as_object().is_none_or(|o| o.is_empty())
}

fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(bytes))
}
