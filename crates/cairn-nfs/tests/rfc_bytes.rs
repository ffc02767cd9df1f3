//! Byte strings laid out by hand from the RFCs' XDR (RFC 5531 §9, RFC 1813 §3.3 and appendix I,
//! RFC 1833 §3) decode to the expected fields, and typed replies encode to exactly the bytes
//! the RFCs describe. Round-trip tests cannot catch a codec that is consistently wrong
//! (fields swapped in both directions); these can.

use cairn_nfs::mount::{MntOk, MountReply};
use cairn_nfs::nfs3::*;
use cairn_nfs::portmap::{Mapping, PortmapCall, PortmapReply, decode_portmap_call};
use cairn_nfs::record::RecordDecoder;
use cairn_nfs::rpc::{
    AcceptStat, AuthStat, AuthSys, CallHeader, Credential, MachineName, OpaqueAuth, RejectStat,
    ReplyHeader, parse_call,
};
use cairn_nfs::{Encoder, XdrEncode};

/// Appends big-endian words.
fn w(out: &mut Vec<u8>, words: &[u32]) {
    for word in words {
        out.extend_from_slice(&word.to_be_bytes());
    }
}

fn encode_reply(xid: u32, body: &impl XdrEncode) -> Vec<u8> {
    let mut enc = Encoder::for_record();
    enc.put(&ReplyHeader::success(xid));
    enc.put(body);
    enc.into_record().expect("small")
}

#[test]
fn lookup_hello_with_an_8_byte_handle_decodes_to_its_fields() {
    let mut msg = Vec::new();
    // xid, CALL, rpcvers 2, NFS (100003), version 3, LOOKUP (3)
    w(&mut msg, &[0x0102_0304, 0, 2, 100_003, 3, 3]);
    // credential: AUTH_SYS, 32 bytes: stamp, "box" (3 + 1 pad), uid 1000, gid 100, gids [10, 20]
    w(&mut msg, &[1, 32, 0x5f5e_0001, 3]);
    msg.extend_from_slice(b"box\0");
    w(&mut msg, &[1000, 100, 2, 10, 20]);
    // verifier: AUTH_NONE, empty
    w(&mut msg, &[0, 0]);
    // diropargs3: handle of 8 bytes, name "hello" (5 + 3 pad)
    w(&mut msg, &[8]);
    msg.extend_from_slice(&[1, 2, 3, 4, 5, 6, 7, 8]);
    w(&mut msg, &[5]);
    msg.extend_from_slice(b"hello\0\0\0");
    assert_eq!(msg.len(), 24 + 8 + 32 + 8 + 12 + 12);

    // Framed as one last fragment, as a client sends it over TCP, and fed in two pieces.
    let mut stream = Vec::new();
    w(&mut stream, &[0x8000_0000 | msg.len() as u32]);
    stream.extend_from_slice(&msg);
    let mut decoder = RecordDecoder::new(1 << 20);
    let (first, second) = stream.split_at(10);
    assert_eq!(decoder.feed(&mut &first[..]).expect("valid"), None);
    let record = decoder
        .feed(&mut &second[..])
        .expect("valid")
        .expect("whole record");
    assert_eq!(record, msg);

    let (header, args) = parse_call(&record).expect("valid call");
    assert_eq!(
        header,
        CallHeader {
            xid: 0x0102_0304,
            program: 100_003,
            version: 3,
            procedure: 3,
            credential: Credential::Sys(AuthSys {
                stamp: 0x5f5e_0001,
                machine_name: MachineName::new(&b"box"[..]).expect("short"),
                uid: 1000,
                gid: 100,
                gids: vec![10, 20],
            }),
            verifier: OpaqueAuth::none(),
        }
    );
    assert_eq!(args.len(), 24);
    let call = decode_call(header.procedure, args, 1 << 20).expect("valid LOOKUP");
    let Nfs3Call::Lookup(what) = call else {
        panic!("not a LOOKUP: {call:?}");
    };
    assert_eq!(what.dir.as_bytes(), &[1, 2, 3, 4, 5, 6, 7, 8]);
    assert_eq!(what.name.as_bytes(), b"hello");
}

fn sample_fattr() -> Fattr3 {
    Fattr3 {
        ftype: Ftype3::Reg,
        mode: 0o644,
        nlink: 1,
        uid: 1000,
        gid: 100,
        size_bytes: 0x1_0000_0002,
        used_bytes: 4096,
        rdev: SpecData3 { major: 0, minor: 0 },
        fsid: 0x0102_0304_0506_0708,
        fileid: 42,
        atime: NfsTime3 {
            seconds: 10,
            nseconds: 11,
        },
        mtime: NfsTime3 {
            seconds: 20,
            nseconds: 21,
        },
        ctime: NfsTime3 {
            seconds: 30,
            nseconds: 31,
        },
    }
}

fn sample_fattr_words() -> Vec<u32> {
    vec![
        1,
        0o644,
        1,
        1000,
        100,
        1,
        2,
        0,
        4096,
        0,
        0,
        0x0102_0304,
        0x0506_0708,
        0,
        42,
        10,
        11,
        20,
        21,
        30,
        31,
    ]
}

#[test]
fn getattr_reply_is_laid_out_as_rfc_1813_says() {
    let bytes = encode_reply(9, &Nfs3Reply::Getattr(Outcome::Ok(sample_fattr())));
    let mut expected = Vec::new();
    // record mark: last fragment, 24 + 4 + 84 bytes
    w(&mut expected, &[0x8000_0000 | (24 + 4 + 84)]);
    // xid, REPLY, MSG_ACCEPTED, verifier AUTH_NONE empty, SUCCESS
    w(&mut expected, &[9, 1, 0, 0, 0, 0]);
    // NFS3_OK, fattr3 (21 words)
    w(&mut expected, &[0]);
    w(&mut expected, &sample_fattr_words());
    assert_eq!(bytes, expected);
}

