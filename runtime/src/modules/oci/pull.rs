//! Pulling a Wasm artifact with the OCI distribution API's reads (the manifest, an index's Wasm
//! entry, the token handshake, the layer), over an HTTP client the egress policy checks.
//!
//! The registry is the definition's to name, and so are the hosts it points on to: its token
//! service (the `realm` of its `WWW-Authenticate`) and its blob storage (a redirect). Each is
//! connected to only where the host's egress policy allows, every answer is read up to a cap,
//! and no answer's body reaches a message beyond the registry's error code.

use super::{wasm_layer, wasm_platform, Auth, OciError, Step, USER_AGENT};
use crate::egress::{EgressPolicy, Redirects};
use crate::modules::digest_of;
use oci_client::manifest::{
    OciDescriptor, OciImageIndex, OciImageManifest, IMAGE_MANIFEST_LIST_MEDIA_TYPE,
    IMAGE_MANIFEST_MEDIA_TYPE, OCI_IMAGE_INDEX_MEDIA_TYPE, OCI_IMAGE_MEDIA_TYPE,
};
use oci_client::Reference;
use reqwest::header::{ACCEPT, CONTENT_TYPE, WWW_AUTHENTICATE};
use reqwest::{StatusCode, Url};
use std::time::Duration;

/// The largest manifest read: the 4 MiB the distribution spec has registries accept.
pub const MAX_MANIFEST_BYTES: u64 = 4 << 20;

/// The largest token service answer read (tokens are a few KiB).
const MAX_TOKEN_BYTES: u64 = 64 << 10;

/// The most of an error answer read, for the registry's error code.
const MAX_ERROR_BYTES: u64 = 16 << 10;

/// Most redirects of one request (a blob's redirect to its storage is usually one).
const MAX_REDIRECTS: usize = 5;

/// Registry-given text put into a message (a realm that is not a URL, an error code) is cut to
/// this many characters.
const MAX_QUOTED_CHARS: usize = 120;

/// The manifest kinds asked for, the index kinds among them.
const MANIFEST_MEDIA_TYPES: [&str; 4] = [
    OCI_IMAGE_MEDIA_TYPE,
    IMAGE_MANIFEST_MEDIA_TYPE,
    OCI_IMAGE_INDEX_MEDIA_TYPE,
    IMAGE_MANIFEST_LIST_MEDIA_TYPE,
];
const INDEX_MEDIA_TYPES: [&str; 2] = [OCI_IMAGE_INDEX_MEDIA_TYPE, IMAGE_MANIFEST_LIST_MEDIA_TYPE];

/// Why a redirect was not followed (reqwest reports it as the request's cause).
#[derive(Debug, thiserror::Error)]
#[error("redirected away from https")]
struct LeftHttps;

/// One pull's conversation with a registry: where it is, the repository, and what its requests
/// carry (the pull Secret's credentials, or the token its token service gave for them).
pub(super) struct Registry<'a> {
    http: reqwest::Client,
    base: Url,
    repository: String,
    auth: &'a Auth,
    insecure: bool,
    egress: &'a EgressPolicy,
    /// The token the registry's token service gave, once asked.
    token: Option<String>,
}

impl<'a> Registry<'a> {
    /// The registry of `reference`, over https (plain http when `insecure`), connecting only
    /// where `egress` allows.
    pub(super) fn new(
        reference: &Reference,
        auth: &'a Auth,
        insecure: bool,
        egress: &'a EgressPolicy,
        connect_timeout: Duration,
    ) -> Result<Self, OciError> {
        let scheme = if insecure { "http" } else { "https" };
        let registry = reference.resolve_registry();
        let base = Url::parse(&format!("{scheme}://{registry}/"))
            .ok()
            .filter(|u| u.path() == "/" && u.host_str().is_some_and(|h| !h.is_empty()))
            .ok_or_else(|| OciError::RegistryNotAHost {
                registry: quoted(registry),
            })?;
        egress.check_url(&base)?;
        let http = egress
            .client_builder_redirecting(Redirects::AnyAllowedHost, MAX_REDIRECTS, move |to| {
                if to.scheme() != "https" && !insecure {
                    return Err(Box::new(LeftHttps));
                }
                Ok(())
            })
            .connect_timeout(connect_timeout)
            .user_agent(USER_AGENT)
            .build()
            .map_err(|e| OciError::BuildClient {
                source: e.without_url(),
            })?;
        Ok(Registry {
            http,
            base,
            repository: reference.repository().to_string(),
            auth,
            insecure,
            egress,
            token: None,
        })
    }

