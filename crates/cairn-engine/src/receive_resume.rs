//! Resumable receive (`cairn receive -s`): what a cut receive keeps, the token that says where
//! its stream starts again (`cairn_format::send_token`), and `receive -A`, which abandons it.
//!
//! Why the token is kept in the hidden dataset's record, written by the txg sync: it must
//! describe only what is durable. Each record a receive applies joins an open txg; the receive
//! notes, per txg, the token of the last record applied in it (`ReceiveUnderWay`), and the sync
//! of that txg (`store_resume_tokens`, after the object sets synced) writes that token into the
//! hidden dataset's record (`RESUME_TOKEN_KEY`), in the same txg as the records it describes.
//! After a power cut the pool has a txg's records and that txg's token, never a token ahead
//! of its data.
//!
//! Why re-applying is safe: a token points at the last record applied (its object and offset),
//! and a resumed stream sends again every record from there (an object's OBJECT record
//! always). Every record is idempotent at the object level: OBJECT of an object that exists
//! with the same type and block size replaces its bonus and keeps its blocks (a resumed receive
//! applies as an incremental one does, `Apply::new(.., true, ..)`), WRITE replaces a whole
//! block, FREE and FREEOBJECTS free what is there. So an older token (the txg after it was lost)
//! only costs records sent twice.
//!
//! What import does: a hidden dataset with a token is kept (the partial receive and its token
//! survive export and power cuts); one without (a receive without `-s`, killed) is destroyed
//! (`receive_finish.rs`, `destroy_abandoned_receives`).
//!
//! Invariants: a hidden dataset is written by one receive at a time (`PoolCore::receives`
//! names those under way: a second receive, `-A` or a resumed stream into it is refused);
//! the token leaves the record in the txg that makes the received snapshot visible.

use crate::EngineError;
use crate::core::{PoolCore, RESUME_TOKEN_KEY, ReceiveUnderWay};
use crate::pool::Pool;
use cairn_dataset::{DatasetKind, receive_name};
use cairn_format::ObjsetType;
use cairn_format::send_stream::{StreamHeader, StreamRecord};
use cairn_format::send_token::{ResumePoint, ResumeToken};
use cairn_object::ObjectSet;
use std::sync::Arc;

/// Where a record sits in its stream: the point a stream resumed at it starts from.
pub(crate) fn record_point(record: &StreamRecord) -> Option<ResumePoint> {
    let (object, offset_bytes) = match record {
        StreamRecord::Object { object, .. } => (*object, 0),
        StreamRecord::FreeObjects { first, .. } => (*first, 0),
        StreamRecord::Write {
            object,
            offset_bytes,
            ..
        }
        | StreamRecord::WriteCompressed {
            object,
            offset_bytes,
            ..
        }
        | StreamRecord::Free {
            object,
            offset_bytes,
            ..
        } => (*object, *offset_bytes),
        StreamRecord::End { .. } => return None,
    };
    Some(ResumePoint {
        object,
        offset_bytes,
    })
}

/// What a receive into a hidden dataset notes as it goes (see the module doc).
pub(crate) struct ResumeNotes {
    hidden: String,
    /// The token of the stream, its point and bytes updated record by record.
    token: ResumeToken,
    /// Stream bytes applied before this attempt.
    bytes_before: u64,
}

impl ResumeNotes {
    /// A resumed stream continues the partial receive whose stored token is `stored`.
    pub(crate) fn continue_from(&mut self, stored: ResumeToken) {
        self.token = stored;
        self.bytes_before = stored.bytes_received;
    }

    /// After a record at `point` was applied in `txg`, `stream_bytes` of this attempt's stream
    /// read: the token the sync of `txg` stores.
    pub(crate) fn applied(
        &mut self,
        core: &PoolCore,
        txg: u64,
        point: ResumePoint,
        stream_bytes: u64,
    ) {
        self.token.point = point;
        self.token.bytes_received = self.bytes_before + stream_bytes;
        if let Some(under_way) = core.receives.lock().get_mut(&self.hidden)
            && under_way.resumable
        {
            under_way.tokens_by_txg.insert(txg, self.token);
        }
    }
}

