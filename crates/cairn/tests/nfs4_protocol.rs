//! NFSv4.1 at the protocol level against `cairn serve --nfs` (docs/nfs-v4.md, step 2), with a
//! raw client on cairn-nfs's codec (exact control of slots, sequence ids, stateids and xids,
//! which the kernel's client never shows):
//! - session rules: a compound without SEQUENCE gets OP_NOT_IN_SESSION, minor versions other
//!   than 1 MINOR_VERS_MISMATCH, EXCHANGE_ID with company NOT_ONLY_OP; CREATE_SESSION
//!   negotiates the client's 1000 slots and 1 MiB cached replies down to 64 and 8 KiB, and
//!   its retransmission gets the same session;
//! - exactly once: a GUARDED OPEN retransmitted on its slot (new xid, same sequence id) gets
//!   the first reply byte for byte, not EXIST; a skipped sequence id SEQ_MISORDERED, a slot
//!   past the table BADSLOT, an unknown session BADSESSION;
//! - the pseudo root leads to the shared filesystem by LOOKUP, and the handle GETFH gives is
//!   the one v3's MOUNT and LOOKUP give; owners are numeric strings;
//! - WRITE's stability as v3's: UNSTABLE answered UNSTABLE with COMMIT's verifier, FILE_SYNC
//!   FILE_SYNC; READ with the anonymous stateid reads what was written; a closed stateid is
//!   BAD_STATEID; another user's OPEN of a read-only file with a size (O_TRUNC) ACCESS, the
//!   file intact; deny modes NOTSUPP; LINK (not decoded) NOTSUPP, number 77 OP_ILLEGAL;
//!   REMOVE then LOOKUP NOENT; AUTH_NONE refused TOOWEAK; arguments that do not decode
//!   GARBAGE_ARGS (the connection serves on), more operations than negotiated TOO_MANY_OPS;
//! - after a SIGKILL and restart: the old session BADSESSION, the old client id
//!   STALE_CLIENTID, the old open's stateid STALE_STATEID, the old handles resolve, and the
//!   verifier has changed.

#![allow(clippy::too_many_lines)]

mod nbd_common;
mod nfs_common;

use cairn_nfs::nfs4::args::*;
use cairn_nfs::nfs4::attrs::{AttrValues, attr};
use cairn_nfs::nfs4::results::*;
use cairn_nfs::nfs4::types::*;
use cairn_nfs::nfs4::{CompoundReply, Nfs4OpResult, decode_compound_reply};
use cairn_nfs::record::read_record;
use cairn_nfs::rpc::{
    AcceptStat, AuthStat, CallHeader, Credential, OpaqueAuth, PROGRAM_NFS, RejectStat, ReplyBody,
    ReplyHeader,
};
use cairn_nfs::{Decoder, Encoder, XdrDecode};
use nbd_common::*;
use nfs_common::*;
use std::io::Write;
use std::net::TcpStream;

struct V4 {
    stream: TcpStream,
    xid: u32,
    /// The AUTH_SYS user of the calls.
    uid: u32,
}

impl V4 {
    fn connect(port: u16) -> V4 {
        let stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
        stream
            .set_read_timeout(Some(std::time::Duration::from_secs(60)))
            .unwrap();
        V4 {
            stream,
            xid: 0x4000,
            uid: USER,
        }
    }

    /// One COMPOUND with `xid` and `credential`: the reply header and body.
    fn raw(
        &mut self,
        xid: u32,
        credential: Credential,
        args: &CompoundArgs,
    ) -> (ReplyHeader, Vec<u8>) {
        let mut enc = Encoder::for_record();
        enc.put(&CallHeader {
            xid,
            program: PROGRAM_NFS,
            version: NFS_V4,
            procedure: PROC4_COMPOUND,
            credential,
            verifier: OpaqueAuth::none(),
        });
        enc.put(args);
        self.stream.write_all(&enc.into_record().unwrap()).unwrap();
        let reply = read_record(&mut self.stream, 4 << 20)
            .unwrap()
            .expect("a reply");
        let mut dec = Decoder::new(&reply);
        let header = ReplyHeader::decode(&mut dec).unwrap();
        assert_eq!(header.xid, xid);
        (header, dec.rest().to_vec())
    }

    fn body(&mut self, ops: Vec<Nfs4Op>, minor_version: u32) -> Vec<u8> {
        self.xid += 1;
        let args = CompoundArgs {
            tag: b"test".to_vec(),
            minor_version,
            ops,
        };
        let (header, body) = self.raw(self.xid, sys(self.uid), &args);
        assert!(
            matches!(
                header.body,
                ReplyBody::Accepted {
                    stat: AcceptStat::Success,
                    ..
                }
            ),
            "{header:?}"
        );
        body
    }

