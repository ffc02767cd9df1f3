//! Keeps the source files of every crate layered and small.
//!
//! 1. No import loops between the files of a crate. Within each folder of a crate's `src/`, the
//!    sibling modules (a file `x.rs`, or a folder `x/` with its `mod.rs`, counted with everything
//!    below it) may use one another one way only. A file using a sibling is read from its
//!    `use crate::…`, `use super::…` (and relative `use child::…`) declarations and from the
//!    `crate::x::…`, `super::x::…` and `self::x::…` paths in its code; a name a module
//!    re-exports (`pub use x::Name`) counts as the module it comes from. A loop between
//!    siblings (a strongly connected set of them) fails, naming one cycle and the line where
//!    each step of it is taken.
//! 2. No file under `crates/*/src` longer than `LINES_MAX` lines.
//!
//! Both have an allowlist of what is still there today (`KNOWN_LOOPS`, `LARGE_FILES`), and
//! both fail as well when an entry no longer holds (the loop is gone or smaller, the file is
//! short enough), so the lists only ever shrink: a ratchet.
//!
//! The scan is textual (a small lexer that drops comments and literals, no macro expansion, no
//! `#[path]`), which is enough for how this workspace writes paths; its blind spot is a sibling
//! reached only through a method or a glob import of the parent, which adds no edge.
//!
//! This lives beside `architecture_doc.rs`, the other check of the repository's files.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::{Path, PathBuf};

const CRATES_PATH: &str = "../../crates";

/// Longest source file allowed, in lines.
const LINES_MAX: usize = 1_000;

/// Loops between sibling modules present today: (crate, folder under the crate, every module
/// of the loop, sorted). Each must still exist exactly so (a loop that got smaller is listed
/// by its new members): break a loop, then remove or shrink its entry.
const KNOWN_LOOPS: &[(&str, &str, &[&str])] = &[];

/// Source files longer than `LINES_MAX` lines today (paths from the repository's root). Each
/// must still be too long: split one, then remove it here.
const LARGE_FILES: &[&str] = &[];

fn repository_path(relative: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(relative)
}

/// A module's path from its crate's root (`[]` for `lib.rs` or `main.rs`).
type ModPath = Vec<String>;

#[derive(Debug, Clone, PartialEq, Eq)]
enum Tok {
    Ident(String),
    /// `::`
    PathSep,
    Punct(char),
}

#[derive(Debug, Clone)]
struct Token {
    tok: Tok,
    line: usize,
}

impl Token {
    fn is_ident(&self, word: &str) -> bool {
        matches!(&self.tok, Tok::Ident(ident) if ident == word)
    }

    fn is_punct(&self, c: char) -> bool {
        self.tok == Tok::Punct(c)
    }
}

/// Index just past a string literal's closing quote (and `hashes` `#`s), from just after its
/// opening quote. `raw`: no escapes.
fn skip_string(chars: &[char], mut i: usize, hashes: usize, raw: bool, line: &mut usize) -> usize {
    while i < chars.len() {
        match chars[i] {
            '\\' if !raw => i += 2,
            '"' if chars[i + 1..]
                .iter()
                .take(hashes)
                .filter(|c| **c == '#')
                .count()
                == hashes =>
            {
                return i + 1 + hashes;
            }
            c => {
                if c == '\n' {
                    *line += 1;
                }
                i += 1;
            }
        }
    }
    i
}

/// Index just past a (possibly nested) block comment starting at `i`.
fn skip_block_comment(chars: &[char], mut i: usize, line: &mut usize) -> usize {
    let mut depth = 0;
    while i < chars.len() {
        if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
            depth += 1;
            i += 2;
        } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
            depth -= 1;
            i += 2;
            if depth == 0 {
                return i;
            }
        } else {
            if chars[i] == '\n' {
                *line += 1;
            }
            i += 1;
        }
    }
    i
}

