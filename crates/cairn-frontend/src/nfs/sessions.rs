//! NFSv4.1 server state (kept in `NfsContext`, used by `v4/`): clients (EXCHANGE_ID), their sessions (CREATE_SESSION) with slot
//! tables, open stateids, and leases.
//!
//! **Clients.** Keyed by the client's owner id; a client id is this server instance's 32
//! random bits and a counter, so ids from before a restart are unknown (STALE_CLIENTID) and
//! the client starts over. A client is unconfirmed until its first CREATE_SESSION, whose
//! reply is kept for a retransmission (the per-client create-session sequence, RFC 8881
//! §18.36). A client that comes back with another verifier (it rebooted) gets a new record,
//! which replaces the old one — and drops the old one's state — when confirmed.
//!
//! **Sessions and slots** (the exactly-once cache): each slot holds the sequence id of its
//! last request and that request's encoded reply (`SlotReply`). A request with the next
//! sequence id runs; one with the same id gets the cached reply (or DELAY while it is still
//! running, RETRY_UNCACHED_REP if it was too large to keep); anything else SEQ_MISORDERED.
//! Memory is bounded: at most `SLOTS_MAX` slots of at most `CACHED_REPLY_BYTES_MAX` each per
//! session (the client's asks negotiated down), `SESSIONS_MAX` sessions and `CLIENTS_MAX`
//! clients on the server.
//!
//! **Opens** (no deny modes yet: OPEN with a deny mode is refused NOTSUPP): one stateid per
//! (client, open owner, file), whose access grows with each OPEN and whose seqid counts them.
//! The stateid's 12 bytes are the instance bits and a counter, so a stateid of an earlier
//! server instance is STALE_STATEID.
//!
//! **Leases**: every SEQUENCE renews its client's lease (`LEASE_SECONDS`); a client not
//! heard from for longer loses its sessions and opens (`expire`, run at most once a second
//! by the compound loop). There is no grace period yet: reclaims after a restart get
//! NO_GRACE, and the client opens again.

use cairn_nfs::nfs3::FileHandle;
use cairn_nfs::nfs4::Nfs4Error;
use cairn_nfs::nfs4::args::{CreateSessionArgs, ExchangeIdArgs, exchgid4};
use cairn_nfs::nfs4::results::CreateSessionOk;
use cairn_nfs::nfs4::types::{ChannelAttrs4, OneAtMost, SessionId, Stateid4};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The lease every client gets (`lease_time`).
pub const LEASE_SECONDS: u32 = 90;
/// Slots per session at most.
pub const SLOTS_MAX: u32 = 64;
/// Bytes of one cached reply at most (a reply to a non-idempotent compound: a handle and
/// attributes, well under this).
pub const CACHED_REPLY_BYTES_MAX: u32 = 8 * 1024;
/// Operations per compound at most.
pub const OPS_MAX: u32 = 32;
/// Sessions on the server at most (with the above: 64 × 64 × 8 KiB = 32 MiB of cache).
pub const SESSIONS_MAX: usize = 64;
/// Sessions one client may hold.
const SESSIONS_PER_CLIENT_MAX: usize = 4;
/// Clients known at most.
pub const CLIENTS_MAX: usize = 1024;
/// Open stateids at most.
pub const OPENS_MAX: usize = 64 * 1024;

/// What a slot holds of its last request.
#[derive(Debug, Clone)]
pub enum SlotReply {
    /// Nothing yet (sequence id 0).
    Empty,
    /// Running now.
    InProgress,
    /// Its reply's body (after the RPC header).
    Cached(Arc<Vec<u8>>),
    /// Answered, too large to keep.
    Uncached,
}

#[derive(Debug, Clone)]
struct Slot {
    sequenceid: u32,
    reply: SlotReply,
}

pub struct Session {
    pub clientid: u64,
    pub fore: ChannelAttrs4,
    slots: Mutex<Vec<Slot>>,
}

/// What SEQUENCE found in a slot.
pub enum SlotCheck {
    /// A new request: run it (the slot is now in progress).
    New,
    /// A retransmission: its reply.
    Replay(Arc<Vec<u8>>),
}

