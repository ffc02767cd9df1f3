//! Keeps the "Cache devices (L2ARC)" section of `docs/format.md` honest, with the parser the
//! pool's own test uses (`cairn-format/tests/doc_check/`, included by path):
//!
//! 1. every `` `NAME` = value `` line of the section names a cairn-l2arc constant with that
//!    value, and every constant of `code_constants()` is documented there once;
//! 2. every `| offset | size | field | meaning |` table is contiguous and ends at the length of
//!    what `layout.rs`'s encoder writes for that structure, and each of those headings has
//!    exactly one table.

#[path = "../../cairn-format/tests/doc_check/mod.rs"]
mod doc_check;

use cairn_l2arc::layout::{self, SegmentHeader, SummaryEntry, Superblock, encode_summary};
use doc_check::{assert_no_problems, check_constants, check_tables, read_doc, sections};
use std::collections::BTreeMap;

/// The section cairn-l2arc owns.
const SECTION: &str = "Cache devices (L2ARC)";

fn l2arc_section() -> String {
    sections(&read_doc(), &[SECTION])
}

/// Every constant the section may state, with the code's value.
fn code_constants() -> BTreeMap<&'static str, u64> {
    doc_check::code_constants![
        layout::CACHE_FORMAT_VERSION,
        layout::SECTOR_BYTES,
        layout::SUPER_BYTES,
        layout::DATA_START,
        layout::TAIL_RESERVED_BYTES,
        layout::SEGMENT_BYTES_MIN,
        layout::SEGMENT_BYTES_MAX,
        layout::HEADER_BYTES,
        layout::SUMMARY_ENTRY_BYTES,
        cairn_l2arc::KEY_LZ4,
    ]
}

/// Headings whose layout table must end exactly at the structure's size: the length of what
/// the encoder writes (a superblock or segment header fills its whole slot).
fn structure_sizes() -> BTreeMap<&'static str, u64> {
    let superblock = Superblock {
        device_guid: 1,
        pool_guid: 2,
        segment_bytes: layout::SEGMENT_BYTES_MIN,
        segment_count: 3,
    };
    let header = SegmentHeader {
        sequence: 1,
        hits: 0,
        summary_offset_bytes: layout::HEADER_BYTES as u32,
        entries: 0,
        summary_checksum: [0; 32],
    };
    let entry = SummaryEntry {
        key: [0x1000, 7],
        offset_sectors: 8,
        psize: 512,
    };
    BTreeMap::from([
        ("Superblock", superblock.encode().len() as u64),
        ("Segment header", header.encode().len() as u64),
        ("Summary entry", encode_summary(&[entry]).len() as u64),
    ])
}

#[test]
fn documented_constants_match_the_code() {
    assert_no_problems(
        "cairn-l2arc",
        "constants",
        &check_constants(&l2arc_section(), &code_constants()),
    );
}

#[test]
fn layout_tables_are_contiguous_and_sized() {
    assert_no_problems(
        "cairn-l2arc",
        "layout tables",
        &check_tables(&l2arc_section(), &structure_sizes()),
    );
}

/// The encoders' lengths are the slots the device layout reserves, so the tables above
/// describe whole slots.
#[test]
fn measured_sizes_are_the_slots() {
    let sizes = structure_sizes();
    assert_eq!(sizes["Superblock"], layout::SUPER_BYTES);
    assert_eq!(sizes["Segment header"], layout::HEADER_BYTES);
    assert_eq!(sizes["Summary entry"], layout::SUMMARY_ENTRY_BYTES as u64);
}
