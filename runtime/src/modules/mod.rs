//! Fetches component bytes (OCI registry, HTTPS URL, ConfigMap key or local file), verifies their
//! sha256, and compiles each digest once: compiling costs ~1 s, instantiating a compiled component
//! ~20 µs. Compiled code is also kept on disk ([`compile_cache`]), so a restart does not recompile.

pub mod compile_cache;
pub mod compile_process;
pub mod config_map_versions;
#[cfg(test)]
mod mock_api_tests;
pub mod oci;
pub mod url;

use crate::crd::{ConfigMapModule, ModuleRef};
use crate::object_names::{is_dns_label, is_dns_subdomain};
use crate::sandbox::slots::{FairSlots, WorkerSlot};
use crate::sandbox::{FinalizerModule, LimitOverride, LoadError, PhaseModule, Randomness, Sandbox};
use compile_cache::{CompileCache, Loaded};
use compile_process::CompileProcess;
use config_map_versions::{ConfigMapVersions, PartVersion};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::{Api, Client};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};
use wasmtime::component::Component;

/// The smallest valid component (magic, component version 0x0d, layer 1, no sections, no imports,
/// no exports): enough to compile and cache, for the tests of this module and its parts.
#[cfg(test)]
pub(crate) const EMPTY_COMPONENT: &[u8] = &[0x00, 0x61, 0x73, 0x6d, 0x0d, 0x00, 0x01, 0x00];

/// Namespace that holds module ConfigMaps and pull Secrets when the reference names none.
pub const DEFAULT_MODULE_NAMESPACE: &str = "wasmpilot-system";

/// Largest component accepted, after decompression or download.
pub const MAX_MODULE_BYTES: u64 = 64 << 20;

/// How long one download (OCI pull or URL) may take, all requests included.
pub const FETCH_TIMEOUT: Duration = Duration::from_secs(60);

/// Bytes of modules being fetched and verified at once, host-wide: each fetch reserves
/// [`MAX_MODULE_BYTES`] of it, so at most two are held before their compile (every phase of
/// every loading operator asking at once would otherwise hold 64 MiB each).
const FETCH_BUDGET_MIB: u64 = 128;

/// [`MAX_MODULE_BYTES`] in MiB: what each fetch reserves of [`FETCH_BUDGET_MIB`].
const MAX_MODULE_MIB: u64 = MAX_MODULE_BYTES >> 20;

/// How long a compile may take before its load fails (`ModuleCompileFailed`). In a compile
/// process (the host's way) the process is killed then and the compile slot is free at once; in
/// a thread (the CLI's tools) Cranelift cannot be stopped: the compile runs on, still holding
/// the one compile slot, and its result is dropped.
pub const COMPILE_TIMEOUT: Duration = Duration::from_secs(300);

/// A module could not be made ready; the message names the source (never credentials).
#[derive(Debug, thiserror::Error)]
pub enum ModuleError {
    #[error("module reference sets no source: set exactly one of oci, url, configMap or file")]
    NoSource,
    #[error("module reference sets {0}: set exactly one of oci, url, configMap or file")]
    MultipleSources(String),
    #[error("{source_name}: no cluster connection to read it from (offline run)")]
    Offline { source_name: String },
    #[error("ConfigMap {namespace}/{name} could not be read: {}; store the module with `wasmpilot deploy <dir>`, or fix the configMap name/namespace", crate::error_report::api_text(.source))]
    ConfigMapUnreadable {
        namespace: String,
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("ConfigMap {namespace}/{name} has no binaryData key {key:?} (keys: {keys})")]
    KeyMissing {
        namespace: String,
        name: String,
        key: String,
        keys: String,
    },
    #[error(
        "file modules are disabled on this host (start it with --module-dir to allow them): {path}"
    )]
    FilesDisabled { path: String },
    #[error("module file {path} is outside the host's --module-dir: name a path relative to it, without '..'")]
    FileOutsideModuleDir { path: String },
    #[error("module file {path} is not a regular file")]
    NotAFile { path: String },
    #[error("module file {path} is larger than {} MiB", MAX_MODULE_BYTES >> 20)]
    FileTooLarge { path: String },
    #[error("module file {path} could not be read: {source}")]
    FileUnreadable {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{source_name}: could not decompress: {source}; a key ending in .gz must hold gzip data: store the module again with `wasmpilot deploy <dir>`")]
    Decompress {
        source_name: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{source_name}: pull Secret {namespace}/{name}: {source}")]
    PullSecret {
        source_name: String,
        namespace: String,
        name: String,
        /// Boxed: it may hold a `kube::Error`, which would make every `ModuleError` large.
        #[source]
        source: Box<oci::PullSecretError>,
    },
    /// A download (OCI pull or URL) failed: refused, unreachable, too large, wrong layout.
    #[error("{source_name}: {source}{}", if source.is_refused() { "" } else { "; check the reference, and that the host can reach it (publish with `wasmpilot push`)" })]
    Fetch {
        source_name: String,
        #[source]
        source: FetchError,
    },
    #[error(
        "{source_name}: sha256 mismatch: the reference pins {expected}, the bytes hash to {actual}; if the new bytes are intended, pin the sha256 `wasmpilot build`/`push` printed (or redeploy with `wasmpilot deploy <dir>`), else restore the pinned component"
    )]
    DigestMismatch {
        source_name: String,
        expected: String,
        actual: String,
    },
    /// (The load error is in the message, not also a cause: it would be said twice.)
    #[error("{source_name}: {error}")]
    Load {
        source_name: String,
        error: LoadError,
    },
}

