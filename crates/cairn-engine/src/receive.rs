//! `cairn receive`: a send stream (`cairn_format::send_stream`) becomes a snapshot of a
//! dataset: a new dataset for a full stream, the next snapshot of an existing one for an
//! incremental stream.
//!
//! Where a stream is built: never in the target itself, but in a hidden dataset
//! (`TARGET%recv`, `cairn_dataset::receive_name`) no command can open, list or destroy, so
//! nothing half-received is ever visible:
//! - full: a new empty dataset (an object set with no object: the stream brings every
//!   object, a filesystem's master node included);
//! - incremental: a clone of the target's snapshot whose guid is the stream's source guid.
//!   That snapshot must be the target's newest and the head unchanged since it (`written` =
//!   0), else the receive is refused unless `force` (`-F`): newer snapshots are then
//!   destroyed once the whole stream has verified, just before the swap, and the head's
//!   changes go at the swap. (`zfs receive -F` destroys them before reading the stream, so a
//!   stream that fails costs them; here it costs nothing. The price: they hold their space
//!   while the stream is received.)
//!
//! Each verified record is applied (`receive_apply.rs`) in the open txg, joined through the
//! write throttle (`TxgEngine::throttle`) like any writer, so a large stream runs as many
//! bounded txgs, never one giant one. At END, whose checksum covers the whole stream, one sync
//! task (`receive_finish.rs`) makes it visible in one txg together with the snapshot END
//! names (carrying the stream's guid): the hidden dataset is renamed to the target (full), or
//! swapped in as the target's head (incremental: the clone's tree becomes the head's, the old
//! head's blocks born after the source are freed, as a rollback frees them).
//!
//! Failure: a record that fails its checksum, a stream cut short, a record that does not fit
//! what came before, or a write error stops the receive and destroys the hidden dataset: the
//! target is as it was. A receive killed mid-stream leaves the hidden dataset, which the next
//! import destroys (`Pool::destroy_abandoned_receives`). With `-s` (`resumable`) the hidden
//! dataset is kept instead, with a resume token that says where a resumed stream (`send -t`,
//! its header marked `SEND_FEATURE_RESUME`) starts; such a stream continues it
//! (`receive_resume.rs`). A package (`send -R`, `-I`, `-p`) is received stream by stream
//! (`receive_tree.rs`), each through `receive_stream` with what its manifest adds (`TreeStep`).

use crate::EngineError;
use crate::pool::Pool;
use crate::receive_apply::Apply;
use crate::receive_finish::{IncrementalSource, dataset_kind};
use crate::receive_resume::{ResumeNotes, record_point};
use cairn_dataset::directory::{Provisioning, creation_properties, volume_creation_properties};
use cairn_dataset::{DatasetError, DatasetKind, SnapshotName, SpaceAsk, receive_name};
use cairn_format::send_package::is_package;
use cairn_format::send_stream::{
    SEND_HEADER_SIZE, StreamHeader, StreamKind, StreamReader, StreamRecord,
};
use cairn_format::send_token::{ResumePoint, ResumeToken};
use cairn_object::ObjectSet;
use std::io::Read;
use std::sync::Arc;

/// How a receive may treat its target.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReceiveOptions {
    /// `-F`: an incremental stream is received even if the target changed since its source
    /// snapshot: newer snapshots are destroyed once the stream verified, the head's changes go.
    pub force: bool,
    /// `-s`: a receive cut short keeps what it applied, with a resume token
    /// (`receive_resume.rs`), instead of destroying it.
    pub resumable: bool,
}

/// What a receive made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReceiveSummary {
    /// `dataset@snapshot`.
    pub snapshot: String,
    pub bytes_read: u64,
    pub objects: u64,
    pub blocks_written: u64,
}

/// What a sub-stream of a package (`receive_tree.rs`) adds to a plain receive.
#[derive(Debug, Clone, Default)]
pub(crate) struct TreeStep {
    /// An incremental stream into a new dataset: a clone of this snapshot (`dataset@snap`,
    /// whose guid is the stream's source guid) is built, as `zfs receive` makes a clone.
    pub(crate) origin: Option<String>,
    /// The local properties the target takes (sent with `-p`), replacing its own.
    pub(crate) properties: Option<Vec<(String, String)>>,
}