impl Session {
    /// Checks and takes `slotid` for `sequenceid` (RFC 8881 §2.10.6.1).
    pub fn begin(&self, slotid: u32, sequenceid: u32) -> Result<SlotCheck, Nfs4Error> {
        let mut slots = self.slots.lock();
        let slot = slots.get_mut(slotid as usize).ok_or(Nfs4Error::BadSlot)?;
        if sequenceid == slot.sequenceid.wrapping_add(1) {
            if matches!(slot.reply, SlotReply::InProgress) {
                return Err(Nfs4Error::Delay);
            }
            slot.sequenceid = sequenceid;
            slot.reply = SlotReply::InProgress;
            return Ok(SlotCheck::New);
        }
        if sequenceid == slot.sequenceid {
            return match &slot.reply {
                SlotReply::Cached(reply) => Ok(SlotCheck::Replay(reply.clone())),
                SlotReply::InProgress => Err(Nfs4Error::Delay),
                SlotReply::Uncached => Err(Nfs4Error::RetryUncachedRep),
                SlotReply::Empty => Err(Nfs4Error::SeqMisordered),
            };
        }
        Err(Nfs4Error::SeqMisordered)
    }

    /// Keeps the reply of the request in `slotid` (if it fits the negotiated size).
    pub fn finish(&self, slotid: u32, reply: &[u8]) {
        let mut slots = self.slots.lock();
        if let Some(slot) = slots.get_mut(slotid as usize) {
            slot.reply = if reply.len() <= self.fore.max_response_cached_bytes as usize {
                SlotReply::Cached(Arc::new(reply.to_vec()))
            } else {
                SlotReply::Uncached
            };
        }
    }

    pub fn slot_count(&self) -> u32 {
        self.slots.lock().len() as u32
    }
}

struct Client {
    owner: Vec<u8>,
    verifier: [u8; 8],
    confirmed: bool,
    /// The create-session sequence id expected next.
    cs_sequence: u32,
    /// The last CREATE_SESSION's reply (for its retransmission).
    cs_reply: Option<CreateSessionOk>,
    renewed: Instant,
    reclaim_complete: bool,
    /// The confirmed record of the same owner this one replaces when confirmed.
    replaces: Option<u64>,
}

/// One open: whose, of which file, with which access.
#[derive(Debug, Clone)]
pub struct Open {
    pub clientid: u64,
    pub owner: Vec<u8>,
    pub fh: FileHandle,
    /// `OPEN4_SHARE_ACCESS_*` bits granted so far.
    pub access: u32,
    pub seqid: u32,
}

#[derive(Default)]
struct Tables {
    clients: HashMap<u64, Client>,
    sessions: HashMap<SessionId, Arc<Session>>,
    opens: HashMap<[u8; 12], Open>,
    /// The stateid of each (client, owner, file) open.
    open_of_owner: HashMap<(u64, Vec<u8>, FileHandle), [u8; 12]>,
    next_id: u32,
    next_open: u64,
    last_expiry: Option<Instant>,
}

/// The v4.1 state of one server.
pub struct V4State {
    /// This server instance's random bits in client ids, session ids and stateids.
    instance: u32,
    tables: Mutex<Tables>,
}

/// What EXCHANGE_ID gives back.
pub struct Exchanged {
    pub clientid: u64,
    pub sequenceid: u32,
    pub confirmed: bool,
}

impl V4State {
    pub fn new(instance: u32) -> V4State {
        V4State {
            instance,
            tables: Mutex::default(),
        }
    }

    fn new_clientid(&self, tables: &mut Tables) -> u64 {
        tables.next_id = tables.next_id.wrapping_add(1);
        (u64::from(self.instance) << 32) | u64::from(tables.next_id)
    }

