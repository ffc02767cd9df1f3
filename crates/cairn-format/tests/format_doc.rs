//! Keeps `docs/format.md` honest.
//!
//! 1. Each line of the form `` `NAME` = value `` (optionally a list item, value in decimal or
//!    `0x` hex with `_` separators) must name a constant known to `code_constants()` and carry its
//!    value. Every constant in that table must be documented, and none may appear twice.
//! 2. Every `| offset | size | field | meaning |` table must be contiguous: it starts at offset 0
//!    and each row starts where the previous one ends. A table under one of the headings in
//!    `structure_sizes()` must end exactly at that structure's size, and each of those headings
//!    must have exactly one such table.
//!
//! The sections of `cairn-dataset`, `cairn-fs` and `cairn-l2arc` are left out here: each of those
//! crates checks its own in its `tests/format_doc.rs`, with the same parser (`doc_check/`).

mod doc_check;

use cairn_format::raidz::RaidzGeometry;
use cairn_format::{
    blkptr, dnode, intent_log, label, raidz, send_package, send_stream, send_token, spacelog,
    uberblock,
};
use doc_check::{
    assert_no_problems, cells, check_constants, check_tables, prose_lines, read_doc, sections,
    without_sections,
};
use std::collections::BTreeMap;

/// Size of one DVA: `DVA_COUNT_MAX` of them fill bytes [0, 48) of a block pointer. There is no
/// public constant for it; the block pointer table below checks the 48 independently.
const DVA_SIZE: u64 = 16;

/// Size of one lane entry of the intent-log chain header. There is no public constant for it;
/// the chain header table checks independently that `INTENT_LOG_LANES_MAX` entries of 32 bytes,
/// the 16-byte preamble and the spare bytes add up to `INTENT_LOG_HEADER_SIZE`.
const INTENT_LOG_LANE_SIZE: u64 = 32;

/// Every constant the document may state, with the code's value.
fn code_constants() -> BTreeMap<&'static str, u64> {
    doc_check::code_constants![
        cairn_format::FORMAT_VERSION,
        cairn_format::FORMAT_VERSION_MIN,
        cairn_format::ASHIFT_DEFAULT,
        cairn_format::ASHIFT_MIN,
        cairn_format::ASHIFT_MAX,
        cairn_format::BLOCK_SIZE_MAX,
        cairn_format::BLOCK_SIZE_GRANULE,
        label::LABEL_SIZE,
        label::LABEL_COUNT,
        label::LABEL_BLANK_SIZE,
        label::LABEL_CONFIG_OFFSET,
        label::LABEL_CONFIG_SIZE,
        label::LABEL_CONFIG_HEADER_SIZE,
        label::LABEL_CONFIG_MAGIC,
        label::LABEL_RING_OFFSET,
        label::UBERBLOCK_SLOT_SIZE,
        label::UBERBLOCK_RING_SLOTS,
        label::VDEV_DATA_START,
        label::VDEV_DATA_END_RESERVED,
        label::DEVICE_SIZE_MIN,
        uberblock::UBERBLOCK_SIZE,
        uberblock::UBERBLOCK_MAGIC,
        blkptr::BLOCK_POINTER_SIZE,
        blkptr::DVA_COUNT_MAX,
        blkptr::LEVEL_MAX,
        dnode::DNODE_SIZE,
        dnode::DNODE_BLOCK_POINTERS,
        dnode::DNODE_BONUS_SIZE,
        dnode::DNODE_BONUS_SIZE_MAX,
        dnode::DNODE_BLOCK_SIZE,
        dnode::DNODES_PER_BLOCK,
        dnode::INDIRECT_SHIFT_DEFAULT,
        dnode::INDIRECT_SHIFT_MIN,
        dnode::INDIRECT_SHIFT_MAX,
        dnode::OBJSET_PHYS_SIZE,
        dnode::OBJSET_BLOCK_SIZE,
        spacelog::SPACE_LOG_MAGIC,
        spacelog::SPACE_LOG_HEADER_SIZE,
        spacelog::SPACE_LOG_ENTRY_SIZE,
        spacelog::SPACE_LOG_BLOCK_SIZE,
        spacelog::SPACE_LOG_ENTRIES_PER_BLOCK,
        intent_log::INTENT_LOG_MAGIC,
        intent_log::LOG_BLOCK_HEADER_SIZE,
        intent_log::LOG_RECORD_HEADER_SIZE,
        intent_log::LOG_BLOCK_SIZE_MAX,
        intent_log::LOG_BLOCK_SIZE_MIN,
        intent_log::LOG_RECORD_PAYLOAD_MAX,
        intent_log::INTENT_LOG_LANES_MAX,
        intent_log::INTENT_LOG_HEADER_SIZE,
        intent_log::INTENT_LOG_HEADER_VERSION,
        send_stream::SEND_STREAM_MAGIC,
        send_stream::SEND_STREAM_VERSION,
        send_stream::SEND_HEADER_SIZE,
        send_stream::SEND_RECORD_HEADER_SIZE,
        send_stream::SEND_PAYLOAD_MAX,
        send_stream::SEND_FEATURE_COMPRESSED,
        send_stream::SEND_FEATURES_KNOWN,
        send_stream::SEND_SNAPSHOT_NAME_MAX,
        send_stream::SEND_WRITE_FLAG_COMPRESSED,
        send_stream::SEND_FEATURE_RESUME,
        send_token::RESUME_TOKEN_VERSION,
        send_token::RESUME_TOKEN_SIZE,
        send_package::SEND_FEATURE_PACKAGE,
        send_package::SEND_MANIFEST_VERSION,
        send_package::SEND_KIND_MANIFEST,
        send_package::SEND_KIND_PACKAGE_END,
        raidz::RAIDZ_PARITY_MAX,
        raidz::RAIDZ_WIDTH_MAX,
    ]
}

