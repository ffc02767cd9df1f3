//! `send` and `receive` for a front end that hands over the stream: a server runs them on its
//! live pools with the descriptor a client passed (its stdout for a send, its stdin for a
//! receive; `crate::passed`), writing or reading the stream itself, and answers with what was
//! sent or received. What a stream holds and how a receive stays all or nothing is the
//! engine's (`Pool::send`, `Pool::receive`); this adds only the buffering and the typed
//! answer. `send -t` finds the pool holding the snapshot a resume token names
//! (`resumed_send_pool`); `receive -A` and the token of a partial receive are requests
//! without a stream, answered here too.
//!
//! Invariants: a send's stream is flushed before the answer (a client that exits on the answer
//! leaves a complete stream behind); an error of the stream itself (the reader or the client
//! went away) fails the request like any other. These run beside other requests, not in their
//! turn: a send of many GiB to a slow pipe must not stop `list` for its whole length, and
//! neither changes the pool cache or vdev trees that the turn protects.

use super::AdminError;
use super::request::{AdminReply, AdminRequest, Answer, HealReport, ReceiveReport, SendReport};
use crate::PoolAccess;
use cairn_engine::{PackageOptions, ReceiveOptions, SendOptions};
use cairn_format::send_token::ResumeToken;
use std::io::{BufReader, BufWriter, Read, Write};

/// Buffered bytes between the engine and the stream (few, large reads and writes).
const STREAM_BUFFER_BYTES: usize = 1 << 20;

/// The pool a dataset, snapshot or bookmark name belongs to.
fn pool_of(name: &str) -> &str {
    name.split(['/', '@', '#']).next().unwrap_or(name)
}

/// Runs a request that takes a stream (`AdminRequest::takes_stream`) against `access`'s pools,
/// with `stream` as its destination (send) or source (receive).
pub fn handle_stream<S: Read + Write>(
    access: &PoolAccess,
    request: AdminRequest,
    stream: &mut S,
) -> Result<Answer, AdminError> {
    let reply = match request {
        AdminRequest::Send {
            snapshot,
            from,
            compressed,
        } => {
            let options = SendOptions {
                compressed,
                count_only: false,
            };
            AdminReply::Sent(send(access, &snapshot, from.as_deref(), options, stream)?)
        }
        AdminRequest::SendResumed { token, pool } => {
            AdminReply::Sent(send_resumed(access, &token, pool.as_deref(), stream)?)
        }
        AdminRequest::Receive {
            target,
            corrective: true,
            ..
        } => AdminReply::Healed(heal(access, &target, stream)?),
        AdminRequest::Receive {
            target,
            force,
            resumable,
            ..
        } => {
            let options = ReceiveOptions { force, resumable };
            AdminReply::Received(receive(access, &target, options, stream)?)
        }
        AdminRequest::SendPackage {
            snapshot,
            from,
            intermediates,
            recursive,
            properties,
        } => {
            let options = PackageOptions {
                from,
                intermediates,
                recursive,
                properties,
            };
            AdminReply::Sent(send_package(access, &snapshot, &options, stream)?)
        }
        other => {
            return Err(AdminError::Invalid(format!(
                "not a request with a stream: {other:?}"
            )));
        }
    };
    Ok(Answer::new(reply))
}

fn send(
    access: &PoolAccess,
    snapshot: &str,
    from: Option<&str>,
    options: SendOptions,
    stream: &mut dyn Write,
) -> Result<SendReport, AdminError> {
    let mut out = BufWriter::with_capacity(STREAM_BUFFER_BYTES, stream);
    let summary = access.with_pool(pool_of(snapshot), true, |pool| -> Result<_, AdminError> {
        Ok(pool.send_with(snapshot, from, options, &mut out, &mut |_| {})?)
    })?;
    out.flush()?;
    Ok(summary.into())
}

/// The send and receive requests answered without a stream (`send -n`, `receive -A`, a
/// resume token);
/// one that needs a stream (or any other request) is refused.
pub(super) fn handle_without_stream(
    access: &PoolAccess,
    request: AdminRequest,
) -> Result<AdminReply, AdminError> {
    match request {
        AdminRequest::AbandonReceive { target } => {
            access.with_pool(pool_of(&target), false, |pool| -> Result<_, AdminError> {
                Ok(pool.abandon_partial_receive(&target)?)
            })?;
            Ok(AdminReply::Done)
        }
        AdminRequest::SendSize {
            snapshot,
            from,
            compressed,
        } => {
            let options = SendOptions {
                compressed,
                count_only: true,
            };
            let mut nowhere = std::io::sink();
            Ok(AdminReply::Sent(send(
                access,
                &snapshot,
                from.as_deref(),
                options,
                &mut nowhere,
            )?))
        }
        AdminRequest::ResumeToken { target } => {
            let token = access.with_pool(pool_of(&target), true, |pool| {
                Ok::<_, AdminError>(pool.receive_resume_token(&target))
            })?;
            Ok(AdminReply::ResumeToken(token))
        }
        other if other.takes_stream() => Err(AdminError::Invalid(
            "a send or receive needs its stream: the front end passes it with the request \
             (admin::handle_stream)"
                .to_string(),
        )),
        other => Err(AdminError::Invalid(format!(
            "not a send or receive request: {other:?}"
        ))),
    }
}