    /// The manifest `reference` names (an index resolved to its Wasm entry), its single Wasm
    /// layer checked against `max_bytes`, and the digest of the manifest that names the layer.
    pub(super) async fn wasm_layer(
        &mut self,
        reference: &Reference,
        max_bytes: u64,
    ) -> Result<(OciDescriptor, String), OciError> {
        let target = reference
            .digest()
            .or(reference.tag())
            .unwrap_or("latest")
            .to_string();
        let (body, digest, index) = self.manifest(&target, reference.digest()).await?;
        let (body, digest) = if index {
            let index: OciImageIndex = parse(&body, Step::Manifest)?;
            let entry = wasm_platform(&index.manifests).ok_or_else(|| OciError::NoWasmEntry {
                platforms: index
                    .manifests
                    .iter()
                    .take(super::MAX_LISTED)
                    .map(|m| {
                        m.platform.as_ref().map_or("(none)".to_string(), |p| {
                            quoted(&p.architecture.to_string())
                        })
                    })
                    .collect(),
            })?;
            let (body, digest, nested) = self.manifest(&entry, Some(&entry)).await?;
            if nested {
                return Err(OciError::NestedIndex);
            }
            (body, digest)
        } else {
            (body, digest)
        };
        let manifest: OciImageManifest = parse(&body, Step::Manifest)?;
        let layer = wasm_layer(&manifest)?.clone();
        if layer.size < 0 || layer.size as u64 > max_bytes {
            return Err(OciError::LayerTooLarge {
                size: layer.size,
                max_bytes,
            });
        }
        if !is_sha256(&layer.digest) {
            return Err(OciError::LayerDigestNotSha256 {
                digest: quoted(&layer.digest),
            });
        }
        Ok((layer, digest))
    }

    /// The layer's bytes, exactly as many as it declares and of the digest it declares.
    pub(super) async fn layer(&mut self, layer: &OciDescriptor) -> Result<Vec<u8>, OciError> {
        let url = self.url(&format!("blobs/{}", layer.digest))?;
        let response = self.get(url, None, Step::Layer).await?;
        let size = u64::try_from(layer.size).unwrap_or(0);
        let bytes = read_capped(response, size, Step::Layer).await?;
        if bytes.len() as u64 != size {
            return Err(OciError::LayerSizeMismatch {
                expected: size,
                actual: bytes.len() as u64,
            });
        }
        let actual = digest_of(&bytes);
        if actual != layer.digest {
            return Err(OciError::LayerDigestMismatch {
                expected: layer.digest.clone(),
                actual,
            });
        }
        Ok(bytes)
    }

