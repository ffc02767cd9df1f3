//! The NFSv4.1 codec (`cairn_nfs::nfs4`): every COMPOUND call and reply it builds survives
//! encode → decode unchanged, every strict prefix of an encoded call or reply is refused,
//! garbage never panics, typed attributes round trip through `fattr4` (and unsupported or
//! malformed ones are told apart), and claimed lengths of 4 GiB allocate nothing near them
//! (a counting allocator, as `hostile.rs` for v3).
//!
//! Strategies generate every operation the codec decodes, both arms of every result, the
//! operations it does not decode (NOTSUPP) and undefined numbers (OP_ILLEGAL), at the edges of
//! their bounds (128-byte handles, 1024-byte owners, 8-word bitmaps).

mod peak_alloc;

use cairn_nfs::nfs4::args::*;
use cairn_nfs::nfs4::attrs::{AttrError, AttrValues, Fsid4, SetTime4, Specdata4, attr};
use cairn_nfs::nfs4::results::*;
use cairn_nfs::nfs4::types::*;
use cairn_nfs::rpc::{AuthSys, MachineName};
use cairn_nfs::{Encoder, XdrEncode, XdrError};
use peak_alloc::largest_allocation;
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

fn fh() -> impl Strategy<Value = Nfs4Fh> {
    bytes(128).prop_map(|b| Nfs4Fh::new(b).expect("within bound"))
}

fn component() -> impl Strategy<Value = Component> {
    bytes(1024).prop_map(|b| Component::new(b).expect("within bound"))
}

fn opaque() -> impl Strategy<Value = Opaque4> {
    bytes(OPAQUE_LIMIT_BYTES).prop_map(|b| Opaque4::new(b).expect("within bound"))
}

fn bitmap() -> impl Strategy<Value = Bitmap4> {
    vec(any::<u32>(), 0..=BITMAP_WORDS_MAX).prop_map(Bitmap4)
}

fn fattr() -> impl Strategy<Value = Fattr4> {
    (bitmap(), bytes(256)).prop_map(|(mask, vals)| Fattr4 { mask, vals })
}

fn stateid() -> impl Strategy<Value = Stateid4> {
    (any::<u32>(), any::<[u8; 12]>()).prop_map(|(seqid, other)| Stateid4 { seqid, other })
}

fn time() -> impl Strategy<Value = NfsTime4> {
    (any::<i64>(), any::<u32>()).prop_map(|(seconds, nseconds)| NfsTime4 { seconds, nseconds })
}

fn impl_id() -> impl Strategy<Value = OneAtMost<ImplId4>> {
    option::of(
        (opaque(), opaque(), time()).prop_map(|(domain, name, date)| ImplId4 {
            domain,
            name,
            date,
        }),
    )
    .prop_map(OneAtMost)
}

fn protect_ops() -> impl Strategy<Value = StateProtectOps4> {
    (bitmap(), bitmap()).prop_map(|(must_enforce, must_allow)| StateProtectOps4 {
        must_enforce,
        must_allow,
    })
}

fn channel() -> impl Strategy<Value = ChannelAttrs4> {
    (any::<[u32; 6]>(), option::of(any::<u32>())).prop_map(|(v, ird)| ChannelAttrs4 {
        headerpad_bytes: v[0],
        max_request_bytes: v[1],
        max_response_bytes: v[2],
        max_response_cached_bytes: v[3],
        max_operations: v[4],
        max_requests: v[5],
        rdma_ird: OneAtMost(ird),
    })
}

fn callback_sec() -> impl Strategy<Value = CallbackSec> {
    let sys =
        (any::<u32>(), any::<u32>(), vec(any::<u32>(), 0..=16)).prop_map(|(uid, gid, gids)| {
            CallbackSec::Sys(AuthSys {
                stamp: 7,
                machine_name: MachineName::new(b"guest".to_vec()).expect("short"),
                uid,
                gid,
                gids,
            })
        });
    prop_oneof![
        Just(CallbackSec::None),
        sys,
        (any::<u32>(), opaque(), opaque()).prop_map(|(service, from_server, from_client)| {
            CallbackSec::Gss {
                service,
                from_server,
                from_client,
            }
        }),
    ]
}