/// Headings whose layout table must end exactly at the structure's size.
fn structure_sizes() -> BTreeMap<&'static str, u64> {
    BTreeMap::from([
        ("Label", label::LABEL_SIZE),
        (
            "Label config header",
            label::LABEL_CONFIG_HEADER_SIZE as u64,
        ),
        ("Uberblock", uberblock::UBERBLOCK_SIZE as u64),
        ("Block pointer", blkptr::BLOCK_POINTER_SIZE as u64),
        ("DVA", DVA_SIZE),
        ("Dnode", dnode::DNODE_SIZE as u64),
        ("Object-set root", dnode::OBJSET_PHYS_SIZE as u64),
        (
            "Space-log block header",
            spacelog::SPACE_LOG_HEADER_SIZE as u64,
        ),
        ("Space-log entry", spacelog::SPACE_LOG_ENTRY_SIZE as u64),
        ("Log block header", intent_log::LOG_BLOCK_HEADER_SIZE as u64),
        (
            "Log record header",
            intent_log::LOG_RECORD_HEADER_SIZE as u64,
        ),
        (
            "Intent-log chain header",
            intent_log::INTENT_LOG_HEADER_SIZE as u64,
        ),
        ("Intent-log lane entry", INTENT_LOG_LANE_SIZE),
        ("Send stream header", send_stream::SEND_HEADER_SIZE as u64),
        ("Resume token", send_token::RESUME_TOKEN_SIZE as u64),
        (
            "Send record header",
            send_stream::SEND_RECORD_HEADER_SIZE as u64,
        ),
    ])
}

/// Sections other crates own and check in their own `tests/format_doc.rs`.
const OTHER_OWNERS: &[&str] = &[
    "Dataset directory",
    "Snapshots",
    "Filesystems",
    "Cache devices (L2ARC)",
];

/// The document without the sections other crates own.
fn pool_sections() -> String {
    without_sections(&read_doc(), OTHER_OWNERS)
}

#[test]
fn documented_constants_match_the_code() {
    let doc = pool_sections();
    assert_no_problems(
        "cairn-format",
        "constants",
        &check_constants(&doc, &code_constants()),
    );
}

#[test]
fn layout_tables_are_contiguous_and_sized() {
    let doc = pool_sections();
    assert_no_problems(
        "cairn-format",
        "layout tables",
        &check_tables(&doc, &structure_sizes()),
    );
}

