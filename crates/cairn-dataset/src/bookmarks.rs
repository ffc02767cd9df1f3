//! Bookmarks: a snapshot's place in its dataset's history without its data. A bookmark keeps
//! the txg and time its snapshot was taken in, so it can still say "what changed since then"
//! (born after its txg) as an incremental source once the snapshot is destroyed, and holds no
//! block: destroying the snapshot frees everything as if the bookmark did not exist (`zfs
//! bookmark`).
//!
//! A bookmark belongs to its dataset (`dataset#name`, unique per dataset); it goes with its
//! dataset, and a promote moves those made from the snapshots it moves. Each is one record of
//! the snapshot table (tag 'b', by id from the directory's counter).

use crate::DatasetError;
use crate::records::Bookmark;
use crate::snapshots::{RecordKey, SnapshotTable};

impl SnapshotTable {
    /// Bookmarks `name` of dataset `dataset_id` at snapshot `snapshot_id` (one of the
    /// dataset's), as bookmark `id`.
    pub fn add_bookmark(
        &mut self,
        id: u64,
        dataset_id: u64,
        name: &str,
        snapshot_id: u64,
    ) -> Result<&Bookmark, DatasetError> {
        let snapshot = self
            .get(snapshot_id)
            .filter(|snapshot| snapshot.info.dataset_id == dataset_id)
            .ok_or_else(|| DatasetError::NoSuchDataset(format!("snapshot {snapshot_id}")))?;
        let bookmark = Bookmark {
            id,
            dataset_id,
            name: name.to_string(),
            created_txg: snapshot.info.created_txg,
            creation_ms: snapshot.info.creation_ms,
            snapshot_id,
            referenced_bytes: snapshot.info.referenced_bytes,
            guid: snapshot.info.guid,
        };
        self.insert_bookmark(bookmark)
    }

    /// Copies bookmark `from` of dataset `dataset_id` as `name` (`bookmark ds#a ds#b`).
    pub fn copy_bookmark(
        &mut self,
        id: u64,
        dataset_id: u64,
        from: &str,
        name: &str,
    ) -> Result<&Bookmark, DatasetError> {
        let source = self
            .find_bookmark(dataset_id, from)
            .ok_or_else(|| DatasetError::NoSuchDataset(format!("#{from}")))?;
        let bookmark = Bookmark {
            id,
            name: name.to_string(),
            ..source.clone()
        };
        self.insert_bookmark(bookmark)
    }

    fn insert_bookmark(&mut self, bookmark: Bookmark) -> Result<&Bookmark, DatasetError> {
        if self
            .find_bookmark(bookmark.dataset_id, &bookmark.name)
            .is_some()
        {
            return Err(DatasetError::Exists(format!("#{}", bookmark.name)));
        }
        let id = bookmark.id;
        self.dirty.insert(RecordKey::Bookmark(id));
        Ok(self.bookmarks.entry(id).or_insert(bookmark))
    }

    /// A dataset's bookmarks, by txg then name.
    pub fn bookmarks_of(&self, dataset_id: u64) -> Vec<&Bookmark> {
        let mut out: Vec<&Bookmark> = self
            .bookmarks
            .values()
            .filter(|bookmark| bookmark.dataset_id == dataset_id)
            .collect();
        out.sort_by(|a, b| (a.created_txg, &a.name).cmp(&(b.created_txg, &b.name)));
        out
    }

    pub fn find_bookmark(&self, dataset_id: u64, name: &str) -> Option<&Bookmark> {
        self.bookmarks
            .values()
            .find(|bookmark| bookmark.dataset_id == dataset_id && bookmark.name == name)
    }

    /// Destroys bookmark `name` of `dataset_id` (it holds nothing, so nothing is freed).
    pub fn destroy_bookmark(&mut self, dataset_id: u64, name: &str) -> Result<(), DatasetError> {
        let id = self
            .find_bookmark(dataset_id, name)
            .map(|bookmark| bookmark.id)
            .ok_or_else(|| DatasetError::NoSuchDataset(format!("#{name}")))?;
        self.bookmarks.remove(&id);
        self.dirty.insert(RecordKey::Bookmark(id));
        Ok(())
    }

    /// The dataset's bookmarks go with it.
    pub(crate) fn forget_bookmarks(&mut self, dataset_id: u64) {
        let gone: Vec<u64> = self
            .bookmarks_of(dataset_id)
            .iter()
            .map(|bookmark| bookmark.id)
            .collect();
        for id in gone {
            self.bookmarks.remove(&id);
            self.dirty.insert(RecordKey::Bookmark(id));
        }
    }

    /// Promote's part: the bookmarks of `parent_id` made at or before `origin_txg` move to
    /// `clone_id`, as the snapshots they were made from do. Fails, changing nothing, when the
    /// clone has one of their names.
    pub(crate) fn move_bookmarks(
        &mut self,
        parent_id: u64,
        clone_id: u64,
        origin_txg: u64,
    ) -> Result<(), DatasetError> {
        let moving: Vec<u64> = self
            .bookmarks_of(parent_id)
            .iter()
            .filter(|bookmark| bookmark.created_txg <= origin_txg)
            .map(|bookmark| bookmark.id)
            .collect();
        for id in &moving {
            let name = &self.bookmarks[id].name;
            if self.find_bookmark(clone_id, name).is_some() {
                return Err(DatasetError::Exists(format!(
                    "#{name} (the clone has a bookmark of the name of one that would move to it)"
                )));
            }
        }
        for id in moving {
            if let Some(bookmark) = self.bookmarks.get_mut(&id) {
                bookmark.dataset_id = clone_id;
            }
            self.dirty.insert(RecordKey::Bookmark(id));
        }
        Ok(())
    }

    /// Every bookmark names a known dataset and is unique in it (at load).
    pub(crate) fn check_bookmarks(
        &self,
        dataset_known: &dyn Fn(u64) -> bool,
    ) -> Result<(), DatasetError> {
        let mut seen = std::collections::BTreeSet::new();
        for bookmark in self.bookmarks.values() {
            if !dataset_known(bookmark.dataset_id)
                || !seen.insert((bookmark.dataset_id, bookmark.name.clone()))
            {
                return Err(DatasetError::Corrupt(format!(
                    "bookmark {} ({}) of dataset {}: unknown dataset or a name twice",
                    bookmark.id, bookmark.name, bookmark.dataset_id
                )));
            }
        }
        Ok(())
    }
}