impl Pool {
    /// Receives the stream on `input` into `target` (`pool/name`): see the module doc. A
    /// package (`send -R`, `-I`, `-p`) is received stream by stream (`receive_tree.rs`).
    pub fn receive(
        &self,
        target: &str,
        input: &mut dyn Read,
        options: ReceiveOptions,
    ) -> Result<ReceiveSummary, EngineError> {
        let mut head = [0u8; SEND_HEADER_SIZE];
        input.read_exact(&mut head).map_err(|err| {
            EngineError::Receive(match err.kind() {
                std::io::ErrorKind::UnexpectedEof => {
                    "send stream truncated in its header (at byte 0)".into()
                }
                _ => format!("reading the stream: {err}"),
            })
        })?;
        if is_package(&head) {
            return self.receive_package(target, &head, input, options);
        }
        let mut whole = std::io::Cursor::new(head).chain(input);
        let mut reader = StreamReader::new(&mut whole).map_err(refused)?;
        self.receive_stream(target, &mut reader, options, &TreeStep::default())
    }

    /// Receives the stream `reader` has begun (its header read) into `target`, with what a
    /// package's manifest adds (`step`).
    pub(crate) fn receive_stream(
        &self,
        target: &str,
        reader: &mut StreamReader<'_>,
        options: ReceiveOptions,
        step: &TreeStep,
    ) -> Result<ReceiveSummary, EngineError> {
        let header = reader.header().clone();
        let hidden = receive_name(target);
        cairn_dataset::validate_name(target)?;
        let start = ResumeToken {
            to_guid: header.to_guid,
            from_guid: header.from_guid,
            point: ResumePoint::default(),
            bytes_received: 0,
        };
        if let Some(point) = header.resume {
            // Under way before the checks: nothing else writes or abandons the partial one.
            let (_guard, mut notes) = self.receive_under_way(target, &hidden, true, start)?;
            let stored = self.resumable_partial(target, &header, point)?;
            notes.continue_from(stored);
            self.open_partial_objset(&hidden)?;
            let source = if header.is_incremental() {
                Some(self.check_incremental(target, &header, options)?.0)
            } else {
                None
            };
            let partial = (&hidden[..], notes, true);
            return self.receive_into(target, partial, reader, source, step);
        }
        let (_guard, notes) = self.receive_under_way(target, &hidden, options.resumable, start)?;
        if self.core.directory.lock().datasets.contains_key(&hidden) {
            let why = match self.receive_resume_token(target) {
                Some(_) => {
                    "a partial receive (-s) is kept: resume it (cairn send -t TOKEN, its \
                            token from cairn get receive_resume_token) or abandon it \
                            (cairn receive -A)"
                }
                None => {
                    "a receive was killed: what it left is destroyed at the next import \
                         (or by cairn receive -A)"
                }
            };
            return Err(EngineError::Receive(format!(
                "cannot receive into '{target}': {why}"
            )));
        }
        let source = match (&step.origin, header.is_incremental()) {
            (Some(origin), true) => {
                self.begin_clone(target, &hidden, origin, &header)?;
                None
            }
            (None, true) => Some(self.begin_incremental(target, &hidden, &header, options)?),
            (_, false) => {
                self.begin_full(target, &hidden, &header)?;
                None
            }
        };
        if options.resumable
            && let Err(err) = self.store_first_token(&hidden, start)
        {
            self.abandon_receive(&hidden);
            return Err(err);
        }
        let partial = (&hidden[..], notes, options.resumable);
        self.receive_into(target, partial, reader, source, step)
    }