#[test]
fn write_replies_are_laid_out_as_rfc_1813_says() {
    let ok = Nfs3Reply::Write(Outcome::Ok(WriteOk {
        file_wcc: WccData {
            before: Some(WccAttr {
                size_bytes: 8192,
                mtime: NfsTime3 {
                    seconds: 1,
                    nseconds: 2,
                },
                ctime: NfsTime3 {
                    seconds: 3,
                    nseconds: 4,
                },
            }),
            after: None,
        },
        count_bytes: 4096,
        committed: StableHow::FileSync,
        verf: *b"VERIFIER",
    }));
    let mut enc = Encoder::new();
    enc.put(&ok);
    let mut expected = Vec::new();
    w(&mut expected, &[0, 1, 0, 8192, 1, 2, 3, 4, 0, 4096, 2]);
    expected.extend_from_slice(b"VERIFIER");
    assert_eq!(enc.into_bytes(), expected);

    let stale = Nfs3Reply::Write(Outcome::Fail(Nfs3Error::Stale, WccData::empty()));
    let mut enc = Encoder::new();
    enc.put(&stale);
    let mut expected = Vec::new();
    w(&mut expected, &[70, 0, 0]);
    assert_eq!(enc.into_bytes(), expected);
}

#[test]
fn readdir_reply_is_a_linked_list_of_entries() {
    let mut bytes = Vec::new();
    // NFS3_OK, no dir attributes, cookieverf
    w(&mut bytes, &[0, 0]);
    bytes.extend_from_slice(b"cookieV!");
    // entry ".": fileid 2, cookie 1; entry "..": fileid 1, cookie 2; end; eof
    w(&mut bytes, &[1, 0, 2, 1]);
    bytes.extend_from_slice(b".\0\0\0");
    w(&mut bytes, &[0, 1, 1, 0, 1, 2]);
    bytes.extend_from_slice(b"..\0\0");
    w(&mut bytes, &[0, 2, 0, 1]);
    let reply = decode_reply(16, &bytes, 1 << 20).expect("valid READDIR result");
    let entry = |fileid, name: &str, cookie| Entry3 {
        fileid,
        name: Filename::new(name.as_bytes()).expect("short"),
        cookie,
    };
    assert_eq!(
        reply,
        Nfs3Reply::Readdir(Outcome::Ok(DirListOk {
            dir_attributes: None,
            cookieverf: *b"cookieV!",
            entries: vec![entry(2, ".", 1), entry(1, "..", 2)],
            eof: true,
        }))
    );
}

#[test]
fn rpc_error_replies_are_laid_out_as_rfc_5531_says() {
    let cases = [
        (
            ReplyHeader::accepted(1, AcceptStat::ProgMismatch { low: 2, high: 3 }),
            vec![1, 1, 0, 0, 0, 2, 2, 3],
        ),
        (
            ReplyHeader::accepted(2, AcceptStat::ProgUnavail),
            vec![2, 1, 0, 0, 0, 1],
        ),
        (
            ReplyHeader::accepted(3, AcceptStat::ProcUnavail),
            vec![3, 1, 0, 0, 0, 3],
        ),
        (
            ReplyHeader::accepted(4, AcceptStat::GarbageArgs),
            vec![4, 1, 0, 0, 0, 4],
        ),
        (
            ReplyHeader::accepted(5, AcceptStat::SystemErr),
            vec![5, 1, 0, 0, 0, 5],
        ),
        (
            ReplyHeader::denied(6, RejectStat::RpcMismatch { low: 2, high: 2 }),
            vec![6, 1, 1, 0, 2, 2],
        ),
        (
            ReplyHeader::denied(7, RejectStat::AuthError(AuthStat::TooWeak)),
            vec![7, 1, 1, 1, 5],
        ),
    ];
    for (header, words) in cases {
        let mut enc = Encoder::new();
        enc.put(&header);
        let mut expected = Vec::new();
        w(&mut expected, &words);
        assert_eq!(enc.into_bytes(), expected, "{header:?}");
    }
}

#[test]
fn mount_and_portmap_bytes() {
    // MNT result: MNT3_OK, a 4-byte handle, flavors [AUTH_SYS].
    let reply = MountReply::Mnt(Ok(MntOk {
        handle: FileHandle::new(&b"root"[..]).expect("short"),
        auth_flavors: vec![1],
    }));
    let mut enc = Encoder::new();
    enc.put(&reply);
    let mut expected = Vec::new();
    w(&mut expected, &[0, 4]);
    expected.extend_from_slice(b"root");
    w(&mut expected, &[1, 1]);
    assert_eq!(enc.into_bytes(), expected);

    // GETPORT(MOUNT v3, TCP) arguments, and a reply of port 2049.
    let mut args = Vec::new();
    w(&mut args, &[100_005, 3, 6, 0]);
    assert_eq!(
        decode_portmap_call(3, &args),
        Ok(PortmapCall::Getport(Mapping {
            program: 100_005,
            version: 3,
            protocol: 6,
            port: 0,
        }))
    );
    let mut enc = Encoder::new();
    enc.put(&PortmapReply::Port(2049));
    assert_eq!(enc.into_bytes(), 2049u32.to_be_bytes());
}
