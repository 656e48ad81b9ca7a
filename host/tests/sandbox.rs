//! The real sandbox running a real guest component (no cluster): decisions, worker errors,
//! and hostile behaviour (infinite loop, allocation bomb, panic, stdout flood) contained.

mod common;

use common::{scripted_module as scripted, scripted_request as request};

use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;
use wasmpilot::sandbox::{LimitOverride, RunError, Sandbox, SandboxLimits};

fn sandbox() -> Arc<Sandbox> {
    Sandbox::new(SandboxLimits {
        deadline: Duration::from_millis(300),
        memory_bytes: 32 << 20,
        ..Default::default()
    })
    .unwrap()
}

#[tokio::test]
async fn decisions_cross_the_boundary() {
    let sb = sandbox();
    let m = scripted(&sb);
    let out = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}});
    let r = sb
        .run_sync(&m, request(json!({"mode": "ok", "next": "Done", "outputs": [out], "statusInfo": {"x": 1}, "requeueAfterMs": 1500})))
        .await
        .unwrap();
    assert_eq!(r.next_phase, "Done");
    assert_eq!(r.requeue_after_ms, Some(1500));
    let status: Value = serde_json::from_str(r.status_info.as_deref().unwrap()).unwrap();
    assert_eq!(status["x"], 1);
    let o: Value = serde_json::from_str(&r.outputs[0]).unwrap();
    assert_eq!(o["metadata"]["name"], "c");
}

#[tokio::test]
async fn worker_errors_keep_their_class() {
    let sb = sandbox();
    let m = scripted(&sb);
    match sb
        .run_sync(
            &m,
            request(json!({"mode": "fatal", "message": "bad selector"})),
        )
        .await
    {
        Err(RunError::Fatal(msg)) => assert_eq!(msg, "bad selector"),
        other => panic!("expected a fatal error, got {other:?}"),
    }
    match sb.run_sync(&m, request(json!({"mode": "retryable"}))).await {
        Err(RunError::Retryable(_)) => {}
        other => panic!("expected a retryable error, got {other:?}"),
    }
}

#[tokio::test]
async fn hostile_guests_are_contained_and_the_next_call_works() {
    let sb = sandbox();
    let m = scripted(&sb);
    match sb.run_sync(&m, request(json!({"mode": "loop"}))).await {
        Err(e @ RunError::DeadlineExceeded(_)) => {
            assert_eq!(e.to_string(), "the worker exceeded its 300ms deadline")
        }
        other => panic!("expected a deadline error, got {other:?}"),
    }
    match sb.run_sync(&m, request(json!({"mode": "alloc"}))).await {
        Err(e @ RunError::MemoryLimit { .. }) => {
            assert!(e.to_string().contains("memory limit of 32 MiB"), "{e}")
        }
        other => panic!("expected a memory limit error, got {other:?}"),
    }
    match sb
        .run_sync(
            &m,
            request(json!({"mode": "panic", "message": "guest bug 42"})),
        )
        .await
    {
        Err(e @ RunError::Trap { .. }) => assert!(
            e.to_string().contains("guest bug 42"),
            "panic message from stderr: {e}"
        ),
        other => panic!("expected a trap, got {other:?}"),
    }
    // Flooding stdout is bounded, not fatal.
    let r = sb
        .run_sync(&m, request(json!({"mode": "print", "next": "Done"})))
        .await
        .unwrap();
    assert_eq!(r.next_phase, "Done");
    // Each call had a fresh instance: the same component still decides normally.
    let r = sb
        .run_sync(&m, request(json!({"mode": "ok", "next": "Done"})))
        .await
        .unwrap();
    assert_eq!(r.next_phase, "Done");
}

