//! Space on filesystem datasets through the engine: `quota` and `refquota` refuse growth with
//! EDQUOT before any change while deletes keep working, a raised quota takes effect on the
//! open filesystem, reservations are refused when the pool cannot honour them and are held
//! back from other datasets, AVAIL and the `statfs` figures follow from USED and the limits;
//! and the `atime` modes. A quota counts its own dataset only, and binds volumes below it.

// A test is one scenario read top to bottom: split into helpers, it reads worse.
#![allow(clippy::too_many_lines)]

mod common;

use cairn_fs::attrs::FileKind;
use cairn_fs::{Fallocate, Filesystem, FsError, NewInode, SetAttrs, XattrMode};
use common::*;

const MIB: u64 = 1 << 20;

fn dir_inode() -> NewInode {
    NewInode {
        kind: FileKind::Directory,
        ..file(0o755)
    }
}

fn is_quota(err: &FsError) -> bool {
    matches!(err, FsError::QuotaExceeded(_)) && err.errno() == libc::EDQUOT
}

/// Writes `chunk`-sized pieces into new files until a change is refused; returns the bytes
/// written and the refusal.
fn fill(fs: &Filesystem, dir: u64, prefix: &str, chunk: &[u8], limit_bytes: u64) -> (u64, FsError) {
    let mut written = 0u64;
    for index in 0.. {
        let name = format!("{prefix}{index}");
        let (object, _) = match fs.create(dir, name.as_bytes(), file(0o644)) {
            Ok(made) => made,
            Err(err) => return (written, err),
        };
        let mut offset = 0;
        while offset < 4 * MIB {
            match fs.write(object, offset, chunk) {
                Ok(_) => offset += chunk.len() as u64,
                Err(err) => return (written + offset, err),
            }
        }
        written += offset;
        assert!(
            written <= limit_bytes,
            "{written} bytes written, never refused"
        );
    }
    unreachable!()
}

#[test]
fn a_quota_refuses_growth_with_edquot_and_deletes_make_room() {
    let dir = tempfile::tempdir().unwrap();
    let pool = create_mirror(&device_paths(dir.path(), 2), plain_opener());
    let quota = 12 * MIB;
    let fs = new_filesystem(&pool, "tank/home", &[("quota", "12M")]);
    pool.sync().unwrap();
    let empty_used = info(&pool, "tank/home").used_bytes;
    let root = fs.root();
    let (docs, _) = fs.mkdir(root, b"docs", dir_inode()).unwrap();
    let chunk = pattern(MIB as usize, 3);
    let (written, refusal) = fill(&fs, docs, "f", &chunk, 2 * quota);
    assert!(is_quota(&refusal), "{refusal:?}");
    assert!(
        refusal.to_string().contains("quota of tank/home"),
        "{refusal}"
    );
    // Each change asks room for its data, an eighth more and 64 KiB of metadata, so the
    // filesystem stops short of its quota by less than that; it never goes past it.
    pool.sync().unwrap();
    let home = info(&pool, "tank/home");
    assert!(
        home.used_bytes + MIB + MIB / 8 + (64 << 10) > quota,
        "refused too early: USED {} of {quota}",
        home.used_bytes
    );
    assert!(
        home.used_bytes <= quota,
        "USED {} over the quota",
        home.used_bytes
    );
    assert!(
        home.used_bytes >= written,
        "USED {} < {written} written",
        home.used_bytes
    );

    // Smaller and smaller pieces until even a namespace change no longer fits.
    let last = fs.lookup(docs, b"f0").unwrap().0;
    let mut tail = fs.getattr(last).unwrap().size;
    for piece in [256 << 10, 64 << 10, 16 << 10, 4 << 10] {
        while fs.write(last, tail, &chunk[..piece]).is_ok() {
            tail += piece as u64;
        }
    }
    let mut extra = 0;
    let refusal = loop {
        match fs.create(root, format!("e{extra}").as_bytes(), file(0o644)) {
            Ok(_) => extra += 1,
            Err(err) => break err,
        }
        assert!(extra < 10_000, "creates never refused");
    };
    assert!(is_quota(&refusal), "{refusal:?}");

    // Every kind of growth is refused, and leaves things as they were.
    let content = fs.read(last, 0, usize::MAX >> 1).unwrap();
    let before = fs.getattr(last).unwrap();
    assert_eq!(content.len() as u64, before.size);
    let listing = |fs: &Filesystem| {
        let mut names = Vec::new();
        fs.readdir(root, 0, |entry| {
            names.push(entry.name.clone());
            true
        })
        .unwrap();
        names
    };
    let names = listing(&fs);
    let refused: Vec<(&str, FsError)> = vec![
        (
            "write",
            fs.write(last, before.size, &chunk[..4096]).unwrap_err(),
        ),
        ("create", fs.create(root, b"x", file(0o644)).unwrap_err()),
        ("mkdir", fs.mkdir(root, b"xd", dir_inode()).unwrap_err()),
        ("link", fs.link(last, root, b"xl").unwrap_err()),
        (
            "symlink",
            fs.symlink(root, b"xs", b"docs/f0", file(0)).unwrap_err(),
        ),
        (
            "extending truncate",
            fs.setattr(
                last,
                SetAttrs {
                    size: Some(before.size + 100 * MIB),
                    ..SetAttrs::default()
                },
            )
            .unwrap_err(),
        ),
        (
            "fallocate",
            fs.fallocate(
                last,
                before.size,
                MIB,
                Fallocate::Allocate { keep_size: false },
            )
            .unwrap_err(),
        ),
        (
            "setxattr",
            fs.setxattr(last, b"user.big", &chunk[..512], XattrMode::Any)
                .unwrap_err(),
        ),
    ];
    for (what, err) in &refused {
        assert!(is_quota(err), "{what}: {err:?}");
    }
    assert_eq!(fs.getattr(last).unwrap(), before);
    assert_eq!(fs.read(last, 0, before.size as usize).unwrap(), content);
    assert_eq!(listing(&fs), names);

    // fallocate inside the file asks for nothing (only the part past its end counts).
    fs.fallocate(
        last,
        0,
        before.size,
        Fallocate::Allocate { keep_size: false },
    )
    .unwrap();
    assert_eq!(fs.getattr(last).unwrap().size, before.size);

    // What frees space works at the quota: punch a hole, truncate, unlink, rmdir.
    fs.fallocate(last, 0, MIB, Fallocate::PunchHole).unwrap();
    fs.setattr(
        last,
        SetAttrs {
            size: Some(MIB / 2),
            ..SetAttrs::default()
        },
    )
    .unwrap();
    let mut index = 1;
    while fs.unlink(docs, format!("f{index}").as_bytes()).is_ok() {
        index += 1;
    }
    fs.unlink(docs, b"f0").unwrap();
    fs.rmdir(root, b"docs").unwrap();
    // Growth works again without waiting for a sync (the check syncs before refusing).
    let (object, _) = fs.create(root, b"again", file(0o644)).unwrap();
    for step in 0..4 {
        fs.write(object, step * MIB, &chunk).unwrap();
    }
    pool.sync().unwrap();
    assert_eq!(fs.read(object, 3 * MIB, MIB as usize).unwrap(), chunk);
    let home = info(&pool, "tank/home");
    assert!(home.used_bytes < empty_used + 5 * MIB, "{home:?}");
    assert!(pool.status().suspended.is_none());
}