/// Index past a char literal at `i` (`'x'`, `'\n'`, `'\u{41}'`), or past the quote of a
/// lifetime (`'a`: the name is lexed as a word, which is harmless).
fn skip_quote(chars: &[char], i: usize) -> usize {
    if chars.get(i + 1) == Some(&'\\') {
        let mut j = i + 3;
        while j < chars.len() && chars[j] != '\'' {
            j += 1;
        }
        return j + 1;
    }
    if chars.get(i + 2) == Some(&'\'') {
        return i + 3;
    }
    i + 1
}

/// After a word ending at `j`: where a literal it prefixes (`b"…"`, `r#"…"#`, `b'x'`) ends,
/// if it prefixes one.
fn skip_prefixed_literal(chars: &[char], word: &str, j: usize, line: &mut usize) -> Option<usize> {
    let next = chars.get(j).copied();
    match (word, next) {
        ("b" | "c", Some('"')) => Some(skip_string(chars, j + 1, 0, false, line)),
        ("b", Some('\'')) => Some(skip_quote(chars, j)),
        ("r" | "br" | "cr", Some('"' | '#')) => {
            let hashes = chars[j..].iter().take_while(|c| **c == '#').count();
            (chars.get(j + hashes) == Some(&'"'))
                .then(|| skip_string(chars, j + hashes + 1, hashes, true, line))
        }
        _ => None,
    }
}

fn is_word_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// The words, `::` and punctuation of Rust source, without comments and literals.
fn lex(text: &str) -> Vec<Token> {
    let chars: Vec<char> = text.chars().collect();
    let mut tokens = Vec::new();
    let (mut i, mut line) = (0, 1);
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '\n' {
            line += 1;
            i += 1;
        } else if c.is_whitespace() {
            i += 1;
        } else if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            i = skip_block_comment(&chars, i, &mut line);
        } else if c == '"' {
            i = skip_string(&chars, i + 1, 0, false, &mut line);
        } else if c == '\'' {
            i = skip_quote(&chars, i);
        } else if is_word_char(c) {
            let mut j = i;
            while j < chars.len() && is_word_char(chars[j]) {
                j += 1;
            }
            let word: String = chars[i..j].iter().collect();
            if let Some(end) = skip_prefixed_literal(&chars, &word, j, &mut line) {
                i = end;
                continue;
            }
            if word == "r" && next == Some('#') {
                // A raw identifier (`r#type`): the word after the `#`.
                i = j + 1;
                continue;
            }
            if !c.is_ascii_digit() {
                tokens.push(Token {
                    tok: Tok::Ident(word),
                    line,
                });
            }
            i = j;
        } else if c == ':' && next == Some(':') {
            tokens.push(Token {
                tok: Tok::PathSep,
                line,
            });
            i += 2;
        } else {
            tokens.push(Token {
                tok: Tok::Punct(c),
                line,
            });
            i += 1;
        }
    }
    tokens
}

/// One path a `use` declaration brings in: its segments (the last may be `*`) and the name it
/// binds (its alias, or its last segment).
#[derive(Debug, Clone, PartialEq, Eq)]
struct UsePath {
    segments: Vec<String>,
    name: String,
}

/// Parses the use tree starting at `*pos` (up to a `,`, `}` or `;`), appending its paths.
fn parse_use_tree(tokens: &[Token], pos: &mut usize, prefix: Vec<String>, out: &mut Vec<UsePath>) {
    let mut segments = prefix;
    while let Some(token) = tokens.get(*pos) {
        match &token.tok {
            Tok::PathSep => *pos += 1,
            Tok::Punct('*') => {
                *pos += 1;
                segments.push("*".to_string());
                out.push(UsePath {
                    segments,
                    name: "*".to_string(),
                });
                return;
            }
            Tok::Punct('{') => {
                *pos += 1;
                while let Some(token) = tokens.get(*pos) {
                    if token.is_punct('}') {
                        *pos += 1;
                        break;
                    }
                    if token.is_punct(',') {
                        *pos += 1;
                        continue;
                    }
                    parse_use_tree(tokens, pos, segments.clone(), out);
                }
                return;
            }
            Tok::Ident(word) if word == "self" && !segments.is_empty() => {
                // `use a::{self, …}` binds `a`.
                *pos += 1;
                let name = segments.last().cloned().unwrap_or_default();
                out.push(UsePath { segments, name });
                return;
            }
            Tok::Ident(word) => {
                segments.push(word.clone());
                *pos += 1;
                if tokens
                    .get(*pos)
                    .is_some_and(|token| token.tok == Tok::PathSep)
                {
                    continue;
                }
                let mut name = word.clone();
                if tokens.get(*pos).is_some_and(|token| token.is_ident("as")) {
                    if let Some(Tok::Ident(alias)) = tokens.get(*pos + 1).map(|token| &token.tok) {
                        name = alias.clone();
                    }
                    *pos += 2;
                }
                out.push(UsePath { segments, name });
                return;
            }
            _ => return,
        }
    }
}

