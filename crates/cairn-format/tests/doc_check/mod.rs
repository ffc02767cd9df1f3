//! The parsing and checking half of the `docs/format.md` tests, shared by every crate that
//! owns a section of the document (`cairn-format`, `cairn-dataset`, `cairn-fs`,
//! `cairn-l2arc`). It lives here, under `cairn-format/tests/`, because that is the bottom crate;
//! the others include this very file with `#[path = "../../cairn-format/tests/doc_check/mod.rs"]
//! mod doc_check;`, so there is one parser and no crate depends on another for it. (A
//! subdirectory of `tests/` is not a test target of its own.)
//!
//! Each crate checks only its own sections: `sections` keeps the lines under the headings it
//! owns (blanking the rest, so line numbers in messages stay those of the file), and the
//! pool's test checks everything else with `without_sections`.

// Each including test uses a different subset of these helpers.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::Path;

/// `code_constants![module::NAME, ...]`: a map from each constant's name to the code's value,
/// what a test's constant table compares the document's `` `NAME` = value `` lines with.
#[allow(unused_macros)]
macro_rules! code_constants {
    ($($module:ident :: $name:ident),* $(,)?) => {
        std::collections::BTreeMap::from([$((stringify!($name), $module::$name as u64)),*])
    };
}
#[allow(unused_imports)]
pub(crate) use code_constants;

const DOC_PATH: &str = "../../docs/format.md";

/// `docs/format.md`, read from the including crate's manifest directory (every crate lives at
/// `crates/NAME`).
pub fn read_doc() -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(DOC_PATH);
    std::fs::read_to_string(&path)
        .unwrap_or_else(|err| panic!("cannot read {}: {err}", path.display()))
}

/// Decimal or `0x` hex, `_` separators allowed.
pub fn parse_number(text: &str) -> Option<u64> {
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
pub fn prose_lines(doc: &str) -> Vec<(usize, &str)> {
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
pub fn constant_lines(doc: &str) -> Vec<(usize, String, String)> {
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
pub fn check_constants(doc: &str, code: &BTreeMap<&str, u64>) -> Vec<String> {
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
                 code_constants() in the owning crate's tests/format_doc.rs"
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
pub struct OffsetTable {
    pub heading: String,
    pub line: usize,
    /// `(line, offset, size, field)`
    pub rows: Vec<(usize, u64, u64, String)>,
}

pub fn cells(line: &str) -> Vec<&str> {
    let line = line.trim();
    let line = line.strip_prefix('|').unwrap_or(line);
    let line = line.strip_suffix('|').unwrap_or(line);
    line.split('|').map(str::trim).collect()
}

/// Every `| offset | size | field | meaning |` table with the heading it sits under.
pub fn offset_tables(doc: &str, problems: &mut Vec<String>) -> Vec<OffsetTable> {
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
pub fn check_tables(doc: &str, sizes: &BTreeMap<&str, u64>) -> Vec<String> {
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
                "line {line}: offset table under unknown heading \"{heading}\"; add its size \
                 to structure_sizes() in the owning crate's tests/format_doc.rs"
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

/// Heading level and title of a Markdown heading line, if it is one.
fn heading(line: &str) -> Option<(usize, &str)> {
    let level = line.chars().take_while(|&c| c == '#').count();
    let title = line[level..].strip_prefix(' ')?;
    (level > 0).then_some((level, title.trim()))
}

/// The document with every line outside (`keep` = true) or inside (`keep` = false) the sections
/// titled `titles` blanked. A section runs from its heading to the next heading of the same or
/// a higher level, so it includes its subsections; headings inside code fences do not count.
fn select(doc: &str, titles: &[&str], keep: bool) -> String {
    let mut out = String::with_capacity(doc.len());
    let mut in_fence = false;
    // Level of the selected section the current line is in.
    let mut inside: Option<usize> = None;
    for line in doc.lines() {
        if line.trim_start().starts_with("```") {
            in_fence = !in_fence;
        }
        if !in_fence && let Some((level, title)) = heading(line) {
            if inside.is_some_and(|open| level <= open) {
                inside = None;
            }
            if inside.is_none() && titles.contains(&title) {
                inside = Some(level);
            }
        }
        if inside.is_some() == keep {
            out.push_str(line);
        }
        out.push('\n');
    }
    out
}

/// Only the sections titled `titles` (and their subsections); other lines blank.
pub fn sections(doc: &str, titles: &[&str]) -> String {
    select(doc, titles, true)
}

/// Everything but the sections titled `titles` (and their subsections).
pub fn without_sections(doc: &str, titles: &[&str]) -> String {
    select(doc, titles, false)
}

/// A table other than an offset table (postcard field lists, tag lists).
pub struct TextTable {
    /// The heading it sits under.
    pub heading: String,
    /// Line of its header row.
    pub line: usize,
    /// `(line, cells)` of each row.
    pub rows: Vec<(usize, Vec<String>)>,
}

/// Every table whose header row is exactly `header`.
pub fn tables_with_header(doc: &str, header: &[&str]) -> Vec<TextTable> {
    let lines = prose_lines(doc);
    let mut tables = Vec::new();
    let mut current = String::new();
    let mut index = 0;
    while index < lines.len() {
        let (number, line) = lines[index];
        index += 1;
        if let Some((_, title)) = heading(line) {
            current = title.to_string();
            continue;
        }
        if !line.trim_start().starts_with('|') || cells(line) != header {
            continue;
        }
        // Skip the |---| separator row.
        index += 1;
        let mut rows = Vec::new();
        while let Some(&(row_number, row)) = lines.get(index) {
            if !row.trim_start().starts_with('|') {
                break;
            }
            index += 1;
            rows.push((
                row_number,
                cells(row).into_iter().map(str::to_string).collect(),
            ));
        }
        tables.push(TextTable {
            heading: current.clone(),
            line: number,
            rows,
        });
    }
    tables
}

/// Fails with every problem listed, naming the crate whose sections were checked.
pub fn assert_no_problems(owner: &str, what: &str, problems: &[String]) {
    assert!(
        problems.is_empty(),
        "docs/format.md disagrees with {owner} ({what}):\n  {}",
        problems.join("\n  ")
    );
}
