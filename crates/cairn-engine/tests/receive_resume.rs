//! Resumable receive (issue 36): a stream cut at 100 seeded offsets (truncated, or a byte
//! damaged there; full and incremental, volume and filesystem), received with `-s`, keeps what
//! arrived with a resume token; `send -t` from the token, received with `-s` (itself cut again
//! at times), completes to a snapshot whose objects equal the sender's, every block read. The
//! token and the partial receive survive export and import; `receive -A` leaves no trace; bad
//! tokens, a resumed stream without its partial receive, a token whose snapshot the sender no
//! longer has, and a whole stream into a target with a partial receive are refused by name.
//! Power cuts of the receiving pool (seeded, emulated devices dropping unflushed writes) leave
//! a token that describes only what is durable: after import the resume completes and `check`
//! is clean.

mod common;

use cairn_emulate::PowerSwitch;
use cairn_engine::{Pool, ReceiveOptions};
use cairn_format::send_stream::SEND_HEADER_SIZE;
use common::streams::*;
use common::*;
use std::sync::Arc;

const RESUMABLE: ReceiveOptions = ReceiveOptions {
    force: false,
    resumable: true,
};

fn receive_with(
    pool: &Pool,
    target: &str,
    stream: &[u8],
    options: ReceiveOptions,
) -> Result<String, String> {
    let mut input = stream;
    pool.receive(target, &mut input, options)
        .map(|summary| summary.snapshot)
        .map_err(|err| err.to_string())
}

fn send_resumed(pool: &Pool, token: &str) -> Vec<u8> {
    let mut out = Vec::new();
    pool.send_resumed(token, &mut out, &mut |_| {}).unwrap();
    out
}

/// `stream` cut at `offset`: truncated there, or (`damage`) with the byte there flipped.
fn cut(stream: &[u8], offset: usize, damage: bool) -> Vec<u8> {
    if damage {
        let mut damaged = stream.to_vec();
        damaged[offset] ^= 0x40;
        damaged
    } else {
        stream[..offset].to_vec()
    }
}

/// Volume `tank/vol` and filesystem `tank/fs` on `a`, each with snapshots `@s0` and `@s1`.
fn sources(a: &Pool, rng: &mut Rng) {
    a.create_volume_as(
        "tank/vol",
        1 << 20,
        cairn_dataset::directory::Provisioning::Sparse,
        &[("volblocksize".into(), "8192".into())],
    )
    .unwrap();
    let volume = a.volume("tank/vol").unwrap();
    for round in 0..2 {
        for _ in 0..10 {
            let offset = rng.below(1 << 20);
            let len = (1 + rng.below(60_000)).min((1 << 20) - offset);
            volume
                .write(offset, &pattern(len as usize, rng.next()))
                .unwrap();
        }
        volume.trim(rng.below(100) * 8192, 3 * 8192).unwrap();
        a.snapshot(&[format!("tank/vol@s{round}")], false).unwrap();
    }
    let fs = new_filesystem(a, "tank/fs", &[("atime", "off")]);
    let root = fs.root();
    let mut files = Vec::new();
    for index in 0..6 {
        let (object, _) = fs
            .create(root, format!("f{index}").as_bytes(), file(0o644))
            .unwrap();
        let len = 1 + rng.below(150_000) as usize;
        fs.write(object, rng.below(20_000), &pattern(len, rng.next()))
            .unwrap();
        files.push(object);
    }
    fs.write(files[0], 2 << 20, b"sparse tail").unwrap();
    fs.setxattr(files[1], b"user.a", b"value", cairn_fs::XattrMode::Any)
        .unwrap();
    fs.link(files[2], root, b"hard").unwrap();
    a.snapshot(&["tank/fs@s0".into()], false).unwrap();
    fs.write(files[3], 4096, &pattern(30_000, rng.next()))
        .unwrap();
    fs.unlink(root, b"f4").unwrap();
    let truncate = cairn_fs::SetAttrs {
        size: Some(1000),
        ..Default::default()
    };
    fs.setattr(files[5], truncate).unwrap();
    let (late, _) = fs.create(root, b"late", file(0o600)).unwrap();
    fs.write(late, 0, &pattern(90_000, rng.next())).unwrap();
    a.snapshot(&["tank/fs@s1".into()], false).unwrap();
}