#[test]
fn constant_table_covers_the_required_names() {
    let code = code_constants();
    for name in [
        "LABEL_SIZE",
        "LABEL_COUNT",
        "LABEL_CONFIG_OFFSET",
        "LABEL_CONFIG_SIZE",
        "LABEL_RING_OFFSET",
        "UBERBLOCK_SLOT_SIZE",
        "UBERBLOCK_RING_SLOTS",
        "UBERBLOCK_SIZE",
        "UBERBLOCK_MAGIC",
        "LABEL_CONFIG_MAGIC",
        "BLOCK_POINTER_SIZE",
        "DVA_COUNT_MAX",
        "DNODE_SIZE",
        "DNODE_BLOCK_SIZE",
        "OBJSET_PHYS_SIZE",
        "OBJSET_BLOCK_SIZE",
        "SPACE_LOG_HEADER_SIZE",
        "SPACE_LOG_ENTRY_SIZE",
        "SPACE_LOG_BLOCK_SIZE",
        "SPACE_LOG_MAGIC",
        "VDEV_DATA_START",
        "FORMAT_VERSION",
        "FORMAT_VERSION_MIN",
        "INTENT_LOG_MAGIC",
        "LOG_BLOCK_HEADER_SIZE",
        "LOG_RECORD_HEADER_SIZE",
        "LOG_BLOCK_SIZE_MAX",
        "LOG_BLOCK_SIZE_MIN",
        "LOG_RECORD_PAYLOAD_MAX",
        "INTENT_LOG_LANES_MAX",
        "INTENT_LOG_HEADER_SIZE",
        "INTENT_LOG_HEADER_VERSION",
        "RAIDZ_PARITY_MAX",
        "RAIDZ_WIDTH_MAX",
    ] {
        assert!(
            code.contains_key(name),
            "{name} missing from code_constants()"
        );
    }
    assert!(
        [
            "Block pointer",
            "Uberblock",
            "Dnode",
            "Log block header",
            "Log record header",
            "Intent-log chain header",
        ]
        .iter()
        .all(|heading| structure_sizes().contains_key(heading))
    );
}

/// The rows of the table whose header starts with `header` in `doc`, as cells.
fn table_rows<'a>(doc: &'a str, header: &[&str]) -> Vec<Vec<&'a str>> {
    let lines = prose_lines(doc);
    let Some(start) = lines
        .iter()
        .position(|(_, line)| cells(line).starts_with(header))
    else {
        panic!("no table with header {header:?}");
    };
    lines[start + 2..]
        .iter()
        .take_while(|(_, line)| line.trim_start().starts_with('|'))
        .map(|(_, line)| cells(line))
        .collect()
}

fn number(cell: &str) -> u64 {
    doc_check::parse_number(cell).unwrap_or_else(|| panic!("{cell:?} is not a number"))
}

/// "RAID-Z layout"'s allocation examples are what `asize` and `map` compute.
#[test]
fn raidz_allocation_examples_match_the_code() {
    let doc = sections(&read_doc(), &["RAID-Z layout"]);
    let rows = table_rows(&doc, &["width", "parity", "ashift", "psize"]);
    assert!(rows.len() >= 3, "the allocation examples are there");
    for row in rows {
        let [
            width,
            parity,
            ashift,
            psize,
            data,
            depth,
            parity_sectors,
            skip,
            asize,
        ] = row.iter().map(|cell| number(cell)).collect::<Vec<_>>()[..]
        else {
            panic!("allocation example {row:?} has 9 numbers");
        };
        let geometry = RaidzGeometry::new(width as u32, parity as u8, ashift as u8).unwrap();
        let sector = 1u64 << ashift;
        let map = geometry.map(0, psize);
        let columns = map.columns();
        let data_sectors: u64 =
            columns[map.parity()..].iter().map(|c| c.size).sum::<u64>() / sector;
        let parity_total: u64 =
            columns[..map.parity()].iter().map(|c| c.size).sum::<u64>() / sector;
        assert_eq!(geometry.asize(psize), asize, "{row:?}: asize");
        assert_eq!(data_sectors, data, "{row:?}: data sectors");
        assert_eq!(
            map.column_buffer_bytes() as u64 / sector,
            depth,
            "{row:?}: rows"
        );
        assert_eq!(parity_total, parity_sectors, "{row:?}: parity sectors");
        assert_eq!(
            asize / sector - data - parity_sectors,
            skip,
            "{row:?}: skip sectors"
        );
    }
}

