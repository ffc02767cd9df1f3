//! A family of datasets linked by clones (heads, snapshots, origins) as a model, and the
//! brute-force walk its space figures are checked against (`assert_family`): every block
//! pointer of every tree read with `Pool::dataset_blocks`, each figure recomputed from the
//! sets of blocks. Model-agnostic: volumes (`clones.rs`) and filesystems
//! (`filesystem_family.rs`) keep their own contents in `M`.

use cairn_engine::Pool;
use cairn_format::BlockPointer;
use std::collections::{BTreeMap, HashMap, HashSet};

pub type Place = (u32, u64);

pub fn blocks_of(pool: &Pool, name: &str) -> HashMap<Place, u64> {
    pool.dataset_blocks(name)
        .unwrap()
        .iter()
        .map(|bp: &BlockPointer| {
            let dva = bp.copies().first().expect("a block has a copy");
            ((dva.vdev, dva.offset), bp.allocated_bytes())
        })
        .collect()
}

/// The model of a family of datasets linked by clones, each head and snapshot with its
/// contents (`M`).
#[derive(Debug, Clone)]
pub struct Family<M> {
    /// Dataset → its head, and its snapshots oldest first (short name, contents).
    pub datasets: BTreeMap<String, (M, Vec<(String, M)>)>,
    /// Clone → its origin (dataset, snapshot).
    pub origins: BTreeMap<String, (String, String)>,
}

impl<M> Family<M> {
    pub fn clones_of(&self, dataset: &str, snapshot: &str) -> Vec<String> {
        self.origins
            .iter()
            .filter(|(_, (d, s))| d == dataset && s == snapshot)
            .map(|(clone, _)| clone.clone())
            .collect()
    }

    /// What `promote clone` does: the origin and older snapshots of its parent move to it;
    /// the parent becomes a clone of the origin.
    pub fn promote(&mut self, clone: &str) {
        let (parent, origin) = self.origins[clone].clone();
        let parent_snaps = &mut self.datasets.get_mut(&parent).unwrap().1;
        let cut = parent_snaps.iter().position(|(s, _)| *s == origin).unwrap() + 1;
        let moved: Vec<(String, M)> = parent_snaps.drain(..cut).collect();
        let moved_names: HashSet<String> = moved.iter().map(|(s, _)| s.clone()).collect();
        let clone_snaps = &mut self.datasets.get_mut(clone).unwrap().1;
        let mut snaps = moved;
        snaps.append(clone_snaps);
        *clone_snaps = snaps;
        for (_, (dataset, snapshot)) in self.origins.iter_mut() {
            if *dataset == parent && moved_names.contains(snapshot) {
                *dataset = clone.to_string();
            }
        }
        match self.origins.remove(&parent) {
            Some(grand) => self.origins.insert(clone.to_string(), grand),
            None => self.origins.remove(clone),
        };
        self.origins
            .insert(parent, (clone.to_string(), origin.clone()));
    }
}

impl<M> Default for Family<M> {
    fn default() -> Self {
        Family {
            datasets: BTreeMap::new(),
            origins: BTreeMap::new(),
        }
    }
}

/// Every figure against brute force, with ZFS's meanings: a snapshot's `used` is what no
/// other snapshot of its dataset, its head nor its dataset's origin references;
/// `usedbysnapshots` what its snapshots alone hold (not its origin); `usedbydataset` what its
/// head holds that its origin does not. Each allocated block is charged exactly once, so the
/// datasets' figures add up to the union of all trees. Also the origins and clones the pool
/// reports, and `pool check`.
pub fn assert_family<M>(pool: &Pool, family: &Family<M>) {
    pool.sync().unwrap();
    let mut union: HashMap<Place, u64> = HashMap::new();
    let mut charged = 0;
    let infos = pool.datasets().unwrap();
    for (dataset, (_, snaps)) in &family.datasets {
        let head = blocks_of(pool, dataset);
        let origin: HashMap<Place, u64> = match family.origins.get(dataset) {
            Some((d, s)) => blocks_of(pool, &format!("{d}@{s}")),
            None => HashMap::new(),
        };
        let trees: Vec<HashMap<Place, u64>> = snaps
            .iter()
            .map(|(s, _)| blocks_of(pool, &format!("{dataset}@{s}")))
            .collect();
        assert_snapshots(pool, family, dataset, &head, &origin, &trees);
        let mut snapshot_only: HashMap<Place, u64> = HashMap::new();
        for tree in &trees {
            for (place, bytes) in tree {
                if !head.contains_key(place) && !origin.contains_key(place) {
                    snapshot_only.insert(*place, *bytes);
                }
            }
        }
        let snapshot_only_bytes: u64 = snapshot_only.values().sum();
        let own_head_bytes: u64 = head
            .iter()
            .filter(|(place, _)| !origin.contains_key(place))
            .map(|(_, bytes)| bytes)
            .sum();
        let info = infos.iter().find(|info| info.name == *dataset).unwrap();
        let property = |name: &str| -> String {
            info.properties
                .iter()
                .find(|(property, _, _)| *property == name)
                .map(|(_, value, _)| value.clone())
                .unwrap_or_else(|| panic!("{dataset} has no {name}"))
        };
        assert_eq!(
            property("usedbysnapshots"),
            snapshot_only_bytes.to_string(),
            "{dataset} usedbysnapshots"
        );
        assert_eq!(
            property("usedbydataset"),
            own_head_bytes.to_string(),
            "{dataset} usedbydataset"
        );
        // The head's `written`: what it references that its newest snapshot (else its
        // origin) does not.
        let newest = trees.last().unwrap_or(&origin);
        assert_eq!(
            pool.snapshot_space(dataset).unwrap().written_bytes,
            bytes_not_in(&head, newest),
            "{dataset} written"
        );
        let head_referenced: u64 = head.values().sum();
        assert_eq!(info.referenced_bytes, head_referenced, "{dataset} refer");
        let expected_origin = family
            .origins
            .get(dataset)
            .map_or("-".to_string(), |(d, s)| format!("{d}@{s}"));
        assert_eq!(property("origin"), expected_origin, "{dataset} origin");
        assert_eq!(
            pool.origin(dataset).unwrap(),
            family.origins.get(dataset).map(|(d, s)| format!("{d}@{s}"))
        );
        charged += snapshot_only_bytes + own_head_bytes;
        union.extend(head);
        for tree in trees {
            union.extend(tree);
        }
    }
    let union_bytes: u64 = union.values().sum();
    assert_eq!(charged, union_bytes, "every block charged once");
    let report = pool.check().unwrap();
    assert!(report.is_clean(), "{:?}", report.problems());
}

