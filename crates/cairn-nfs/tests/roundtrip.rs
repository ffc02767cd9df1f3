//! Every type of the crate survives encode → decode unchanged, and every strict prefix of an
//! encoded call is refused (never a panic, never a shorter value taken for the whole).
//!
//! Strategies generate all 22 NFSv3 calls and results (both arms of every outcome), all MOUNT
//! and PORTMAP calls and results, RPC call headers with each credential kind and every reply
//! header, at the edges of their bounds (64-byte handles, 255-byte names, 16 groups…).

use cairn_nfs::mount::{
    DirPath, ExportEntry, MntOk, MountCall, MountEntry, MountError, MountName, MountReply,
    decode_mount_call, decode_mount_reply,
};
use cairn_nfs::nfs3::*;
use cairn_nfs::portmap::{
    Mapping, PortmapCall, PortmapReply, decode_portmap_call, decode_portmap_reply,
};
use cairn_nfs::rpc::{
    AcceptStat, AuthStat, AuthSys, CallHeader, Credential, MachineName, OpaqueAuth, RejectStat,
    ReplyHeader, parse_call,
};
use cairn_nfs::{Decoder, Encoder, XdrDecode, XdrEncode};
use proptest::collection::vec;
use proptest::option;
use proptest::prelude::*;

const MAX_DATA_BYTES: usize = 4096;

fn bytes(max: usize) -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        vec(any::<u8>(), 0..=max.min(16)),
        vec(any::<u8>(), max..=max)
    ]
}

fn fh() -> impl Strategy<Value = FileHandle> {
    bytes(64).prop_map(|b| FileHandle::new(b).expect("within bound"))
}

fn name() -> impl Strategy<Value = Filename> {
    bytes(255).prop_map(|b| Filename::new(b).expect("within bound"))
}

fn path() -> impl Strategy<Value = NfsPath> {
    bytes(1024).prop_map(|b| NfsPath::new(b).expect("within bound"))
}

fn time() -> impl Strategy<Value = NfsTime3> {
    (any::<u32>(), any::<u32>()).prop_map(|(seconds, nseconds)| NfsTime3 { seconds, nseconds })
}

fn ftype() -> impl Strategy<Value = Ftype3> {
    proptest::sample::select(Ftype3::ALL)
}

fn spec() -> impl Strategy<Value = SpecData3> {
    (any::<u32>(), any::<u32>()).prop_map(|(major, minor)| SpecData3 { major, minor })
}

fn fattr() -> impl Strategy<Value = Fattr3> {
    (
        (
            ftype(),
            any::<u32>(),
            any::<u32>(),
            any::<u32>(),
            any::<u32>(),
        ),
        (
            any::<u64>(),
            any::<u64>(),
            spec(),
            any::<u64>(),
            any::<u64>(),
        ),
        (time(), time(), time()),
    )
        .prop_map(
            |((ftype, mode, nlink, uid, gid), (size, used, rdev, fsid, fileid), (a, m, c))| {
                Fattr3 {
                    ftype,
                    mode,
                    nlink,
                    uid,
                    gid,
                    size_bytes: size,
                    used_bytes: used,
                    rdev,
                    fsid,
                    fileid,
                    atime: a,
                    mtime: m,
                    ctime: c,
                }
            },
        )
}

fn post_op() -> impl Strategy<Value = PostOpAttr> {
    option::of(fattr())
}

fn wcc() -> impl Strategy<Value = WccData> {
    let wcc_attr = (any::<u64>(), time(), time()).prop_map(|(size_bytes, mtime, ctime)| WccAttr {
        size_bytes,
        mtime,
        ctime,
    });
    (option::of(wcc_attr), post_op()).prop_map(|(before, after)| WccData { before, after })
}

fn set_time() -> impl Strategy<Value = SetTime> {
    prop_oneof![
        Just(SetTime::DontChange),
        Just(SetTime::ServerTime),
        time().prop_map(SetTime::ClientTime),
    ]
}

fn sattr() -> impl Strategy<Value = Sattr3> {
    (
        option::of(any::<u32>()),
        option::of(any::<u32>()),
        option::of(any::<u32>()),
        option::of(any::<u64>()),
        set_time(),
        set_time(),
    )
        .prop_map(|(mode, uid, gid, size_bytes, atime, mtime)| Sattr3 {
            mode,
            uid,
            gid,
            size_bytes,
            atime,
            mtime,
        })
}

