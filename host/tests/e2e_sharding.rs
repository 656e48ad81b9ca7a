//! Active-active hosts (`wasmpilot run --shard`) on the local cluster: three replicas share
//! AutoRoutes spread over namespaces, each writing between 20 % and 47 % of them (by the API
//! server's audit log, which names each replica by its User-Agent); a replica killed without
//! warning has its buckets taken within a Lease duration and routes created meanwhile reach
//! Ready; scaling to five and back to two loses nothing; no route or output is written by two
//! replicas. The premise: two hosts without --shard do write the same routes, and the audit
//! check sees it.

mod common;

use anyhow::{ensure, Context};
use common::autoroute::{create_route, AR};
use common::cluster::*;
use kube::Client;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

const NAMESPACES: usize = 30;
const ROUTES_PER_NAMESPACE: usize = 20;
const BUCKETS: u32 = 16;
const LEASE_SECS: u64 = 6;
const T: Duration = Duration::from_secs(240);

/// Writes of the audit log to objects in namespaces starting with `prefix`: (namespace,
/// resource[/subresource], name) → the User-Agents that wrote it.
fn writers(
    prefix: &str,
) -> anyhow::Result<Option<BTreeMap<(String, String, String), BTreeSet<String>>>> {
    let Some(path) = std::env::var_os("WASMPILOT_AUDIT_LOG") else {
        return Ok(None);
    };
    let text = std::fs::read_to_string(&path).context("reading the audit log")?;
    let mut out: BTreeMap<(String, String, String), BTreeSet<String>> = BTreeMap::new();
    for line in text.lines().filter(|l| l.contains(prefix)) {
        let Ok(e) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        let r = &e["objectRef"];
        let ns = r["namespace"].as_str().unwrap_or_default();
        let agent = e["userAgent"].as_str().unwrap_or_default();
        if !ns.starts_with(prefix) || !agent.starts_with("wasmpilot-host/") {
            continue;
        }
        if e["responseStatus"]["code"]
            .as_i64()
            .is_some_and(|c| c >= 300)
        {
            continue; // refused (a conflict): nothing was written
        }
        let mut resource = r["resource"].as_str().unwrap_or_default().to_string();
        if let Some(sub) = r["subresource"].as_str() {
            resource = format!("{resource}/{sub}");
        }
        let replica = agent
            .split_once('(')
            .map(|(_, id)| id.trim_end_matches(')').to_string())
            .unwrap_or_else(|| agent.to_string());
        out.entry((
            ns.to_string(),
            resource,
            r["name"].as_str().unwrap_or_default().to_string(),
        ))
        .or_default()
        .insert(replica);
    }
    Ok(Some(out))
}

fn replica(identity: &str, leases_ns: &str, metrics: &str) -> Host {
    let wasm_dir = common::wasm_dir();
    Host::start(
        &[
            "--module-dir",
            wasm_dir.to_str().expect("utf-8 path"),
            "--shard",
            "--buckets",
            &BUCKETS.to_string(),
            "--identity",
            identity,
            "--leader-election-namespace",
            leases_ns,
            "--lease-duration",
            &format!("{LEASE_SECS}s"),
            "--metrics-addr",
            metrics,
        ],
        &format!("wasmpilot-shard-{identity}"),
    )
}

/// The holder of every autoroute bucket Lease (`None`: free or expired).
async fn holders(
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

/// Waits until the `BUCKETS` autoroute buckets are all held, each by one of `replicas`, every
/// one of them holding at least one; returns the holders.
async fn settled_holders(
    client: &Client,
    leases_ns: &str,
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
            let every_bucket = held.len() == BUCKETS as usize;
            let only_them = held.values().all(|x| replicas.contains(&x.as_str()));
            let everyone = replicas.iter().all(|r| held.values().any(|x| x == r));
            Ok((every_bucket && only_them && everyone).then_some(held))
        },
    )
    .await
}

