//! Keeps the crate list of `docs/ARCHITECTURE.md` true to the workspace.
//!
//! 1. Every crate under `crates/` is drawn in the bird's-eye diagram (the first fenced block
//!    after "## Bird's-eye view"), by its bare name: code spans in the block do not count, so a
//!    crate named only in passing (`cairn serve`) is still missing. A crate the codemap mentions
//!    but the diagram lacks is how the map drifted before.
//! 2. Every crate the document names anywhere (`cairn-x`, or a path `cairn_x::…`) exists under
//!    `crates/`.
//!
//! This lives beside `format_doc.rs`, the other check of a document against the code.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

const DOC_PATH: &str = "../../docs/ARCHITECTURE.md";
const CRATES_PATH: &str = "../../crates";
const DIAGRAM_HEADING: &str = "## Bird's-eye view";

fn repository_path(relative: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(relative)
}

fn read_doc() -> String {
    let path = repository_path(DOC_PATH);
    std::fs::read_to_string(&path)
        .unwrap_or_else(|err| panic!("cannot read {}: {err}", path.display()))
}

/// The crates of the workspace: each directory under `crates/` with a `Cargo.toml`, whose
/// package name must be the directory's (the document names crates by package and points at
/// their files by directory).
fn workspace_crates() -> BTreeSet<String> {
    let dir = repository_path(CRATES_PATH);
    let entries = std::fs::read_dir(&dir)
        .unwrap_or_else(|err| panic!("cannot list {}: {err}", dir.display()));
    let mut crates = BTreeSet::new();
    for entry in entries {
        let path = entry.expect("a directory entry").path();
        let manifest = path.join("Cargo.toml");
        if !manifest.is_file() {
            continue;
        }
        let name = path
            .file_name()
            .and_then(|name| name.to_str())
            .expect("a UTF-8 directory name")
            .to_string();
        let text = std::fs::read_to_string(&manifest)
            .unwrap_or_else(|err| panic!("cannot read {}: {err}", manifest.display()));
        let package = text
            .lines()
            .find_map(|line| line.trim().strip_prefix("name = \""))
            .and_then(|rest| rest.strip_suffix('"'))
            .unwrap_or_else(|| panic!("{} names no package", manifest.display()));
        assert_eq!(package, name, "crates/{name} holds package {package}");
        crates.insert(name);
    }
    assert!(!crates.is_empty(), "no crates under {}", dir.display());
    crates
}

fn is_word_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == '-'
}

/// Words of `text`: maximal runs of ASCII letters, digits, `_` and `-`.
fn words(text: &str) -> impl Iterator<Item = &str> {
    text.split(|c: char| !is_word_char(c))
        .filter(|word| !word.is_empty())
}

/// `text` without its `` `code spans` ``.
fn without_code_spans(text: &str) -> String {
    text.split('`').step_by(2).collect::<Vec<_>>().join(" ")
}

/// The lines of the first fenced block after the diagram's heading, or `None`.
fn diagram(doc: &str) -> Option<String> {
    let after_heading = &doc[doc.find(DIAGRAM_HEADING)? + DIAGRAM_HEADING.len()..];
    let mut lines = after_heading
        .lines()
        .skip_while(|line| !line.trim_start().starts_with("```"))
        .skip(1);
    let mut block = String::new();
    for line in lines.by_ref() {
        if line.trim_start().starts_with("```") {
            return Some(block);
        }
        block.push_str(line);
        block.push('\n');
    }
    None
}

/// Crates of the workspace the diagram does not draw.
fn missing_from_diagram(doc: &str, crates: &BTreeSet<String>) -> Vec<String> {
    let Some(block) = diagram(doc) else {
        return vec![format!("no fenced diagram after \"{DIAGRAM_HEADING}\"")];
    };
    let block = without_code_spans(&block);
    let drawn: BTreeSet<&str> = words(&block).collect();
    crates
        .iter()
        .filter(|name| !drawn.contains(name.as_str()))
        .map(|name| format!("crates/{name} is not in the bird's-eye diagram"))
        .collect()
}

/// Crate names the document uses that no directory under `crates/` holds.
fn unknown_names(doc: &str, crates: &BTreeSet<String>) -> Vec<String> {
    let mut named = BTreeSet::new();
    for word in words(doc) {
        if word.starts_with("cairn-") {
            named.insert(word.trim_end_matches('-').to_string());
        }
    }
    // Rust paths name a crate with underscores: `cairn_metrics::events`.
    for (index, _) in doc.match_indices("::") {
        let before = &doc[..index];
        let start = before
            .rfind(|c: char| !is_word_char(c))
            .map_or(0, |at| at + 1);
        if before[start..].starts_with("cairn_") {
            named.insert(before[start..].replace('_', "-"));
        }
    }
    named
        .into_iter()
        .filter(|name| !crates.contains(name))
        .map(|name| format!("{name} is named but is not under crates/"))
        .collect()
}

fn assert_no_problems(problems: &[String]) {
    assert!(
        problems.is_empty(),
        "docs/ARCHITECTURE.md disagrees with crates/:\n  {}",
        problems.join("\n  ")
    );
}

#[test]
fn every_crate_is_in_the_diagram() {
    assert_no_problems(&missing_from_diagram(&read_doc(), &workspace_crates()));
}

#[test]
fn every_crate_named_exists() {
    assert_no_problems(&unknown_names(&read_doc(), &workspace_crates()));
}

/// The checkers themselves must catch the mistakes they exist for.
#[test]
fn checkers_reject_broken_documents() {
    let crates: BTreeSet<String> = ["cairn", "cairn-a", "cairn-b"].map(String::from).into();
    let doc = |diagram: &str, prose: &str| {
        format!("# x\n\n{DIAGRAM_HEADING}\n\n```\n{diagram}```\n\n{prose}\n")
    };
    let good = doc(
        " cairn (CLI)  `cairn serve`\n cairn-a      a\n   │\n cairn-b      b\n",
        "`cairn-a/src/lib.rs`, `cairn_b::Thing`, `cairn_b_total`",
    );
    assert_eq!(missing_from_diagram(&good, &crates), Vec::<String>::new());
    assert_eq!(unknown_names(&good, &crates), Vec::<String>::new());

    // A crate only in the prose, or only in a code span of the diagram, is missing.
    let missing = doc(" cairn (CLI)\n cairn-a  `cairn-b`\n", "cairn-b");
    assert_eq!(missing_from_diagram(&missing, &crates).len(), 1);
    let cli_in_code_only = doc(" `cairn serve`\n cairn-a\n cairn-b\n", "");
    assert_eq!(missing_from_diagram(&cli_in_code_only, &crates).len(), 1);
    // A diagram that is not there.
    assert_eq!(missing_from_diagram("# x\n", &crates).len(), 1);

    // Names of crates that do not exist, either spelling.
    let unknown = doc(
        " cairn cairn-a cairn-b\n",
        "`cairn-c/src/lib.rs`, `cairn_d::Thing`",
    );
    assert_eq!(
        unknown_names(&unknown, &crates),
        vec![
            "cairn-c is named but is not under crates/".to_string(),
            "cairn-d is named but is not under crates/".to_string(),
        ]
    );
}
