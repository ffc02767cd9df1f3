//! Which clients may reach which export, and what they may do there: the `sharenfs` access
//! lists (`rw=NET`, `ro=NET`, plain `ro`: cairn-dataset's `ShareNfs::access_of`) applied to
//! the address a connection comes from (its TCP peer; an IPv4-mapped IPv6 peer counts as its
//! IPv4 address).
//!
//! Invariants:
//! - **Checked on every call, not only at MOUNT**: a handle is 36 public bytes that any
//!   client can replay, so MNT's refusal alone would protect nothing. Every NFS call's
//!   handles (both, for RENAME and LINK) are checked against the export they lead into as its
//!   `sharenfs` reads now, so a `cairn set sharenfs=...` takes effect on the next call. A
//!   client with no access gets NFS3ERR_ACCES (MNT3ERR_ACCES at MOUNT); on a read-only share
//!   every call that changes something (SETATTR, WRITE, CREATE, MKDIR, SYMLINK, MKNOD,
//!   REMOVE, RMDIR, RENAME, LINK) gets NFS3ERR_ROFS before it runs, and ACCESS never grants
//!   MODIFY, EXTEND or DELETE. COMMIT is let through (it changes nothing the client may not
//!   have written), as are FSINFO and PATHCONF.
//! - **A share without lists is served to loopback clients only.** AUTH_SYS trusts whatever
//!   identity a client claims, so only an explicit list opens a share to the network. The
//!   server refuses to start on an address beyond loopback while a shared filesystem has no
//!   list (`serve::check_nfs_shares`); if one loses its lists later (`cairn set sharenfs=on`)
//!   it stays served, to loopback clients only, and the first refusal of each such dataset is
//!   recorded as an event (`cairn serve` prints it), so the server never opens wider than
//!   the lists say.
//! - A handle that leads into no export (not ours, a dataset gone or not shared) is not
//!   refused here: the procedure answers BADHANDLE or STALE as before.
//!
//! Uses `context.rs`, `handle.rs` and `convert.rs`; `connection.rs` calls `admit`, `refusal`
//! and `limit_access` around each procedure, and MOUNT's MNT and EXPORT `client_access` and
//! `export_groups`.

use super::context::NfsContext;
use super::convert::Caller;
use super::handle::{HandleParts, dataset_of_id, shared};
use crate::pools::ServedPools;
use cairn_dataset::properties::{ShareAccess, ShareNfs};
use cairn_engine::Pool;
use cairn_nfs::nfs3::*;
use std::net::IpAddr;
use std::sync::Arc;

/// What groups MOUNT's EXPORT shows for a share without lists: the clients it is served to.
const LOOPBACK_GROUPS: [&str; 2] = ["127.0.0.0/8", "[::1]"];

/// A call let through: the identity it acts as (root squashed as the export says) and
/// whether the export is read-only to this client.
pub struct Admitted {
    pub caller: Caller,
    pub read_only: bool,
    /// The pool and dataset the first handle leads into (where the call is counted).
    pub dataset: Option<(Arc<Pool>, String)>,
}

impl NfsContext {
    /// What a client connecting from `client` may do in `export` (named `POOL/DATASET`, the dataset's full name)
    /// shared as `share`: the lists' answer, but nothing for a share without lists unless
    /// the client is on loopback (see the module comment; the first such refusal of a
    /// dataset is recorded as an event).
    pub fn client_access(&self, client: IpAddr, export: &str, share: &ShareNfs) -> ShareAccess {
        let access = share.access_of(client);
        if access == ShareAccess::None || share.has_lists() || client.to_canonical().is_loopback() {
            return access;
        }
        if self.unlisted_refused.lock().insert(export.to_string()) {
            cairn_metrics::events::record(
                "nfs",
                format!(
                    "NFS: refused {client} on {export}: its sharenfs names no clients (rw=NET or ro=NET), so it is served to loopback clients only"
                ),
            );
        }
        ShareAccess::None
    }

