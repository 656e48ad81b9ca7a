//! The memory the host may use — the tightest cgroup memory limit on the way from the process's
//! own cgroup to its hierarchy's root (v1 or v2, nested), else the machine's — and the workers'
//! memory budget taken from it.
//!
//! The process's cgroup comes from `/proc/self/cgroup`, where that cgroup's directory is from the
//! mount table (`/proc/self/mountinfo`): a host in a systemd unit with `MemoryMax`, in a pod
//! without a cgroup namespace, or in a test harness's cgroup is found where it is, not only at
//! `/sys/fs/cgroup`. cgroup v1's `hierarchical_memory_limit` also covers ancestors above the
//! mount (a container sees its own subtree only).

use std::path::{Path, PathBuf};

/// A memory limit and where it was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemoryLimit {
    pub bytes: u64,
    pub source: LimitSource,
}

/// Where a [`MemoryLimit`] comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LimitSource {
    /// A cgroup's limit file: the file that set it.
    Cgroup(PathBuf),
    /// No cgroup limits the process: the machine's memory (`MemTotal`).
    Machine,
}

impl std::fmt::Display for LimitSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LimitSource::Cgroup(file) => write!(f, "cgroup limit {}", file.display()),
            LimitSource::Machine => f.write_str("machine memory (no cgroup limit found)"),
        }
    }
}

/// cgroup v1 writes "no limit" as a page-rounded `i64::MAX`; anything this large is none.
const UNLIMITED_FROM: u64 = 1 << 60;

/// What the host keeps of its memory limit (cgroup or machine) for itself (watch caches, compiles: one
/// compile alone peaks at 290–410 MiB) when it sizes the worker memory budget.
const HOST_MEMORY_RESERVE: usize = 512 << 20;

/// The worker memory budget: `flag` MiB, else the tightest memory limit of the process's cgroup
/// and its parents (v1 or v2, [`discover`]), else the machine's memory, less
/// [`HOST_MEMORY_RESERVE`] (half of a limit smaller than twice that). None only when neither
/// can be read.
pub fn worker_memory_budget(flag: Option<usize>) -> Option<usize> {
    if let Some(mib) = flag {
        return Some(mib << 20);
    }
    let Some(found) = discover() else {
        tracing::warn!("no cgroup memory limit and no /proc/meminfo: worker memory is not budgeted (set --worker-memory-budget-mib)");
        return None;
    };
    let limit = usize::try_from(found.bytes).unwrap_or(usize::MAX);
    let budget = if limit >= 2 * HOST_MEMORY_RESERVE {
        limit - HOST_MEMORY_RESERVE
    } else {
        limit / 2
    };
    tracing::info!(
        memory_limit_mib = limit >> 20,
        from = %found.source,
        worker_budget_mib = budget >> 20,
        "worker memory budget"
    );
    Some(budget)
}

/// The process's memory limit, read from `/proc` and the cgroup file systems.
pub fn discover() -> Option<MemoryLimit> {
    let read = |path: &Path| std::fs::read_to_string(path).ok();
    let cgroup = read(Path::new("/proc/self/cgroup")).unwrap_or_default();
    let mountinfo = read(Path::new("/proc/self/mountinfo")).unwrap_or_default();
    discover_in(&cgroup, &mountinfo, read)
}