/// A stream to cut, and for an incremental the full stream of its source.
struct Case {
    base: Option<Vec<u8>>,
    stream: Vec<u8>,
}

/// The four streams: full and incremental, of the volume and of the filesystem.
fn streams(a: &Pool) -> Vec<Case> {
    let mut out = Vec::new();
    for dataset in ["tank/vol", "tank/fs"] {
        let (s0, s1) = (format!("{dataset}@s0"), format!("{dataset}@s1"));
        out.push(Case {
            base: None,
            stream: send(a, &s1, None),
        });
        out.push(Case {
            base: Some(send(a, &s0, None)),
            stream: send(a, &s1, Some("@s0")),
        });
    }
    out
}

/// Receives `stream` into `target` with `-s`, cut at `offset` (and its resumed streams cut
/// again at times), resuming from each token until it completes.
fn receive_cut(a: &Pool, b: &Pool, target: &str, stream: &[u8], offset: usize, rng: &mut Rng) {
    let damage = rng.below(3) == 0;
    let mut attempt = cut(stream, offset, damage);
    for round in 0.. {
        match receive_with(b, target, &attempt, RESUMABLE) {
            Ok(made) => {
                assert_eq!(made, format!("{target}@s1"));
                return;
            }
            Err(err) => assert!(round < 4, "offset {offset} round {round}: {err}"),
        }
        let token = b
            .receive_resume_token(target)
            .unwrap_or_else(|| panic!("offset {offset} round {round}: no token"));
        let rest = send_resumed(a, &token);
        attempt = if rng.below(4) == 0 && rest.len() > SEND_HEADER_SIZE + 1 {
            let again =
                SEND_HEADER_SIZE + rng.below((rest.len() - SEND_HEADER_SIZE) as u64) as usize;
            cut(&rest, again, rng.below(2) == 0)
        } else {
            rest
        };
    }
}

/// Destroys `target` and its snapshots.
fn destroy(pool: &Pool, target: &str) {
    let snapshots: Vec<String> = pool
        .snapshots(Some(target))
        .unwrap()
        .into_iter()
        .map(|listing| listing.name)
        .collect();
    pool.destroy_snapshots(&snapshots).unwrap();
    pool.destroy_dataset(target).unwrap();
}

#[test]
fn a_stream_cut_at_100_offsets_resumes_to_what_was_sent() {
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = create_mirror(&device_paths(dir_a.path(), 1), plain_opener());
    let b = create_mirror(&device_paths(dir_b.path(), 1), plain_opener());
    let mut rng = Rng(36);
    sources(&a, &mut rng);
    let streams = streams(&a);
    // What an uncut receive of each stream makes: what every resumed one must equal.
    for (index, Case { base, stream }) in streams.iter().enumerate() {
        let reference = format!("tank/ref{index}");
        if let Some(base) = base {
            receive(&b, &reference, base).unwrap();
        }
        receive(&b, &reference, stream).unwrap();
    }
    for trial in 0..100 {
        let Case { base, stream } = &streams[trial % streams.len()];
        let target = format!("tank/c{trial}");
        if let Some(base) = base {
            receive(&b, &target, base).unwrap();
        }
        let offset =
            SEND_HEADER_SIZE + rng.below((stream.len() - SEND_HEADER_SIZE) as u64) as usize;
        receive_cut(&a, &b, &target, stream, offset, &mut rng);
        assert_eq!(b.receive_resume_token(&target), None, "trial {trial}");
        let reference = format!("tank/ref{}@s1", trial % streams.len());
        assert_same_objects(&b, &reference, &b, &format!("{target}@s1"));
        destroy(&b, &target);
        if trial % 25 == 24 {
            b.sync().unwrap();
            let report = b.check().unwrap();
            assert!(report.is_clean(), "trial {trial}: {report:?}");
        }
    }
}