fn dirop() -> impl Strategy<Value = DirOpArgs3> {
    (fh(), name()).prop_map(|(dir, name)| DirOpArgs3 { dir, name })
}

fn stable() -> impl Strategy<Value = StableHow> {
    proptest::sample::select(StableHow::ALL)
}

fn nfs_error() -> impl Strategy<Value = Nfs3Error> {
    proptest::sample::select(Nfs3Error::ALL)
}

fn handle_args() -> impl Strategy<Value = HandleArgs> {
    fh().prop_map(|object| HandleArgs { object })
}

fn range_args() -> impl Strategy<Value = RangeArgs> {
    (fh(), any::<u64>(), any::<u32>()).prop_map(|(file, offset_bytes, count_bytes)| RangeArgs {
        file,
        offset_bytes,
        count_bytes,
    })
}

fn create_how() -> impl Strategy<Value = CreateHow> {
    prop_oneof![
        sattr().prop_map(CreateHow::Unchecked),
        sattr().prop_map(CreateHow::Guarded),
        any::<[u8; 8]>().prop_map(CreateHow::Exclusive),
    ]
}

fn mknod_data() -> impl Strategy<Value = MknodData> {
    prop_oneof![
        (sattr(), spec()).prop_map(|(a, s)| MknodData::Chr(a, s)),
        (sattr(), spec()).prop_map(|(a, s)| MknodData::Blk(a, s)),
        sattr().prop_map(MknodData::Sock),
        sattr().prop_map(MknodData::Fifo),
        proptest::sample::select(&[Ftype3::Reg, Ftype3::Dir, Ftype3::Lnk][..])
            .prop_map(MknodData::NotSpecial),
    ]
}

fn nfs_call() -> impl Strategy<Value = Nfs3Call> {
    prop_oneof![
        Just(Nfs3Call::Null),
        handle_args().prop_map(Nfs3Call::Getattr),
        (fh(), sattr(), option::of(time())).prop_map(|(object, new_attributes, guard)| {
            Nfs3Call::Setattr(SetattrArgs {
                object,
                new_attributes,
                guard,
            })
        }),
        dirop().prop_map(Nfs3Call::Lookup),
        (fh(), any::<u32>())
            .prop_map(|(object, access)| Nfs3Call::Access(AccessArgs { object, access })),
        handle_args().prop_map(Nfs3Call::Readlink),
        range_args().prop_map(Nfs3Call::Read),
        (fh(), any::<u64>(), stable(), bytes(MAX_DATA_BYTES)).prop_map(
            |(file, offset_bytes, stable, data)| Nfs3Call::Write(WriteArgs {
                file,
                offset_bytes,
                stable,
                data,
            })
        ),
        (dirop(), create_how())
            .prop_map(|(location, how)| Nfs3Call::Create(CreateArgs { location, how })),
        (dirop(), sattr()).prop_map(|(location, attributes)| Nfs3Call::Mkdir(MkdirArgs {
            location,
            attributes
        })),
        (dirop(), sattr(), path()).prop_map(|(location, attributes, target)| {
            Nfs3Call::Symlink(SymlinkArgs {
                location,
                attributes,
                target,
            })
        }),
        (dirop(), mknod_data())
            .prop_map(|(location, what)| Nfs3Call::Mknod(MknodArgs { location, what })),
        dirop().prop_map(Nfs3Call::Remove),
        dirop().prop_map(Nfs3Call::Rmdir),
        (dirop(), dirop()).prop_map(|(from, to)| Nfs3Call::Rename(RenameArgs { from, to })),
        (fh(), dirop()).prop_map(|(file, link)| Nfs3Call::Link(LinkArgs { file, link })),
        (fh(), any::<u64>(), any::<[u8; 8]>(), any::<u32>()).prop_map(
            |(dir, cookie, cookieverf, count_bytes)| Nfs3Call::Readdir(ReaddirArgs {
                dir,
                cookie,
                cookieverf,
                count_bytes,
            })
        ),
        (
            fh(),
            any::<u64>(),
            any::<[u8; 8]>(),
            any::<u32>(),
            any::<u32>()
        )
            .prop_map(
                |(dir, cookie, cookieverf, dircount_bytes, maxcount_bytes)| {
                    Nfs3Call::Readdirplus(ReaddirplusArgs {
                        dir,
                        cookie,
                        cookieverf,
                        dircount_bytes,
                        maxcount_bytes,
                    })
                }
            ),
        handle_args().prop_map(Nfs3Call::Fsstat),
        handle_args().prop_map(Nfs3Call::Fsinfo),
        handle_args().prop_map(Nfs3Call::Pathconf),
        range_args().prop_map(Nfs3Call::Commit),
    ]
}