#[tokio::test]
async fn a_looping_worker_does_not_block_others() {
    let sb = Sandbox::new(SandboxLimits {
        deadline: Duration::from_secs(1),
        concurrency: 2,
        ..Default::default()
    })
    .unwrap();
    let m = scripted(&sb);
    let (sb2, m2) = (sb.clone(), m.clone());
    let looping =
        tokio::spawn(async move { sb2.run_sync(&m2, request(json!({"mode": "loop"}))).await });
    tokio::time::sleep(Duration::from_millis(50)).await;
    let r = sb
        .run_sync(&m, request(json!({"mode": "ok", "next": "Done"})))
        .await
        .unwrap();
    assert_eq!(r.next_phase, "Done");
    assert!(
        !looping.is_finished(),
        "the good call finished while the loop still ran"
    );
    assert!(matches!(
        looping.await.unwrap(),
        Err(RunError::DeadlineExceeded(_))
    ));
}

/// At most `concurrency` calls run at once; the rest wait for a slot (and are counted while they
/// do), then run normally.
#[tokio::test]
async fn calls_beyond_the_concurrency_limit_wait_their_turn() {
    let sb = Sandbox::new(SandboxLimits {
        deadline: Duration::from_millis(500),
        concurrency: 1,
        ..Default::default()
    })
    .unwrap();
    let m = scripted(&sb);
    let (sb2, m2) = (sb.clone(), m.clone());
    let looping =
        tokio::spawn(async move { sb2.run_sync(&m2, request(json!({"mode": "loop"}))).await });
    tokio::time::sleep(Duration::from_millis(50)).await;
    let waiting = &wasmpilot::metrics::METRICS.worker_calls_waiting;
    let before = waiting.get();
    let (sb3, m3) = (sb.clone(), m.clone());
    let queued = tokio::spawn(async move {
        sb3.run_sync(&m3, request(json!({"mode": "ok", "next": "Done"})))
            .await
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        !queued.is_finished(),
        "the second call ran while the only slot was taken"
    );
    assert_eq!(waiting.get(), before + 1, "the waiting call is counted");
    assert!(matches!(
        looping.await.unwrap(),
        Err(RunError::DeadlineExceeded(_))
    ));
    assert_eq!(queued.await.unwrap().unwrap().next_phase, "Done");
    assert_eq!(waiting.get(), before);
}

/// Calls run on the async runtime's threads (on fibers), so a looping guest must hand its thread
/// back at every epoch tick: on a one-thread runtime, a timer task keeps firing while it loops.
#[tokio::test(flavor = "current_thread")]
async fn a_looping_worker_yields_the_runtime_thread() {
    let sb = Sandbox::new(SandboxLimits {
        deadline: Duration::from_millis(600),
        ..Default::default()
    })
    .unwrap();
    let m = scripted(&sb);
    let looping =
        tokio::spawn(async move { sb.run_sync(&m, request(json!({"mode": "loop"}))).await });
    let mut ticks_while_looping = 0;
    while !looping.is_finished() {
        tokio::time::sleep(Duration::from_millis(5)).await;
        if !looping.is_finished() {
            ticks_while_looping += 1;
        }
    }
    assert!(matches!(
        looping.await.unwrap(),
        Err(RunError::DeadlineExceeded(_))
    ));
    // A thread held for the whole 600 ms deadline would give 0 (and a plain wasmtime yield, 1:
    // tokio then polls its timers only every 61 task polls); slices of one 10 ms tick give
    // about 60 (each 5 ms sleep waits for the guest's slice to end).
    assert!(
        ticks_while_looping >= 10,
        "the timer ran only {ticks_while_looping} times while the guest looped"
    );
}

#[tokio::test]
async fn oversized_requests_and_outputs_are_refused() {
    let sb = Sandbox::new(SandboxLimits {
        memory_bytes: 1 << 20,
        max_outputs: 2,
        ..Default::default()
    })
    .unwrap();
    let m = scripted(&sb);
    let mut req = request(json!({"mode": "ok"}));
    req.inputs.push(wasmpilot::sandbox::NamedObjects {
        name: "big".into(),
        objects: vec!["x".repeat(600 << 10)],
    });
    assert!(matches!(
        sb.run_sync(&m, req).await,
        Err(RunError::RequestTooLarge { .. })
    ));

    let sb = Sandbox::new(SandboxLimits {
        max_outputs: 2,
        ..Default::default()
    })
    .unwrap();
    let m = scripted(&sb);
    let outs: Vec<Value> = (0..3).map(|i| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": format!("c{i}")}})).collect();
    match sb
        .run_sync(&m, request(json!({"mode": "ok", "outputs": outs})))
        .await
    {
        Err(RunError::TooManyOutputs { count: 3, limit: 2 }) => {}
        other => panic!("expected too many outputs, got {other:?}"),
    }
}

#[tokio::test]
async fn output_bytes_are_capped_and_a_phase_may_raise_the_cap() {
    let sb = Sandbox::new(SandboxLimits {
        max_output_bytes: 64 << 10,
        ..Default::default()
    })
    .unwrap();
    let m = scripted(&sb);
    let bloat = || request(json!({"mode": "bloat", "count": 200 << 10}));
    match sb.run_sync(&m, bloat()).await {
        Err(e @ RunError::OutputsTooLarge { limit, .. }) => {
            assert_eq!(limit, 64 << 10);
            assert!(e.to_string().contains("bytes of outputs"), "{e}");
        }
        other => panic!("expected outputs too large, got {other:?}"),
    }
    let raised = m.clone().with_limits(sb.call_limits(&LimitOverride {
        max_output_bytes: Some(1 << 20),
        ..Default::default()
    }));
    let r = sb.run_sync(&raised, bloat()).await.unwrap();
    assert_eq!(r.outputs.len(), 1);
}

#[tokio::test]
async fn a_worker_over_its_log_budget_is_stopped() {
    let sb = Sandbox::new(SandboxLimits {
        log_lines: 50,
        ..Default::default()
    })
    .unwrap();
    let m = scripted(&sb);
    // The scripted worker logs one line of its own before the chatty ones.
    let chatty = |n: usize| request(json!({"mode": "chatty", "count": n, "next": "Done"}));
    assert_eq!(
        sb.run_sync(&m, chatty(40)).await.unwrap().next_phase,
        "Done"
    );
    match sb.run_sync(&m, chatty(100)).await {
        Err(e @ RunError::LogLimit { lines: 50, .. }) => {
            assert_eq!(e.reason(), "WorkerLogLimitExceeded");
            assert!(e.to_string().contains("50 log lines"), "{e}");
        }
        other => panic!("expected the log limit, got {other:?}"),
    }
    let raised = m.clone().with_limits(sb.call_limits(&LimitOverride {
        log_lines: Some(500),
        ..Default::default()
    }));
    assert_eq!(
        sb.run_sync(&raised, chatty(100)).await.unwrap().next_phase,
        "Done"
    );
    let silent = m.with_limits(sb.call_limits(&LimitOverride {
        log_lines: Some(0),
        ..Default::default()
    }));
    assert!(matches!(
        sb.run_sync(&silent, chatty(0)).await,
        Err(RunError::LogLimit { lines: 0, .. })
    ));
}

/// Everything the README's "What a worker can reach" says a guest cannot reach, tried from a
/// real guest: environment, arguments, files, sockets, name lookup; and the wall clock it reads.
#[tokio::test]
async fn a_guest_reaches_nothing_outside_its_request() {
    let sb = sandbox();
    let m = scripted(&sb);
    let r = sb
        .run_sync(&m, request(json!({"mode": "probe", "next": "Done"})))
        .await
        .unwrap();
    let info: Value = serde_json::from_str(r.status_info.as_deref().unwrap()).unwrap();
    let probe = &info["probe"];
    assert_eq!(probe["env"], 0, "{probe}");
    assert_eq!(probe["args"], 0, "{probe}");
    for denied in [
        "readRoot",
        "readEtc",
        "writeTmp",
        "tcpConnect",
        "nameLookup",
        "udpBind",
    ] {
        assert_eq!(probe[denied], false, "{denied}: {probe}");
    }
    // The request's `now` (2026-01-01T00:00:00Z), not the host's clock.
    assert_eq!(probe["wallClockSecs"], 1_767_225_600, "{probe}");
}

#[tokio::test]
async fn invalid_components_are_refused_at_load() {
    let sb = sandbox();
    assert!(sb.compile(b"\0asm not really").is_err());
    let bytes = common::component("wasmpilot_test_scripted.wasm");
    let c = sb.compile(&bytes).unwrap();
    assert!(
        sb.finalizer_module("sha256:x", &c).is_ok(),
        "SDK components export both roles"
    );
}

/// A guest that sleeps waits in a WASI poll, where no guest code runs for the epoch deadline to
/// stop: the call itself still ends at its deadline, and its slot is free for the next call.
#[tokio::test]
async fn a_sleeping_worker_ends_at_its_deadline_and_frees_its_slot() {
    let sb = Sandbox::new(SandboxLimits {
        deadline: Duration::from_millis(300),
        concurrency: 1,
        ..Default::default()
    })
    .unwrap();
    let m = scripted(&sb);
    // Premise: a short sleep really sleeps inside the guest (the call takes that long and works).
    let started = std::time::Instant::now();
    let r = sb
        .run_sync(
            &m,
            request(json!({"mode": "sleep", "count": 150, "next": "Done"})),
        )
        .await
        .unwrap();
    assert_eq!(r.next_phase, "Done");
    assert!(
        started.elapsed() >= Duration::from_millis(150),
        "the guest slept: {:?}",
        started.elapsed()
    );

    // 300 s of sleep against a 300 ms deadline.
    let started = std::time::Instant::now();
    match sb
        .run_sync(&m, request(json!({"mode": "sleep", "count": 300_000})))
        .await
    {
        Err(e @ RunError::DeadlineExceeded(_)) => {
            assert_eq!(e.to_string(), "the worker exceeded its 300ms deadline");
            assert_eq!(e.reason(), "WorkerDeadlineExceeded");
        }
        other => panic!("expected a deadline error, got {other:?}"),
    }
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(300) && took < Duration::from_secs(2),
        "ended at its deadline: {took:?}"
    );
    // The only slot was released: the next call runs at once.
    let r = tokio::time::timeout(
        Duration::from_secs(2),
        sb.run_sync(&m, request(json!({"mode": "ok", "next": "Done"}))),
    )
    .await
    .expect("the slot was released")
    .unwrap();
    assert_eq!(r.next_phase, "Done");
}

/// A finalizer reads its declared inputs through the `finalizer-inputs` import; they count
/// toward the request size and its seed, as a phase's do.
#[tokio::test]
async fn a_finalizer_gets_its_inputs_from_the_host() {
    let sb = sandbox();
    let bytes = common::component("wasmpilot_test_scripted.wasm");
    let c = sb.compile(&bytes).unwrap();
    let f = sb.finalizer_module("sha256:test", &c).unwrap();
    let request = || wasmpilot::sandbox::FinalizeRequest {
        operator: "scripted".into(),
        resource: json!({
            "apiVersion": "test.wasmpilot.io/v1", "kind": "Scripted",
            "metadata": {"name": "s", "namespace": "default"},
            "spec": {"finalize": {"mode": "ok", "countInputs": true}}
        })
        .to_string(),
        now: "2026-01-01T00:00:00Z".into(),
    };
    let lease = |name: &str| {
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}}).to_string()
    };
    let inputs = vec![
        wasmpilot::sandbox::NamedObjects {
            name: "leases".into(),
            objects: vec![lease("l1"), lease("l2")],
        },
        wasmpilot::sandbox::NamedObjects {
            name: "none".into(),
            objects: vec![],
        },
    ];
    let r = sb
        .run_finalize(&f, request(), inputs, Default::default())
        .await
        .unwrap();
    assert!(r.done);
    let status: Value = serde_json::from_str(r.status_info.as_deref().unwrap()).unwrap();
    assert_eq!(
        status["finalizerInputs"],
        json!({"leases": ["l1", "l2"], "none": []})
    );

    let r = sb
        .run_finalize(&f, request(), Vec::new(), Default::default())
        .await
        .unwrap();
    let status: Value = serde_json::from_str(r.status_info.as_deref().unwrap()).unwrap();
    assert_eq!(
        status["finalizerInputs"],
        json!({}),
        "no inputs declared: none"
    );

    let huge = vec![wasmpilot::sandbox::NamedObjects {
        name: "leases".into(),
        objects: vec!["x".repeat(f.limits.memory_bytes / 2 + 1)],
    }];
    let r = sb
        .run_finalize(&f, request(), huge, Default::default())
        .await;
    assert!(matches!(r, Err(RunError::RequestTooLarge { .. })), "{r:?}");
}