fn create_how() -> impl Strategy<Value = CreateHow4> {
    prop_oneof![
        fattr().prop_map(CreateHow4::Unchecked),
        fattr().prop_map(CreateHow4::Guarded),
        any::<[u8; 8]>().prop_map(CreateHow4::Exclusive),
        (any::<[u8; 8]>(), fattr()).prop_map(|(v, a)| CreateHow4::Exclusive41(v, a)),
    ]
}

fn claim() -> impl Strategy<Value = OpenClaim4> {
    prop_oneof![
        component().prop_map(OpenClaim4::Null),
        any::<u32>().prop_map(OpenClaim4::Previous),
        (stateid(), component()).prop_map(|(s, c)| OpenClaim4::DelegateCur(s, c)),
        component().prop_map(OpenClaim4::DelegatePrev),
        Just(OpenClaim4::Fh),
        Just(OpenClaim4::DelegPrevFh),
        stateid().prop_map(OpenClaim4::DelegCurFh),
    ]
}

fn open_args() -> impl Strategy<Value = OpenArgs> {
    (
        any::<[u32; 3]>(),
        any::<u64>(),
        opaque(),
        option::of(create_how()),
        claim(),
    )
        .prop_map(|(v, clientid, owner, create, claim)| OpenArgs {
            seqid: v[0],
            share_access: v[1],
            share_deny: v[2],
            owner: StateOwner4 { clientid, owner },
            create,
            claim,
        })
}

/// The defined operations this codec does not decode.
const UNDECODED: &[OpNum] = &[
    OpNum::Create,
    OpNum::Delegpurge,
    OpNum::Delegreturn,
    OpNum::Link,
    OpNum::Lock,
    OpNum::Lockt,
    OpNum::Locku,
    OpNum::Nverify,
    OpNum::Openattr,
    OpNum::OpenConfirm,
    OpNum::OpenDowngrade,
    OpNum::Putpubfh,
    OpNum::Readlink,
    OpNum::Rename,
    OpNum::Renew,
    OpNum::Secinfo,
    OpNum::Setclientid,
    OpNum::SetclientidConfirm,
    OpNum::Verify,
    OpNum::ReleaseLockowner,
    OpNum::BackchannelCtl,
    OpNum::BindConnToSession,
    OpNum::FreeStateid,
    OpNum::GetDirDelegation,
    OpNum::Getdeviceinfo,
    OpNum::Getdevicelist,
    OpNum::Layoutcommit,
    OpNum::Layoutget,
    OpNum::Layoutreturn,
    OpNum::SetSsv,
    OpNum::TestStateid,
    OpNum::WantDelegation,
];

fn illegal_number() -> impl Strategy<Value = u32> {
    prop_oneof![
        Just(0u32),
        Just(1),
        Just(2),
        59u32..10044,
        Just(10044),
        10045u32..
    ]
}

/// Operations that decode fully (any may come anywhere in a compound).
fn decoded_op() -> impl Strategy<Value = Nfs4Op> {
    prop_oneof![session_op(), file_op()]
}

fn session_op() -> impl Strategy<Value = Nfs4Op> {
    prop_oneof![
        (
            any::<[u8; 8]>(),
            opaque(),
            any::<u32>(),
            option::of(protect_ops()),
            impl_id()
        )
            .prop_map(|(verifier, owner_id, flags, protect, client_impl_id)| {
                Nfs4Op::ExchangeId(Box::new(ExchangeIdArgs {
                    verifier,
                    owner_id,
                    flags,
                    state_protect: protect.map_or(StateProtect4A::None, StateProtect4A::MachCred),
                    client_impl_id,
                }))
            }),
        (
            any::<u64>(),
            any::<[u32; 3]>(),
            channel(),
            channel(),
            vec(callback_sec(), 0..3)
        )
            .prop_map(|(clientid, v, fore_chan, back_chan, sec_parms)| {
                Nfs4Op::CreateSession(Box::new(CreateSessionArgs {
                    clientid,
                    sequence: v[0],
                    flags: v[1],
                    fore_chan,
                    back_chan,
                    cb_program: v[2],
                    sec_parms,
                }))
            }),
        any::<[u8; 16]>().prop_map(Nfs4Op::DestroySession),
        (any::<[u8; 16]>(), any::<[u32; 3]>(), any::<bool>()).prop_map(
            |(sessionid, v, cachethis)| {
                Nfs4Op::Sequence(SequenceArgs {
                    sessionid,
                    sequenceid: v[0],
                    slotid: v[1],
                    highest_slotid: v[2],
                    cachethis,
                })
            }
        ),
        any::<u64>().prop_map(Nfs4Op::DestroyClientid),
        any::<bool>().prop_map(Nfs4Op::ReclaimComplete),
        proptest::sample::select(SecinfoStyle4::ALL).prop_map(Nfs4Op::SecinfoNoName),
    ]
}

