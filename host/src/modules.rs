//! Fetches component bytes (ConfigMap key or local file), verifies their sha256, and compiles
//! each digest once: compiling costs ~1 s, instantiating a compiled component ~20 µs.

use crate::crd::ModuleRef;
use crate::sandbox::{FinalizerModule, LoadError, PhaseModule, Sandbox};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::{Api, Client};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::io::Read;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use wasmtime::component::Component;

/// Namespace that holds module ConfigMaps when the reference names none.
pub const DEFAULT_MODULE_NAMESPACE: &str = "wasmpilot-system";

/// Largest component accepted, after decompression.
const MAX_MODULE_BYTES: u64 = 64 << 20;

/// A module could not be made ready; the message names the source.
#[derive(Debug, thiserror::Error)]
pub enum ModuleError {
    #[error("module reference sets neither configMap nor file")]
    NoSource,
    #[error("{source_name}: no cluster connection to read it from (offline run)")]
    Offline { source_name: String },
    #[error("ConfigMap {namespace}/{name} could not be read: {source}")]
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
    #[error("module file {path} could not be read: {source}")]
    FileUnreadable {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{source_name}: could not decompress: {source}")]
    Decompress {
        source_name: String,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "{source_name}: sha256 mismatch: the reference pins {expected}, the bytes hash to {actual}"
    )]
    DigestMismatch {
        source_name: String,
        expected: String,
        actual: String,
    },
    #[error("{source_name}: {source}")]
    Load {
        source_name: String,
        #[source]
        source: LoadError,
    },
}

/// Normalizes `sha256:<hex>` or `<hex>` to `sha256:<hex>`, refusing anything else.
pub fn normalize_digest(d: &str) -> Result<String, String> {
    let hex = d.strip_prefix("sha256:").unwrap_or(d);
    if hex.len() != 64
        || !hex
            .bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
    {
        return Err(format!(
            "{d:?} is not a sha256 digest (64 lowercase hex characters)"
        ));
    }
    Ok(format!("sha256:{hex}"))
}

/// `sha256:<hex>` of some bytes.
pub fn digest_of(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

/// Fetches, verifies and compiles modules; compiled components are shared by digest.
pub struct ModuleCache {
    sandbox: Arc<Sandbox>,
    client: Option<Client>,
    module_dir: Option<PathBuf>,
    compiled: Mutex<HashMap<String, Component>>,
}

impl ModuleCache {
    /// `module_dir`: where relative `file` paths resolve; `None` refuses file modules.
    pub fn new(sandbox: Arc<Sandbox>, client: Option<Client>, module_dir: Option<PathBuf>) -> Self {
        ModuleCache {
            sandbox,
            client,
            module_dir,
            compiled: Mutex::new(HashMap::new()),
        }
    }

    pub fn sandbox(&self) -> &Arc<Sandbox> {
        &self.sandbox
    }

    pub async fn phase(&self, r: &ModuleRef) -> Result<PhaseModule, ModuleError> {
        let (name, digest, component) = self.component(r).await?;
        self.sandbox
            .phase_module(&digest, &component)
            .map_err(|source| ModuleError::Load {
                source_name: name,
                source,
            })
    }

    pub async fn finalizer(&self, r: &ModuleRef) -> Result<FinalizerModule, ModuleError> {
        let (name, digest, component) = self.component(r).await?;
        self.sandbox
            .finalizer_module(&digest, &component)
            .map_err(|source| ModuleError::Load {
                source_name: name,
                source,
            })
    }

    /// Returns (source name, digest, compiled component).
    async fn component(&self, r: &ModuleRef) -> Result<(String, String, Component), ModuleError> {
        let (source_name, bytes, pinned) = self.fetch(r).await?;
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
        }
        if let Some(c) = self.lock().get(&digest) {
            return Ok((source_name, digest, c.clone()));
        }
        let sandbox = self.sandbox.clone();
        let compiled = tokio::task::spawn_blocking(move || sandbox.compile(&bytes))
            .await
            .map_err(|e| ModuleError::Load {
                source_name: source_name.clone(),
                source: LoadError::Compile(e.to_string()),
            })?
            .map_err(|source| ModuleError::Load {
                source_name: source_name.clone(),
                source,
            })?;
        tracing::info!(%digest, source = %source_name, "compiled module");
        self.lock().insert(digest.clone(), compiled.clone());
        Ok((source_name, digest, compiled))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Component>> {
        self.compiled.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Returns (source name for messages, component bytes, pinned digest).
    async fn fetch(&self, r: &ModuleRef) -> Result<(String, Vec<u8>, Option<String>), ModuleError> {
        if let Some(cm) = &r.config_map {
            let namespace = cm
                .namespace
                .clone()
                .unwrap_or_else(|| DEFAULT_MODULE_NAMESPACE.to_string());
            let source_name = format!("ConfigMap {namespace}/{} key {}", cm.name, cm.key);
            let client = self.client.clone().ok_or_else(|| ModuleError::Offline {
                source_name: source_name.clone(),
            })?;
            let map = Api::<ConfigMap>::namespaced(client, &namespace)
                .get(&cm.name)
                .await
                .map_err(|source| ModuleError::ConfigMapUnreadable {
                    namespace: namespace.clone(),
                    name: cm.name.clone(),
                    source,
                })?;
            let data = map.binary_data.unwrap_or_default();
            let Some(bytes) = data.get(&cm.key) else {
                return Err(ModuleError::KeyMissing {
                    namespace,
                    name: cm.name.clone(),
                    key: cm.key.clone(),
                    keys: data.keys().cloned().collect::<Vec<_>>().join(", "),
                });
            };
            let bytes = maybe_gunzip(&source_name, &cm.key, bytes.0.clone())?;
            return Ok((source_name, bytes, Some(cm.sha256.clone())));
        }
        if let Some(f) = &r.file {
            let Some(dir) = &self.module_dir else {
                return Err(ModuleError::FilesDisabled {
                    path: f.path.clone(),
                });
            };
            let path = dir.join(&f.path);
            let source_name = format!("file {}", path.display());
            let bytes =
                tokio::fs::read(&path)
                    .await
                    .map_err(|source| ModuleError::FileUnreadable {
                        path: path.display().to_string(),
                        source,
                    })?;
            let bytes = maybe_gunzip(&source_name, &f.path, bytes)?;
            return Ok((source_name, bytes, f.sha256.clone()));
        }
        Err(ModuleError::NoSource)
    }
}

/// Modules stored under a name ending in `.gz` are gzip-compressed (ConfigMaps hold at most 1 MiB);
/// the digest always covers the uncompressed component.
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

    #[test]
    fn digests_normalize() {
        let hex = "a".repeat(64);
        assert_eq!(normalize_digest(&hex).unwrap(), format!("sha256:{hex}"));
        assert_eq!(
            normalize_digest(&format!("sha256:{hex}")).unwrap(),
            format!("sha256:{hex}")
        );
        assert!(normalize_digest("sha256:abc").is_err());
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
}