/// The finalizer's calls end at the deadline too.
#[tokio::test]
async fn a_sleeping_finalizer_ends_at_its_deadline() {
    let sb = sandbox();
    let bytes = common::component("wasmpilot_test_scripted.wasm");
    let c = sb.compile(&bytes).unwrap();
    let f = sb.finalizer_module("sha256:test", &c).unwrap();
    let resource = json!({
        "apiVersion": "test.wasmpilot.io/v1", "kind": "Scripted",
        "metadata": {"name": "s", "namespace": "default"},
        "spec": {"finalize": {"mode": "sleep", "count": 300_000}}
    });
    let started = std::time::Instant::now();
    let r = sb
        .run_finalize(
            &f,
            wasmpilot::sandbox::FinalizeRequest {
                operator: "scripted".into(),
                resource: resource.to_string(),
                now: "2026-01-01T00:00:00Z".into(),
            },
            Vec::new(),
            Default::default(),
        )
        .await;
    assert!(matches!(r, Err(RunError::DeadlineExceeded(_))), "{r:?}");
    assert!(started.elapsed() < Duration::from_secs(2));
}

/// A worker's error text is bounded (and says so) before it reaches a message.
#[tokio::test]
async fn worker_text_is_bounded_in_errors() {
    let sb = Sandbox::new(SandboxLimits::default()).unwrap();
    let m = scripted(&sb);
    match sb
        .run_sync(&m, request(json!({"mode": "bigfatal", "count": 16 << 20})))
        .await
    {
        Err(e @ RunError::Fatal(_)) => {
            let msg = e.to_string();
            assert!(msg.len() < 2048, "bounded: {} bytes", msg.len());
            assert!(msg.contains("more bytes truncated"), "{}", &msg[..200]);
        }
        other => panic!("expected a fatal error, got {:?}", other.map(|_| ())),
    }
}

