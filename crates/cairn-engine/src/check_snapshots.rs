//! `pool check`'s part in snapshots: proves a dataset's deadlists and snapshot space figures
//! against its trees, by brute force.
//!
//! The checker walks each dataset's snapshots and head once each, every block once
//! (`PoolCore::tree_roots`); here the head is walked again in full, and every deadlist's
//! pointers are read back. Then, for the dataset:
//! - every deadlist block is a block some snapshot references (it was visited) and the head
//!   does not, is on one deadlist only, and was born by the txg of the snapshot before the
//!   list's owner (a block born later would have been freed at once, not kept);
//! - each deadlist's totals are the sums of its blocks by interval (`Deadlist::check_blocks`);
//! - `usedbysnapshots`, the sum of the deadlists, equals the bytes the snapshots reference
//!   and the head does not, counted from the trees;
//! - the head references what the directory says (`used_bytes`).
//!
//! A clone's walk starts after its origin's txg (the floor), so the blocks it shares with its
//! origin are not in `visited`: a deadlist block born by the floor must be one the origin
//! references (its whole tree is walked here) and counts for no `usedbysnapshots`; and what
//! the head still shares with the origin (`origin_shared_bytes`) must equal its blocks born by
//! the floor.
//!
//! Per-snapshot `used`, `referenced` and `written` are exercised by the snapshot property test,
//! which walks every snapshot in full after every step.
//!
//! Deadlist parts are MOS objects, which the MOS walk counts as referenced whether or not
//! anything still needs them, so a part's object left behind would never show as leaked
//! space. `deadlist_object_problems` accounts for them by object: every `DeadList` object of
//! the MOS is a part on exactly one list or a dead part whose last pending scan will free it,
//! and every object a list or a pending scan names exists.

use crate::EngineError;
use crate::core::PoolCore;
use cairn_format::{BlockPointer, ObjectType};
use std::collections::HashSet;

/// A block's place: its copies' (vdev, offset).
type Place = Vec<(u32, u64)>;

fn place(bp: &BlockPointer) -> Place {
    bp.copies()
        .iter()
        .map(|dva| (dva.vdev, dva.offset))
        .collect()
}

/// What checking one dataset found: the head's referenced bytes by a full walk, and the
/// problems.
pub(crate) struct DatasetFindings {
    pub(crate) head_bytes: u64,
    pub(crate) problems: Vec<String>,
}

/// Checks dataset `name` (see the module doc). `visited` holds every block the checker's walk
/// of its snapshots and head visited, by place, with its allocated bytes.
pub(crate) fn check_dataset_snapshots(
    core: &PoolCore,
    name: &str,
    head_root: &BlockPointer,
    visited: &[(Place, u64)],
) -> Result<DatasetFindings, EngineError> {
    let head_blocks = crate::core::collect_tree(&core.io, head_root, 0);
    let head_places: HashSet<Place> = head_blocks.iter().map(place).collect();
    let head_bytes: u64 = head_blocks.iter().map(BlockPointer::allocated_bytes).sum();
    let mut problems = Vec::new();
    let id = core.directory.lock().get(name)?.id;
    let table = core.snapshots.lock();
    let floor_txg = table.floor_txg(id);
    let origin_places: HashSet<Place> = match table.origin_of(id) {
        Some(origin) => crate::core::collect_tree(&core.io, &origin.info.objset_bp()?, 0)
            .iter()
            .map(place)
            .collect(),
        None => HashSet::new(),
    };
    let visited_places: HashSet<&Place> = visited.iter().map(|(place, _)| place).collect();
    let snapshot_only_bytes: u64 = visited
        .iter()
        .filter(|(place, _)| !head_places.contains(place))
        .map(|(_, bytes)| bytes)
        .sum();
    // Each deadlist with the txg its blocks must be born by (the snapshot before its owner).
    let mut lists = Vec::new();
    let mut before_txg = floor_txg;
    for snapshot in table.snapshots_of(id) {
        lists.push((
            format!("{name}@{}", snapshot.info.name),
            &snapshot.deadlist,
            before_txg,
        ));
        before_txg = snapshot.info.created_txg;
    }
    if let Some(deadlist) = table.head_deadlist(id) {
        lists.push((name.to_string(), deadlist, before_txg));
    }
    let mut on_lists: HashSet<Place> = HashSet::new();
    let mut dead_bytes = 0;
    for (owner, deadlist, born_by_txg) in lists {
        let blocks = deadlist.read_blocks(&core.mos)?;
        if let Err(problem) = deadlist.check_blocks(&blocks, |birth| table.key_of(id, birth)) {
            problems.push(format!("{owner}: {problem}"));
        }
        for bp in &blocks {
            let at = place(bp);
            let what = format!("{owner}: dead block born in txg {}", bp.birth_txg);
            if bp.birth_txg > born_by_txg {
                problems.push(format!(
                    "{what}, after the snapshot before it ({born_by_txg})"
                ));
            }
            if bp.birth_txg <= floor_txg {
                if !origin_places.contains(&at) {
                    problems.push(format!("{what} is not referenced by the clone's origin"));
                }
            } else if !visited_places.contains(&at) {
                problems.push(format!("{what} is referenced by no snapshot"));
            }
            if head_places.contains(&at) {
                problems.push(format!("{what} is still referenced by the head"));
            }
            if !on_lists.insert(at) {
                problems.push(format!("{what} is on two deadlists"));
            }
            if bp.birth_txg > floor_txg {
                dead_bytes += bp.allocated_bytes();
            }
        }
    }
    if dead_bytes != snapshot_only_bytes {
        problems.push(format!(
            "{name}: deadlists hold {dead_bytes} bytes, the snapshots alone reference \
             {snapshot_only_bytes}"
        ));
    }
    let recorded = table.used_by_snapshots(id);
    if recorded != dead_bytes {
        problems.push(format!(
            "{name}: usedbysnapshots is {recorded}, its deadlists hold {dead_bytes} bytes"
        ));
    }
    let shared_bytes: u64 = head_blocks
        .iter()
        .filter(|bp| bp.birth_txg <= floor_txg)
        .map(BlockPointer::allocated_bytes)
        .sum();
    let recorded_shared = table.origin_shared_bytes(id);
    if recorded_shared != shared_bytes {
        problems.push(format!(
            "{name}: shares {recorded_shared} bytes with its origin by its deadlists,              {shared_bytes} by its tree"
        ));
    }
    Ok(DatasetFindings {
        head_bytes,
        problems,
    })
}