/// [`discover`] over the text of `/proc/self/cgroup` and `/proc/self/mountinfo` and a reader of
/// files (the cgroup files and `/proc/meminfo`).
pub fn discover_in(
    proc_cgroup: &str,
    mountinfo: &str,
    read: impl Fn(&Path) -> Option<String>,
) -> Option<MemoryLimit> {
    let mounts: Vec<CgroupMount> = mountinfo.lines().filter_map(CgroupMount::parse).collect();
    let mut tightest: Option<MemoryLimit> = None;
    let mut consider = |bytes: u64, file: PathBuf| {
        if bytes < UNLIMITED_FROM && tightest.as_ref().is_none_or(|t| bytes < t.bytes) {
            tightest = Some(MemoryLimit {
                bytes,
                source: LimitSource::Cgroup(file),
            });
        }
    };
    for line in proc_cgroup.lines() {
        // hierarchy-id:controllers:path
        let mut fields = line.splitn(3, ':');
        let (Some(id), Some(controllers), Some(path)) =
            (fields.next(), fields.next(), fields.next())
        else {
            continue;
        };
        let version = if id == "0" && controllers.is_empty() {
            Version::V2
        } else if controllers.split(',').any(|c| c == "memory") {
            Version::V1
        } else {
            continue;
        };
        for mount in mounts.iter().filter(|m| m.version == version) {
            let Some(leaf) = mount.directory_of(path) else {
                continue;
            };
            for dir in leaf
                .ancestors()
                .take_while(|d| d.starts_with(&mount.mount_point))
            {
                let file = dir.join(version.limit_file());
                if let Some(bytes) = read(&file).as_deref().and_then(parse_limit) {
                    consider(bytes, file);
                }
            }
            if version == Version::V1 {
                // The limit of every ancestor, those above this mount's root included.
                let stat = leaf.join("memory.stat");
                let hierarchical = read(&stat).and_then(|text| {
                    text.lines()
                        .find_map(|l| l.strip_prefix("hierarchical_memory_limit "))
                        .and_then(parse_limit)
                });
                if let Some(bytes) = hierarchical {
                    consider(bytes, stat);
                }
            }
        }
    }
    tightest.or_else(|| {
        let meminfo = read(Path::new("/proc/meminfo"))?;
        let kib: u64 = meminfo
            .lines()
            .find_map(|l| l.strip_prefix("MemTotal:"))?
            .trim()
            .trim_end_matches("kB")
            .trim()
            .parse()
            .ok()?;
        Some(MemoryLimit {
            bytes: kib.saturating_mul(1024),
            source: LimitSource::Machine,
        })
    })
}

/// A limit file's value: bytes, or none for v2's `max`.
fn parse_limit(text: &str) -> Option<u64> {
    text.trim().parse().ok()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Version {
    V1,
    V2,
}

impl Version {
    fn limit_file(self) -> &'static str {
        match self {
            Version::V1 => "memory.limit_in_bytes",
            Version::V2 => "memory.max",
        }
    }
}

/// A mounted cgroup hierarchy that can hold memory limits.
#[derive(Debug)]
struct CgroupMount {
    version: Version,
    /// The cgroup at the mount's root (a container sees its own cgroup as `/`, or mounted at its
    /// full path without a cgroup namespace).
    root: String,
    mount_point: PathBuf,
}

impl CgroupMount {
    /// A mountinfo line: `id parent major:minor root mount-point options [optional...] - type
    /// source super-options`. Only cgroup2, and cgroup v1 with the memory controller.
    fn parse(line: &str) -> Option<CgroupMount> {
        let (mount, filesystem) = line.split_once(" - ")?;
        let mut fields = mount.split(' ');
        let root = fields.nth(3)?;
        let mount_point = fields.next()?;
        let mut filesystem = filesystem.split(' ');
        let version = match (filesystem.next()?, filesystem.nth(1)) {
            ("cgroup2", _) => Version::V2,
            ("cgroup", Some(options)) if options.split(',').any(|o| o == "memory") => Version::V1,
            _ => return None,
        };
        Some(CgroupMount {
            version,
            root: unescape(root),
            mount_point: PathBuf::from(unescape(mount_point)),
        })
    }

    /// The directory of cgroup `path` under this mount, if the mount holds it.
    fn directory_of(&self, path: &str) -> Option<PathBuf> {
        let below = if self.root == "/" {
            path
        } else {
            let rest = path.strip_prefix(self.root.as_str())?;
            if !(rest.is_empty() || rest.starts_with('/')) {
                return None;
            }
            rest
        };
        let mut dir = self.mount_point.clone();
        for part in below.split('/').filter(|p| !p.is_empty()) {
            if part == ".." || part == "." {
                return None;
            }
            dir.push(part);
        }
        Some(dir)
    }
}

/// mountinfo escapes space, tab, newline and backslash as octal (`\040`).
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes
            .get(i + 1..i + 4)
            .filter(|d| bytes[i] == b'\\' && d.iter().all(|b| (b'0'..=b'7').contains(b)));
        match octal.and_then(|d| u8::from_str_radix(std::str::from_utf8(d).ok()?, 8).ok()) {
            Some(byte) => {
                out.push(byte);
                i += 4;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests;