    fn call(&mut self, ops: Vec<Nfs4Op>) -> CompoundReply {
        let body = self.body(ops, 1);
        decode_compound_reply(&body, 4 << 20).unwrap()
    }
}

fn comp(name: &str) -> Component {
    Component::new(name.as_bytes().to_vec()).unwrap()
}

fn sequence(session: SessionId, slotid: u32, sequenceid: u32) -> Nfs4Op {
    Nfs4Op::Sequence(SequenceArgs {
        sessionid: session,
        sequenceid,
        slotid,
        highest_slotid: slotid,
        cachethis: true,
    })
}

fn channel(requests: u32) -> ChannelAttrs4 {
    ChannelAttrs4 {
        headerpad_bytes: 0,
        max_request_bytes: 1 << 20,
        max_response_bytes: 1 << 20,
        max_response_cached_bytes: 1 << 20,
        max_operations: 16,
        max_requests: requests,
        rdma_ird: OneAtMost(None),
    }
}

fn exchange(owner: &str) -> Nfs4Op {
    Nfs4Op::ExchangeId(Box::new(ExchangeIdArgs {
        verifier: [7; 8],
        owner_id: Opaque4::new(owner.as_bytes().to_vec()).unwrap(),
        flags: 0,
        state_protect: StateProtect4A::None,
        client_impl_id: OneAtMost(None),
    }))
}

fn create_session(clientid: u64, sequence: u32) -> Nfs4Op {
    Nfs4Op::CreateSession(Box::new(CreateSessionArgs {
        clientid,
        sequence,
        flags: 0,
        fore_chan: channel(1000),
        back_chan: channel(1),
        cb_program: 0x4000_0000,
        sec_parms: vec![CallbackSec::None],
    }))
}

fn open(clientid: u64, name: &str, how: Option<CreateHow4>, deny: u32) -> Nfs4Op {
    Nfs4Op::Open(Box::new(OpenArgs {
        seqid: 0,
        share_access: share_access4::BOTH,
        share_deny: deny,
        owner: StateOwner4 {
            clientid,
            owner: Opaque4::new(b"owner-1".to_vec()).unwrap(),
        },
        create: how,
        claim: OpenClaim4::Null(comp(name)),
    }))
}

fn mode_attrs(mode: u32) -> Fattr4 {
    AttrValues {
        mode: Some(mode),
        ..AttrValues::default()
    }
    .to_fattr()
}

fn last_error(reply: &CompoundReply) -> Option<Nfs4Error> {
    reply.results.last().and_then(Nfs4OpResult::error)
}

/// A client with a session: (client id, session id).
fn session_of(v4: &mut V4, owner: &str) -> (u64, SessionId, CreateSessionOk) {
    let reply = v4.call(vec![exchange(owner)]);
    let Some(Nfs4OpResult::ExchangeId(Ok(ok))) = reply.results.first() else {
        panic!("EXCHANGE_ID: {reply:?}");
    };
    let (clientid, sequence) = (ok.clientid, ok.sequenceid);
    let reply = v4.call(vec![create_session(clientid, sequence)]);
    let Some(Nfs4OpResult::CreateSession(Ok(created))) = reply.results.first() else {
        panic!("CREATE_SESSION: {reply:?}");
    };
    (clientid, created.sessionid, created.clone())
}

fn home_ops() -> Vec<Nfs4Op> {
    vec![
        Nfs4Op::Putrootfh,
        Nfs4Op::Lookup(comp("tank")),
        Nfs4Op::Lookup(comp("home")),
    ]
}

fn write_op(stateid: Stateid4, stable: StableHow4, data: &[u8]) -> Nfs4Op {
    Nfs4Op::Write(WriteArgs {
        stateid,
        offset_bytes: 0,
        stable,
        data: data.to_vec(),
    })
}