    /// The shared filesystem `handle` leads into and its `sharenfs`, if any (`None`: the
    /// procedure answers BADHANDLE or STALE itself). Reads the properties only (a call
    /// resolves its handles again, with the filesystem, in its procedure).
    fn share_of_handle(&self, handle: &FileHandle) -> Option<(Arc<Pool>, String, ShareNfs)> {
        let parts = HandleParts::decode(handle)?;
        let pool = self
            .served
            .all()
            .into_iter()
            .find(|pool| pool.guid() == parts.pool_guid)?;
        // A snapshot's handle leads into its dataset's share (the snapshot is read-only
        // anyway: `resolve` answers ROFS there).
        let dataset = dataset_of_id(&pool, parts.dataset_id)?;
        let properties = pool.dataset_properties(&dataset).ok()?;
        shared(&properties).then_some((pool, dataset, properties.sharenfs))
    }

    /// Lets `call` from `client` with `caller`'s credential through, or says why not
    /// (ACCES: the client has no access to an export a handle leads into; ROFS: the call
    /// changes something in an export read-only to it). Root is squashed unless the export
    /// the first handle leads into says `no_root_squash` (RENAME's and LINK's second handle
    /// must lead into the same export, or the call fails with XDEV); a call whose first
    /// handle leads into no export squashes.
    pub fn admit(
        &self,
        client: IpAddr,
        caller: Caller,
        call: &Nfs3Call,
    ) -> Result<Admitted, Nfs3Error> {
        let mut squash = true;
        let mut least = ShareAccess::ReadWrite;
        let mut first = None;
        for (index, handle) in handles(call).into_iter().flatten().enumerate() {
            let Some((pool, dataset, share)) = self.share_of_handle(handle) else {
                continue;
            };
            if index == 0 {
                squash = share.root_squash;
                first = Some((pool, dataset.clone()));
            }
            least = least.min(self.client_access(client, &dataset, &share));
        }
        let read_only = match least {
            ShareAccess::None => return Err(Nfs3Error::Acces),
            ShareAccess::ReadOnly if modifies(call.procedure()) => return Err(Nfs3Error::RoFs),
            ShareAccess::ReadOnly => true,
            ShareAccess::ReadWrite => false,
        };
        let caller = if squash { caller.squashed() } else { caller };
        Ok(Admitted {
            caller,
            read_only,
            dataset: first,
        })
    }
}

/// The shared filesystems (`POOL/DATASET`) of `served`'s pools whose `sharenfs` names no
/// clients: served to loopback clients only, so a server listening beyond loopback refuses
/// to start while there are any (`serve::check_nfs_shares`).
pub fn unlisted_shares(served: &ServedPools) -> Vec<String> {
    let mut unlisted = Vec::new();
    for pool in served.all() {
        for name in pool.dataset_names() {
            let Ok(properties) = pool.dataset_properties(&name) else {
                continue;
            };
            if shared(&properties) && !properties.sharenfs.has_lists() {
                unlisted.push(name);
            }
        }
    }
    unlisted
}

/// The groups MOUNT's EXPORT shows for `share`: the clients its lists name, or loopback's
/// networks for a share without lists.
pub fn export_groups(share: &ShareNfs) -> Vec<String> {
    if share.has_lists() {
        share.client_texts()
    } else {
        LOOPBACK_GROUPS.iter().map(ToString::to_string).collect()
    }
}

/// The handles an NFS call names: its object or the directory it changes first, then
/// RENAME's target directory or LINK's directory.
pub fn handles(call: &Nfs3Call) -> [Option<&FileHandle>; 2] {
    let first = match call {
        Nfs3Call::Null => return [None, None],
        Nfs3Call::Getattr(args)
        | Nfs3Call::Readlink(args)
        | Nfs3Call::Fsstat(args)
        | Nfs3Call::Fsinfo(args)
        | Nfs3Call::Pathconf(args) => &args.object,
        Nfs3Call::Setattr(args) => &args.object,
        Nfs3Call::Access(args) => &args.object,
        Nfs3Call::Lookup(args) | Nfs3Call::Remove(args) | Nfs3Call::Rmdir(args) => &args.dir,
        Nfs3Call::Read(args) | Nfs3Call::Commit(args) => &args.file,
        Nfs3Call::Write(args) => &args.file,
        Nfs3Call::Create(args) => &args.location.dir,
        Nfs3Call::Mkdir(args) => &args.location.dir,
        Nfs3Call::Symlink(args) => &args.location.dir,
        Nfs3Call::Mknod(args) => &args.location.dir,
        Nfs3Call::Rename(args) => return [Some(&args.from.dir), Some(&args.to.dir)],
        Nfs3Call::Link(args) => return [Some(&args.file), Some(&args.link.dir)],
        Nfs3Call::Readdir(args) => &args.dir,
        Nfs3Call::Readdirplus(args) => &args.dir,
    };
    [Some(first), None]
}