/// What one source file refers to inside its crate.
#[derive(Debug, Default)]
struct FileScan {
    /// `use` declarations: the module they are in (inline `mod x { … }` included), the path,
    /// the line.
    uses: Vec<(ModPath, UsePath, usize)>,
    /// Paths in code starting with `crate`, `super` or `self`: the module they are in, the
    /// segments, the line.
    paths: Vec<(ModPath, Vec<String>, usize)>,
    /// Inline modules (`mod x { … }`) the file declares.
    inline_modules: Vec<ModPath>,
}

/// The path starting at `tokens[*pos]` (`crate::a::b`), advancing past it.
fn take_path(tokens: &[Token], pos: &mut usize) -> Vec<String> {
    let mut segments = Vec::new();
    while let Some(Tok::Ident(word)) = tokens.get(*pos).map(|token| &token.tok) {
        segments.push(word.clone());
        *pos += 1;
        if tokens
            .get(*pos)
            .is_some_and(|token| token.tok == Tok::PathSep)
        {
            *pos += 1;
        } else {
            break;
        }
    }
    segments
}

/// The module an inline module stack (`mod x { … }` open at this point) puts code of `module` in.
fn inner_module(module: &[String], inline: &[(String, usize)]) -> ModPath {
    let mut path = module.to_vec();
    path.extend(inline.iter().map(|(name, _)| name.clone()));
    path
}

/// Reads the module references of one file whose own module is `module`.
fn scan_file(text: &str, module: &ModPath) -> FileScan {
    let tokens = lex(text);
    let mut scan = FileScan::default();
    // Inline modules open now, with the brace depth inside each.
    let mut inline: Vec<(String, usize)> = Vec::new();
    let mut depth = 0;
    let mut pos = 0;
    while pos < tokens.len() {
        let current = || inner_module(module, &inline);
        let token = &tokens[pos];
        let after_path_sep = pos > 0 && tokens[pos - 1].tok == Tok::PathSep;
        let after_dollar = pos > 0 && tokens[pos - 1].is_punct('$');
        match &token.tok {
            Tok::Punct('{') => depth += 1,
            Tok::Punct('}') => {
                if inline.last().is_some_and(|(_, at)| *at == depth) {
                    inline.pop();
                }
                depth -= 1;
            }
            Tok::Ident(word) if word == "mod" => {
                if let (Some(Tok::Ident(name)), Some(true)) = (
                    tokens.get(pos + 1).map(|token| &token.tok),
                    tokens.get(pos + 2).map(|token| token.is_punct('{')),
                ) {
                    let mut path = current();
                    path.push(name.clone());
                    scan.inline_modules.push(path);
                    inline.push((name.clone(), depth + 1));
                }
            }
            Tok::Ident(word) if word == "use" => {
                let here = current();
                let line = token.line;
                pos += 1;
                let mut paths = Vec::new();
                parse_use_tree(&tokens, &mut pos, Vec::new(), &mut paths);
                scan.uses
                    .extend(paths.into_iter().map(|path| (here.clone(), path, line)));
                continue;
            }
            Tok::Ident(word)
                if matches!(word.as_str(), "crate" | "super" | "self")
                    && !after_path_sep
                    && !after_dollar
                    && tokens
                        .get(pos + 1)
                        .is_some_and(|next| next.tok == Tok::PathSep) =>
            {
                let here = current();
                let line = token.line;
                let segments = take_path(&tokens, &mut pos);
                scan.paths.push((here, segments, line));
                continue;
            }
            _ => {}
        }
        pos += 1;
    }
    scan
}

