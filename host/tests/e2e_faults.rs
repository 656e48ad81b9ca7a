//! Faults on a real cluster: two hosts with leader election (exactly one reconciles; the other
//! takes over when the leader is SIGKILLed), and a host SIGKILLed mid-reconcile and restarted.
//! Nothing may be lost or doubled. (The kube-apiserver restart is `e2e_apiserver_restart.rs`.)

mod common;

use anyhow::{ensure, Context};
use common::cluster::*;
use kube::Client;
use std::process::Command;
use std::time::{Duration, Instant};

use common::autoroute::{check_outputs, create_route, wait_ready, AR, T};

const LEASE: Duration = Duration::from_secs(4);

async fn lease_holder(client: &Client, id: &str) -> anyhow::Result<Option<String>> {
    let api: kube::Api<k8s_openapi::api::coordination::v1::Lease> =
        kube::Api::namespaced(client.clone(), "default");
    Ok(api
        .get_opt(id)
        .await?
        .and_then(|l| l.spec)
        .and_then(|s| s.holder_identity))
}

fn host_args<'a>(lease_id: &'a str, identity: &'a str) -> Vec<&'a str> {
    vec![
        "--leader-elect",
        "--leader-election-namespace",
        "default",
        "--leader-election-id",
        lease_id,
        "--identity",
        identity,
        "--lease-duration",
        "4s",
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a cluster: deploy/local/test.sh starts one"]
async fn faults_on_a_real_cluster() {
    let client = client().await;
    let root = common::repo_root();
    let status = Command::new(env!("CARGO_BIN_EXE_wasmpilot"))
        .args(["deploy", "--no-build", "examples/autoroute"])
        .current_dir(&root)
        .status()
        .expect("running wasmpilot deploy");
    assert!(
        status.success(),
        "wasmpilot deploy examples/autoroute failed"
    );
    let ns = create_namespace(&client, "e2e-faults")
        .await
        .expect("namespace");
    let result = scenarios(&client, &ns).await;
    let api: kube::Api<k8s_openapi::api::core::v1::Namespace> = kube::Api::all(client.clone());
    let _ = api.delete(&ns, &Default::default()).await;
    if let Err(e) = result {
        panic!("{e:#}");
    }
}

async fn scenarios(client: &Client, ns: &str) -> anyhow::Result<()> {
    // 1. Two hosts, one Lease: exactly one reconciles.
    let lease_id = format!("e2e-faults-{}", std::process::id());
    let mut a = Host::start(&host_args(&lease_id, "host-a"), "wasmpilot-faults-a");
    let mut b = Host::start(&host_args(&lease_id, "host-b"), "wasmpilot-faults-b");
    let leader = wait_for("a leader", T, || async {
        lease_holder(client, &lease_id).await
    })
    .await?;
    create_route(client, ns, "le1", 2).await?;
    wait_ready(client, ns, "le1", 2)
        .await
        .context("reconciled under leader election")?;
    let (leader_host, standby_host) = if leader == "host-a" {
        (&mut a, &mut b)
    } else {
        (&mut b, &mut a)
    };
    let marker = format!("resource={ns}/le1");
    ensure!(
        leader_host.log_text().contains(&marker),
        "the leader reconciled le1"
    );
    ensure!(
        !standby_host.log_text().contains(&marker),
        "the standby must not reconcile"
    );

    // 2. The leader is SIGKILLed (no release): the standby takes over within the lease duration.
    leader_host.kill();
    let killed = Instant::now();
    let standby = if leader == "host-a" {
        "host-b"
    } else {
        "host-a"
    };
    wait_for("the standby to take the Lease", T, || async {
        Ok(lease_holder(client, &lease_id)
            .await?
            .filter(|h| h == standby)
            .map(|_| ()))
    })
    .await?;
    let takeover = killed.elapsed();
    eprintln!("takeover after {takeover:?} (lease duration {LEASE:?})");
    ensure!(
        takeover <= LEASE + Duration::from_secs(4),
        "takeover took {takeover:?}"
    );
    create_route(client, ns, "le2", 1).await?;
    wait_ready(client, ns, "le2", 1)
        .await
        .context("the new leader reconciles")?;
    drop(a);
    drop(b);

    // 3. SIGKILL mid-reconcile, restart: converges, no duplicated outputs, consistent status.
    // The host is killed the moment its /metrics shows a reconcile in flight, while routes are
    // still being created: the premise (a reconcile was running, work was left) is checked.
    let addr = format!("127.0.0.1:{}", free_port());
    let mut host = Host::start(&["--metrics-addr", &addr], "wasmpilot-faults-kill");
    wait_for("the host's /metrics", T, || async {
        Ok(http_get(&addr, "/metrics").ok().map(|_| ()))
    })
    .await?;
    let creating = {
        let (client, ns) = (client.clone(), ns.to_string());
        tokio::spawn(async move {
            for i in 0..10 {
                create_route(&client, &ns, &format!("k{i}"), 3).await?;
            }
            anyhow::Ok(())
        })
    };
    let deadline = Instant::now() + T;
    let in_flight = loop {
        let text = http_get(&addr, "/metrics").unwrap_or_default();
        let n = metric_value(&text, "wasmpilot_reconciles_in_flight").unwrap_or(0.0);
        if n >= 1.0 {
            host.kill();
            break n;
        }
        ensure!(
            Instant::now() < deadline,
            "no reconcile was ever seen in flight to kill the host in"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    };
    creating.await??;
    let mut ready_at_kill = 0;
    for i in 0..10 {
        let o = get(client, AR.0, AR.1, Some(ns), &format!("k{i}")).await?;
        if o.is_some_and(|o| o["status"]["phase"] == "Ready") {
            ready_at_kill += 1;
        }
    }
    eprintln!("host SIGKILLed with {in_flight} reconcile(s) in flight; {ready_at_kill} of 10 routes Ready then");
    ensure!(
        ready_at_kill < 10,
        "every route was Ready before the kill: nothing was left for the restarted host"
    );
    let host = Host::start(&[], "wasmpilot-faults-restarted");
    for i in 0..10 {
        let name = format!("k{i}");
        wait_ready(client, ns, &name, 3).await?;
        check_outputs(client, ns, &name, 3).await?;
    }
    drop(host);
    Ok(())
}