/// Whether a procedure changes what it reaches (refused ROFS on a read-only share).
pub fn modifies(procedure: Nfs3Proc) -> bool {
    matches!(
        procedure,
        Nfs3Proc::Setattr
            | Nfs3Proc::Write
            | Nfs3Proc::Create
            | Nfs3Proc::Mkdir
            | Nfs3Proc::Symlink
            | Nfs3Proc::Mknod
            | Nfs3Proc::Remove
            | Nfs3Proc::Rmdir
            | Nfs3Proc::Rename
            | Nfs3Proc::Link
    )
}

/// The failure `err` of `procedure`, with no attributes (the client may not see them).
pub fn refusal(procedure: Nfs3Proc, err: Nfs3Error) -> Nfs3Reply {
    let wcc = WccData::empty;
    match procedure {
        Nfs3Proc::Null => Nfs3Reply::Null,
        Nfs3Proc::Getattr => Nfs3Reply::Getattr(Outcome::Fail(err, ())),
        Nfs3Proc::Setattr => Nfs3Reply::Setattr(Outcome::Fail(err, wcc())),
        Nfs3Proc::Lookup => Nfs3Reply::Lookup(Outcome::Fail(err, None)),
        Nfs3Proc::Access => Nfs3Reply::Access(Outcome::Fail(err, None)),
        Nfs3Proc::Readlink => Nfs3Reply::Readlink(Outcome::Fail(err, None)),
        Nfs3Proc::Read => Nfs3Reply::Read(Outcome::Fail(err, None)),
        Nfs3Proc::Write => Nfs3Reply::Write(Outcome::Fail(err, wcc())),
        Nfs3Proc::Create => Nfs3Reply::Create(Outcome::Fail(err, wcc())),
        Nfs3Proc::Mkdir => Nfs3Reply::Mkdir(Outcome::Fail(err, wcc())),
        Nfs3Proc::Symlink => Nfs3Reply::Symlink(Outcome::Fail(err, wcc())),
        Nfs3Proc::Mknod => Nfs3Reply::Mknod(Outcome::Fail(err, wcc())),
        Nfs3Proc::Remove => Nfs3Reply::Remove(Outcome::Fail(err, wcc())),
        Nfs3Proc::Rmdir => Nfs3Reply::Rmdir(Outcome::Fail(err, wcc())),
        Nfs3Proc::Rename => Nfs3Reply::Rename(Outcome::Fail(
            err,
            RenameWcc {
                fromdir_wcc: wcc(),
                todir_wcc: wcc(),
            },
        )),
        Nfs3Proc::Link => Nfs3Reply::Link(Outcome::Fail(
            err,
            LinkWcc {
                file_attributes: None,
                linkdir_wcc: wcc(),
            },
        )),
        Nfs3Proc::Readdir => Nfs3Reply::Readdir(Outcome::Fail(err, None)),
        Nfs3Proc::Readdirplus => Nfs3Reply::Readdirplus(Outcome::Fail(err, None)),
        Nfs3Proc::Fsstat => Nfs3Reply::Fsstat(Outcome::Fail(err, None)),
        Nfs3Proc::Fsinfo => Nfs3Reply::Fsinfo(Outcome::Fail(err, None)),
        Nfs3Proc::Pathconf => Nfs3Reply::Pathconf(Outcome::Fail(err, None)),
        Nfs3Proc::Commit => Nfs3Reply::Commit(Outcome::Fail(err, wcc())),
    }
}

