//! COMPOUND: runs a v4.1 request's operations in order with a current and a saved handle,
//! stopping at the first that fails (RFC 8881 §16.2.3), inside the session its SEQUENCE
//! names.
//!
//! A compound must start with SEQUENCE (its slot gives exactly-once execution: a
//! retransmission gets the first reply from the slot, byte for byte, never a second run:
//! `sessions.rs`), except for the operations that make or end sessions and clients
//! (EXCHANGE_ID, CREATE_SESSION, DESTROY_SESSION, DESTROY_CLIENTID), which come alone
//! (NOT_ONLY_OP otherwise); anything else first gets OP_NOT_IN_SESSION, SEQUENCE anywhere
//! else SEQUENCE_POS, more operations than the session allows TOO_MANY_OPS, a minor version
//! other than 1 MINOR_VERS_MISMATCH. Operations the codec does not decode end the compound
//! with NOTSUPP, undefined ones with OP_ILLEGAL. Uses `ops.rs` (the operations on files),
//! `pseudo.rs` and `sessions.rs`.

use super::super::context::NfsContext;
use super::super::convert::Caller;
use super::super::memory::IO_BYTES_MAX;
use super::ops::Env;
use super::pseudo::Fh;
use cairn_nfs::nfs4::args::SecinfoStyle4;
use cairn_nfs::nfs4::args::{CompoundArgs, MINOR_VERSION, SequenceArgs, exchgid4};
use cairn_nfs::nfs4::args::{ExchangeIdArgs, StateProtect4A};
use cairn_nfs::nfs4::results::SetattrRes;
use cairn_nfs::nfs4::results::{ExchangeIdOk, SecInfo4, SecinfoOk, SequenceOk, StateProtect4R};
use cairn_nfs::nfs4::types::Bitmap4;
use cairn_nfs::nfs4::types::{ImplId4, NfsTime4, OneAtMost, Opaque4, Stateid4};
use cairn_nfs::nfs4::{
    CompoundReply, Nfs4Error, Nfs4Op, Nfs4OpResult, OpNum, OpResult, decode_compound,
};
use cairn_nfs::rpc::AUTH_SYS;
use cairn_nfs::{Encoder, XdrError};
use std::net::IpAddr;

/// Serves one COMPOUND: its reply's body (after the RPC reply header), or why its arguments
/// do not decode (GARBAGE_ARGS).
pub fn compound(
    ctx: &NfsContext,
    client: IpAddr,
    caller: Caller,
    args: &[u8],
) -> Result<Vec<u8>, XdrError> {
    let call = decode_compound(args, IO_BYTES_MAX as usize)?;
    ctx.v4.expire();
    let env = Env {
        ctx,
        state: &ctx.v4,
        client,
        caller,
        clientid: 0,
        current: None,
        saved: None,
    };
    Ok(run(env, call))
}

fn encode(reply: &CompoundReply) -> Vec<u8> {
    let mut enc = Encoder::new();
    enc.put(reply);
    enc.into_bytes()
}

fn run(mut env: Env<'_>, call: CompoundArgs) -> Vec<u8> {
    let tag = call.tag.clone();
    if call.minor_version != MINOR_VERSION {
        return encode(&CompoundReply {
            status: Err(Nfs4Error::MinorVersMismatch),
            tag,
            results: Vec::new(),
        });
    }
    let Some(first) = call.ops.first() else {
        return encode(&CompoundReply::of(tag, Vec::new()));
    };
    let result = match first {
        Nfs4Op::Sequence(args) => return in_session(env, &call, args),
        Nfs4Op::ExchangeId(_) | Nfs4Op::CreateSession(_) | Nfs4Op::DestroyClientid(_)
            if call.ops.len() > 1 =>
        {
            error_result(first, Nfs4Error::NotOnlyOp)
        }
        Nfs4Op::ExchangeId(_)
        | Nfs4Op::CreateSession(_)
        | Nfs4Op::DestroyClientid(_)
        | Nfs4Op::DestroySession(_) => execute(&mut env, first),
        Nfs4Op::NotSupported(_) | Nfs4Op::Illegal(_) => execute(&mut env, first),
        op => error_result(op, Nfs4Error::OpNotInSession),
    };
    encode(&CompoundReply::of(tag, vec![result]))
}

