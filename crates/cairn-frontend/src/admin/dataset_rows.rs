//! Looks at datasets as `cairn list` and `cairn get` show them: each pool's datasets with their
//! space figures and resolved properties, read once per pool (read-only in a one-shot process),
//! and `mounted` from the server's live mounts.
//!
//! Invariants: a look never stops at one pool: over every pool (none named) a pool that cannot
//! be opened is a note and skipped; a named pool that cannot be read is a failure for that pool,
//! worded in full, beside the others' rows.

use super::AdminError;
use super::failures::{failed, skip_unavailable};
use crate::PoolAccess;
use crate::pools::chain_text;
use cairn_dataset::DatasetKind;
use serde::{Deserialize, Serialize};

/// One dataset as the engine reports it, with owned property names.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DatasetRow {
    pub name: String,
    pub kind: DatasetKind,
    pub used_bytes: u64,
    pub available_bytes: u64,
    pub referenced_bytes: u64,
    pub volsize_bytes: Option<u64>,
    /// (property, canonical value, source), in the engine's order.
    pub properties: Vec<(String, String, String)>,
}

/// One pool's datasets sorted by name, or why they could not be read.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PoolDatasets {
    pub pool: String,
    pub datasets: Result<Vec<DatasetRow>, String>,
}

/// The datasets of `pools` (every remembered pool when empty).
pub fn pool_datasets(
    access: &PoolAccess,
    pools: &[String],
    notes: &mut Vec<String>,
) -> Result<Vec<PoolDatasets>, AdminError> {
    let names = if pools.is_empty() {
        access.pool_names()?
    } else {
        pools.to_vec()
    };
    let mut out = Vec::new();
    for pool in names {
        let read = read_pool(access, &pool);
        let datasets = match skip_unavailable(read, !pools.is_empty(), notes) {
            Ok(Some(rows)) => Ok(rows),
            Ok(None) => continue,
            Err(err) => Err(chain_text(&err)),
        };
        out.push(PoolDatasets { pool, datasets });
    }
    Ok(out)
}

fn read_pool(access: &PoolAccess, pool: &str) -> Result<Vec<DatasetRow>, AdminError> {
    let infos = access.with_pool(pool, true, |handle| {
        handle
            .datasets()
            .map_err(|err| failed(format!("cannot read the datasets of pool '{pool}'"), err))
    })?;
    Ok(infos
        .into_iter()
        .map(|info| {
            let mut properties: Vec<(String, String, String)> = info
                .properties
                .into_iter()
                .map(|(name, value, source)| (name.to_string(), value, source))
                .collect();
            // `mounted`: whether this state directory's server has it mounted now.
            if info.kind == DatasetKind::Filesystem {
                let mounted = access
                    .served
                    .as_ref()
                    .is_some_and(|served| served.mounts.is_mounted(&info.name));
                let value = if mounted { "yes" } else { "no" };
                properties.push(("mounted".to_string(), value.to_string(), "-".to_string()));
            }
            DatasetRow {
                name: info.name,
                kind: info.kind,
                used_bytes: info.used_bytes,
                available_bytes: info.available_bytes,
                referenced_bytes: info.referenced_bytes,
                volsize_bytes: info.volsize_bytes,
                properties,
            }
        })
        .collect())
}