/// `reply` as a client of a read-only share may have it: ACCESS grants no MODIFY, EXTEND
/// or DELETE (the calls they stand for would be refused ROFS).
pub fn limit_access(reply: Nfs3Reply, read_only: bool) -> Nfs3Reply {
    match reply {
        Nfs3Reply::Access(Outcome::Ok(mut ok)) if read_only => {
            ok.access &= !(access::MODIFY | access::EXTEND | access::DELETE);
            Nfs3Reply::Access(Outcome::Ok(ok))
        }
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_procedure_has_a_refusal_of_its_own_kind() {
        for number in 1..=21 {
            let procedure = Nfs3Proc::from_u32(number).expect("a procedure");
            let reply = refusal(procedure, Nfs3Error::Acces);
            assert_eq!(reply.procedure(), procedure);
        }
    }

    #[test]
    fn a_share_without_lists_serves_loopback_only_and_says_so_once() {
        let ctx = NfsContext::new(
            std::sync::Arc::new(ServedPools::default()),
            0,
            std::sync::Arc::new(crate::nfs_stats::NfsStats::default()),
            1 << 20,
        );
        let ip = |text: &str| text.parse::<IpAddr>().unwrap();
        let open = ShareNfs::parse("on").unwrap();
        let read_only = ShareNfs::parse("ro").unwrap();
        let listed = ShareNfs::parse("rw=192.0.2.0/24,ro=fd00::/8").unwrap();
        let before = cairn_metrics::events::latest_seq();
        for loopback in ["127.0.0.1", "127.0.0.3", "::1", "::ffff:127.0.0.1"] {
            let peer = ip(loopback);
            assert_eq!(
                ctx.client_access(peer, "p/a", &open),
                ShareAccess::ReadWrite
            );
            assert_eq!(
                ctx.client_access(peer, "p/a", &read_only),
                ShareAccess::ReadOnly
            );
            assert_eq!(ctx.client_access(peer, "p/a", &listed), ShareAccess::None);
        }
        for beyond in ["192.0.2.7", "fd00::2", "::ffff:192.0.2.7"] {
            let peer = ip(beyond);
            assert_eq!(ctx.client_access(peer, "p/a", &open), ShareAccess::None);
            assert_eq!(
                ctx.client_access(peer, "p/b", &read_only),
                ShareAccess::None
            );
        }
        assert_eq!(
            ctx.client_access(ip("192.0.2.7"), "p/c", &listed),
            ShareAccess::ReadWrite
        );
        assert_eq!(
            ctx.client_access(ip("fd00::2"), "p/c", &listed),
            ShareAccess::ReadOnly
        );
        let reports: Vec<String> = cairn_metrics::events::since(before)
            .into_iter()
            .filter(|event| event.source == "nfs")
            .map(|event| event.message)
            .collect();
        assert_eq!(reports.len(), 2, "one report per share: {reports:?}");
        assert!(
            reports[0].contains("refused 192.0.2.7 on p/a"),
            "{reports:?}"
        );
        assert!(reports[1].contains("on p/b"), "{reports:?}");
        assert_eq!(export_groups(&open), ["127.0.0.0/8", "[::1]"]);
        assert_eq!(export_groups(&listed), ["192.0.2.0/24", "[fd00::]/8"]);
    }

    #[test]
    fn read_only_access_grants_no_change() {
        let all = access::READ
            | access::LOOKUP
            | access::MODIFY
            | access::EXTEND
            | access::DELETE
            | access::EXECUTE;
        let reply = || {
            Nfs3Reply::Access(Outcome::Ok(AccessOk {
                obj_attributes: None,
                access: all,
            }))
        };
        let Nfs3Reply::Access(Outcome::Ok(limited)) = limit_access(reply(), true) else {
            panic!("not an ACCESS reply");
        };
        assert_eq!(
            limited.access,
            access::READ | access::LOOKUP | access::EXECUTE
        );
        assert_eq!(limit_access(reply(), false), reply());
    }
}
