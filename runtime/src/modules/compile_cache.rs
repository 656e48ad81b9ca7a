//! Compiled components on disk, so a restarted host does not recompile (~1 s per component;
//! loading a cached one takes milliseconds).
//!
//! Layout: `<dir>/<engine key>/<component sha256 hex>.cwasm` and, next to it, `….cwasm.sha256`.
//! The engine key hashes `Engine::precompile_compatibility_hash()` (wasmtime version, target and
//! every setting that changes generated code), so another engine never even looks at an entry.
//!
//! A `.cwasm` is native code that wasmtime loads without validation, so an entry is used only
//! when its sidecar holds sha256(tag ‖ component digest ‖ engine key ‖ .cwasm bytes): a torn
//! write, bit rot, a truncated file or an entry copied under another component's name fails the
//! check, and wasmtime itself refuses an artifact from an incompatible engine. Any such entry is
//! recompiled and overwritten; cache I/O errors are logged, never fatal. Both files are written to
//! a temporary name and renamed into place. The directory is created private (0700): whoever
//! can write it can run code in the host, like whoever can replace the host binary.
//!
//! The directory is kept under a size limit (`--cache-max-mib`): when a store or an open finds it
//! larger, the least recently used entries go first (a load marks its entry used). A component in
//! use is mapped, so deleting its entry takes nothing from a running host.

use crate::sandbox::LoadError;
use sha2::{Digest, Sha256};
use std::hash::{Hash, Hasher};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::SystemTime;
use wasmtime::component::Component;
use wasmtime::Engine;

/// The most compiled code one engine's directory holds unless told otherwise (~50 Python
/// components, or hundreds of Rust ones).
pub const DEFAULT_MAX_BYTES: u64 = 2 << 30;

/// Versioned tag mixed into every integrity digest.
const TAG: &[u8] = b"wasmpilot-cwasm-v1\n";

/// How a component was made ready.
pub enum Loaded {
    /// Compiled from Wasm now (and stored, when the cache is writable).
    Compiled(Component),
    /// Loaded from a verified cache entry.
    Cached(Component),
}

impl Loaded {
    pub fn component(&self) -> &Component {
        match self {
            Loaded::Compiled(c) | Loaded::Cached(c) => c,
        }
    }

    pub fn was_cached(&self) -> bool {
        matches!(self, Loaded::Cached(_))
    }
}

/// One engine's directory of compiled components.
pub struct CompileCache {
    dir: PathBuf,
    engine_key: String,
    max_bytes: u64,
}

/// The integrity sidecar of the entry `<hex>.cwasm`: `<hex>.cwasm.sha256`.
fn sidecar_of(entry: &Path) -> PathBuf {
    entry.with_extension("cwasm.sha256")
}

/// Feeds `Hash` output into sha256, so the engine key is stable across processes.
struct Sha256Hasher(Sha256);

impl Hasher for Sha256Hasher {
    fn finish(&self) -> u64 {
        0
    }
    fn write(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }
}

/// A short, stable name for an engine's compatibility hash.
pub fn engine_key(engine: &Engine) -> String {
    let mut h = Sha256Hasher(Sha256::new());
    engine.precompile_compatibility_hash().hash(&mut h);
    hex::encode(&h.0.finalize()[..12])
}

impl CompileCache {
    /// Creates (if needed) `<root>/<engine key>/`, holding at most [`DEFAULT_MAX_BYTES`].
    pub fn open(root: &Path, engine: &Engine) -> std::io::Result<Self> {
        Self::open_limited(root, engine, DEFAULT_MAX_BYTES)
    }