fn file_op() -> impl Strategy<Value = Nfs4Op> {
    prop_oneof![
        any::<u32>().prop_map(Nfs4Op::Access),
        (any::<u32>(), stateid())
            .prop_map(|(seqid, stateid)| Nfs4Op::Close(CloseArgs { seqid, stateid })),
        (any::<u64>(), any::<u32>()).prop_map(|(offset_bytes, count_bytes)| Nfs4Op::Commit(
            CommitArgs {
                offset_bytes,
                count_bytes
            }
        )),
        bitmap().prop_map(Nfs4Op::Getattr),
        Just(Nfs4Op::Getfh),
        component().prop_map(Nfs4Op::Lookup),
        Just(Nfs4Op::Lookupp),
        open_args().prop_map(|args| Nfs4Op::Open(Box::new(args))),
        fh().prop_map(Nfs4Op::Putfh),
        Just(Nfs4Op::Putrootfh),
        (stateid(), any::<u64>(), any::<u32>()).prop_map(|(stateid, offset_bytes, count_bytes)| {
            Nfs4Op::Read(ReadArgs {
                stateid,
                offset_bytes,
                count_bytes,
            })
        }),
        (any::<u64>(), any::<[u8; 8]>(), any::<[u32; 2]>(), bitmap()).prop_map(
            |(cookie, cookieverf, c, attr_request)| {
                Nfs4Op::Readdir(ReaddirArgs {
                    cookie,
                    cookieverf,
                    dircount_bytes: c[0],
                    maxcount_bytes: c[1],
                    attr_request,
                })
            }
        ),
        component().prop_map(Nfs4Op::Remove),
        Just(Nfs4Op::Restorefh),
        Just(Nfs4Op::Savefh),
        (stateid(), fattr())
            .prop_map(|(stateid, attrs)| Nfs4Op::Setattr(SetattrArgs { stateid, attrs })),
        (
            stateid(),
            any::<u64>(),
            proptest::sample::select(StableHow4::ALL),
            bytes(MAX_DATA_BYTES)
        )
            .prop_map(
                |(stateid, offset_bytes, stable, data)| Nfs4Op::Write(WriteArgs {
                    stateid,
                    offset_bytes,
                    stable,
                    data
                })
            ),
    ]
}

fn ending_op() -> impl Strategy<Value = Nfs4Op> {
    prop_oneof![
        proptest::sample::select(UNDECODED).prop_map(Nfs4Op::NotSupported),
        illegal_number().prop_map(Nfs4Op::Illegal),
    ]
}

fn compound() -> impl Strategy<Value = CompoundArgs> {
    (
        bytes(64),
        any::<u32>(),
        vec(decoded_op(), 0..6),
        option::of(ending_op()),
    )
        .prop_map(|(tag, minor_version, mut ops, last)| {
            ops.extend(last);
            CompoundArgs {
                tag,
                minor_version,
                ops,
            }
        })
}

fn error() -> impl Strategy<Value = Nfs4Error> {
    proptest::sample::select(Nfs4Error::ALL)
}

fn res<T: std::fmt::Debug + Clone>(
    ok: impl Strategy<Value = T>,
) -> impl Strategy<Value = OpResult<T>> {
    prop_oneof![ok.prop_map(Ok), error().prop_map(Err)]
}

