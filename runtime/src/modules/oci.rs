//! `oci` modules: components in OCI registries, pulled by [`pull`] (the distribution API's
//! reads, over the egress-checked HTTP client), and `wasmpilot push`, which publishes one with
//! `oci-client` (the ORAS project's Rust distribution client).
//!
//! Accepted artifacts (the layout of the CNCF Wasm OCI artifact spec, written by `wasmpilot
//! push`, wkg and `wasm-tools`-based tooling, and by ORAS with a `:application/wasm` file):
//! an OCI image manifest (or Docker v2 manifest; an image index resolves to its `wasm`-platform
//! or only entry) with **exactly one** layer whose media type is `application/wasm` (or the
//! older `application/vnd.wasm.content.layer.v1+wasm`). The config blob is not read, so its
//! media type does not matter: `application/vnd.wasm.config.v0+json` (wkg, `wasmpilot push`),
//! `application/vnd.oci.empty.v1+json` (ORAS) and others are all fine. The layer bytes are the
//! component; their sha256 is verified against the manifest, and against the reference's
//! `sha256` pin when set; a manifest named by digest is verified against it.

mod pull;

pub use pull::MAX_MANIFEST_BYTES;

use super::{digest_of, install_crypto_provider, DEFAULT_MODULE_NAMESPACE};
use anyhow::{bail, Context};
use k8s_openapi::api::core::v1::Secret;
use kube::{Api, Client as KubeClient};
use oci_client::client::{ClientConfig, ClientProtocol, ImageLayer};
use oci_client::manifest::{
    ImageIndexEntry, OciDescriptor, OciImageManifest, OCI_IMAGE_MEDIA_TYPE,
};
pub use oci_client::secrets::RegistryAuth as Auth;
use oci_client::{Client, Reference};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::io::Read;
use std::path::PathBuf;
use std::time::Duration;

/// Layer media types that carry a Wasm component.
pub const WASM_LAYER_MEDIA_TYPES: &[&str] = &[
    "application/wasm",
    oci_client::manifest::WASM_LAYER_MEDIA_TYPE, // application/vnd.wasm.content.layer.v1+wasm
];

/// The config media type `wasmpilot push` writes (as wkg does).
pub const WASM_CONFIG_MEDIA_TYPE: &str = "application/vnd.wasm.config.v0+json";

const USER_AGENT: &str = concat!("wasmpilot/", env!("CARGO_PKG_VERSION"));

/// An OCI reference could not be parsed.
#[derive(Debug, thiserror::Error)]
pub enum ReferenceError {
    #[error(
        "{reference:?}: write the reference without a scheme, e.g. registry.example.com/ops/worker:v1"
    )]
    HasScheme { reference: String },
    #[error("{reference:?} is not an OCI reference: {source}")]
    Invalid {
        reference: String,
        #[source]
        source: oci_client::ParseError,
    },
}

