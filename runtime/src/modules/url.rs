//! `url` modules: a component downloaded over HTTPS, pinned by sha256 (required, the URL names
//! no digest). reqwest with rustls (ring), the same HTTP stack the OCI client uses, so URL
//! downloads add no dependency; the body is read in chunks up to a size cap, the whole request
//! has a deadline, and redirects may not leave https nor the host. Addresses follow the host's
//! egress policy ([`crate::egress`]).

use std::time::Duration;

/// Most redirects followed.
const MAX_REDIRECTS: usize = 5;

/// The longest module URL accepted (what common servers and proxies accept).
pub use crate::crd::MAX_URL_BYTES;

/// Why `Url::parse` refused a string (the `url` crate's `ParseError`, named through reqwest).
pub type UrlParseError = <reqwest::Url as std::str::FromStr>::Err;

/// A module URL was refused, or downloading it failed. Messages name the redacted URL, never
/// credentials or the query; HTTP errors are shown with their causes (without the URL).
#[derive(Debug, thiserror::Error)]
pub enum UrlError {
    #[error("not a URL: {source}")]
    NotAUrl {
        #[source]
        source: UrlParseError,
    },
    /// `redacted_url` is the URL as [`redact`] writes it.
    #[error("{redacted_url} is plain http: module URLs must be https")]
    PlainHttp { redacted_url: String },
    #[error("scheme {scheme:?} is not supported: use https")]
    UnsupportedScheme { scheme: String },
    #[error("the URL names no host")]
    NoHost,
    #[error("the URL is {bytes} bytes, more than the limit of {MAX_URL_BYTES}")]
    TooLong { bytes: usize },
    #[error("{0}")]
    Refused(#[from] crate::egress::EgressRefused),
    #[error("HTTP client: {}", with_causes(.source))]
    BuildClient {
        #[source]
        source: reqwest::Error,
    },
    #[error("request failed: {}", with_causes(.source))]
    Request {
        #[source]
        source: reqwest::Error,
    },
    #[error("the server answered {status}")]
    Status { status: reqwest::StatusCode },
    #[error("the component is larger than the limit of {} MiB", .max_bytes >> 20)]
    TooLarge { max_bytes: u64 },
    #[error("reading the body: {}", with_causes(.source))]
    ReadBody {
        #[source]
        source: reqwest::Error,
    },
    #[error("download took longer than {timeout:?}")]
    Timeout { timeout: Duration },
}

/// Why a redirect was not followed (reqwest reports it as the request's cause).
#[derive(Debug, thiserror::Error)]
enum RedirectRefused {
    #[error("redirected away from https")]
    LeftHttps,
}

/// Parses a module URL: `https://` only, unless `allow_http` (tests with an in-process server).
pub fn check_url(raw: &str, allow_http: bool) -> Result<reqwest::Url, UrlError> {
    if raw.len() > MAX_URL_BYTES {
        return Err(UrlError::TooLong { bytes: raw.len() });
    }
    let url = reqwest::Url::parse(raw).map_err(|source| UrlError::NotAUrl { source })?;
    match url.scheme() {
        "https" => {}
        "http" if allow_http => {}
        "http" => {
            return Err(UrlError::PlainHttp {
                redacted_url: redact(raw),
            })
        }
        other => {
            return Err(UrlError::UnsupportedScheme {
                scheme: other.to_string(),
            })
        }
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(UrlError::NoHost);
    }
    Ok(url)
}

/// The URL without credentials, query or fragment, for messages and logs.
pub fn redact(raw: &str) -> String {
    match reqwest::Url::parse(raw) {
        Ok(mut u) => {
            let _ = u.set_username("");
            let _ = u.set_password(None);
            let had_query = u.query().is_some();
            u.set_query(None);
            u.set_fragment(None);
            let mut s = u.to_string();
            if had_query {
                s.push_str("?…");
            }
            s
        }
        Err(_) => "(unparseable URL)".into(),
    }
}

/// Downloads the body of `raw`, connecting only where `egress` allows, refusing more than
/// `max_bytes` and anything slower than `timeout`.
pub async fn fetch(
    raw: &str,
    allow_http: bool,
    egress: &crate::egress::EgressPolicy,
    max_bytes: u64,
    timeout: Duration,
) -> Result<Vec<u8>, UrlError> {
    fetch_reserving(raw, allow_http, egress, max_bytes, timeout, async |_| ())
        .await
        .map(|(body, ())| body)
}

/// [`fetch`], awaiting `reserve(size)` once the server has answered, before the body is read
/// (`size`: its `Content-Length`, else `max_bytes`). What it gives (a share of a budget) comes
/// back with the body, and its wait does not count against `timeout`: a server that answers
/// nothing holds no share.
pub async fn fetch_reserving<R>(
    raw: &str,
    allow_http: bool,
    egress: &crate::egress::EgressPolicy,
    max_bytes: u64,
    timeout: Duration,
    reserve: impl AsyncFnOnce(u64) -> R,
) -> Result<(Vec<u8>, R), UrlError> {
    let url = check_url(raw, allow_http)?;
    egress.check_url(&url)?;
    super::install_crypto_provider();
    // No client-wide timeout: it would count the wait for `reserve`. The two waits on the
    // server (its answer, then the body) share `timeout` below.
    let client = egress
        .client_builder(MAX_REDIRECTS, move |to| {
            if to.scheme() != "https" && !allow_http {
                return Err(Box::new(RedirectRefused::LeftHttps));
            }
            Ok(())
        })
        .connect_timeout(timeout.min(Duration::from_secs(10)))
        .user_agent(concat!("wasmpilot/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(|e| UrlError::BuildClient {
            source: e.without_url(),
        })?;
    let asked = std::time::Instant::now();
    let answer = async {
        let response = client
            .get(url)
            .send()
            .await
            .map_err(|e| UrlError::Request {
                source: e.without_url(),
            })?;
        let status = response.status();
        if !status.is_success() {
            return Err(UrlError::Status { status });
        }
        if let Some(len) = response.content_length() {
            if len > max_bytes {
                return Err(UrlError::TooLarge { max_bytes });
            }
        }
        Ok(response)
    };
    let mut response = tokio::time::timeout(timeout, answer)
        .await
        .map_err(|_| UrlError::Timeout { timeout })??;
    let talked = asked.elapsed();
    let reserved = reserve(response.content_length().unwrap_or(max_bytes)).await;
    let body = async {
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(|e| UrlError::ReadBody {
            source: e.without_url(),
        })? {
            if body.len() as u64 + chunk.len() as u64 > max_bytes {
                return Err(UrlError::TooLarge { max_bytes });
            }
            body.extend_from_slice(&chunk);
        }
        Ok(body)
    };
    // This one also bounds a slow trickle of chunks.
    let body = tokio::time::timeout(timeout.saturating_sub(talked), body)
        .await
        .map_err(|_| UrlError::Timeout { timeout })??;
    Ok((body, reserved))
}

/// An HTTP error with its causes, for messages: reqwest's own Display says little ("error
/// sending request") and the cause says why. The errors stored in [`UrlError`] have had their
/// URL removed (reqwest puts the full URL, query and all, in its Display; messages name the
/// redacted one instead).
pub(crate) fn with_causes(e: &reqwest::Error) -> String {
    let mut msg = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        msg.push_str(": ");
        msg.push_str(&s.to_string());
        source = s.source();
    }
    msg
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    /// Serves `respond(request path)` to every connection: (status line, and any further header
    /// lines after `\r\n`; body; delay).
    async fn serve(
        respond: impl Fn(&str) -> (&'static str, Vec<u8>, Duration) + Send + Sync + 'static,
    ) -> String {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let respond = std::sync::Arc::new(respond);
        tokio::spawn(async move {
            loop {
                let Ok((mut sock, _)) = listener.accept().await else {
                    return;
                };
                let respond = respond.clone();
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 4096];
                    let n = sock.read(&mut buf).await.unwrap_or(0);
                    let head = String::from_utf8_lossy(&buf[..n]).to_string();
                    let path = head.split_whitespace().nth(1).unwrap_or("/").to_string();
                    let (status, body, delay) = respond(&path);
                    tokio::time::sleep(delay).await;
                    let header = format!(
                        "HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                        body.len()
                    );
                    let _ = sock.write_all(header.as_bytes()).await;
                    let _ = sock.write_all(&body).await;
                });
            }
        });
        format!("http://{addr}")
    }

    #[tokio::test]
    async fn downloads_within_limits() {
        let base = serve(|path| match path {
            "/ok.wasm" => ("200 OK", b"component".to_vec(), Duration::ZERO),
            "/big.wasm" => ("200 OK", vec![0u8; 4096], Duration::ZERO),
            "/slow.wasm" => ("200 OK", b"late".to_vec(), Duration::from_secs(5)),
            _ => ("404 Not Found", Vec::new(), Duration::ZERO),
        })
        .await;
        let t = Duration::from_secs(5);
        let ok = fetch(&format!("{base}/ok.wasm"), true, &lo(), 1024, t).await;
        assert_eq!(ok.unwrap(), b"component");
        let big = fetch(&format!("{base}/big.wasm"), true, &lo(), 1024, t).await;
        let e = big.unwrap_err();
        assert!(matches!(e, UrlError::TooLarge { .. }), "{e}");
        assert!(e.to_string().contains("larger than the limit"), "{e}");
        let missing = fetch(
            &format!("{base}/nope.wasm?token=secret"),
            true,
            &lo(),
            1024,
            t,
        )
        .await;
        let e = missing.unwrap_err().to_string();
        assert!(e.contains("404"), "{e}");
        let slow = fetch(
            &format!("{base}/slow.wasm"),
            true,
            &lo(),
            1024,
            Duration::from_millis(300),
        )
        .await;
        let e = slow.unwrap_err().to_string();
        assert!(e.contains("longer than") || e.contains("timed out"), "{e}");
        // Plain http needs the explicit test switch.
        let refused = fetch(&format!("{base}/ok.wasm"), false, &lo(), 1024, t).await;
        assert!(refused.unwrap_err().to_string().contains("must be https"));
    }

    /// The policy of these tests: loopback allowed (the in-process server).
    fn lo() -> crate::egress::EgressPolicy {
        crate::egress::EgressPolicy::allowing(&["127.0.0.1".into()]).expect("valid")
    }

    #[tokio::test]
    async fn only_addresses_and_redirects_the_policy_allows() {
        let base = serve(|path| match path {
            "/ok.wasm" => ("200 OK", b"component".to_vec(), Duration::ZERO),
            "/same-host" => (
                "302 Found\r\nLocation: /ok.wasm",
                Vec::new(),
                Duration::ZERO,
            ),
            "/to-metadata" => (
                "302 Found\r\nLocation: http://169.254.169.254/latest/meta-data/",
                Vec::new(),
                Duration::ZERO,
            ),
            _ => ("404 Not Found", Vec::new(), Duration::ZERO),
        })
        .await;
        let t = Duration::from_secs(5);
        let public_only = crate::egress::EgressPolicy::default();
        let e = fetch(&format!("{base}/ok.wasm"), true, &public_only, 1024, t)
            .await
            .expect_err("loopback refused");
        assert!(
            matches!(e, UrlError::Refused(_)) && e.to_string().contains("a loopback address"),
            "{e}"
        );
        let followed = fetch(&format!("{base}/same-host"), true, &lo(), 1024, t).await;
        assert_eq!(followed.expect("same host"), b"component");
        let e = fetch(&format!("{base}/to-metadata"), true, &lo(), 1024, t)
            .await
            .expect_err("not followed")
            .to_string();
        assert!(
            e.contains("to another host (169.254.169.254) is not followed"),
            "{e}"
        );
        let e = fetch(
            "http://169.254.169.254/latest/meta-data/",
            true,
            &lo(),
            1024,
            t,
        )
        .await
        .expect_err("link-local refused before connecting")
        .to_string();
        assert!(e.contains("a link-local address"), "{e}");
    }

    #[tokio::test]
    async fn connection_errors_do_not_leak_the_query() {
        // Nothing listens on port 9 of loopback (discard; not run here).
        let e = fetch(
            "http://user:pw@127.0.0.1:9/x.wasm?token=secret",
            true,
            &lo(),
            1024,
            Duration::from_secs(5),
        )
        .await
        .unwrap_err()
        .to_string();
        assert!(!e.contains("secret") && !e.contains("pw"), "{e}");
    }

    #[test]
    fn urls_are_checked_and_redacted() {
        assert!(check_url("https://example.com/x.wasm", false).is_ok());
        assert!(check_url("http://example.com/x.wasm", false).is_err());
        assert!(check_url("http://example.com/x.wasm", true).is_ok());
        assert_eq!(
            check_url("http://user:pw@example.com/x.wasm?sig=abc", false)
                .unwrap_err()
                .to_string(),
            "http://example.com/x.wasm?… is plain http: module URLs must be https"
        );
        assert_eq!(
            check_url("ftp://example.com/x.wasm", true)
                .unwrap_err()
                .to_string(),
            "scheme \"ftp\" is not supported: use https"
        );
        assert!(matches!(
            check_url("not a url", true),
            Err(UrlError::NotAUrl { .. })
        ));
        assert_eq!(
            redact("https://user:pw@example.com/x.wasm?sig=abc#f"),
            "https://example.com/x.wasm?…"
        );
    }
}