#[test]
fn a_raised_quota_takes_effect_on_the_open_filesystem() {
    let dir = tempfile::tempdir().unwrap();
    let pool = create_mirror(&device_paths(dir.path(), 2), plain_opener());
    let fs = new_filesystem(&pool, "tank/fs", &[]);
    let root = fs.root();
    let chunk = pattern(MIB as usize, 5);
    let (object, _) = fs.create(root, b"a", file(0o644)).unwrap();
    for step in 0..3 {
        fs.write(object, step * MIB, &chunk).unwrap();
    }
    pool.sync().unwrap();
    let used = info(&pool, "tank/fs").used_bytes;
    assert!(used >= 3 * MIB);
    // A quota below what is used is refused, as ZFS does; so is nonsense.
    let err = pool
        .set_property("tank/fs", "quota", &(used - 4096).to_string())
        .unwrap_err();
    assert!(
        err.to_string().contains("less than what the dataset uses"),
        "{err}"
    );
    assert!(pool.set_property("tank/fs", "quota", "lots").is_err());
    // Quotas are for filesystems.
    pool.create_volume(
        "tank/vol",
        4 * MIB,
        &[("refreservation".into(), "none".into())],
    )
    .unwrap();
    assert!(pool.set_property("tank/vol", "quota", "8M").is_err());

    pool.set_property("tank/fs", "quota", &(used + MIB / 2).to_string())
        .unwrap();
    let err = fs.write(object, 3 * MIB, &chunk).unwrap_err();
    assert!(is_quota(&err), "{err:?}");
    assert_eq!(fs.getattr(object).unwrap().size, 3 * MIB);
    pool.set_property("tank/fs", "quota", &(used + 4 * MIB).to_string())
        .unwrap();
    fs.write(object, 3 * MIB, &chunk).unwrap();
    // none clears it.
    pool.set_property("tank/fs", "quota", "none").unwrap();
    assert_eq!(
        pool.properties("tank/fs")
            .unwrap()
            .into_iter()
            .find(|(name, _, _)| *name == "quota")
            .unwrap()
            .1,
        "0"
    );
    for step in 4..10 {
        fs.write(object, step * MIB, &chunk).unwrap();
    }
    pool.sync().unwrap();
    assert!(info(&pool, "tank/fs").used_bytes >= 10 * MIB);
}

