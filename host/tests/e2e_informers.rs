//! Shared informers on a real kube-apiserver (KUBECONFIG): operators reading the same kind share
//! one watch and cache, which stops with its last user; cached objects lose their bookkeeping;
//! a subscriber that falls behind is handed the whole cache instead of missing a change.

mod common;

use common::cluster::*;
use futures::StreamExt;
use kube::api::{DynamicObject, PostParams};
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;
use wasmpilot::controller::informers::{Informers, EVENT_BUFFER};
use wasmpilot::crd::KindRef;
use wasmpilot::pipeline::inputs::WorkerObject;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a cluster: deploy/local/test.sh starts one"]
async fn informers_are_shared_and_subscribers_never_miss_a_change() {
    let client = client().await;
    let ns = create_namespace(&client, "e2e-informers")
        .await
        .expect("namespace");
    let result = scenario(&client, &ns).await;
    let _ = delete(&client, "v1", "Namespace", None, &ns).await;
    if let Err(e) = result {
        panic!("{e:#}");
    }
}

async fn scenario(client: &kube::Client, ns: &str) -> anyhow::Result<()> {
    let kind = wasmpilot::kinds::resolve(client, &KindRef::new("v1", "ConfigMap"), "test").await?;
    let informers = Informers::new(client.clone());

    let first = informers.objects(&kind, None, false);
    let second = informers.objects(&kind, None, false);
    assert!(Arc::ptr_eq(&first, &second), "one informer per kind");
    let metadata = informers.metadata(&kind);
    assert_eq!(informers.watched(), (1, 1));
    assert!(tokio::time::timeout(Duration::from_secs(30), first.wait_until_ready()).await?);

    // A subscriber that is not polled while more than EVENT_BUFFER changes happen.
    let lagging = first.subscribe().map(|c| c.object);
    let in_ns = {
        let ns = ns.to_string();
        // (The namespace also gets a kube-root-ca.crt ConfigMap from the controller manager.)
        move |o: &Arc<WorkerObject>| {
            let m = o.metadata();
            m.namespace.as_deref() == Some(ns.as_str())
                && m.name.as_deref().is_some_and(|n| n.starts_with("cm-"))
        }
    };
    let count = EVENT_BUFFER + 20;
    // The live subscriber is polled all along and sees every change, in order.
    let live = tokio::spawn({
        let in_ns = in_ns.clone();
        second
            .subscribe()
            .map(|c| c.object)
            .filter(move |o| futures::future::ready(in_ns(o)))
            .take(count)
            .collect::<Vec<_>>()
    });
    let api = kube::Api::<DynamicObject>::namespaced_with(client.clone(), ns, &kind.api);
    for i in 0..count {
        let cm: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": format!("cm-{i}"),
                         "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}", "keep": "me"}},
            "data": {"i": i.to_string()}
        }))?;
        api.create(&PostParams::default(), &cm).await?;
    }
    let seen: Vec<Arc<WorkerObject>> =
        tokio::time::timeout(Duration::from_secs(60), live).await??;
    assert_eq!(seen.len(), count);
    assert_eq!(
        seen[count - 1].metadata().name.as_deref(),
        Some(format!("cm-{}", count - 1).as_str())
    );

    // The lagging one gets the whole cache, which holds every object (once, stripped).
    let caught_up: Vec<Arc<WorkerObject>> = tokio::time::timeout(
        Duration::from_secs(30),
        lagging
            .filter(|o| futures::future::ready(in_ns(o)))
            .take(count)
            .collect(),
    )
    .await?;
    let mut names: Vec<&str> = caught_up
        .iter()
        .filter_map(|o| o.metadata().name.as_deref())
        .collect();
    names.sort_unstable();
    names.dedup();
    assert_eq!(
        names.len(),
        count,
        "after lagging, every object is delivered"
    );
    let cached = first.cache.all();
    let sample = cached
        .iter()
        .find(|o| in_ns(o) && o.metadata().name.as_deref() == Some("cm-0"))
        .ok_or_else(|| anyhow::anyhow!("cm-0 not cached"))?;
    // The cache keeps the JSON workers see, serialized once, and a few metadata fields.
    let json: serde_json::Value = serde_json::from_str(&sample.json)?;
    assert_eq!(json["kind"], "ConfigMap");
    assert_eq!(json["data"]["i"], "0");
    assert!(
        json["metadata"].get("managedFields").is_none(),
        "managedFields stripped: {json}"
    );
    assert_eq!(
        json["metadata"]["annotations"],
        json!({"keep": "me"}),
        "kubectl's last-applied annotation stripped, other annotations kept"
    );
    assert!(sample.metadata().annotations.is_none() && sample.metadata().managed_fields.is_none());
    let meta = metadata.cache.all();
    let meta_sample = meta
        .iter()
        .find(|o| o.metadata.namespace.as_deref() == Some(ns))
        .ok_or_else(|| anyhow::anyhow!("no metadata cached"))?;
    assert!(
        meta_sample.metadata.annotations.is_none() && meta_sample.metadata.managed_fields.is_none()
    );

    // The watch stops with its last user; a new user starts a new one.
    drop((first, second));
    assert_eq!(informers.watched(), (0, 1));
    drop(metadata);
    assert_eq!(informers.watched(), (0, 0));
    let again = informers.objects(&kind, None, false);
    // Several tasks waiting for the same first list all get it (kube-runtime's own
    // Store::wait_until_ready wakes only the last waiter).
    let waiters: Vec<_> = (0..3)
        .map(|_| {
            let informer = again.clone();
            tokio::spawn(async move { informer.wait_until_ready().await })
        })
        .collect();
    for waiter in waiters {
        assert!(
            tokio::time::timeout(Duration::from_secs(30), waiter).await??,
            "every waiter sees the first list"
        );
    }
    let relisted = again.cache.all().iter().filter(|o| in_ns(o)).count();
    assert_eq!(relisted, count, "a new informer lists the objects again");
    Ok(())
}