    /// EXCHANGE_ID (RFC 8881 §18.35.5, without state protection).
    pub fn exchange_id(&self, args: &ExchangeIdArgs) -> Result<Exchanged, Nfs4Error> {
        let mut tables = self.tables.lock();
        let owner = args.owner_id.as_bytes();
        let same_owner: Vec<u64> = tables
            .clients
            .iter()
            .filter(|(_, client)| client.owner == owner)
            .map(|(id, _)| *id)
            .collect();
        let confirmed = same_owner
            .iter()
            .copied()
            .find(|id| tables.clients.get(id).is_some_and(|c| c.confirmed));
        if let Some(id) = confirmed
            && let Some(client) = tables.clients.get_mut(&id)
            && client.verifier == args.verifier
        {
            client.renewed = Instant::now();
            return Ok(Exchanged {
                clientid: id,
                sequenceid: client.cs_sequence,
                confirmed: true,
            });
        }
        if args.flags & exchgid4::UPD_CONFIRMED_REC_A != 0 {
            return Err(if confirmed.is_some() {
                Nfs4Error::NotSame
            } else {
                Nfs4Error::NoEnt
            });
        }
        // A new record: drop the owner's unconfirmed ones.
        for id in same_owner {
            if Some(id) != confirmed {
                tables.clients.remove(&id);
            }
        }
        if tables.clients.len() >= CLIENTS_MAX {
            return Err(Nfs4Error::ServerFault);
        }
        let clientid = self.new_clientid(&mut tables);
        tables.clients.insert(
            clientid,
            Client {
                owner: owner.to_vec(),
                verifier: args.verifier,
                confirmed: false,
                cs_sequence: 1,
                cs_reply: None,
                renewed: Instant::now(),
                reclaim_complete: false,
                replaces: confirmed,
            },
        );
        Ok(Exchanged {
            clientid,
            sequenceid: 1,
            confirmed: false,
        })
    }

    /// CREATE_SESSION: a session with the client's channel negotiated down to our limits.
    pub fn create_session(&self, args: &CreateSessionArgs) -> Result<CreateSessionOk, Nfs4Error> {
        let mut guard = self.tables.lock();
        let tables = &mut *guard;
        let client = tables
            .clients
            .get_mut(&args.clientid)
            .ok_or(Nfs4Error::StaleClientid)?;
        if args.sequence == client.cs_sequence.wrapping_sub(1) {
            return client.cs_reply.clone().ok_or(Nfs4Error::SeqMisordered);
        }
        if args.sequence != client.cs_sequence {
            return Err(Nfs4Error::SeqMisordered);
        }
        let own_sessions = tables
            .sessions
            .values()
            .filter(|session| session.clientid == args.clientid)
            .count();
        if tables.sessions.len() >= SESSIONS_MAX || own_sessions >= SESSIONS_PER_CLIENT_MAX {
            return Err(Nfs4Error::NoSpc);
        }
        let fore = negotiate(&args.fore_chan);
        let back = ChannelAttrs4 {
            rdma_ird: OneAtMost(None),
            ..args.back_chan.clone()
        };
        tables.next_id = tables.next_id.wrapping_add(1);
        let mut id = [0; 16];
        id[..8].copy_from_slice(&args.clientid.to_be_bytes());
        id[8..12].copy_from_slice(&tables.next_id.to_be_bytes());
        id[12..].copy_from_slice(&self.instance.to_be_bytes());
        let session = Session {
            clientid: args.clientid,
            fore: fore.clone(),
            slots: Mutex::new(vec![
                Slot {
                    sequenceid: 0,
                    reply: SlotReply::Empty,
                };
                fore.max_requests as usize
            ]),
        };
        let reply = CreateSessionOk {
            sessionid: id,
            sequence: args.sequence,
            // No persistent reply cache, no back channel (no callbacks are made: no
            // delegations are given), no RDMA.
            flags: 0,
            fore_chan: fore,
            back_chan: back,
        };
        client.cs_sequence = client.cs_sequence.wrapping_add(1);
        client.cs_reply = Some(reply.clone());
        client.renewed = Instant::now();
        let replaced = if client.confirmed {
            None
        } else {
            client.confirmed = true;
            client.replaces.take()
        };
        tables.sessions.insert(id, Arc::new(session));
        if let Some(old) = replaced {
            drop_client(tables, old);
        }
        Ok(reply)
    }

    pub fn session(&self, id: &SessionId) -> Option<Arc<Session>> {
        self.tables.lock().sessions.get(id).cloned()
    }