/// Pulling a module from a registry failed: its reference, the client, the artifact's layout,
/// a registry request or the deadline. Messages quote nothing a registry wrote but its error
/// code and bounded names.
#[derive(Debug, thiserror::Error)]
pub enum OciError {
    #[error(transparent)]
    Reference(#[from] ReferenceError),
    #[error("{registry} is not a registry host")]
    RegistryNotAHost { registry: String },
    #[error("{0}")]
    Refused(#[from] crate::egress::EgressRefused),
    #[error("HTTP client: {}", super::url::with_causes(.source))]
    BuildClient {
        #[source]
        source: reqwest::Error,
    },
    #[error(
        "not a Wasm artifact: no layer of media type application/wasm (layers: {}); publish components with `wasmpilot push`, wkg or oras",
        list_or_none(.layers)
    )]
    NotAWasmArtifact {
        /// The media types of the layers the manifest has.
        layers: Vec<String>,
    },
    #[error("the artifact has {count} Wasm layers; exactly one is expected")]
    SeveralWasmLayers { count: usize },
    #[error("{step}: {}", super::url::with_causes(.source))]
    Request {
        step: Step,
        #[source]
        source: reqwest::Error,
    },
    #[error(
        "{step}: unauthorized (the registry answered 401{}). {}",
        if *with_credentials { " to the pull Secret's credentials" } else { " to an anonymous pull" },
        if *with_credentials { "Check the credentials the pull Secret holds for this registry" } else { "Give the module a pullSecret with credentials for this registry" }
    )]
    Unauthorized { step: Step, with_credentials: bool },
    #[error("{step}: the registry answered {status}{}", .code.as_ref().map(|c| format!(" ({c})")).unwrap_or_default())]
    Status {
        step: Step,
        status: reqwest::StatusCode,
        /// The registry's error code (`MANIFEST_UNKNOWN`, …), if it gave one.
        code: Option<String>,
    },
    #[error("{step}: the answer is larger than the limit of {max_bytes} bytes")]
    TooLarge { step: Step, max_bytes: u64 },
    #[error("{step}: the answer is not JSON of the expected shape (line {line}, column {column})")]
    NotJson {
        step: Step,
        line: usize,
        column: usize,
    },
    #[error("the token service {realm} {problem}")]
    TokenRealm {
        realm: String,
        problem: &'static str,
    },
    #[error("the registry's token service gave no token")]
    NoToken,
    #[error("the manifest's digest {digest} is not sha256")]
    ManifestDigestNotSha256 { digest: String },
    #[error("the manifest's digest is {actual}, not the {expected} its reference names")]
    ManifestDigestMismatch { expected: String, actual: String },
    #[error(
        "the image index has no entry of architecture wasm and more than one entry (architectures: {})",
        list_or_none(.platforms)
    )]
    NoWasmEntry {
        /// The architectures of the first entries.
        platforms: Vec<String>,
    },
    #[error("the image index's wasm entry is another index")]
    NestedIndex,
    #[error("the Wasm layer is {size} bytes, more than the limit of {} MiB", .max_bytes >> 20)]
    LayerTooLarge { size: i64, max_bytes: u64 },
    #[error("the Wasm layer's digest {digest} is not sha256")]
    LayerDigestNotSha256 { digest: String },
    #[error("the Wasm layer is {actual} bytes, not the {expected} its manifest gives")]
    LayerSizeMismatch { expected: u64, actual: u64 },
    #[error("the Wasm layer's bytes have digest {actual}, not the {expected} its manifest gives")]
    LayerDigestMismatch { expected: String, actual: String },
    #[error("the pull took longer than {timeout:?}")]
    Timeout { timeout: Duration },
}

/// The request of a pull that failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    Manifest,
    Token,
    Layer,
}

impl std::fmt::Display for Step {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Step::Manifest => "pulling the manifest",
            Step::Token => "asking the registry's token service for a pull token",
            Step::Layer => "pulling the Wasm layer",
        })
    }
}

/// A pull Secret gave no credentials for the registry. Messages follow "pull Secret ns/name"
/// (see `ModuleError::PullSecret`), and name the Secret and registries, never credentials.
#[derive(Debug, thiserror::Error)]
pub enum PullSecretError {
    #[error(transparent)]
    Reference(#[from] ReferenceError),
    /// Forbidden in the host's own namespace: its Role there is missing.
    #[error(
        "could not be read: the host is not allowed to get Secrets in namespace {namespace} \
         (forbidden). Grant its ServiceAccount `get` on secrets there (the Role in \
         deploy/rbac.yaml does)"
    )]
    ForbiddenInHostNamespace {
        namespace: String,
        #[source]
        source: kube::Error,
    },
    /// Forbidden in another namespace, which the shipped role does not cover.
    #[error(
        "could not be read: the host is not allowed to get Secrets in namespace {namespace} \
         (forbidden). Create the pull Secret in {host_namespace}, where the host's \
         role (deploy/rbac.yaml) lets it read Secrets (a pullSecret without namespace means \
         that one), or grant the host's ServiceAccount `get` on secrets in {namespace} with a \
         Role and RoleBinding there",
        host_namespace = DEFAULT_MODULE_NAMESPACE
    )]
    ForbiddenElsewhere {
        namespace: String,
        #[source]
        source: kube::Error,
    },
    /// A pull Secret for a plain-HTTP registry that is not this machine's loopback.
    #[error(
        "is not used: `insecure: true` would send its credentials in clear text to {registry}. \
         Serve the registry over HTTPS (credentials go over plain HTTP only to a registry on the \
         host's own loopback)"
    )]
    OverPlainHttp { registry: String },
    /// In another namespace than the host's, without the label that offers it to wasmpilot.
    #[error(
        "is not used: a pull Secret outside {host_namespace} must be labelled \
         {PULL_SECRET_LABEL}=true by its owner to be offered to wasmpilot operators (or \
         create it in {host_namespace})",
        host_namespace = DEFAULT_MODULE_NAMESPACE
    )]
    NotOffered,
    #[error("could not be read: {}", crate::error_report::api_text(.source))]
    Unreadable {
        #[source]
        source: kube::Error,
    },
    #[error(
        "has no .dockerconfigjson key (expected a Secret of type kubernetes.io/dockerconfigjson)"
    )]
    NoDockerConfig,
    #[error("its docker config is not valid JSON: {source}")]
    DockerConfigNotJson {
        #[source]
        source: serde_json::Error,
    },
    #[error("its docker config has no \"auths\" object")]
    NoAuthsObject,
    #[error("has no credentials for registry {registry} (it has: {})", list_or_none(.registries))]
    NoCredentialsForRegistry {
        registry: String,
        /// The registries the config has entries for.
        registries: Vec<String>,
    },
    #[error("the entry for {registry} has an \"auth\" field that is not base64")]
    AuthNotBase64 {
        registry: String,
        #[source]
        source: base64::DecodeError,
    },
    #[error("the entry for {registry} has an \"auth\" field that is not UTF-8")]
    AuthNotUtf8 {
        registry: String,
        #[source]
        source: std::string::FromUtf8Error,
    },
    #[error("the entry for {registry} has an \"auth\" field that is not user:password")]
    AuthNotUserPassword { registry: String },
    #[error("the entry for {registry} has neither username/password, auth nor registrytoken")]
    NoUsableCredentials { registry: String },
}