/// Every route of `routes` Ready (listing namespace by namespace).
async fn all_ready(
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

async fn create_routes(client: &Client, ns: &str, names: &[String]) -> anyhow::Result<()> {
    for name in names {
        create_route(client, ns, name, 0).await?;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a cluster: deploy/local/test.sh starts one"]
async fn sharded_replicas_share_the_routes_and_hand_them_over() {
    let client = client().await;
    let root = common::repo_root();
    let status = std::process::Command::new(env!("CARGO_BIN_EXE_wasmpilot"))
        .args(["deploy", "examples/autoroute"])
        .current_dir(&root)
        .status()
        .expect("running wasmpilot deploy");
    assert!(
        status.success(),
        "wasmpilot deploy examples/autoroute failed"
    );
    let result = scenario(&client).await;
    if let Err(e) = result {
        panic!("{e:#}");
    }
}

async fn scenario(client: &Client) -> anyhow::Result<()> {
    let Some(_) = writers("e2e-")? else {
        eprintln!("SKIPPED: no audit log (WASMPILOT_AUDIT_LOG) to tell the replicas' writes apart: deploy/local/cluster.sh writes one");
        return Ok(());
    };
    let prefix = create_namespace(client, "e2e-shard").await?;
    let leases_ns = format!("{prefix}-leases");
    create_ns(client, &leases_ns).await?;

    // 1. The premise: two hosts without --shard both write the same routes.
    let plain_ns = format!("{prefix}-plain");
    create_ns(client, &plain_ns).await?;
    {
        let wasm_dir = common::wasm_dir();
        let dir = wasm_dir.to_str().expect("utf-8 path");
        let _a = Host::start(
            &["--module-dir", dir, "--identity", "plain-a"],
            "wasmpilot-shard-plain-a",
        );
        let _b = Host::start(
            &["--module-dir", dir, "--identity", "plain-b"],
            "wasmpilot-shard-plain-b",
        );
        tokio::time::sleep(Duration::from_secs(3)).await;
        let names: Vec<String> = (0..5).map(|i| format!("p{i}")).collect();
        create_routes(client, &plain_ns, &names).await?;
        all_ready(client, &BTreeMap::from([(plain_ns.clone(), names)]), T).await?;
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    let seen = writers(&plain_ns)?.unwrap_or_default();
    let doubled = seen.iter().filter(|(_, w)| w.len() > 1).count();
    eprintln!(
        "without --shard: {doubled} of {} objects written by both hosts",
        seen.len()
    );
    ensure!(doubled > 0, "two unsharded hosts wrote no object both: the audit check could not see a double write ({seen:?})");

    // 2. Three sharded replicas share routes in NAMESPACES namespaces.
    let ports: Vec<String> = (0..6)
        .map(|_| format!("127.0.0.1:{}", free_port()))
        .collect();
    let mut a = replica("shard-a", &leases_ns, &ports[0]);
    let mut b = replica("shard-b", &leases_ns, &ports[1]);
    let mut c = replica("shard-c", &leases_ns, &ports[2]);
    settled_holders(client, &leases_ns, &["shard-a", "shard-b", "shard-c"], T).await?;
    let mut routes: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for i in 0..NAMESPACES {
        let ns = format!("{prefix}-n{i}");
        create_ns(client, &ns).await?;
        routes.insert(
            ns,
            (0..ROUTES_PER_NAMESPACE).map(|j| format!("r{j}")).collect(),
        );
    }
    let started = Instant::now();
    futures::future::try_join_all(
        routes
            .iter()
            .map(|(ns, names)| create_routes(client, ns, names)),
    )
    .await?;
    all_ready(client, &routes, T).await?;
    eprintln!(
        "{} routes Ready in {:?} with three replicas",
        NAMESPACES * ROUTES_PER_NAMESPACE,
        started.elapsed()
    );
    let seen = writers(&format!("{prefix}-n"))?.unwrap_or_default();
    let mut share: BTreeMap<String, usize> = BTreeMap::new();
    for ((_, resource, _), w) in &seen {
        if resource == "autoroutes/status" {
            for r in w {
                *share.entry(r.clone()).or_insert(0) += 1;
            }
        }
    }
    let total = NAMESPACES * ROUTES_PER_NAMESPACE;
    eprintln!("routes written per replica: {share:?}");
    for r in ["shard-a", "shard-b", "shard-c"] {
        let n = share.get(r).copied().unwrap_or(0);
        let pct = n as f64 * 100.0 / total as f64;
        ensure!(
            (20.0..=47.0).contains(&pct),
            "{r} wrote {n} of {total} routes ({pct:.0} %): {share:?}"
        );
    }

    // 3. One replica killed without warning: its buckets are taken within a Lease duration
    // (plus one renewal round), and routes created in them meanwhile reach Ready.
    let before = settled_holders(client, &leases_ns, &["shard-a", "shard-b", "shard-c"], T).await?;
    let lost: BTreeSet<u32> = before
        .iter()
        .filter(|(_, h)| *h == "shard-b")
        .map(|(b, _)| *b)
        .collect();
    let killed_at = Instant::now();
    b.kill();
    let mut gap: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for ns in routes.keys() {
        if lost.contains(&wasmpilot::controller::buckets::bucket_of(
            Some(ns),
            "",
            BUCKETS,
        )) {
            gap.insert(ns.clone(), vec!["gap".into()]);
        }
    }
    ensure!(!gap.is_empty(), "shard-b held no namespace's bucket");
    futures::future::try_join_all(
        gap.iter()
            .map(|(ns, names)| create_routes(client, ns, names)),
    )
    .await?;
    settled_holders(client, &leases_ns, &["shard-a", "shard-c"], T).await?;
    let taken = killed_at.elapsed();
    eprintln!(
        "shard-b's {} buckets taken {taken:?} after the kill (Lease {LEASE_SECS} s)",
        lost.len()
    );
    ensure!(
        taken <= Duration::from_secs(LEASE_SECS + LEASE_SECS / 3 + 2),
        "buckets taken {taken:?} after the kill, more than a Lease duration and a round"
    );
    all_ready(client, &gap, T).await?;

    // 4. Scale to five, then back to two (SIGTERM: buckets handed over, not waited out).
    let mut d = replica("shard-d", &leases_ns, &ports[3]);
    let mut e = replica("shard-e", &leases_ns, &ports[4]);
    let mut f = replica("shard-f", &leases_ns, &ports[5]);
    settled_holders(
        client,
        &leases_ns,
        &["shard-a", "shard-c", "shard-d", "shard-e", "shard-f"],
        T,
    )
    .await?;
    let mut more: BTreeMap<String, Vec<String>> = routes
        .keys()
        .map(|ns| (ns.clone(), vec!["five".to_string()]))
        .collect();
    futures::future::try_join_all(
        more.iter()
            .map(|(ns, names)| create_routes(client, ns, names)),
    )
    .await?;
    all_ready(client, &more, T).await?;
    let stopping = Instant::now();
    for r in [&mut d, &mut e, &mut f] {
        r.terminate(Duration::from_secs(30));
    }
    settled_holders(
        client,
        &leases_ns,
        &["shard-a", "shard-c"],
        Duration::from_secs(LEASE_SECS),
    )
    .await?;
    eprintln!("scaled down to two in {:?}", stopping.elapsed());
    more = routes
        .keys()
        .map(|ns| (ns.clone(), vec!["two".to_string()]))
        .collect();
    futures::future::try_join_all(
        more.iter()
            .map(|(ns, names)| create_routes(client, ns, names)),
    )
    .await?;
    // Nothing lost: every route created so far is Ready.
    let mut everything = routes.clone();
    for (ns, names) in everything.iter_mut() {
        names.extend(["five".to_string(), "two".to_string()]);
        if gap.contains_key(ns) {
            names.push("gap".into());
        }
    }
    all_ready(client, &everything, T).await?;
    ensure!(a.is_alive() && c.is_alive(), "a replica died");

    // 5. Over the whole test no route, and no output, was written by two replicas.
    let seen = writers(&format!("{prefix}-n"))?.unwrap_or_default();
    let doubled: Vec<_> = seen.iter().filter(|(_, w)| w.len() > 1).collect();
    eprintln!(
        "{} objects written, {} by more than one replica",
        seen.len(),
        doubled.len()
    );
    ensure!(
        doubled.is_empty(),
        "written by two replicas: {:?}",
        doubled.iter().take(10).collect::<Vec<_>>()
    );

    a.terminate(Duration::from_secs(30));
    c.terminate(Duration::from_secs(30));
    for ns in everything.keys().chain([&plain_ns, &leases_ns, &prefix]) {
        let _ = delete(client, "v1", "Namespace", None, ns).await;
    }
    Ok(())
}

async fn create_ns(client: &Client, name: &str) -> anyhow::Result<()> {
    apply_yaml(
        client,
        &format!("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {name}\n"),
        None,
    )
    .await
}