fn outcome<T: std::fmt::Debug + Clone, F: std::fmt::Debug + Clone>(
    ok: impl Strategy<Value = T>,
    fail: impl Strategy<Value = F>,
) -> impl Strategy<Value = Outcome<T, F>> {
    prop_oneof![
        ok.prop_map(Outcome::Ok),
        (nfs_error(), fail).prop_map(|(e, f)| Outcome::Fail(e, f)),
    ]
}

fn create_ok() -> impl Strategy<Value = CreateOk> {
    (option::of(fh()), post_op(), wcc()).prop_map(|(object, obj_attributes, dir_wcc)| CreateOk {
        object,
        obj_attributes,
        dir_wcc,
    })
}

fn rename_wcc() -> impl Strategy<Value = RenameWcc> {
    (wcc(), wcc()).prop_map(|(fromdir_wcc, todir_wcc)| RenameWcc {
        fromdir_wcc,
        todir_wcc,
    })
}

fn link_wcc() -> impl Strategy<Value = LinkWcc> {
    (post_op(), wcc()).prop_map(|(file_attributes, linkdir_wcc)| LinkWcc {
        file_attributes,
        linkdir_wcc,
    })
}

fn entry() -> impl Strategy<Value = Entry3> {
    (any::<u64>(), name(), any::<u64>()).prop_map(|(fileid, name, cookie)| Entry3 {
        fileid,
        name,
        cookie,
    })
}

fn entry_plus() -> impl Strategy<Value = EntryPlus3> {
    (
        any::<u64>(),
        name(),
        any::<u64>(),
        post_op(),
        option::of(fh()),
    )
        .prop_map(
            |(fileid, name, cookie, name_attributes, name_handle)| EntryPlus3 {
                fileid,
                name,
                cookie,
                name_attributes,
                name_handle,
            },
        )
}

fn dir_list<T: std::fmt::Debug + Clone>(
    entries: impl Strategy<Value = T>,
) -> impl Strategy<Value = DirListOk<T>> {
    (
        post_op(),
        any::<[u8; 8]>(),
        vec(entries, 0..4),
        any::<bool>(),
    )
        .prop_map(|(dir_attributes, cookieverf, entries, eof)| DirListOk {
            dir_attributes,
            cookieverf,
            entries,
            eof,
        })
}

fn fsstat_ok() -> impl Strategy<Value = FsstatOk> {
    (post_op(), any::<[u64; 6]>(), any::<u32>()).prop_map(|(obj_attributes, n, invarsec)| {
        FsstatOk {
            obj_attributes,
            total_bytes: n[0],
            free_bytes: n[1],
            avail_bytes: n[2],
            total_files: n[3],
            free_files: n[4],
            avail_files: n[5],
            invarsec,
        }
    })
}

fn fsinfo_ok() -> impl Strategy<Value = FsinfoOk> {
    (post_op(), any::<[u32; 8]>(), any::<u64>(), time()).prop_map(
        |(obj_attributes, n, maxfilesize_bytes, time_delta)| FsinfoOk {
            obj_attributes,
            rtmax_bytes: n[0],
            rtpref_bytes: n[1],
            rtmult_bytes: n[2],
            wtmax_bytes: n[3],
            wtpref_bytes: n[4],
            wtmult_bytes: n[5],
            dtpref_bytes: n[6],
            maxfilesize_bytes,
            time_delta,
            properties: n[7],
        },
    )
}