/// `a, b, c`, or `none`, for lists in messages.
fn list_or_none(items: &[String]) -> String {
    if items.is_empty() {
        "none".to_string()
    } else {
        items.join(", ")
    }
}

/// Parses `registry/repository:tag` or `registry/repository@sha256:…` (no `oci://` prefix).
pub fn parse_reference(s: &str) -> Result<Reference, ReferenceError> {
    if s.contains("://") {
        return Err(ReferenceError::HasScheme {
            reference: s.to_string(),
        });
    }
    Reference::try_from(s).map_err(|source| ReferenceError::Invalid {
        reference: s.to_string(),
        source,
    })
}

/// Whether credentials may go to the registry of `reference` over plain HTTP: only when it is
/// on the host's own loopback (`localhost`, `127.0.0.0/8`, `::1`), where nothing crosses a
/// network; anywhere else they would travel in clear text.
pub fn plain_http_credentials_allowed(reference: &str) -> Result<(), PullSecretError> {
    let parsed = parse_reference(reference)?;
    let registry = parsed.resolve_registry().to_string();
    let host = match registry.strip_prefix('[') {
        Some(bracketed) => bracketed.split(']').next().unwrap_or_default(),
        None => registry
            .rsplit_once(':')
            .map_or(registry.as_str(), |(h, _)| h),
    };
    if is_loopback_host(host) {
        Ok(())
    } else {
        Err(PullSecretError::OverPlainHttp { registry })
    }
}