impl PoolCore {
    /// In the sync of `txg`, after the object sets synced: each resumable receive's token of the
    /// newest txg up to `txg` goes into its hidden dataset's record. True if a record changed.
    pub(crate) fn store_resume_tokens(&self, txg: u64) -> bool {
        let mut receives = self.receives.lock();
        let mut stored = Vec::new();
        for (hidden, under_way) in receives.iter_mut() {
            let later = under_way.tokens_by_txg.split_off(&(txg + 1));
            let done = std::mem::replace(&mut under_way.tokens_by_txg, later);
            if let Some((_, token)) = done.into_iter().next_back() {
                stored.push((hidden.clone(), token));
            }
        }
        drop(receives);
        if stored.is_empty() {
            return false;
        }
        let mut directory = self.directory.lock();
        let mut changed = false;
        for (hidden, token) in stored {
            if let Ok(record) = directory.get_mut(&hidden) {
                record
                    .properties
                    .insert(RESUME_TOKEN_KEY.to_string(), token.encode());
                changed = true;
            }
        }
        changed
    }
}

/// Leaves the map of receives under way when dropped: whatever way a receive ends.
pub(crate) struct UnderWayGuard<'a> {
    core: &'a PoolCore,
    hidden: String,
}

impl Drop for UnderWayGuard<'_> {
    fn drop(&mut self) {
        self.core.receives.lock().remove(&self.hidden);
    }
}

impl Pool {
    /// Marks a receive into `hidden` under way (refused when one is): with `resumable`, its
    /// token is stored as it goes, starting from `token` (the stream's start, or a resumed
    /// stream's point) whose bytes are those applied before.
    pub(crate) fn receive_under_way(
        &self,
        target: &str,
        hidden: &str,
        resumable: bool,
        token: ResumeToken,
    ) -> Result<(UnderWayGuard<'_>, ResumeNotes), EngineError> {
        let mut receives = self.core.receives.lock();
        if receives.contains_key(hidden) {
            return Err(EngineError::Receive(format!(
                "a receive into '{target}' is under way"
            )));
        }
        receives.insert(
            hidden.to_string(),
            ReceiveUnderWay {
                resumable,
                ..Default::default()
            },
        );
        let guard = UnderWayGuard {
            core: &self.core,
            hidden: hidden.to_string(),
        };
        let notes = ResumeNotes {
            hidden: hidden.to_string(),
            token,
            bytes_before: token.bytes_received,
        };
        Ok((guard, notes))
    }

    /// Stores `token` in `hidden`'s record now (durable on return): a resumable receive's
    /// first token, before any record is applied.
    pub(crate) fn store_first_token(
        &self,
        hidden: &str,
        token: ResumeToken,
    ) -> Result<(), EngineError> {
        let hidden = hidden.to_string();
        self.run_sync_task(move |core, _txg| {
            let mut directory = core.directory.lock();
            directory
                .get_mut(&hidden)?
                .properties
                .insert(RESUME_TOKEN_KEY.to_string(), token.encode());
            Ok(())
        })?;
        Ok(())
    }

    /// What a cut resumable receive leaves: the records applied reach disk with their token
    /// (a sync; if it fails, the last synced token stays, which is older and so still true).
    pub(crate) fn keep_partial_receive(&self) {
        let _ = self.sync();
    }

    /// The resume token of the partial receive into `target` (`receive -s` cut), if any.
    pub fn receive_resume_token(&self, target: &str) -> Option<String> {
        stored_token_text(&self.core, &receive_name(target))
    }