    /// A manifest's body, its digest (checked against `expected` when the reference pins one)
    /// and whether it is an index.
    async fn manifest(
        &mut self,
        target: &str,
        expected: Option<&str>,
    ) -> Result<(Vec<u8>, String, bool), OciError> {
        if let Some(expected) = expected {
            if !is_sha256(expected) {
                return Err(OciError::ManifestDigestNotSha256 {
                    digest: quoted(expected),
                });
            }
        }
        let url = self.url(&format!("manifests/{target}"))?;
        let accept = MANIFEST_MEDIA_TYPES.join(", ");
        let response = self.get(url, Some(&accept), Step::Manifest).await?;
        let content_type = response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split(';').next())
            .map(|v| v.trim().to_string());
        let body = read_capped(response, MAX_MANIFEST_BYTES, Step::Manifest).await?;
        let digest = digest_of(&body);
        if let Some(expected) = expected {
            if digest != expected {
                return Err(OciError::ManifestDigestMismatch {
                    expected: expected.to_string(),
                    actual: digest,
                });
            }
        }
        #[derive(serde::Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Shape {
            media_type: Option<String>,
            manifests: Option<serde::de::IgnoredAny>,
            layers: Option<serde::de::IgnoredAny>,
        }
        let shape: Shape = parse(&body, Step::Manifest)?;
        let named_index = |t: Option<&str>| t.is_some_and(|t| INDEX_MEDIA_TYPES.contains(&t));
        let index = named_index(content_type.as_deref())
            || named_index(shape.media_type.as_deref())
            || (shape.manifests.is_some() && shape.layers.is_none());
        Ok((body, digest, index))
    }

    /// `<registry>/v2/<repository>/<path>`.
    fn url(&self, path: &str) -> Result<Url, OciError> {
        self.base
            .join(&format!("v2/{}/{path}", self.repository))
            .map_err(|_| OciError::RegistryNotAHost {
                registry: quoted(self.base.as_str()),
            })
    }

    /// GETs `url`; a `401` with a bearer challenge is answered once by asking the registry's
    /// token service (with the pull Secret's credentials, if any) and asking again. Anything
    /// but a success is an error naming `step`.
    async fn get(
        &mut self,
        url: Url,
        accept: Option<&str>,
        step: Step,
    ) -> Result<reqwest::Response, OciError> {
        let mut response = self.send(url.clone(), accept, step).await?;
        if response.status() == StatusCode::UNAUTHORIZED && self.token.is_none() {
            let challenge = response
                .headers()
                .get(WWW_AUTHENTICATE)
                .and_then(|v| v.to_str().ok())
                .and_then(bearer_challenge);
            if let Some(challenge) = challenge {
                self.token = Some(self.ask_token(challenge).await?);
                response = self.send(url, accept, step).await?;
            }
        }
        self.checked(response, step).await
    }

    async fn send(
        &self,
        url: Url,
        accept: Option<&str>,
        step: Step,
    ) -> Result<reqwest::Response, OciError> {
        let mut request = self.http.get(url);
        if let Some(accept) = accept {
            request = request.header(ACCEPT, accept);
        }
        request = match (&self.token, self.auth) {
            (Some(token), _) | (None, Auth::Bearer(token)) => request.bearer_auth(token),
            (None, Auth::Basic(user, password)) => request.basic_auth(user, Some(password)),
            (None, Auth::Anonymous) => request,
        };
        request.send().await.map_err(|e| OciError::Request {
            step,
            source: e.without_url(),
        })
    }

    /// The response if it is a success; else the error, with the registry's error code.
    async fn checked(
        &self,
        response: reqwest::Response,
        step: Step,
    ) -> Result<reqwest::Response, OciError> {
        let status = response.status();
        if status.is_success() {
            return Ok(response);
        }
        if status == StatusCode::UNAUTHORIZED {
            return Err(OciError::Unauthorized {
                step,
                with_credentials: !matches!(self.auth, Auth::Anonymous),
            });
        }
        let code = read_capped(response, MAX_ERROR_BYTES, step)
            .await
            .ok()
            .and_then(|body| error_code(&body));
        Err(OciError::Status { step, status, code })
    }

    /// A pull token for the repository from the token service `challenge` names.
    async fn ask_token(&self, challenge: BearerChallenge) -> Result<String, OciError> {
        let refused = |problem: &'static str| OciError::TokenRealm {
            realm: quoted(&challenge.realm),
            problem,
        };
        let mut realm = Url::parse(&challenge.realm).map_err(|_| refused("is not a URL"))?;
        match realm.scheme() {
            "https" => {}
            "http" if self.insecure => {}
            _ => return Err(refused("is not https")),
        }
        if realm.host_str().is_none_or(str::is_empty) {
            return Err(refused("names no host"));
        }
        self.egress.check_url(&realm)?;
        {
            let mut query = realm.query_pairs_mut();
            if let Some(service) = &challenge.service {
                query.append_pair("service", service);
            }
            query.append_pair("scope", &format!("repository:{}:pull", self.repository));
        }
        let mut request = self.http.get(realm.clone());
        if let Auth::Basic(user, password) = self.auth {
            let loopback = realm.host_str().is_some_and(|h| {
                super::is_loopback_host(h.trim_start_matches('[').trim_end_matches(']'))
            });
            if realm.scheme() != "https" && !loopback {
                return Err(refused(
                    "is plain http off the host's loopback: the pull Secret's credentials are not sent there",
                ));
            }
            request = request.basic_auth(user, Some(password));
        }
        let response = request.send().await.map_err(|e| OciError::Request {
            step: Step::Token,
            source: e.without_url(),
        })?;
        let response = self.checked(response, Step::Token).await?;
        let body = read_capped(response, MAX_TOKEN_BYTES, Step::Token).await?;
        #[derive(serde::Deserialize)]
        struct Answer {
            token: Option<String>,
            access_token: Option<String>,
        }
        let answer: Answer = parse(&body, Step::Token)?;
        answer
            .token
            .or(answer.access_token)
            .filter(|t| !t.is_empty())
            .ok_or(OciError::NoToken)
    }
}

