//! Hostile input: what a broken or malicious peer sends gets an error, never a panic and never
//! an allocation sized by a length it claims.
//!
//! A counting global allocator records, per thread and only while armed, the largest single
//! allocation; the tests arm it around each decode of a claimed 4 GiB (or 2 GiB) length and
//! require that nothing near the claim was asked for, including when the caller's own bound
//! would allow it (`max_data_bytes = usize::MAX`, a 4 GiB record limit).

mod peak_alloc;

use cairn_nfs::mount::{decode_mount_call, decode_mount_reply};
use cairn_nfs::nfs3::*;
use cairn_nfs::record::{RecordDecoder, RecordError, read_record};
use cairn_nfs::rpc::{
    AuthStat, AuthSys, CallError, CallHeader, Credential, MachineName, OpaqueAuth, RejectStat,
    ReplyBody, ReplyHeader, parse_call,
};
use cairn_nfs::{Encoder, XdrError};
use peak_alloc::largest_allocation;

/// Far below any claimed length used here, far above what the hand-made inputs need.
const SMALL_BYTES: usize = 64 * 1024;

fn words(words: &[u32]) -> Vec<u8> {
    words.iter().flat_map(|w| w.to_be_bytes()).collect()
}

fn handle8() -> Vec<u8> {
    words(&[8, 0x0102_0304, 0x0506_0708])
}

#[test]
fn counting_allocator_sees_a_claimed_allocation() {
    // The instrument itself can fail: a decoder that trusted the claim would be caught.
    let (len, peak) = largest_allocation(|| vec![0u8; 10 * SMALL_BYTES].len());
    assert_eq!(len, 10 * SMALL_BYTES);
    assert!(peak >= 10 * SMALL_BYTES);
}

#[test]
fn length_of_u32_max_in_any_field_is_refused_without_allocating() {
    let max = u32::MAX;
    let mut cases: Vec<(&str, u32, Vec<u8>)> = Vec::new();
    // A file handle claiming 4 GiB.
    cases.push(("GETATTR handle", 1, words(&[max, 1, 2, 3])));
    // WRITE data claiming 4 GiB (count agrees, so only the length can stop it).
    let mut write = handle8();
    write.extend(words(&[0, 0, max, 0, max, 0xdead_beef]));
    cases.push(("WRITE data", 7, write));
    // A name claiming 4 GiB.
    let mut lookup = handle8();
    lookup.extend(words(&[max, 0x6869_0000]));
    cases.push(("LOOKUP name", 3, lookup));
    // A symlink target claiming 4 GiB after a valid name and empty sattr3.
    let mut symlink = handle8();
    symlink.extend(words(&[1, 0x6100_0000, 0, 0, 0, 0, 0, 0, max, 1]));
    cases.push(("SYMLINK target", 10, symlink));
    for (what, proc, bytes) in &cases {
        let (result, peak) = largest_allocation(|| decode_call(*proc, bytes, usize::MAX));
        assert!(result.is_err(), "{what}: {result:?}");
        assert!(peak < SMALL_BYTES, "{what}: allocated {peak} bytes");
    }
    // MOUNT: a path, and a reply's auth flavor count.
    let (result, peak) = largest_allocation(|| decode_mount_call(1, &words(&[max, 0x2f00_0000])));
    assert!(matches!(result, Err(XdrError::TooLong { .. })));
    assert!(peak < SMALL_BYTES);
    let mut mnt = words(&[0]);
    mnt.extend(handle8());
    mnt.extend(words(&[max, 1, 1]));
    let (result, peak) = largest_allocation(|| decode_mount_reply(1, &mnt));
    assert!(matches!(result, Err(XdrError::TooLong { .. })));
    assert!(peak < SMALL_BYTES);
}

#[test]
fn huge_claims_in_the_rpc_header_are_refused_without_allocating() {
    // Credential body claiming 4 GiB.
    let cred = words(&[7, 0, 2, 100_003, 3, 0, 1, u32::MAX, 0, 0]);
    let (result, peak) = largest_allocation(|| parse_call(&cred));
    assert!(matches!(
        result,
        Err(CallError::BadHeader {
            xid: 7,
            stat: AuthStat::BadCred,
            ..
        })
    ));
    assert!(peak < SMALL_BYTES);
    // AUTH_SYS body whose group count claims 4 Gi entries.
    let body = words(&[0, 0, 0, 0, u32::MAX, 1, 2]);
    let mut record = words(&[7, 0, 2, 100_003, 3, 0, 1, body.len() as u32]);
    record.extend(&body);
    record.extend(words(&[0, 0]));
    let (result, peak) = largest_allocation(|| parse_call(&record));
    assert!(
        matches!(result, Err(CallError::BadHeader { .. })),
        "{result:?}"
    );
    assert!(peak < SMALL_BYTES);
}