/// Whether `host` (a name or an IP literal without brackets) is this machine's loopback:
/// `localhost`, `127.0.0.0/8`, `::1`.
fn is_loopback_host(host: &str) -> bool {
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// The `oci-client` client `wasmpilot push` publishes with (its user's tool: no egress policy).
fn push_client(insecure: bool) -> anyhow::Result<Client> {
    install_crypto_provider();
    let config = ClientConfig {
        protocol: if insecure {
            ClientProtocol::Http
        } else {
            ClientProtocol::Https
        },
        connect_timeout: Some(Duration::from_secs(10)),
        read_timeout: Some(Duration::from_secs(30)),
        user_agent: USER_AGENT,
        ..Default::default()
    };
    Client::try_from(config).context("building the OCI client")
}

/// In an image index: the `wasm` architecture entry, else the only entry.
fn wasm_platform(entries: &[ImageIndexEntry]) -> Option<String> {
    entries
        .iter()
        .find(|e| {
            e.platform
                .as_ref()
                .is_some_and(|p| p.architecture.to_string() == "wasm")
        })
        .or(match entries {
            [only] => Some(only),
            _ => None,
        })
        .map(|e| e.digest.clone())
}

/// The most of a manifest's entries (layers, an index's platforms) a message lists.
const MAX_LISTED: usize = 10;

/// The single Wasm layer of an artifact's manifest.
pub fn wasm_layer(manifest: &OciImageManifest) -> Result<&OciDescriptor, OciError> {
    let wasm: Vec<&OciDescriptor> = manifest
        .layers
        .iter()
        .filter(|l| WASM_LAYER_MEDIA_TYPES.contains(&l.media_type.as_str()))
        .collect();
    match wasm.as_slice() {
        [one] => Ok(one),
        // The media types are the registry's text: the first few, each cut short.
        [] => Err(OciError::NotAWasmArtifact {
            layers: manifest
                .layers
                .iter()
                .take(MAX_LISTED)
                .map(|l| pull::quoted(&l.media_type))
                .chain(
                    (manifest.layers.len() > MAX_LISTED)
                        .then(|| format!("{} more", manifest.layers.len() - MAX_LISTED)),
                )
                .collect(),
        }),
        more => Err(OciError::SeveralWasmLayers { count: more.len() }),
    }
}

/// What a pull returned.
pub struct Pulled {
    pub bytes: Vec<u8>,
    /// `sha256:…` of the manifest (what `@sha256:` references name).
    pub manifest_digest: String,
    /// `sha256:…` of the Wasm layer, verified against the bytes.
    pub layer_digest: String,
}

/// Pulls the component of a Wasm OCI artifact, connecting only where `egress` allows, within
/// `max_bytes` and `timeout`.
pub async fn pull(
    reference: &str,
    auth: &Auth,
    insecure: bool,
    egress: &crate::egress::EgressPolicy,
    max_bytes: u64,
    timeout: Duration,
) -> Result<Pulled, OciError> {
    pull_reserving(
        reference,
        auth,
        insecure,
        egress,
        max_bytes,
        timeout,
        async |_| (),
    )
    .await
    .map(|(pulled, ())| pulled)
}

/// Pulls the component of a Wasm OCI artifact, connecting only where `egress` allows (the
/// registry, its token service, its blob storage), within `max_bytes` and `timeout` of talking
/// to the registry. `reserve(layer size)` is awaited once the manifest has said how large the
/// component is, before its bytes are pulled; what it gives (a share of a budget) comes back
/// with them, and its wait does not count against `timeout`. A registry that answers nothing
/// therefore holds no share.
pub async fn pull_reserving<R>(
    reference: &str,
    auth: &Auth,
    insecure: bool,
    egress: &crate::egress::EgressPolicy,
    max_bytes: u64,
    timeout: Duration,
    reserve: impl AsyncFnOnce(u64) -> R,
) -> Result<(Pulled, R), OciError> {
    let r = parse_reference(reference)?;
    install_crypto_provider();
    let mut registry = pull::Registry::new(
        &r,
        auth,
        insecure,
        egress,
        timeout.min(Duration::from_secs(10)),
    )?;
    let asked = std::time::Instant::now();
    let (layer, manifest_digest) =
        tokio::time::timeout(timeout, registry.wasm_layer(&r, max_bytes))
            .await
            .map_err(|_| OciError::Timeout { timeout })??;
    let talked = asked.elapsed();
    let reserved = reserve(layer.size as u64).await;
    // This one also bounds a slow trickle of the layer's bytes.
    let bytes = tokio::time::timeout(timeout.saturating_sub(talked), registry.layer(&layer))
        .await
        .map_err(|_| OciError::Timeout { timeout })??;
    Ok((
        Pulled {
            bytes,
            manifest_digest,
            layer_digest: layer.digest.clone(),
        },
        reserved,
    ))
}

/// The label with which a Secret outside the host's namespace is offered as a pull Secret (a
/// definition may not name any Secret of the cluster and have the host read it).
pub const PULL_SECRET_LABEL: &str = "wasmpilot.io/pull-secret";

/// Credentials for the reference's registry from a `kubernetes.io/dockerconfigjson` (or legacy
/// `kubernetes.io/dockercfg`) Secret: one in the host's namespace, or one labelled
/// [`PULL_SECRET_LABEL`]`=true`. Errors name the Secret and registries, never credentials.
pub async fn auth_from_secret(
    client: &KubeClient,
    namespace: &str,
    name: &str,
    reference: &str,
) -> Result<Auth, PullSecretError> {
    let r = parse_reference(reference)?;
    let secret = Api::<Secret>::namespaced(client.clone(), namespace)
        .get(name)
        .await
        .map_err(|e| secret_unreadable(e, namespace))?;
    let offered = secret
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(PULL_SECRET_LABEL))
        .is_some_and(|v| v == "true");
    if namespace != DEFAULT_MODULE_NAMESPACE && !offered {
        return Err(PullSecretError::NotOffered);
    }
    let data = secret.data.unwrap_or_default();
    let (json, legacy) = if let Some(d) = data.get(".dockerconfigjson") {
        (&d.0, false)
    } else if let Some(d) = data.get(".dockercfg") {
        (&d.0, true)
    } else {
        return Err(PullSecretError::NoDockerConfig);
    };
    auth_for_registry(json, legacy, r.resolve_registry())
}

/// Why a pull Secret could not be read. Forbidden is the common case (the shipped role lets the
/// host read Secrets in its own namespace only), so that message says what to do.
fn secret_unreadable(source: kube::Error, namespace: &str) -> PullSecretError {
    let forbidden = matches!(&source, kube::Error::Api(s) if s.code == 403);
    let namespace = namespace.to_string();
    if !forbidden {
        PullSecretError::Unreadable { source }
    } else if namespace == DEFAULT_MODULE_NAMESPACE {
        PullSecretError::ForbiddenInHostNamespace { namespace, source }
    } else {
        PullSecretError::ForbiddenElsewhere { namespace, source }
    }
}