    /// Renews the lease of `clientid` (every SEQUENCE).
    pub fn renew(&self, clientid: u64) {
        if let Some(client) = self.tables.lock().clients.get_mut(&clientid) {
            client.renewed = Instant::now();
        }
    }

    pub fn destroy_session(&self, id: &SessionId) -> Result<(), Nfs4Error> {
        self.tables
            .lock()
            .sessions
            .remove(id)
            .map(|_| ())
            .ok_or(Nfs4Error::BadSession)
    }

    /// DESTROY_CLIENTID: refused while the client has sessions.
    pub fn destroy_clientid(&self, clientid: u64) -> Result<(), Nfs4Error> {
        let mut tables = self.tables.lock();
        if !tables.clients.contains_key(&clientid) {
            return Err(Nfs4Error::StaleClientid);
        }
        if tables.sessions.values().any(|s| s.clientid == clientid) {
            return Err(Nfs4Error::ClientidBusy);
        }
        drop_client(&mut tables, clientid);
        Ok(())
    }

    /// RECLAIM_COMPLETE for the whole client (`one_fs` false); COMPLETE_ALREADY the second
    /// time.
    pub fn reclaim_complete(&self, clientid: u64, one_fs: bool) -> Result<(), Nfs4Error> {
        let mut tables = self.tables.lock();
        let client = tables
            .clients
            .get_mut(&clientid)
            .ok_or(Nfs4Error::StaleClientid)?;
        if one_fs {
            return Ok(());
        }
        if client.reclaim_complete {
            return Err(Nfs4Error::CompleteAlready);
        }
        client.reclaim_complete = true;
        Ok(())
    }

    /// Drops every client whose lease ran out (at most once a second).
    pub fn expire(&self) {
        self.expire_at(Instant::now());
    }

    /// `expire` as of `now`.
    fn expire_at(&self, now: Instant) {
        let mut tables = self.tables.lock();
        if tables
            .last_expiry
            .is_some_and(|last| now.saturating_duration_since(last) < Duration::from_secs(1))
        {
            return;
        }
        tables.last_expiry = Some(now);
        let lease = Duration::from_secs(u64::from(LEASE_SECONDS));
        let expired: Vec<u64> = tables
            .clients
            .iter()
            .filter(|(_, client)| now.saturating_duration_since(client.renewed) > lease)
            .map(|(id, _)| *id)
            .collect();
        for id in expired {
            drop_client(&mut tables, id);
        }
    }

    /// OPEN: the stateid of (client, owner, file), its access widened to `access`.
    pub fn open(
        &self,
        clientid: u64,
        owner: &[u8],
        fh: &FileHandle,
        access: u32,
    ) -> Result<Stateid4, Nfs4Error> {
        let mut guard = self.tables.lock();
        let tables = &mut *guard;
        let key = (clientid, owner.to_vec(), fh.clone());
        if let Some(other) = tables.open_of_owner.get(&key)
            && let Some(open) = tables.opens.get_mut(other)
        {
            open.access |= access;
            open.seqid = open.seqid.wrapping_add(1).max(1);
            return Ok(Stateid4 {
                seqid: open.seqid,
                other: *other,
            });
        }
        if tables.opens.len() >= OPENS_MAX {
            return Err(Nfs4Error::Resource);
        }
        tables.next_open += 1;
        let mut other = [0; 12];
        other[..4].copy_from_slice(&self.instance.to_be_bytes());
        other[4..].copy_from_slice(&tables.next_open.to_be_bytes());
        tables.open_of_owner.insert(key, other);
        tables.opens.insert(
            other,
            Open {
                clientid,
                owner: owner.to_vec(),
                fh: fh.clone(),
                access,
                seqid: 1,
            },
        );
        Ok(Stateid4 { seqid: 1, other })
    }