/// Status info has a size limit like outputs, which a phase may raise within the ceiling.
#[tokio::test]
async fn status_info_is_capped_and_a_phase_may_raise_the_cap() {
    let sb = Sandbox::new(SandboxLimits {
        max_status_bytes: 64 << 10,
        ..Default::default()
    })
    .unwrap();
    let m = scripted(&sb);
    let big = || request(json!({"mode": "bigstatus", "count": 200 << 10, "next": "Done"}));
    match sb.run_sync(&m, big()).await {
        Err(e @ RunError::StatusTooLarge { limit, .. }) => {
            assert_eq!(limit, 64 << 10);
            assert_eq!(e.reason(), "StatusInfoLimitExceeded");
            assert!(e.to_string().contains("maxStatusKib"), "{e}");
        }
        other => panic!(
            "expected status info too large, got {:?}",
            other.map(|_| ())
        ),
    }
    let raised = m.clone().with_limits(sb.call_limits(&LimitOverride {
        max_status_bytes: Some(512 << 10),
        ..Default::default()
    }));
    assert_eq!(
        sb.run_sync(&raised, big()).await.unwrap().next_phase,
        "Done"
    );
    // 8 MiB is past the 1 MiB ceiling whatever the phase asks for.
    let ceiling = m.with_limits(sb.call_limits(&LimitOverride {
        max_status_bytes: Some(64 << 20),
        ..Default::default()
    }));
    assert!(matches!(
        sb.run_sync(
            &ceiling,
            request(json!({"mode": "bigstatus", "count": 8 << 20}))
        )
        .await,
        Err(RunError::StatusTooLarge { limit, .. }) if limit == 1 << 20
    ));
    // And the WasmOperator's Ready message says so (what it asked, what a call gets).
    assert_eq!(
        sb.capped(&LimitOverride {
            max_status_bytes: Some(64 << 20),
            max_outputs: Some(9_999_999),
            deadline: Some(std::time::Duration::from_secs(360_000)),
            memory_bytes: Some(16 << 20),
            ..Default::default()
        }),
        [
            format!("deadline 360000s → {:?}", sb.limits().max_deadline),
            "maxOutputs 9999999 → 10000".to_string(),
            "maxStatusKib 65536 → 1024".to_string(),
        ]
    );
    assert!(sb
        .capped(&LimitOverride {
            max_status_bytes: Some(512 << 10),
            ..Default::default()
        })
        .is_empty());
}

