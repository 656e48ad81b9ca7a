//! ConfigMap versions already verified to hold a component: loading a module whose ConfigMaps did
//! not change since reads only their metadata, not the component (nor unzips and hashes it again).
//!
//! A ConfigMap cannot change without its `resourceVersion` changing, and a recreated one has
//! another `uid`, so the (uid, resourceVersion) of every part names its content. A version is
//! recorded only after that content matched the pinned digest, and is used only for the same
//! pin: a ConfigMap edited since (tampered or republished) is read and verified again, so a
//! digest mismatch is still reported. Records live in memory and, when there is a compile cache,
//! in its directory (`config-maps/`, private to the host like the compiled code beside it), so a
//! restarted host benefits too. A record that cannot be read or written only costs a full read.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// What names one ConfigMap's content.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartVersion {
    pub name: String,
    pub uid: String,
    pub resource_version: String,
}

/// The verified content of a module source: where it is, which versions, which digest.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct Record {
    /// `namespace/name[×parts] key`: the reference the versions belong to.
    source: String,
    parts: Vec<PartVersion>,
    digest: String,
}

/// Verified ConfigMap versions, in memory and (optionally) on disk.
pub struct ConfigMapVersions {
    dir: Option<PathBuf>,
    memory: Mutex<HashMap<String, Record>>,
}

impl ConfigMapVersions {
    /// Records kept in `dir` as well as in memory; `None`: in memory only.
    pub fn new(dir: Option<PathBuf>) -> Self {
        let dir = dir.filter(|d| match std::fs::create_dir_all(d) {
            Ok(()) => true,
            Err(e) => {
                tracing::warn!(dir = %d.display(), error = %e, "ConfigMap version records kept in memory only");
                false
            }
        });
        ConfigMapVersions {
            dir,
            memory: Mutex::default(),
        }
    }

    /// The digest recorded for `source` at exactly these part versions, if it is `pinned`.
    pub fn verified(&self, source: &str, parts: &[PartVersion], pinned: &str) -> Option<String> {
        let matches = |r: &Record| r.source == source && r.parts == parts && r.digest == pinned;
        if let Some(r) = self.lock().get(source) {
            return matches(r).then(|| r.digest.clone());
        }
        let path = self.path(source)?;
        let record: Record = serde_json::from_slice(&std::fs::read(path).ok()?).ok()?;
        let digest = matches(&record).then(|| record.digest.clone());
        self.lock().insert(source.to_string(), record);
        digest
    }

    /// Records that `source` at these part versions held a component of `digest` (verified).
    pub fn record(&self, source: &str, parts: Vec<PartVersion>, digest: &str) {
        let record = Record {
            source: source.to_string(),
            parts,
            digest: digest.to_string(),
        };
        if let Some(path) = self.path(source) {
            let written = serde_json::to_vec(&record)
                .map_err(std::io::Error::other)
                .and_then(|json| write_atomically(&path, &json));
            if let Err(e) = written {
                tracing::debug!(path = %path.display(), error = %e, "ConfigMap version record not written");
            }
        }
        self.lock().insert(source.to_string(), record);
    }

    fn path(&self, source: &str) -> Option<PathBuf> {
        let name = hex::encode(Sha256::digest(source.as_bytes()));
        Some(self.dir.as_ref()?.join(format!("{name}.json")))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Record>> {
        self.memory.lock().unwrap_or_else(|p| p.into_inner())
    }
}

fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = path.with_extension(format!("tmp-{}", std::process::id()));
    std::fs::write(&tmp, bytes)
        .and_then(|()| std::fs::rename(&tmp, path))
        .inspect_err(|_| {
            let _ = std::fs::remove_file(&tmp);
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn part(rv: &str) -> PartVersion {
        PartVersion {
            name: "autoroute-syncing".into(),
            uid: "u-1".into(),
            resource_version: rv.into(),
        }
    }

    const SOURCE: &str = "wasmpilot-system/autoroute-syncing key syncing.wasm.gz";

    #[test]
    fn a_recorded_version_answers_only_for_the_same_versions_and_pin() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let versions = ConfigMapVersions::new(Some(dir.path().to_path_buf()));
        assert_eq!(versions.verified(SOURCE, &[part("7")], "sha256:aa"), None);
        versions.record(SOURCE, vec![part("7")], "sha256:aa");
        assert_eq!(
            versions
                .verified(SOURCE, &[part("7")], "sha256:aa")
                .as_deref(),
            Some("sha256:aa")
        );
        // Edited since (another resourceVersion), recreated (another uid), or pinned elsewhere.
        assert_eq!(versions.verified(SOURCE, &[part("8")], "sha256:aa"), None);
        let recreated = PartVersion {
            uid: "u-2".into(),
            ..part("7")
        };
        assert_eq!(versions.verified(SOURCE, &[recreated], "sha256:aa"), None);
        assert_eq!(versions.verified(SOURCE, &[part("7")], "sha256:bb"), None);
    }

    #[test]
    fn records_survive_a_restart_through_the_directory() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        ConfigMapVersions::new(Some(dir.path().to_path_buf())).record(
            SOURCE,
            vec![part("7")],
            "sha256:aa",
        );
        let restarted = ConfigMapVersions::new(Some(dir.path().to_path_buf()));
        assert_eq!(
            restarted
                .verified(SOURCE, &[part("7")], "sha256:aa")
                .as_deref(),
            Some("sha256:aa")
        );
        let memory_only = ConfigMapVersions::new(None);
        assert_eq!(
            memory_only.verified(SOURCE, &[part("7")], "sha256:aa"),
            None
        );
    }

    #[test]
    fn an_unreadable_record_is_only_a_miss() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let versions = ConfigMapVersions::new(Some(dir.path().to_path_buf()));
        versions.record(SOURCE, vec![part("7")], "sha256:aa");
        for entry in std::fs::read_dir(dir.path()).expect("the records") {
            std::fs::write(entry.expect("a record").path(), b"{not json").expect("overwritten");
        }
        let restarted = ConfigMapVersions::new(Some(dir.path().to_path_buf()));
        assert_eq!(restarted.verified(SOURCE, &[part("7")], "sha256:aa"), None);
    }
}