#[test]
fn a_partial_receive_survives_import_and_abandon_leaves_no_trace() {
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = create_mirror(&device_paths(dir_a.path(), 1), plain_opener());
    let b = create_mirror(&device_paths(dir_b.path(), 1), plain_opener());
    sources(&a, &mut Rng(7));
    let stream = send(&a, "tank/fs@s1", None);
    let half = stream.len() / 2;
    assert!(receive_with(&b, "tank/copy", &stream[..half], RESUMABLE).is_err());
    let token = b.receive_resume_token("tank/copy").expect("a token");
    b.export().unwrap();
    let b = import(&device_paths(dir_b.path(), 1), plain_opener()).unwrap();
    assert_eq!(
        b.receive_resume_token("tank/copy").as_deref(),
        Some(token.as_str())
    );
    // Abandoned: no token, nothing kept, space back; a whole stream is then received.
    b.abandon_partial_receive("tank/copy").unwrap();
    assert_eq!(b.receive_resume_token("tank/copy"), None);
    let err = b
        .abandon_partial_receive("tank/copy")
        .unwrap_err()
        .to_string();
    assert!(err.contains("no partial receive"), "{err}");
    assert!(receive_with(&b, "tank/copy", &stream[..half], RESUMABLE).is_err());
    b.export().unwrap();
    let b = import(&device_paths(dir_b.path(), 1), plain_opener()).unwrap();
    let token = b
        .receive_resume_token("tank/copy")
        .expect("a token after import");
    receive_with(&b, "tank/copy", &send_resumed(&a, &token), RESUMABLE).unwrap();
    receive(&b, "tank/whole", &stream).unwrap();
    assert_same_objects(&b, "tank/whole@s1", &b, "tank/copy@s1");
    assert!(b.check().unwrap().is_clean());
    // Without -s a cut receive keeps nothing, as before.
    assert!(receive(&b, "tank/other", &stream[..half]).is_err());
    assert_eq!(b.receive_resume_token("tank/other"), None);
    assert!(b.abandon_partial_receive("tank/other").is_err());
    let names: Vec<String> = b.datasets().unwrap().into_iter().map(|d| d.name).collect();
    assert!(
        !names.iter().any(|name| name.contains("other")),
        "{names:?}"
    );
}

#[test]
fn bad_tokens_and_mismatched_streams_are_refused_by_name() {
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = create_mirror(&device_paths(dir_a.path(), 1), plain_opener());
    let b = create_mirror(&device_paths(dir_b.path(), 1), plain_opener());
    sources(&a, &mut Rng(8));
    let send_err = |token: &str| {
        let mut out = Vec::new();
        let err = a
            .send_resumed(token, &mut out, &mut |_| {})
            .unwrap_err()
            .to_string();
        assert!(out.is_empty(), "{token}: nothing is written");
        err
    };
    assert!(send_err("garbage").contains("not a cairn resume token"));
    let stream = send(&a, "tank/vol@s1", None);
    assert!(receive_with(&b, "tank/copy", &stream[..stream.len() / 3], RESUMABLE).is_err());
    let token = b.receive_resume_token("tank/copy").unwrap();
    let mut damaged = token.clone().into_bytes();
    damaged[20] = if damaged[20] == b'a' { b'b' } else { b'a' };
    let err = send_err(&String::from_utf8(damaged).unwrap());
    assert!(err.contains("checksum"), "{err}");
    // A whole stream into a target with a partial receive: refused, naming -A.
    let err = receive_with(&b, "tank/copy", &stream, RESUMABLE).unwrap_err();
    assert!(err.contains("receive -A"), "{err}");
    // A resumed stream into a target without a partial receive.
    let rest = send_resumed(&a, &token);
    let err = receive_with(&b, "tank/elsewhere", &rest, RESUMABLE).unwrap_err();
    assert!(err.contains("no partial receive"), "{err}");
    // A resumed stream of another snapshot than the partial receive's.
    assert!(
        receive_with(
            &b,
            "tank/fscopy",
            &send(&a, "tank/fs@s1", None)[..5000],
            RESUMABLE
        )
        .is_err()
    );
    let fs_token = b.receive_resume_token("tank/fscopy").unwrap();
    let err = receive_with(&b, "tank/copy", &send_resumed(&a, &fs_token), RESUMABLE).unwrap_err();
    assert!(err.contains("guid"), "{err}");
    // The sender's snapshot is gone.
    a.destroy_snapshot("tank/vol@s1").unwrap();
    let err = send_err(&token);
    assert!(err.contains("not in pool"), "{err}");
    // The partial receives are intact through all that and still abandon cleanly.
    b.abandon_partial_receive("tank/copy").unwrap();
    b.abandon_partial_receive("tank/fscopy").unwrap();
    assert!(b.check().unwrap().is_clean());
}

