//! The fixed newstyle handshake: greeting, client flags, then option haggling until the client
//! picks an export (`NBD_OPT_EXPORT_NAME` / `NBD_OPT_GO`), aborts, or misbehaves.
//!
//! Shape: [`greet`] (greeting, client flags), then [`haggle`] (options: each read, checked by
//! [`gate`] against shutdown and required TLS, then answered by its `opt_*` handler through
//! [`answer`]) until the client picks an export ([`Negotiated::Session`]) or has been told yes
//! to `NBD_OPT_STARTTLS` ([`Negotiated::StartTls`]: the caller runs the TLS handshake and
//! haggles again inside it, with fresh option state); both run under the server's handshake
//! deadline. Where TLS is required,
//! every option but STARTTLS and ABORT is refused with `NBD_REP_ERR_TLS_REQD` until it runs.
//! Invariants:
//! - memory per connection is bounded: option data above [`MAX_OPTION_DATA`] is streamed to a
//!   sink (and answered `NBD_REP_ERR_TOO_BIG`), never buffered; at most [`MAX_OPTIONS`] options
//!   are accepted per handshake;
//! - every option the server does not implement (STARTTLS when no TLS is configured) gets `NBD_REP_ERR_UNSUP` and
//!   haggling continues, as fixed newstyle requires; malformed option payloads get
//!   `NBD_REP_ERR_INVALID`;
//! - only protocol violations that make the stream unreadable (bad `IHAVEOPT` magic, unknown client
//!   flags, truncation) or an `NBD_OPT_EXPORT_NAME` the server cannot satisfy close the
//!   connection, because no error reply is possible there;
//! - provider calls may block, so they run on the blocking pool.
//!
//! Clients that do not set `NBD_FLAG_C_FIXED_NEWSTYLE` are served with fixed newstyle anyway
//! (the protocol allows it); old-style negotiation is not offered.

use std::sync::Arc;

use tokio::io::{
    AsyncBufRead, AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt,
};

use parking_lot::Mutex;

use crate::export::Export;
use crate::proto::*;
use crate::shared::Inner;
use crate::stats::ExportStats;

/// Option payloads larger than this are discarded unread and refused with `NBD_REP_ERR_TOO_BIG`.
pub(crate) const MAX_OPTION_DATA: u32 = 64 * 1024;
/// A handshake that sends more options than this is treated as hostile and closed.
pub(crate) const MAX_OPTIONS: usize = 4096;

/// Block size constraints advertised for (and enforced on) one export.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct BlockSizes {
    pub min: u32,
    pub preferred: u32,
    pub max: u32,
}

impl BlockSizes {
    /// Minimum 512; preferred = the export's preferred size rounded up to a power of two and
    /// clamped to [512, max]; maximum = the server's request limit.
    pub(crate) fn for_export(export: &dyn Export, max_request_bytes: u32) -> BlockSizes {
        let max = max_request_bytes;
        let mut preferred = export
            .preferred_block_size()
            .clamp(MIN_BLOCK_SIZE, max)
            .checked_next_power_of_two()
            .unwrap_or(MIN_BLOCK_SIZE);
        while preferred > max {
            preferred /= 2;
        }
        BlockSizes {
            min: MIN_BLOCK_SIZE,
            preferred: preferred.max(MIN_BLOCK_SIZE),
            max,
        }
    }
}

/// What the handshake hands to the transmission phase.
pub(crate) struct Session {
    /// Canonical export name (statistics key).
    pub name: String,
    pub export: Arc<dyn Export>,
    pub size: u64,
    pub readonly: bool,
    pub transmission_flags: u16,
    pub structured: bool,
    /// `base:allocation` was selected for this export: its context id.
    pub meta_context: Option<u32>,
    pub block: BlockSizes,
    /// The export's statistics cell (shared by every connection to it).
    pub stats: Arc<Mutex<ExportStats>>,
}

/// How option haggling ended well.
pub(crate) enum Negotiated {
    /// The client chose an export: transmission follows.
    Session(Session),
    /// `NBD_OPT_STARTTLS` was acknowledged: the TLS handshake follows on the same stream.
    StartTls,
}

