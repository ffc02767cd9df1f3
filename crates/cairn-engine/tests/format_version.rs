//! Pools of a format version this build does not read (issue 34 bumped `FORMAT_VERSION` to 2
//! and reads nothing older: every earlier layout says 1). A pool is made by the real code, then
//! its labels and uberblocks are rewritten to say version 1 through `cairn-format`'s own
//! encoders (checksums recomputed, so only the version is wrong). Import must refuse it with
//! an error naming the pool's version and the one this build reads, and leave every byte of
//! its devices as it was.

mod common;
mod craft;

use common::*;
use craft::Image;
use std::path::{Path, PathBuf};

/// The version before this build's oldest readable one.
const OLD_VERSION: u64 = cairn_format::FORMAT_VERSION_MIN - 1;

/// A single-device pool `tank` with a written volume, closed.
fn pool_on_one_device(dir: &Path) -> Vec<PathBuf> {
    let paths = device_paths(dir, 1);
    let pool = create_mirror(&paths, plain_opener());
    pool.create_volume("tank/vol", 1 << 20, &[]).unwrap();
    let volume = pool.volume("tank/vol").unwrap();
    volume.write(0, &[0x5a; 64 << 10]).unwrap();
    pool.sync().unwrap();
    drop(volume);
    pool.close().unwrap();
    paths
}

/// The error and its sources, as the CLI prints them.
fn chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        text.push_str(&format!(": {cause}"));
        source = cause.source();
    }
    text
}

fn refused(paths: &[PathBuf]) -> String {
    match import(paths, plain_opener()) {
        Ok(pool) => {
            let _ = pool.close();
            panic!("a pool of format version {OLD_VERSION} was imported");
        }
        Err(err) => chain(&err),
    }
}

#[test]
fn a_pool_of_an_older_format_version_is_refused_naming_both_versions_and_left_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let paths = pool_on_one_device(dir.path());
    let image = Image::open(&paths[0]);
    let patched = image.patch_uberblocks(|ub| {
        ub.version = OLD_VERSION;
        true
    });
    assert!(patched > 0, "no uberblock to patch");
    image.edit_label_config(|config| config.version = OLD_VERSION);
    drop(image);
    let before = std::fs::read(&paths[0]).unwrap();

    let err = refused(&paths);
    assert!(err.contains("'tank'"), "{err}");
    assert!(
        err.contains(&format!(
            "on-disk format is version {OLD_VERSION} (label 0 of "
        )),
        "{err}"
    );
    assert!(
        err.contains(&format!(
            "this build reads format version {} only",
            cairn_format::FORMAT_VERSION
        )),
        "{err}"
    );
    // By guid and from a directory search too: the same refusal, not "not found".
    let guid = cairn_format::LabelConfig::identify(&label_bytes(&paths[0]))
        .unwrap()
        .pool_guid;
    let by_guid = cairn_engine::Pool::import(
        &cairn_engine::ImportSource::Directory(dir.path().to_path_buf()),
        &guid.to_string(),
        options(plain_opener()),
    )
    .err()
    .map(|err| chain(&err))
    .unwrap_or_default();
    assert!(
        by_guid.contains(&format!("on-disk format is version {OLD_VERSION}")),
        "{by_guid}"
    );
    assert!(
        std::fs::read(&paths[0]).unwrap() == before,
        "a refused import must not write to the device"
    );
}

/// Label 0's config region of `path`.
fn label_bytes(path: &Path) -> Vec<u8> {
    use cairn_format::label::{LABEL_CONFIG_OFFSET, LABEL_CONFIG_SIZE};
    let bytes = std::fs::read(path).unwrap();
    let start = LABEL_CONFIG_OFFSET as usize;
    bytes[start..start + LABEL_CONFIG_SIZE as usize].to_vec()
}

#[test]
fn a_pool_whose_newest_uberblock_is_of_an_older_format_is_refused_not_opened_at_an_older_txg() {
    let dir = tempfile::tempdir().unwrap();
    let paths = pool_on_one_device(dir.path());
    let image = Image::open(&paths[0]);
    let newest = image.newest().txg;
    let patched = image.patch_uberblocks(|ub| {
        let is_newest = ub.txg == newest;
        if is_newest {
            ub.version = OLD_VERSION;
        }
        is_newest
    });
    assert!(patched > 0);
    assert!(
        image.newest().txg < newest,
        "older readable uberblocks remain to fall back to"
    );
    drop(image);
    let before = std::fs::read(&paths[0]).unwrap();

    let err = refused(&paths);
    assert!(
        err.contains(&format!(
            "on-disk format is version {OLD_VERSION} (the uberblock of txg {newest} on "
        )),
        "{err}"
    );
    assert!(
        std::fs::read(&paths[0]).unwrap() == before,
        "a refused import must not write to the device"
    );
}