/// The body, refused past `max` bytes (by its `Content-Length` before reading, and as read).
async fn read_capped(
    mut response: reqwest::Response,
    max: u64,
    step: Step,
) -> Result<Vec<u8>, OciError> {
    if response.content_length().is_some_and(|len| len > max) {
        return Err(OciError::TooLarge {
            step,
            max_bytes: max,
        });
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(|e| OciError::Request {
        step,
        source: e.without_url(),
    })? {
        if body.len() as u64 + chunk.len() as u64 > max {
            return Err(OciError::TooLarge {
                step,
                max_bytes: max,
            });
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// Parses JSON; an error says where it broke, never what the registry wrote there.
fn parse<T: serde::de::DeserializeOwned>(body: &[u8], step: Step) -> Result<T, OciError> {
    serde_json::from_slice(body).map_err(|e| OciError::NotJson {
        step,
        line: e.line(),
        column: e.column(),
    })
}

/// `sha256:` and 64 lowercase hex digits.
fn is_sha256(digest: &str) -> bool {
    digest.strip_prefix("sha256:").is_some_and(|hex| {
        hex.len() == 64 && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    })
}

/// The first error code of a distribution API error body (`{"errors":[{"code":"…"}]}`), if it
/// is one (capitals and underscores).
fn error_code(body: &[u8]) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Envelope {
        errors: Vec<Entry>,
    }
    #[derive(serde::Deserialize)]
    struct Entry {
        code: String,
    }
    let envelope: Envelope = serde_json::from_slice(body).ok()?;
    let code = envelope.errors.into_iter().next()?.code;
    (!code.is_empty()
        && code.len() <= 64
        && code.bytes().all(|b| b.is_ascii_uppercase() || b == b'_'))
    .then_some(code)
}

/// Registry-given text for a message: cut to [`MAX_QUOTED_CHARS`], control characters dropped.
pub(super) fn quoted(text: &str) -> String {
    let mut out: String = text
        .chars()
        .filter(|c| !c.is_control())
        .take(MAX_QUOTED_CHARS)
        .collect();
    if text.chars().count() > MAX_QUOTED_CHARS {
        out.push('…');
    }
    out
}

/// A `WWW-Authenticate: Bearer realm="…",service="…"` challenge.
#[derive(Debug, PartialEq, Eq)]
struct BearerChallenge {
    realm: String,
    service: Option<String>,
}

/// The bearer challenge of a `WWW-Authenticate` value, if it is one with a realm.
fn bearer_challenge(header: &str) -> Option<BearerChallenge> {
    let (scheme, params) = header.trim().split_once(char::is_whitespace)?;
    if !scheme.eq_ignore_ascii_case("bearer") {
        return None;
    }
    let mut realm = None;
    let mut service = None;
    for (key, value) in auth_params(params) {
        match key.to_ascii_lowercase().as_str() {
            "realm" => realm = Some(value),
            "service" => service = Some(value),
            _ => {}
        }
    }
    Some(BearerChallenge {
        realm: realm?,
        service,
    })
}

/// `key=value` and `key="quoted \" value"` pairs, comma-separated (RFC 9110's auth-param).
fn auth_params(params: &str) -> Vec<(String, String)> {
    let mut pairs = Vec::new();
    let mut rest = params.trim_start();
    while let Some((key, after)) = rest.split_once('=') {
        let key = key.trim().trim_start_matches(',').trim().to_string();
        let after = after.trim_start();
        let (value, remaining) = if let Some(quoted) = after.strip_prefix('"') {
            let mut value = String::new();
            let mut chars = quoted.char_indices();
            let mut end = quoted.len();
            while let Some((i, c)) = chars.next() {
                match c {
                    '\\' => {
                        if let Some((_, escaped)) = chars.next() {
                            value.push(escaped);
                        }
                    }
                    '"' => {
                        end = i + 1;
                        break;
                    }
                    c => value.push(c),
                }
            }
            (value, &quoted[end..])
        } else {
            let end = after.find(',').unwrap_or(after.len());
            (after[..end].trim().to_string(), &after[end..])
        };
        pairs.push((key, value));
        rest = remaining.trim_start().trim_start_matches(',').trim_start();
    }
    pairs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_challenges_parse_as_registries_write_them() {
        assert_eq!(
            bearer_challenge(
                r#"Bearer realm="https://auth.docker.io/token",service="registry.docker.io",scope="repository:library/ubuntu:pull""#
            ),
            Some(BearerChallenge {
                realm: "https://auth.docker.io/token".into(),
                service: Some("registry.docker.io".into()),
            })
        );
        assert_eq!(
            bearer_challenge(r#"bearer service=ghcr.io, realm="https://ghcr.io/token""#),
            Some(BearerChallenge {
                realm: "https://ghcr.io/token".into(),
                service: Some("ghcr.io".into()),
            })
        );
        assert_eq!(
            bearer_challenge(r#"Bearer realm="https://a/t\"x""#).map(|c| c.realm),
            Some(r#"https://a/t"x"#.into())
        );
        assert_eq!(bearer_challenge(r#"Basic realm="wasmpilot-test""#), None);
        assert_eq!(bearer_challenge(r#"Bearer service="x""#), None);
        assert_eq!(bearer_challenge(""), None);
    }

    #[test]
    fn only_the_registrys_error_code_is_quoted() {
        assert_eq!(
            error_code(br#"{"errors":[{"code":"MANIFEST_UNKNOWN","message":"manifest unknown"}]}"#),
            Some("MANIFEST_UNKNOWN".into())
        );
        assert_eq!(
            error_code(br#"{"errors":[{"code":"the secret is 42"}]}"#),
            None
        );
        assert_eq!(error_code(b"<html>internal page</html>"), None);
    }

    #[test]
    fn digests_and_quotes() {
        let hex = "a".repeat(64);
        assert!(is_sha256(&format!("sha256:{hex}")));
        assert!(!is_sha256(&format!("sha512:{hex}")));
        assert!(!is_sha256(&format!("sha256:{}", "A".repeat(64))));
        let long = "x".repeat(500);
        assert_eq!(quoted(&long).chars().count(), MAX_QUOTED_CHARS + 1);
        assert_eq!(quoted("a\nb\u{1b}c"), "abc");
    }

    /// An in-process registry: what it was asked (path, `Host`, `Authorization`), and its
    /// answers by path and authorization.
    mod against_a_registry {
        use super::super::super::{pull, Auth, OciError};
        use crate::egress::EgressPolicy;
        use crate::modules::digest_of;
        use std::sync::{Arc, Mutex};
        use std::time::Duration;
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        use tokio::net::TcpListener;

        #[derive(Clone, Debug)]
        struct Asked {
            path: String,
            host: String,
            authorization: Option<String>,
        }

        /// An answer: status line with any further header lines, body, and whether the body
        /// goes without a `Content-Length` (read to the connection's end).
        type Answer = (String, Vec<u8>, bool);

        type Respond = dyn Fn(&str, Option<&str>, &str) -> Answer + Send + Sync;

        async fn serve(respond: Arc<Respond>) -> (String, Arc<Mutex<Vec<Asked>>>) {
            let listener = TcpListener::bind("127.0.0.1:0").await.expect("bound");
            let addr = listener.local_addr().expect("an address");
            let asked: Arc<Mutex<Vec<Asked>>> = Arc::default();
            let log = asked.clone();
            tokio::spawn(async move {
                loop {
                    let Ok((mut sock, _)) = listener.accept().await else {
                        return;
                    };
                    let (respond, log) = (respond.clone(), log.clone());
                    let registry = addr.to_string();
                    tokio::spawn(async move {
                        let mut buf = vec![0u8; 8192];
                        let n = sock.read(&mut buf).await.unwrap_or(0);
                        let head = String::from_utf8_lossy(&buf[..n]).to_string();
                        let path = head.split_whitespace().nth(1).unwrap_or("/").to_string();
                        let header = |name: &str| {
                            head.lines().find_map(|l| {
                                let (k, v) = l.split_once(':')?;
                                k.eq_ignore_ascii_case(name).then(|| v.trim().to_string())
                            })
                        };
                        let (host, authorization) = (header("host"), header("authorization"));
                        log.lock().expect("the log").push(Asked {
                            path: path.clone(),
                            host: host.clone().unwrap_or_default(),
                            authorization: authorization.clone(),
                        });
                        let (status, body, to_the_end) =
                            respond(&path, authorization.as_deref(), &registry);
                        let length = if to_the_end {
                            String::new()
                        } else {
                            format!("Content-Length: {}\r\n", body.len())
                        };
                        let head =
                            format!("HTTP/1.1 {status}\r\n{length}Connection: close\r\n\r\n");
                        let _ = sock.write_all(head.as_bytes()).await;
                        let _ = sock.write_all(&body).await;
                    });
                }
            });
            (addr.to_string(), asked)
        }

        fn lo() -> EgressPolicy {
            EgressPolicy::allowing(&["127.0.0.1".into()]).expect("valid")
        }

        const COMPONENT: &[u8] = b"the component's bytes";
        const TOKEN: &str = "a-pull-token";

        fn manifest(layer: &[u8]) -> Vec<u8> {
            serde_json::to_vec(&serde_json::json!({
                "schemaVersion": 2,
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "config": {"mediaType": "application/vnd.wasm.config.v0+json",
                           "digest": digest_of(b"{}"), "size": 2},
                "layers": [{"mediaType": "application/wasm",
                            "digest": digest_of(layer), "size": layer.len()}],
            }))
            .expect("JSON")
        }

        fn ok(body: Vec<u8>) -> Answer {
            ("200 OK".into(), body, false)
        }

        async fn pulled(reference: &str, auth: &Auth) -> Result<Vec<u8>, OciError> {
            pull(
                reference,
                auth,
                true,
                &lo(),
                1 << 20,
                Duration::from_secs(10),
            )
            .await
            .map(|p| p.bytes)
        }

        /// A token-service registry whose blobs live on another host (`localhost` for the
        /// registry's `127.0.0.1`): the pull asks the token service with the pull Secret's
        /// credentials, pulls with the token, and the storage host gets no credentials.
        #[tokio::test]
        async fn a_token_registry_with_blob_storage_elsewhere_pulls() {
            let layer_path = format!("/v2/team/worker/blobs/{}", digest_of(COMPONENT));
            let respond: Arc<Respond> = Arc::new(move |path, authorization, registry| {
                let port = registry
                    .rsplit_once(':')
                    .map(|(_, p)| p)
                    .unwrap_or_default();
                let bearer = authorization == Some(&format!("Bearer {TOKEN}"));
                match path {
                    p if p.starts_with("/token?") => {
                        if authorization.is_some_and(|a| a.starts_with("Basic ")) {
                            ok(format!(r#"{{"token":"{TOKEN}"}}"#).into_bytes())
                        } else {
                            ("401 Unauthorized".into(), Vec::new(), false)
                        }
                    }
                    "/storage/blob" => ok(COMPONENT.to_vec()),
                    _ if !bearer => (
                        format!("401 Unauthorized\r\nWWW-Authenticate: Bearer realm=\"http://{registry}/token\",service=\"test-registry\""),
                        br#"{"errors":[{"code":"UNAUTHORIZED"}]}"#.to_vec(),
                        false,
                    ),
                    "/v2/team/worker/manifests/v1" => ok(manifest(COMPONENT)),
                    p if p == layer_path => (
                        format!("307 Temporary Redirect\r\nLocation: http://localhost:{port}/storage/blob"),
                        Vec::new(),
                        false,
                    ),
                    _ => ("404 Not Found".into(), Vec::new(), false),
                }
            });
            let (registry, asked) = serve(respond).await;
            let auth = Auth::Basic("user".into(), "password".into());
            let bytes = pulled(&format!("{registry}/team/worker:v1"), &auth)
                .await
                .expect("pulled");
            assert_eq!(bytes, COMPONENT);
            let asked = asked.lock().expect("the log").clone();
            let token = asked
                .iter()
                .find(|a| a.path.starts_with("/token?"))
                .expect("the token service was asked");
            assert!(
                token
                    .path
                    .contains("scope=repository%3Ateam%2Fworker%3Apull")
                    && token.path.contains("service=test-registry"),
                "{token:?}"
            );
            let storage = asked
                .iter()
                .find(|a| a.path == "/storage/blob")
                .expect("the redirect was followed");
            assert!(storage.host.starts_with("localhost:"), "{storage:?}");
            assert_eq!(
                storage.authorization, None,
                "credentials went to another host"
            );
        }

        /// An image index resolves to its `wasm` entry, fetched by digest and verified; the
        /// manifest digest reported is that entry's.
        #[tokio::test]
        async fn an_index_resolves_to_its_wasm_entry() {
            let wasm = manifest(COMPONENT);
            let wasm_digest = digest_of(&wasm);
            let other = manifest(b"a container image, say");
            let index = serde_json::to_vec(&serde_json::json!({
                "schemaVersion": 2,
                "mediaType": "application/vnd.oci.image.index.v1+json",
                "manifests": [
                    {"mediaType": "application/vnd.oci.image.manifest.v1+json",
                     "digest": digest_of(&other), "size": other.len(),
                     "platform": {"architecture": "amd64", "os": "linux"}},
                    {"mediaType": "application/vnd.oci.image.manifest.v1+json",
                     "digest": wasm_digest, "size": wasm.len(),
                     "platform": {"architecture": "wasm", "os": "wasip2"}},
                ],
            }))
            .expect("JSON");
            let entry_path = format!("/v2/multi/worker/manifests/{wasm_digest}");
            let layer_path = format!("/v2/multi/worker/blobs/{}", digest_of(COMPONENT));
            let respond: Arc<Respond> = Arc::new(move |path, _, _| match path {
                "/v2/multi/worker/manifests/v1" => (
                    "200 OK\r\nContent-Type: application/vnd.oci.image.index.v1+json".into(),
                    index.clone(),
                    false,
                ),
                p if p == entry_path => ok(wasm.clone()),
                p if p == layer_path => ok(COMPONENT.to_vec()),
                _ => ("404 Not Found".into(), Vec::new(), false),
            });
            let (registry, _) = serve(respond).await;
            let pulled = pull(
                &format!("{registry}/multi/worker:v1"),
                &Auth::Anonymous,
                true,
                &lo(),
                1 << 20,
                Duration::from_secs(10),
            )
            .await
            .expect("pulled through the index");
            assert_eq!(pulled.bytes, COMPONENT);
            assert_eq!(pulled.manifest_digest, wasm_digest);
            assert_eq!(pulled.layer_digest, digest_of(COMPONENT));
        }

        /// Where a registry points the pull on to (its token service, its blob storage) is
        /// connected to only where the egress policy allows: the cloud metadata address is
        /// refused, and the registry was asked (the premise).
        #[tokio::test]
        async fn a_registry_cannot_point_the_pull_at_a_forbidden_address() {
            let respond: Arc<Respond> = Arc::new(|path, _, _| {
                match path {
                "/v2/realm/worker/manifests/v1" => (
                    "401 Unauthorized\r\nWWW-Authenticate: Bearer realm=\"http://169.254.169.254/latest/meta-data/\"".into(),
                    Vec::new(),
                    false,
                ),
                "/v2/storage/worker/manifests/v1" => ok(manifest(COMPONENT)),
                p if p.starts_with("/v2/storage/worker/blobs/") => (
                    "302 Found\r\nLocation: http://169.254.169.254/latest/meta-data/".into(),
                    Vec::new(),
                    false,
                ),
                "/v2/named/worker/manifests/v1" => (
                    "401 Unauthorized\r\nWWW-Authenticate: Bearer realm=\"http://metadata.google.internal./computeMetadata/v1/\"".into(),
                    Vec::new(),
                    false,
                ),
                _ => ("404 Not Found".into(), Vec::new(), false),
            }
            });
            let (registry, asked) = serve(respond).await;
            let e = pulled(&format!("{registry}/realm/worker:v1"), &Auth::Anonymous)
                .await
                .expect_err("the realm is refused")
                .to_string();
            assert!(e.contains("a link-local address"), "{e}");
            let e = pulled(&format!("{registry}/storage/worker:v1"), &Auth::Anonymous)
                .await
                .expect_err("the redirect is refused")
                .to_string();
            assert!(
                e.contains("pulling the Wasm layer") && e.contains("a link-local address"),
                "{e}"
            );
            // A name is checked as it resolves (this one resolves nowhere here, or to a
            // link-local address on a cloud): either way, no request reaches it.
            let e = pulled(&format!("{registry}/named/worker:v1"), &Auth::Anonymous)
                .await
                .expect_err("the named realm is not reached")
                .to_string();
            assert!(e.contains("asking the registry's token service"), "{e}");
            let paths: Vec<String> = asked
                .lock()
                .expect("the log")
                .iter()
                .map(|a| a.path.clone())
                .collect();
            assert!(
                paths.iter().any(|p| p == "/v2/realm/worker/manifests/v1")
                    && paths
                        .iter()
                        .any(|p| p.starts_with("/v2/storage/worker/blobs/")),
                "the registry was not asked what the test says: {paths:?}"
            );
        }

        /// A registry that sends a huge manifest (no `Content-Length`), bytes that are not the
        /// digest asked for, a layer of other bytes, or an error page is refused, and the
        /// message quotes none of what it sent.
        #[tokio::test]
        async fn hostile_answers_are_bounded_verified_and_not_quoted() {
            let pinned = manifest(COMPONENT);
            let pinned_digest = digest_of(&pinned);
            let pinned_path = format!("/v2/pinned/worker/manifests/{pinned_digest}");
            let respond: Arc<Respond> = Arc::new(move |path, _, _| match path {
                "/v2/huge/worker/manifests/v1" => {
                    ("200 OK".into(), vec![b' '; (5 << 20) + 1], true)
                }
                p if p == pinned_path => ok(manifest(b"other bytes")),
                "/v2/swapped/worker/manifests/v1" => ok(manifest(COMPONENT)),
                p if p.starts_with("/v2/swapped/worker/blobs/") => {
                    ok(b"the component's bytez".to_vec())
                }
                "/v2/page/worker/manifests/v1" => (
                    "403 Forbidden".into(),
                    b"<html>INTERNAL-SECRET-TEXT</html>".to_vec(),
                    false,
                ),
                "/v2/shape/worker/manifests/v1" => {
                    ok(br#"{"schemaVersion":2,"layers":"INTERNAL-SECRET-TEXT"}"#.to_vec())
                }
                _ => ("404 Not Found".into(), Vec::new(), false),
            });
            let (registry, _) = serve(respond).await;
            let refused = |name: &str| {
                let reference = if name == "pinned" {
                    format!("{registry}/pinned/worker@{pinned_digest}")
                } else {
                    format!("{registry}/{name}/worker:v1")
                };
                async move {
                    pulled(&reference, &Auth::Anonymous)
                        .await
                        .expect_err("refused")
                        .to_string()
                }
            };
            let e = refused("huge").await;
            assert!(e.contains("larger than the limit of 4194304 bytes"), "{e}");
            let e = refused("pinned").await;
            assert!(e.contains("not the") && e.contains(&pinned_digest), "{e}");
            let e = refused("swapped").await;
            assert!(
                e.contains("not the") && e.contains(&digest_of(COMPONENT)),
                "{e}"
            );
            for name in ["page", "shape"] {
                let e = refused(name).await;
                assert!(!e.contains("INTERNAL-SECRET-TEXT"), "{e}");
                assert!(e.contains("403 Forbidden") || e.contains("line 1"), "{e}");
            }
        }
    }
}