    /// Creates (if needed) `<root>/<engine key>/` and trims it to `max_bytes` of entries.
    pub fn open_limited(root: &Path, engine: &Engine, max_bytes: u64) -> std::io::Result<Self> {
        let engine_key = engine_key(engine);
        let dir = root.join(&engine_key);
        let mut builder = std::fs::DirBuilder::new();
        builder.recursive(true);
        #[cfg(unix)]
        std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
        builder.create(&dir)?;
        // Probe writability now, so a read-only directory is reported once at start.
        let probe = dir.join(format!(".probe-{}", std::process::id()));
        std::fs::write(&probe, b"")?;
        let _ = std::fs::remove_file(&probe);
        let cache = CompileCache {
            dir,
            engine_key,
            max_bytes,
        };
        cache.trim(None);
        Ok(cache)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The entry and sidecar paths for a component digest (`sha256:<hex>`).
    pub fn paths(&self, digest: &str) -> (PathBuf, PathBuf) {
        let hex = digest.strip_prefix("sha256:").unwrap_or(digest);
        // Digests are computed by the host; refuse anything that is not plain hex anyway.
        let hex: String = hex.chars().filter(char::is_ascii_hexdigit).collect();
        let entry = self.dir.join(format!("{hex}.cwasm"));
        let sidecar = sidecar_of(&entry);
        (entry, sidecar)
    }

    fn integrity(&self, digest: &str, cwasm: &[u8]) -> String {
        let mut h = Sha256::new();
        h.update(TAG);
        h.update(digest.as_bytes());
        h.update(b"\n");
        h.update(self.engine_key.as_bytes());
        h.update(b"\n");
        h.update(cwasm);
        hex::encode(h.finalize())
    }

    /// The component of a verified entry; `None` (with a warning for a bad entry) otherwise.
    /// The entry is opened once, hashed from a mapping of that file (no copy), and the engine
    /// maps the same open file (not the path again): nothing read between the check and the
    /// load can differ from what was checked.
    pub fn load(&self, engine: &Engine, digest: &str) -> Option<Component> {
        let (entry, sidecar) = self.paths(digest);
        let unreadable = |e: &dyn std::fmt::Display| {
            tracing::warn!(entry = %entry.display(), error = %e, "compile cache entry unreadable; recompiling");
        };
        let file = match std::fs::File::open(&entry) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
            Err(e) => {
                unreadable(&e);
                return None;
            }
        };
        let expected = std::fs::read_to_string(&sidecar).unwrap_or_default();
        let checked = match file.metadata() {
            Ok(m) if m.len() == 0 => expected.trim() == self.integrity(digest, &[]),
            Ok(_) => {
                // SAFETY: entries are never written in place (a store renames a complete file
                // over the old name), so the mapped bytes cannot change while they are hashed.
                let mapped = unsafe { memmap2::MmapOptions::new().populate().map(&file) };
                match mapped {
                    Ok(bytes) => expected.trim() == self.integrity(digest, &bytes),
                    Err(e) => {
                        unreadable(&e);
                        return None;
                    }
                }
            }
            Err(e) => {
                unreadable(&e);
                return None;
            }
        };
        if !checked {
            tracing::warn!(entry = %entry.display(), %digest, "compile cache entry fails its integrity check (corrupt, truncated or foreign); recompiling");
            return None;
        }
        // SAFETY: `deserialize_file` runs the file's bytes as native code without validating
        // them, and maps them lazily. These bytes were written by this host's
        // `precompile_component` for this digest and engine key: the sidecar check above (over
        // exactly this open file) rules out torn or corrupted writes and entries of other
        // components, and wasmtime refuses artifacts of an incompatible engine. The file is never
        // modified in place (see above), and the directory is private to the host's user.
        match unsafe { Component::deserialize_file(engine, same_open_file(&file, &entry)) } {
            Ok(c) => {
                // Used now: the last entry a trim deletes. (Best effort: a failure only makes
                // the entry look older.)
                let _ = file.set_modified(SystemTime::now());
                Some(c)
            }
            Err(e) => {
                tracing::warn!(entry = %entry.display(), %digest, error = %format!("{e:#}"), "compile cache entry refused by the engine; recompiling");
                None
            }
        }
    }

    /// Stores a precompiled component: each file is written under a temporary name and renamed.
    pub fn store(&self, digest: &str, cwasm: &[u8]) -> std::io::Result<()> {
        let (entry, sidecar) = self.paths(digest);
        write_atomically(&entry, cwasm)?;
        write_atomically(&sidecar, self.integrity(digest, cwasm).as_bytes())?;
        self.trim(Some(&entry));
        Ok(())
    }