/// The pool that holds the snapshot `token` names: `pool` if given (checked), else the first
/// of the remembered pools that holds it (`send -t`).
pub fn resumed_send_pool(
    access: &PoolAccess,
    token: &str,
    pool: Option<&str>,
) -> Result<String, AdminError> {
    let guid = ResumeToken::decode(token)
        .map_err(|err| AdminError::Invalid(format!("cannot resume a send: {err}")))?
        .to_guid;
    let names = match pool {
        Some(pool) => vec![pool_of(pool).to_string()],
        None => access.pool_names()?,
    };
    for name in &names {
        let holds = access.with_pool(name, true, |pool| -> Result<_, AdminError> {
            Ok(pool.has_snapshot_guid(guid))
        });
        match holds {
            Ok(true) => return Ok(name.clone()),
            Ok(false) => {}
            Err(err) if pool.is_some() => return Err(err),
            Err(_) => {}
        }
    }
    Err(AdminError::Refused(format!(
        "cannot resume a send: no pool{} holds the token's snapshot (guid {guid}): destroyed, \
         or name the pool that holds it",
        pool.map_or(String::new(), |pool| format!(" named '{pool}'"))
    )))
}

fn send_resumed(
    access: &PoolAccess,
    token: &str,
    pool: Option<&str>,
    stream: &mut dyn Write,
) -> Result<SendReport, AdminError> {
    let pool = resumed_send_pool(access, token, pool)?;
    let mut out = BufWriter::with_capacity(STREAM_BUFFER_BYTES, stream);
    let summary = access.with_pool(&pool, true, |pool| -> Result<_, AdminError> {
        Ok(pool.send_resumed(token, &mut out, &mut |_| {})?)
    })?;
    out.flush()?;
    Ok(summary.into())
}

fn send_package(
    access: &PoolAccess,
    snapshot: &str,
    options: &PackageOptions,
    stream: &mut dyn Write,
) -> Result<SendReport, AdminError> {
    let mut out = BufWriter::with_capacity(STREAM_BUFFER_BYTES, stream);
    let summary = access.with_pool(pool_of(snapshot), true, |pool| -> Result<_, AdminError> {
        Ok(pool.send_package(snapshot, options, &mut out, &mut |_| {})?)
    })?;
    out.flush()?;
    Ok(summary.into())
}

fn receive(
    access: &PoolAccess,
    target: &str,
    options: ReceiveOptions,
    stream: &mut dyn Read,
) -> Result<ReceiveReport, AdminError> {
    // An incremental receive swaps the dataset's head as a rollback does, but the engine
    // alone cannot tell the kernel to drop what it caches of a FUSE mount (a rollback goes
    // through `Mounts::roll_back` for that): refused rather than shown stale. A package
    // (`send -R`) may swap any dataset below the target too, so those are refused as well.
    let below = format!("{target}/");
    let mounted = access.served.as_ref().and_then(|served| {
        served
            .mounts
            .list()
            .into_iter()
            .map(|(dataset, _)| dataset)
            .find(|dataset| dataset == target || dataset.starts_with(&below))
    });
    if let Some(mounted) = mounted {
        return Err(AdminError::Refused(format!(
            "{mounted} is mounted by this server: unmount it first (cairn unmount \
             {mounted}), or receive into another dataset"
        )));
    }
    let mut input = BufReader::with_capacity(STREAM_BUFFER_BYTES, stream);
    let summary = access.with_pool(pool_of(target), false, |pool| -> Result<_, AdminError> {
        Ok(pool.receive(target, &mut input, options)?)
    })?;
    Ok(summary.into())
}

/// A corrective receive: the stream heals snapshot `snapshot` (nothing is made or swapped,
/// so a mounted filesystem's snapshot is healed like any other).
fn heal(
    access: &PoolAccess,
    snapshot: &str,
    stream: &mut dyn Read,
) -> Result<HealReport, AdminError> {
    let mut input = BufReader::with_capacity(STREAM_BUFFER_BYTES, stream);
    let summary = access.with_pool(pool_of(snapshot), false, |pool| -> Result<_, AdminError> {
        Ok(pool.receive_corrective(snapshot, &mut input)?)
    })?;
    Ok(summary.into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::PoolCache;

    #[test]
    fn only_stream_requests_are_taken_and_a_missing_pool_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let access = PoolAccess::new(PoolCache::new(dir.path().to_path_buf()));
        let mut stream = std::io::Cursor::new(Vec::new());
        let err = handle_stream(&access, AdminRequest::ArcCounters, &mut stream).unwrap_err();
        assert!(
            err.to_string().contains("not a request with a stream"),
            "{err}"
        );
        let send = AdminRequest::Send {
            snapshot: "tank/vol@a".to_string(),
            from: None,
            compressed: false,
        };
        let err = handle_stream(&access, send, &mut stream).unwrap_err();
        assert!(err.to_string().contains("tank"), "{err}");
        assert!(stream.get_ref().is_empty());
    }
}
