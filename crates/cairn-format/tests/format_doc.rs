//! Keeps `docs/format.md` honest.
//!
//! 1. Each line of the form `` `NAME` = value `` (optionally a list item, value in decimal or
//!    `0x` hex with `_` separators) must name a constant known to `code_constants()` and carry its
//!    value. Every constant in that table must be documented, and none may appear twice.
//! 2. Every `| offset | size | field | meaning |` table must be contiguous: it starts at offset 0
//!    and each row starts where the previous one ends. A table under one of the headings in
//!    `structure_sizes()` must end exactly at that structure's size, and each of those headings
//!    must have exactly one such table.

use cairn_format::{blkptr, dnode, intent_log, label, spacelog, uberblock};
use std::collections::BTreeMap;
use std::path::Path;

const DOC_PATH: &str = "../../docs/format.md";

/// Size of one DVA: `DVA_COUNT_MAX` of them fill bytes [0, 48) of a block pointer. There is no
/// public constant for it; the block pointer table below checks the 48 independently.
const DVA_SIZE: u64 = 16;

/// Size of one lane entry of the intent-log chain header. There is no public constant for it;
/// the chain header table checks independently that `INTENT_LOG_LANES_MAX` entries of 32 bytes,
/// the 16-byte preamble and the spare bytes add up to `INTENT_LOG_HEADER_SIZE`.
const INTENT_LOG_LANE_SIZE: u64 = 32;

/// Every constant the document may state, with the code's value.
fn code_constants() -> BTreeMap<&'static str, u64> {
    macro_rules! constants {
        ($($module:ident :: $name:ident),* $(,)?) => {
            BTreeMap::from([$((stringify!($name), $module::$name as u64)),*])
        };
    }
    constants![
        cairn_format::FORMAT_VERSION,
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
    ])
}

fn read_doc() -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(DOC_PATH);
    std::fs::read_to_string(&path)
        .unwrap_or_else(|err| panic!("cannot read {}: {err}", path.display()))
}

/// Decimal or `0x` hex, `_` separators allowed.
fn parse_number(text: &str) -> Option<u64> {
    let digits: String = text.chars().filter(|&c| c != '_').collect();
    match digits
        .strip_prefix("0x")
        .or_else(|| digits.strip_prefix("0X"))
    {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => digits.parse().ok(),
    }
}

/// Lines outside fenced code blocks, numbered from 1.
fn prose_lines(doc: &str) -> Vec<(usize, &str)> {
    let mut in_fence = false;
    let mut out = Vec::new();
    for (index, line) in doc.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            in_fence = !in_fence;
            continue;
        }
        if !in_fence {
            out.push((index + 1, line));
        }
    }
    out
}

/// `(line, name, value text)` for every `` `NAME` = value `` line.
fn constant_lines(doc: &str) -> Vec<(usize, String, String)> {
    let mut found = Vec::new();
    for (number, line) in prose_lines(doc) {
        let text = line.trim();
        let text = text
            .strip_prefix("- ")
            .or_else(|| text.strip_prefix("* "))
            .unwrap_or(text);
        let Some(rest) = text.strip_prefix('`') else {
            continue;
        };
        let Some((name, rest)) = rest.split_once('`') else {
            continue;
        };
        let is_constant_name = !name.is_empty()
            && name.starts_with(|c: char| c.is_ascii_uppercase())
            && name
                .chars()
                .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_');
        let Some(rest) = rest.trim_start().strip_prefix('=') else {
            continue;
        };
        if !is_constant_name {
            continue;
        }
        let token = rest.split_whitespace().next().unwrap_or("");
        // A sentence may continue after the value: "`X` = 1. More text."
        let token = token.trim_end_matches(['.', ',', ';', ':']);
        found.push((number, name.to_string(), token.to_string()));
    }
    found
}

/// Problems with the documented constants; empty if the document agrees with the code.
fn check_constants(doc: &str, code: &BTreeMap<&str, u64>) -> Vec<String> {
    let mut problems = Vec::new();
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    for (line, name, value_text) in constant_lines(doc) {
        if let Some(first) = seen.insert(name.clone(), line) {
            problems.push(format!(
                "line {line}: `{name}` is documented twice (first on line {first})"
            ));
        }
        let Some(value) = parse_number(&value_text) else {
            problems.push(format!(
                "line {line}: `{name}` = {value_text:?} is not a decimal or 0x-hex integer"
            ));
            continue;
        };
        match code.get(name.as_str()) {
            None => problems.push(format!(
                "line {line}: `{name}` is not a constant the test knows; add it to \
                 code_constants() in tests/format_doc.rs"
            )),
            Some(&expected) if expected != value => problems.push(format!(
                "line {line}: `{name}` = {value} ({value:#x}) but the code has {expected} \
                 ({expected:#x})"
            )),
            Some(_) => {}
        }
    }
    for name in code.keys() {
        if !seen.contains_key(*name) {
            problems.push(format!(
                "`{name}` is not documented (expected a line `{name}` = value)"
            ));
        }
    }
    problems
}