#[test]
fn a_refquota_limits_what_the_dataset_references() {
    let dir = tempfile::tempdir().unwrap();
    let pool = create_mirror(&device_paths(dir.path(), 2), plain_opener());
    let refquota = 8 * MIB;
    let fs = new_filesystem(&pool, "tank/fs", &[("refquota", "8M")]);
    let chunk = pattern(256 << 10, 6);
    let (written, refusal) = fill(&fs, fs.root(), "r", &chunk, 4 * refquota);
    assert!(is_quota(&refusal), "{refusal:?}");
    assert!(
        refusal.to_string().contains("refquota of tank/fs"),
        "{refusal}"
    );
    pool.sync().unwrap();
    let fs_info = info(&pool, "tank/fs");
    assert!(fs_info.referenced_bytes <= refquota, "{fs_info:?}");
    assert!(fs_info.referenced_bytes >= written, "{fs_info:?}");
    assert!(
        fs_info.referenced_bytes + MIB > refquota,
        "refused too early: {fs_info:?}"
    );
    // A refreservation beyond the refquota contradicts it.
    let err = pool
        .set_property("tank/fs", "refreservation", "9M")
        .unwrap_err();
    assert!(err.to_string().contains("refquota"), "{err}");
}

#[test]
fn reservations_are_refused_beyond_the_pool_and_held_back_from_others() {
    let dir = tempfile::tempdir().unwrap();
    let pool = create_mirror(&device_paths(dir.path(), 2), plain_opener());
    pool.create_filesystem("tank/a", &[], (0, 0), 0o755)
        .unwrap();
    pool.create_filesystem("tank/b", &[], (0, 0), 0o755)
        .unwrap();
    pool.sync().unwrap();
    let before_b = info(&pool, "tank/b").available_bytes;
    let before_a = info(&pool, "tank/a");
    assert_eq!(before_a.available_bytes, before_b);
    // More than the pool has: refused, at create and by set.
    let too_much = (before_b + before_a.used_bytes + MIB).to_string();
    let err = pool
        .create_filesystem(
            "tank/c",
            &[("reservation".into(), too_much.clone())],
            (0, 0),
            0o755,
        )
        .unwrap_err();
    assert!(
        err.to_string().contains("reservations would hold back"),
        "{err}"
    );
    assert!(
        pool.set_property("tank/a", "refreservation", &too_much)
            .is_err()
    );
    assert!(
        pool.set_property("tank/a", "reservation", &too_much)
            .is_err()
    );
    // A reservation above the quota contradicts it.
    pool.set_property("tank/a", "quota", "30M").unwrap();
    let err = pool
        .set_property("tank/a", "reservation", "31M")
        .unwrap_err();
    assert!(
        err.to_string().contains("less than the reservation"),
        "{err}"
    );
    pool.set_property("tank/a", "quota", "none").unwrap();

    let reserved = 24 * MIB;
    pool.set_property("tank/a", "refreservation", "24M")
        .unwrap();
    let a = info(&pool, "tank/a");
    let b = info(&pool, "tank/b");
    // USED of a counts its unused refreservation; a sees the pool (its reservation is its
    // own), b sees the pool less the unused part. (The pool itself moved a little: the
    // change's txg wrote metadata.)
    assert_eq!(a.used_bytes, reserved);
    assert_eq!(
        b.available_bytes,
        a.available_bytes - (reserved - a.referenced_bytes)
    );
    assert!(a.available_bytes <= before_b && a.available_bytes + MIB > before_b);

    // b fills what is left and meets ENOSPC; a still has its reservation to write into.
    let fs_b = pool.filesystem("tank/b").unwrap();
    let chunk = pattern(MIB as usize, 8);
    let (written_b, refusal) = fill(&fs_b, fs_b.root(), "b", &chunk, 64 * MIB);
    assert!(matches!(refusal, FsError::NoSpace(_)), "{refusal:?}");
    assert_eq!(refusal.errno(), libc::ENOSPC);
    assert!(
        written_b <= b.available_bytes,
        "b wrote {written_b} into a's reservation (its AVAIL was {})",
        b.available_bytes
    );
    let fs_a = pool.filesystem("tank/a").unwrap();
    let (object, _) = fs_a.create(fs_a.root(), b"kept", file(0o644)).unwrap();
    for step in 0..16 {
        fs_a.write(object, step * MIB, &chunk).unwrap();
    }
    pool.sync().unwrap();
    assert_eq!(fs_a.read(object, 15 * MIB, MIB as usize).unwrap(), chunk);
    // Clearing the reservation gives the space back to b's AVAIL.
    pool.set_property("tank/a", "refreservation", "none")
        .unwrap();
    let a = info(&pool, "tank/a");
    assert_eq!(a.used_bytes, a.referenced_bytes);
}