/// The blocks destroys (of snapshots, datasets) and rollbacks left to the background and not
/// freed yet: still allocated, so the
/// checker counts them as referenced. A problem if a destroy's `remaining_bytes` (the pool's
/// `freeing`) disagrees with them.
pub(crate) fn pending_free_blocks(
    core: &PoolCore,
) -> Result<(Vec<BlockPointer>, Vec<String>), EngineError> {
    let table = core.snapshots.lock();
    let mut blocks = Vec::new();
    let mut problems = Vec::new();
    for work in table.free_queue() {
        let mut bytes = 0;
        for (index, scan) in work.scans.iter().enumerate().skip(work.scan_index as usize) {
            let first = if index == work.scan_index as usize {
                work.next_entry
            } else {
                0
            };
            cairn_dataset::deadlist::read_part(
                &core.mos,
                scan.object,
                first,
                scan.entries,
                |bp| {
                    if bp.birth_txg > scan.min_txg && bp.birth_txg <= scan.max_txg {
                        bytes += bp.allocated_bytes();
                        blocks.push(bp);
                    }
                },
            )?;
        }
        if bytes != work.remaining_bytes {
            problems.push(format!(
                "a destroy has {} bytes left to free, its blocks add up to {bytes}",
                work.remaining_bytes
            ));
        }
    }
    for work in table.tree_frees() {
        let mut bytes = 0;
        let step = cairn_object::tree_free::free_tree_step(
            &core.io,
            &work.root()?,
            work.born_after_txg,
            &work.path,
            u64::MAX,
            &mut |bp| {
                bytes += bp.allocated_bytes();
                blocks.push(*bp);
            },
        );
        if let Some(err) = step.error {
            problems.push(format!(
                "a destroyed tree being freed cannot be read: {err}"
            ));
        }
        if bytes != work.remaining_bytes {
            problems.push(format!(
                "a destroyed tree has {} bytes left to free, its blocks add up to {bytes}",
                work.remaining_bytes
            ));
        }
    }
    Ok((blocks, problems))
}

/// Problems with the deadlist parts' MOS objects (see the module doc): a `DeadList` object no
/// list holds and no pending scan frees (leaked), an object named by a list or a scan that is
/// not one (freed early), a part on two lists, a dead part still on a list, a scan that frees
/// its part before a later scan reads it, and a part off every list that no scan frees.
pub(crate) fn deadlist_object_problems(core: &PoolCore) -> Result<Vec<String>, EngineError> {
    use std::collections::BTreeMap;
    let table = core.snapshots.lock();
    let mut problems = Vec::new();
    let mut listed: BTreeMap<u64, usize> = BTreeMap::new();
    for list in table
        .all()
        .map(|snapshot| &snapshot.deadlist)
        .chain(table.head_deadlists())
    {
        for object in list.objects() {
            *listed.entry(object).or_default() += 1;
        }
    }
    // Each pending scan's object, with whether its last pending scan frees it.
    let mut last_frees: BTreeMap<u64, bool> = BTreeMap::new();
    for work in table.free_queue() {
        for scan in work.scans.iter().skip(work.scan_index as usize) {
            if last_frees.get(&scan.object) == Some(&true) {
                problems.push(format!(
                    "deadlist object {} is read by a scan after the one that frees it",
                    scan.object
                ));
            }
            last_frees.insert(scan.object, scan.free_part);
        }
    }
    for (&object, &lists) in &listed {
        if lists > 1 {
            problems.push(format!(
                "deadlist object {object} is a part of {lists} lists"
            ));
        }
        if last_frees.get(&object) == Some(&true) {
            problems.push(format!(
                "deadlist object {object} is on a list and freed by a pending scan"
            ));
        }
    }
    for (&object, _) in last_frees.iter().filter(|(_, frees)| !**frees) {
        if !listed.contains_key(&object) {
            problems.push(format!(
                "deadlist object {object} is on no list and no pending scan frees it"
            ));
        }
    }
    let mut expected: std::collections::BTreeSet<u64> = listed.keys().copied().collect();
    expected.extend(last_frees.keys().copied());
    for object in 0..core.mos.object_id_bound() {
        let dnode = core.mos.dnode(object)?;
        let is_part = !dnode.is_free() && dnode.object_type == ObjectType::DeadList;
        if is_part && !expected.remove(&object) {
            problems.push(format!(
                "deadlist object {object} is leaked: no list holds it, no scan frees it"
            ));
        }
        if !is_part && expected.remove(&object) {
            problems.push(format!(
                "deadlist object {object} is named by the snapshot table but is no deadlist"
            ));
        }
    }
    for object in expected {
        problems.push(format!(
            "deadlist object {object} is named by the snapshot table but does not exist"
        ));
    }
    Ok(problems)
}