/// A source file of a crate and the module it is.
struct SourceFile {
    /// From the repository's root, for messages.
    shown: String,
    module: ModPath,
    lines: usize,
    scan: FileScan,
}

/// Every `.rs` file under `dir`, recursively, sorted.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(dir) = pending.pop() {
        let entries = std::fs::read_dir(&dir)
            .unwrap_or_else(|err| panic!("cannot list {}: {err}", dir.display()));
        for entry in entries {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                pending.push(path);
            } else if path.extension().is_some_and(|ext| ext == "rs") {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

/// The module a file under `src/` is: `a/b.rs` and `a/b/mod.rs` are `a::b`, `lib.rs` and
/// `main.rs` the root.
fn module_of(relative: &Path) -> ModPath {
    let mut segments: Vec<String> = relative
        .iter()
        .map(|part| part.to_string_lossy().into_owned())
        .collect();
    if let Some(last) = segments.pop() {
        let stem = last.trim_end_matches(".rs");
        let is_root = segments.is_empty() && (stem == "lib" || stem == "main");
        if stem != "mod" && !is_root {
            segments.push(stem.to_string());
        }
    }
    segments
}

/// A crate's files, with what the resolution of its paths needs.
struct CrateScan {
    name: String,
    files: Vec<SourceFile>,
    /// Every module (inline ones included), with the file module it lives in.
    file_module: BTreeMap<ModPath, ModPath>,
    /// Per module, the names its `use` declarations bind to crate-internal paths (absolute).
    imports: BTreeMap<ModPath, BTreeMap<String, Vec<String>>>,
}

fn read_crate(dir: &Path, name: &str) -> CrateScan {
    let src = dir.join("src");
    let mut files = Vec::new();
    let mut file_module = BTreeMap::new();
    for path in rust_files(&src) {
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|err| panic!("cannot read {}: {err}", path.display()));
        let relative = path.strip_prefix(&src).expect("a file under src/");
        let module = module_of(relative);
        let scan = scan_file(&text, &module);
        file_module.insert(module.clone(), module.clone());
        for inline in &scan.inline_modules {
            file_module.insert(inline.clone(), module.clone());
        }
        files.push(SourceFile {
            shown: format!("crates/{name}/src/{}", relative.display()),
            module,
            lines: text.lines().count(),
            scan,
        });
    }
    let mut krate = CrateScan {
        name: name.to_string(),
        files,
        file_module,
        imports: BTreeMap::new(),
    };
    let mut imports: BTreeMap<ModPath, BTreeMap<String, Vec<String>>> = BTreeMap::new();
    for file in &krate.files {
        for (here, used, _) in &file.scan.uses {
            if let Some(absolute) = krate.absolute(here, &used.segments, true) {
                imports
                    .entry(here.clone())
                    .or_default()
                    .insert(used.name.clone(), absolute);
            }
        }
    }
    krate.imports = imports;
    krate
}

impl CrateScan {
    fn is_module(&self, path: &[String]) -> bool {
        self.file_module.contains_key(path)
    }

    /// `path`, written in module `here`, from the crate's root; `None` if it leaves the crate.
    /// `in_use`: a `use` path, whose first segment may also name a child module.
    fn absolute(&self, here: &[String], path: &[String], in_use: bool) -> Option<Vec<String>> {
        let first = path.first()?;
        match first.as_str() {
            "crate" => Some(path[1..].to_vec()),
            "self" => Some([here, &path[1..]].concat()),
            "super" => {
                let supers = path
                    .iter()
                    .take_while(|segment| *segment == "super")
                    .count();
                let base = here.get(..here.len().checked_sub(supers)?)?;
                Some([base, &path[supers..]].concat())
            }
            _ if in_use && self.is_module(&[here, &path[..1]].concat()) => {
                Some([here, path].concat())
            }
            _ => None,
        }
    }