#[test]
fn avail_and_statfs_follow_from_used_and_the_quota() {
    let dir = tempfile::tempdir().unwrap();
    let pool = create_mirror(&device_paths(dir.path(), 2), plain_opener());
    pool.create_filesystem("tank/free", &[], (0, 0), 0o755)
        .unwrap();
    pool.create_filesystem("tank/q", &[("quota".into(), "20M".into())], (0, 0), 0o755)
        .unwrap();
    let quota = 20 * MIB;
    let fs = pool.filesystem("tank/q").unwrap();
    let (object, _) = fs.create(fs.root(), b"data", file(0o644)).unwrap();
    let chunk = pattern(MIB as usize, 9);
    for step in 0..5 {
        fs.write(object, step * MIB, &chunk).unwrap();
    }
    pool.sync().unwrap();
    let q = info(&pool, "tank/q");
    let free = info(&pool, "tank/free");
    // AVAIL = min(what the pool leaves, quota - USED); the pool part is what a dataset with
    // no limits and no reservations sees.
    assert!(q.used_bytes >= 5 * MIB, "{q:?}");
    assert_eq!(q.referenced_bytes, q.used_bytes);
    assert_eq!(
        q.available_bytes,
        free.available_bytes.min(quota - q.used_bytes)
    );
    assert_eq!(q.available_bytes, quota - q.used_bytes);
    // statfs: the quota is the filesystem's size, as `df` shows on ZFS.
    assert_eq!(
        pool.filesystem_space("tank/q").unwrap(),
        (quota, quota - q.used_bytes)
    );
    let (total, available) = pool.filesystem_space("tank/free").unwrap();
    assert_eq!(available, free.available_bytes);
    assert_eq!(total, free.used_bytes + free.available_bytes);
    // Unsynced writes already count.
    fs.write(object, 5 * MIB, &chunk).unwrap();
    let (_, available) = pool.filesystem_space("tank/q").unwrap();
    assert!(available <= quota - q.used_bytes - MIB, "{available}");
    // A quota above what the pool has leaves AVAIL to the pool.
    pool.set_property("tank/q", "quota", "10G").unwrap();
    pool.sync().unwrap();
    let q = info(&pool, "tank/q");
    let free = info(&pool, "tank/free");
    assert_eq!(q.available_bytes, free.available_bytes);
}

fn atime(fs: &Filesystem, object: u64) -> cairn_fs::attrs::Timestamp {
    fs.getattr(object).unwrap().atime
}