/// An input declaring `fields`: its informer is its own (another projection of the kind keeps
/// whole objects), caches only those fields, and passes on only the changes a worker could see.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a cluster: deploy/local/test.sh starts one"]
async fn projected_informers_keep_only_the_fields_and_pass_on_only_visible_changes() {
    let client = client().await;
    let ns = create_namespace(&client, "e2e-projected")
        .await
        .expect("namespace");
    let result = projected_scenario(&client, &ns).await;
    let _ = delete(&client, "v1", "Namespace", None, &ns).await;
    if let Err(e) = result {
        panic!("{e:#}");
    }
}

async fn projected_scenario(client: &kube::Client, ns: &str) -> anyhow::Result<()> {
    use wasmpilot_selection::Projection;
    let kind = wasmpilot::kinds::resolve(client, &KindRef::new("v1", "ConfigMap"), "test").await?;
    let informers = Informers::new(client.clone());
    let whole = informers.objects(&kind, None, false);
    let projected = informers.objects(&kind, Some(Projection::new(&["data.read"])?), false);
    let same = informers.objects(
        &kind,
        Some(Projection::new(&["data.read", "data.read"])?),
        false,
    );
    assert!(
        !Arc::ptr_eq(&whole, &projected),
        "another projection, another cache"
    );
    assert!(
        Arc::ptr_eq(&projected, &same),
        "an equal projection shares the watch"
    );
    assert_eq!(informers.watched(), (2, 0));
    for informer in [&whole, &projected] {
        assert!(tokio::time::timeout(Duration::from_secs(30), informer.wait_until_ready()).await?);
    }
    let mine = {
        let ns = ns.to_string();
        // (Not the namespace's kube-root-ca.crt, which the controller manager adds.)
        move |o: &Arc<WorkerObject>| {
            let m = o.metadata();
            m.namespace.as_deref() == Some(ns.as_str()) && m.name.as_deref() == Some("cm")
        }
    };
    let changes = |informer: &Arc<wasmpilot::controller::informers::ObjectInformer>| {
        let mine = mine.clone();
        let stream = informer
            .subscribe()
            .map(|c| c.object)
            .filter(move |o| futures::future::ready(mine(o)));
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(stream.for_each(move |o| {
            let _ = tx.send(o);
            futures::future::ready(())
        }));
        rx
    };
    let (mut whole_changes, mut projected_changes) = (changes(&whole), changes(&projected));
    let api = kube::Api::<DynamicObject>::namespaced_with(client.clone(), ns, &kind.api);
    let put = |read: &str, other: &str| -> anyhow::Result<DynamicObject> {
        Ok(serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "cm", "labels": {"app": "x"}},
            "data": {"read": read, "other": other}
        }))?)
    };
    let ssa = kube::api::PatchParams::apply("e2e-projected").force();
    let next = |rx: &mut tokio::sync::mpsc::UnboundedReceiver<Arc<WorkerObject>>| {
        let got = rx.try_recv().ok();
        got.map(|o| serde_json::from_str::<serde_json::Value>(&o.json))
            .transpose()
    };
    let settle = || tokio::time::sleep(Duration::from_secs(2));

    api.patch("cm", &ssa, &kube::api::Patch::Apply(put("1", "a")?))
        .await?;
    settle().await;
    let created =
        next(&mut projected_changes)?.ok_or_else(|| anyhow::anyhow!("creation not seen"))?;
    assert_eq!(
        created,
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "cm", "namespace": ns}, "data": {"read": "1"}}),
        "the projected cache keeps only data.read and the name"
    );
    assert!(next(&mut whole_changes)?.is_some());
    let cached = projected
        .cache
        .get(Some(ns), "cm")
        .ok_or_else(|| anyhow::anyhow!("not cached"))?;
    assert!(!cached.json.contains("other"), "{}", cached.json);

    // A field outside the projection changes: the whole-object subscriber hears of it (the
    // premise: the API server did send the update), the projected one does not.
    api.patch("cm", &ssa, &kube::api::Patch::Apply(put("1", "b")?))
        .await?;
    settle().await;
    let heard = next(&mut whole_changes)?.ok_or_else(|| anyhow::anyhow!("update not sent"))?;
    assert_eq!(heard["data"]["other"], "b");
    assert!(
        next(&mut projected_changes)?.is_none(),
        "a change no worker could see is not passed on"
    );

    // The projected field changes: both hear of it.
    api.patch("cm", &ssa, &kube::api::Patch::Apply(put("2", "b")?))
        .await?;
    settle().await;
    assert!(next(&mut whole_changes)?.is_some());
    let seen =
        next(&mut projected_changes)?.ok_or_else(|| anyhow::anyhow!("read field change missed"))?;
    assert_eq!(seen["data"]["read"], "2");
    Ok(())
}