/// Where a connection stands with TLS.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TlsPhase {
    /// The server has no TLS configured: STARTTLS is unsupported.
    Unavailable,
    /// TLS may be started; plain clients are served too.
    Offered,
    /// TLS must be started before anything but ABORT.
    Required,
    /// Inside TLS.
    Established,
}

impl TlsPhase {
    pub(crate) fn before_starttls(settings: Option<&crate::tls::TlsSettings>) -> TlsPhase {
        match settings {
            None => TlsPhase::Unavailable,
            Some(tls) if tls.require => TlsPhase::Required,
            Some(_) => TlsPhase::Offered,
        }
    }
}

/// Why a handshake ended without a session.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Ended {
    /// The client sent `NBD_OPT_ABORT`.
    Aborted,
    /// The server is shutting down.
    Shutdown,
    /// A protocol violation or an unsatisfiable `NBD_OPT_EXPORT_NAME`.
    Violation,
}

/// Per-handshake option state.
#[derive(Default)]
struct State {
    no_zeroes: bool,
    structured: bool,
    /// Export name (as sent by the client) for which `base:allocation` is selected.
    meta_for: Option<Vec<u8>>,
}

/// Sends the greeting and reads the client's flags; returns whether the client asked for
/// `NO_ZEROES`. I/O errors (including EOF) surface as `Err`.
pub(crate) async fn greet<R, W>(r: &mut R, w: &mut W) -> std::io::Result<Result<bool, Ended>>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut greeting = Vec::with_capacity(18);
    greeting.extend_from_slice(&NBDMAGIC.to_be_bytes());
    greeting.extend_from_slice(&IHAVEOPT.to_be_bytes());
    greeting.extend_from_slice(&(FLAG_FIXED_NEWSTYLE | FLAG_NO_ZEROES).to_be_bytes());
    w.write_all(&greeting).await?;
    w.flush().await?;

    let client_flags = r.read_u32().await?;
    if client_flags & !(FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES) != 0 {
        return Ok(Err(Ended::Violation));
    }
    Ok(Ok(client_flags & FLAG_C_NO_ZEROES != 0))
}

/// Haggles over options until the client picks an export, is told yes to STARTTLS, aborts or
/// misbehaves. I/O errors (including EOF) surface as `Err`.
pub(crate) async fn haggle<R, W>(
    inner: &Arc<Inner>,
    r: &mut R,
    w: &mut W,
    no_zeroes: bool,
    tls: TlsPhase,
) -> std::io::Result<Result<Negotiated, Ended>>
where
    R: AsyncBufRead + AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut shutdown = inner.shutdown_rx();
    let mut st = State {
        no_zeroes,
        ..State::default()
    };

    for _ in 0..MAX_OPTIONS {
        // Wait for the next option, or leave if the server is shutting down.
        tokio::select! {
            biased;
            _ = crate::shared::shutting_down(&mut shutdown) => return Ok(Err(Ended::Shutdown)),
            buf = r.fill_buf() => {
                if buf?.is_empty() {
                    return Err(std::io::ErrorKind::UnexpectedEof.into());
                }
            }
        }
        if r.read_u64().await? != IHAVEOPT {
            return Ok(Err(Ended::Violation));
        }
        let option = r.read_u32().await?;
        let len = r.read_u32().await?;
        if len > MAX_OPTION_DATA {
            discard(r, u64::from(len)).await?;
            if option == OPT_EXPORT_NAME {
                return Ok(Err(Ended::Violation));
            }
            let msg = format!("option data of {len} bytes is too large");
            reply(w, option, REP_ERR_TOO_BIG, msg.as_bytes()).await?;
            continue;
        }
        let mut data = vec![0u8; len as usize];
        r.read_exact(&mut data).await?;

        // Read into a bool first: the `watch::Ref` is a lock guard and must not live across
        // the awaits below.
        let shutting_down = *shutdown.borrow();
        let step = match gate(w, option, shutting_down, tls).await? {
            Some(step) => step,
            None => answer(inner, w, &mut st, tls, option, &data).await?,
        };
        if let Step::Done(outcome) = step {
            return Ok(outcome);
        }
    }
    Ok(Err(Ended::Violation))
}

/// Where one option leaves the haggling.
enum Step {
    /// Answered: read the next option.
    Next,
    /// Haggling is over, with this outcome.
    Done(Result<Negotiated, Ended>),
}

