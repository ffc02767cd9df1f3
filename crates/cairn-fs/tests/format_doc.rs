//! Keeps the "Filesystems" section of `docs/format.md` honest, with the parser the pool's own
//! test uses (`cairn-format/tests/doc_check/`, included by path):
//!
//! 1. every `` `NAME` = value `` line of the section names a constant of cairn-fs, or of the
//!    hashed map its directories are (`cairn_object::map`), with that value, and every constant
//!    of `code_constants()` is documented there once;
//! 2. every `| offset | size | field | meaning |` table is contiguous, ends at the size of its
//!    structure as the code's encoders produce it (`structure_sizes()`), and each of those
//!    headings has exactly one table;
//! 3. the log-record tag table lists exactly the tags `FsOp::encode` writes, each with its
//!    change.

#[path = "../../cairn-format/tests/doc_check/mod.rs"]
mod doc_check;

use cairn_fs::attrs::{self, FileKind, InodeAttrs, Timestamp};
use cairn_fs::log::FsOp;
use cairn_fs::{Fallocate, RenameMode, SetAttrs, XattrMode, raw};
use cairn_object::map::{self, Entry, ValueKind};
use doc_check::{
    assert_no_problems, check_constants, check_tables, read_doc, sections, tables_with_header,
};
use std::collections::BTreeMap;

/// The section cairn-fs owns.
const SECTION: &str = "Filesystems";

fn fs_section() -> String {
    sections(&read_doc(), &[SECTION])
}

/// Every constant the section may state, with the code's value.
fn code_constants() -> BTreeMap<&'static str, u64> {
    doc_check::code_constants![
        cairn_fs::MASTER_OBJECT,
        cairn_fs::ROOT_OBJECT,
        cairn_fs::DELETE_QUEUE_OBJECT,
        cairn_fs::MASTER_VERSION,
        cairn_fs::XATTR_VALUE_BYTES_MAX,
        attrs::ATTRS_BYTES,
        attrs::ATTRS_VERSION,
        map::MAP_BLOCK_BYTES,
        map::MAP_VERSION,
        map::DEPTH_MAX,
        map::INLINE_DEPTH_MAX,
        map::TABLE_START_BLKID,
        map::EMBEDDED_LEAF_OFFSET,
        map::NAME_BYTES_MAX,
        map::VALUE_BYTES_MAX,
        map::VALUE_INDIRECT_BIT,
    ]
}

fn time(secs: i64) -> Timestamp {
    Timestamp { secs, nanos: 7 }
}

fn sample_attrs() -> InodeAttrs {
    InodeAttrs {
        kind: FileKind::File,
        mode: 0o644,
        uid: 1,
        gid: 2,
        links: 1,
        size: 3,
        atime: time(4),
        mtime: time(5),
        ctime: time(6),
        crtime: time(7),
        generation: 8,
        parent: 2,
        rdev: 0,
        xattr_object: 0,
    }
}

fn entry(name: &[u8], value: &[u8]) -> Entry {
    Entry {
        key: 1 << 8,
        name: name.to_vec(),
        value: value.to_vec(),
        kind: ValueKind::Inline,
    }
}

/// Headings whose layout table must end exactly at the structure's size, each measured from
/// the bytes the code writes (or, for the map header's fixed part, the constant its decoder
/// and encoder use).
fn structure_sizes() -> BTreeMap<&'static str, u64> {
    let empty_leaf = raw::encode_leaf(0, &[]).len();
    let one_entry_leaf = raw::encode_leaf(0, &[entry(b"", b"")]).len();
    BTreeMap::from([
        ("Master node", raw::master_bonus().len() as u64),
        ("Inode attributes", sample_attrs().encode().len() as u64),
        ("Map header", map::HEADER_FIXED_BYTES as u64),
        ("Map leaf header", empty_leaf as u64),
        // An entry with an empty name and value is its fixed part alone.
        ("Map entry", (one_entry_leaf - empty_leaf) as u64),
        (
            "Directory entry value",
            raw::encode_entry_value(16, FileKind::Directory).len() as u64,
        ),
    ])
}