/// A compound that starts with SEQUENCE.
fn in_session(mut env: Env<'_>, call: &CompoundArgs, args: &SequenceArgs) -> Vec<u8> {
    let tag = call.tag.clone();
    let refuse = |err| {
        encode(&CompoundReply::of(
            tag.clone(),
            vec![Nfs4OpResult::Sequence(Err(err))],
        ))
    };
    let Some(session) = env.state.session(&args.sessionid) else {
        return refuse(Nfs4Error::BadSession);
    };
    if call.ops.len() > session.fore.max_operations as usize {
        return refuse(Nfs4Error::TooManyOps);
    }
    match session.begin(args.slotid, args.sequenceid) {
        Ok(super::super::sessions::SlotCheck::Replay(reply)) => return reply.to_vec(),
        Ok(super::super::sessions::SlotCheck::New) => {}
        Err(err) => return refuse(err),
    }
    env.state.renew(session.clientid);
    env.clientid = session.clientid;
    let highest = session.slot_count().saturating_sub(1);
    let mut results = vec![Nfs4OpResult::Sequence(Ok(SequenceOk {
        sessionid: args.sessionid,
        sequenceid: args.sequenceid,
        slotid: args.slotid,
        highest_slotid: highest,
        target_highest_slotid: highest,
        status_flags: 0,
    }))];
    for op in &call.ops[1..] {
        let result = match op {
            Nfs4Op::Sequence(_) => error_result(op, Nfs4Error::SequencePos),
            op => execute(&mut env, op),
        };
        let failed = result.error().is_some();
        results.push(result);
        if failed {
            break;
        }
    }
    let reply = encode(&CompoundReply::of(tag, results));
    session.finish(args.slotid, &reply);
    reply
}

/// Runs one operation.
fn execute(env: &mut Env<'_>, op: &Nfs4Op) -> Nfs4OpResult {
    match op {
        Nfs4Op::Access(bits) => Nfs4OpResult::Access(env.access(*bits)),
        Nfs4Op::Close(args) => Nfs4OpResult::Close(close(env, &args.stateid)),
        Nfs4Op::Commit(args) => Nfs4OpResult::Commit(env.commit(args)),
        Nfs4Op::Getattr(mask) => Nfs4OpResult::Getattr(getattr(env, mask)),
        Nfs4Op::Getfh => Nfs4OpResult::Getfh(env.current().map(Fh::to_wire)),
        Nfs4Op::Lookup(name) => Nfs4OpResult::Lookup(env.lookup(name)),
        Nfs4Op::Lookupp => Nfs4OpResult::Lookupp(env.lookupp()),
        Nfs4Op::Open(args) => Nfs4OpResult::Open(env.open(args).map(Box::new)),
        Nfs4Op::Putfh(fh) => Nfs4OpResult::Putfh(env.putfh(fh)),
        Nfs4Op::Putrootfh => {
            env.current = Some(Fh::Pseudo(String::new()));
            Nfs4OpResult::Putrootfh(Ok(()))
        }
        Nfs4Op::Read(args) => Nfs4OpResult::Read(env.read(args)),
        Nfs4Op::Readdir(args) => Nfs4OpResult::Readdir(env.readdir(args)),
        Nfs4Op::Remove(name) => Nfs4OpResult::Remove(env.remove(name)),
        Nfs4Op::Restorefh => Nfs4OpResult::Restorefh(match env.saved.clone() {
            Some(fh) => {
                env.current = Some(fh);
                Ok(())
            }
            None => Err(Nfs4Error::RestoreFh),
        }),
        Nfs4Op::Savefh => Nfs4OpResult::Savefh(env.current().cloned().map(|fh| {
            env.saved = Some(fh);
        })),
        Nfs4Op::Setattr(args) => Nfs4OpResult::Setattr(env.setattr(args)),
        Nfs4Op::Write(args) => Nfs4OpResult::Write(env.write(args)),
        Nfs4Op::SecinfoNoName(style) => Nfs4OpResult::SecinfoNoName(secinfo(env, *style)),
        Nfs4Op::Sequence(_) => Nfs4OpResult::Sequence(Err(Nfs4Error::SequencePos)),
        Nfs4Op::ExchangeId(args) => Nfs4OpResult::ExchangeId(exchange_id(env, args)),
        Nfs4Op::CreateSession(args) => Nfs4OpResult::CreateSession(env.state.create_session(args)),
        Nfs4Op::DestroySession(id) => Nfs4OpResult::DestroySession(env.state.destroy_session(id)),
        Nfs4Op::DestroyClientid(id) => {
            Nfs4OpResult::DestroyClientid(env.state.destroy_clientid(*id))
        }
        Nfs4Op::ReclaimComplete(one_fs) => {
            Nfs4OpResult::ReclaimComplete(env.state.reclaim_complete(env.clientid, *one_fs))
        }
        Nfs4Op::NotSupported(num) => Nfs4OpResult::Failed(*num, Nfs4Error::NotSupp),
        Nfs4Op::Illegal(_) => Nfs4OpResult::Failed(OpNum::Illegal, Nfs4Error::OpIllegal),
    }
}

fn getattr(env: &Env<'_>, mask: &Bitmap4) -> OpResult<cairn_nfs::nfs4::Fattr4> {
    let fh = env.current()?.clone();
    env.attrs_of(&fh, mask).map(|values| values.to_fattr())
}