/// Receives `stream` into a fresh pool on emulated devices (small txgs: 256 KiB of dirty data
/// at most) whose power is cut after `cut_after` device operations of the receive (never, with
/// `None`). Returns whether the receive completed and synced before the cut, and the device
/// operations the receive issued.
fn receive_until_power_cut(
    paths: &[std::path::PathBuf],
    stream: &[u8],
    seed: u64,
    cut_after: Option<u64>,
) -> (bool, u64) {
    create_mirror(paths, plain_opener()).close().unwrap();
    let power = Arc::new(PowerSwitch::with_seed(seed));
    let txg = cairn_pool::txg::TxgConfig {
        dirty_bytes_max: 256 << 10,
        ..manual_txg()
    };
    let pool = Pool::import(
        &cairn_engine::ImportSource::Devices(specs(paths)),
        "tank",
        cairn_engine::PoolOptions {
            txg,
            ..options(emulated_opener(seed, Some(power.clone())))
        },
    )
    .unwrap();
    let before = power.ops_seen();
    if let Some(cut_after) = cut_after {
        power.arm_after_ops(cut_after);
    }
    let done = receive_with(&pool, "tank/copy", stream, RESUMABLE).is_ok();
    let done = done && pool.sync().is_ok() && !power.tripped();
    let ops = power.ops_seen() - before;
    power.disarm();
    drop(pool);
    (done, ops)
}

/// After a power cut: import, `check`, then the resume (or, with no token, the whole stream
/// again) to `tank/copy@s1` equal to `reference`. Returns whether a token was resumed.
fn recover_after_cut(a: &Pool, paths: &[std::path::PathBuf], stream: &[u8], what: &str) -> bool {
    let b = import(paths, plain_opener()).unwrap_or_else(|err| panic!("{what}: import: {err}"));
    let report = b.check().unwrap();
    assert!(report.is_clean(), "{what}: {report:?}");
    let exists = b.datasets().unwrap().iter().any(|d| d.name == "tank/copy");
    let token = b.receive_resume_token("tank/copy");
    match &token {
        Some(token) => {
            assert!(!exists, "{what}: a token beside a finished receive");
            receive_with(&b, "tank/copy", &send_resumed(a, token), RESUMABLE)
                .unwrap_or_else(|err| panic!("{what}: resume: {err}"));
        }
        None if !exists => {
            receive_with(&b, "tank/copy", stream, RESUMABLE).unwrap();
        }
        None => {}
    }
    receive(&b, "tank/whole", stream).unwrap();
    assert_same_objects(&b, "tank/whole@s1", &b, "tank/copy@s1");
    let report = b.check().unwrap();
    assert!(report.is_clean(), "{what} after the resume: {report:?}");
    b.close().unwrap();
    token.is_some()
}