fn pathconf_ok() -> impl Strategy<Value = PathconfOk> {
    (post_op(), any::<u32>(), any::<u32>(), any::<[bool; 4]>()).prop_map(
        |(obj_attributes, linkmax, name_max, b)| PathconfOk {
            obj_attributes,
            linkmax,
            name_max,
            no_trunc: b[0],
            chown_restricted: b[1],
            case_insensitive: b[2],
            case_preserving: b[3],
        },
    )
}

fn nfs_reply() -> impl Strategy<Value = Nfs3Reply> {
    prop_oneof![
        Just(Nfs3Reply::Null),
        outcome(fattr(), Just(())).prop_map(Nfs3Reply::Getattr),
        outcome(wcc(), wcc()).prop_map(Nfs3Reply::Setattr),
        outcome(
            (fh(), post_op(), post_op()).prop_map(|(object, obj_attributes, dir_attributes)| {
                LookupOk {
                    object,
                    obj_attributes,
                    dir_attributes,
                }
            }),
            post_op()
        )
        .prop_map(Nfs3Reply::Lookup),
        outcome(
            (post_op(), any::<u32>()).prop_map(|(obj_attributes, access)| AccessOk {
                obj_attributes,
                access
            }),
            post_op()
        )
        .prop_map(Nfs3Reply::Access),
        outcome(
            (post_op(), path()).prop_map(|(symlink_attributes, target)| ReadlinkOk {
                symlink_attributes,
                target
            }),
            post_op()
        )
        .prop_map(Nfs3Reply::Readlink),
        outcome(
            (post_op(), any::<bool>(), bytes(MAX_DATA_BYTES)).prop_map(
                |(file_attributes, eof, data)| ReadOk {
                    file_attributes,
                    eof,
                    data
                }
            ),
            post_op()
        )
        .prop_map(Nfs3Reply::Read),
        outcome(
            (wcc(), any::<u32>(), stable(), any::<[u8; 8]>()).prop_map(
                |(file_wcc, count_bytes, committed, verf)| WriteOk {
                    file_wcc,
                    count_bytes,
                    committed,
                    verf
                }
            ),
            wcc()
        )
        .prop_map(Nfs3Reply::Write),
        outcome(create_ok(), wcc()).prop_map(Nfs3Reply::Create),
        outcome(create_ok(), wcc()).prop_map(Nfs3Reply::Mkdir),
        outcome(create_ok(), wcc()).prop_map(Nfs3Reply::Symlink),
        outcome(create_ok(), wcc()).prop_map(Nfs3Reply::Mknod),
        outcome(wcc(), wcc()).prop_map(Nfs3Reply::Remove),
        outcome(wcc(), wcc()).prop_map(Nfs3Reply::Rmdir),
        outcome(rename_wcc(), rename_wcc()).prop_map(Nfs3Reply::Rename),
        outcome(link_wcc(), link_wcc()).prop_map(Nfs3Reply::Link),
        outcome(dir_list(entry()), post_op()).prop_map(Nfs3Reply::Readdir),
        outcome(dir_list(entry_plus()), post_op()).prop_map(Nfs3Reply::Readdirplus),
        outcome(fsstat_ok(), post_op()).prop_map(Nfs3Reply::Fsstat),
        outcome(fsinfo_ok(), post_op()).prop_map(Nfs3Reply::Fsinfo),
        outcome(pathconf_ok(), post_op()).prop_map(Nfs3Reply::Pathconf),
        outcome(
            (wcc(), any::<[u8; 8]>()).prop_map(|(file_wcc, verf)| CommitOk { file_wcc, verf }),
            wcc()
        )
        .prop_map(Nfs3Reply::Commit),
    ]
}

fn dir_path() -> impl Strategy<Value = DirPath> {
    bytes(1024).prop_map(|b| DirPath::new(b).expect("within bound"))
}

fn mount_name() -> impl Strategy<Value = MountName> {
    bytes(255).prop_map(|b| MountName::new(b).expect("within bound"))
}

fn mount_call() -> impl Strategy<Value = MountCall> {
    prop_oneof![
        Just(MountCall::Null),
        dir_path().prop_map(MountCall::Mnt),
        Just(MountCall::Dump),
        dir_path().prop_map(MountCall::Umnt),
        Just(MountCall::Umntall),
        Just(MountCall::Export),
    ]
}