    /// The file module an absolute path lands in: its deepest module, following the names a
    /// module re-exports to where they come from.
    fn resolve(&self, path: &[String], hops: usize) -> ModPath {
        let mut module: ModPath = Vec::new();
        for (index, segment) in path.iter().enumerate() {
            let mut child = module.clone();
            child.push(segment.clone());
            if self.is_module(&child) {
                module = child;
                continue;
            }
            let imported = self
                .imports
                .get(&module)
                .and_then(|names| names.get(segment));
            if let Some(target) = imported.filter(|_| hops < 8) {
                let mut full = target.clone();
                full.extend_from_slice(&path[index + 1..]);
                return self.resolve(&full, hops + 1);
            }
            break;
        }
        self.file_module.get(&module).cloned().unwrap_or(module)
    }
}

/// One file module using another: where (folder), which siblings, and the first place seen.
type Edges = BTreeMap<ModPath, BTreeMap<String, BTreeMap<String, String>>>;

/// The sibling-level uses of a crate: per folder (module path), which child uses which, with
/// the file and line of the first such use.
fn sibling_edges(krate: &CrateScan) -> Edges {
    let mut edges = Edges::new();
    for file in &krate.files {
        let references = file
            .scan
            .uses
            .iter()
            .map(|(here, used, line)| (here, &used.segments, *line, true))
            .chain(
                file.scan
                    .paths
                    .iter()
                    .map(|(here, path, line)| (here, path, *line, false)),
            );
        for (here, path, line, in_use) in references {
            let Some(absolute) = krate.absolute(here, path, in_use) else {
                continue;
            };
            let target = krate.resolve(&absolute, 0);
            let from = &file.module;
            let common = from.iter().zip(&target).take_while(|(a, b)| a == b).count();
            // A module using itself, an ancestor or a descendant is no use between siblings.
            if common == from.len() || common == target.len() {
                continue;
            }
            edges
                .entry(from[..common].to_vec())
                .or_default()
                .entry(from[common].clone())
                .or_default()
                .entry(target[common].clone())
                .or_insert_with(|| format!("{}:{line}", file.shown));
        }
    }
    edges
}

/// The strongly connected sets of more than one node of `graph` (Tarjan), each sorted.
fn loops(graph: &BTreeMap<String, BTreeMap<String, String>>) -> Vec<Vec<String>> {
    struct Tarjan<'a> {
        graph: &'a BTreeMap<String, BTreeMap<String, String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        found: Vec<Vec<String>>,
    }
    impl<'a> Tarjan<'a> {
        fn visit(&mut self, node: &'a str) {
            let at = self.index.len();
            self.index.insert(node, at);
            self.low.insert(node, at);
            self.stack.push(node);
            self.on_stack.insert(node);
            let graph = self.graph;
            for next in graph.get(node).into_iter().flat_map(|out| out.keys()) {
                if !self.index.contains_key(next.as_str()) {
                    self.visit(next);
                    let low = self.low[node].min(self.low[next.as_str()]);
                    self.low.insert(node, low);
                } else if self.on_stack.contains(next.as_str()) {
                    let low = self.low[node].min(self.index[next.as_str()]);
                    self.low.insert(node, low);
                }
            }
            if self.low[node] == self.index[node] {
                let mut members = Vec::new();
                while let Some(member) = self.stack.pop() {
                    self.on_stack.remove(member);
                    members.push(member.to_string());
                    if member == node {
                        break;
                    }
                }
                if members.len() > 1 {
                    members.sort();
                    self.found.push(members);
                }
            }
        }
    }
    let mut tarjan = Tarjan {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        found: Vec::new(),
    };
    for node in graph.keys() {
        if !tarjan.index.contains_key(node.as_str()) {
            tarjan.visit(node);
        }
    }
    tarjan.found.sort();
    tarjan.found
}

