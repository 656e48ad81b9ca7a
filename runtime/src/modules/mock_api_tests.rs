//! ConfigMap modules against a scripted mock API server: a restarted host reads only the
//! metadata of a ConfigMap it verified before, and reads (and verifies) an edited one in full.

use super::*;
use crate::mock_api_server::{scripted, Exchange};
use http::{Method, StatusCode};
use serde_json::json;

const PATH: &str = "/api/v1/namespaces/wasmpilot-system/configmaps/probe-module";

fn reference(sha256: &str) -> ModuleRef {
    ModuleRef {
        config_map: Some(ConfigMapModule {
            name: "probe-module".into(),
            namespace: None,
            key: "probe.wasm".into(),
            sha256: sha256.into(),
            parts: None,
        }),
        ..Default::default()
    }
}

fn metadata_only(resource_version: &str) -> Exchange {
    Exchange::new(
        Method::GET,
        PATH,
        StatusCode::OK,
        json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata",
               "metadata": {"name": "probe-module", "namespace": "wasmpilot-system",
                            "uid": "uid-1", "resourceVersion": resource_version}}),
    )
    .checking(|parts, _| {
        let accept = parts
            .headers
            .get("accept")
            .map(|v| v.to_str().unwrap_or_default());
        assert!(
            accept.is_some_and(|a| a.contains("as=PartialObjectMetadata")),
            "metadata only: {accept:?}"
        );
    })
}

fn full(resource_version: &str, bytes: &[u8]) -> Exchange {
    use base64::Engine as _;
    Exchange::new(
        Method::GET,
        PATH,
        StatusCode::OK,
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "probe-module", "namespace": "wasmpilot-system",
                            "uid": "uid-1", "resourceVersion": resource_version},
               "binaryData": {"probe.wasm": base64::engine::general_purpose::STANDARD.encode(bytes)}}),
    )
    .checking(|parts, _| {
        let accept = parts.headers.get("accept").map(|v| v.to_str().unwrap_or_default());
        assert!(
            !accept.is_some_and(|a| a.contains("PartialObjectMetadata")),
            "the whole ConfigMap: {accept:?}"
        );
    })
}

/// A module cache on `client` whose compile cache (and version records) live in `dir`.
fn cache(client: kube::Client, dir: &std::path::Path) -> ModuleCache {
    let sandbox = Sandbox::new(Default::default()).expect("a sandbox");
    ModuleCache::new(sandbox, Some(client), None).with_compile_cache(Some(dir.to_path_buf()))
}

#[tokio::test]
async fn a_restarted_host_reads_only_the_metadata_of_an_unchanged_config_map_module() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let digest = digest_of(EMPTY_COMPONENT);

    // First start: nothing recorded yet, so the ConfigMap is read in full and verified.
    let (client, server) = scripted(vec![metadata_only("7"), full("7", EMPTY_COMPONENT)]);
    let first = cache(client, dir.path());
    let loaded = first
        .component("test", &reference(&digest))
        .await
        .expect("loaded");
    assert_eq!(loaded.digest, digest);
    assert_eq!(first.stats().compiled, 1);
    drop(first);
    server.await.expect("the scripted API server");

    // Restart, ConfigMap unchanged: its metadata only, the component from the compile cache.
    let (client, server) = scripted(vec![metadata_only("7")]);
    let restarted = cache(client, dir.path());
    let loaded = restarted
        .component("test", &reference(&digest))
        .await
        .expect("loaded");
    assert_eq!(loaded.digest, digest);
    assert_eq!(restarted.stats().loaded_from_disk, 1);
    assert_eq!(restarted.stats().compiled, 0);
    drop(restarted);
    server.await.expect("the scripted API server");
}

#[tokio::test]
async fn an_edited_config_map_is_read_again_and_a_tampered_one_refused() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let digest = digest_of(EMPTY_COMPONENT);
    let (client, server) = scripted(vec![metadata_only("7"), full("7", EMPTY_COMPONENT)]);
    let first = cache(client, dir.path());
    first
        .component("test", &reference(&digest))
        .await
        .expect("loaded");
    drop(first);
    server.await.expect("the scripted API server");

    // Edited since (resourceVersion 8) to other bytes, the pin unchanged: read in full, refused.
    let mut tampered = EMPTY_COMPONENT.to_vec();
    tampered.push(0);
    let (client, server) = scripted(vec![metadata_only("8"), full("8", &tampered)]);
    let restarted = cache(client, dir.path());
    let error = restarted
        .component("test", &reference(&digest))
        .await
        .map(|c| (c.source_name, c.digest))
        .expect_err("a digest mismatch");
    assert!(
        matches!(error, ModuleError::DigestMismatch { .. }),
        "{error}"
    );
    drop(restarted);
    server.await.expect("the scripted API server");

    // Unchanged ConfigMap, but the WasmOperator now pins another digest: read in full, refused.
    let other = digest_of(b"another component");
    let (client, server) = scripted(vec![metadata_only("7"), full("7", EMPTY_COMPONENT)]);
    let repinned = cache(client, dir.path());
    let error = repinned
        .component("test", &reference(&other))
        .await
        .map(|c| (c.source_name, c.digest))
        .expect_err("a digest mismatch");
    assert!(
        matches!(error, ModuleError::DigestMismatch { .. }),
        "{error}"
    );
    drop(repinned);
    server.await.expect("the scripted API server");
}