fn mount_reply() -> impl Strategy<Value = MountReply> {
    let mnt_ok = (fh(), vec(any::<u32>(), 0..=16)).prop_map(|(handle, auth_flavors)| MntOk {
        handle,
        auth_flavors,
    });
    let mnt = prop_oneof![
        mnt_ok.prop_map(Ok),
        proptest::sample::select(MountError::ALL).prop_map(Err),
    ];
    let entry = (mount_name(), dir_path()).prop_map(|(hostname, directory)| MountEntry {
        hostname,
        directory,
    });
    let export = (dir_path(), vec(mount_name(), 0..3))
        .prop_map(|(directory, groups)| ExportEntry { directory, groups });
    prop_oneof![
        Just(MountReply::Null),
        mnt.prop_map(MountReply::Mnt),
        vec(entry, 0..3).prop_map(MountReply::Dump),
        Just(MountReply::Umnt),
        Just(MountReply::Umntall),
        vec(export, 0..3).prop_map(MountReply::Export),
    ]
}

fn mapping() -> impl Strategy<Value = Mapping> {
    any::<[u32; 4]>().prop_map(|n| Mapping {
        program: n[0],
        version: n[1],
        protocol: n[2],
        port: n[3],
    })
}

fn portmap_call() -> impl Strategy<Value = PortmapCall> {
    prop_oneof![
        Just(PortmapCall::Null),
        mapping().prop_map(PortmapCall::Set),
        mapping().prop_map(PortmapCall::Unset),
        mapping().prop_map(PortmapCall::Getport),
        Just(PortmapCall::Dump),
    ]
}

fn portmap_reply() -> impl Strategy<Value = (u32, PortmapReply)> {
    prop_oneof![
        Just((0, PortmapReply::Null)),
        any::<bool>().prop_map(|b| (1, PortmapReply::Done(b))),
        any::<bool>().prop_map(|b| (2, PortmapReply::Done(b))),
        any::<u32>().prop_map(|p| (3, PortmapReply::Port(p))),
        vec(mapping(), 0..4).prop_map(|m| (4, PortmapReply::Dump(m))),
    ]
}

fn credential() -> impl Strategy<Value = Credential> {
    let sys = (
        any::<u32>(),
        bytes(255),
        any::<u32>(),
        any::<u32>(),
        vec(any::<u32>(), 0..=16),
    )
        .prop_map(|(stamp, machine, uid, gid, gids)| {
            Credential::Sys(AuthSys {
                stamp,
                machine_name: MachineName::new(machine).expect("within bound"),
                uid,
                gid,
                gids,
            })
        });
    let other = (6..1000u32, bytes(400))
        .prop_map(|(flavor, body)| Credential::Other(OpaqueAuth { flavor, body }));
    prop_oneof![Just(Credential::None), sys, other]
}

fn reply_header() -> impl Strategy<Value = ReplyHeader> {
    let accept = prop_oneof![
        Just(AcceptStat::Success),
        Just(AcceptStat::ProgUnavail),
        (any::<u32>(), any::<u32>()).prop_map(|(low, high)| AcceptStat::ProgMismatch { low, high }),
        Just(AcceptStat::ProcUnavail),
        Just(AcceptStat::GarbageArgs),
        Just(AcceptStat::SystemErr),
    ];
    let reject = prop_oneof![
        (any::<u32>(), any::<u32>()).prop_map(|(low, high)| RejectStat::RpcMismatch { low, high }),
        proptest::sample::select(AuthStat::ALL).prop_map(RejectStat::AuthError),
    ];
    prop_oneof![
        (any::<u32>(), accept).prop_map(|(xid, stat)| ReplyHeader::accepted(xid, stat)),
        (any::<u32>(), reject).prop_map(|(xid, stat)| ReplyHeader::denied(xid, stat)),
    ]
}