    /// Applies the records of `reader` to `hidden` (with the properties `step` brings) and,
    /// at END, makes them `target`'s snapshot; a failure destroys `hidden`, or with
    /// `resumable` keeps it with its token.
    fn receive_into(
        &self,
        target: &str,
        (hidden, mut notes, resumable): (&str, ResumeNotes, bool),
        reader: &mut StreamReader<'_>,
        source: Option<IncrementalSource>,
        step: &TreeStep,
    ) -> Result<ReceiveSummary, EngineError> {
        let header = reader.header().clone();
        let ready = self.hidden_ready(hidden, step, source);
        let applied = ready.and_then(|(objset, source)| {
            self.apply_stream(reader, hidden, objset, &mut notes)
                .map(|applied| (applied, source))
        });
        let finished = applied.and_then(|((snapshot, objects, blocks_written), source)| {
            let full = format!("{target}@{snapshot}");
            SnapshotName::parse(&full)?;
            match &source {
                None => self.finish_full(target, hidden, &snapshot, header.to_guid)?,
                Some(source) => {
                    self.finish_incremental(target, hidden, source, &snapshot, header.to_guid)?
                }
            }
            Ok(ReceiveSummary {
                snapshot: full,
                bytes_read: reader.offset_bytes(),
                objects,
                blocks_written,
            })
        });
        if finished.is_err() {
            if resumable {
                self.keep_partial_receive();
            } else {
                self.abandon_receive(hidden);
            }
        }
        finished
    }

    /// The hidden dataset's object set, once the properties sent with the stream (if any)
    /// are set on it (an incremental's also go with its source, for the swap).
    fn hidden_ready(
        &self,
        hidden: &str,
        step: &TreeStep,
        source: Option<IncrementalSource>,
    ) -> Result<(Arc<ObjectSet>, Option<IncrementalSource>), EngineError> {
        let source = match &step.properties {
            Some(sent) => {
                let properties = self.receive_properties(hidden, sent, source.is_some())?;
                source.map(|source| IncrementalSource {
                    properties: Some(properties),
                    ..source
                })
            }
            None => source,
        };
        let objset = self.core.objsets.lock().get(hidden).cloned();
        let objset =
            objset.ok_or_else(|| EngineError::Receive(format!("'{hidden}' was not created")))?;
        Ok((objset, source))
    }

    /// A full stream: creates the hidden dataset, empty, with the stream's kind and sizes.
    fn begin_full(
        &self,
        target: &str,
        hidden: &str,
        header: &StreamHeader,
    ) -> Result<(), EngineError> {
        let kind = dataset_kind(header.kind);
        self.check_new_dataset(target, kind)?;
        let properties = match kind {
            DatasetKind::Volume => volume_creation_properties(
                header.volsize_bytes,
                Provisioning::Sparse,
                &[("volblocksize".into(), header.block_size_bytes.to_string())],
            )?,
            DatasetKind::Filesystem => creation_properties(
                kind,
                &[("recordsize".into(), header.block_size_bytes.to_string())],
            )?,
        };
        let name = hidden.to_string();
        self.run_sync_task(move |core, txg| {
            let objset = core.insert_dataset(&name, kind, txg, properties)?;
            core.objsets.lock().insert(name, objset);
            Ok(())
        })?;
        Ok(())
    }

    /// An incremental stream: checks the target against it (see the module doc) and makes
    /// the hidden clone of its source snapshot.
    fn begin_incremental(
        &self,
        target: &str,
        hidden: &str,
        header: &StreamHeader,
        options: ReceiveOptions,
    ) -> Result<IncrementalSource, EngineError> {
        let (source, origin) = self.check_incremental(target, header, options)?;
        let (kind, properties) = self.clone_properties(&origin, &[])?;
        self.make_clone(origin, hidden.to_string(), kind, properties)?;
        Ok(source)
    }

    /// The checks of an incremental stream into `target` (see the module doc), with `-F` of
    /// whether its newer snapshots can be destroyed at the end: the source (naming them) and
    /// its snapshot's name.
    fn check_incremental(
        &self,
        target: &str,
        header: &StreamHeader,
        options: ReceiveOptions,
    ) -> Result<(IncrementalSource, SnapshotName), EngineError> {
        let plan = self.incremental_plan(target, header)?;
        let changed = !plan.newer.is_empty() || plan.written_bytes > 0;
        if changed && !options.force {
            let newer = match plan.newer.first() {
                Some(first) => format!("newer snapshots ({first}{})", more(&plan.newer)),
                None => format!("{} bytes written", plan.written_bytes),
            };
            return Err(EngineError::Receive(format!(
                "'{target}' changed since {target}@{} ({newer}): receive with -F to roll it \
                 back (destroying its newer snapshots and changes)",
                plan.source.snapshot
            )));
        }
        self.refuse_open_volume(target, options.force)?;
        if !plan.newer.is_empty() {
            // Destroyed only at the end (see the module doc), but a hold or a clone that
            // would stop that is refused now, before the stream is read.
            self.destroy_space(&plan.newer)?;
        }
        let origin = SnapshotName::parse(&format!("{target}@{}", plan.source.snapshot))?;
        let source = IncrementalSource {
            force: options.force,
            newer: plan.newer,
            ..plan.source
        };
        Ok((source, origin))
    }