/// Answers an option that must not reach its handler: any option once the server is shutting
/// down, and (while TLS is required and not yet started) any option but STARTTLS and ABORT.
/// `None`: the option goes on to [`answer`].
async fn gate<W: AsyncWrite + Unpin>(
    w: &mut W,
    option: u32,
    shutting_down: bool,
    tls: TlsPhase,
) -> std::io::Result<Option<Step>> {
    if shutting_down {
        if option == OPT_ABORT {
            reply(w, option, REP_ACK, b"").await?;
            return Ok(Some(Step::Done(Err(Ended::Aborted))));
        }
        if option != OPT_EXPORT_NAME {
            reply(w, option, REP_ERR_SHUTDOWN, b"server is shutting down").await?;
        }
        return Ok(Some(Step::Done(Err(Ended::Shutdown))));
    }
    if tls == TlsPhase::Required && option != OPT_STARTTLS && option != OPT_ABORT {
        if option == OPT_EXPORT_NAME {
            // No error reply is possible to EXPORT_NAME: close.
            return Ok(Some(Step::Done(Err(Ended::Violation))));
        }
        let msg = b"this server requires TLS: start it with NBD_OPT_STARTTLS";
        reply(w, option, REP_ERR_TLS_REQD, msg).await?;
        return Ok(Some(Step::Next));
    }
    Ok(None)
}

/// Answers one option the gate let through, by its kind.
async fn answer<W: AsyncWrite + Unpin>(
    inner: &Arc<Inner>,
    w: &mut W,
    st: &mut State,
    tls: TlsPhase,
    option: u32,
    data: &[u8],
) -> std::io::Result<Step> {
    match option {
        OPT_STARTTLS => opt_starttls(w, tls, data).await,
        OPT_EXPORT_NAME => opt_export_name(inner, w, st, data).await,
        OPT_ABORT => {
            reply(w, option, REP_ACK, b"").await?;
            Ok(Step::Done(Err(Ended::Aborted)))
        }
        OPT_LIST => opt_list(inner, w, data).await,
        OPT_STRUCTURED_REPLY => {
            if !data.is_empty() {
                let msg = b"NBD_OPT_STRUCTURED_REPLY takes no data";
                reply(w, option, REP_ERR_INVALID, msg).await?;
                return Ok(Step::Next);
            }
            st.structured = true;
            reply(w, option, REP_ACK, b"").await?;
            Ok(Step::Next)
        }
        OPT_INFO | OPT_GO => opt_info_or_go(inner, w, st, option, data).await,
        OPT_LIST_META_CONTEXT | OPT_SET_META_CONTEXT => {
            opt_meta_context(inner, w, st, option, data).await
        }
        _ => {
            let msg = format!("option {option} is not supported");
            reply(w, option, REP_ERR_UNSUP, msg.as_bytes()).await?;
            Ok(Step::Next)
        }
    }
}

/// `NBD_OPT_STARTTLS`: acknowledged (and haggling handed back to the caller) only when TLS is
/// configured and not yet running.
async fn opt_starttls<W: AsyncWrite + Unpin>(
    w: &mut W,
    tls: TlsPhase,
    data: &[u8],
) -> std::io::Result<Step> {
    let option = OPT_STARTTLS;
    let refusal: Option<(u32, &[u8])> = match tls {
        TlsPhase::Unavailable => Some((REP_ERR_UNSUP, b"TLS is not configured on this server")),
        _ if !data.is_empty() => Some((REP_ERR_INVALID, b"NBD_OPT_STARTTLS takes no data")),
        TlsPhase::Established => Some((REP_ERR_INVALID, b"TLS is already running")),
        TlsPhase::Offered | TlsPhase::Required => None,
    };
    match refusal {
        Some((kind, msg)) => {
            reply(w, option, kind, msg).await?;
            Ok(Step::Next)
        }
        None => {
            reply(w, option, REP_ACK, b"").await?;
            Ok(Step::Done(Ok(Negotiated::StartTls)))
        }
    }
}

