//! `cairn pool import -o readonly=on` (issue 32, point 21), through the real binary, `cairn
//! serve`, NBD and the kernel's FUSE: a mirror whose space-log blocks are damaged on both sides
//! (the allocator state of every txg an import may open) while every data block is intact. A
//! normal import fails and points to `-o readonly=on`; the read-only import needs no allocator
//! state: `pool status` says read-only, every byte of a volume reads back over NBD, every file
//! of a filesystem through a FUSE mount that refuses writes with EROFS; and no byte of either
//! device changes, through the import, the server's life and the export.
//! Mounting needs root and /dev/fuse (CI runs as root; .ci/run installs fuse3).

mod nbd_common;

use cairn_format::BlockPointer;
use cairn_format::label::{
    LABEL_COUNT, UBERBLOCK_RING_SLOTS, UBERBLOCK_SLOT_SIZE, VDEV_DATA_START, uberblock_offset,
};
use nbd_common::*;
use std::os::unix::fs::FileExt;
use std::path::Path;

fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut state = seed;
    (0..len)
        .map(|_| {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (state >> 33) as u8
        })
        .collect()
}

/// Every uberblock that verifies in the rings of `path`.
fn uberblocks(path: &Path) -> Vec<cairn_format::Uberblock> {
    let file = std::fs::File::open(path).expect("open device");
    let size = file.metadata().expect("stat").len();
    let mut found = Vec::new();
    for label in 0..LABEL_COUNT {
        for slot in 0..UBERBLOCK_RING_SLOTS {
            let mut bytes = vec![0u8; UBERBLOCK_SLOT_SIZE as usize];
            file.read_exact_at(&mut bytes, uberblock_offset(label, size, slot))
                .expect("read slot");
            if let Ok(ub) = cairn_format::Uberblock::decode(&bytes) {
                found.push(ub);
            }
        }
    }
    found
}

/// Overwrites, on every device, each copy of the space-log head of every uberblock an import
/// may open (the newest and those within the deferred-free window before it, whose blocks
/// cannot have been reused): every txg then fails in its allocator state, nowhere else.
/// Returns how many blocks were damaged.
fn damage_space_logs(devices: &[&Path]) -> usize {
    let all: Vec<cairn_format::Uberblock> =
        devices.iter().flat_map(|dev| uberblocks(dev)).collect();
    let newest = all.iter().map(|ub| ub.txg).max().expect("an uberblock");
    let mut heads: Vec<BlockPointer> = all
        .iter()
        .filter(|ub| ub.txg + cairn_pool::space::DEFER_TXGS >= newest)
        .map(|ub| ub.space_log_bp)
        .collect();
    heads.sort_by_key(|bp| bp.dvas[0].offset);
    heads.dedup_by_key(|bp| bp.dvas[0].offset);
    for dev in devices {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(dev)
            .expect("open device");
        for bp in &heads {
            assert!(!bp.is_hole(), "a txg without a space log");
            for dva in bp.copies() {
                let offset = VDEV_DATA_START + dva.offset;
                let mut stored = vec![0u8; bp.psize as usize];
                file.read_exact_at(&mut stored, offset).expect("read block");
                assert_eq!(
                    bp.checksum_algorithm.compute(&stored),
                    bp.checksum,
                    "the space-log block of an importable txg is intact before the damage"
                );
                file.write_all_at(&vec![0xdb; bp.psize as usize], offset)
                    .expect("damage block");
            }
        }
    }
    heads.len()
}

fn contents(devices: &[&Path]) -> Vec<Vec<u8>> {
    devices
        .iter()
        .map(|dev| std::fs::read(dev).expect("read device"))
        .collect()
}

