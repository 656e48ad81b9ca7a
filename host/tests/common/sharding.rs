//! Helpers of the sharding tests (e2e_sharding.rs: host processes; e2e_install.rs: pods):
//! who holds the autoroute buckets, and many routes created and waited for at once.
#![allow(dead_code)]

use super::autoroute::{create_route, AR};
use super::cluster::*;
use anyhow::Context;
use kube::Client;
use std::collections::BTreeMap;
use std::time::Duration;

/// The holder of every autoroute bucket Lease (`None`: free or expired).
pub async fn holders(
    client: &Client,
    leases_ns: &str,
) -> anyhow::Result<BTreeMap<u32, Option<String>>> {
    let api: kube::Api<k8s_openapi::api::coordination::v1::Lease> =
        kube::Api::namespaced(client.clone(), leases_ns);
    let list = api
        .list(
            &kube::api::ListParams::default()
                .labels("wasmpilot.io/lease=bucket,wasmpilot.io/operator=autoroute"),
        )
        .await?;
    let now = jiff::Timestamp::now();
    let mut out = BTreeMap::new();
    for lease in list.items {
        let bucket: u32 = lease
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("wasmpilot.io/bucket"))
            .and_then(|b| b.parse().ok())
            .context("bucket label")?;
        let spec = lease.spec.unwrap_or_default();
        let live = spec.renew_time.as_ref().is_some_and(|t| {
            t.0.checked_add(jiff::SignedDuration::from_secs(
                spec.lease_duration_seconds.unwrap_or(15).into(),
            ))
            .is_ok_and(|until| until > now)
        });
        out.insert(bucket, spec.holder_identity.filter(|_| live));
    }
    Ok(out)
}

/// Waits until the `buckets` autoroute buckets are all held, each by one of `replicas`, every
/// one of them holding at least one; returns the holders.
pub async fn settled_holders(
    client: &Client,
    leases_ns: &str,
    buckets: u32,
    replicas: &[&str],
    timeout: Duration,
) -> anyhow::Result<BTreeMap<u32, String>> {
    wait_for(
        &format!("buckets held by {replicas:?}"),
        timeout,
        || async {
            let h = holders(client, leases_ns).await?;
            let held: BTreeMap<u32, String> = h
                .into_iter()
                .filter_map(|(b, holder)| holder.map(|x| (b, x)))
                .collect();
            let every_bucket = held.len() == buckets as usize;
            let only_them = held.values().all(|x| replicas.contains(&x.as_str()));
            let everyone = replicas.iter().all(|r| held.values().any(|x| x == r));
            Ok((every_bucket && only_them && everyone).then_some(held))
        },
    )
    .await
}

/// Every route of `routes` Ready (listing namespace by namespace).
pub async fn all_ready(
    client: &Client,
    routes: &BTreeMap<String, Vec<String>>,
    timeout: Duration,
) -> anyhow::Result<()> {
    let want: usize = routes.values().map(Vec::len).sum();
    wait_for(&format!("{want} AutoRoutes Ready"), timeout, || async {
        let mut ready = 0;
        for (ns, names) in routes {
            let api = dynamic_api(client, AR.0, AR.1, Some(ns)).await?;
            let list = api.list(&Default::default()).await?;
            ready += list
                .items
                .iter()
                .filter(|o| names.iter().any(|n| o.metadata.name.as_deref() == Some(n)))
                .filter(|o| {
                    let v = serde_json::to_value(o).unwrap_or_default();
                    v["status"]["phase"] == "Ready"
                        && v["status"]["observedGeneration"] == v["metadata"]["generation"]
                })
                .count();
        }
        Ok((ready == want).then_some(()))
    })
    .await
}

pub async fn create_routes(client: &Client, ns: &str, names: &[String]) -> anyhow::Result<()> {
    for name in names {
        create_route(client, ns, name, 0).await?;
    }
    Ok(())
}