/// `NBD_OPT_EXPORT_NAME`: the old way to pick an export. It has no error reply, so a name the
/// server cannot satisfy closes the connection.
async fn opt_export_name<W: AsyncWrite + Unpin>(
    inner: &Arc<Inner>,
    w: &mut W,
    st: &State,
    data: &[u8],
) -> std::io::Result<Step> {
    let Some(name) = parse_name(data) else {
        return Ok(Step::Done(Err(Ended::Violation)));
    };
    let Some((canonical, export)) = resolve(inner, name).await else {
        return Ok(Step::Done(Err(Ended::Violation)));
    };
    let session = make_session(inner, st, canonical, export, data);
    let mut out = Vec::with_capacity(134);
    out.extend_from_slice(&session.size.to_be_bytes());
    out.extend_from_slice(&session.transmission_flags.to_be_bytes());
    if !st.no_zeroes {
        out.extend_from_slice(&[0u8; 124]);
    }
    session.stats.lock().connections += 1;
    w.write_all(&out).await?;
    w.flush().await?;
    Ok(Step::Done(Ok(Negotiated::Session(session))))
}

/// `NBD_OPT_LIST`: one `NBD_REP_SERVER` per export the provider lists (names too long for the
/// protocol are left out), then the ACK.
async fn opt_list<W: AsyncWrite + Unpin>(
    inner: &Arc<Inner>,
    w: &mut W,
    data: &[u8],
) -> std::io::Result<Step> {
    let option = OPT_LIST;
    if !data.is_empty() {
        reply(w, option, REP_ERR_INVALID, b"NBD_OPT_LIST takes no data").await?;
        return Ok(Step::Next);
    }
    let provider = inner.provider.clone();
    let entries = blocking(move || {
        provider
            .list()
            .into_iter()
            .filter(|n| n.len() <= MAX_STRING)
            .map(|n| {
                let d = provider.description(&n);
                (n, d)
            })
            .collect::<Vec<_>>()
    })
    .await
    .unwrap_or_default();
    for (name, description) in entries {
        let mut d = Vec::with_capacity(4 + name.len());
        d.extend_from_slice(&(name.len() as u32).to_be_bytes());
        d.extend_from_slice(name.as_bytes());
        if let Some(desc) = description {
            d.extend_from_slice(truncate_str(&desc, MAX_STRING).as_bytes());
        }
        write_reply(w, option, REP_SERVER, &d).await?;
    }
    reply(w, option, REP_ACK, b"").await?;
    Ok(Step::Next)
}

/// `NBD_OPT_INFO` / `NBD_OPT_GO`: describes the named export; GO also picks it.
async fn opt_info_or_go<W: AsyncWrite + Unpin>(
    inner: &Arc<Inner>,
    w: &mut W,
    st: &State,
    option: u32,
    data: &[u8],
) -> std::io::Result<Step> {
    let Some((name, requests)) = parse_info(data) else {
        let msg = b"malformed NBD_OPT_INFO/GO data";
        reply(w, option, REP_ERR_INVALID, msg).await?;
        return Ok(Step::Next);
    };
    let Some(name_str) = parse_name(name) else {
        let msg = b"export name is not a valid string";
        reply(w, option, REP_ERR_INVALID, msg).await?;
        return Ok(Step::Next);
    };
    let Some((canonical, export)) = resolve(inner, name_str).await else {
        let msg = format!("no export named {name_str:?}");
        reply(w, option, REP_ERR_UNKNOWN, msg.as_bytes()).await?;
        return Ok(Step::Next);
    };
    let session = make_session(inner, st, canonical, export, name);
    send_info(inner, w, option, &session, &requests).await?;
    if option == OPT_GO {
        // Counted before the ACK, so the client sees it as soon as it can send.
        session.stats.lock().connections += 1;
    }
    reply(w, option, REP_ACK, b"").await?;
    if option == OPT_GO {
        return Ok(Step::Done(Ok(Negotiated::Session(session))));
    }
    Ok(Step::Next)
}