#[test]
fn a_pool_whose_space_log_is_damaged_imports_read_only_and_every_byte_reads_back() {
    let _heavy = heavy();
    let env = Env::new();
    env.create_pool_of("128M");
    env.create_volume("tank/vol", "8M", &[]);
    env.ok(&["create", "tank/fs"]);
    let volume = pattern(8 << 20, 7);
    let files: Vec<(&str, Vec<u8>)> = vec![
        ("big.bin", pattern(3 << 20, 1)),
        ("docs/note.txt", b"cairn".to_vec()),
        ("docs/small.bin", pattern(5000, 2)),
    ];
    let at = env.path("mnt");
    std::fs::create_dir(&at).expect("mountpoint");
    let _cleanup = Unmount(at.clone());
    {
        let mut server = env.serve();
        let source = env.path("volume.src");
        std::fs::write(&source, &volume).expect("write source");
        run(
            &nbdcopy(),
            &[source.to_str().expect("utf-8"), &server.uri("tank/vol")],
        )
        .ok();
        env.ok(&["mount", "tank/fs", at.to_str().expect("utf-8")]);
        std::fs::create_dir(at.join("docs")).expect("mkdir");
        for (name, data) in &files {
            std::fs::write(at.join(name), data).expect("write file");
        }
        env.ok(&["unmount", at.to_str().expect("utf-8")]);
        server.terminate();
    }
    env.ok(&["pool", "export", "tank"]);
    let (d0, d1) = (env.path("devs/d0.img"), env.path("devs/d1.img"));
    let devices = [d0.as_path(), d1.as_path()];
    assert!(damage_space_logs(&devices) > 0);
    let devs = env.path("devs").display().to_string();

    let refused = env.cairn(&["pool", "import", "-d", &devs, "tank"]);
    println!("normal import:\n{}", refused.describe());
    assert!(!refused.success(), "{}", refused.describe());
    assert!(
        refused.stderr.contains("space log") && refused.stderr.contains("-o readonly=on"),
        "the refusal points to a read-only import:\n{}",
        refused.describe()
    );

    let before = contents(&devices);
    let imported = env.cairn(&["pool", "import", "-d", &devs, "-o", "readonly=on", "tank"]);
    println!("read-only import:\n{}", imported.describe());
    assert!(imported.success(), "{}", imported.describe());
    let status = env.ok(&["pool", "status", "tank"]);
    println!("status:\n{status}");
    assert!(status.contains("read-only"), "{status}");
    let listed = env.ok(&["list", "-H", "-o", "name"]);
    assert!(
        listed.contains("tank/vol") && listed.contains("tank/fs"),
        "{listed}"
    );
    {
        let mut server = env.serve();
        let copy = env.path("volume.copy");
        run(
            &nbdcopy(),
            &[&server.uri("tank/vol"), copy.to_str().expect("utf-8")],
        )
        .ok();
        assert!(
            std::fs::read(&copy).expect("read copy") == volume,
            "the volume read back over NBD differs"
        );
        env.ok(&["mount", "tank/fs", at.to_str().expect("utf-8")]);
        for (name, data) in &files {
            assert!(
                std::fs::read(at.join(name)).expect("read file") == *data,
                "{name} read back through FUSE differs"
            );
        }
        let refused = std::fs::write(at.join("new.txt"), b"x").expect_err("a write succeeded");
        assert_eq!(refused.raw_os_error(), Some(libc::EROFS), "{refused}");
        let refused = std::fs::OpenOptions::new()
            .write(true)
            .open(at.join("big.bin"))
            .expect_err("an open for writing succeeded");
        assert_eq!(refused.raw_os_error(), Some(libc::EROFS), "{refused}");
        let refused = env.cairn(&["create", "tank/other"]);
        assert!(!refused.success(), "{}", refused.describe());
        env.ok(&["unmount", at.to_str().expect("utf-8")]);
        server.terminate();
    }
    env.ok(&["pool", "export", "tank"]);
    assert!(
        contents(&devices) == before,
        "a device changed during the read-only session"
    );
    // Still damaged, still refused without -o readonly=on; the read-only import works again.
    assert!(
        !env.cairn(&["pool", "import", "-d", &devs, "tank"])
            .success()
    );
    env.ok(&["pool", "import", "-d", &devs, "-o", "readonly=on", "tank"]);
    env.ok(&["pool", "export", "tank"]);
    assert!(contents(&devices) == before);
}