/// One shortest cycle through the first member of a loop, each step with where it is taken.
fn describe_cycle(
    graph: &BTreeMap<String, BTreeMap<String, String>>,
    members: &[String],
) -> String {
    let start = &members[0];
    let inside: BTreeSet<&String> = members.iter().collect();
    let mut came_from: BTreeMap<&String, &String> = BTreeMap::new();
    let mut queue: VecDeque<&String> = VecDeque::from([start]);
    let mut last = None;
    'search: while let Some(node) = queue.pop_front() {
        for next in graph.get(node).into_iter().flat_map(|out| out.keys()) {
            if next == start {
                last = Some(node);
                break 'search;
            }
            if inside.contains(next) && !came_from.contains_key(next) {
                came_from.insert(next, node);
                queue.push_back(next);
            }
        }
    }
    let mut middle = Vec::new();
    let mut node = last.unwrap_or(start);
    while node != start {
        middle.push(node);
        node = came_from[node];
    }
    middle.reverse();
    let mut cycle = vec![start];
    cycle.extend(middle);
    cycle.push(start);
    cycle
        .windows(2)
        .map(|step| format!("{} uses {} ({})", step[0], step[1], graph[step[0]][step[1]]))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The crates of the workspace: (name, directory), each directory under `crates/` with a
/// `Cargo.toml` and a `src/`.
fn workspace_crates() -> Vec<(String, PathBuf)> {
    let dir = repository_path(CRATES_PATH);
    let entries = std::fs::read_dir(&dir)
        .unwrap_or_else(|err| panic!("cannot list {}: {err}", dir.display()));
    let mut crates: Vec<(String, PathBuf)> = entries
        .map(|entry| entry.expect("a directory entry").path())
        .filter(|path| path.join("Cargo.toml").is_file() && path.join("src").is_dir())
        .map(|path| {
            let name = path
                .file_name()
                .and_then(|name| name.to_str())
                .expect("a UTF-8 directory name")
                .to_string();
            (name, path)
        })
        .collect();
    crates.sort();
    assert!(!crates.is_empty(), "no crates under {}", dir.display());
    crates
}

fn read_workspace() -> Vec<CrateScan> {
    workspace_crates()
        .iter()
        .map(|(name, dir)| read_crate(dir, name))
        .collect()
}

/// The folder a module's children live in, as `KNOWN_LOOPS` names it ("src", "src/space").
fn folder_name(folder: &[String]) -> String {
    std::iter::once("src".to_string())
        .chain(folder.iter().cloned())
        .collect::<Vec<_>>()
        .join("/")
}

/// Every loop of the workspace: ((crate, folder, members), a cycle in it, described).
fn workspace_loops(crates: &[CrateScan]) -> BTreeMap<(String, String, Vec<String>), String> {
    let mut found = BTreeMap::new();
    for krate in crates {
        for (folder, graph) in sibling_edges(krate) {
            for members in loops(&graph) {
                let cycle = describe_cycle(&graph, &members);
                found.insert((krate.name.clone(), folder_name(&folder), members), cycle);
            }
        }
    }
    found
}

#[test]
fn no_import_loops_between_sibling_modules() {
    let found = workspace_loops(&read_workspace());
    let known: BTreeSet<(String, String, Vec<String>)> = KNOWN_LOOPS
        .iter()
        .map(|(krate, folder, members)| {
            let members: Vec<String> = members.iter().map(|member| member.to_string()).collect();
            (krate.to_string(), folder.to_string(), members)
        })
        .collect();
    let mut problems = Vec::new();
    for ((krate, folder, members), cycle) in &found {
        if !known.contains(&(krate.clone(), folder.clone(), members.clone())) {
            problems.push(format!(
                "new import loop in crates/{krate}/{folder} between {{{}}}: {cycle}",
                members.join(", ")
            ));
        }
    }
    for (krate, folder, members) in &known {
        if !found.contains_key(&(krate.clone(), folder.clone(), members.clone())) {
            problems.push(format!(
                "KNOWN_LOOPS lists crates/{krate}/{folder} {{{}}}, which is no longer a loop \
                 (or not exactly this one): remove or update its entry",
                members.join(", ")
            ));
        }
    }
    assert!(
        problems.is_empty(),
        "module layering:\n  {}",
        problems.join("\n  ")
    );
}