fn close(env: &Env<'_>, stateid: &Stateid4) -> OpResult<Stateid4> {
    match env.current()? {
        Fh::Real(handle) => env.state.close(stateid, handle)?,
        Fh::Pseudo(_) => return Err(Nfs4Error::BadStateid),
    }
    Ok(Stateid4::INVALID)
}

/// SECINFO_NO_NAME: AUTH_SYS only; it consumes the current handle.
fn secinfo(env: &mut Env<'_>, style: SecinfoStyle4) -> OpResult<SecinfoOk> {
    let current = env.current()?.clone();
    if style == SecinfoStyle4::Parent && current == Fh::Pseudo(String::new()) {
        return Err(Nfs4Error::NoEnt);
    }
    env.current = None;
    Ok(SecinfoOk(vec![SecInfo4::Flavor(AUTH_SYS)]))
}

fn opaque(text: &str) -> Opaque4 {
    Opaque4::new(text.as_bytes().to_vec()).unwrap_or_default()
}

fn exchange_id(env: &Env<'_>, args: &ExchangeIdArgs) -> OpResult<Box<ExchangeIdOk>> {
    if args.state_protect != StateProtect4A::None {
        // Machine-credential protection is for Kerberos; cairn speaks AUTH_SYS only.
        return Err(Nfs4Error::NotSupp);
    }
    let exchanged = env.state.exchange_id(args)?;
    let mut flags = exchgid4::USE_NON_PNFS;
    if exchanged.confirmed {
        flags |= exchgid4::CONFIRMED_R;
    }
    Ok(Box::new(ExchangeIdOk {
        clientid: exchanged.clientid,
        sequenceid: exchanged.sequenceid,
        flags,
        state_protect: StateProtect4R::None,
        server_minor_id: 0,
        server_major_id: opaque("cairn"),
        server_scope: opaque("cairn"),
        server_impl_id: OneAtMost(Some(ImplId4 {
            domain: opaque("cairn"),
            name: opaque("cairn NFSv4.1"),
            date: NfsTime4 {
                seconds: 0,
                nseconds: 0,
            },
        })),
    }))
}

/// The result of `op` failing with `err`.
pub fn error_result(op: &Nfs4Op, err: Nfs4Error) -> Nfs4OpResult {
    match op {
        Nfs4Op::Access(_) => Nfs4OpResult::Access(Err(err)),
        Nfs4Op::Close(_) => Nfs4OpResult::Close(Err(err)),
        Nfs4Op::Commit(_) => Nfs4OpResult::Commit(Err(err)),
        Nfs4Op::Getattr(_) => Nfs4OpResult::Getattr(Err(err)),
        Nfs4Op::Getfh => Nfs4OpResult::Getfh(Err(err)),
        Nfs4Op::Lookup(_) => Nfs4OpResult::Lookup(Err(err)),
        Nfs4Op::Lookupp => Nfs4OpResult::Lookupp(Err(err)),
        Nfs4Op::Open(_) => Nfs4OpResult::Open(Err(err)),
        Nfs4Op::Putfh(_) => Nfs4OpResult::Putfh(Err(err)),
        Nfs4Op::Putrootfh => Nfs4OpResult::Putrootfh(Err(err)),
        Nfs4Op::Read(_) => Nfs4OpResult::Read(Err(err)),
        Nfs4Op::Readdir(_) => Nfs4OpResult::Readdir(Err(err)),
        Nfs4Op::Remove(_) => Nfs4OpResult::Remove(Err(err)),
        Nfs4Op::Restorefh => Nfs4OpResult::Restorefh(Err(err)),
        Nfs4Op::Savefh => Nfs4OpResult::Savefh(Err(err)),
        Nfs4Op::Setattr(_) => Nfs4OpResult::Setattr(SetattrRes {
            status: Err(err),
            attrsset: Bitmap4::default(),
        }),
        Nfs4Op::Write(_) => Nfs4OpResult::Write(Err(err)),
        Nfs4Op::ExchangeId(_) => Nfs4OpResult::ExchangeId(Err(err)),
        Nfs4Op::CreateSession(_) => Nfs4OpResult::CreateSession(Err(err)),
        Nfs4Op::DestroySession(_) => Nfs4OpResult::DestroySession(Err(err)),
        Nfs4Op::SecinfoNoName(_) => Nfs4OpResult::SecinfoNoName(Err(err)),
        Nfs4Op::Sequence(_) => Nfs4OpResult::Sequence(Err(err)),
        Nfs4Op::DestroyClientid(_) => Nfs4OpResult::DestroyClientid(Err(err)),
        Nfs4Op::ReclaimComplete(_) => Nfs4OpResult::ReclaimComplete(Err(err)),
        Nfs4Op::NotSupported(num) => Nfs4OpResult::Failed(*num, err),
        Nfs4Op::Illegal(_) => Nfs4OpResult::Failed(OpNum::Illegal, err),
    }
}