fn session_result() -> impl Strategy<Value = Nfs4OpResult> {
    let exchange = (
        any::<u64>(),
        any::<[u32; 2]>(),
        option::of(protect_ops()),
        any::<u64>(),
        opaque(),
        opaque(),
        impl_id(),
    )
        .prop_map(
            |(
                clientid,
                v,
                protect,
                server_minor_id,
                server_major_id,
                server_scope,
                server_impl_id,
            )| {
                Box::new(ExchangeIdOk {
                    clientid,
                    sequenceid: v[0],
                    flags: v[1],
                    state_protect: protect.map_or(StateProtect4R::None, StateProtect4R::MachCred),
                    server_minor_id,
                    server_major_id,
                    server_scope,
                    server_impl_id,
                })
            },
        );
    let create = (any::<[u8; 16]>(), any::<[u32; 2]>(), channel(), channel()).prop_map(
        |(sessionid, v, fore_chan, back_chan)| CreateSessionOk {
            sessionid,
            sequence: v[0],
            flags: v[1],
            fore_chan,
            back_chan,
        },
    );
    let sequence = (any::<[u8; 16]>(), any::<[u32; 5]>()).prop_map(|(sessionid, v)| SequenceOk {
        sessionid,
        sequenceid: v[0],
        slotid: v[1],
        highest_slotid: v[2],
        target_highest_slotid: v[3],
        status_flags: v[4],
    });
    let secinfo =
        vec(
            prop_oneof![
                any::<u32>()
                    .prop_filter("not GSS", |f| *f != 6)
                    .prop_map(SecInfo4::Flavor),
                (opaque(), any::<u32>(), any::<u32>())
                    .prop_map(|(oid, qop, service)| SecInfo4::Gss { oid, qop, service }),
            ],
            0..4,
        )
        .prop_map(SecinfoOk);
    prop_oneof![
        res(exchange).prop_map(Nfs4OpResult::ExchangeId),
        res(create).prop_map(Nfs4OpResult::CreateSession),
        res(Just(())).prop_map(Nfs4OpResult::DestroySession),
        res(secinfo).prop_map(Nfs4OpResult::SecinfoNoName),
        res(sequence).prop_map(Nfs4OpResult::Sequence),
        res(Just(())).prop_map(Nfs4OpResult::DestroyClientid),
        res(Just(())).prop_map(Nfs4OpResult::ReclaimComplete),
    ]
}

fn file_result() -> impl Strategy<Value = Nfs4OpResult> {
    let cinfo = (any::<bool>(), any::<u64>(), any::<u64>()).prop_map(|(atomic, before, after)| {
        ChangeInfo4 {
            atomic,
            before,
            after,
        }
    });
    let delegation = prop_oneof![
        Just(OpenDelegation4::None),
        (0u32..10, any::<bool>()).prop_map(|(why, signal)| OpenDelegation4::NoneExt {
            why,
            will_signal: signal && (why == 4 || why == 5),
        }),
    ];
    let open = (stateid(), cinfo.clone(), any::<u32>(), bitmap(), delegation).prop_map(
        |(stateid, cinfo, rflags, attrset, delegation)| {
            Box::new(OpenOk {
                stateid,
                cinfo,
                rflags,
                attrset,
                delegation,
            })
        },
    );
    let entry = (any::<u64>(), component(), fattr()).prop_map(|(cookie, name, attrs)| Entry4 {
        cookie,
        name,
        attrs,
    });
    let readdir = (any::<[u8; 8]>(), vec(entry, 0..4), any::<bool>()).prop_map(
        |(cookieverf, entries, eof)| ReaddirOk {
            cookieverf,
            entries,
            eof,
        },
    );
    let write = (
        any::<u32>(),
        proptest::sample::select(StableHow4::ALL),
        any::<[u8; 8]>(),
    )
        .prop_map(|(count_bytes, committed, verf)| WriteOk {
            count_bytes,
            committed,
            verf,
        });
    let setattr =
        (res(Just(())), bitmap()).prop_map(|(status, attrsset)| SetattrRes { status, attrsset });
    prop_oneof![
        res((any::<u32>(), any::<u32>())
            .prop_map(|(supported, access)| AccessOk { supported, access }))
        .prop_map(Nfs4OpResult::Access),
        res(stateid()).prop_map(Nfs4OpResult::Close),
        res(any::<[u8; 8]>()).prop_map(Nfs4OpResult::Commit),
        res(fattr()).prop_map(Nfs4OpResult::Getattr),
        res(fh()).prop_map(Nfs4OpResult::Getfh),
        res(Just(())).prop_map(Nfs4OpResult::Lookup),
        res(Just(())).prop_map(Nfs4OpResult::Lookupp),
        res(open).prop_map(Nfs4OpResult::Open),
        res(Just(())).prop_map(Nfs4OpResult::Putfh),
        res(Just(())).prop_map(Nfs4OpResult::Putrootfh),
        res((any::<bool>(), bytes(MAX_DATA_BYTES)).prop_map(|(eof, data)| ReadOk { eof, data }))
            .prop_map(Nfs4OpResult::Read),
        res(readdir).prop_map(Nfs4OpResult::Readdir),
        res(cinfo).prop_map(Nfs4OpResult::Remove),
        res(Just(())).prop_map(Nfs4OpResult::Restorefh),
        res(Just(())).prop_map(Nfs4OpResult::Savefh),
        setattr.prop_map(Nfs4OpResult::Setattr),
        res(write).prop_map(Nfs4OpResult::Write),
        (proptest::sample::select(UNDECODED), error())
            .prop_map(|(num, err)| Nfs4OpResult::Failed(num, err)),
        Just(Nfs4OpResult::Failed(OpNum::Illegal, Nfs4Error::OpIllegal)),
    ]
}