/// The variant name of a change, as the tag table spells it. The match is exhaustive, so a
/// new variant fails to compile here until it is given a sample below and a row in the doc.
fn change_name(op: &FsOp) -> &'static str {
    match op {
        FsOp::Create { .. } => "Create",
        FsOp::Link { .. } => "Link",
        FsOp::Remove { .. } => "Remove",
        FsOp::Rename { .. } => "Rename",
        FsOp::SetAttrs { .. } => "SetAttrs",
        FsOp::SetXattr { .. } => "SetXattr",
        FsOp::RemoveXattr { .. } => "RemoveXattr",
        FsOp::Fallocate { .. } => "Fallocate",
    }
}

/// One change of every variant, and of both encodings of `SetXattr`.
fn sample_ops() -> Vec<FsOp> {
    let set_xattr = |value_object| FsOp::SetXattr {
        object: 16,
        map_object: 17,
        value_object,
        name: b"user.a".to_vec(),
        value: b"v".to_vec(),
        mode: XattrMode::Any,
        time: time(1),
    };
    vec![
        FsOp::Create {
            dir: 2,
            name: b"f".to_vec(),
            object: 16,
            kind: FileKind::File,
            mode: 0o644,
            uid: 0,
            gid: 0,
            rdev: 0,
            time: time(1),
            target: Vec::new(),
        },
        FsOp::Link {
            object: 16,
            dir: 2,
            name: b"g".to_vec(),
            time: time(1),
        },
        FsOp::Remove {
            dir: 2,
            name: b"g".to_vec(),
            directory: false,
            time: time(1),
        },
        FsOp::Rename {
            old_dir: 2,
            old_name: b"f".to_vec(),
            new_dir: 2,
            new_name: b"h".to_vec(),
            mode: RenameMode::NoReplace,
            time: time(1),
        },
        FsOp::SetAttrs {
            object: 16,
            changes: SetAttrs {
                mode: Some(0o600),
                ..SetAttrs::default()
            },
            time: time(1),
        },
        set_xattr(0),
        set_xattr(18),
        FsOp::RemoveXattr {
            object: 16,
            name: b"user.a".to_vec(),
            time: time(1),
        },
        FsOp::Fallocate {
            object: 16,
            offset: 0,
            len: 4096,
            op: Fallocate::PunchHole,
            time: time(1),
        },
    ]
}

/// Problems with the tag table: it must list exactly the (tag, change) pairs the code writes.
fn check_log_tags(doc: &str) -> Vec<String> {
    let mut problems = Vec::new();
    let mut code = BTreeMap::new();
    for op in sample_ops() {
        let encoded = op.encode();
        assert_eq!(FsOp::decode(&encoded).ok(), Some(op.clone()));
        code.insert(u64::from(encoded[0]), change_name(&op).to_string());
    }
    let tables = tables_with_header(doc, &["tag", "change", "fields after the tag"]);
    if tables.len() != 1 {
        problems.push(format!("expected one tag table, found {}", tables.len()));
    }
    let mut documented = BTreeMap::new();
    for table in &tables {
        for (line, row) in &table.rows {
            let tag = row.first().and_then(|text| doc_check::parse_number(text));
            let change = row.get(1).map(|text| text.trim_matches('`').to_string());
            match (tag, change) {
                (Some(tag), Some(change)) => {
                    if documented.insert(tag, change).is_some() {
                        problems.push(format!("line {line}: tag {tag} is listed twice"));
                    }
                }
                _ => problems.push(format!("line {line}: not a tag row: {row:?}")),
            }
        }
    }
    if documented != code {
        problems.push(format!(
            "the tag table lists {documented:?} but FsOp::encode writes {code:?}"
        ));
    }
    problems
}

#[test]
fn documented_constants_match_the_code() {
    assert_no_problems(
        "cairn-fs",
        "constants",
        &check_constants(&fs_section(), &code_constants()),
    );
}

#[test]
fn layout_tables_are_contiguous_and_sized() {
    assert_no_problems(
        "cairn-fs",
        "layout tables",
        &check_tables(&fs_section(), &structure_sizes()),
    );
}

#[test]
fn log_record_tags_match_the_encoder() {
    assert_no_problems(
        "cairn-fs",
        "log record tags",
        &check_log_tags(&fs_section()),
    );
}

/// The measured sizes are the ones the code's constants promise, so the tables above check the
/// layouts the filesystem actually reads.
#[test]
fn measured_sizes_agree_with_the_constants() {
    let sizes = structure_sizes();
    assert_eq!(sizes["Inode attributes"], attrs::ATTRS_BYTES as u64);
    assert!(sizes["Map header"] + 8 <= map::EMBEDDED_LEAF_OFFSET as u64);
}