#[test]
fn power_cuts_while_receiving_leave_a_durable_token_that_resumes() {
    let dir_a = tempfile::tempdir().unwrap();
    let a = create_mirror(&device_paths(dir_a.path(), 1), plain_opener());
    a.create_volume_as(
        "tank/big",
        4 << 20,
        cairn_dataset::directory::Provisioning::Sparse,
        &[("volblocksize".into(), "8192".into())],
    )
    .unwrap();
    a.volume("tank/big")
        .unwrap()
        .write(0, &pattern(4 << 20, 5))
        .unwrap();
    a.snapshot(&["tank/big@s1".into()], false).unwrap();
    let stream = send(&a, "tank/big@s1", None);
    let rounds: u64 = std::env::var("CAIRN_RESUME_CUTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(12);
    // Calibrate: the device operations of a whole receive.
    let total_ops = {
        let dir = tempfile::tempdir().unwrap();
        let (done, ops) = receive_until_power_cut(&device_paths(dir.path(), 2), &stream, 0, None);
        assert!(done && ops > 100, "{ops} operations");
        ops
    };
    let (mut resumed, mut rng) = (0, Rng(99));
    for seed in 1..=rounds {
        let dir = tempfile::tempdir().unwrap();
        let paths = device_paths(dir.path(), 2);
        let cut_after = 1 + rng.below(total_ops);
        let (completed, _) = receive_until_power_cut(&paths, &stream, seed, Some(cut_after));
        let what = format!("seed {seed} cut after {cut_after} of {total_ops} operations");
        let had_token = recover_after_cut(&a, &paths, &stream, &what);
        assert!(
            !(completed && had_token),
            "{what}: a token after the receive completed"
        );
        resumed += u64::from(had_token);
    }
    eprintln!("{rounds} power cuts, {resumed} resumed from their token");
    assert!(
        resumed * 3 >= rounds * 2,
        "only {resumed} of {rounds} cuts left a token"
    );
}

#[test]
fn a_receive_into_a_full_pool_stops_with_enospc_keeps_its_token_and_resumes_once_room_is_made() {
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = create_mirror(&device_paths(dir_a.path(), 1), plain_opener());
    let b = create_mirror(&device_paths(dir_b.path(), 1), plain_opener());
    let write_volume = |pool: &Pool, name: &str, bytes: u64, seed: u64| {
        pool.create_volume_as(
            name,
            bytes,
            cairn_dataset::directory::Provisioning::Sparse,
            &[("volblocksize".into(), "65536".into())],
        )
        .unwrap();
        let volume = pool.volume(name).unwrap();
        for (index, at) in (0..bytes).step_by(1 << 20).enumerate() {
            volume
                .write(at, &pattern(1 << 20, seed + index as u64))
                .unwrap();
        }
        pool.sync().unwrap();
    };
    write_volume(&a, "tank/vol", 24 << 20, 1);
    a.snapshot(&["tank/vol@s1".into()], false).unwrap();
    let stream = send(&a, "tank/vol@s1", None);
    write_volume(&b, "tank/fill", 44 << 20, 100);
    let err = receive_with(&b, "tank/copy", &stream, RESUMABLE).unwrap_err();
    assert!(err.contains("no room"), "{err}");
    let token = b
        .receive_resume_token("tank/copy")
        .expect("a token after ENOSPC");
    // The source is untouched: it sends the same stream.
    assert!(
        send(&a, "tank/vol@s1", None) == stream,
        "the source changed"
    );
    assert!(b.check().unwrap().is_clean());
    // Room made: the resume completes.
    b.destroy_dataset("tank/fill").unwrap();
    for _ in 0..200 {
        if info(&b, "tank").available_bytes > 40 << 20 {
            break;
        }
        b.sync().unwrap();
    }
    receive_with(&b, "tank/copy", &send_resumed(&a, &token), RESUMABLE).unwrap();
    assert_same_objects(&a, "tank/vol@s1", &b, "tank/copy@s1");
    assert!(b.check().unwrap().is_clean());
}
