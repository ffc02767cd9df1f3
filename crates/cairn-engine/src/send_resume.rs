//! `cairn send -t TOKEN`: the rest of a stream a partial receive (`receive -s`) stopped in,
//! from the point its resume token names (`cairn_format::send_token`; the receiving side is
//! `receive_resume.rs`).
//!
//! The token names snapshots by guid, not by name: the receiver never learns the sender's
//! dataset names, and a guid survives a rename. The sent snapshot is looked up by its guid
//! among every dataset of the pool, the source of an incremental among the snapshots (then
//! bookmarks whose snapshot exists) of that same dataset; either missing is refused with the
//! guid named, before anything is written. The stream is the one `send` would write, minus
//! the records before the point (`send_from_point`), its header marked `SEND_FEATURE_RESUME`
//! with the point, so a receiver applies it only onto the partial receive it continues.

use crate::EngineError;
use crate::pool::Pool;
use crate::send::{SendSummary, stored_or_derived_guid};
use cairn_format::send_token::ResumeToken;
use std::io::Write;

impl Pool {
    /// Whether this pool holds the snapshot a resume token names (the guid of its stream).
    pub fn has_snapshot_guid(&self, guid: u64) -> bool {
        self.snapshot_of_guid(guid).is_some()
    }

    /// `send -t`: the rest of the stream `token` names, from its point, to `out`.
    pub fn send_resumed(
        &self,
        token: &str,
        out: &mut dyn Write,
        progress: &mut dyn FnMut(u64),
    ) -> Result<SendSummary, EngineError> {
        let token = ResumeToken::decode(token)
            .map_err(|err| EngineError::Send(format!("cannot resume a send: {err}")))?;
        let Some((dataset, snapshot)) = self.snapshot_of_guid(token.to_guid) else {
            return Err(EngineError::Send(format!(
                "cannot resume a send: the token's snapshot (guid {}) is not in pool '{}' \
                 (destroyed, or another pool)",
                token.to_guid,
                self.name()
            )));
        };
        let from = match token.from_guid {
            0 => None,
            guid => Some(self.source_of_guid(&dataset, guid).ok_or_else(|| {
                EngineError::Send(format!(
                    "cannot resume a send: the token's source snapshot (guid {guid}) is no \
                     longer on '{dataset}': resume is impossible, abandon the partial receive \
                     (receive -A) and send again"
                ))
            })?),
        };
        let full = format!("{dataset}@{snapshot}");
        self.send_from_point(
            &full,
            from.as_deref(),
            crate::send::SendOptions::default(),
            Some(token.point),
            out,
            progress,
        )
    }

    /// (dataset, snapshot name) of the snapshot whose guid is `guid`.
    fn snapshot_of_guid(&self, guid: u64) -> Option<(String, String)> {
        let directory = self.core.directory.lock();
        let table = self.core.snapshots.lock();
        directory
            .datasets
            .values()
            .filter(|record| !cairn_dataset::is_hidden(&record.name))
            .find_map(|record| {
                table
                    .snapshots_of(record.id)
                    .find(|snapshot| {
                        let info = &snapshot.info;
                        stored_or_derived_guid(info.guid, self.core.guid, info.id, info.created_txg)
                            == guid
                    })
                    .map(|snapshot| (record.name.clone(), snapshot.info.name.clone()))
            })
    }

    /// `@snap` or `#mark` of `dataset` whose guid is `guid`: a snapshot, else a bookmark.
    fn source_of_guid(&self, dataset: &str, guid: u64) -> Option<String> {
        let directory = self.core.directory.lock();
        let record = directory.get(dataset).ok()?;
        let table = self.core.snapshots.lock();
        let snapshot = table.snapshots_of(record.id).find(|snapshot| {
            let info = &snapshot.info;
            stored_or_derived_guid(info.guid, self.core.guid, info.id, info.created_txg) == guid
        });
        if let Some(snapshot) = snapshot {
            return Some(format!("@{}", snapshot.info.name));
        }
        table
            .bookmarks_of(record.id)
            .into_iter()
            .find(|mark| {
                stored_or_derived_guid(
                    mark.guid,
                    self.core.guid,
                    mark.snapshot_id,
                    mark.created_txg,
                ) == guid
            })
            .map(|mark| format!("#{}", mark.name))
    }
}