/// `NBD_OPT_LIST_META_CONTEXT` / `NBD_OPT_SET_META_CONTEXT`: lists or selects
/// `base:allocation`, the only context served.
async fn opt_meta_context<W: AsyncWrite + Unpin>(
    inner: &Arc<Inner>,
    w: &mut W,
    st: &mut State,
    option: u32,
    data: &[u8],
) -> std::io::Result<Step> {
    let set = option == OPT_SET_META_CONTEXT;
    if set {
        // A SET replaces the previous selection, even when it fails.
        st.meta_for = None;
        if !st.structured {
            let msg = b"NBD_OPT_SET_META_CONTEXT needs structured replies first";
            reply(w, option, REP_ERR_INVALID, msg).await?;
            return Ok(Step::Next);
        }
    }
    let Some((name, queries)) = parse_meta(data) else {
        let msg = b"malformed meta context request";
        reply(w, option, REP_ERR_INVALID, msg).await?;
        return Ok(Step::Next);
    };
    let Some(name_str) = parse_name(name) else {
        let msg = b"export name is not a valid string";
        reply(w, option, REP_ERR_INVALID, msg).await?;
        return Ok(Step::Next);
    };
    if resolve(inner, name_str).await.is_none() {
        let msg = format!("no export named {name_str:?}");
        reply(w, option, REP_ERR_UNKNOWN, msg.as_bytes()).await?;
        return Ok(Step::Next);
    }
    let Some(selected) = match_queries(&queries, set) else {
        let msg = b"meta context query lacks a namespace";
        reply(w, option, REP_ERR_INVALID, msg).await?;
        return Ok(Step::Next);
    };
    if selected {
        let id = if set { META_BASE_ALLOCATION_ID } else { 0 };
        let mut d = Vec::with_capacity(4 + META_BASE_ALLOCATION.len());
        d.extend_from_slice(&id.to_be_bytes());
        d.extend_from_slice(META_BASE_ALLOCATION.as_bytes());
        write_reply(w, option, REP_META_CONTEXT, &d).await?;
        if set {
            st.meta_for = Some(name.to_vec());
        }
    }
    reply(w, option, REP_ACK, b"").await?;
    Ok(Step::Next)
}

/// Builds the session (flags, sizes) for an export the client chose; `requested` is the name as
/// the client sent it (meta contexts apply only when it matches the one used to select them).
fn make_session(
    inner: &Inner,
    st: &State,
    name: String,
    export: Arc<dyn Export>,
    requested: &[u8],
) -> Session {
    let size = export.size();
    let readonly = export.readonly();
    let block = BlockSizes::for_export(export.as_ref(), inner.config.max_request_bytes);
    let mut flags = FLAG_HAS_FLAGS
        | FLAG_SEND_FLUSH
        | FLAG_SEND_FUA
        | FLAG_SEND_TRIM
        | FLAG_SEND_WRITE_ZEROES
        | FLAG_SEND_FAST_ZERO
        | FLAG_SEND_CACHE
        | FLAG_CAN_MULTI_CONN;
    if readonly {
        flags |= FLAG_READ_ONLY;
    }
    if st.structured {
        // Reads are always answered with a single content chunk, so "don't fragment" is free.
        flags |= FLAG_SEND_DF;
    }
    let meta_context = (st.structured && st.meta_for.as_deref() == Some(requested))
        .then_some(META_BASE_ALLOCATION_ID);
    let stats = inner.stats_for(&name);
    Session {
        stats,
        name,
        export,
        size,
        readonly,
        transmission_flags: flags,
        structured: st.structured,
        meta_context,
        block,
    }
}