    /// The stored token of a partial receive into `target` a resumed stream with `header`
    /// continues, checked against the stream: the same snapshots, a kind that fits, and a
    /// point at or before the stored one (earlier records are applied again, harmlessly; a
    /// later point would leave a gap).
    pub(crate) fn resumable_partial(
        &self,
        target: &str,
        header: &StreamHeader,
        point: ResumePoint,
    ) -> Result<ResumeToken, EngineError> {
        let hidden = receive_name(target);
        let refuse = |why: String| {
            EngineError::Receive(format!("cannot resume the receive into '{target}': {why}"))
        };
        let kind = self.core.directory.lock().get(&hidden).map(|r| r.kind);
        let Some(text) = stored_token_text(&self.core, &hidden) else {
            return Err(refuse(
                "no partial receive (receive -s) into it: this stream (from send -t) continues \
                 one; send the whole stream instead"
                    .into(),
            ));
        };
        let stored = ResumeToken::decode(&text)
            .map_err(|err| refuse(format!("its stored token is unreadable: {err}")))?;
        if stored.to_guid != header.to_guid || stored.from_guid != header.from_guid {
            return Err(refuse(format!(
                "the partial receive is of snapshot guid {} (from {}), the stream of guid {} \
                 (from {}): send -t with its own token (cairn get receive_resume_token {target})",
                stored.to_guid, stored.from_guid, header.to_guid, header.from_guid
            )));
        }
        let stream_kind = crate::receive_finish::dataset_kind(header.kind);
        if kind.ok() != Some(stream_kind) {
            return Err(refuse(format!(
                "the partial receive is not a {}",
                stream_kind.as_str()
            )));
        }
        if point > stored.point {
            return Err(refuse(format!(
                "the stream starts at object {} offset {}, after where the partial receive \
                 stopped (object {} offset {}): use its current token",
                point.object, point.offset_bytes, stored.point.object, stored.point.offset_bytes
            )));
        }
        Ok(stored)
    }

    /// The object set of the partial receive in `hidden`: the one open, or, for a full
    /// receive whose first token synced before any of its objects did (so its record has no
    /// root and import opened none), a new empty one: what that token says was applied.
    pub(crate) fn open_partial_objset(&self, hidden: &str) -> Result<(), EngineError> {
        if self.core.objsets.lock().contains_key(hidden) {
            return Ok(());
        }
        let directory = self.core.directory.lock();
        let record = directory.get(hidden)?;
        if record.objset_bp.iter().any(|byte| *byte != 0) {
            return Err(EngineError::Receive(format!(
                "the partial receive '{hidden}' has an object set that was not opened"
            )));
        }
        let objset_type = match record.kind {
            DatasetKind::Volume => ObjsetType::Volume,
            DatasetKind::Filesystem => ObjsetType::Filesystem,
        };
        let checksum = directory.properties_of(hidden)?.checksum;
        drop(directory);
        let objset = ObjectSet::create(self.core.mos.cached_io().clone(), objset_type, checksum);
        self.core
            .objsets
            .lock()
            .insert(hidden.to_string(), Arc::new(objset));
        Ok(())
    }

    /// `receive -A`: abandons the partial receive into `target` (destroys what it kept and its
    /// token). Refused while a receive into it is under way.
    pub fn abandon_partial_receive(&self, target: &str) -> Result<(), EngineError> {
        cairn_dataset::validate_name(target)?;
        let hidden = receive_name(target);
        if self.core.receives.lock().contains_key(&hidden) {
            return Err(EngineError::Receive(format!(
                "a receive into '{target}' is under way: stop it first"
            )));
        }
        if !self.core.directory.lock().datasets.contains_key(&hidden) {
            return Err(EngineError::Receive(format!(
                "no partial receive into '{target}' to abandon"
            )));
        }
        self.destroy_dataset_any(&hidden)?;
        self.sync()?;
        Ok(())
    }
}

/// The token text stored in hidden dataset `hidden`'s record.
fn stored_token_text(core: &PoolCore, hidden: &str) -> Option<String> {
    let directory = core.directory.lock();
    let record = directory.get(hidden).ok()?;
    record.properties.get(RESUME_TOKEN_KEY).cloned()
}