#[test]
fn reads_update_access_times_as_the_atime_property_says() {
    let dir = tempfile::tempdir().unwrap();
    let paths = device_paths(dir.path(), 2);
    let pool = create_mirror(&paths, plain_opener());
    pool.create_filesystem("tank/fs", &[], (0, 0), 0o755)
        .unwrap();
    assert_eq!(
        pool.properties("tank/fs")
            .unwrap()
            .into_iter()
            .find(|(name, _, _)| *name == "atime")
            .map(|(_, value, _)| value),
        Some("relatime".to_string())
    );
    assert!(pool.set_property("tank/fs", "atime", "sometimes").is_err());
    let fs = pool.filesystem("tank/fs").unwrap();
    let root = fs.root();
    let (object, _) = fs.create(root, b"f", file(0o644)).unwrap();
    fs.write(object, 0, b"contents").unwrap();
    // Until the filesystem's clock (a coarse one: it moves a tick at a time, 4–10 ms) has
    // moved on, so that each step below gets a later stamp than the one before.
    let pause = || {
        let before = cairn_fs::attrs::Timestamp::now();
        while cairn_fs::attrs::Timestamp::now() <= before {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    };

    // relatime: the first read after a change updates atime (it was not newer than mtime),
    // later reads do not; ctime stays.
    let written = fs.getattr(object).unwrap();
    pause();
    fs.read(object, 0, 100).unwrap();
    let first = fs.getattr(object).unwrap();
    assert!(first.atime > written.mtime, "{first:?}");
    assert_eq!(first.ctime, written.ctime);
    assert_eq!(first.mtime, written.mtime);
    pause();
    fs.read(object, 0, 100).unwrap();
    assert_eq!(atime(&fs, object), first.atime);
    // A change makes the next read update it again.
    fs.write(object, 0, b"C").unwrap();
    pause();
    fs.read(object, 0, 100).unwrap();
    assert!(atime(&fs, object) > fs.getattr(object).unwrap().mtime);
    // Directories: listing is a read.
    let dir_before = atime(&fs, root);
    pause();
    fs.readdir(root, 0, |_| true).unwrap();
    assert!(atime(&fs, root) > dir_before);

    // on: every read; the property changes the open filesystem.
    pool.set_property("tank/fs", "atime", "on").unwrap();
    let mut last = atime(&fs, object);
    for _ in 0..3 {
        pause();
        fs.read(object, 0, 1).unwrap();
        let now = atime(&fs, object);
        assert!(now > last);
        last = now;
    }

    // off: never, not even after a change.
    pool.set_property("tank/fs", "atime", "off").unwrap();
    fs.write(object, 0, b"D").unwrap();
    let frozen = atime(&fs, object);
    pause();
    fs.read(object, 0, 100).unwrap();
    fs.readdir(root, 0, |_| true).unwrap();
    assert_eq!(atime(&fs, object), frozen);

    // Persisted with the txg.
    pool.set_property("tank/fs", "atime", "relatime").unwrap();
    pause();
    fs.read(object, 0, 1).unwrap();
    let kept = atime(&fs, object);
    assert!(kept > frozen);
    drop(fs);
    pool.export().unwrap();
    let pool = import(&paths, plain_opener()).unwrap();
    let fs = pool.filesystem("tank/fs").unwrap();
    let (object, attrs) = fs.lookup(fs.root(), b"f").unwrap();
    assert_eq!(attrs.atime, kept);
    // relatime: an atime newer than mtime and ctime is refreshed once it is a day old.
    let now_secs = attrs.ctime.secs;
    let at = |secs: i64| Some(cairn_fs::attrs::Timestamp { secs, nanos: 0 });
    for (age_hours, refreshed) in [(23, false), (25, true)] {
        fs.setattr(
            object,
            SetAttrs {
                atime: at(now_secs - age_hours * 3600),
                mtime: at(now_secs - 48 * 3600),
                ctime: at(now_secs - 48 * 3600),
                ..SetAttrs::default()
            },
        )
        .unwrap();
        let old = fs.getattr(object).unwrap();
        assert!(old.atime > old.mtime && old.atime > old.ctime, "{old:?}");
        fs.read(object, 0, 1).unwrap();
        assert_eq!(atime(&fs, object) > old.atime, refreshed, "{age_hours} h");
    }
}

#[test]
fn an_access_time_update_is_consistent_after_a_power_cut() {
    use cairn_emulate::PowerSwitch;
    use std::sync::Arc;
    let dir = tempfile::tempdir().unwrap();
    let paths = device_paths(dir.path(), 2);
    let power = Arc::new(PowerSwitch::with_seed(7));
    let (object, read_atime, ctime);
    {
        let pool = create_mirror(&paths, emulated_opener(7, Some(power.clone())));
        let fs = new_filesystem(&pool, "tank/fs", &[("atime", "on")]);
        let root = fs.root();
        let (made, _) = fs.create(root, b"f", file(0o644)).unwrap();
        fs.write(made, 0, b"contents").unwrap();
        fs.fsync(made).unwrap();
        pool.sync().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(5));
        fs.read(made, 0, 100).unwrap();
        let attrs = fs.getattr(made).unwrap();
        (object, read_atime, ctime) = (made, attrs.atime, attrs.ctime);
        // The atime change is logged but not committed by itself: it waits with the file's
        // own records, which another file's fsync leaves (per-file commit) and the file's own
        // fsync commits, after the name created meanwhile.
        let (other, _) = fs.create(root, b"g", file(0o644)).unwrap();
        fs.fsync(other).unwrap();
        fs.fsync(made).unwrap();
        power.cut_now();
        drop(fs);
        drop(pool);
    }
    let pool = import(&paths, plain_opener()).unwrap();
    pool.set_property("tank/fs", "atime", "off").unwrap();
    let fs = pool.filesystem("tank/fs").unwrap();
    let (found, attrs) = fs.lookup(fs.root(), b"f").unwrap();
    assert_eq!(found, object);
    assert_eq!(attrs.atime, read_atime);
    assert_eq!(attrs.ctime, ctime);
    assert!(fs.lookup(fs.root(), b"g").is_ok());
}