    /// Deletes the least recently used entries (oldest modification time: a load sets it) until
    /// the entries total at most `max_bytes`; never `keep`, the entry just stored. Errors are
    /// logged: a failed deletion only leaves the directory larger.
    fn trim(&self, keep: Option<&Path>) {
        let Ok(listing) = std::fs::read_dir(&self.dir) else {
            return;
        };
        let mut entries: Vec<(SystemTime, u64, PathBuf)> = listing
            .filter_map(|e| {
                let e = e.ok()?;
                let path = e.path();
                if path.extension()? != "cwasm" {
                    return None;
                }
                let meta = e.metadata().ok()?;
                Some((meta.modified().ok()?, meta.len(), path))
            })
            .collect();
        let mut total: u64 = entries.iter().map(|(_, len, _)| len).sum();
        if total <= self.max_bytes {
            return;
        }
        let before = total;
        entries.sort();
        let mut removed = 0usize;
        for (_, len, path) in entries {
            if total <= self.max_bytes {
                break;
            }
            if Some(path.as_path()) == keep {
                continue;
            }
            match std::fs::remove_file(&path) {
                Ok(()) => {
                    let _ = std::fs::remove_file(sidecar_of(&path));
                    total -= len;
                    removed += 1;
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => total -= len,
                Err(e) => {
                    tracing::warn!(entry = %path.display(), error = %e, "could not delete a compile cache entry");
                }
            }
        }
        tracing::info!(
            dir = %self.dir.display(),
            removed,
            mib_before = before >> 20,
            mib_after = total >> 20,
            limit_mib = self.max_bytes >> 20,
            "compile cache trimmed to its size limit (least recently used entries first)"
        );
    }

    /// A verified cached component, else compiles `bytes` (whose digest is `digest`), stores the
    /// result and returns it. Only compile errors fail; cache problems are logged.
    pub fn load_or_compile(
        &self,
        engine: &Engine,
        digest: &str,
        bytes: &[u8],
    ) -> Result<Loaded, LoadError> {
        if let Some(c) = self.load(engine, digest) {
            return Ok(Loaded::Cached(c));
        }
        self.compile_and_store(engine, digest, bytes)
            .map(Loaded::Compiled)
    }

    /// Compiles `bytes` (whose digest is `digest`) and stores the result; only compile errors
    /// fail, a store that fails is logged.
    pub fn compile_and_store(
        &self,
        engine: &Engine,
        digest: &str,
        bytes: &[u8],
    ) -> Result<Component, LoadError> {
        let cwasm = engine
            .precompile_component(bytes)
            .map_err(|e| LoadError::Compile(format!("{e:#}")))?;
        if let Err(e) = self.store(digest, &cwasm) {
            tracing::warn!(dir = %self.dir.display(), %digest, error = %e, "could not write the compile cache entry");
        }
        // SAFETY: `cwasm` was produced just now by `precompile_component` of this very engine.
        unsafe { Component::deserialize(engine, &cwasm) }
            .map_err(|e| LoadError::Compile(format!("{e:#}")))
    }

    /// Stores `cwasm`, which a compile process of this host's binary made from the component of
    /// `digest`, and loads it from its entry (mapped from the file, not copied into the heap);
    /// from memory when the store failed.
    pub fn store_and_load(
        &self,
        engine: &Engine,
        digest: &str,
        cwasm: &[u8],
    ) -> Result<Component, LoadError> {
        match self.store(digest, cwasm) {
            Ok(()) => {
                if let Some(c) = self.load(engine, digest) {
                    return Ok(c);
                }
            }
            Err(e) => {
                tracing::warn!(dir = %self.dir.display(), %digest, error = %e, "could not write the compile cache entry");
            }
        }
        load_artifact(engine, cwasm)
    }
}

/// Loads an artifact that a compile process of this host's binary made just now.
pub fn load_artifact(engine: &Engine, cwasm: &[u8]) -> Result<Component, LoadError> {
    // SAFETY: `cwasm` comes from `precompile_component` in a child process of this same
    // executable (`compile_process`), with the settings of this engine, over a pipe only the two
    // processes hold; wasmtime still refuses an artifact of an incompatible engine.
    unsafe { Component::deserialize(engine, cwasm) }
        .map_err(|e| LoadError::Compile(format!("the compiled component did not load: {e:#}")))
}

/// A path that opens `file` itself: `/proc/self/fd/N` on Linux (the inode already open, even if
/// `path` was renamed over since), else `path`.
fn same_open_file(file: &std::fs::File, path: &Path) -> PathBuf {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        let by_fd = PathBuf::from(format!("/proc/self/fd/{}", file.as_raw_fd()));
        if by_fd.exists() {
            return by_fd;
        }
    }
    let _ = file;
    path.to_path_buf()
}

fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("entry");
    let tmp = dir.join(format!(
        ".{name}.tmp-{}-{:?}",
        std::process::id(),
        std::thread::current().id()
    ));
    let result = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::modules::EMPTY_COMPONENT;
    use wasmtime::Config;

    fn engine(epoch: bool) -> Engine {
        let mut config = Config::new();
        config.epoch_interruption(epoch);
        config.wasm_component_model(true);
        Engine::new(&config).unwrap()
    }

    fn setup() -> (tempfile::TempDir, Engine, CompileCache, String) {
        let tmp = tempfile::tempdir().unwrap();
        let engine = engine(true);
        let cache = CompileCache::open(tmp.path(), &engine).unwrap();
        let digest = crate::modules::digest_of(EMPTY_COMPONENT);
        (tmp, engine, cache, digest)
    }

    fn entry_verifies(cache: &CompileCache, engine: &Engine, digest: &str) -> bool {
        cache.load(engine, digest).is_some()
    }

    /// Sets an entry's last use `age` ago.
    fn used_ago(cache: &CompileCache, digest: &str, age: std::time::Duration) {
        let (entry, _) = cache.paths(digest);
        std::fs::File::open(entry)
            .unwrap()
            .set_modified(SystemTime::now() - age)
            .unwrap();
    }

    #[test]
    fn over_its_limit_the_least_recently_used_entries_go_first() {
        use std::time::Duration;
        let tmp = tempfile::tempdir().unwrap();
        let engine = engine(true);
        let cwasm = engine.precompile_component(EMPTY_COMPONENT).unwrap();
        let size = cwasm.len() as u64;
        // Room for three entries.
        let cache = CompileCache::open_limited(tmp.path(), &engine, 3 * size + size / 2).unwrap();
        let digest = |n: u8| format!("sha256:{}", hex::encode([n; 32]));
        for n in 1..=3 {
            cache.store(&digest(n), &cwasm).unwrap();
        }
        used_ago(&cache, &digest(1), Duration::from_secs(300));
        used_ago(&cache, &digest(2), Duration::from_secs(200));
        used_ago(&cache, &digest(3), Duration::from_secs(100));
        // The oldest one is loaded (used) now: the next store evicts the second oldest.
        let (entry_1, _) = cache.paths(&digest(1));
        let before = std::fs::metadata(&entry_1).unwrap().modified().unwrap();
        assert!(
            entry_verifies(&cache, &engine, &digest(1)),
            "premise: entry 1 loads"
        );
        assert!(
            std::fs::metadata(&entry_1).unwrap().modified().unwrap() > before,
            "a load marks the entry used"
        );
        cache.store(&digest(4), &cwasm).unwrap();
        let present = |n: u8| cache.paths(&digest(n)).0.exists();
        let sidecar = |n: u8| cache.paths(&digest(n)).1.exists();
        assert!(
            !present(2) && !sidecar(2),
            "the least recently used entry and its sidecar are deleted"
        );
        assert!(present(1) && present(3) && present(4), "the others stay");
        // A limit below one entry keeps the one just stored.
        let tiny = CompileCache::open_limited(tmp.path(), &engine, 1).unwrap();
        assert!((1..=4).all(|n| !present(n)), "opening over the limit trims");
        tiny.store(&digest(5), &cwasm).unwrap();
        assert!(
            tiny.paths(&digest(5)).0.exists(),
            "the entry just stored is kept"
        );
    }

    #[test]
    fn miss_compiles_and_stores_then_hits() {
        let (_tmp, engine, cache, digest) = setup();
        let first = cache
            .load_or_compile(&engine, &digest, EMPTY_COMPONENT)
            .unwrap();
        assert!(!first.was_cached());
        let (entry, sidecar) = cache.paths(&digest);
        assert!(entry.exists() && sidecar.exists());
        let second = cache
            .load_or_compile(&engine, &digest, EMPTY_COMPONENT)
            .unwrap();
        assert!(second.was_cached());
        // No temporary files are left behind.
        let names: Vec<String> = std::fs::read_dir(cache.dir())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names.len(), 2, "{names:?}");
    }

    #[test]
    fn corrupt_entry_is_recompiled_and_overwritten() {
        let (_tmp, engine, cache, digest) = setup();
        cache
            .load_or_compile(&engine, &digest, EMPTY_COMPONENT)
            .unwrap();
        let (entry, _) = cache.paths(&digest);
        let mut bytes = std::fs::read(&entry).unwrap();
        let mid = bytes.len() / 2;
        bytes[mid] ^= 0xff;
        std::fs::write(&entry, &bytes).unwrap();
        assert!(!entry_verifies(&cache, &engine, &digest));
        let again = cache
            .load_or_compile(&engine, &digest, EMPTY_COMPONENT)
            .unwrap();
        assert!(!again.was_cached(), "a corrupt entry must not be used");
        assert!(
            entry_verifies(&cache, &engine, &digest),
            "rewritten entry verifies"
        );
    }

    #[test]
    fn truncated_empty_or_unsigned_entries_are_recompiled() {
        let (_tmp, engine, cache, digest) = setup();
        let (entry, sidecar) = cache.paths(&digest);
        for damage in ["truncate", "empty", "no-sidecar", "garbage-sidecar"] {
            cache
                .load_or_compile(&engine, &digest, EMPTY_COMPONENT)
                .unwrap();
            match damage {
                "truncate" => {
                    let b = std::fs::read(&entry).unwrap();
                    std::fs::write(&entry, &b[..b.len() / 3]).unwrap();
                }
                "empty" => std::fs::write(&entry, b"").unwrap(),
                "no-sidecar" => std::fs::remove_file(&sidecar).unwrap(),
                _ => std::fs::write(&sidecar, "not a digest").unwrap(),
            }
            let r = cache
                .load_or_compile(&engine, &digest, EMPTY_COMPONENT)
                .unwrap();
            assert!(!r.was_cached(), "{damage}: entry must be recompiled");
            assert!(entry_verifies(&cache, &engine, &digest), "{damage}");
        }
    }

    #[test]
    fn entry_of_another_component_is_not_trusted() {
        let (_tmp, engine, cache, digest) = setup();
        cache
            .load_or_compile(&engine, &digest, EMPTY_COMPONENT)
            .unwrap();
        // Copy the entry (with its sidecar) under another component's digest.
        let other = format!("sha256:{}", "b".repeat(64));
        let (from_entry, from_sidecar) = cache.paths(&digest);
        let (to_entry, to_sidecar) = cache.paths(&other);
        std::fs::copy(from_entry, &to_entry).unwrap();
        std::fs::copy(from_sidecar, to_sidecar).unwrap();
        assert!(cache.load(&engine, &other).is_none());
    }

    #[test]
    fn entry_of_an_incompatible_engine_is_recompiled() {
        let (_tmp, engine, cache, digest) = setup();
        // A well-formed artifact with a valid sidecar, but compiled by an engine with other
        // settings (no epoch interruption): wasmtime refuses it, the cache recompiles.
        let foreign = engine_without_epochs_cwasm();
        cache.store(&digest, &foreign).unwrap();
        assert!(cache.load(&engine, &digest).is_none());
        let r = cache
            .load_or_compile(&engine, &digest, EMPTY_COMPONENT)
            .unwrap();
        assert!(!r.was_cached());
        assert!(entry_verifies(&cache, &engine, &digest));
        assert_ne!(std::fs::read(cache.paths(&digest).0).unwrap(), foreign);
    }

    fn engine_without_epochs_cwasm() -> Vec<u8> {
        engine(false).precompile_component(EMPTY_COMPONENT).unwrap()
    }

    #[test]
    fn engines_with_other_settings_use_other_directories() {
        let tmp = tempfile::tempdir().unwrap();
        let a = CompileCache::open(tmp.path(), &engine(true)).unwrap();
        let b = CompileCache::open(tmp.path(), &engine(false)).unwrap();
        assert_ne!(a.dir(), b.dir());
        assert_eq!(
            engine_key(&engine(true)),
            engine_key(&engine(true)),
            "stable"
        );
    }

    #[test]
    fn unwritable_cache_still_compiles() {
        let (_tmp, engine, cache, digest) = setup();
        // Make the entry path a directory: writes fail, compiling still succeeds.
        let (entry, _) = cache.paths(&digest);
        std::fs::create_dir_all(&entry).unwrap();
        let r = cache
            .load_or_compile(&engine, &digest, EMPTY_COMPONENT)
            .unwrap();
        assert!(!r.was_cached());
    }

    #[test]
    fn invalid_wasm_is_a_compile_error() {
        let (_tmp, engine, cache, digest) = setup();
        assert!(matches!(
            cache.load_or_compile(&engine, &digest, b"not wasm"),
            Err(LoadError::Compile(_))
        ));
    }
}