/// Why downloading a module's bytes failed, by source kind.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    #[error(transparent)]
    Oci(#[from] oci::OciError),
    #[error(transparent)]
    Url(#[from] url::UrlError),
    #[error(transparent)]
    Egress(#[from] crate::egress::EgressCheckError),
}

impl FetchError {
    /// The host's egress policy refused the address: reaching it is the admin's call, not a
    /// reference to check.
    pub fn is_refused(&self) -> bool {
        matches!(
            self,
            FetchError::Egress(crate::egress::EgressCheckError::Refused(_))
                | FetchError::Url(url::UrlError::Refused(_))
        )
    }
}

/// Where module reference `m` makes the host connect, when that is an IP literal `egress`
/// refuses: the field (`url`, `oci.reference`) and the refusal, in the host's words at fetch.
/// Names are checked when the host resolves them.
pub fn refused_literal_address(
    m: &ModuleRef,
    egress: &crate::egress::EgressPolicy,
) -> Option<(&'static str, crate::egress::EgressRefused)> {
    if let Some(u) = &m.url {
        let url = reqwest::Url::parse(&u.url).ok()?;
        return egress.check_url(&url).err().map(|e| ("url", e));
    }
    let o = m.oci.as_ref()?;
    let registry = oci::parse_reference(&o.reference)
        .ok()?
        .resolve_registry()
        .to_string();
    let (host, _) = registry_host_port(&registry, o.insecure);
    let ip = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .parse::<std::net::IpAddr>()
        .ok()?;
    egress
        .check_ip(host, ip)
        .err()
        .map(|e| ("oci.reference", e))
}

/// A registry's host and port (`host:port`, `[v6]:port`, or the scheme's port).
fn registry_host_port(registry: &str, insecure: bool) -> (&str, u16) {
    let default = if insecure { 80 } else { 443 };
    match registry.rsplit_once(':') {
        Some((host, port)) if !port.contains(']') => (host, port.parse().unwrap_or(default)),
        _ => (registry, default),
    }
}

/// A pinned digest is not of the form `sha256:<64 lowercase hex>` (or the bare hex).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{digest:?} is not a sha256 digest (64 lowercase hex characters)")]
pub struct DigestError {
    /// The digest as written.
    pub digest: String,
}

/// What is wrong with a module reference; [`ModuleRefError::field`] says where. The message is
/// the problem alone, for a `DefinitionError` that names the field.
#[derive(Debug, thiserror::Error)]
pub enum ModuleRefError {
    #[error("set exactly one of oci, url, configMap or file")]
    NoSource,
    #[error("set exactly one of oci, url, configMap or file, not {}", .sources.join(" and "))]
    MultipleSources { sources: Vec<&'static str> },
    #[error(transparent)]
    OciReference(#[from] oci::ReferenceError),
    #[error("must not be empty")]
    EmptyPullSecretName,
    #[error(transparent)]
    Url(#[from] url::UrlError),
    #[error("name and key are required")]
    ConfigMapNameOrKeyMissing,
    #[error("must be 1 to 64")]
    ConfigMapPartsOutOfRange,
    /// `field` is that of a name: `configMap.name`, `configMap.namespace`, `configMap.key`,
    /// `oci.pullSecret.name` or `oci.pullSecret.namespace`.
    #[error("{value} is not a valid {what}")]
    NotAName {
        field: &'static str,
        what: &'static str,
        value: String,
    },
    #[error("must not be empty")]
    EmptyFilePath,
    /// `field` is `oci.reference` or `file.path`.
    #[error("is {bytes} bytes, more than {limit}")]
    TooLong {
        field: &'static str,
        bytes: usize,
        limit: usize,
    },
    /// `field` is the pin's field, e.g. `oci.sha256`.
    #[error("{source}")]
    Digest {
        field: &'static str,
        #[source]
        source: DigestError,
    },
}

impl ModuleRefError {
    /// The offending field relative to the reference (e.g. `oci.reference`); empty when the
    /// problem is the reference as a whole.
    pub fn field(&self) -> &'static str {
        match self {
            ModuleRefError::NoSource | ModuleRefError::MultipleSources { .. } => "",
            ModuleRefError::OciReference(_) => "oci.reference",
            ModuleRefError::EmptyPullSecretName => "oci.pullSecret.name",
            ModuleRefError::Url(_) => "url.url",
            ModuleRefError::ConfigMapNameOrKeyMissing => "configMap",
            ModuleRefError::ConfigMapPartsOutOfRange => "configMap.parts",
            ModuleRefError::NotAName { field, .. } => field,
            ModuleRefError::EmptyFilePath => "file.path",
            ModuleRefError::TooLong { field, .. } => field,
            ModuleRefError::Digest { field, .. } => field,
        }
    }
}

/// Normalizes `sha256:<hex>` or `<hex>` to `sha256:<hex>`, refusing anything else.
pub fn normalize_digest(d: &str) -> Result<String, DigestError> {
    let hex = d.strip_prefix("sha256:").unwrap_or(d);
    if hex.len() != 64
        || !hex
            .bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
    {
        return Err(DigestError {
            digest: d.to_string(),
        });
    }
    Ok(format!("sha256:{hex}"))
}

/// `sha256:<hex>` of some bytes.
pub fn digest_of(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

/// Checks that a reference sets exactly one source and that its fields are well formed.
/// The error names the offending field (relative to the reference, e.g. `oci.reference`).
pub fn check_ref(m: &ModuleRef) -> Result<(), ModuleRefError> {
    let sources = m.sources();
    match sources.len() {
        0 => return Err(ModuleRefError::NoSource),
        1 => {}
        _ => return Err(ModuleRefError::MultipleSources { sources }),
    }
    let digest = |field: &'static str, d: &str| {
        normalize_digest(d).map_err(|source| ModuleRefError::Digest { field, source })
    };
    let refused = |field, what, value: &str| ModuleRefError::NotAName {
        field,
        what,
        value: format!(
            "{:?}",
            crate::worker_text::bounded(value, crate::worker_text::NAME_BYTES)
        ),
    };
    let namespace = "namespace (lowercase alphanumerics and '-', at most 63)";
    let too_long = |field, text: &str, limit| ModuleRefError::TooLong {
        field,
        bytes: text.len(),
        limit,
    };
    if let Some(o) = &m.oci {
        if o.reference.len() > crate::crd::MAX_URL_BYTES {
            return Err(too_long(
                "oci.reference",
                &o.reference,
                crate::crd::MAX_URL_BYTES,
            ));
        }
        oci::parse_reference(&o.reference)?;
        if let Some(d) = &o.sha256 {
            digest("oci.sha256", d)?;
        }
        if let Some(s) = &o.pull_secret {
            if s.name.is_empty() {
                return Err(ModuleRefError::EmptyPullSecretName);
            }
            if !is_dns_subdomain(&s.name) {
                return Err(refused(
                    "oci.pullSecret.name",
                    "Secret name (lowercase alphanumerics, '-' and '.', at most 253)",
                    &s.name,
                ));
            }
            if let Some(ns) = s.namespace.as_deref().filter(|ns| !is_dns_label(ns)) {
                return Err(refused("oci.pullSecret.namespace", namespace, ns));
            }
        }
    }
    if let Some(u) = &m.url {
        url::check_url(&u.url, false)?;
        digest("url.sha256", &u.sha256)?;
    }
    if let Some(cm) = &m.config_map {
        if cm.name.is_empty() || cm.key.is_empty() {
            return Err(ModuleRefError::ConfigMapNameOrKeyMissing);
        }
        if !is_dns_subdomain(&cm.name) {
            return Err(refused(
                "configMap.name",
                "ConfigMap name (lowercase alphanumerics, '-' and '.', at most 253)",
                &cm.name,
            ));
        }
        if let Some(ns) = cm.namespace.as_deref().filter(|ns| !is_dns_label(ns)) {
            return Err(refused("configMap.namespace", namespace, ns));
        }
        let key_chars = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.');
        if cm.key.len() > 253 || !cm.key.bytes().all(key_chars) {
            return Err(refused(
                "configMap.key",
                "ConfigMap key (alphanumerics, '-', '_' and '.', at most 253)",
                &cm.key,
            ));
        }
        digest("configMap.sha256", &cm.sha256)?;
        if cm.parts.is_some_and(|p| p == 0 || p > 64) {
            return Err(ModuleRefError::ConfigMapPartsOutOfRange);
        }
    }
    if let Some(f) = &m.file {
        if f.path.is_empty() {
            return Err(ModuleRefError::EmptyFilePath);
        }
        if f.path.len() > crate::crd::MAX_PATH_BYTES {
            return Err(too_long("file.path", &f.path, crate::crd::MAX_PATH_BYTES));
        }
        if let Some(d) = &f.sha256 {
            digest("file.sha256", d)?;
        }
    }
    Ok(())
}

pub use crate::egress::install_crypto_provider;

/// The on-disk compile cache directory `wasmpilot run` uses: `--cache-dir`, else
/// `$XDG_CACHE_HOME/wasmpilot/compiled`, else `~/.cache/wasmpilot/compiled`; `None` with
/// `--no-cache` or when there is no home directory.
pub fn compile_cache_dir(flag: Option<PathBuf>, disabled: bool) -> Option<PathBuf> {
    if disabled {
        return None;
    }
    if flag.is_some() {
        return flag;
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .filter(|v| !v.is_empty())
                .map(|h| PathBuf::from(h).join(".cache"))
        })?;
    Some(base.join("wasmpilot").join("compiled"))
}

/// Counts of how components were made ready (for logs and tests).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Compiled from Wasm (cold).
    pub compiled: usize,
    /// Loaded from the on-disk compile cache.
    pub loaded_from_disk: usize,
}

/// The compiled components in memory, by digest.
type Listing = Mutex<HashMap<String, Listed>>;

/// A compiled component in memory and the workers made from it.
struct Listed {
    component: Component,
    /// Gone once the last worker made from the component is dropped.
    users: Weak<ComponentInUse>,
}

/// Held by every worker made from a cached component ([`PhaseModule::holding`]). When the last
/// one is dropped, a cache that forgets unused components ([`ModuleCache::forgetting_unused`])
/// drops the component: its code, its memory images and its pool slots' affinity go with it.
pub struct ComponentInUse {
    digest: String,
    /// The cache's listing, when it forgets unused components.
    listing: Option<Weak<Listing>>,
}

impl Drop for ComponentInUse {
    fn drop(&mut self) {
        let Some(listing) = self.listing.as_ref().and_then(Weak::upgrade) else {
            return;
        };
        let forgotten = {
            let mut listed = lock_listing(&listing);
            // Another worker may have been made from it since this one's count reached zero.
            if listed
                .get(&self.digest)
                .is_some_and(|l| l.users.strong_count() == 0)
            {
                crate::metrics::METRICS.modules_in_memory.dec();
                listed.remove(&self.digest)
            } else {
                None
            }
        };
        if forgotten.is_some() {
            tracing::info!(digest = %self.digest, "forgot a compiled module: no operator uses it any more");
        }
    }
}

fn lock_listing(listing: &Listing) -> std::sync::MutexGuard<'_, HashMap<String, Listed>> {
    listing.lock().unwrap_or_else(|p| p.into_inner())
}

/// A compiled component as the cache hands it out.
struct CachedComponent {
    /// Where it was read from (for messages).
    source_name: String,
    digest: String,
    component: Component,
    /// Keeps it listed while the worker made from it lives.
    in_use: Arc<ComponentInUse>,
}

/// Fetches, verifies and compiles modules; compiled components are shared by digest.
pub struct ModuleCache {
    sandbox: Arc<Sandbox>,
    client: Option<Client>,
    module_dir: Option<PathBuf>,
    /// Whether a `file` path must stay inside `module_dir` (the host, reading definitions
    /// others wrote), or may be anywhere (the CLI's tools, reading their user's files).
    files_confined: bool,
    compiled: Arc<Listing>,
    /// Whether a component no worker uses any more is dropped (the host), or kept until the
    /// cache is (the CLI's tools, which make a worker per step from the same few modules).
    forget_unused: bool,
    /// One compile at a time: Cranelift already uses every core for one, and each compile peaks
    /// at 300–400 MiB, so modules loaded together wait here (loading a cached one does not).
    /// Handed to the operators asking in turn: one operator's many modules (or slow ones) delay
    /// another's by at most the compile running, not by all of its own queued before.
    compiling: FairSlots,
    /// Fetches at once (see [`FETCH_BUDGET_MIB`]), handed out in turn per operator as compiles
    /// are.
    fetching: FairSlots,
    /// Per operator, its one load at a time past the fast paths (fetching, verifying,
    /// compiling): an operator with many modules, or modules on a slow server, then holds at most
    /// one fetch slot and one place in the compile queue, and another operator's load waits for
    /// at most one of its fetches or compiles, not for all of them.
    lanes: Mutex<HashMap<String, Weak<tokio::sync::Semaphore>>>,
    disk: Option<Arc<CompileCache>>,
    /// Compiles in child processes (the host); `None`: in a blocking thread (the CLI's tools).
    compile_process: Option<CompileProcess>,
    config_map_versions: ConfigMapVersions,
    allow_http_urls: bool,
    /// Where `url` modules may be fetched from.
    egress: crate::egress::EgressPolicy,
    /// Per operator whose grant allows more (`allowFetchFrom`), its own policy.
    operator_egress: Mutex<HashMap<String, crate::egress::EgressPolicy>>,
    progress: bool,
    stats_compiled: AtomicUsize,
    stats_disk: AtomicUsize,
}

impl ModuleCache {
    /// `module_dir`: where relative `file` paths resolve; `None` refuses file modules.
    pub fn new(sandbox: Arc<Sandbox>, client: Option<Client>, module_dir: Option<PathBuf>) -> Self {
        ModuleCache {
            sandbox,
            client,
            module_dir,
            files_confined: false,
            compiled: Arc::new(Mutex::new(HashMap::new())),
            forget_unused: false,
            compiling: FairSlots::new(1),
            fetching: FairSlots::new(FETCH_BUDGET_MIB.div_ceil(MAX_MODULE_MIB) as usize),
            lanes: Mutex::new(HashMap::new()),
            disk: None,
            compile_process: None,
            config_map_versions: ConfigMapVersions::new(None),
            allow_http_urls: false,
            egress: crate::egress::EgressPolicy::unrestricted(),
            operator_egress: Mutex::new(HashMap::new()),
            progress: false,
            stats_compiled: AtomicUsize::new(0),
            stats_disk: AtomicUsize::new(0),
        }
    }

    /// Keeps compiled components in `dir` (see [`compile_cache`]), at most
    /// [`compile_cache::DEFAULT_MAX_BYTES`] of them; `None` disables it.
    pub fn with_compile_cache(self, dir: Option<PathBuf>) -> Self {
        self.with_compile_cache_limited(dir, compile_cache::DEFAULT_MAX_BYTES)
    }

    /// Keeps compiled components in `dir`, at most `max_bytes` of them (the least recently used
    /// go first); `None` disables it. A directory that cannot be created is reported and the host
    /// runs without a disk cache.
    pub fn with_compile_cache_limited(mut self, dir: Option<PathBuf>, max_bytes: u64) -> Self {
        self.disk = dir.and_then(
            |dir| match CompileCache::open_limited(&dir, self.sandbox.engine(), max_bytes) {
                Ok(c) => {
                    tracing::info!(dir = %c.dir().display(), "compile cache");
                    self.config_map_versions =
                        ConfigMapVersions::new(Some(c.dir().join("config-maps")));
                    Some(Arc::new(c))
                }
                Err(e) => {
                    tracing::warn!(dir = %dir.display(), error = %e, "compile cache unusable; compiling in memory only");
                    None
                }
            },
        );
        self
    }

    /// Compiles in child processes as `process` says ([`compile_process`]), not in this one.
    pub fn compiling_in(mut self, process: Option<CompileProcess>) -> Self {
        self.compile_process = process;
        self
    }

    /// Drops a compiled component once no worker made from it is left (see [`ComponentInUse`]):
    /// a host whose operators change modules keeps only the ones in use. Loading one again
    /// reads the disk cache; without a disk cache, every component is kept.
    pub fn forgetting_unused(mut self) -> Self {
        self.forget_unused = true;
        self
    }

    /// Refuses a `file` path that is absolute or climbs out with `..`: the host reads only the
    /// files an admin put in `--module-dir`, whatever a WasmOperator names.
    pub fn confining_files(mut self) -> Self {
        self.files_confined = true;
        self
    }

    /// The digests of the compiled components held in memory (for tests and diagnostics).
    pub fn digests_in_memory(&self) -> Vec<String> {
        let mut digests: Vec<String> = self.lock().keys().cloned().collect();
        digests.sort();
        digests
    }

    /// Lets `url` modules use plain `http://` (tests with an in-process server). Not reachable
    /// from a WasmOperator: there, URLs must be https.
    pub fn allow_plain_http_urls(mut self) -> Self {
        self.allow_http_urls = true;
        self
    }

    /// Fetches `url` and `oci` modules only from the addresses `egress` allows (default: any, as
    /// the CLI tools fetch for their user; the host sets its policy).
    pub fn with_egress(mut self, egress: crate::egress::EgressPolicy) -> Self {
        self.egress = egress;
        self
    }

    /// Fetches `operator`'s modules where `egress` allows (its grant's allowances over the
    /// host's policy); `None`: where the host's policy allows.
    pub fn set_operator_egress(&self, operator: &str, egress: Option<crate::egress::EgressPolicy>) {
        let mut policies = self
            .operator_egress
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        match egress {
            Some(egress) => policies.insert(operator.to_string(), egress),
            None => policies.remove(operator),
        };
    }

    fn egress_for(&self, operator: &str) -> crate::egress::EgressPolicy {
        self.operator_egress
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(operator)
            .cloned()
            .unwrap_or_else(|| self.egress.clone())
    }

    /// Prints a line to stderr before and after each long step (download, compile) instead of
    /// logging it: for the CLI commands (`simulate`, `plan`, `run-phase`); `wasmpilot run` logs.
    pub fn with_progress(mut self) -> Self {
        self.progress = true;
        self
    }

    /// A progress line for the CLI, or an info log for the host.
    fn progress(&self, message: std::fmt::Arguments<'_>) {
        if self.progress {
            eprintln!("{message}");
        } else {
            tracing::info!("{message}");
        }
    }

    pub fn sandbox(&self) -> &Arc<Sandbox> {
        &self.sandbox
    }

    pub fn stats(&self) -> CacheStats {
        CacheStats {
            compiled: self.stats_compiled.load(Ordering::Relaxed),
            loaded_from_disk: self.stats_disk.load(Ordering::Relaxed),
        }
    }

    /// The phase component `r` names, loaded for `operator` (whose turn it waits for when
    /// fetching or compiling, see [`FairSlots`]).
    pub async fn phase(&self, operator: &str, r: &ModuleRef) -> Result<PhaseModule, ModuleError> {
        let c = self.component(operator, r).await?;
        self.sandbox
            .phase_module(&c.digest, &c.component)
            .map(|m| m.holding(c.in_use))
            .map_err(|error| ModuleError::Load {
                source_name: c.source_name,
                error,
            })
    }

    /// The finalizer component `r` names, loaded for `operator` (see [`ModuleCache::phase`]).
    pub async fn finalizer(
        &self,
        operator: &str,
        r: &ModuleRef,
    ) -> Result<FinalizerModule, ModuleError> {
        let c = self.component(operator, r).await?;
        self.sandbox
            .finalizer_module(&c.digest, &c.component)
            .map(|m| m.holding(c.in_use))
            .map_err(|error| ModuleError::Load {
                source_name: c.source_name,
                error,
            })
    }

    /// A phase's component (`r`: its module or its shadow) with the phase's limits and
    /// randomness: how the controller and the offline commands alike run it.
    pub async fn phase_worker(
        &self,
        operator: &str,
        r: &ModuleRef,
        limits: &LimitOverride,
        randomness: Randomness,
    ) -> Result<PhaseModule, ModuleError> {
        Ok(self
            .phase(operator, r)
            .await?
            .with_limits(self.sandbox.call_limits(limits))
            .with_randomness(randomness))
    }

    /// The operator's finalizer component with the finalizer's limits and randomness.
    pub async fn finalizer_worker(
        &self,
        operator: &str,
        r: &ModuleRef,
        limits: &LimitOverride,
        randomness: Randomness,
    ) -> Result<FinalizerModule, ModuleError> {
        Ok(self
            .finalizer(operator, r)
            .await?
            .with_limits(self.sandbox.call_limits(limits))
            .with_randomness(randomness))
    }

    /// The compiled component of a ConfigMap module whose ConfigMaps did not change since their
    /// content was verified against the same pin (see [`config_map_versions`]): their metadata
    /// is read, not the component. `None` sends the caller to the full fetch, which also reports
    /// whatever went wrong here.
    async fn unchanged_config_map(&self, r: &ModuleRef) -> Option<CachedComponent> {
        let cm = r.config_map.as_ref()?;
        if r.sources().len() != 1 {
            return None;
        }
        let pinned = normalize_digest(&cm.sha256).ok()?;
        let source = ConfigMapSource::of(cm);
        let api = self.config_map_api(&source).ok()?;
        let mut versions = Vec::with_capacity(source.names.len());
        for name in &source.names {
            let meta = api.get_metadata(name).await.ok()?;
            versions.push(part_version(name, &meta.metadata));
        }
        let digest = self
            .config_map_versions
            .verified(&source.display, &versions, &pinned)?;
        if let Some(c) = self.in_memory(source.display.clone(), &digest) {
            return Some(c);
        }
        let started = Instant::now();
        let (disk, engine, key) = (
            self.disk.clone()?,
            self.sandbox.engine().clone(),
            digest.clone(),
        );
        let component = tokio::task::spawn_blocking(move || disk.load(&engine, &key))
            .await
            .ok()??;
        self.stats_disk.fetch_add(1, Ordering::Relaxed);
        if !self.progress {
            let elapsed_ms = started.elapsed().as_secs_f64() * 1000.0;
            tracing::info!(%digest, source = %source.display, elapsed_ms, "loaded compiled module from the compile cache (ConfigMap unchanged since verified)");
        }
        Some(self.keep_first(source.display, &digest, component))
    }

    fn config_map_api(&self, source: &ConfigMapSource) -> Result<Api<ConfigMap>, ModuleError> {
        let client = self.client.clone().ok_or_else(|| ModuleError::Offline {
            source_name: source.display.clone(),
        })?;
        Ok(Api::namespaced(client, &source.namespace))
    }

    /// The compiled component `r` names: from memory, the disk cache, or fetched and compiled,
    /// waiting for `operator`'s turn to fetch and to compile.
    async fn component(
        &self,
        operator: &str,
        r: &ModuleRef,
    ) -> Result<CachedComponent, ModuleError> {
        if let Some(found) = self.unchanged_config_map(r).await {
            return Ok(found);
        }
        let lane = self.lane(operator);
        // Closed never: the lane lives while this load holds it.
        let _lane = lane.acquire().await.map_err(|e| ModuleError::Load {
            source_name: r.sources().join(" "),
            error: LoadError::Compile(e.to_string()),
        })?;
        // The fetch budget's share is taken once the source sends (see `fetch`) and held until
        // the bytes are compiled or dropped.
        let Fetched {
            source_name,
            bytes,
            pinned,
            config_map_versions,
            _budget,
        } = self.fetch(operator, r).await?;
        let digest = digest_of(&bytes);
        if let Some(expected) = pinned {
            let expected =
                normalize_digest(&expected).map_err(|_| ModuleError::DigestMismatch {
                    source_name: source_name.clone(),
                    expected: expected.clone(),
                    actual: digest.clone(),
                })?;
            if expected != digest {
                return Err(ModuleError::DigestMismatch {
                    source_name,
                    expected,
                    actual: digest,
                });
            }
            if let Some(versions) = config_map_versions {
                self.config_map_versions
                    .record(&source_name, versions, &digest);
            }
        }
        if let Some(c) = self.in_memory(source_name.clone(), &digest) {
            return Ok(c);
        }
        let started = Instant::now();
        let load_error = |error| ModuleError::Load {
            source_name: source_name.clone(),
            error,
        };
        let cached = match &self.disk {
            Some(disk) => {
                let (disk, engine, key) =
                    (disk.clone(), self.sandbox.engine().clone(), digest.clone());
                tokio::task::spawn_blocking(move || disk.load(&engine, &key))
                    .await
                    .map_err(|e| load_error(LoadError::Compile(e.to_string())))?
            }
            None => None,
        };
        let loaded = match cached {
            Some(c) => Loaded::Cached(c),
            None => {
                // Closed never: the slots live as long as `self`.
                let permit = self
                    .compiling
                    .acquire(&self.sandbox.tenant_of(operator))
                    .await
                    .map_err(|e| load_error(LoadError::Compile(e.to_string())))?;
                // Compiled by another load while this one waited for the permit?
                if let Some(c) = self.in_memory(source_name.clone(), &digest) {
                    return Ok(c);
                }
                self.compile(&digest, bytes, permit)
                    .await
                    .map_err(load_error)?
            }
        };
        let elapsed_ms = started.elapsed().as_secs_f64() * 1000.0;
        let compiled = match loaded {
            Loaded::Compiled(c) => {
                self.stats_compiled.fetch_add(1, Ordering::Relaxed);
                if self.progress {
                    eprintln!(
                        "compiled {} in {:.1}s",
                        short_digest(&digest),
                        elapsed_ms / 1000.0
                    );
                } else {
                    tracing::info!(%digest, source = %source_name, elapsed_ms, "compiled module");
                }
                c
            }
            Loaded::Cached(c) => {
                self.stats_disk.fetch_add(1, Ordering::Relaxed);
                if !self.progress {
                    tracing::info!(%digest, source = %source_name, elapsed_ms, "loaded compiled module from the compile cache");
                }
                c
            }
        };
        Ok(self.keep_first(source_name, &digest, compiled))
    }

    /// `operator`'s load lane (see `lanes`): the one its loads share while any is held.
    fn lane(&self, operator: &str) -> Arc<tokio::sync::Semaphore> {
        let mut lanes = self.lanes.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(lane) = lanes.get(operator).and_then(Weak::upgrade) {
            return lane;
        }
        lanes.retain(|_, lane| lane.strong_count() > 0);
        let lane = Arc::new(tokio::sync::Semaphore::new(1));
        lanes.insert(operator.to_string(), Arc::downgrade(&lane));
        lane
    }

    /// The component of `digest` if it is in memory, with a hold on it.
    fn in_memory(&self, source_name: String, digest: &str) -> Option<CachedComponent> {
        let mut listed = self.lock();
        let entry = listed.get_mut(digest)?;
        let in_use = self.hold(digest, entry);
        Some(CachedComponent {
            source_name,
            digest: digest.to_string(),
            component: entry.component.clone(),
            in_use,
        })
    }

    /// The component kept for `digest`: the one already there if another load of the same digest
    /// finished first (operators starting together each read the disk cache), else `component`.
    /// One copy per digest stays mapped and parsed, however many operators or phases use it.
    fn keep_first(
        &self,
        source_name: String,
        digest: &str,
        component: Component,
    ) -> CachedComponent {
        let mut listed = self.lock();
        let entry = listed.entry(digest.to_string()).or_insert_with(|| {
            crate::metrics::METRICS.modules_in_memory.inc();
            Listed {
                component,
                users: Weak::new(),
            }
        });
        let in_use = self.hold(digest, entry);
        CachedComponent {
            source_name,
            digest: digest.to_string(),
            component: entry.component.clone(),
            in_use,
        }
    }

    /// A hold on `entry` (the listing is locked): the current one, or a new one when its last
    /// worker is gone (whose drop, waiting for the lock, then finds it in use again).
    fn hold(&self, digest: &str, entry: &mut Listed) -> Arc<ComponentInUse> {
        if let Some(in_use) = entry.users.upgrade() {
            return in_use;
        }
        let in_use = Arc::new(ComponentInUse {
            digest: digest.to_string(),
            // Without a disk cache, loading a forgotten one again would compile it again.
            listing: (self.forget_unused && self.disk.is_some())
                .then(|| Arc::downgrade(&self.compiled)),
        });
        entry.users = Arc::downgrade(&in_use);
        in_use
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Listed>> {
        lock_listing(&self.compiled)
    }

    /// Compiles `bytes` (whose digest is `digest`) in a compile process when the cache has one,
    /// else off the async threads, within [`COMPILE_TIMEOUT`]; the disk cache, when there is
    /// one, stores the result. `permit` (the one compile slot) is held until the compile itself
    /// ends: a killed process's at once, a thread's even when it was given up on.
    async fn compile(
        &self,
        digest: &str,
        bytes: Vec<u8>,
        permit: WorkerSlot,
    ) -> Result<Loaded, LoadError> {
        if self.progress {
            match &self.disk {
                Some(d) => eprintln!(
                    "compiling {} (first use; cached in {})",
                    short_digest(digest),
                    home_relative(d.dir().parent().unwrap_or(d.dir()))
                ),
                None => eprintln!(
                    "compiling {} (no compile cache: every run compiles)",
                    short_digest(digest)
                ),
            }
        }
        let (sandbox, disk, key) = (self.sandbox.clone(), self.disk.clone(), digest.to_string());
        if let Some(process) = &self.compile_process {
            // The child is killed at its timeout, so the permit is held no longer than it lives.
            let artifact = process.precompile(bytes).await;
            drop(permit);
            let artifact = artifact?;
            return tokio::task::spawn_blocking(move || match disk {
                Some(disk) => disk.store_and_load(sandbox.engine(), &key, &artifact),
                None => compile_cache::load_artifact(sandbox.engine(), &artifact),
            })
            .await
            .map_err(|e| LoadError::Compile(e.to_string()))?
            .map(Loaded::Compiled);
        }
        let compiling = tokio::task::spawn_blocking(move || {
            let _permit = permit;
            match disk {
                Some(disk) => disk.compile_and_store(sandbox.engine(), &key, &bytes),
                None => sandbox.compile(&bytes),
            }
        });
        tokio::time::timeout(COMPILE_TIMEOUT, compiling)
            .await
            .map_err(|_| {
                LoadError::CompileStopped(format!(
                    "it took longer than {COMPILE_TIMEOUT:?}; given up (a smaller component compiles faster)"
                ))
            })?
            .map_err(|e| LoadError::Compile(e.to_string()))?
            .map(Loaded::Compiled)
    }

    /// The bytes `r` names, with their source's name for messages, the digest it pins and
    /// `operator`'s share of the fetch budget.
    async fn fetch(&self, operator: &str, r: &ModuleRef) -> Result<Fetched, ModuleError> {
        match r.sources().as_slice() {
            [] => return Err(ModuleError::NoSource),
            [_] => {}
            more => return Err(ModuleError::MultipleSources(more.join(" and "))),
        }
        let egress = self.egress_for(operator);
        // `operator`'s share of the fetch budget, in its turn (closed never: it lives as
        // `self`). A registry or server takes it once it has answered with the module's size,
        // so one that answers late or never holds none while another operator's module waits;
        // ConfigMaps and files, read from the API server and the disk, take it first.
        let share = async |_size: u64| {
            self.fetching
                .acquire(&self.sandbox.tenant_of(operator))
                .await
                .map_err(|e| ModuleError::Load {
                    source_name: r.sources().join(" "),
                    error: LoadError::Compile(e.to_string()),
                })
        };
        if let Some(o) = &r.oci {
            let source_name = format!("OCI {}", o.reference);
            let auth = match &o.pull_secret {
                None => oci::Auth::Anonymous,
                Some(s) => {
                    let namespace = s
                        .namespace
                        .clone()
                        .unwrap_or_else(|| DEFAULT_MODULE_NAMESPACE.to_string());
                    let client = self.client.clone().ok_or_else(|| ModuleError::Offline {
                        source_name: source_name.clone(),
                    })?;
                    let secret_failed = |source| ModuleError::PullSecret {
                        source_name: source_name.clone(),
                        namespace: namespace.clone(),
                        name: s.name.clone(),
                        source: Box::new(source),
                    };
                    // Not even read when its credentials would travel in clear text.
                    if o.insecure {
                        oci::plain_http_credentials_allowed(&o.reference).map_err(secret_failed)?;
                    }
                    oci::auth_from_secret(&client, &namespace, &s.name, &o.reference)
                        .await
                        .map_err(secret_failed)?
                }
            };
            // The registry is the definition's to name: only where the egress policy allows.
            // Checked here for a clear refusal before any request; the pull's client checks
            // every address it connects to (the registry, its token service, its storage).
            let registry = oci::parse_reference(&o.reference)
                .map(|r| r.resolve_registry().to_string())
                .unwrap_or_default();
            let (host, port) = registry_host_port(&registry, o.insecure);
            egress
                .check_host(host, port)
                .await
                .map_err(|e| ModuleError::Fetch {
                    source_name: source_name.clone(),
                    source: e.into(),
                })?;
            self.progress(format_args!("pulling oci://{} …", o.reference));
            let started = Instant::now();
            let (pulled, budget) = oci::pull_reserving(
                &o.reference,
                &auth,
                o.insecure,
                &egress,
                MAX_MODULE_BYTES,
                FETCH_TIMEOUT,
                share,
            )
            .await
            .map_err(|e| ModuleError::Fetch {
                source_name: source_name.clone(),
                source: e.into(),
            })?;
            let budget = budget?;
            if self.progress {
                eprintln!(
                    "pulled {} KiB in {:.1}s, {} (manifest {})",
                    pulled.bytes.len().div_ceil(1024),
                    started.elapsed().as_secs_f64(),
                    pulled.layer_digest,
                    pulled.manifest_digest
                );
            } else {
                tracing::info!(source = %source_name, bytes = pulled.bytes.len(), manifest = %pulled.manifest_digest, layer = %pulled.layer_digest, "pulled module");
            }
            // The layer digest was verified against the bytes while pulling; a pin, when set,
            // must match it too. Without a pin the manifest's layer digest is the component's.
            let pin = o.sha256.clone().or(Some(pulled.layer_digest));
            return Ok(Fetched::new(source_name, pulled.bytes, pin, budget));
        }
        if let Some(u) = &r.url {
            let source_name = format!("URL {}", url::redact(&u.url));
            self.progress(format_args!("downloading {} …", url::redact(&u.url)));
            let started = Instant::now();
            let (bytes, budget) = url::fetch_reserving(
                &u.url,
                self.allow_http_urls,
                &egress,
                MAX_MODULE_BYTES,
                FETCH_TIMEOUT,
                share,
            )
            .await
            .map_err(|e| ModuleError::Fetch {
                source_name: source_name.clone(),
                source: e.into(),
            })?;
            let budget = budget?;
            if self.progress {
                eprintln!(
                    "downloaded {} KiB in {:.1}s, {}",
                    bytes.len().div_ceil(1024),
                    started.elapsed().as_secs_f64(),
                    digest_of(&bytes)
                );
            } else {
                tracing::info!(source = %source_name, bytes = bytes.len(), digest = %digest_of(&bytes), "downloaded module");
            }
            return Ok(Fetched::new(
                source_name,
                bytes,
                Some(u.sha256.clone()),
                budget,
            ));
        }
        if let Some(cm) = &r.config_map {
            let source = ConfigMapSource::of(cm);
            let api = self.config_map_api(&source)?;
            let budget = share(MAX_MODULE_BYTES).await?;
            let mut joined = Vec::new();
            let mut versions = Vec::new();
            for name in &source.names {
                let map = api
                    .get(name)
                    .await
                    .map_err(|e| source.unreadable(name, e))?;
                versions.push(part_version(name, &map.metadata));
                let data = map.binary_data.unwrap_or_default();
                let Some(bytes) = data.get(&cm.key) else {
                    return Err(ModuleError::KeyMissing {
                        namespace: source.namespace,
                        name: name.clone(),
                        key: cm.key.clone(),
                        keys: data.keys().cloned().collect::<Vec<_>>().join(", "),
                    });
                };
                joined.extend_from_slice(&bytes.0);
            }
            let bytes = maybe_gunzip(&source.display, &cm.key, joined)?;
            let mut fetched = Fetched::new(source.display, bytes, Some(cm.sha256.clone()), budget);
            fetched.config_map_versions = Some(versions);
            return Ok(fetched);
        }
        if let Some(f) = &r.file {
            let Some(dir) = &self.module_dir else {
                return Err(ModuleError::FilesDisabled {
                    path: f.path.clone(),
                });
            };
            let relative = Path::new(&f.path);
            if self.files_confined
                && (relative.is_absolute()
                    || relative
                        .components()
                        .any(|c| matches!(c, std::path::Component::ParentDir)))
            {
                return Err(ModuleError::FileOutsideModuleDir {
                    path: crate::worker_text::bounded(&f.path, crate::worker_text::NAME_BYTES)
                        .into_owned(),
                });
            }
            let path = dir.join(relative);
            let source_name = format!("file {}", path.display());
            let budget = share(MAX_MODULE_BYTES).await?;
            let bytes = read_module_file(&path).await?;
            let bytes = maybe_gunzip(&source_name, &f.path, bytes)?;
            return Ok(Fetched::new(source_name, bytes, f.sha256.clone(), budget));
        }
        Err(ModuleError::NoSource)
    }
}

impl Drop for ModuleCache {
    fn drop(&mut self) {
        crate::metrics::METRICS
            .modules_in_memory
            .dec_by(self.lock().len() as i64);
    }
}

/// `sha256:0123456789ab…`: enough to tell components apart in progress lines.
fn short_digest(digest: &str) -> String {
    match digest.get(..19) {
        Some(prefix) if prefix.len() < digest.len() => format!("{prefix}…"),
        _ => digest.to_string(),
    }
}

/// A path with the home directory written `~`, for progress lines.
fn home_relative(path: &std::path::Path) -> String {
    std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .and_then(|home| path.strip_prefix(home).ok())
        .map(|rest| format!("~/{}", rest.display()))
        .unwrap_or_else(|| path.display().to_string())
}

/// A module's bytes as fetched, before they are verified.
struct Fetched {
    /// Where they came from, for messages.
    source_name: String,
    bytes: Vec<u8>,
    /// The digest the reference pins, if it pins one.
    pinned: Option<String>,
    /// For a ConfigMap source: the versions of its parts that held these bytes.
    config_map_versions: Option<Vec<PartVersion>>,
    /// The fetch budget's share they hold until compiled or dropped.
    _budget: WorkerSlot,
}

impl Fetched {
    fn new(
        source_name: String,
        bytes: Vec<u8>,
        pinned: Option<String>,
        budget: WorkerSlot,
    ) -> Self {
        Fetched {
            source_name,
            bytes,
            pinned,
            config_map_versions: None,
            _budget: budget,
        }
    }
}

/// Where a ConfigMap module lives: its namespace and the ConfigMaps holding its parts.
struct ConfigMapSource {
    namespace: String,
    names: Vec<String>,
    /// `ConfigMap <ns>/<name> key <key>` (or the parts' range), for messages and records.
    display: String,
}

impl ConfigMapSource {
    fn of(cm: &ConfigMapModule) -> Self {
        let namespace = cm
            .namespace
            .clone()
            .unwrap_or_else(|| DEFAULT_MODULE_NAMESPACE.to_string());
        let display = match cm.parts {
            Some(parts) => format!(
                "ConfigMaps {namespace}/{}-0…{} key {}",
                cm.name,
                parts.saturating_sub(1),
                cm.key
            ),
            None => format!("ConfigMap {namespace}/{} key {}", cm.name, cm.key),
        };
        let names = match cm.parts {
            None => vec![cm.name.clone()],
            Some(parts) => (0..parts).map(|i| format!("{}-{i}", cm.name)).collect(),
        };
        ConfigMapSource {
            namespace,
            names,
            display,
        }
    }

    fn unreadable(&self, name: &str, source: kube::Error) -> ModuleError {
        ModuleError::ConfigMapUnreadable {
            namespace: self.namespace.clone(),
            name: name.to_string(),
            source,
        }
    }
}

/// The version of a ConfigMap named `name` whose metadata is `meta`.
fn part_version(
    name: &str,
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
) -> PartVersion {
    PartVersion {
        name: name.to_string(),
        uid: meta.uid.clone().unwrap_or_default(),
        resource_version: meta.resource_version.clone().unwrap_or_default(),
    }
}

/// Modules stored under a name ending in `.gz` are gzip-compressed (ConfigMaps hold at most 1 MiB);
/// the digest always covers the uncompressed component.
/// A module file's bytes: a regular file (not a device or a pipe, which may never end) of at
/// most [`MAX_MODULE_BYTES`].
async fn read_module_file(path: &Path) -> Result<Vec<u8>, ModuleError> {
    use tokio::io::AsyncReadExt;
    let shown = || path.display().to_string();
    let unreadable = |source| ModuleError::FileUnreadable {
        path: shown(),
        source,
    };
    let file = tokio::fs::File::open(path).await.map_err(unreadable)?;
    if !file.metadata().await.map_err(unreadable)?.is_file() {
        return Err(ModuleError::NotAFile { path: shown() });
    }
    let mut bytes = Vec::new();
    file.take(MAX_MODULE_BYTES + 1)
        .read_to_end(&mut bytes)
        .await
        .map_err(unreadable)?;
    if bytes.len() as u64 > MAX_MODULE_BYTES {
        return Err(ModuleError::FileTooLarge { path: shown() });
    }
    Ok(bytes)
}

fn maybe_gunzip(source_name: &str, name: &str, bytes: Vec<u8>) -> Result<Vec<u8>, ModuleError> {
    if !name.ends_with(".gz") {
        return Ok(bytes);
    }
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(bytes.as_slice())
        .take(MAX_MODULE_BYTES)
        .read_to_end(&mut out)
        .map_err(|source| ModuleError::Decompress {
            source_name: source_name.to_string(),
            source,
        })?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::{FileModule, OciModule, UrlModule};

    #[test]
    fn a_refused_address_is_not_sent_to_check_its_reference() {
        let refused = crate::egress::EgressRefused::Address {
            host: "169.254.169.254".into(),
            ip: "169.254.169.254".parse().expect("ip"),
            class: "a link-local",
        };
        let e = ModuleError::Fetch {
            source_name: "URL https://169.254.169.254/x.wasm".into(),
            source: FetchError::Url(url::UrlError::Refused(refused)),
        };
        assert_eq!(
            e.to_string(),
            "URL https://169.254.169.254/x.wasm: a link-local address 169.254.169.254, which the host does not fetch from for an operator (an admin allows it with `wasmpilot run --allow-fetch-from 169.254.169.254`)"
        );
        let unreachable = ModuleError::Fetch {
            source_name: "URL https://example.invalid/x.wasm".into(),
            source: FetchError::Url(url::UrlError::NoHost),
        };
        assert!(
            unreachable.to_string().ends_with("; check the reference, and that the host can reach it (publish with `wasmpilot push`)"),
            "{unreachable}"
        );
    }

    #[test]
    fn digests_normalize() {
        let hex = "a".repeat(64);
        assert_eq!(normalize_digest(&hex).unwrap(), format!("sha256:{hex}"));
        assert_eq!(
            normalize_digest(&format!("sha256:{hex}")).unwrap(),
            format!("sha256:{hex}")
        );
        assert_eq!(
            normalize_digest("sha256:abc").unwrap_err().to_string(),
            "\"sha256:abc\" is not a sha256 digest (64 lowercase hex characters)"
        );
        assert!(normalize_digest(&"A".repeat(64)).is_err());
    }

    #[test]
    fn gzip_round_trip() {
        use std::io::Write;
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        enc.write_all(b"component bytes").unwrap();
        let gz = enc.finish().unwrap();
        assert_eq!(
            maybe_gunzip("t", "m.wasm.gz", gz).unwrap(),
            b"component bytes"
        );
        assert_eq!(
            maybe_gunzip("t", "m.wasm", b"raw".to_vec()).unwrap(),
            b"raw"
        );
        assert!(maybe_gunzip("t", "m.wasm.gz", b"not gzip".to_vec()).is_err());
    }

    /// A file module of [`EMPTY_COMPONENT`] in a fresh directory, and a cache of it (the compile
    /// cache in the same directory), forgetting unused components or not.
    fn empty_module(forget_unused: bool) -> (tempfile::TempDir, ModuleRef, ModuleCache) {
        let dir = tempfile::tempdir().expect("a temporary directory");
        std::fs::write(dir.path().join("m.wasm"), EMPTY_COMPONENT).expect("the module written");
        let r = ModuleRef {
            file: Some(FileModule {
                path: "m.wasm".into(),
                sha256: None,
            }),
            ..Default::default()
        };
        let sandbox = Sandbox::new(Default::default()).expect("a sandbox");
        let mut modules = ModuleCache::new(sandbox, None, Some(dir.path().to_path_buf()))
            .with_compile_cache(Some(dir.path().join("compiled")));
        if forget_unused {
            modules = modules.forgetting_unused();
        }
        (dir, r, modules)
    }

    /// Operators starting together load the same digest from the disk cache at once, each load
    /// mapping and parsing its own copy: only one may stay, and every later load gets it.
    #[tokio::test]
    async fn loads_of_one_digest_racing_keep_one_copy() {
        let (dir, r, modules) = empty_module(false);
        let sandbox = modules.sandbox().clone();
        let digest = digest_of(EMPTY_COMPONENT);
        // Two loads that both missed the map: two copies from the disk cache, both alive.
        let disk =
            CompileCache::open(&dir.path().join("compiled"), sandbox.engine()).expect("cache");
        disk.compile_and_store(sandbox.engine(), &digest, EMPTY_COMPONENT)
            .expect("compiled");
        let first = disk.load(sandbox.engine(), &digest).expect("first copy");
        let second = disk.load(sandbox.engine(), &digest).expect("second copy");
        assert_ne!(first.image_range(), second.image_range(), "two copies");
        let kept_first = modules.keep_first("a".into(), &digest, first.clone());
        let kept_second = modules.keep_first("b".into(), &digest, second);
        assert_eq!(kept_first.component.image_range(), first.image_range());
        assert_eq!(kept_second.component.image_range(), first.image_range());
        // A load through the module reference finds it too.
        let loaded = modules.component("test", &r).await.expect("loaded");
        assert_eq!(loaded.digest, digest);
        assert_eq!(loaded.component.image_range(), first.image_range());
    }

    /// A host whose operators moved to other modules keeps only the components still in use: the
    /// last worker of a digest dropped, it leaves memory; a worker still holding it keeps it.
    #[tokio::test]
    async fn a_component_no_worker_uses_leaves_memory() {
        let (_dir, r, modules) = empty_module(true);
        let digest = digest_of(EMPTY_COMPONENT);
        let first = modules.component("test", &r).await.expect("loaded");
        let second = modules.component("test", &r).await.expect("loaded again");
        assert_eq!(modules.stats().compiled, 1);
        assert_eq!(modules.digests_in_memory(), std::slice::from_ref(&digest));
        assert_eq!(
            first.component.image_range(),
            second.component.image_range(),
            "one copy while both are held"
        );
        drop(first);
        assert_eq!(
            modules.digests_in_memory(),
            std::slice::from_ref(&digest),
            "still used by the second"
        );
        drop(second);
        assert!(
            modules.digests_in_memory().is_empty(),
            "forgotten with its last user"
        );
        // Needed again: read back from the disk cache, not compiled.
        let again = modules
            .component("test", &r)
            .await
            .expect("loaded once more");
        assert_eq!(modules.digests_in_memory(), [digest]);
        assert_eq!(
            modules.stats(),
            CacheStats {
                compiled: 1,
                loaded_from_disk: 1
            }
        );
        drop(again);
    }

    /// The CLI's tools make a worker per step from the same modules: their cache keeps a
    /// component when its workers are gone, so no step reads or compiles it again.
    #[tokio::test]
    async fn a_cache_that_keeps_components_keeps_an_unused_one() {
        let (_dir, r, modules) = empty_module(false);
        drop(modules.component("test", &r).await.expect("loaded"));
        assert_eq!(modules.digests_in_memory(), [digest_of(EMPTY_COMPONENT)]);
        drop(modules.component("test", &r).await.expect("loaded again"));
        assert_eq!(
            modules.stats(),
            CacheStats {
                compiled: 1,
                loaded_from_disk: 0
            }
        );
    }

    #[test]
    fn exactly_one_source() {
        let file = Some(FileModule {
            path: "x.wasm".into(),
            sha256: None,
        });
        let oci = OciModule {
            reference: "127.0.0.1:5000/ops/x:v1".into(),
            sha256: None,
            pull_secret: None,
            insecure: true,
        };
        let none = ModuleRef::default();
        let e = check_ref(&none).unwrap_err();
        assert_eq!(e.field(), "");
        assert!(e.to_string().contains("exactly one"), "{e}");
        let both = ModuleRef {
            file: file.clone(),
            oci: Some(oci.clone()),
            ..Default::default()
        };
        let e = check_ref(&both).unwrap_err().to_string();
        assert!(e.contains("oci and file"), "{e}");
        assert!(check_ref(&ModuleRef {
            oci: Some(oci.clone()),
            ..Default::default()
        })
        .is_ok());
        let bad_pin = ModuleRef {
            oci: Some(OciModule {
                sha256: Some("nope".into()),
                ..oci.clone()
            }),
            ..Default::default()
        };
        let e = check_ref(&bad_pin).unwrap_err();
        assert_eq!(e.field(), "oci.sha256");
        assert!(
            e.to_string().contains("\"nope\" is not a sha256 digest"),
            "{e}"
        );
        for (secret, field) in [
            (("regcred", Some("Team A")), "oci.pullSecret.namespace"),
            ((&*"s".repeat(40_000), None), "oci.pullSecret.name"),
        ] {
            let r = ModuleRef {
                oci: Some(OciModule {
                    pull_secret: Some(crate::crd::SecretRef {
                        name: secret.0.into(),
                        namespace: secret.1.map(str::to_string),
                    }),
                    ..oci.clone()
                }),
                ..Default::default()
            };
            let e = check_ref(&r).unwrap_err();
            assert_eq!(e.field(), field, "{e}");
            assert!(e.to_string().len() < 512, "{} bytes", e.to_string().len());
        }
        let bad_ref = ModuleRef {
            oci: Some(OciModule {
                reference: "Not A Reference".into(),
                ..oci
            }),
            ..Default::default()
        };
        assert_eq!(check_ref(&bad_ref).unwrap_err().field(), "oci.reference");
        let http = ModuleRef {
            url: Some(UrlModule {
                url: "http://example.com/x.wasm".into(),
                sha256: "a".repeat(64),
            }),
            ..Default::default()
        };
        assert_eq!(check_ref(&http).unwrap_err().field(), "url.url");
        let long = ModuleRef {
            url: Some(UrlModule {
                url: format!("https://example.com/{}.wasm", "u".repeat(40_000)),
                sha256: "a".repeat(64),
            }),
            ..Default::default()
        };
        let e = check_ref(&long).unwrap_err().to_string();
        assert!(e.contains("more than the limit of 2048"), "{e}");
        let config_map = |name: &str, namespace: Option<&str>, key: &str| ModuleRef {
            config_map: Some(crate::crd::ConfigMapModule {
                name: name.into(),
                namespace: namespace.map(str::to_string),
                key: key.into(),
                sha256: "a".repeat(64),
                parts: None,
            }),
            ..Default::default()
        };
        assert!(check_ref(&config_map("m.v1", Some("team-a"), "m_v1.wasm.gz")).is_ok());
        for (r, field) in [
            (
                config_map(&"u".repeat(40_000), None, "m.wasm"),
                "configMap.name",
            ),
            (config_map("Modules", None, "m.wasm"), "configMap.name"),
            (
                config_map("m", Some("a.b"), "m.wasm"),
                "configMap.namespace",
            ),
            (config_map("m", None, "../m.wasm"), "configMap.key"),
        ] {
            let e = check_ref(&r).unwrap_err();
            assert_eq!(e.field(), field, "{e}");
            assert!(e.to_string().len() < 512, "{} bytes", e.to_string().len());
        }
    }

    /// The host reads only files inside its --module-dir, and only regular files of at most
    /// [`MAX_MODULE_BYTES`]: a WasmOperator naming `/etc/shadow`, `../x` or `/dev/zero` (which
    /// would fill the host's memory) is refused. The CLI's tools read their user's paths.
    #[tokio::test]
    async fn the_host_reads_only_regular_files_inside_its_module_dir() {
        let (dir, _, modules) = empty_module(true);
        let modules = modules.confining_files();
        let file = |path: &str| ModuleRef {
            file: Some(FileModule {
                path: path.into(),
                sha256: None,
            }),
            ..Default::default()
        };
        let outside = dir.path().join("m.wasm").display().to_string();
        for path in [outside.as_str(), "../m.wasm", "sub/../../m.wasm"] {
            let e = modules
                .component("test", &file(path))
                .await
                .err()
                .expect("refused");
            assert!(
                matches!(e, ModuleError::FileOutsideModuleDir { .. }),
                "{path}: {e}"
            );
        }
        assert!(modules.component("test", &file("m.wasm")).await.is_ok());
        std::fs::create_dir(dir.path().join("sub")).expect("a directory");
        let e = modules
            .component("test", &file("sub"))
            .await
            .err()
            .expect("refused");
        assert!(matches!(e, ModuleError::NotAFile { .. }), "{e}");
        let (_tools_dir, _, tools) = empty_module(false);
        let e = tools
            .component("test", &file("/dev/zero"))
            .await
            .err()
            .expect("refused");
        assert!(matches!(e, ModuleError::NotAFile { .. }), "{e}");
        assert!(
            tools.component("test", &file(&outside)).await.is_ok(),
            "the CLI's tools read any path"
        );
    }

    #[test]
    fn cache_dir_defaults() {
        assert_eq!(compile_cache_dir(Some("/x".into()), true), None);
        assert_eq!(
            compile_cache_dir(Some("/x".into()), false),
            Some(PathBuf::from("/x"))
        );
    }
}