/// Finds the registry's entry in a docker config (`{"auths": {host: entry}}`, or `{host: entry}`
/// when `legacy`); an entry has `username` + `password`, `auth` (base64 `user:password`) or
/// `registrytoken`.
pub fn auth_for_registry(
    json: &[u8],
    legacy: bool,
    registry: &str,
) -> Result<Auth, PullSecretError> {
    let v: Value = serde_json::from_slice(json)
        .map_err(|source| PullSecretError::DockerConfigNotJson { source })?;
    let auths = if legacy { &v } else { &v["auths"] };
    let Some(auths) = auths.as_object() else {
        return Err(PullSecretError::NoAuthsObject);
    };
    let wanted = registry_aliases(registry);
    let entry = auths
        .iter()
        .find(|(k, _)| wanted.contains(&registry_host(k)))
        .map(|(_, e)| e);
    let Some(entry) = entry else {
        return Err(PullSecretError::NoCredentialsForRegistry {
            registry: registry.to_string(),
            registries: auths.keys().cloned().collect(),
        });
    };
    let field = |k: &str| entry[k].as_str().filter(|s| !s.is_empty());
    if let (Some(u), Some(p)) = (field("username"), field("password")) {
        return Ok(Auth::Basic(u.into(), p.into()));
    }
    if let Some(a) = field("auth") {
        use base64::Engine as _;
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(a.trim())
            .map_err(|source| PullSecretError::AuthNotBase64 {
                registry: registry.to_string(),
                source,
            })?;
        let decoded =
            String::from_utf8(decoded).map_err(|source| PullSecretError::AuthNotUtf8 {
                registry: registry.to_string(),
                source,
            })?;
        let Some((u, p)) = decoded.split_once(':') else {
            return Err(PullSecretError::AuthNotUserPassword {
                registry: registry.to_string(),
            });
        };
        return Ok(Auth::Basic(u.into(), p.into()));
    }
    if let Some(t) = field("registrytoken") {
        return Ok(Auth::Bearer(t.into()));
    }
    Err(PullSecretError::NoUsableCredentials {
        registry: registry.to_string(),
    })
}

/// `https://host:port/v1/` → `host:port`.
fn registry_host(key: &str) -> String {
    let k = key
        .trim()
        .trim_start_matches("https://")
        .trim_start_matches("http://");
    k.split('/').next().unwrap_or(k).to_ascii_lowercase()
}

fn registry_aliases(registry: &str) -> Vec<String> {
    let r = registry.to_ascii_lowercase();
    if ["docker.io", "index.docker.io", "registry-1.docker.io"].contains(&r.as_str()) {
        return vec![
            "docker.io".into(),
            "index.docker.io".into(),
            "registry-1.docker.io".into(),
        ];
    }
    vec![r]
}

/// What `wasmpilot push` published.
#[derive(Debug, Clone)]
pub struct Pushed {
    /// The reference pushed to (with its tag).
    pub reference: String,
    /// `sha256:…` of the manifest: `<repository>@<manifest digest>` pins the artifact.
    pub manifest_digest: String,
    /// `sha256:…` of the component bytes (the Wasm layer): the module's `sha256` pin.
    pub component_digest: String,
}

impl Pushed {
    /// `registry/repository@sha256:<manifest digest>`.
    pub fn pinned_reference(&self) -> String {
        let base = match self.reference.rsplit_once('@') {
            Some((b, _)) => b.to_string(),
            None => match self.reference.rsplit_once(':') {
                // A colon after the last slash is a tag; one before it is a registry port.
                Some((b, tag)) if !tag.contains('/') => b.to_string(),
                _ => self.reference.clone(),
            },
        };
        format!("{base}@{}", self.manifest_digest)
    }
}

/// The imports and exports of a component (for the artifact's config), validating it on the way.
pub fn component_world(bytes: &[u8]) -> anyhow::Result<(Vec<String>, Vec<String>)> {
    let mut config = wasmtime::Config::new();
    config.wasm_component_model(true);
    let engine = wasmtime::Engine::new(&config).map_err(anyhow::Error::from)?;
    let component = wasmtime::component::Component::new(&engine, bytes).map_err(|e| {
        anyhow::anyhow!(
            "not a valid Wasm component: {}",
            crate::sandbox::compile_error_text(&e)
        )
    })?;
    let ty = component.component_type();
    let imports = ty.imports(&engine).map(|(n, _)| n.to_string()).collect();
    let exports = ty.exports(&engine).map(|(n, _)| n.to_string()).collect();
    Ok((imports, exports))
}

