//! A Secret value a worker was handed never reaches the host's words, not even in part: through
//! the real sandbox and a real guest that prints it on stdout, logs it and writes it on stderr
//! before it traps, each where the host cuts the text (a log line's bound, the stderr tail in the
//! trap's message, a capture's cap). A binary of its own: it reads the host's log (see
//! sandbox_log_share.rs for why).

mod common;

use common::captured_log::CapturedLog;

use common::{scripted_module as scripted, scripted_request as request};
use serde_json::json;
use wasmpilot::redaction::Redactor;
use wasmpilot::sandbox::{RequestDigest, Sandbox, SandboxLimits, SyncCall};

/// 600 bytes, no 12 of them twice: any piece of it found in a text is a leak.
fn secret_value() -> String {
    (0..100).map(|i| format!("v{i:04}-")).collect()
}

/// Whether any 12-byte piece of `value` is in `text`.
fn leaks_in_part(value: &str, text: &str) -> Option<String> {
    (0..=value.len() - 12)
        .map(|i| &value[i..i + 12])
        .find(|piece| text.contains(piece))
        .map(str::to_string)
}

#[tokio::test(flavor = "current_thread")]
async fn a_secret_value_is_redacted_before_any_cut_on_every_path() {
    let log = CapturedLog::default();
    let _log = tracing::subscriber::set_default(log.subscriber());
    let value = secret_value();
    let secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "db"},
                        "stringData": {"password": value}})
    .to_string();
    let redactor = Redactor::of_objects([secret.as_str()]);
    // The log line's bound (8 KiB) falls 300 bytes into the value.
    let count = wasmpilot::worker_text::LOG_LINE_BYTES - 300;
    let leak = json!({"mode": "leak", "message": value, "count": count});

    let run = |limits: SandboxLimits| {
        let redactor = redactor.clone();
        let leak = leak.clone();
        async move {
            let sb = Sandbox::new(limits).unwrap();
            let m = scripted(&sb);
            let req = request(leak);
            let digest = RequestDigest::of_sync(&req);
            let call = SyncCall {
                slot: None,
                redactor,
            };
            sb.run_sync_digested(&m, req, digest, call)
                .await
                .expect_err("the worker traps")
                .to_string()
        }
    };

    // The stderr pipe holds it all; the trap's message keeps the tail of it, which starts
    // inside the value.
    let error = run(SandboxLimits {
        stdio_bytes: 64 << 10,
        ..Default::default()
    })
    .await;
    let text = log.text();
    // The premise: the worker did print, log and write it (redacted), and the tail was cut.
    assert!(
        text.contains("the value: [redacted]"),
        "stdout forwarded:\n{text}"
    );
    assert!(
        text.contains("LLLL[redacted]"),
        "the log line, redacted whole:\n{text}"
    );
    assert!(
        error.contains("the worker trapped") && error.contains("bytes truncated"),
        "{error}"
    );
    assert!(error.contains("[redacted]"), "{error}");
    assert_eq!(leaks_in_part(&value, &text), None, "the host log:\n{text}");
    assert_eq!(
        leaks_in_part(&value, &error),
        None,
        "the trap's message: {error}"
    );

    // A capture cut by its cap inside the value: stdout holds "the value: " and 300 of its bytes.
    let error = run(SandboxLimits {
        stdio_bytes: "the value: ".len() + 300,
        ..Default::default()
    })
    .await;
    let text = log.text();
    // 612 bytes printed ("the value: ", the value, a newline), 311 kept.
    assert!(
        text.contains("dropped_bytes=301"),
        "the capture was cut:\n{text}"
    );
    assert_eq!(leaks_in_part(&value, &text), None, "the host log:\n{text}");
    assert_eq!(leaks_in_part(&value, &error), None, "{error}");
}