/// Sends the `NBD_REP_INFO` replies for INFO/GO: always EXPORT and BLOCK_SIZE (the server
/// enforces non-default constraints, so it advertises them even unasked), NAME and DESCRIPTION
/// when requested.
async fn send_info<W: AsyncWrite + Unpin>(
    inner: &Arc<Inner>,
    w: &mut W,
    option: u32,
    s: &Session,
    requests: &[u16],
) -> std::io::Result<()> {
    let mut d = Vec::with_capacity(12);
    d.extend_from_slice(&INFO_EXPORT.to_be_bytes());
    d.extend_from_slice(&s.size.to_be_bytes());
    d.extend_from_slice(&s.transmission_flags.to_be_bytes());
    write_reply(w, option, REP_INFO, &d).await?;

    let mut d = Vec::with_capacity(14);
    d.extend_from_slice(&INFO_BLOCK_SIZE.to_be_bytes());
    d.extend_from_slice(&s.block.min.to_be_bytes());
    d.extend_from_slice(&s.block.preferred.to_be_bytes());
    d.extend_from_slice(&s.block.max.to_be_bytes());
    write_reply(w, option, REP_INFO, &d).await?;

    if requests.contains(&INFO_NAME) {
        let name = truncate_str(&s.name, MAX_STRING);
        let mut d = Vec::with_capacity(2 + name.len());
        d.extend_from_slice(&INFO_NAME.to_be_bytes());
        d.extend_from_slice(name.as_bytes());
        write_reply(w, option, REP_INFO, &d).await?;
    }
    if requests.contains(&INFO_DESCRIPTION) {
        let provider = inner.provider.clone();
        let name = s.name.clone();
        if let Some(desc) = blocking(move || provider.description(&name))
            .await
            .flatten()
        {
            let desc = truncate_str(&desc, MAX_STRING);
            let mut d = Vec::with_capacity(2 + desc.len());
            d.extend_from_slice(&INFO_DESCRIPTION.to_be_bytes());
            d.extend_from_slice(desc.as_bytes());
            write_reply(w, option, REP_INFO, &d).await?;
        }
    }
    Ok(())
}

/// Resolves a client's export name. The empty name is the "default export": the provider's own
/// `""` export if it has one, else its only export when it has exactly one.
async fn resolve(inner: &Arc<Inner>, name: &str) -> Option<(String, Arc<dyn Export>)> {
    let provider = inner.provider.clone();
    let name = name.to_owned();
    blocking(move || {
        if let Some(e) = provider.open(&name) {
            return Some((name, e));
        }
        if name.is_empty() {
            let list = provider.list();
            if let [only] = list.as_slice() {
                return provider.open(only).map(|e| (only.clone(), e));
            }
        }
        None
    })
    .await
    .flatten()
}

/// Runs a provider call on the blocking pool; a panic in it becomes `None`.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Option<T> {
    tokio::task::spawn_blocking(f).await.ok()
}

/// A protocol string: UTF-8, at most 4096 bytes, no NUL.
fn parse_name(b: &[u8]) -> Option<&str> {
    if b.len() > MAX_STRING || b.contains(&0) {
        return None;
    }
    std::str::from_utf8(b).ok()
}

/// INFO/GO data: u32 name length, name, u16 count, count × u16 info requests.
fn parse_info(d: &[u8]) -> Option<(&[u8], Vec<u16>)> {
    let name_len = usize::try_from(u32::from_be_bytes(d.get(0..4)?.try_into().ok()?)).ok()?;
    let name = d.get(4..4usize.checked_add(name_len)?)?;
    let rest = &d[4 + name_len..];
    let n = usize::from(u16::from_be_bytes(rest.get(0..2)?.try_into().ok()?));
    let reqs = &rest[2..];
    if reqs.len() != n * 2 {
        return None;
    }
    Some((
        name,
        reqs.chunks_exact(2)
            .map(|c| u16::from_be_bytes([c[0], c[1]]))
            .collect(),
    ))
}

/// LIST/SET_META_CONTEXT data: u32 name length, name, u32 count, count × (u32 length, query).
fn parse_meta(d: &[u8]) -> Option<(&[u8], Vec<&[u8]>)> {
    let name_len = usize::try_from(u32::from_be_bytes(d.get(0..4)?.try_into().ok()?)).ok()?;
    let name = d.get(4..4usize.checked_add(name_len)?)?;
    let mut rest = &d[4 + name_len..];
    let n = u32::from_be_bytes(rest.get(0..4)?.try_into().ok()?);
    rest = &rest[4..];
    let mut queries = Vec::new();
    for _ in 0..n {
        // Each query needs at least its 4-byte length, so a huge count fails here quickly.
        let qlen = usize::try_from(u32::from_be_bytes(rest.get(0..4)?.try_into().ok()?)).ok()?;
        let q = rest.get(4..4usize.checked_add(qlen)?)?;
        if q.len() > MAX_STRING {
            return None;
        }
        queries.push(q);
        rest = &rest[4 + qlen..];
    }
    if !rest.is_empty() {
        return None;
    }
    Some((name, queries))
}

