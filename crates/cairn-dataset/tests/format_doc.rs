//! Keeps the "Dataset directory" section of `docs/format.md` honest, with the parser the
//! pool's own test uses (`cairn-format/tests/doc_check/`, included by path):
//!
//! 1. every `` `NAME` = value `` line of the section names a cairn-dataset constant with that
//!    value, and every constant of `code_constants()` is documented there once;
//! 2. the section has no byte-offset tables (records are postcard bodies: their layout is
//!    the order of their fields); its one `| field | type | meaning |` table lists exactly the
//!    fields of the pool-wide record (`PoolRecord`), in declaration order, which is postcard's
//!    order; and its one `| tag | id | record |` table lists exactly the record kinds
//!    (`DirectoryKey`), each with the tag byte the code writes.

#[path = "../../cairn-format/tests/doc_check/mod.rs"]
mod doc_check;

use cairn_dataset::deadlist::DEADLIST_BLOCK_BYTES;
use cairn_dataset::directory::{HISTORY_ENTRIES_MAX, MISSED_TXGS_VERSION};
use cairn_dataset::directory_records::{DIRECTORY_RECORD_VERSION, DirectoryKey, PoolRecord};
use cairn_dataset::snapshots::SNAPSHOT_RECORD_VERSION;
use doc_check::{
    assert_no_problems, check_constants, check_tables, read_doc, sections, tables_with_header,
};
use std::collections::BTreeMap;

/// The section cairn-dataset owns.
const SECTION: &str = "Dataset directory";
/// The snapshot table's section, also cairn-dataset's.
const SNAPSHOT_SECTION: &str = "Snapshots";

fn directory_section() -> String {
    sections(&read_doc(), &[SECTION])
}

fn snapshot_section() -> String {
    sections(&read_doc(), &[SNAPSHOT_SECTION])
}

/// Every constant the section may state, with the code's value.
fn code_constants() -> BTreeMap<&'static str, u64> {
    BTreeMap::from([
        ("MISSED_TXGS_VERSION", u64::from(MISSED_TXGS_VERSION)),
        ("HISTORY_ENTRIES_MAX", HISTORY_ENTRIES_MAX as u64),
        (
            "DIRECTORY_RECORD_VERSION",
            u64::from(DIRECTORY_RECORD_VERSION),
        ),
    ])
}

/// `PoolRecord`'s fields in declaration order. The pattern names every field without `..`,
/// so adding or removing one fails to compile until this list (and then the document)
/// follows; the order is written here by hand, in the order of the struct's declaration.
fn directory_fields() -> Vec<&'static str> {
    let PoolRecord {
        next_id: _,
        leaf_errors: _,
        resilver: _,
        missed_txgs: _,
    } = PoolRecord {
        next_id: 0,
        leaf_errors: BTreeMap::new(),
        resilver: None,
        missed_txgs: Default::default(),
    };
    vec!["next_id", "leaf_errors", "resilver", "missed_txgs"]
}

/// Every record kind with the tag its key starts with, in the order of the enum. The match
/// names every variant, so a new kind fails to compile until it is listed (and documented).
fn record_tags() -> Vec<String> {
    let kinds = [
        DirectoryKey::Dataset(1),
        DirectoryKey::Pool,
        DirectoryKey::Scrub,
        DirectoryKey::History(1),
    ];
    kinds
        .iter()
        .map(|key| match key {
            DirectoryKey::Dataset(_)
            | DirectoryKey::Pool
            | DirectoryKey::Scrub
            | DirectoryKey::History(_) => format!("`{}`", key.encode()[0] as char),
        })
        .collect()
}

/// Problems with the table under `header`: there must be exactly one, whose first column
/// lists `expected` in order (`what` names the code's side in the message).
fn check_first_column(
    doc: &str,
    header: &[&str],
    expected: Vec<String>,
    what: &str,
) -> Vec<String> {
    let tables = tables_with_header(doc, header);
    if tables.len() != 1 {
        return vec![format!(
            "expected one `| {} |` table, found {}",
            header.join(" | "),
            tables.len()
        )];
    }
    let documented: Vec<String> = tables[0]
        .rows
        .iter()
        .map(|(_, row)| row.first().cloned().unwrap_or_default())
        .collect();
    if documented != expected {
        return vec![format!(
            "line {}: the table lists {documented:?} but {what} {expected:?}",
            tables[0].line
        )];
    }
    Vec::new()
}

/// Problems with the record table: there must be exactly one, listing `record_tags()`.
fn check_record_tags(doc: &str) -> Vec<String> {
    check_first_column(
        doc,
        &["tag", "id", "record"],
        record_tags(),
        "the code's tags are",
    )
}

/// Problems with the field table: there must be exactly one, listing `directory_fields()`.
fn check_fields(doc: &str) -> Vec<String> {
    check_first_column(
        doc,
        &["field", "type", "meaning"],
        directory_fields().into_iter().map(String::from).collect(),
        "PoolRecord has",
    )
}

#[test]
fn documented_constants_match_the_code() {
    assert_no_problems(
        "cairn-dataset",
        "constants",
        &check_constants(&directory_section(), &code_constants()),
    );
}

#[test]
fn snapshot_constants_match_the_code() {
    let constants = BTreeMap::from([
        (
            "SNAPSHOT_RECORD_VERSION",
            u64::from(SNAPSHOT_RECORD_VERSION),
        ),
        ("DEADLIST_BLOCK_BYTES", u64::from(DEADLIST_BLOCK_BYTES)),
    ]);
    assert_no_problems(
        "cairn-dataset",
        "snapshot constants",
        &check_constants(&snapshot_section(), &constants),
    );
}

#[test]
fn directory_fields_are_documented_in_order() {
    assert_no_problems(
        "cairn-dataset",
        "directory fields",
        &check_fields(&directory_section()),
    );
}

#[test]
fn record_tags_are_documented_in_order() {
    assert_no_problems(
        "cairn-dataset",
        "directory record tags",
        &check_record_tags(&directory_section()),
    );
}

#[test]
fn section_has_no_offset_tables() {
    // No sizes: any offset table found is reported under an unknown heading.
    assert_no_problems(
        "cairn-dataset",
        "layout tables",
        &check_tables(&directory_section(), &BTreeMap::new()),
    );
}
