//! `cairn diff SNAPSHOT [SNAPSHOT|DATASET]` of a filesystem, as `zfs diff`: one line per
//! changed path, `M` (contents or attributes changed; a directory whose entries changed),
//! `+` (created), `-` (removed), `R` (renamed or moved: `old -> new`). What counts as which,
//! hard links included, is `cairn_fs::diff`'s module doc; where paths start (the mount, else
//! the `mountpoint` property, else `/` at the dataset's root) is the admin layer's
//! (`cairn_frontend::admin::diff_files`). This module renders.
//!
//! Text as `zfs diff`: fields separated by tabs; `-t` puts the inode's change time first
//! (`SECONDS.NANOSECONDS`), `-F` a type letter after the change; `-H` separates a rename's two
//! paths by a tab instead of ` -> `. Paths are escaped as `zfs diff` does, so that a line is
//! always one line of printable ASCII: every byte that is not printable ASCII, a space, or a
//! backslash becomes `\NNN` (three octal digits). `-j` prints one JSON document (fields in
//! docs/json.md) with the same escaped paths. No change prints nothing.

use crate::context::{Context, say_raw};
use crate::{DiffArgs, json, remote};
use anyhow::Result;
use cairn_frontend::admin::{AdminReply, AdminRequest, FileChangeRow, FileDiffReply};
use serde::Serialize;
use std::fmt::Write as _;

/// `diff` of a filesystem (`args.blocks` unset).
pub fn diff_files(ctx: &Context, args: &DiffArgs, newer: String) -> Result<()> {
    let request = AdminRequest::DiffFiles {
        older: args.older.clone(),
        newer: newer.clone(),
    };
    let reply = match remote::call(ctx, request)? {
        AdminReply::FileDiff(reply) => reply,
        other => return Err(remote::unexpected(&other)),
    };
    if args.json {
        let document = document(&args.older, newer, &reply);
        say_raw!(ctx, "{}", json::diff("cairn diff", &document)?);
        return Ok(());
    }
    let mut out = String::new();
    for row in &reply.changes {
        render_line(&mut out, row, reply.mountpoint.as_deref(), args);
    }
    if !out.is_empty() {
        say_raw!(ctx, "{out}");
    }
    Ok(())
}

/// One `zfs diff` line of `row`, with its newline.
fn render_line(out: &mut String, row: &FileChangeRow, mountpoint: Option<&[u8]>, args: &DiffArgs) {
    if args.timestamps {
        let _ = write!(out, "{}.{:09}\t", row.ctime_secs, row.ctime_nanos);
    }
    let _ = write!(out, "{}\t", row.change);
    if args.classify {
        let _ = write!(out, "{}\t", row.kind);
    }
    out.push_str(&full_path(mountpoint, &row.path));
    if let Some(new_path) = &row.new_path {
        out.push_str(if args.format.scripted { "\t" } else { " -> " });
        out.push_str(&full_path(mountpoint, new_path));
    }
    out.push('\n');
}

/// `path` (from the dataset's root) under `mountpoint`, escaped.
fn full_path(mountpoint: Option<&[u8]>, path: &[u8]) -> String {
    let mut bytes = Vec::with_capacity(path.len() + 32);
    if let Some(mountpoint) = mountpoint {
        let trimmed = mountpoint.strip_suffix(b"/").unwrap_or(mountpoint);
        bytes.extend_from_slice(trimmed);
    }
    bytes.extend_from_slice(path);
    escape(&bytes)
}

/// `zfs diff`'s escaping: printable ASCII but space and backslash as is, every other byte as
/// a backslash and three octal digits.
pub fn escape(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    for &byte in bytes {
        if byte > b' ' && byte != b'\\' && byte < 0x7f {
            out.push(char::from(byte));
        } else {
            let _ = write!(out, "\\{byte:03o}");
        }
    }
    out
}

/// `diff -j` of a filesystem (docs/json.md).
#[derive(Serialize)]
struct FileDiffDocument {
    older: String,
    newer: String,
    mountpoint: Option<String>,
    objects_changed: u64,
    blocks_visited: u64,
    directories_scanned: u64,
    changes: Vec<ChangeEntry>,
}

#[derive(Serialize)]
struct ChangeEntry {
    change: String,
    path: String,
    new_path: Option<String>,
    #[serde(rename = "type")]
    kind: &'static str,
    ctime_secs: i64,
    ctime_nanos: u32,
    object: u64,
}

fn document(older: &str, newer: String, reply: &FileDiffReply) -> FileDiffDocument {
    let mountpoint = reply.mountpoint.as_deref();
    FileDiffDocument {
        older: older.to_string(),
        newer,
        mountpoint: mountpoint.map(escape),
        objects_changed: reply.objects_changed,
        blocks_visited: reply.blocks_visited,
        directories_scanned: reply.directories_scanned,
        changes: reply
            .changes
            .iter()
            .map(|row| ChangeEntry {
                change: row.change.to_string(),
                path: full_path(mountpoint, &row.path),
                new_path: row
                    .new_path
                    .as_deref()
                    .map(|path| full_path(mountpoint, path)),
                kind: kind_name(row.kind),
                ctime_secs: row.ctime_secs,
                ctime_nanos: row.ctime_nanos,
                object: row.object,
            })
            .collect(),
    }
}

/// The JSON name of a `-F` letter.
fn kind_name(letter: char) -> &'static str {
    match letter {
        'F' => "file",
        '/' => "directory",
        '@' => "symlink",
        '|' => "fifo",
        '=' => "socket",
        'B' => "block_device",
        'C' => "character_device",
        _ => "unknown",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_as_zfs_diff() {
        assert_eq!(escape(b"/a/plain-name.txt"), "/a/plain-name.txt");
        assert_eq!(escape(b"/my file"), "/my\\040file");
        assert_eq!(escape(b"/tab\there"), "/tab\\011here");
        assert_eq!(escape(b"/back\\slash"), "/back\\134slash");
        assert_eq!(escape(b"/new\nline"), "/new\\012line");
        assert_eq!(escape("/é".as_bytes()), "/\\303\\251");
        assert_eq!(escape(b"/del\x7f"), "/del\\177");
    }

    #[test]
    fn paths_go_under_the_mountpoint() {
        assert_eq!(full_path(None, b"/"), "/");
        assert_eq!(full_path(Some(b"/mnt/home"), b"/"), "/mnt/home/");
        assert_eq!(full_path(Some(b"/mnt/home/"), b"/a"), "/mnt/home/a");
        assert_eq!(full_path(Some(b"/"), b"/a"), "/a");
    }
}
