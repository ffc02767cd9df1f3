//! The pool cache: which pools this machine has imported, and on which devices (our zpool.cache).
//!
//! Every pool-level command except `create` and `import` finds its pool here, then opens it from
//! exactly those devices. The file is plain text so a person can read and repair it:
//!
//! ```text
//! # cairn pool cache: POOL<TAB>DEVICE, one line per device
//! tank<TAB>/var/lib/cairn/a.img
//! tank<TAB>emu:hdd-7200:/var/lib/cairn/b.img
//! rescued<TAB>/mnt/old/c.img
//! rescued<TAB>option:readonly=on
//! ```
//!
//! A device line names exactly a device the pool was found on (never a path only a label
//! remembers: `pool import -d DIR` stays in DIR). `option:readonly=on` marks a pool imported
//! read-only (`pools::READONLY_ENTRY`): every later open is read-only too.
//!
//! Lines of one pool keep their order (the vdev order of the pool). Changes are
//! read-modify-write under an exclusive lock on a sibling `.lock` file, and the new content is
//! written to a temporary file, synced and renamed over the old one, and the directory is synced
//! (as is the parent of a state directory this creates), so a crash leaves either the old or the
//! new cache, never a torn or vanished one.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

const FILE_NAME: &str = "pools.cache";
const HEADER: &str = "# cairn pool cache: POOL<TAB>DEVICE, one line per device";
/// The cache and its lock are readable by their owner only: they name every pool's devices.
const PRIVATE_FILE_MODE: u32 = 0o600;

/// Pool name → device specs, in the order they were recorded.
pub type CacheEntries = BTreeMap<String, Vec<String>>;

/// Why the pool cache could not be read or changed.
#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    #[error("pool cache {} is damaged: {problem}", path.display())]
    Damaged { path: PathBuf, problem: String },
    #[error("cannot read pool cache {}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "cannot record {text:?} in the pool cache: it must be non-empty, without tabs or newlines"
    )]
    Unstorable { text: String },
    #[error("cannot create state directory {}", dir.display())]
    StateDir {
        dir: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot lock {}", path.display())]
    Lock {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot write pool cache {}", path.display())]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

#[derive(Debug, Clone)]
pub struct PoolCache {
    dir: PathBuf,
}

impl PoolCache {
    /// The cache kept in state directory `dir` (created, private, on the first change).
    pub fn new(dir: PathBuf) -> PoolCache {
        PoolCache { dir }
    }

    /// The state directory holding the cache.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn path(&self) -> PathBuf {
        self.dir.join(FILE_NAME)
    }

    /// Every cached pool. A missing file is an empty cache.
    pub fn load(&self) -> Result<CacheEntries, CacheError> {
        let path = self.path();
        match std::fs::read_to_string(&path) {
            Ok(text) => parse(&text, &path),
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(CacheEntries::new()),
            Err(source) => Err(CacheError::Read { path, source }),
        }
    }

    /// The devices of `pool`, if it is cached.
    pub fn devices(&self, pool: &str) -> Result<Option<Vec<String>>, CacheError> {
        Ok(self.load()?.remove(pool))
    }

    /// Records (or replaces) `pool` with its devices.
    pub fn insert(&self, pool: &str, devices: &[String]) -> Result<(), CacheError> {
        for text in std::iter::once(pool).chain(devices.iter().map(String::as_str)) {
            if text.is_empty() || text.contains(['\t', '\n', '\r']) || text.starts_with('#') {
                return Err(CacheError::Unstorable {
                    text: text.to_string(),
                });
            }
        }
        self.modify(|entries| {
            entries.insert(pool.to_string(), devices.to_vec());
        })
    }

    /// Forgets `pool`; returns whether it was cached.
    pub fn remove(&self, pool: &str) -> Result<bool, CacheError> {
        let mut removed = false;
        self.modify(|entries| removed = entries.remove(pool).is_some())?;
        Ok(removed)
    }

    fn modify(&self, change: impl FnOnce(&mut CacheEntries)) -> Result<(), CacheError> {
        create_dir_durably(&self.dir).map_err(|source| CacheError::StateDir {
            dir: self.dir.clone(),
            source,
        })?;
        let lock_path = self.dir.join(format!("{FILE_NAME}.lock"));
        let lock_error = |source| CacheError::Lock {
            path: lock_path.clone(),
            source,
        };
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(PRIVATE_FILE_MODE)
            .open(&lock_path)
            .map_err(lock_error)?;
        lock.lock().map_err(lock_error)?;
        let mut entries = self.load()?;
        change(&mut entries);
        let path = self.path();
        write_atomically(&path, &render(&entries))
            .map_err(|source| CacheError::Write { path, source })
        // The lock is released when `lock` is dropped.
    }
}

fn parse(text: &str, path: &Path) -> Result<CacheEntries, CacheError> {
    let damaged = |problem: String| CacheError::Damaged {
        path: path.to_path_buf(),
        problem,
    };
    let mut entries = CacheEntries::new();
    for (index, line) in text.lines().enumerate() {
        if line.trim().is_empty() || line.starts_with('#') {
            continue;
        }
        let Some((pool, device)) = line.split_once('\t') else {
            return Err(damaged(format!(
                "line {} has no tab between pool and device: {line:?}",
                index + 1
            )));
        };
        if pool.is_empty() || device.is_empty() {
            return Err(damaged(format!(
                "line {} has an empty pool or device: {line:?}",
                index + 1
            )));
        }
        entries
            .entry(pool.to_string())
            .or_default()
            .push(device.to_string());
    }
    Ok(entries)
}

fn render(entries: &CacheEntries) -> String {
    let mut out = format!("{HEADER}\n");
    for (pool, devices) in entries {
        for device in devices {
            out.push_str(pool);
            out.push('\t');
            out.push_str(device);
            out.push('\n');
        }
    }
    out
}

/// `create_dir_all`, with each directory it creates made durable by syncing its parent, so a
/// power cut cannot take away a state directory (and the cache in it) that a command reported.
pub fn create_dir_durably(dir: &Path) -> std::io::Result<()> {
    if dir.is_dir() {
        return Ok(());
    }
    if let Some(parent) = dir.parent().filter(|parent| !parent.as_os_str().is_empty()) {
        create_dir_durably(parent)?;
    }
    // Private: the state it holds (the pool cache, the server's sockets) is its owner's alone.
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => cairn_device::file::sync_parent_dir(dir).map_err(std::io::Error::from),
        Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists && dir.is_dir() => Ok(()),
        Err(err) => Err(err),
    }
}