fn reply() -> impl Strategy<Value = CompoundReply> {
    (
        bytes(64),
        vec(prop_oneof![session_result(), file_result()], 0..6),
    )
        .prop_map(|(tag, results)| CompoundReply::of(tag, results))
}

fn encode<T: XdrEncode>(value: &T) -> Vec<u8> {
    let mut enc = Encoder::new();
    enc.put(value);
    enc.into_bytes()
}

fn attr_values() -> impl Strategy<Value = AttrValues> {
    (
        (
            option::of(bitmap()),
            option::of(any::<u64>()),
            option::of(any::<u64>()),
            option::of((any::<u64>(), any::<u64>())),
        ),
        (
            option::of(any::<u32>()),
            option::of(opaque()),
            option::of(opaque()),
            option::of(time()),
        ),
        (
            option::of(prop_oneof![
                Just(SetTime4::ServerTime),
                time().prop_map(SetTime4::ClientTime)
            ]),
            option::of(fh()),
            option::of(any::<bool>()),
            option::of((any::<u32>(), any::<u32>())),
        ),
    )
        .prop_map(
            |(
                (supported, change, size, fsid),
                (mode, owner, group, mtime),
                (mtime_set, fh, link, rawdev),
            )| AttrValues {
                supported_attrs: supported,
                change,
                size,
                fsid: fsid.map(|(major, minor)| Fsid4 { major, minor }),
                mode,
                owner,
                owner_group: group,
                time_modify: mtime,
                time_modify_set: mtime_set,
                filehandle: fh,
                link_support: link,
                rawdev: rawdev.map(|(major, minor)| Specdata4 { major, minor }),
                r#type: Some(Ftype4::Dir),
                ..AttrValues::default()
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    #[test]
    fn compounds_round_trip_and_prefixes_fail(call in compound()) {
        let bytes = encode(&call);
        prop_assert_eq!(decode_compound(&bytes, MAX_DATA_BYTES), Ok(call.clone()));
        for cut in 0..bytes.len() {
            prop_assert!(decode_compound(&bytes[..cut], MAX_DATA_BYTES).is_err(), "prefix {} of {:?}", cut, call);
        }
    }

    #[test]
    fn replies_round_trip_and_prefixes_fail(reply in reply()) {
        let bytes = encode(&reply);
        prop_assert_eq!(decode_compound_reply(&bytes, MAX_DATA_BYTES), Ok(reply.clone()));
        for cut in 0..bytes.len() {
            prop_assert!(decode_compound_reply(&bytes[..cut], MAX_DATA_BYTES).is_err(), "prefix {} of {:?}", cut, reply);
        }
    }

    #[test]
    fn attributes_round_trip_through_fattr4(values in attr_values()) {
        let fattr = values.to_fattr();
        prop_assert_eq!(AttrValues::from_fattr(&fattr), Ok(values.clone()));
        let wire = encode(&fattr);
        let mut dec = cairn_nfs::Decoder::new(&wire);
        prop_assert_eq!(dec.get::<Fattr4>(), Ok(fattr.clone()));
        if !fattr.vals.is_empty() {
            let mut short = fattr.clone();
            short.vals.pop();
            prop_assert!(matches!(AttrValues::from_fattr(&short), Err(AttrError::Garbage(_))));
        }
    }

    #[test]
    fn garbage_never_panics(garbage in vec(any::<u8>(), 0..512)) {
        let _ = decode_compound(&garbage, MAX_DATA_BYTES);
        let _ = decode_compound_reply(&garbage, MAX_DATA_BYTES);
        let _ = AttrValues::from_fattr(&Fattr4 { mask: Bitmap4(vec![u32::MAX; 3]), vals: garbage });
    }
}

#[test]
fn unsupported_attributes_are_named() {
    let fattr = Fattr4 {
        mask: Bitmap4::from_bits(&[attr::mode, 12]),
        vals: 0o644u32.to_be_bytes().to_vec(),
    };
    assert_eq!(
        AttrValues::from_fattr(&fattr),
        Err(AttrError::NotSupported(12))
    );
}

#[test]
fn undecoded_operations_end_the_compound() {
    // SEQUENCE-less compound: PUTROOTFH, LINK (not decoded), then bytes that are not an op.
    let mut enc = Encoder::new();
    enc.put_opaque(b"t");
    enc.put_u32(1);
    enc.put_u32(3);
    enc.put_u32(OpNum::Putrootfh.as_u32());
    enc.put_u32(OpNum::Link.as_u32());
    enc.put_u32(0xdead_beef);
    let bytes = enc.into_bytes();
    let call = decode_compound(&bytes, MAX_DATA_BYTES).expect("decodes");
    assert_eq!(
        call.ops,
        vec![Nfs4Op::Putrootfh, Nfs4Op::NotSupported(OpNum::Link)]
    );
    // A number outside the protocol: OP_ILLEGAL.
    let mut enc = Encoder::new();
    enc.put_opaque(b"");
    enc.put_u32(1);
    enc.put_u32(1);
    enc.put_u32(77);
    let call = decode_compound(&enc.into_bytes(), MAX_DATA_BYTES).expect("decodes");
    assert_eq!(call.ops, vec![Nfs4Op::Illegal(77)]);
}

#[test]
fn bytes_after_the_last_operation_are_refused() {
    let call = CompoundArgs {
        tag: vec![],
        minor_version: 1,
        ops: vec![Nfs4Op::Getfh],
    };
    let mut bytes = encode(&call);
    bytes.extend_from_slice(&[0, 0, 0, 0]);
    assert!(matches!(
        decode_compound(&bytes, MAX_DATA_BYTES),
        Err(XdrError::Mismatch { .. })
    ));
}

// ----- hostile lengths: the largest single allocation while a decode runs (`peak_alloc`) -----

const SMALL_BYTES: usize = 64 * 1024;

fn words(words: &[u32]) -> Vec<u8> {
    words.iter().flat_map(|w| w.to_be_bytes()).collect()
}

#[test]
fn claimed_lengths_allocate_nothing_near_them() {
    let huge = u32::MAX;
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("tag", words(&[huge])),
        ("op count", words(&[0, 1, huge, 24])),
        ("op count under the bound", words(&[0, 1, 128])),
        (
            "WRITE data",
            words(&[0, 1, 1, 38, 0, 0, 0, 0, 0, 0, 0, 0, 2, huge]),
        ),
        ("PUTFH handle", words(&[0, 1, 1, 22, huge])),
        ("GETATTR bitmap", words(&[0, 1, 1, 9, huge])),
        ("EXCHANGE_ID owner", words(&[0, 1, 1, 42, 0, 0, huge])),
        ("CREATE_SESSION callbacks", {
            let mut w = vec![0, 1, 1, 43, 0, 0, 0, 0];
            w.extend([0; 6]);
            w.push(0);
            w.extend([0; 6]);
            w.push(0);
            w.extend([0, huge]);
            words(&w)
        }),
        ("SETATTR values", words(&[0, 1, 1, 34, 0, 0, 0, 0, 0, huge])),
    ];
    for (what, input) in cases {
        let (result, peak) = largest_allocation(|| decode_compound(&input, usize::MAX));
        assert!(result.is_err(), "{what}: decoded {result:?}");
        assert!(peak < SMALL_BYTES, "{what}: allocated {peak} bytes");
    }
    let reply_cases: Vec<(&str, Vec<u8>)> = vec![
        ("reply results", words(&[0, 0, huge])),
        ("READ data", words(&[0, 0, 1, 25, 0, 0, huge])),
        (
            "READDIR entries",
            words(&[0, 0, 1, 26, 0, 0, 0, 1, 0, 0, 0, huge]),
        ),
    ];
    for (what, input) in reply_cases {
        let (result, peak) = largest_allocation(|| decode_compound_reply(&input, usize::MAX));
        assert!(result.is_err(), "{what}: decoded {result:?}");
        assert!(peak < SMALL_BYTES, "{what}: allocated {peak} bytes");
    }
}