/// The config blob of a Wasm OCI artifact (CNCF Wasm OCI artifact spec, as wkg writes it).
/// `created` honours `SOURCE_DATE_EPOCH`, so a reproducible build pushes the same digests.
pub fn wasm_config(component_digest: &str, imports: &[String], exports: &[String]) -> Vec<u8> {
    let created = std::env::var("SOURCE_DATE_EPOCH")
        .ok()
        .and_then(|s| s.trim().parse::<i64>().ok())
        .and_then(|s| jiff::Timestamp::from_second(s).ok())
        .unwrap_or_else(jiff::Timestamp::now);
    let config = json!({
        "created": created.to_string(),
        "architecture": "wasm",
        "os": "wasip2",
        "layerDigests": [component_digest],
        "component": {"imports": imports, "exports": exports, "target": null},
    });
    serde_json::to_vec(&config).expect("JSON values serialize")
}

/// Publishes a component as a Wasm OCI artifact under a tag; returns its digests. `progress`
/// is told about each long step before it starts (validating, uploading the layer).
pub async fn push(
    component: &[u8],
    reference: &str,
    auth: &Auth,
    insecure: bool,
    title: Option<&str>,
    progress: &dyn Fn(&str),
) -> anyhow::Result<Pushed> {
    let r = parse_reference(reference)?;
    if r.digest().is_some() {
        bail!(
            "push to a tag (registry/repository:tag), not to a digest: e.g. oci://{}/{}:v1",
            r.registry(),
            r.repository()
        );
    }
    progress("checking that it is a Wasm component (compiles it once) …");
    let (imports, exports) = component_world(component)?;
    let component_digest = digest_of(component);
    let config = wasm_config(&component_digest, &imports, &exports);
    let client = push_client(insecure)?;
    client
        .store_auth_if_needed(r.resolve_registry(), auth)
        .await;
    let layer = ImageLayer::new(
        component.to_vec(),
        "application/wasm".to_string(),
        title.map(|t| {
            BTreeMap::from([("org.opencontainers.image.title".to_string(), t.to_string())])
        }),
    );
    let manifest = OciImageManifest {
        schema_version: 2,
        media_type: Some(OCI_IMAGE_MEDIA_TYPE.to_string()),
        config: OciDescriptor {
            media_type: WASM_CONFIG_MEDIA_TYPE.to_string(),
            digest: digest_of(&config),
            size: config.len() as i64,
            ..Default::default()
        },
        layers: vec![OciDescriptor {
            media_type: layer.media_type.clone(),
            digest: component_digest.clone(),
            size: component.len() as i64,
            annotations: layer.annotations.clone(),
            ..Default::default()
        }],
        ..Default::default()
    };
    progress(&format!(
        "pushing oci://{}: layer {} KiB, {component_digest} …",
        r.whole(),
        component.len().div_ceil(1024)
    ));
    client
        .push_blob(&r, layer.data, &component_digest)
        .await
        .with_context(|| {
            format!(
                "pushing the component to {}: check the registry address, that it is reachable (--insecure for plain HTTP), and your credentials (--username)",
                r.whole()
            )
        })?;
    progress("pushing the config and the manifest …");
    client
        .push_blob(&r, config, &manifest.config.digest)
        .await
        .with_context(|| format!("pushing the config to {}", r.whole()))?;
    let body = serde_json::to_vec(&manifest)?;
    let manifest_digest = digest_of(&body);
    client
        .push_manifest_raw(
            &r,
            body,
            reqwest::header::HeaderValue::from_static(OCI_IMAGE_MEDIA_TYPE),
        )
        .await
        .with_context(|| format!("pushing the manifest to {}", r.whole()))?;
    Ok(Pushed {
        reference: reference.to_string(),
        manifest_digest,
        component_digest,
    })
}

/// `wasmpilot push <component.wasm> oci://registry/repository:tag`.
#[derive(clap::Args, Debug)]
pub struct PushArgs {
    /// The component to publish, e.g. target/wasm32-wasip2/release/my_worker.wasm.
    pub component: PathBuf,
    /// Where to: `oci://registry/repository:tag`.
    pub target: String,
    /// Plain HTTP instead of HTTPS (loopback or test registries).
    #[arg(long)]
    pub insecure: bool,
    /// Registry user name; the password comes from --password-stdin or
    /// $WASMPILOT_REGISTRY_PASSWORD.
    #[arg(long, env = "WASMPILOT_REGISTRY_USERNAME")]
    pub username: Option<String>,
    /// Read the registry password from standard input.
    #[arg(long)]
    pub password_stdin: bool,
}

