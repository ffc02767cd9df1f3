//! WRITE and COMMIT: NFSv3's stability levels mapped onto the intent log.
//!
//! | WRITE asks        | dataset `sync`     | cairn does                               | reply     |
//! |-------------------|--------------------|------------------------------------------|-----------|
//! | UNSTABLE          | standard           | `Filesystem::write`: joins the open txg, logged in memory | UNSTABLE |
//! | DATA/FILE_SYNC    | standard           | `Filesystem::write_sync`: the O_DSYNC path of the FUSE mount (log commit, or in place under `logbias=throughput`) before the reply | FILE_SYNC |
//! | any               | always             | `write_sync`                             | FILE_SYNC |
//! | any               | disabled           | `write` and nothing waits                | FILE_SYNC (a lie, as ZFS tells it: `sync=disabled` is unsafe) |
//!
//! COMMIT is the fsync path (`Filesystem::fsync`): every change of the file, and everything it
//! depends on (the namespace changes before it), durable before the reply; other files'
//! UNSTABLE writes are not written (cairn-fs's per-file commit). Every WRITE and COMMIT reply
//! carries the verifier of the file's pool (`NfsContext::verifier`), which changes after any
//! failure that may have lost UNSTABLE data, whichever path met it, so clients then resend
//! what they had not seen committed. Uses `context.rs`, `handle.rs`, `convert.rs` and
//! `procs.rs`.

use super::context::NfsContext;
use super::convert::{Caller, MAY_WRITE, nfs_error, wcc_after};
use super::procs::may_io;
use cairn_fs::SyncMode;
use cairn_fs::attrs::FileKind;
use cairn_nfs::nfs3::*;

pub fn write(ctx: &NfsContext, caller: &Caller, args: &WriteArgs) -> Nfs3Reply {
    let r = match ctx.resolve(&args.file) {
        Ok(r) => r,
        Err(err) => return Nfs3Reply::Write(Outcome::Fail(err, WccData::empty())),
    };
    let wcc_now = || wcc_after(r.export.post_attr(r.object));
    let refusal = match r.attrs.kind {
        FileKind::File if may_io(caller, &r, MAY_WRITE) => None,
        FileKind::File => Some(Nfs3Error::Acces),
        FileKind::Directory => Some(Nfs3Error::IsDir),
        _ => Some(Nfs3Error::Inval),
    };
    if let Some(err) = refusal {
        return Nfs3Reply::Write(Outcome::Fail(err, wcc_now()));
    }
    let fs = &r.export.fs;
    // Before the write: a failure while it is made must show as a different verifier at the
    // COMMIT that follows.
    let verf = ctx.verifier(&r.export.pool);
    let (durable, committed) = match (fs.sync_mode(), args.stable) {
        (SyncMode::Disabled, _) => (false, StableHow::FileSync),
        (SyncMode::Always, _) => (true, StableHow::FileSync),
        (_, StableHow::Unstable) => (false, StableHow::Unstable),
        (_, _) => (true, StableHow::FileSync),
    };
    let result = if durable {
        fs.write_sync(r.object, args.offset_bytes, &args.data)
    } else {
        fs.write(r.object, args.offset_bytes, &args.data)
    };
    if let Err(err) = &result {
        return Nfs3Reply::Write(Outcome::Fail(nfs_error(err), wcc_now()));
    }
    if !caller.is_root() && r.attrs.mode & 0o6000 != 0 {
        // A write by an unprivileged caller takes set-ID bits away (as a local write would).
        let _ = fs.remove_privileges(r.object);
    }
    Nfs3Reply::Write(Outcome::Ok(WriteOk {
        file_wcc: wcc_now(),
        count_bytes: u32::try_from(args.data.len()).unwrap_or(u32::MAX),
        committed,
        verf,
    }))
}

pub fn commit(ctx: &NfsContext, args: &RangeArgs) -> Nfs3Reply {
    let r = match ctx.resolve(&args.file) {
        Ok(r) => r,
        Err(err) => return Nfs3Reply::Commit(Outcome::Fail(err, WccData::empty())),
    };
    let result = r.export.fs.fsync(r.object);
    let wcc = wcc_after(r.export.post_attr(r.object));
    Nfs3Reply::Commit(match result {
        // After the commit: any failure before it returned has moved the epoch.
        Ok(()) => Outcome::Ok(CommitOk {
            file_wcc: wcc,
            verf: ctx.verifier(&r.export.pool),
        }),
        Err(err) => Outcome::Fail(nfs_error(&err), wcc),
    })
}