    /// A volume served to clients (NBD) changes under them at the swap only with `force`.
    fn refuse_open_volume(&self, target: &str, force: bool) -> Result<(), EngineError> {
        let volume = self.volumes.lock().get(target).cloned();
        if let Some(volume) = volume
            && Arc::strong_count(&volume) > 2
            && !force
        {
            return Err(DatasetError::HasDependents {
                name: target.to_string(),
                what: "open users (NBD clients); receive with -F to replace it under them".into(),
            }
            .into());
        }
        Ok(())
    }

    /// Destroys what a failed receive made. A failure here leaves the hidden dataset for the
    /// next import to destroy; the receive's own error is the one reported.
    pub(crate) fn abandon_receive(&self, hidden: &str) {
        if self.core.directory.lock().datasets.contains_key(hidden) {
            let _ = self.destroy_dataset_any(hidden);
        }
    }

    /// Applies every record up to END; returns the snapshot name END carries, the objects
    /// and the blocks written.
    fn apply_stream(
        &self,
        reader: &mut StreamReader<'_>,
        hidden: &str,
        objset: Arc<ObjectSet>,
        notes: &mut ResumeNotes,
    ) -> Result<(String, u64, u64), EngineError> {
        let engine = self.txg_engine()?.clone();
        // Asked before each WRITE, outside any txg hold (it may wait for a sync): a full pool
        // or a quota stops the receive with ENOSPC/EDQUOT instead of failing a sync.
        let space = self.space_check(hidden, &engine, objset.clone());
        let objset = &*objset;
        let header = reader.header();
        // A resumed stream meets the objects it made before the cut, as an incremental one
        // meets its source's (`receive_resume.rs`).
        let mut apply = Apply::new(
            objset,
            header.is_incremental() || header.resume.is_some(),
            (header.kind == StreamKind::Volume).then_some(header.volsize_bytes),
        );
        loop {
            let Some(record) = reader.next_record().map_err(refused)? else {
                return Err(inconsistent(reader, "records after END".into()));
            };
            if let StreamRecord::End { snapshot, .. } = record {
                return Ok((snapshot, apply.objects_sent(), apply.blocks_written));
            }
            let dirty_bytes = match &record {
                StreamRecord::Write { data, .. } => data.len() as u64,
                StreamRecord::WriteCompressed { logical_bytes, .. } => u64::from(*logical_bytes),
                _ => 512,
            };
            // Room for the block, its indirect blocks and copies: an eighth more and 64 KiB.
            let ask = dirty_bytes + dirty_bytes / 8 + (64 << 10);
            space(SpaceAsk::bytes(ask)).map_err(DatasetError::from)?;
            engine.throttle(dirty_bytes);
            let hold = engine.try_hold().map_err(EngineError::Txg)?;
            let point = record_point(&record);
            apply
                .record(hold.txg(), record)?
                .map_or(Ok(()), |what| Err(inconsistent(reader, what)))?;
            // Counted as any writer's, so the throttle paces the stream, a sync starts when
            // the txg holds enough, and the space check sees what is not synced yet.
            hold.add_dirty(dirty_bytes);
            if let Some(point) = point {
                notes.applied(&self.core, hold.txg(), point, reader.offset_bytes());
            }
        }
    }
}

/// ", ..." when a list has more than one name.
fn more(names: &[String]) -> &'static str {
    if names.len() > 1 { ", ..." } else { "" }
}

fn inconsistent(reader: &StreamReader<'_>, what: String) -> EngineError {
    EngineError::Receive(format!(
        "the stream is inconsistent near byte {}: {what}",
        reader.offset_bytes()
    ))
}

pub(crate) fn refused(err: cairn_format::send_stream::StreamError) -> EngineError {
    EngineError::Receive(err.to_string())
}