/// Runs `wasmpilot push`: publishes the component and prints its digests and a module reference.
pub async fn push_command(args: PushArgs) -> anyhow::Result<()> {
    let reference = args
        .target
        .strip_prefix("oci://")
        .unwrap_or(&args.target)
        .to_string();
    let bytes = std::fs::read(&args.component).with_context(|| {
        format!(
            "reading {}: build it first (wasmpilot build <dir>) and pass the .wasm it lists",
            args.component.display()
        )
    })?;
    let auth = match &args.username {
        None => Auth::Anonymous,
        Some(user) => {
            let password = if args.password_stdin {
                let mut s = String::new();
                std::io::stdin()
                    .read_to_string(&mut s)
                    .context("reading the password from standard input")?;
                s.trim_end_matches(['\r', '\n']).to_string()
            } else {
                std::env::var("WASMPILOT_REGISTRY_PASSWORD").map_err(|_| {
                    anyhow::anyhow!(
                        "--username needs a password: --password-stdin or $WASMPILOT_REGISTRY_PASSWORD"
                    )
                })?
            };
            Auth::Basic(user.clone(), password)
        }
    };
    let title = args.component.file_name().and_then(|n| n.to_str());
    let pushed = push(&bytes, &reference, &auth, args.insecure, title, &|step| {
        eprintln!("{step}")
    })
    .await?;
    println!("pushed {}", pushed.reference);
    println!("manifest digest:  {}", pushed.manifest_digest);
    println!("component sha256: {}", pushed.component_digest);
    println!("module:");
    println!("  oci:");
    println!("    reference: {}", pushed.pinned_reference());
    println!("    sha256: {}", pushed.component_digest);
    if args.insecure {
        println!("    insecure: true");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_go_over_plain_http_only_to_a_loopback_registry() {
        for local in [
            "127.0.0.1:5000/ops/worker:v1",
            "localhost:5000/ops/worker:v1",
            "127.9.9.9/ops/worker:v1",
        ] {
            assert!(plain_http_credentials_allowed(local).is_ok(), "{local}");
        }
        for remote in [
            "registry.example.com/ops/worker:v1",
            "10.0.0.5:5000/ops/worker:v1",
            "169.254.169.254:80/ops/worker:v1",
            "localhost.example.com:5000/ops/worker:v1",
        ] {
            let e = plain_http_credentials_allowed(remote).expect_err(remote);
            assert!(
                e.to_string()
                    .contains("would send its credentials in clear text"),
                "{remote}: {e}"
            );
        }
    }

    #[test]
    fn a_forbidden_pull_secret_says_what_to_do() {
        let status = |code: u16| {
            kube::Error::Api(Box::new(
                serde_json::from_value(json!({"code": code, "message": "secrets \"r\" is forbidden", "reason": "Forbidden"}))
                    .expect("a Status"),
            ))
        };
        let msg = secret_unreadable(status(403), "team-a").to_string();
        for w in [
            "not allowed to get Secrets in namespace team-a",
            "Create the pull Secret in wasmpilot-system",
            "`get` on secrets in team-a",
        ] {
            assert!(msg.contains(w), "{msg:?} should say {w:?}");
        }
        let own = secret_unreadable(status(403), DEFAULT_MODULE_NAMESPACE).to_string();
        assert!(own.contains("`get` on secrets there"), "{own}");
        let other = secret_unreadable(status(500), "team-a").to_string();
        assert!(other.starts_with("could not be read: ") && !other.contains("Create"));
    }

    fn desc(media_type: &str) -> OciDescriptor {
        OciDescriptor {
            media_type: media_type.into(),
            digest: format!("sha256:{}", "a".repeat(64)),
            size: 10,
            ..Default::default()
        }
    }

    fn manifest(config: &str, layers: &[&str]) -> OciImageManifest {
        OciImageManifest {
            config: desc(config),
            layers: layers.iter().map(|m| desc(m)).collect(),
            ..Default::default()
        }
    }

    #[test]
    fn accepts_wasm_artifact_layouts() {
        // wkg / wasmpilot push
        let wkg = manifest(WASM_CONFIG_MEDIA_TYPE, &["application/wasm"]);
        assert!(wasm_layer(&wkg).is_ok());
        // ORAS: empty config, one application/wasm file
        let oras = manifest("application/vnd.oci.empty.v1+json", &["application/wasm"]);
        assert!(wasm_layer(&oras).is_ok());
        // older wasm-to-oci layout
        let legacy = manifest(
            "application/vnd.wasm.config.v1+json",
            &["application/vnd.wasm.content.layer.v1+wasm"],
        );
        assert!(wasm_layer(&legacy).is_ok());
        // a container image is not a module
        let image = manifest(
            "application/vnd.oci.image.config.v1+json",
            &["application/vnd.oci.image.layer.v1.tar+gzip"],
        );
        let e = wasm_layer(&image).unwrap_err().to_string();
        assert!(
            e.contains("tar+gzip") && e.contains("application/wasm"),
            "{e}"
        );
        let two = manifest(
            WASM_CONFIG_MEDIA_TYPE,
            &["application/wasm", "application/wasm"],
        );
        assert_eq!(
            wasm_layer(&two).unwrap_err().to_string(),
            "the artifact has 2 Wasm layers; exactly one is expected"
        );
        let empty = wasm_layer(&manifest(WASM_CONFIG_MEDIA_TYPE, &[])).unwrap_err();
        assert!(empty.to_string().contains("(layers: none)"), "{empty}");
    }

    #[test]
    fn a_manifest_of_many_long_layers_is_named_briefly() {
        let long = "x".repeat(10_000);
        let layers: Vec<&str> = std::iter::repeat_n(long.as_str(), 50).collect();
        let e = wasm_layer(&manifest(WASM_CONFIG_MEDIA_TYPE, &layers))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("40 more") && e.len() < 2_000,
            "{} bytes",
            e.len()
        );
    }

    #[test]
    fn references_parse() {
        let r = parse_reference("127.0.0.1:5000/ops/worker:v1").unwrap();
        assert_eq!(r.registry(), "127.0.0.1:5000");
        assert_eq!(r.repository(), "ops/worker");
        assert_eq!(r.tag(), Some("v1"));
        let d = format!("registry.example.com/ops/worker@sha256:{}", "c".repeat(64));
        assert!(parse_reference(&d).unwrap().digest().is_some());
        assert!(matches!(
            parse_reference("oci://registry.example.com/x:v1"),
            Err(ReferenceError::HasScheme { .. })
        ));
        assert!(parse_reference("UPPER/Case:v1").is_err());
    }

    #[test]
    fn pinned_reference_replaces_the_tag() {
        let p = Pushed {
            reference: "127.0.0.1:5000/ops/worker:v1".into(),
            manifest_digest: "sha256:abc".into(),
            component_digest: String::new(),
        };
        assert_eq!(p.pinned_reference(), "127.0.0.1:5000/ops/worker@sha256:abc");
        let untagged = Pushed {
            reference: "127.0.0.1:5000/ops/worker".into(),
            ..p
        };
        assert_eq!(
            untagged.pinned_reference(),
            "127.0.0.1:5000/ops/worker@sha256:abc"
        );
    }

    #[test]
    fn docker_config_credentials() {
        let cfg = br#"{"auths": {
            "https://127.0.0.1:5000/v1/": {"username": "alice", "password": "s3cret"},
            "ghcr.io": {"auth": "Ym9iOmh1bnRlcjI="},
            "tokens.example.com": {"registrytoken": "tok"},
            "empty.example.com": {}
        }}"#;
        match auth_for_registry(cfg, false, "127.0.0.1:5000").unwrap() {
            Auth::Basic(u, p) => assert_eq!((u.as_str(), p.as_str()), ("alice", "s3cret")),
            other => panic!("{other:?}"),
        }
        match auth_for_registry(cfg, false, "ghcr.io").unwrap() {
            Auth::Basic(u, p) => assert_eq!((u.as_str(), p.as_str()), ("bob", "hunter2")),
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            auth_for_registry(cfg, false, "tokens.example.com").unwrap(),
            Auth::Bearer(_)
        ));
        let missing = auth_for_registry(cfg, false, "quay.io")
            .unwrap_err()
            .to_string();
        assert!(missing.contains("quay.io") && missing.contains("ghcr.io"));
        assert!(!missing.contains("s3cret") && !missing.contains("hunter2"));
        let e = auth_for_registry(cfg, false, "empty.example.com")
            .unwrap_err()
            .to_string();
        assert!(e.contains("neither"), "{e}");
        let legacy = br#"{"docker.io": {"auth": "Ym9iOmh1bnRlcjI="}}"#;
        assert!(auth_for_registry(legacy, true, "index.docker.io").is_ok());
        assert!(auth_for_registry(b"not json", false, "x").is_err());
    }

    #[test]
    fn config_names_the_layer() {
        let c: Value =
            serde_json::from_slice(&wasm_config("sha256:x", &["a".into()], &["b".into()])).unwrap();
        assert_eq!(c["architecture"], "wasm");
        assert_eq!(c["os"], "wasip2");
        assert_eq!(c["layerDigests"], json!(["sha256:x"]));
        assert_eq!(c["component"]["exports"], json!(["b"]));
    }
}