#[test]
fn a_quota_counts_its_own_dataset_only_and_binds_volumes_below() {
    let dir = tempfile::tempdir().unwrap();
    let pool = create_mirror(&device_paths(dir.path(), 2), plain_opener());
    pool.create_filesystem("tank/q", &[("quota".into(), "12M".into())], (0, 0), 0o755)
        .unwrap();
    pool.create_filesystem("tank/other", &[], (0, 0), 0o755)
        .unwrap();
    let q = pool.filesystem("tank/q").unwrap();
    let other = pool.filesystem("tank/other").unwrap();
    pool.sync().unwrap();
    let room = 12 * MIB - info(&pool, "tank/q").used_bytes;
    let chunk = pattern(MIB as usize, 10);
    // Dirty data of another dataset (the test pool syncs only when asked, or when a check
    // needs room) does not count against this quota.
    let (busy, _) = other.create(other.root(), b"busy", file(0o644)).unwrap();
    for step in 0..(room / MIB + 4) {
        other.write(busy, step * MIB, &chunk).unwrap();
    }
    let (object, _) = q.create(q.root(), b"f", file(0o644)).unwrap();
    let fits = (room - MIB) / MIB;
    for step in 0..fits {
        q.write(object, step * MIB, &chunk).unwrap();
    }
    let err = q.write(object, fits * MIB, &[&chunk[..], &chunk[..]].concat());
    assert!(is_quota(&err.unwrap_err()));

    // A quota on the pool's root dataset binds a volume below it (ENOSPC over NBD).
    pool.sync().unwrap();
    let root_used = info(&pool, "tank").used_bytes;
    pool.set_property("tank", "quota", &(root_used + 4 * MIB).to_string())
        .unwrap();
    pool.create_volume(
        "tank/vol",
        32 * MIB,
        &[("refreservation".into(), "none".into())],
    )
    .unwrap();
    let volume = pool.volume("tank/vol").unwrap();
    let block = pattern(1 << 16, 11);
    let mut offset = 0;
    let refusal = loop {
        match volume.write(offset, &block) {
            Ok(()) => offset += block.len() as u64,
            Err(err) => break err,
        }
        assert!(offset < 32 * MIB, "the root's quota never bound the volume");
    };
    assert!(refusal.to_string().contains("quota"), "{refusal}");
    assert!((MIB..=4 * MIB).contains(&offset), "{offset}");
    pool.sync().unwrap();
    assert!(info(&pool, "tank").used_bytes <= root_used + 4 * MIB);
}

/// What a quota check counts for unsynced txgs, against what their sync then allocates.
#[test]
fn the_unsynced_estimate_follows_what_the_sync_allocates() {
    let dir = tempfile::tempdir().unwrap();
    let pool = create_mirror(&device_paths(dir.path(), 2), plain_opener());
    let fs = new_filesystem(&pool, "tank/fs", &[]);
    pool.sync().unwrap();
    let root = fs.root();
    let chunk = pattern(MIB as usize, 12);
    let (object, _) = fs.create(root, b"seq", file(0o644)).unwrap();
    let measure = |what: &str, change: &dyn Fn()| {
        pool.sync().unwrap();
        let before = fs.objset().space_estimate();
        assert_eq!(before.unsynced_bytes, 0, "{what}: {before:?}");
        change();
        let estimate = fs.objset().space_estimate().unsynced_bytes;
        pool.sync().unwrap();
        let grown = fs.objset().space_estimate().used_bytes - before.used_bytes;
        eprintln!("{what}: estimate {estimate}, allocated {grown}");
        (estimate, grown)
    };
    // Sequential writes: the first one creates the file's indirect block. The estimate
    // counts an indirect block whole (16 KiB, two copies); the sync writes it lz4-compressed,
    // mostly empty pointers, so the estimate may be over by up to that much.
    let indirect_bytes = 2 * 16 * 1024;
    for step in 0..3 {
        let (estimate, grown) = measure("1 MiB", &|| {
            fs.write(object, step * MIB, &chunk).unwrap();
        });
        assert!(
            estimate >= grown && estimate - grown <= grown / 200 + indirect_bytes,
            "{estimate} {grown}"
        );
    }
    // New directories (each map's header and first leaf, two copies each).
    let dirs = 10u64;
    let (estimate, grown) = measure("10 directories", &|| {
        for index in 0..dirs {
            fs.mkdir(root, format!("d{index}").as_bytes(), dir_inode())
                .unwrap();
        }
    });
    // Never under. Over by what the estimate counts whole that the sync only replaces: the
    // parent's header and leaf (rewritten, their old copies freed), and every changed dnode
    // (the new ones and the parent's) at two copies; a few percent beyond that.
    let block_bytes = u64::from(cairn_object::map::MAP_BLOCK_BYTES);
    let dnode_bytes = cairn_format::dnode::DNODE_SIZE as u64;
    let rewritten_bytes = 2 * 2 * block_bytes + (dirs + 1) * 2 * dnode_bytes;
    assert!(
        estimate >= grown && estimate - grown <= rewritten_bytes + grown / 20,
        "{estimate} {grown}"
    );
    // Small files: a block of whole sectors each, dnodes, map entries, the dnode array's
    // indirect block.
    let (estimate, grown) = measure("200 small files", &|| {
        for index in 0..200 {
            let (made, _) = fs
                .create(root, format!("s{index}").as_bytes(), file(0o644))
                .unwrap();
            fs.write(made, 0, &chunk[..1000]).unwrap();
        }
    });
    // Plus the dnode array's indirect block (128 KiB, two copies), counted whole and written
    // lz4-compressed.
    let meta_indirect_bytes = 2 * 128 * 1024;
    assert!(
        estimate >= grown && estimate - grown <= grown / 20 + meta_indirect_bytes,
        "{estimate} {grown}"
    );
}

