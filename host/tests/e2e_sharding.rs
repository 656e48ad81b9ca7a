//! Active-active hosts (`wasmpilot run --shard`) on the local cluster: three replicas share
//! AutoRoutes spread over namespaces, each writing between 20 % and 47 % of them (by the API
//! server's audit log, which names each replica by its User-Agent); a replica killed without
//! warning has its buckets taken within a Lease duration and routes created meanwhile reach
//! Ready; scaling to five and back to two loses nothing; no route or output is written by two
//! replicas. The premise: two hosts without --shard do write the same routes, and the audit
//! check sees it.

mod common;

use anyhow::ensure;
use common::cluster::*;
use common::sharding::*;
use kube::Client;
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

const NAMESPACES: usize = 30;
const ROUTES_PER_NAMESPACE: usize = 20;
const BUCKETS: u32 = 16;
const LEASE_SECS: u64 = 6;
const T: Duration = Duration::from_secs(240);

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
    let Some(_) = audit_writers("e2e-")? else {
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
    let seen = audit_writers(&plain_ns)?.unwrap_or_default();
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
    settled_holders(
        client,
        &leases_ns,
        BUCKETS,
        &["shard-a", "shard-b", "shard-c"],
        T,
    )
    .await?;
    // The WasmOperator's status names each replica's buckets: all of them, none twice.
    wait_for(
        "status.sharding of autoroute naming the three replicas",
        T,
        || async {
            let op = get(
                client,
                "wasmpilot.io/v1alpha1",
                "WasmOperator",
                None,
                "autoroute",
            )
            .await?;
            let replicas = op
                .as_ref()
                .and_then(|o| o["status"]["sharding"]["replicas"].as_object().cloned())
                .unwrap_or_default();
            let mut buckets: Vec<u64> = ["shard-a", "shard-b", "shard-c"]
                .iter()
                .flat_map(|r| {
                    replicas
                        .get(*r)
                        .and_then(|e| e["buckets"].as_array().cloned())
                        .unwrap_or_default()
                })
                .filter_map(|b| b.as_u64())
                .collect();
            buckets.sort_unstable();
            Ok((buckets == (0..u64::from(BUCKETS)).collect::<Vec<_>>()).then_some(()))
        },
    )
    .await?;
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
    let seen = audit_writers(&format!("{prefix}-n"))?.unwrap_or_default();
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

    // Each replica caches only the namespaces of its buckets: of the cluster's Gateways (an
    // output of every route), each caches a part and together about all of them.
    let gateways = dynamic_api(client, "networking.istio.io/v1alpha3", "Gateway", None).await?;
    let in_cluster = gateways
        .list_metadata(&Default::default())
        .await?
        .items
        .len() as f64;
    ensure!(
        in_cluster >= 600.0,
        "only {in_cluster} Gateways in the cluster"
    );
    let series =
        r#"wasmpilot_cached_objects{kind="networking.istio.io/v1alpha3 Gateway",cache="outputs"}"#;
    let mut cached = BTreeMap::new();
    for (r, port) in ["shard-a", "shard-b", "shard-c"].iter().zip(&ports) {
        let text = http_get(port, "/metrics")?;
        let n = metric_value(&text, series)
            .ok_or_else(|| anyhow::anyhow!("{r} exports no {series}"))?;
        cached.insert(*r, n);
    }
    eprintln!("Gateways cached per replica: {cached:?} of {in_cluster} in the cluster");
    let together: f64 = cached.values().sum();
    ensure!(
        cached.values().all(|n| *n > 0.0 && *n <= in_cluster * 0.75),
        "each replica should cache a part of the {in_cluster} Gateways: {cached:?}"
    );
    ensure!(
        together >= in_cluster * 0.95,
        "the replicas together cache {together} of {in_cluster} Gateways: {cached:?}"
    );

    // 3. One replica killed without warning: its buckets are taken within a Lease duration
    // (plus one renewal round), and routes created in them meanwhile reach Ready.
    let before = settled_holders(
        client,
        &leases_ns,
        BUCKETS,
        &["shard-a", "shard-b", "shard-c"],
        T,
    )
    .await?;
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
    settled_holders(client, &leases_ns, BUCKETS, &["shard-a", "shard-c"], T).await?;
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
        BUCKETS,
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
        BUCKETS,
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
    let seen = audit_writers(&format!("{prefix}-n"))?.unwrap_or_default();
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