#[test]
fn record_of_claimed_gigabytes_costs_only_what_arrives() {
    // Bound low: refused at the header.
    let mut decoder = RecordDecoder::new(1 << 20);
    let mut input = &[0xff, 0xff, 0xff, 0xff][..];
    assert!(matches!(
        decoder.feed(&mut input),
        Err(RecordError::TooLarge { .. })
    ));
    // Bound high enough to accept the claim: the buffer still grows only with real bytes.
    let mut decoder = RecordDecoder::new(usize::MAX);
    let stream = [vec![0xff, 0xff, 0xff, 0xff], vec![0xab; 1000]].concat();
    let (result, peak) = largest_allocation(|| decoder.feed(&mut &stream[..]).map(|r| r.is_some()));
    assert!(matches!(result, Ok(false)));
    assert_eq!(decoder.pending_bytes(), 1000);
    assert!(peak < SMALL_BYTES, "allocated {peak} bytes");
    // The blocking reader: claimed 2 GiB, 1000 bytes, then the end of the stream.
    let (result, peak) = largest_allocation(|| read_record(&mut &stream[..], usize::MAX));
    assert!(matches!(
        result,
        Err(RecordError::Truncated {
            received_bytes: 1000
        })
    ));
    assert!(peak < SMALL_BYTES, "allocated {peak} bytes");
}

fn rpc_record(procedure: u32, call: &Nfs3Call) -> Vec<u8> {
    let header = CallHeader {
        xid: 0x1234_5678,
        program: cairn_nfs::rpc::PROGRAM_NFS,
        version: NFS_V3,
        procedure,
        credential: Credential::Sys(AuthSys {
            stamp: 1,
            machine_name: MachineName::new(&b"client"[..]).expect("short"),
            uid: 1000,
            gid: 1000,
            gids: vec![4, 24, 27],
        }),
        verifier: OpaqueAuth::none(),
    };
    let mut enc = Encoder::new();
    enc.put(&header);
    enc.put(call);
    enc.into_bytes()
}

fn fh(byte: u8) -> FileHandle {
    FileHandle::new(vec![byte; 16]).expect("short")
}

fn name(text: &str) -> Filename {
    Filename::new(text.as_bytes()).expect("short")
}

fn sample_calls() -> Vec<Nfs3Call> {
    let attributes = Sattr3 {
        mode: Some(0o644),
        uid: Some(1000),
        gid: None,
        size_bytes: Some(0),
        atime: SetTime::ServerTime,
        mtime: SetTime::ClientTime(NfsTime3 {
            seconds: 1_700_000_000,
            nseconds: 5,
        }),
    };
    let location = DirOpArgs3 {
        dir: fh(1),
        name: name("new-file"),
    };
    vec![
        Nfs3Call::Write(WriteArgs {
            file: fh(2),
            offset_bytes: 8192,
            stable: StableHow::FileSync,
            data: (0..=255).collect(),
        }),
        Nfs3Call::Create(CreateArgs {
            location: location.clone(),
            how: CreateHow::Guarded(attributes.clone()),
        }),
        Nfs3Call::Create(CreateArgs {
            location,
            how: CreateHow::Exclusive(*b"verifier"),
        }),
        Nfs3Call::Rename(RenameArgs {
            from: DirOpArgs3 {
                dir: fh(1),
                name: name("a"),
            },
            to: DirOpArgs3 {
                dir: fh(3),
                name: name("b-longer-name"),
            },
        }),
        Nfs3Call::Setattr(SetattrArgs {
            object: fh(4),
            new_attributes: attributes,
            guard: Some(NfsTime3 {
                seconds: 9,
                nseconds: 9,
            }),
        }),
    ]
}

#[test]
fn every_truncation_of_write_create_rename_setattr_is_an_error() {
    for call in sample_calls() {
        let proc = call.procedure().as_u32();
        let record = rpc_record(proc, &call);
        // The whole record decodes to the call.
        let (header, args) = parse_call(&record).expect("whole record");
        assert_eq!(header.procedure, proc);
        assert_eq!(decode_call(proc, args, 1 << 20), Ok(call.clone()));
        // Every cut fails, in the header or in the arguments.
        for cut in 0..record.len() {
            let outcome = parse_call(&record[..cut])
                .map_err(|_| ())
                .and_then(|(header, args)| {
                    decode_call(header.procedure, args, 1 << 20).map_err(|_| ())
                });
            assert!(
                outcome.is_err(),
                "{:?} cut at {cut} decoded",
                call.procedure()
            );
        }
    }
}