    /// The open `stateid` names, checked against the file it is used on.
    pub fn open_of(&self, stateid: &Stateid4, fh: &FileHandle) -> Result<Open, Nfs4Error> {
        if stateid.other[..4] != self.instance.to_be_bytes() {
            return Err(Nfs4Error::StaleStateid);
        }
        let tables = self.tables.lock();
        let open = tables
            .opens
            .get(&stateid.other)
            .ok_or(Nfs4Error::BadStateid)?;
        if open.fh != *fh {
            return Err(Nfs4Error::BadStateid);
        }
        if stateid.seqid != 0 && stateid.seqid != open.seqid {
            return Err(if stateid.seqid < open.seqid {
                Nfs4Error::OldStateid
            } else {
                Nfs4Error::BadStateid
            });
        }
        Ok(open.clone())
    }

    /// CLOSE: forgets the open.
    pub fn close(&self, stateid: &Stateid4, fh: &FileHandle) -> Result<(), Nfs4Error> {
        self.open_of(stateid, fh)?;
        let mut tables = self.tables.lock();
        if let Some(open) = tables.opens.remove(&stateid.other) {
            tables
                .open_of_owner
                .remove(&(open.clientid, open.owner, open.fh));
        }
        Ok(())
    }
}

/// Forgets a client and everything it held.
fn drop_client(tables: &mut Tables, clientid: u64) {
    tables.clients.remove(&clientid);
    tables
        .sessions
        .retain(|_, session| session.clientid != clientid);
    tables.opens.retain(|_, open| open.clientid != clientid);
    tables
        .open_of_owner
        .retain(|(owner_client, _, _), _| *owner_client != clientid);
}