#[test]
fn no_source_file_over_the_line_limit() {
    let crates = read_workspace();
    let mut problems = Vec::new();
    let mut seen = BTreeSet::new();
    for file in crates.iter().flat_map(|krate| &krate.files) {
        let allowed = LARGE_FILES.contains(&file.shown.as_str());
        if allowed {
            seen.insert(file.shown.as_str());
        }
        if file.lines > LINES_MAX && !allowed {
            problems.push(format!(
                "{} has {} lines, more than {LINES_MAX}: split it along its responsibilities",
                file.shown, file.lines
            ));
        }
        if file.lines <= LINES_MAX && allowed {
            problems.push(format!(
                "{} has {} lines, no more than {LINES_MAX}: remove it from LARGE_FILES",
                file.shown, file.lines
            ));
        }
    }
    for listed in LARGE_FILES {
        if !seen.contains(listed) {
            problems.push(format!("LARGE_FILES lists {listed}, which does not exist"));
        }
    }
    assert!(
        problems.is_empty(),
        "file sizes:\n  {}",
        problems.join("\n  ")
    );
}

#[test]
fn the_lexer_drops_comments_and_literals() {
    let text = "// use crate::a;\n/* crate::b:: /* nested */ */ let s = \"crate::c::x {\";\n\
                let r = r#\"crate::d\"#; let c = '{'; let l: &'static str = b\"}\";\ncrate::e::f();";
    let words: Vec<String> = lex(text)
        .into_iter()
        .filter_map(|token| match token.tok {
            Tok::Ident(word) => Some(word),
            _ => None,
        })
        .collect();
    assert_eq!(
        words,
        [
            "let", "s", "let", "r", "let", "c", "let", "l", "static", "str", "crate", "e", "f"
        ]
    );
    assert_eq!(lex(text).last().map(|token| token.line), Some(4));
}

#[test]
fn use_trees_and_paths_are_read_with_their_module() {
    let text = "use super::{a::{self, B as C}, d::*};\nuse crate::e::F;\n\
                mod tests {\n    use super::G;\n    fn t() { super::super::h::i(); }\n}\n\
                fn f() { crate::j::k(); $crate::no::no(); }";
    let scan = scan_file(text, &vec!["m".to_string()]);
    let uses: Vec<(ModPath, Vec<String>, String)> = scan
        .uses
        .iter()
        .map(|(here, used, _)| (here.clone(), used.segments.clone(), used.name.clone()))
        .collect();
    let strings = |words: &[&str]| -> Vec<String> { words.iter().map(|w| w.to_string()).collect() };
    assert_eq!(
        uses,
        [
            (strings(&["m"]), strings(&["super", "a"]), "a".to_string()),
            (
                strings(&["m"]),
                strings(&["super", "a", "B"]),
                "C".to_string()
            ),
            (
                strings(&["m"]),
                strings(&["super", "d", "*"]),
                "*".to_string()
            ),
            (
                strings(&["m"]),
                strings(&["crate", "e", "F"]),
                "F".to_string()
            ),
            (
                strings(&["m", "tests"]),
                strings(&["super", "G"]),
                "G".to_string()
            ),
        ]
    );
    let paths: Vec<(ModPath, Vec<String>)> = scan
        .paths
        .iter()
        .map(|(here, path, _)| (here.clone(), path.clone()))
        .collect();
    assert_eq!(
        paths,
        [
            (
                strings(&["m", "tests"]),
                strings(&["super", "super", "h", "i"])
            ),
            (strings(&["m"]), strings(&["crate", "j", "k"])),
        ]
    );
    assert_eq!(scan.inline_modules, [strings(&["m", "tests"])]);
}