#[test]
fn bounds_are_enforced_one_past_the_maximum() {
    assert!(FileHandle::new(vec![0; 64]).is_ok());
    assert!(FileHandle::new(vec![0; 65]).is_err());
    assert!(Filename::new(vec![b'a'; 256]).is_err());
    assert!(NfsPath::new(vec![b'a'; 1025]).is_err());
    assert!(MachineName::new(vec![b'a'; 256]).is_err());
    // On the wire: a 65-byte handle, a 256-byte name, WRITE data one past the caller's limit.
    let mut getattr = words(&[65]);
    getattr.extend(vec![0; 68]);
    assert!(matches!(
        decode_call(1, &getattr, 1 << 20),
        Err(XdrError::TooLong { .. })
    ));
    let mut lookup = handle8();
    lookup.extend(words(&[256]));
    lookup.extend(vec![b'a'; 256]);
    assert!(matches!(
        decode_call(3, &lookup, 1 << 20),
        Err(XdrError::TooLong { .. })
    ));
    let write = |len: u32| {
        let mut bytes = handle8();
        bytes.extend(words(&[0, 0, len, 2, len]));
        bytes.extend(vec![7; len as usize]);
        bytes
    };
    assert!(decode_call(7, &write(4096), 4096).is_ok());
    assert!(matches!(
        decode_call(7, &write(4100), 4096),
        Err(XdrError::TooLong { .. })
    ));
    // 17 groups in AUTH_SYS; a 401-byte verifier.
    let mut body = words(&[0, 0, 0, 0, 17]);
    body.extend(vec![0; 17 * 4]);
    let mut record = words(&[1, 0, 2, 100_003, 3, 0, 1, body.len() as u32]);
    record.extend(&body);
    record.extend(words(&[0, 0]));
    assert!(matches!(
        parse_call(&record),
        Err(CallError::BadHeader { .. })
    ));
    let mut record = words(&[1, 0, 2, 100_003, 3, 0, 0, 0, 0, 401]);
    record.extend(vec![0; 404]);
    assert!(matches!(
        parse_call(&record),
        Err(CallError::BadHeader {
            stat: AuthStat::BadVerf,
            ..
        })
    ));
}

#[test]
fn write_count_must_match_its_data() {
    let mut bytes = handle8();
    bytes.extend(words(&[0, 0, 8, 0, 4, 0xaabb_ccdd]));
    assert!(matches!(
        decode_call(7, &bytes, 1 << 20),
        Err(XdrError::Mismatch { .. })
    ));
}

#[test]
fn undefined_discriminants_are_refused() {
    let cases: Vec<(&str, u32, Vec<u8>)> = vec![
        (
            "stable_how 3",
            7,
            [handle8(), words(&[0, 0, 0, 3, 0])].concat(),
        ),
        (
            "createmode 3",
            8,
            [handle8(), words(&[1, 0x6100_0000, 3])].concat(),
        ),
        (
            "time_how 3",
            2,
            [handle8(), words(&[0, 0, 0, 0, 3, 0, 0])].concat(),
        ),
        (
            "bool 2 in sattr3",
            2,
            [handle8(), words(&[2, 0, 0, 0, 0, 0, 0])].concat(),
        ),
        (
            "ftype 0 in MKNOD",
            11,
            [handle8(), words(&[1, 0x6100_0000, 0])].concat(),
        ),
        (
            "ftype 8 in MKNOD",
            11,
            [handle8(), words(&[1, 0x6100_0000, 8])].concat(),
        ),
    ];
    for (what, proc, bytes) in cases {
        let result = decode_call(proc, &bytes, 1 << 20);
        assert!(
            matches!(result, Err(XdrError::BadDiscriminant { .. })),
            "{what}: {result:?}"
        );
    }
    assert_eq!(
        decode_call(22, &[], 1 << 20),
        Err(XdrError::UnknownProcedure(22))
    );
    // A reply with an nfsstat3 RFC 1813 does not define.
    assert!(matches!(
        decode_reply(1, &words(&[12345]), 1 << 20),
        Err(XdrError::BadDiscriminant { .. })
    ));
    // MOUNT has no procedure 6, PORTMAP's CALLIT (5) is not served.
    assert!(matches!(
        decode_mount_reply(6, &[]),
        Err(XdrError::UnknownProcedure(6))
    ));
    assert!(matches!(
        cairn_nfs::portmap::decode_portmap_call(5, &[]),
        Err(XdrError::UnknownProcedure(5))
    ));
}

#[test]
fn each_kind_of_bad_call_gets_the_reply_rfc_5531_asks_for() {
    assert!(matches!(
        parse_call(&[0, 0, 0]),
        Err(CallError::Unreadable(_))
    ));
    let reply = parse_call(&words(&[5, 1])).expect_err("a reply is not a call");
    assert_eq!(
        reply,
        CallError::NotACall {
            xid: 5,
            msg_type: 1
        }
    );
    assert_eq!(reply.reply(), None);
    let mismatch = parse_call(&words(&[6, 0, 3, 100_003, 3, 0])).expect_err("rpcvers 3");
    assert_eq!(
        mismatch.reply(),
        Some(ReplyHeader::denied(
            6,
            RejectStat::RpcMismatch { low: 2, high: 2 }
        ))
    );
    // An AUTH_SYS credential with bytes after its groups.
    let body = words(&[0, 0, 0, 0, 0, 99]);
    let mut record = words(&[8, 0, 2, 100_003, 3, 0, 1, body.len() as u32]);
    record.extend(&body);
    record.extend(words(&[0, 0]));
    let bad = parse_call(&record).expect_err("trailing credential bytes");
    let denial = bad.reply().expect("answered");
    assert_eq!(denial.xid, 8);
    assert_eq!(
        denial.body,
        ReplyBody::Denied(RejectStat::AuthError(AuthStat::BadCred))
    );
}