#[test]
fn sessions_slots_state_and_restarts_over_nfs4() {
    let env = Env::new();
    let port = free_port();
    let mut server = shared_home(&env, port, &[]);
    let mut v4 = V4::connect(port);

    // Session rules.
    let reply = v4.call(vec![Nfs4Op::Putrootfh]);
    assert_eq!(reply.status, Err(Nfs4Error::OpNotInSession));
    for minor in [0, 2] {
        let body = v4.body(vec![Nfs4Op::Putrootfh], minor);
        let reply = decode_compound_reply(&body, 1 << 20).unwrap();
        assert_eq!(reply.status, Err(Nfs4Error::MinorVersMismatch));
        assert!(reply.results.is_empty());
    }
    let reply = v4.call(vec![exchange("a"), Nfs4Op::Putrootfh]);
    assert_eq!(last_error(&reply), Some(Nfs4Error::NotOnlyOp));
    let (clientid, session, created) = session_of(&mut v4, "client-a");
    assert_eq!(created.fore_chan.max_requests, 64);
    assert_eq!(created.fore_chan.max_response_cached_bytes, 8 * 1024);
    let again = v4.call(vec![create_session(clientid, 1)]);
    assert!(
        matches!(again.results.first(), Some(Nfs4OpResult::CreateSession(Ok(ok))) if ok.sessionid == session),
        "a retransmitted CREATE_SESSION gets its session: {again:?}"
    );

    // The pseudo root leads to the share; its handle is v3's.
    let mut ops = vec![sequence(session, 0, 1)];
    ops.extend(home_ops());
    ops.push(Nfs4Op::Getfh);
    ops.push(Nfs4Op::Getattr(Bitmap4::from_bits(&[
        attr::r#type,
        attr::owner,
    ])));
    let reply = v4.call(ops);
    assert_eq!(reply.status, Ok(()), "{reply:?}");
    let Some(Nfs4OpResult::Getfh(Ok(home))) = reply.results.get(4) else {
        panic!("{reply:?}");
    };
    let home = home.clone();
    let Some(Nfs4OpResult::Getattr(Ok(fattr))) = reply.results.get(5) else {
        panic!("{reply:?}");
    };
    let values = AttrValues::from_fattr(fattr).unwrap();
    assert_eq!(values.r#type, Some(Ftype4::Dir));
    assert_eq!(
        values.owner.unwrap().as_bytes(),
        USER.to_string().as_bytes()
    );
    let mut v3 = Raw::connect(port);
    assert_eq!(
        v3.mount("/tank/home").as_bytes(),
        home.as_bytes(),
        "v3's handle"
    );

    // OPEN (create), WRITE UNSTABLE and FILE_SYNC, COMMIT, READ.
    let data: Vec<u8> = (0..8192u32).map(|i| (i * 7 % 251) as u8).collect();
    let reply = v4.call(vec![
        sequence(session, 0, 2),
        Nfs4Op::Putfh(home.clone()),
        open(
            clientid,
            "f",
            Some(CreateHow4::Unchecked(mode_attrs(0o644))),
            0,
        ),
        Nfs4Op::Getfh,
    ]);
    let Some(Nfs4OpResult::Open(Ok(opened))) = reply.results.get(2) else {
        panic!("OPEN: {reply:?}");
    };
    let stateid = opened.stateid.clone();
    let Some(Nfs4OpResult::Getfh(Ok(file))) = reply.results.get(3) else {
        panic!("{reply:?}");
    };
    let file = file.clone();
    let reply = v4.call(vec![
        sequence(session, 0, 3),
        Nfs4Op::Putfh(file.clone()),
        write_op(stateid.clone(), StableHow4::Unstable, &data),
        Nfs4Op::Commit(CommitArgs {
            offset_bytes: 0,
            count_bytes: 0,
        }),
        write_op(stateid.clone(), StableHow4::FileSync, &data),
        Nfs4Op::Read(ReadArgs {
            stateid: Stateid4::ANONYMOUS,
            offset_bytes: 0,
            count_bytes: 1 << 20,
        }),
    ]);
    assert_eq!(reply.status, Ok(()), "{reply:?}");
    let (
        Some(Nfs4OpResult::Write(Ok(unstable))),
        Some(Nfs4OpResult::Commit(Ok(verf))),
        Some(Nfs4OpResult::Write(Ok(sync))),
        Some(Nfs4OpResult::Read(Ok(read))),
    ) = (
        reply.results.get(2),
        reply.results.get(3),
        reply.results.get(4),
        reply.results.get(5),
    )
    else {
        panic!("{reply:?}");
    };
    assert_eq!(unstable.committed, StableHow4::Unstable);
    assert_eq!(&unstable.verf, verf, "COMMIT's verifier is the WRITE's");
    assert_eq!(sync.committed, StableHow4::FileSync);
    assert_eq!(read.data, data);
    assert!(read.eof);
    let verifier_before = *verf;

    // Exactly once: a GUARDED create retransmitted on its slot gets its first reply.
    let guarded = vec![
        sequence(session, 1, 1),
        Nfs4Op::Putfh(home.clone()),
        open(
            clientid,
            "g",
            Some(CreateHow4::Guarded(mode_attrs(0o600))),
            0,
        ),
    ];
    let first = v4.body(guarded.clone(), 1);
    let replayed = v4.body(guarded.clone(), 1);
    assert_eq!(first, replayed, "the retransmission gets the cached reply");
    let first = decode_compound_reply(&first, 1 << 20).unwrap();
    assert_eq!(first.status, Ok(()), "{first:?}");
    let reply = v4.call(vec![sequence(session, 1, 3), Nfs4Op::Putrootfh]);
    assert_eq!(last_error(&reply), Some(Nfs4Error::SeqMisordered));
    let reply = v4.call(vec![sequence(session, 999, 1), Nfs4Op::Putrootfh]);
    assert_eq!(last_error(&reply), Some(Nfs4Error::BadSlot));
    let reply = v4.call(vec![sequence([9; 16], 0, 1), Nfs4Op::Putrootfh]);
    assert_eq!(last_error(&reply), Some(Nfs4Error::BadSession));
    // A new request on slot 1 runs again: GUARDED now finds "g".
    let mut again = guarded.clone();
    again[0] = sequence(session, 1, 2);
    assert_eq!(last_error(&v4.call(again)), Some(Nfs4Error::Exist));

    // Refusals.
    let reply = v4.call(vec![
        sequence(session, 0, 4),
        Nfs4Op::Putfh(home.clone()),
        open(clientid, "f", None, 1),
    ]);
    assert_eq!(last_error(&reply), Some(Nfs4Error::NotSupp), "deny modes");
    let reply = v4.call(vec![
        sequence(session, 0, 5),
        Nfs4Op::Putrootfh,
        Nfs4Op::NotSupported(OpNum::Link),
    ]);
    assert_eq!(
        reply.results.last(),
        Some(&Nfs4OpResult::Failed(OpNum::Link, Nfs4Error::NotSupp))
    );
    let reply = v4.call(vec![sequence(session, 0, 6), Nfs4Op::Illegal(77)]);
    assert_eq!(
        reply.results.last(),
        Some(&Nfs4OpResult::Failed(OpNum::Illegal, Nfs4Error::OpIllegal))
    );
    v4.xid += 1;
    let (header, _) = v4.raw(
        v4.xid,
        Credential::None,
        &CompoundArgs {
            tag: vec![],
            minor_version: 1,
            ops: vec![],
        },
    );
    assert!(
        matches!(
            header.body,
            ReplyBody::Denied(RejectStat::AuthError(AuthStat::TooWeak))
        ),
        "{header:?}"
    );

    // Arguments that do not decode get GARBAGE_ARGS and the connection serves on; more
    // operations than the session allows, TOO_MANY_OPS.
    for garbage in [
        vec![0xff; 3],
        vec![0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 1, 0],
        vec![
            0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 22, 0xff, 0xff, 0xff, 0xff,
        ],
    ] {
        v4.xid += 1;
        let mut enc = Encoder::for_record();
        enc.put(&CallHeader {
            xid: v4.xid,
            program: PROGRAM_NFS,
            version: NFS_V4,
            procedure: PROC4_COMPOUND,
            credential: sys(USER),
            verifier: OpaqueAuth::none(),
        });
        enc.put_fixed(&garbage);
        v4.stream.write_all(&enc.into_record().unwrap()).unwrap();
        let reply = read_record(&mut v4.stream, 1 << 20)
            .unwrap()
            .expect("a reply");
        let header = ReplyHeader::decode(&mut Decoder::new(&reply)).unwrap();
        assert!(
            matches!(
                header.body,
                ReplyBody::Accepted {
                    stat: AcceptStat::GarbageArgs,
                    ..
                }
            ),
            "{garbage:?}: {header:?}"
        );
    }
    let mut many = vec![sequence(session, 2, 1)];
    many.extend(std::iter::repeat_n(Nfs4Op::Putrootfh, 40));
    assert_eq!(last_error(&v4.call(many)), Some(Nfs4Error::TooManyOps));

    // CLOSE, then the stateid is gone; REMOVE, then the name is.
    let reply = v4.call(vec![
        sequence(session, 0, 7),
        Nfs4Op::Putfh(file.clone()),
        Nfs4Op::Close(CloseArgs {
            seqid: 0,
            stateid: stateid.clone(),
        }),
        write_op(stateid.clone(), StableHow4::Unstable, b"late"),
    ]);
    assert_eq!(last_error(&reply), Some(Nfs4Error::BadStateid), "{reply:?}");
    let reply = v4.call(vec![
        sequence(session, 0, 8),
        Nfs4Op::Putfh(home.clone()),
        open(clientid, "f", None, 0),
    ]);
    let Some(Nfs4OpResult::Open(Ok(reopened))) = reply.results.get(2) else {
        panic!("{reply:?}");
    };
    let old_stateid = reopened.stateid.clone();
    let reply = v4.call(vec![
        sequence(session, 0, 9),
        Nfs4Op::Putfh(home.clone()),
        Nfs4Op::Remove(comp("g")),
        Nfs4Op::Lookup(comp("g")),
    ]);
    assert_eq!(last_error(&reply), Some(Nfs4Error::NoEnt), "{reply:?}");

    // Another user cannot truncate a read-only file by opening it with a size.
    let size_zero = AttrValues {
        size: Some(0),
        ..AttrValues::default()
    }
    .to_fattr();
    let reply = v4.call(vec![
        sequence(session, 3, 1),
        Nfs4Op::Putfh(home.clone()),
        open(
            clientid,
            "ro",
            Some(CreateHow4::Unchecked(mode_attrs(0o644))),
            0,
        ),
        write_op(Stateid4::CURRENT, StableHow4::FileSync, b"keep"),
        Nfs4Op::Setattr(SetattrArgs {
            stateid: Stateid4::ANONYMOUS,
            attrs: mode_attrs(0o444),
        }),
    ]);
    assert_eq!(reply.status, Ok(()), "{reply:?}");
    v4.uid = USER + 1;
    let reply = v4.call(vec![
        sequence(session, 3, 2),
        Nfs4Op::Putfh(home.clone()),
        open(clientid, "ro", Some(CreateHow4::Unchecked(size_zero)), 0),
    ]);
    assert_eq!(last_error(&reply), Some(Nfs4Error::Access), "{reply:?}");
    v4.uid = USER;
    let reply = v4.call(vec![
        sequence(session, 3, 3),
        Nfs4Op::Putfh(home.clone()),
        Nfs4Op::Lookup(comp("ro")),
        Nfs4Op::Read(ReadArgs {
            stateid: Stateid4::ANONYMOUS,
            offset_bytes: 0,
            count_bytes: 64,
        }),
    ]);
    assert!(
        matches!(reply.results.get(3), Some(Nfs4OpResult::Read(Ok(read))) if read.data == b"keep"),
        "{reply:?}"
    );

    // SIGKILL and restart.
    server.kill();
    drop(v4);
    server = env.serve_with_args(&["--nfs", &format!("127.0.0.1:{port}")]);
    let mut v4 = V4::connect(port);
    let reply = v4.call(vec![sequence(session, 0, 10), Nfs4Op::Putrootfh]);
    assert_eq!(last_error(&reply), Some(Nfs4Error::BadSession));
    let reply = v4.call(vec![create_session(clientid, 2)]);
    assert_eq!(last_error(&reply), Some(Nfs4Error::StaleClientid));
    let (_, session, _) = session_of(&mut v4, "client-a");
    let reply = v4.call(vec![
        sequence(session, 0, 1),
        Nfs4Op::Putfh(file.clone()),
        Nfs4Op::Read(ReadArgs {
            stateid: old_stateid,
            offset_bytes: 0,
            count_bytes: 16,
        }),
    ]);
    assert_eq!(
        last_error(&reply),
        Some(Nfs4Error::StaleStateid),
        "{reply:?}"
    );
    let reply = v4.call(vec![
        sequence(session, 0, 2),
        Nfs4Op::Putfh(file.clone()),
        Nfs4Op::Read(ReadArgs {
            stateid: Stateid4::ANONYMOUS,
            offset_bytes: 0,
            count_bytes: 1 << 20,
        }),
        Nfs4Op::Commit(CommitArgs {
            offset_bytes: 0,
            count_bytes: 0,
        }),
    ]);
    let (Some(Nfs4OpResult::Read(Ok(read))), Some(Nfs4OpResult::Commit(Ok(verf)))) =
        (reply.results.get(2), reply.results.get(3))
    else {
        panic!("the old handle resolves: {reply:?}");
    };
    assert_eq!(read.data, data);
    assert_ne!(
        *verf, verifier_before,
        "the verifier changed with the restart"
    );
    server.terminate();
    env.assert_pool_check_clean();
}
