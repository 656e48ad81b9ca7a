//! Each operator's share of the host's log, through the real sandbox and a real guest: lines
//! over the share are counted instead of written, the call goes on, another operator's lines are
//! all written. A binary of its own: tracing caches whether a log line is wanted per call site,
//! process-wide, and other tests' threads logging with no subscriber would race that cache
//! against this test's own subscriber.

mod common;

use common::captured_log::CapturedLog;

use common::{scripted_module as scripted, scripted_request as request};
use serde_json::json;
use wasmpilot::sandbox::log_rate::LogRateLimit;
use wasmpilot::sandbox::{Sandbox, SandboxLimits, SyncRequest};

fn lines_dropped(operator: &str) -> u64 {
    wasmpilot::metrics::METRICS
        .worker_log_lines_dropped
        .get_or_create(&wasmpilot::metrics::OperatorLabels {
            operator: operator.into(),
        })
        .get()
}

/// An operator whose workers log more than its share of the host's log (`--worker-log-lines-per-
/// second`): the lines over it are counted and summed up in one line instead of written, the
/// call itself goes on unchanged, and another operator's lines are all written.
#[tokio::test(flavor = "current_thread")]
async fn lines_over_an_operators_share_of_the_host_log_are_dropped_not_its_call() {
    let log = CapturedLog::default();
    let _log = tracing::subscriber::set_default(log.subscriber());
    let sb = Sandbox::new(SandboxLimits {
        log_rate: Some(LogRateLimit {
            lines_per_second: 1,
            burst: 30,
        }),
        ..Default::default()
    })
    .unwrap();
    let m = scripted(&sb);
    let chatty = |operator: &str, n: usize| SyncRequest {
        operator: operator.into(),
        ..request(json!({"mode": "chatty", "count": n, "next": "Done"}))
    };
    let flood_before = lines_dropped("flood");
    let r = sb.run_sync(&m, chatty("flood", 300)).await.unwrap();
    assert_eq!(
        r.next_phase, "Done",
        "the call is not cut by the host's log"
    );
    let text = log.text();
    // The worker sent 301 lines (its step line and 300 chatty ones); the burst of 30 was
    // written, plus one per second the call took.
    let written = text.matches("chatty line").count() + text.matches("scripted step").count();
    assert!(
        (30..=35).contains(&written),
        "{written} lines written:\n{text}"
    );
    let dropped = lines_dropped("flood") - flood_before;
    assert_eq!(
        written as u64 + dropped,
        301,
        "every line written or counted"
    );
    assert!(
        text.lines()
            .any(|l| l.contains("worker log lines not written") && l.contains("share=flood")),
        "the drop is reported with the operator's name (its share, which no tenant shares):\n{text}"
    );
    // Another operator's lines are its own share's.
    let quiet_before = text.matches("chatty line").count();
    sb.run_sync(&m, chatty("quiet", 20)).await.unwrap();
    let text = log.text();
    assert_eq!(text.matches("chatty line").count() - quiet_before, 20);
    assert_eq!(lines_dropped("quiet"), 0);
}