/// "RAID-Z layout"'s worked example is the code's map of that block, column by column.
#[test]
fn raidz_worked_example_matches_the_code() {
    let doc = sections(&read_doc(), &["RAID-Z layout"]);
    // The example's block, as the text states it.
    assert!(
        doc.contains(
            "The 20 KiB block (psize 20480) at vdev offset 40960 of a 6-wide raidz2 at\nashift 12"
        ),
        "the worked example names its block"
    );
    let geometry = RaidzGeometry::new(6, 2, 12).unwrap();
    let map = geometry.map(40960, 20480);
    let rows = table_rows(&doc, &["column", "vdev sector", "child", "child offset"]);
    assert_eq!(rows.len(), map.columns().len(), "one row per column");
    let names = ["P", "Q", "R"];
    for (index, (row, column)) in rows.iter().zip(map.columns()).enumerate() {
        let name = if index < map.parity() {
            names[index].to_string()
        } else {
            format!("data {}", index - map.parity())
        };
        assert_eq!(row[0], name, "column {index}");
        assert_eq!(
            number(row[1]),
            40960 / 4096 + index as u64,
            "{name}: vdev sector"
        );
        assert_eq!(number(row[2]), u64::from(column.child), "{name}: child");
        assert_eq!(number(row[3]), column.child_offset, "{name}: child offset");
        assert_eq!(number(row[4]), column.size, "{name}: size");
        let bytes = if index < map.parity() {
            "–".to_string()
        } else {
            let range = map.data_range(index - map.parity());
            format!("{} to {}", range.start, range.end)
        };
        assert_eq!(row[5], bytes, "{name}: block bytes");
    }
    assert!(doc.contains("`asize` = 36864"));
    assert_eq!(geometry.asize(20480), 36864);
}

/// The checkers themselves must catch the mistakes they exist for.
#[test]
fn checkers_reject_broken_documents() {
    let code = BTreeMap::from([("A_SIZE", 16u64), ("A_MAGIC", 0xabcd)]);
    let good = "- `A_SIZE` = 16. sixteen\n`A_MAGIC` = 0xab_cd\n";
    assert_eq!(check_constants(good, &code), Vec::<String>::new());
    assert_eq!(
        check_constants("`A_SIZE` = 17\n`A_MAGIC` = 43981\n", &code).len(),
        1
    );
    assert_eq!(
        check_constants(&format!("{good}`B_SIZE` = 1\n"), &code).len(),
        1
    );
    assert_eq!(check_constants("`A_SIZE` = 16\n", &code).len(), 1);
    assert_eq!(
        check_constants(&format!("{good}`A_SIZE` = 16K\n"), &code).len(),
        2
    );
    assert_eq!(
        check_constants(&format!("```\n`X` = 1\n```\n{good}"), &code),
        Vec::<String>::new()
    );

    let sizes = BTreeMap::from([("Thing", 16u64)]);
    let table = |rows: &str| {
        format!(
            "## Thing\n\n| offset | size | field | meaning |\n|---|---|---|---|\n{rows}\ntext\n"
        )
    };
    let good = table("| 0 | 8 | a | x |\n| 8 | 8 | b | y |");
    assert_eq!(check_tables(&good, &sizes), Vec::<String>::new());
    // A gap, an overlap, a short table, a non-numeric size.
    assert!(!check_tables(&table("| 0 | 8 | a | x |\n| 9 | 7 | b | y |"), &sizes).is_empty());
    assert!(!check_tables(&table("| 0 | 8 | a | x |\n| 4 | 12 | b | y |"), &sizes).is_empty());
    assert!(!check_tables(&table("| 0 | 8 | a | x |\n| 8 | 4 | b | y |"), &sizes).is_empty());
    assert!(!check_tables(&table("| 0 | 8 | a | x |\n| 8 | n | b | y |"), &sizes).is_empty());
    // The table must exist.
    assert!(!check_tables("## Thing\n\nno table\n", &sizes).is_empty());

    // Sections include their subsections and end at the next heading of their level or
    // above; a `#` line inside a code fence is no heading.
    let doc = "# T\n## A\na\n### A1\na1\n```\n# not\n```\nstill\n## B\nb\n";
    assert_eq!(
        sections(doc, &["A"]),
        "\n## A\na\n### A1\na1\n```\n# not\n```\nstill\n\n\n"
    );
    assert_eq!(
        without_sections(doc, &["A1"]),
        "# T\n## A\na\n\n\n\n\n\n\n## B\nb\n"
    );
}