/// WASI random is seeded from the request: the same request gives the same bytes (a replay
/// decides the same), another request other bytes; a phase that asks for the host's generator
/// gets fresh bytes on every call.
#[tokio::test]
async fn random_bytes_are_seeded_by_the_request_unless_the_phase_asks_for_the_hosts() {
    let sb = sandbox();
    let m = scripted(&sb);
    let random = |now: &str| {
        let mut r = request(json!({"mode": "random", "next": "Done"}));
        r.now = now.into();
        r
    };
    let bytes = |r: wasmpilot::sandbox::SyncResult| -> String {
        let info: Value = serde_json::from_str(r.status_info.as_deref().unwrap()).unwrap();
        info["random"].as_str().unwrap().to_string()
    };
    let first = bytes(
        sb.run_sync(&m, random("2026-01-01T00:00:00Z"))
            .await
            .unwrap(),
    );
    let again = bytes(
        sb.run_sync(&m, random("2026-01-01T00:00:00Z"))
            .await
            .unwrap(),
    );
    let other = bytes(
        sb.run_sync(&m, random("2026-01-01T00:00:01Z"))
            .await
            .unwrap(),
    );
    assert_eq!(first, again, "one request, one decision");
    assert_ne!(first, other, "another request, other bytes");
    let host = m.with_randomness(wasmpilot::sandbox::Randomness::Host);
    let a = bytes(
        sb.run_sync(&host, random("2026-01-01T00:00:00Z"))
            .await
            .unwrap(),
    );
    let b = bytes(
        sb.run_sync(&host, random("2026-01-01T00:00:00Z"))
            .await
            .unwrap(),
    );
    assert_ne!(a, b, "the host's generator gives fresh bytes");
    assert_ne!(a, first);
}