/// The fore channel we grant for what the client asked.
fn negotiate(asked: &ChannelAttrs4) -> ChannelAttrs4 {
    let request_max = u32::try_from(super::memory::RECORD_BYTES_MAX).unwrap_or(u32::MAX);
    let response_max = super::memory::IO_BYTES_MAX + 8 * 1024;
    ChannelAttrs4 {
        headerpad_bytes: 0,
        max_request_bytes: asked.max_request_bytes.min(request_max),
        max_response_bytes: asked.max_response_bytes.min(response_max),
        max_response_cached_bytes: asked.max_response_cached_bytes.min(CACHED_REPLY_BYTES_MAX),
        max_operations: asked.max_operations.clamp(1, OPS_MAX),
        max_requests: asked.max_requests.clamp(1, SLOTS_MAX),
        rdma_ird: OneAtMost(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cairn_nfs::nfs4::types::Opaque4;

    fn exchange(state: &V4State, owner: &[u8], verifier: u8) -> Exchanged {
        let args = ExchangeIdArgs {
            verifier: [verifier; 8],
            owner_id: Opaque4::new(owner.to_vec()).expect("short"),
            flags: 0,
            state_protect: cairn_nfs::nfs4::args::StateProtect4A::None,
            client_impl_id: OneAtMost(None),
        };
        state.exchange_id(&args).expect("exchange")
    }

    fn session(state: &V4State, clientid: u64, sequence: u32) -> CreateSessionOk {
        let chan = ChannelAttrs4 {
            headerpad_bytes: 0,
            max_request_bytes: 1 << 20,
            max_response_bytes: 1 << 20,
            max_response_cached_bytes: 4096,
            max_operations: 8,
            max_requests: 4,
            rdma_ird: OneAtMost(None),
        };
        let args = CreateSessionArgs {
            clientid,
            sequence,
            flags: 0,
            fore_chan: chan.clone(),
            back_chan: chan,
            cb_program: 0,
            sec_parms: Vec::new(),
        };
        state.create_session(&args).expect("session")
    }

    #[test]
    fn an_expired_lease_takes_sessions_and_opens_and_a_renewed_one_keeps_them() {
        let state = V4State::new(7);
        let a = exchange(&state, b"a", 1).clientid;
        let b = exchange(&state, b"b", 1).clientid;
        let session_a = session(&state, a, 1).sessionid;
        let session_b = session(&state, b, 1).sessionid;
        let fh = FileHandle::new(vec![1; 36]).expect("short");
        let open_a = state.open(a, b"o", &fh, 3).expect("open");
        let open_b = state.open(b, b"o", &fh, 1).expect("open");
        let start = Instant::now();
        // b renews half-way; a does not.
        state.expire_at(start + Duration::from_secs(45));
        state.tables.lock().clients.get_mut(&b).expect("b").renewed =
            start + Duration::from_secs(45);
        state.expire_at(start + Duration::from_secs(u64::from(LEASE_SECONDS) + 5));
        assert!(state.session(&session_a).is_none(), "a's session expired");
        assert_eq!(
            state.open_of(&open_a, &fh).err(),
            Some(Nfs4Error::BadStateid)
        );
        assert_eq!(state.destroy_clientid(a), Err(Nfs4Error::StaleClientid));
        assert!(state.session(&session_b).is_some(), "b renewed its lease");
        assert!(state.open_of(&open_b, &fh).is_ok());
    }

    #[test]
    fn a_rebooted_client_replaces_its_old_record_when_confirmed() {
        let state = V4State::new(7);
        let old = exchange(&state, b"a", 1);
        session(&state, old.clientid, 1);
        let fh = FileHandle::new(vec![1; 36]).expect("short");
        let open = state.open(old.clientid, b"o", &fh, 1).expect("open");
        // The same verifier: the same client id, confirmed.
        let same = exchange(&state, b"a", 1);
        assert_eq!((same.clientid, same.confirmed), (old.clientid, true));
        // Another verifier: a new record; the old one lives until the new one is confirmed.
        let new = exchange(&state, b"a", 2);
        assert_ne!(new.clientid, old.clientid);
        assert!(state.open_of(&open, &fh).is_ok());
        session(&state, new.clientid, new.sequenceid);
        assert_eq!(state.open_of(&open, &fh).err(), Some(Nfs4Error::BadStateid));
        assert_eq!(
            state.destroy_clientid(old.clientid),
            Err(Nfs4Error::StaleClientid)
        );
    }

    #[test]
    fn an_owner_opening_a_file_again_widens_its_one_stateid() {
        let state = V4State::new(7);
        let client = exchange(&state, b"a", 1).clientid;
        let fh = FileHandle::new(vec![1; 36]).expect("short");
        let read = state.open(client, b"o", &fh, 1).expect("open");
        let both = state.open(client, b"o", &fh, 2).expect("open");
        assert_eq!((read.other, read.seqid + 1), (both.other, both.seqid));
        assert_eq!(state.open_of(&both, &fh).expect("open").access, 3);
        assert_eq!(state.open_of(&read, &fh).err(), Some(Nfs4Error::OldStateid));
        let other = state.open(client, b"p", &fh, 1).expect("open");
        assert_ne!(other.other, both.other, "another owner, another stateid");
        state.close(&both, &fh).expect("close");
        let again = state.open(client, b"o", &fh, 1).expect("open");
        assert_ne!(again.other, both.other, "a new open after CLOSE");
        let elsewhere = FileHandle::new(vec![2; 36]).expect("short");
        assert_eq!(
            state.open_of(&again, &elsewhere).err(),
            Some(Nfs4Error::BadStateid)
        );
    }

    #[test]
    fn slots_run_each_sequence_id_once() {
        let state = V4State::new(7);
        let client = exchange(&state, b"a", 1).clientid;
        let id = session(&state, client, 1).sessionid;
        let session = state.session(&id).expect("session");
        assert_eq!(session.slot_count(), 4);
        assert!(matches!(session.begin(0, 1), Ok(SlotCheck::New)));
        assert_eq!(
            session.begin(0, 1).err(),
            Some(Nfs4Error::Delay),
            "still running"
        );
        session.finish(0, b"reply");
        match session.begin(0, 1) {
            Ok(SlotCheck::Replay(reply)) => assert_eq!(reply.as_slice(), b"reply"),
            _ => panic!("a retransmission gets the reply"),
        }
        assert_eq!(session.begin(0, 3).err(), Some(Nfs4Error::SeqMisordered));
        assert_eq!(session.begin(4, 1).err(), Some(Nfs4Error::BadSlot));
        assert!(matches!(session.begin(1, 1), Ok(SlotCheck::New)));
        session.finish(1, &[0; 8192]);
        assert_eq!(
            session.begin(1, 1).err(),
            Some(Nfs4Error::RetryUncachedRep),
            "over the negotiated 4096 bytes: not kept"
        );
    }
}