fn write_atomically(path: &Path, content: &str) -> std::io::Result<()> {
    let temp = path.with_extension(format!("tmp.{}", std::process::id()));
    let result = (|| -> std::io::Result<()> {
        let mut file = OpenOptions::new()
            .create(true)
            .truncate(true)
            .write(true)
            .mode(PRIVATE_FILE_MODE)
            .open(&temp)?;
        file.write_all(content.as_bytes())?;
        file.sync_all()?;
        std::fs::rename(&temp, path)?;
        if let Some(dir) = path.parent() {
            File::open(dir)?.sync_all()?;
        }
        Ok(())
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&temp);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pools_round_trip_in_device_order() {
        let dir = tempfile::tempdir().unwrap();
        let cache = PoolCache::new(dir.path().join("state"));
        assert!(cache.load().unwrap().is_empty());
        let tank = vec!["/d/b.img".to_string(), "emu:ram:/d/a.img".to_string()];
        cache.insert("tank", &tank).unwrap();
        cache.insert("backup", &["/d/c.img".to_string()]).unwrap();
        assert_eq!(cache.devices("tank").unwrap(), Some(tank));
        let text = std::fs::read_to_string(cache.path()).unwrap();
        assert!(text.contains("tank\temu:ram:/d/a.img\n"), "{text}");
        assert!(cache.remove("tank").unwrap());
        assert!(!cache.remove("tank").unwrap());
        assert_eq!(
            cache.load().unwrap().keys().collect::<Vec<_>>(),
            vec!["backup"]
        );
    }

    #[test]
    fn damaged_lines_and_unstorable_names_are_refused() {
        let path = Path::new("pools.cache");
        assert!(matches!(
            parse("tank /no/tab\n", path),
            Err(CacheError::Damaged { .. })
        ));
        assert!(parse("# comment\n\ntank\t/a\n", path).is_ok());
        let dir = tempfile::tempdir().unwrap();
        let cache = PoolCache::new(dir.path().to_path_buf());
        assert!(matches!(
            cache.insert("tank", &["/a\tb".to_string()]),
            Err(CacheError::Unstorable { .. })
        ));
    }
}