/// An empty directory, and a file's first extended attribute, cost one 4 KiB map block (the
/// header, with the lone first leaf in it) and its copies, not a chain of indirect blocks:
/// maps used to put their first leaf at block 2^24, and 1,000 empty directories took 235 MB
/// (with a directory's dnode holding one top-level pointer, even a dense map needed an
/// indirect block of 16 KiB, twice; with the first leaf in a block of its own, two blocks).
#[test]
fn empty_directories_and_small_xattr_maps_take_a_few_blocks() {
    let dir = tempfile::tempdir().unwrap();
    let pool = create_mirror(&device_paths(dir.path(), 2), plain_opener());
    let fs = new_filesystem(&pool, "tank/fs", &[]);
    let (dirs, _) = fs.mkdir(fs.root(), b"dirs", dir_inode()).unwrap();
    let (files, _) = fs.mkdir(fs.root(), b"files", dir_inode()).unwrap();
    let count = 200u64;
    let mut objects = Vec::new();
    for index in 0..count {
        fs.create(files, format!("f{index}").as_bytes(), file(0o644))
            .map(|(object, _)| objects.push(object))
            .unwrap();
    }
    pool.sync().unwrap();
    let before = info(&pool, "tank/fs").used_bytes;
    for index in 0..count {
        fs.mkdir(dirs, format!("d{index}").as_bytes(), dir_inode())
            .unwrap();
    }
    pool.sync().unwrap();
    let after_dirs = info(&pool, "tank/fs").used_bytes;
    for &object in &objects {
        fs.setxattr(object, b"user.tag", b"v", XattrMode::Any)
            .unwrap();
    }
    pool.sync().unwrap();
    let after_xattrs = info(&pool, "tank/fs").used_bytes;
    // Two copies of the map block and of the dnode, and a little for the parent's new entries
    // and the meta-dnode's growth. One indirect level alone would be 2 × 16 KiB more.
    let block_bytes = u64::from(cairn_object::map::MAP_BLOCK_BYTES);
    let dnode_bytes = cairn_format::dnode::DNODE_SIZE as u64;
    let map_bytes_max = 2 * (block_bytes + dnode_bytes) + block_bytes / 4;
    let per_dir = (after_dirs - before) / count;
    let per_xattr_map = (after_xattrs - after_dirs) / count;
    assert!(
        per_dir <= map_bytes_max,
        "an empty directory takes {per_dir} bytes"
    );
    assert!(
        per_xattr_map <= map_bytes_max,
        "a file's first xattr takes {per_xattr_map} bytes"
    );
    // And they work: listed, looked up, read back after export and import.
    drop(fs);
    pool.export().unwrap();
    let pool = import(&device_paths(dir.path(), 2), plain_opener()).unwrap();
    let fs = pool.filesystem("tank/fs").unwrap();
    let (dirs, _) = fs.lookup(fs.root(), b"dirs").unwrap();
    assert_eq!(fs.getattr(dirs).unwrap().size, count);
    let (last, _) = fs
        .lookup(dirs, format!("d{}", count - 1).as_bytes())
        .unwrap();
    assert_eq!(fs.getattr(last).unwrap().size, 0);
    for &object in &objects {
        assert_eq!(fs.getxattr(object, b"user.tag").unwrap(), b"v");
    }
}

/// A file past its first two records pays for one indirect block of its own, two copies:
/// with 128 KiB indirect blocks that was 256 KiB, and a 300 KB file took 640 KiB. Its
/// pointers now stay within a tenth of its data.
#[test]
fn a_file_of_a_few_records_takes_little_more_than_its_data() {
    let dir = tempfile::tempdir().unwrap();
    let pool = create_mirror(&device_paths(dir.path(), 2), plain_opener());
    let fs = new_filesystem(&pool, "tank/fs", &[("recordsize", "128K")]);
    pool.sync().unwrap();
    let record_bytes = 128 * 1024u64;
    let count = 20u64;
    let data = pattern(300_000, 5);
    let before = info(&pool, "tank/fs").used_bytes;
    for index in 0..count {
        let (object, _) = fs
            .create(fs.root(), format!("f{index}").as_bytes(), file(0o644))
            .unwrap();
        fs.write(object, 0, &data).unwrap();
    }
    pool.sync().unwrap();
    let per_file = (info(&pool, "tank/fs").used_bytes - before) / count;
    let data_bytes = (data.len() as u64).div_ceil(record_bytes) * record_bytes;
    // At least the data itself: the zeros after it in its last record compress away.
    assert!(per_file >= data.len() as u64, "{per_file} bytes per file");
    assert!(
        per_file <= data_bytes + data_bytes / 10,
        "a file of {data_bytes} bytes of records takes {per_file}"
    );
}