fn encode<T: XdrEncode>(value: &T) -> Vec<u8> {
    let mut enc = Encoder::new();
    enc.put(value);
    enc.into_bytes()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn nfs_calls_round_trip_and_prefixes_fail(call in nfs_call()) {
        let bytes = encode(&call);
        let proc = call.procedure().as_u32();
        prop_assert_eq!(decode_call(proc, &bytes, MAX_DATA_BYTES), Ok(call.clone()));
        for cut in 0..bytes.len() {
            prop_assert!(decode_call(proc, &bytes[..cut], MAX_DATA_BYTES).is_err(), "prefix {} of {:?}", cut, call);
        }
    }

    #[test]
    fn nfs_replies_round_trip(reply in nfs_reply()) {
        let bytes = encode(&reply);
        let proc = reply.procedure().as_u32();
        prop_assert_eq!(decode_reply(proc, &bytes, MAX_DATA_BYTES), Ok(reply.clone()));
        if !bytes.is_empty() {
            prop_assert!(decode_reply(proc, &bytes[..bytes.len() - 1], MAX_DATA_BYTES).is_err());
        }
    }

    #[test]
    fn mount_calls_and_replies_round_trip(call in mount_call(), reply in mount_reply()) {
        let proc = call.procedure().as_u32();
        prop_assert_eq!(decode_mount_call(proc, &encode(&call)), Ok(call));
        let proc = match &reply {
            MountReply::Null => 0,
            MountReply::Mnt(_) => 1,
            MountReply::Dump(_) => 2,
            MountReply::Umnt => 3,
            MountReply::Umntall => 4,
            MountReply::Export(_) => 5,
        };
        prop_assert_eq!(decode_mount_reply(proc, &encode(&reply)), Ok(reply));
    }

    #[test]
    fn portmap_calls_and_replies_round_trip(call in portmap_call(), (proc, reply) in portmap_reply()) {
        prop_assert_eq!(decode_portmap_call(call.procedure().as_u32(), &encode(&call)), Ok(call));
        prop_assert_eq!(decode_portmap_reply(proc, &encode(&reply)), Ok(reply));
    }

    #[test]
    fn rpc_headers_round_trip(
        xid in any::<u32>(),
        n in any::<[u32; 3]>(),
        credential in credential(),
        verifier_body in bytes(400),
        args in bytes(64),
        reply in reply_header(),
    ) {
        let header = CallHeader {
            xid,
            program: n[0],
            version: n[1],
            procedure: n[2],
            credential,
            verifier: OpaqueAuth { flavor: 0, body: verifier_body },
        };
        let mut record = encode(&header);
        record.extend_from_slice(&args);
        let parsed = parse_call(&record);
        prop_assert_eq!(parsed, Ok((header, &args[..])));

        let bytes = encode(&reply);
        let mut dec = Decoder::new(&bytes);
        prop_assert_eq!(ReplyHeader::decode(&mut dec), Ok(reply));
        prop_assert_eq!(dec.remaining_bytes(), 0);
    }

    /// Arbitrary bytes never panic any decoder, for every procedure number.
    #[test]
    fn garbage_never_panics(proc in 0u32..24, garbage in vec(any::<u8>(), 0..512)) {
        let _ = decode_call(proc, &garbage, MAX_DATA_BYTES);
        let _ = decode_reply(proc, &garbage, MAX_DATA_BYTES);
        let _ = decode_mount_call(proc, &garbage);
        let _ = decode_mount_reply(proc, &garbage);
        let _ = decode_portmap_call(proc, &garbage);
        let _ = decode_portmap_reply(proc, &garbage);
        let _ = parse_call(&garbage);
        let _ = ReplyHeader::decode(&mut Decoder::new(&garbage));
    }
}

/// The strategies above reach every procedure (a guard against a strategy that silently
/// stops generating one of them).
#[test]
fn strategies_cover_every_procedure() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    let mut runner = TestRunner::deterministic();
    let mut calls = std::collections::BTreeSet::new();
    let mut replies = std::collections::BTreeSet::new();
    let call_strategy = nfs_call();
    let reply_strategy = nfs_reply();
    for _ in 0..3000 {
        let call = call_strategy.new_tree(&mut runner).expect("tree").current();
        calls.insert(call.procedure().as_u32());
        let reply = reply_strategy
            .new_tree(&mut runner)
            .expect("tree")
            .current();
        replies.insert(reply.procedure().as_u32());
    }
    assert_eq!(calls.len(), Nfs3Proc::ALL.len());
    assert_eq!(replies.len(), Nfs3Proc::ALL.len());
}