/// Whether the queries select (`set`) or list `base:allocation`; `None` if a query has no
/// namespace. No queries: LIST returns every context, SET selects none. Unknown namespaces and
/// unknown `base:` leaves are ignored, as the protocol requires.
fn match_queries(queries: &[&[u8]], set: bool) -> Option<bool> {
    if queries.is_empty() {
        return Some(!set);
    }
    let mut selected = false;
    for q in queries {
        if !q.contains(&b':') {
            return None;
        }
        if *q == META_BASE_ALLOCATION.as_bytes() || (!set && *q == b"base:") {
            selected = true;
        }
    }
    Some(selected)
}

/// Streams `n` bytes from `r` into nothing.
pub(crate) async fn discard<R: AsyncRead + Unpin>(r: &mut R, n: u64) -> std::io::Result<()> {
    let copied = tokio::io::copy(&mut (&mut *r).take(n), &mut tokio::io::sink()).await?;
    if copied < n {
        return Err(std::io::ErrorKind::UnexpectedEof.into());
    }
    Ok(())
}

/// Queues one option reply without flushing (more replies to the same option follow).
async fn write_reply<W: AsyncWrite + Unpin>(
    w: &mut W,
    option: u32,
    kind: u32,
    data: &[u8],
) -> std::io::Result<()> {
    w.write_all(&option_reply(option, kind, data)).await
}

/// Sends the final reply to an option and flushes.
async fn reply<W: AsyncWrite + Unpin>(
    w: &mut W,
    option: u32,
    kind: u32,
    data: &[u8],
) -> std::io::Result<()> {
    write_reply(w, option, kind, data).await?;
    w.flush().await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn info_parsing() {
        let mut d = Vec::new();
        d.extend_from_slice(&3u32.to_be_bytes());
        d.extend_from_slice(b"a/b");
        d.extend_from_slice(&2u16.to_be_bytes());
        d.extend_from_slice(&INFO_NAME.to_be_bytes());
        d.extend_from_slice(&INFO_BLOCK_SIZE.to_be_bytes());
        let (name, reqs) = parse_info(&d).unwrap();
        assert_eq!(name, b"a/b");
        assert_eq!(reqs, vec![INFO_NAME, INFO_BLOCK_SIZE]);
        // Truncated, overlong name length, trailing junk.
        assert!(parse_info(&d[..d.len() - 1]).is_none());
        let mut bad = d.clone();
        bad[0..4].copy_from_slice(&u32::MAX.to_be_bytes());
        assert!(parse_info(&bad).is_none());
        let mut junk = d.clone();
        junk.push(0);
        assert!(parse_info(&junk).is_none());
        assert!(parse_info(&[]).is_none());
    }

    #[test]
    fn meta_parsing_and_matching() {
        let mut d = Vec::new();
        d.extend_from_slice(&0u32.to_be_bytes());
        d.extend_from_slice(&2u32.to_be_bytes());
        for q in [&b"base:allocation"[..], b"qemu:dirty-bitmap:x"] {
            d.extend_from_slice(&(q.len() as u32).to_be_bytes());
            d.extend_from_slice(q);
        }
        let (name, qs) = parse_meta(&d).unwrap();
        assert!(name.is_empty());
        assert_eq!(qs.len(), 2);
        assert_eq!(match_queries(&qs, true), Some(true));
        assert_eq!(match_queries(&[b"base:"], true), Some(false));
        assert_eq!(match_queries(&[b"base:"], false), Some(true));
        assert_eq!(match_queries(&[], false), Some(true));
        assert_eq!(match_queries(&[], true), Some(false));
        assert_eq!(match_queries(&[b"nocolon"], true), None);
        // A count promising more queries than there are bytes.
        let mut bad = Vec::new();
        bad.extend_from_slice(&0u32.to_be_bytes());
        bad.extend_from_slice(&u32::MAX.to_be_bytes());
        assert!(parse_meta(&bad).is_none());
    }

    #[test]
    fn names() {
        assert_eq!(parse_name(b"tank/vol"), Some("tank/vol"));
        assert_eq!(parse_name(b"a\0b"), None);
        assert_eq!(parse_name(&[0xff, 0xfe]), None);
        assert_eq!(parse_name(&vec![b'a'; MAX_STRING + 1]), None);
    }
}
