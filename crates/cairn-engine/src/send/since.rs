//! An incremental send from a bookmark whose snapshot is destroyed: only the source's txg
//! and guid are left, so the walk cannot line the two trees up (`send.rs` does, to find
//! exactly what was freed). `cairn_object::changed_objects_since` and `changed_blocks_since`
//! walk the newer tree alone beneath the pointers born after that txg; what they cannot tell
//! apart from a freed block (a hole beneath a rewritten parent) is sent as a FREE, which a
//! receiver that had a hole there too applies as a no-op.
//!
//! What the receiver gets, object by object, for every slot of a dnode block rewritten since:
//! - a free slot: FREEOBJECTS (the object may have existed then);
//! - an object born after the source (its dnode's birth txg): FREE of everything, then all
//!   its blocks, as for an object made anew in `send.rs`;
//! - any other object: OBJECT (its bonus may have changed; an unchanged one is set again),
//!   a WRITE per block written since, a FREE per hole range beneath a rewritten parent, and a
//!   FREE past its end (it may have shrunk).
//!
//! Dnode blocks freed since (holes in the meta-dnode's rewritten tree) become FREEOBJECTS of
//! their object ranges. Records stay ascending by object, each object sent once, which is all
//! the receiver asks of an incremental. The cost still follows what was rewritten: unchanged
//! subtrees are never read; the extra is at most one OBJECT per slot of a rewritten dnode
//! block and a FREE per hole run beneath a rewritten parent.

use super::{SendSummary, object_record, resume_offset, send_blocks, send_every_block, stream_io};
use crate::EngineError;
use cairn_format::BlockPointer;
use cairn_format::send_stream::ResumePoint;
use cairn_format::send_stream::{StreamRecord, StreamWriter};
use cairn_object::{ByteRange, ObjectSet};

/// Changed blocks handed to `send_blocks` at once (bounds the list's memory).
const BLOCKS_PER_CALL: usize = 1024;

/// The changes of `objset` (rooted at `to_root`) since txg `from_txg`, the older tree gone;
/// with `resume`, the records at or after that point (`send -t`).
pub(super) fn send_incremental_since(
    objset: &ObjectSet,
    (from_txg, to_root): (u64, &BlockPointer),
    resume: Option<ResumePoint>,
    writer: &mut StreamWriter<'_>,
    summary: &mut SendSummary,
    progress: &mut dyn FnMut(u64),
) -> Result<(), EngineError> {
    let io = objset.cached_io();
    let changed = cairn_object::changed_objects_since(io, from_txg, to_root)?;
    summary.blocks_visited += changed.blocks_visited;
    // Freed ranges wholly before a resume point were applied before the cut.
    let resume_object = resume.map_or(0, |point| point.object);
    let mut freed = changed
        .freed
        .iter()
        .filter(|&&(first, count)| first.saturating_add(count) > resume_object)
        .map(|&(first, count)| {
            let start = first.max(resume_object);
            (start, count - (start - first))
        })
        .peekable();
    for (object, dnode) in &changed.objects {
        while let Some(&(first, count)) = freed.peek()
            && first < *object
        {
            writer
                .write(&StreamRecord::FreeObjects { first, count })
                .map_err(stream_io)?;
            freed.next();
        }
        let Some(from_bytes) = resume_offset(resume, *object) else {
            continue;
        };
        if dnode.is_free() {
            writer
                .write(&StreamRecord::FreeObjects {
                    first: *object,
                    count: 1,
                })
                .map_err(stream_io)?;
            continue;
        }
        writer
            .write(&object_record(*object, dnode))
            .map_err(stream_io)?;
        summary.objects += 1;
        if dnode.birth_txg > from_txg {
            if from_bytes == 0 {
                writer.write(&free_from(*object, 0)).map_err(stream_io)?;
            }
            send_every_block(
                objset, *object, dnode, from_bytes, writer, summary, progress,
            )?;
        } else {
            let place = (from_txg, to_root, *object, from_bytes);
            send_changed_blocks(objset, place, dnode, writer, summary)?;
        }
        progress(writer.bytes_written());
    }
    for (first, count) in freed {
        writer
            .write(&StreamRecord::FreeObjects { first, count })
            .map_err(stream_io)?;
    }
    Ok(())
}

/// WRITEs of the blocks of `object` written since `from_txg` and a FREE per hole range
/// beneath a rewritten parent, in offset order (a resume point is a position: nothing after
/// it may come before it), then a FREE past its end; all from `from_bytes` on (a resumed
/// stream).
fn send_changed_blocks(
    objset: &ObjectSet,
    (from_txg, to_root, object, from_bytes): (u64, &BlockPointer, u64, u64),
    dnode: &cairn_format::Dnode,
    writer: &mut StreamWriter<'_>,
    summary: &mut SendSummary,
) -> Result<(), EngineError> {
    let io = objset.cached_io();
    let blocks = cairn_object::changed_blocks_since(io, from_txg, to_root, object)?;
    summary.blocks_visited += blocks.blocks_visited;
    let block_bytes = u64::from(dnode.data_block_size).max(1);
    let end_bytes = (dnode.max_block_id + 1).saturating_mul(block_bytes);
    // Both lists are ascending and disjoint: merged by offset, holes within the object only
    // (what lies past its end goes with the last FREE).
    let mut events: Vec<(&ByteRange, bool)> = blocks
        .ranges
        .iter()
        .map(|range| (range, true))
        .chain(blocks.holes.iter().map(|hole| (hole, false)))
        .collect();
    events.sort_by_key(|(range, _)| range.offset_bytes);
    let mut chunk = Vec::new();
    for (range, written) in events {
        let start = range.offset_bytes.max(from_bytes);
        let end = range.offset_bytes.saturating_add(range.length_bytes);
        if written {
            for blkid in start / block_bytes..end.div_ceil(block_bytes) {
                chunk.push(blkid);
                if chunk.len() == BLOCKS_PER_CALL {
                    send_blocks(objset, object, dnode, &chunk, writer, summary)?;
                    chunk.clear();
                }
            }
            continue;
        }
        let end = end.min(end_bytes);
        if start < end {
            send_blocks(objset, object, dnode, &chunk, writer, summary)?;
            chunk.clear();
            writer
                .write(&StreamRecord::Free {
                    object,
                    offset_bytes: start,
                    length_bytes: end - start,
                })
                .map_err(stream_io)?;
        }
    }
    send_blocks(objset, object, dnode, &chunk, writer, summary)?;
    writer
        .write(&free_from(object, end_bytes.max(from_bytes)))
        .map_err(stream_io)
}

/// A FREE of everything `object` holds from `offset_bytes` on.
fn free_from(object: u64, offset_bytes: u64) -> StreamRecord {
    StreamRecord::Free {
        object,
        offset_bytes,
        length_bytes: u64::MAX,
    }
}