#[derive(Debug)]
struct OffsetTable {
    heading: String,
    line: usize,
    /// `(line, offset, size, field)`
    rows: Vec<(usize, u64, u64, String)>,
}

fn cells(line: &str) -> Vec<&str> {
    let line = line.trim();
    let line = line.strip_prefix('|').unwrap_or(line);
    let line = line.strip_suffix('|').unwrap_or(line);
    line.split('|').map(str::trim).collect()
}

/// Every `| offset | size | field | meaning |` table with the heading it sits under.
fn offset_tables(doc: &str, problems: &mut Vec<String>) -> Vec<OffsetTable> {
    let lines = prose_lines(doc);
    let mut tables = Vec::new();
    let mut heading = String::new();
    let mut index = 0;
    while index < lines.len() {
        let (number, line) = lines[index];
        index += 1;
        if line.starts_with('#') {
            heading = line.trim_start_matches('#').trim().to_string();
            continue;
        }
        if !line.trim_start().starts_with('|')
            || cells(line) != ["offset", "size", "field", "meaning"]
        {
            continue;
        }
        let mut table = OffsetTable {
            heading: heading.clone(),
            line: number,
            rows: Vec::new(),
        };
        let separator_ok = lines.get(index).is_some_and(|(_, sep)| {
            cells(sep)
                .iter()
                .all(|cell| !cell.is_empty() && cell.chars().all(|c| matches!(c, '-' | ':')))
        });
        if !separator_ok {
            problems.push(format!(
                "line {number}: offset table has no |---| separator row"
            ));
        }
        index += 1;
        while let Some(&(row_number, row)) = lines.get(index) {
            if !row.trim_start().starts_with('|') {
                break;
            }
            index += 1;
            let row_cells = cells(row);
            let parsed = (
                row_cells.first().and_then(|text| parse_number(text)),
                row_cells.get(1).and_then(|text| parse_number(text)),
            );
            match parsed {
                (Some(offset), Some(size)) => table.rows.push((
                    row_number,
                    offset,
                    size,
                    row_cells.get(2).unwrap_or(&"").to_string(),
                )),
                _ => problems.push(format!(
                    "line {row_number}: offset and size must be integers: {row:?}"
                )),
            }
        }
        tables.push(table);
    }
    tables
}

/// Problems with the layout tables; empty if they are all consistent.
fn check_tables(doc: &str, sizes: &BTreeMap<&str, u64>) -> Vec<String> {
    let mut problems = Vec::new();
    let tables = offset_tables(doc, &mut problems);
    for table in &tables {
        let OffsetTable { heading, line, .. } = table;
        if table.rows.is_empty() {
            problems.push(format!(
                "line {line}: table under \"{heading}\" has no rows"
            ));
            continue;
        }
        let mut end = 0u64;
        for (row_line, offset, size, field) in &table.rows {
            if *offset != end {
                problems.push(format!(
                    "line {row_line}: \"{heading}\" field `{field}` starts at {offset}, but the \
                     previous row ends at {end}"
                ));
            }
            if *size == 0 {
                problems.push(format!(
                    "line {row_line}: \"{heading}\" field `{field}` has size 0"
                ));
            }
            end = offset.saturating_add(*size);
        }
        match sizes.get(heading.as_str()) {
            Some(&expected) if end != expected => problems.push(format!(
                "line {line}: \"{heading}\" table ends at {end} but the structure is {expected} \
                 bytes"
            )),
            Some(_) => {}
            None => problems.push(format!(
                "line {line}: offset table under unknown heading \"{heading}\"; add its size to \
                 structure_sizes() in tests/format_doc.rs"
            )),
        }
    }
    for heading in sizes.keys() {
        let count = tables.iter().filter(|t| t.heading == *heading).count();
        if count != 1 {
            problems.push(format!(
                "expected exactly one offset table under heading \"{heading}\", found {count}"
            ));
        }
    }
    problems
}

fn assert_no_problems(what: &str, problems: &[String]) {
    assert!(
        problems.is_empty(),
        "docs/format.md disagrees with cairn-format ({what}):\n  {}",
        problems.join("\n  ")
    );
}

#[test]
fn documented_constants_match_the_code() {
    let doc = read_doc();
    assert_no_problems("constants", &check_constants(&doc, &code_constants()));
}

#[test]
fn layout_tables_are_contiguous_and_sized() {
    let doc = read_doc();
    assert_no_problems("layout tables", &check_tables(&doc, &structure_sizes()));
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
        "INTENT_LOG_MAGIC",
        "LOG_BLOCK_HEADER_SIZE",
        "LOG_RECORD_HEADER_SIZE",
        "LOG_BLOCK_SIZE_MAX",
        "LOG_BLOCK_SIZE_MIN",
        "LOG_RECORD_PAYLOAD_MAX",
        "INTENT_LOG_LANES_MAX",
        "INTENT_LOG_HEADER_SIZE",
        "INTENT_LOG_HEADER_VERSION",
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
}