/// Destroys every clone and snapshot of the family, leaving one volume with no snapshot:
/// a clone without snapshots goes; a snapshot without clones goes; when only origins are
/// left, a clone is promoted so its old parent can go.
pub fn tear_down<M>(pool: &Pool, family: &mut Family<M>) {
    for _ in 0..1000 {
        let leaf_clone = family
            .origins
            .keys()
            .find(|clone| family.datasets[*clone].1.is_empty())
            .cloned();
        if let Some(clone) = leaf_clone {
            pool.destroy_dataset(&clone).unwrap();
            family.datasets.remove(&clone);
            family.origins.remove(&clone);
            continue;
        }
        let free_snapshot = family.datasets.iter().find_map(|(d, (_, snaps))| {
            snaps
                .iter()
                .find(|(s, _)| family.clones_of(d, s).is_empty())
                .map(|(s, _)| (d.clone(), s.clone()))
        });
        if let Some((d, s)) = free_snapshot {
            pool.destroy_snapshot(&format!("{d}@{s}")).unwrap();
            family
                .datasets
                .get_mut(&d)
                .unwrap()
                .1
                .retain(|(n, _)| *n != s);
            continue;
        }
        match family.origins.keys().next().cloned() {
            Some(clone) => {
                pool.promote(&clone).unwrap();
                family.promote(&clone);
            }
            None => break,
        }
        assert_family(pool, family);
    }
    let survivor = family.datasets.keys().next().unwrap().clone();
    wait_for_frees(pool);
    assert_family(pool, family);
    assert_eq!(family.datasets.len(), 1, "{survivor} alone");
}

pub fn wait_for_frees(pool: &Pool) {
    // The txg engine syncs txgs for background frees on its own.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while pool.freeing_bytes() > 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "{} bytes still freeing after 60 s ({:?}), txg {}",
            pool.freeing_bytes(),
            pool.freeing_problem(),
            pool.last_synced_txg()
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// The listed figures of `dataset`'s snapshots (`trees`, oldest first; `head` its head's
/// blocks, `origin` its origin's) against the walk: `referenced`, `used`, `written`, the
/// head's `written@` each, and their clones.
fn assert_snapshots<M>(
    pool: &Pool,
    family: &Family<M>,
    dataset: &str,
    head: &HashMap<Place, u64>,
    origin: &HashMap<Place, u64>,
    trees: &[HashMap<Place, u64>],
) {
    let snaps = &family.datasets[dataset].1;
    let listings = pool.snapshots(Some(dataset)).unwrap();
    let names: Vec<String> = snaps
        .iter()
        .map(|(s, _)| format!("{dataset}@{s}"))
        .collect();
    let listed: Vec<String> = listings.iter().map(|l| l.name.clone()).collect();
    assert_eq!(listed, names, "{dataset}'s snapshots");
    for (index, listing) in listings.iter().enumerate() {
        let referenced: u64 = trees[index].values().sum();
        let unique: u64 = trees[index]
            .iter()
            .filter(|(place, _)| {
                !head.contains_key(place)
                    && !origin.contains_key(place)
                    && trees
                        .iter()
                        .enumerate()
                        .all(|(other, tree)| other == index || !tree.contains_key(place))
            })
            .map(|(_, bytes)| bytes)
            .sum();
        assert_eq!(
            listing.referenced_bytes, referenced,
            "{} refer",
            listing.name
        );
        assert_eq!(listing.used_bytes, unique, "{} used", listing.name);
        // `written`: what it references that its predecessor (the snapshot before it, or
        // its dataset's origin for the first) does not.
        let predecessor = if index == 0 {
            origin
        } else {
            &trees[index - 1]
        };
        assert_eq!(
            listing.written_bytes,
            bytes_not_in(&trees[index], predecessor),
            "{} written",
            listing.name
        );
        let (_, short) = listing.name.split_once('@').unwrap();
        // `written@snapshot` of the head: what it references that the snapshot does not.
        assert_eq!(
            pool.written_since(dataset, short).unwrap(),
            bytes_not_in(head, &trees[index]),
            "{dataset} written@{short}"
        );
        let mut clones = family.clones_of(dataset, short);
        clones.sort();
        assert_eq!(listing.clones, clones, "{} clones", listing.name);
    }
}

/// Bytes of the blocks of `tree` that `other` does not hold.
fn bytes_not_in(tree: &HashMap<Place, u64>, other: &HashMap<Place, u64>) -> u64 {
    tree.iter()
        .filter(|(place, _)| !other.contains_key(place))
        .map(|(_, bytes)| bytes)
        .sum()
}
