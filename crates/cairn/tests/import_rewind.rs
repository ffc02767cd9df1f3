//! `cairn pool import` and the txgs a pool's labels prove committed (issue 32, points 20 and
//! 23), through the real binary on sparse files patched between commands:
//! - labels whose newest uberblocks are all damaged, while a label's config proves a newer txg
//!   committed: import refuses, naming the txg it would rewind to; `-F -n` says what a rewind
//!   would do and changes no byte; `-F` rewinds, and the next import needs no `-F`;
//! - a newest uberblock that verifies but whose tree does not: the fallback to an older txg is
//!   refused the same way (it used to happen with a note only);
//! - a torn newest uberblock, as a power cut leaves it: import opens the txg before, no
//!   refusal (power-cut recovery stays automatic);
//! - a `pool create` cut before its first uberblock: listed UNAVAIL, "creation did not
//!   complete", and `pool create` reuses its devices without -f.

#[path = "../../cairn-engine/tests/craft/mod.rs"]
mod craft;

use cairn_format::label::{
    LABEL_CONFIG_OFFSET, LABEL_CONFIG_SIZE, LABEL_COUNT, UBERBLOCK_RING_SLOTS, UBERBLOCK_SLOT_SIZE,
    VDEV_DATA_START, label_offset, uberblock_offset,
};
use cairn_format::{LabelConfig, Uberblock};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// A test directory: `devs/` with the device files, `state/` the state directory.
struct Dir {
    root: tempfile::TempDir,
}

struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl Dir {
    fn new() -> Dir {
        let root = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir(root.path().join("devs")).expect("devs");
        Dir { root }
    }

    fn devs(&self) -> PathBuf {
        self.root.path().join("devs")
    }

    fn dev(&self, name: &str) -> PathBuf {
        self.devs().join(name)
    }

    /// `cairn --state-dir STATE ARGS`.
    fn cairn_in(&self, state: &str, args: &[&str]) -> Run {
        let out: Output = Command::new(env!("CARGO_BIN_EXE_cairn"))
            .arg("--state-dir")
            .arg(self.root.path().join(state))
            .args(args)
            .env_remove("CAIRN_STATE_DIR")
            .env("HOME", self.root.path())
            .current_dir(self.root.path())
            .output()
            .expect("run cairn");
        Run {
            code: out.status.code(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    fn cairn(&self, args: &[&str]) -> Run {
        self.cairn_in("state", args)
    }

    fn ok(&self, args: &[&str]) -> Run {
        let run = self.cairn(args);
        assert_eq!(
            run.code,
            Some(0),
            "cairn {args:?} failed:\n{}",
            run.describe()
        );
        run
    }

    fn fails(&self, args: &[&str]) -> Run {
        let run = self.cairn(args);
        assert_eq!(
            run.code,
            Some(1),
            "cairn {args:?} should fail:\n{}",
            run.describe()
        );
        run
    }

    /// A mirror `tank` of d0 and d1 (64 MiB sparse files).
    fn create_mirror(&self) -> [PathBuf; 2] {
        let devices = [self.dev("d0.img"), self.dev("d1.img")];
        self.ok(&[
            "pool",
            "create",
            "--size",
            "64M",
            "tank",
            "mirror",
            devices[0].to_str().expect("utf-8"),
            devices[1].to_str().expect("utf-8"),
        ]);
        devices
    }

    fn devs_arg(&self) -> String {
        self.devs().display().to_string()
    }

    /// Dataset names `cairn list` shows.
    fn datasets(&self) -> Vec<String> {
        self.ok(&["list", "-H", "-o", "name"])
            .stdout
            .lines()
            .map(str::to_string)
            .collect()
    }
}

impl Run {
    fn describe(&self) -> String {
        format!(
            "exit {:?}\nstdout:\n{}\nstderr:\n{}",
            self.code, self.stdout, self.stderr
        )
    }
}

/// Every verifying uberblock slot of a device: (byte offset, uberblock).
fn uberblocks(path: &Path) -> Vec<(u64, Uberblock)> {
    craft::Image::open(path).uberblocks()
}

fn newest_txg(paths: &[PathBuf]) -> u64 {
    paths
        .iter()
        .flat_map(|path| uberblocks(path))
        .map(|(_, ub)| ub.txg)
        .max()
        .expect("an uberblock")
}

/// Flips a byte inside every slot holding an uberblock newer than `txg` (so each fails its
/// checksum); returns how many slots were damaged.
fn damage_uberblocks_after(paths: &[PathBuf], txg: u64) -> usize {
    let mut damaged = 0;
    for path in paths {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .expect("open device");
        for (offset, ub) in uberblocks(path) {
            if ub.txg > txg {
                let mut byte = [0u8; 1];
                file.read_exact_at(&mut byte, offset + 100).expect("read");
                file.write_all_at(&[byte[0] ^ 0x5a], offset + 100)
                    .expect("write");
                damaged += 1;
            }
        }
    }
    damaged
}

/// The txg of each label's config that decodes, by label index.
fn config_txgs(path: &Path) -> Vec<(usize, u64)> {
    let file = std::fs::File::open(path).expect("open device");
    let size = file.metadata().expect("stat").len();
    (0..LABEL_COUNT)
        .filter_map(|index| {
            let mut bytes = vec![0u8; LABEL_CONFIG_SIZE as usize];
            file.read_exact_at(&mut bytes, label_offset(index, size) + LABEL_CONFIG_OFFSET)
                .expect("read label");
            LabelConfig::decode(&bytes)
                .ok()
                .map(|config| (index, config.txg))
        })
        .collect()
}

fn contents(paths: &[PathBuf]) -> Vec<Vec<u8>> {
    paths
        .iter()
        .map(|path| std::fs::read(path).expect("read device"))
        .collect()
}

#[test]
fn labels_hiding_the_newest_txgs_make_import_refuse_naming_the_txg_it_would_rewind_to() {
    let dir = Dir::new();
    let devices = dir.create_mirror();
    dir.ok(&["create", "tank/kept"]);
    let kept_txg = newest_txg(&devices);
    for name in ["tank/lost1", "tank/lost2", "tank/lost3"] {
        dir.ok(&["create", name]);
    }
    dir.ok(&["pool", "export", "tank"]);
    let committed_txg = newest_txg(&devices);
    assert!(
        committed_txg > kept_txg + 1 && committed_txg < kept_txg + UBERBLOCK_RING_SLOTS,
        "txgs {kept_txg}..{committed_txg}"
    );
    // The export wrote its config into every label after its uberblock was durable.
    for device in &devices {
        assert!(config_txgs(device).contains(&(1, committed_txg)));
    }
    assert!(damage_uberblocks_after(&devices, kept_txg) > 0);
    assert_eq!(newest_txg(&devices), kept_txg);
    let before = contents(&devices);

    let refused = dir.fails(&["pool", "import", "-d", &dir.devs_arg(), "tank"]);
    println!("refused:\n{}", refused.stderr);
    let expected = [
        format!("rewind to txg {kept_txg} "),
        format!("txg {committed_txg} was committed"),
        format!("txgs {}–{committed_txg}", kept_txg + 1),
        "-F".to_string(),
    ];
    for text in &expected {
        assert!(
            refused.stderr.contains(text.as_str()),
            "the refusal says {text:?}:\n{}",
            refused.describe()
        );
    }
    assert!(contents(&devices) == before, "a refused import wrote");
    assert!(
        !dir.ok(&["pool", "list", "-H"]).stdout.contains("tank"),
        "a refused import left the pool imported"
    );

    let preview = dir.ok(&["pool", "import", "-d", &dir.devs_arg(), "-F", "-n", "tank"]);
    println!("-F -n:\n{}", preview.stdout);
    assert!(
        preview
            .stdout
            .contains(&format!("would be rewound to txg {kept_txg} "))
            && preview.stdout.contains(&format!("{committed_txg}")),
        "{}",
        preview.describe()
    );
    assert!(contents(&devices) == before, "import -F -n wrote");
    assert!(!dir.ok(&["pool", "list", "-H"]).stdout.contains("tank"));
    // -n means nothing without -F.
    let bare_n = dir.cairn(&["pool", "import", "-d", &dir.devs_arg(), "-n", "tank"]);
    assert_ne!(bare_n.code, Some(0), "{}", bare_n.describe());

    let rewound = dir.ok(&["pool", "import", "-d", &dir.devs_arg(), "-F", "tank"]);
    let said = format!("{}{}", rewound.stdout, rewound.stderr);
    println!("-F:\n{said}");
    assert!(
        said.contains(&format!("rewound to txg {kept_txg} ")),
        "{}",
        rewound.describe()
    );
    let datasets = dir.datasets();
    assert!(
        datasets.contains(&"tank/kept".to_string()) && !datasets.iter().any(|d| d.contains("lost")),
        "{datasets:?}"
    );
    let check = dir.ok(&["pool", "check", "tank"]);
    assert!(
        check.stdout.contains("no problems found"),
        "{}",
        check.describe()
    );

    // The rewind is done: the next import finds nothing newer than what it opens.
    dir.ok(&["pool", "export", "tank"]);
    let again = dir.ok(&["pool", "import", "-d", &dir.devs_arg(), "tank"]);
    assert!(
        !format!("{}{}", again.stdout, again.stderr).contains("rewound"),
        "{}",
        again.describe()
    );
    assert!(dir.datasets().contains(&"tank/kept".to_string()));
}

/// Overwrites every copy of the MOS root block of `ub` with a pattern (the uberblock still
/// verifies, its tree does not).
fn damage_tree_of(paths: &[PathBuf], ub: &Uberblock) {
    for path in paths {
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open(path)
            .expect("open device");
        for dva in ub.root_bp.copies() {
            file.write_all_at(
                &vec![0xdb; ub.root_bp.psize as usize],
                VDEV_DATA_START + dva.offset,
            )
            .expect("damage block");
        }
    }
}

#[test]
fn a_newest_uberblock_whose_tree_does_not_verify_is_not_fallen_back_from_silently() {
    let dir = Dir::new();
    let devices = dir.create_mirror();
    dir.ok(&["create", "tank/a"]);
    dir.ok(&["pool", "export", "tank"]);
    let newest = uberblocks(&devices[0])
        .into_iter()
        .map(|(_, ub)| ub)
        .max_by_key(|ub| ub.txg)
        .expect("an uberblock");
    damage_tree_of(&devices, &newest);
    // The newest txg whose tree does not share that block (a txg that changed nothing in the
    // MOS keeps its root).
    let target = uberblocks(&devices[0])
        .into_iter()
        .map(|(_, ub)| ub)
        .filter(|ub| ub.root_bp.dvas[0].offset != newest.root_bp.dvas[0].offset)
        .map(|ub| ub.txg)
        .max()
        .expect("an older tree");
    let before = contents(&devices);

    let refused = dir.fails(&["pool", "import", "-d", &dir.devs_arg(), "tank"]);
    println!("refused:\n{}", refused.stderr);
    assert!(
        refused
            .stderr
            .contains(&format!("txg {} was committed", newest.txg))
            && refused.stderr.contains(&format!("rewind to txg {target} "))
            && refused.stderr.contains(&format!("txg {}:", newest.txg)),
        "the refusal names both txgs and why the newer one does not open:\n{}",
        refused.describe()
    );
    assert!(contents(&devices) == before, "a refused import wrote");

    let rewound = dir.ok(&["pool", "import", "-d", &dir.devs_arg(), "-F", "tank"]);
    assert!(
        format!("{}{}", rewound.stdout, rewound.stderr)
            .contains(&format!("rewound to txg {target} ")),
        "{}",
        rewound.describe()
    );
    dir.ok(&["pool", "export", "tank"]);
    dir.ok(&["pool", "import", "-d", &dir.devs_arg(), "tank"]);
}

#[test]
fn a_torn_newest_uberblock_is_recovered_from_without_a_refusal() {
    let dir = Dir::new();
    let devices = dir.create_mirror();
    // Each command imports the pool (its first txg rewrites the config) and commits more
    // txgs after it: the newest uberblock is newer than any label's config, as at a power cut
    // in the middle of an uberblock write.
    dir.ok(&["create", "tank/a"]);
    let newest = newest_txg(&devices);
    for device in &devices {
        assert!(
            config_txgs(device).iter().all(|(_, txg)| *txg < newest),
            "{:?} < {newest}",
            config_txgs(device)
        );
    }
    damage_uberblocks_after(&devices, newest - 1);
    let forget = dir.cairn(&["pool", "export", "tank"]);
    // The export itself imports first (at txg newest - 1) and exports cleanly.
    assert_eq!(forget.code, Some(0), "{}", forget.describe());
    let imported = dir.ok(&["pool", "import", "-d", &dir.devs_arg(), "tank"]);
    assert!(
        !format!("{}{}", imported.stdout, imported.stderr).contains("rewound"),
        "{}",
        imported.describe()
    );
}

#[test]
fn a_torn_uberblock_of_an_imported_pool_opens_at_the_txg_before() {
    let dir = Dir::new();
    let devices = dir.create_mirror();
    dir.ok(&["create", "tank/a"]);
    let newest = newest_txg(&devices);
    damage_uberblocks_after(&devices, newest - 1);
    // A command opens the pool from the cache, as after a power cut.
    let listed = dir.ok(&["list", "-H", "-o", "name"]);
    assert!(listed.stdout.contains("tank"), "{}", listed.describe());
    let status = dir.ok(&["pool", "status", "tank"]);
    assert!(status.stdout.contains("ONLINE"), "{}", status.describe());
}

/// The state `pool create` leaves when cut after writing the first half of the labels and
/// before its first uberblock: labels 1 and 3 and every ring zero.
fn cut_creation(paths: &[PathBuf]) {
    for path in paths {
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open(path)
            .expect("open device");
        let size = file.metadata().expect("stat").len();
        for index in 0..LABEL_COUNT {
            if index % 2 == 1 {
                file.write_all_at(
                    &vec![0u8; LABEL_CONFIG_SIZE as usize],
                    label_offset(index, size) + LABEL_CONFIG_OFFSET,
                )
                .expect("zero config");
            }
            for slot in 0..UBERBLOCK_RING_SLOTS {
                file.write_all_at(
                    &vec![0u8; UBERBLOCK_SLOT_SIZE as usize],
                    uberblock_offset(index, size, slot),
                )
                .expect("zero slot");
            }
        }
    }
}

#[test]
fn a_half_created_pool_is_listed_unavail_and_created_again_without_force() {
    let dir = Dir::new();
    let devices = dir.create_mirror();
    cut_creation(&devices);
    // Another state directory: a machine that never knew the pool.
    let listing = dir.cairn_in("other", &["pool", "import", "-d", &dir.devs_arg()]);
    assert_eq!(listing.code, Some(0), "{}", listing.describe());
    assert!(
        listing.stdout.contains("state: UNAVAIL")
            && listing.stdout.contains("creation did not complete")
            && !listing.stdout.contains("(ACTIVE)")
            && listing
                .stdout
                .lines()
                .any(|line| line.trim().starts_with("tank ") && line.ends_with("UNAVAIL")),
        "{}",
        listing.describe()
    );
    let import = dir.cairn_in("other", &["pool", "import", "-d", &dir.devs_arg(), "tank"]);
    assert_eq!(import.code, Some(1), "{}", import.describe());
    assert!(
        import.stderr.contains("creation did not complete"),
        "{}",
        import.describe()
    );
    let created = dir.cairn_in(
        "other",
        &[
            "pool",
            "create",
            "tank",
            "mirror",
            devices[0].to_str().expect("utf-8"),
            devices[1].to_str().expect("utf-8"),
        ],
    );
    assert_eq!(created.code, Some(0), "{}", created.describe());
}