/// A component importing an interface the host does not link (componentize-js's default
/// wasi:http) is refused with the import named and what to do, for either role.
#[test]
fn a_component_importing_what_the_host_lacks_is_named() {
    let sandbox = sandbox();
    let bytes = wat::parse_str(
        r#"(component
             (import "wasi:http/types@0.2.10" (instance))
             (import "wasi:http/outgoing-handler@0.2.10" (instance)))"#,
    )
    .expect("valid component text");
    let component = sandbox.compile(&bytes).expect("compiles");
    let phase = sandbox
        .phase_module("sha256:x", &component)
        .err()
        .expect("refused as a phase worker")
        .to_string();
    assert!(
        phase.contains("imports wasi:http/types@0.2.10, wasi:http/outgoing-handler@0.2.10, which the host does not provide"),
        "{phase}"
    );
    assert!(
        phase.contains("--disable http --disable fetch-event"),
        "{phase}"
    );
    let finalizer = sandbox
        .finalizer_module("sha256:x", &component)
        .err()
        .expect("refused as a finalizer")
        .to_string();
    assert_eq!(finalizer, phase);

    // Premise: a component importing only what the host provides is refused for another
    // reason (no export), not for its imports.
    let bytes = wat::parse_str(r#"(component (import "wasi:random/random@0.2.0" (instance)))"#)
        .expect("valid component text");
    let component = sandbox.compile(&bytes).expect("compiles");
    let e = sandbox
        .phase_module("sha256:y", &component)
        .err()
        .expect("refused: no phase-worker export")
        .to_string();
    assert!(e.contains("does not fit the `phase` world"), "{e}");
}
