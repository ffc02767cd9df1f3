//! The `cairn` binary on a crafted image: a pool made by the binary, exported, then patched
//! with every checksum recomputed (the engine's `tests/craft`, included by path) so that it
//! holds a value no command would write. Import must fail with a message naming it and exit 1
//! (a panic exits 101), and leave the device's bytes as they were.

#[path = "../../cairn-engine/tests/craft/mod.rs"]
mod craft;

use std::path::Path;
use std::process::{Command, Output};

fn cairn(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_cairn"))
        .arg("--state-dir")
        .arg(dir.join("state"))
        .args(args)
        .env_remove("CAIRN_STATE_DIR")
        .env("HOME", dir)
        .current_dir(dir)
        .output()
        .expect("run cairn")
}

fn ok(dir: &Path, args: &[&str]) {
    let out = cairn(dir, args);
    assert!(
        out.status.success(),
        "cairn {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn importing_a_crafted_image_fails_naming_the_damage_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let devs = dir.path().join("devs");
    std::fs::create_dir(&devs).unwrap();
    let dev = devs.join("d0.img");
    let dev_arg = dev.to_str().unwrap();
    ok(
        dir.path(),
        &["pool", "create", "--size", "64M", "tank", dev_arg],
    );
    ok(
        dir.path(),
        &["create", "-V", "24K", "-o", "volblocksize=8K", "tank/vol"],
    );
    ok(dir.path(), &["pool", "export", "tank"]);

    let image = craft::Image::open(&dev);
    image.erase_older_uberblocks();
    image.edit_record("tank/vol", |record| {
        record
            .properties
            .insert("volblocksize".into(), "1000".into());
    });
    drop(image);
    let before = std::fs::read(&dev).unwrap();

    let out = cairn(
        dir.path(),
        &["pool", "import", "-d", devs.to_str().unwrap(), "tank"],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(1),
        "import must fail cleanly: {stderr}"
    );
    assert!(
        stderr.contains("tank/vol") && stderr.contains("volblocksize") && stderr.contains("1000"),
        "{stderr}"
    );
    assert!(
        std::fs::read(&dev).unwrap() == before,
        "a refused import must not write to the device"
    );
}

/// A pool whose labels and uberblocks say a format version older than this build reads (as
/// one made before issue 34 does: version 1) is refused by `pool import` with the two
/// versions named, not reported missing or misread, and its bytes are left as they were.
#[test]
fn importing_a_pool_of_an_older_format_version_is_refused_naming_both_versions() {
    let old_version = cairn_format::FORMAT_VERSION_MIN - 1;
    let dir = tempfile::tempdir().unwrap();
    let devs = dir.path().join("devs");
    std::fs::create_dir(&devs).unwrap();
    let dev = devs.join("d0.img");
    let dev_arg = dev.to_str().unwrap();
    ok(
        dir.path(),
        &["pool", "create", "--size", "64M", "tank", dev_arg],
    );
    ok(dir.path(), &["create", "-V", "1M", "tank/vol"]);
    ok(dir.path(), &["pool", "export", "tank"]);

    let image = craft::Image::open(&dev);
    assert!(
        image.patch_uberblocks(|ub| {
            ub.version = old_version;
            true
        }) > 0
    );
    image.edit_label_config(|config| config.version = old_version);
    drop(image);
    let before = std::fs::read(&dev).unwrap();

    let out = cairn(
        dir.path(),
        &["pool", "import", "-d", devs.to_str().unwrap(), "tank"],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "import must fail: {stderr}");
    assert!(
        stderr.contains("tank")
            && stderr.contains(&format!("on-disk format is version {old_version}"))
            && stderr.contains(&format!(
                "this build reads format version {} only",
                cairn_format::FORMAT_VERSION
            )),
        "{stderr}"
    );
    assert!(
        std::fs::read(&dev).unwrap() == before,
        "a refused import must not write to the device"
    );

    // The search without a name lists it as not importable, saying why.
    let out = cairn(
        dir.path(),
        &["pool", "import", "-d", devs.to_str().unwrap()],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert!(
        stdout.contains("pool: tank")
            && stdout.contains("UNAVAIL (unsupported format)")
            && stdout.contains(&format!("on-disk format is version {old_version}"))
            && stdout.contains(&format!(
                "this build reads format version {} only",
                cairn_format::FORMAT_VERSION
            ))
            && !stdout.contains("no pools available"),
        "{stdout}"
    );
    assert!(
        std::fs::read(&dev).unwrap() == before,
        "a listing must not write to the device"
    );
}
