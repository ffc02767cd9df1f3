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

use super::{SendSummary, object_record, send_blocks, send_every_block, stream_io};
use crate::EngineError;
use cairn_format::BlockPointer;
use cairn_format::send_stream::{StreamRecord, StreamWriter};
use cairn_object::ObjectSet;

/// Changed blocks handed to `send_blocks` at once (bounds the list's memory).
const BLOCKS_PER_CALL: usize = 1024;

/// The changes of `objset` (rooted at `to_root`) since txg `from_txg`, the older tree gone.
pub(super) fn send_incremental_since(
    objset: &ObjectSet,
    from_txg: u64,
    to_root: &BlockPointer,
    writer: &mut StreamWriter<'_>,
    summary: &mut SendSummary,
    progress: &mut dyn FnMut(u64),
) -> Result<(), EngineError> {
    let io = objset.cached_io();
    let changed = cairn_object::changed_objects_since(io, from_txg, to_root)?;
    summary.blocks_visited += changed.blocks_visited;
    let mut freed = changed.freed.iter().peekable();
    for (object, dnode) in &changed.objects {
        while let Some(&&(first, count)) = freed.peek()
            && first < *object
        {
            writer
                .write(&StreamRecord::FreeObjects { first, count })
                .map_err(stream_io)?;
            freed.next();
        }
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
            writer.write(&free_from(*object, 0)).map_err(stream_io)?;
            send_every_block(objset, *object, dnode, writer, summary, progress)?;
        } else {
            send_changed_blocks(objset, from_txg, to_root, *object, dnode, writer, summary)?;
        }
        progress(writer.bytes_written());
    }
    for &(first, count) in freed {
        writer
            .write(&StreamRecord::FreeObjects { first, count })
            .map_err(stream_io)?;
    }
    Ok(())
}

/// WRITEs of the blocks of `object` written since `from_txg`, a FREE per hole range beneath
/// a rewritten parent, and a FREE past its end.
fn send_changed_blocks(
    objset: &ObjectSet,
    from_txg: u64,
    to_root: &BlockPointer,
    object: u64,
    dnode: &cairn_format::Dnode,
    writer: &mut StreamWriter<'_>,
    summary: &mut SendSummary,
) -> Result<(), EngineError> {
    let io = objset.cached_io();
    let blocks = cairn_object::changed_blocks_since(io, from_txg, to_root, object)?;
    summary.blocks_visited += blocks.blocks_visited;
    let block_bytes = u64::from(dnode.data_block_size).max(1);
    let end_bytes = (dnode.max_block_id + 1).saturating_mul(block_bytes);
    let mut chunk = Vec::new();
    for range in &blocks.ranges {
        let first = range.offset_bytes / block_bytes;
        let end = range
            .offset_bytes
            .saturating_add(range.length_bytes)
            .div_ceil(block_bytes);
        for blkid in first..end {
            chunk.push(blkid);
            if chunk.len() == BLOCKS_PER_CALL {
                send_blocks(objset, object, dnode, &chunk, writer, summary)?;
                chunk.clear();
            }
        }
    }
    send_blocks(objset, object, dnode, &chunk, writer, summary)?;
    // Holes within the object as it is now; what lies past its end goes with the last FREE.
    for hole in blocks
        .holes
        .iter()
        .filter(|hole| hole.offset_bytes < end_bytes)
    {
        let length_bytes = hole.length_bytes.min(end_bytes - hole.offset_bytes);
        writer
            .write(&StreamRecord::Free {
                object,
                offset_bytes: hole.offset_bytes,
                length_bytes,
            })
            .map_err(stream_io)?;
    }
    writer
        .write(&free_from(object, end_bytes))
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