/// An access ACL the mode alone says (owner, owning group, other: what `cp -a` sets on every
/// file it copies) sets the mode and is not stored, so it costs no map (nor an object number);
/// one with named entries is stored, and a minimal one set later takes it away again, other
/// attributes staying.
#[test]
fn a_minimal_access_acl_is_the_mode_and_takes_no_space() {
    let dir = tempfile::tempdir().unwrap();
    let pool = create_mirror(&device_paths(dir.path(), 2), plain_opener());
    let fs = new_filesystem(&pool, "tank/fs", &[]);
    let acl = |entries: &[(u16, u16, u32)]| {
        let mut raw = 2u32.to_le_bytes().to_vec();
        for &(tag, perm, id) in entries {
            raw.extend_from_slice(&tag.to_le_bytes());
            raw.extend_from_slice(&perm.to_le_bytes());
            raw.extend_from_slice(&id.to_le_bytes());
        }
        raw
    };
    // Tags: owner 1, named user 2, owning group 4, mask 0x10, other 0x20.
    let minimal = acl(&[(1, 6, 0), (4, 4, 0), (0x20, 0, 0)]);
    let named = acl(&[
        (1, 7, 0),
        (2, 7, 65534),
        (4, 5, 0),
        (0x10, 5, 0),
        (0x20, 1, 0),
    ]);
    let access = cairn_fs::acl::ACCESS_XATTR;
    let (object, _) = fs.create(fs.root(), b"copied", file(0o777)).unwrap();
    pool.sync().unwrap();
    let before = info(&pool, "tank/fs").used_bytes;
    fs.setxattr(object, access, &minimal, XattrMode::Any)
        .unwrap();
    let attrs = fs.getattr(object).unwrap();
    assert_eq!(attrs.mode & 0o777, 0o640);
    assert_eq!(attrs.xattr_object, 0, "a map made for a minimal ACL");
    assert!(matches!(
        fs.getxattr(object, access),
        Err(FsError::NoAttribute)
    ));
    // No object number was taken for a map: the next inode follows this one (numbers taken
    // for nothing leave holes in the dnode array).
    let (next, _) = fs.create(fs.root(), b"next", file(0o644)).unwrap();
    assert_eq!(next, object + 1);
    pool.sync().unwrap();
    let grown = info(&pool, "tank/fs").used_bytes.saturating_sub(before);
    assert!(
        grown < u64::from(cairn_object::map::MAP_BLOCK_BYTES),
        "a minimal ACL and an empty file took {grown} bytes"
    );
    // Named entries are kept; a minimal ACL then removes them, other attributes stay.
    fs.setxattr(object, b"user.keep", b"1", XattrMode::Any)
        .unwrap();
    fs.setxattr(object, access, &named, XattrMode::Any).unwrap();
    assert_eq!(fs.getxattr(object, access).unwrap(), named);
    assert_eq!(fs.getattr(object).unwrap().mode & 0o777, 0o751);
    fs.setxattr(object, access, &minimal, XattrMode::Any)
        .unwrap();
    assert!(matches!(
        fs.getxattr(object, access),
        Err(FsError::NoAttribute)
    ));
    assert_eq!(fs.getattr(object).unwrap().mode & 0o777, 0o640);
    assert_eq!(fs.getxattr(object, b"user.keep").unwrap(), b"1");
    assert_eq!(fs.listxattr(object).unwrap(), vec![b"user.keep".to_vec()]);
}

/// A change of attributes alone (no data) is kept by a sync and a clean close: the txg that
/// carries only a dnode's bonus must still be written.
#[test]
fn a_chmod_alone_survives_sync_close_and_import() {
    let dir = tempfile::tempdir().unwrap();
    let paths = device_paths(dir.path(), 1);
    let pool = create_mirror(&paths, plain_opener());
    let fs = new_filesystem(&pool, "tank/fs", &[]);
    let root = fs.root();
    let (object, _) = fs.create(root, b"f", file(0o644)).unwrap();
    fs.write(object, 0, &pattern(4096, 1)).unwrap();
    pool.sync().unwrap();
    let changed = fs
        .setattr(
            object,
            SetAttrs {
                mode: Some(0o600),
                ..SetAttrs::default()
            },
        )
        .unwrap();
    assert_eq!(changed.mode & 0o7777, 0o600);
    pool.sync().unwrap();
    drop(fs);
    pool.close().unwrap();
    let pool = import(&paths, plain_opener()).unwrap();
    let fs = pool.filesystem("tank/fs").unwrap();
    let (object, _) = fs.lookup(fs.root(), b"f").unwrap();
    assert_eq!(fs.getattr(object).unwrap().mode & 0o7777, 0o600);
    drop(fs);
    pool.close().unwrap();
}
