//! The NFSv4.1 operations on files, carried out by v3's procedures: each operation on a real
//! object is turned into the v3 call that does the same (LOOKUP, GETATTR, ACCESS, READ,
//! WRITE, COMMIT, READDIRPLUS, CREATE, REMOVE, SETATTR), admitted by the export's access
//! lists and root squash exactly as that call is over v3 (`NfsContext::admit`), and run by the
//! same code: permissions, the intent-log mapping of WRITE's stability levels and COMMIT
//! (`write.rs`), the verifier, STALE handles and the `.cairn` snapshot view are v3's, so the
//! two versions cannot drift apart. Pseudo directories (`pseudo.rs`) answer here themselves.
//!
//! Times set by SETATTR and OPEN go through v3's 32-bit unsigned seconds (1970–2106);
//! owners are numeric strings (BADOWNER otherwise). OPEN checks the mode bits for the access
//! it asks, except on a file it just created (as a local `open(O_CREAT)`), and records the
//! open (`sessions.rs`); READ and WRITE take the special stateids or an open of the same file
//! (WRITE: one with write access, else OPENMODE).

use super::super::access::limit_access;
use super::super::changes;
use super::super::context::NfsContext;
use super::super::convert::{Caller, MAY_READ, MAY_WRITE};
use super::super::procs;
use super::super::sessions::V4State;
use super::super::write;
use super::pseudo::{self, Fh, PseudoChild, Space};
use cairn_nfs::nfs3::{self, Nfs3Call, Nfs3Error, Nfs3Reply, Outcome};
use cairn_nfs::nfs4::args::{
    CommitArgs, CreateHow4, OpenArgs, OpenClaim4, ReadArgs, ReaddirArgs, SetattrArgs, WriteArgs,
    share_access4,
};
use cairn_nfs::nfs4::attrs::{AttrError, AttrValues, SETTABLE_BITS, SetTime4, attr};
use cairn_nfs::nfs4::results::{
    AccessOk, Entry4, OpenDelegation4, OpenOk, ReadOk, ReaddirOk, SetattrRes, WriteOk,
};
use cairn_nfs::nfs4::types::{
    Bitmap4, ChangeInfo4, Component, Nfs4Error, OpResult, StableHow4, Stateid4, access4,
};
use std::net::IpAddr;

/// What the operations of one compound share.
pub struct Env<'a> {
    pub ctx: &'a NfsContext,
    pub state: &'a V4State,
    pub client: IpAddr,
    /// As the RPC credential says (squashed per export by `admit`).
    pub caller: Caller,
    /// The client id of the compound's session (0 before SEQUENCE).
    pub clientid: u64,
    pub current: Option<Fh>,
    pub saved: Option<Fh>,
}

/// The v4 status of a v3 error.
pub fn err4(err: Nfs3Error) -> Nfs4Error {
    match err {
        Nfs3Error::Perm => Nfs4Error::Perm,
        Nfs3Error::NoEnt => Nfs4Error::NoEnt,
        Nfs3Error::Io => Nfs4Error::Io,
        Nfs3Error::NxIo => Nfs4Error::NxIo,
        Nfs3Error::Acces => Nfs4Error::Access,
        Nfs3Error::Exist => Nfs4Error::Exist,
        Nfs3Error::XDev => Nfs4Error::XDev,
        Nfs3Error::NotDir => Nfs4Error::NotDir,
        Nfs3Error::IsDir => Nfs4Error::IsDir,
        Nfs3Error::FBig => Nfs4Error::FBig,
        Nfs3Error::NoSpc => Nfs4Error::NoSpc,
        Nfs3Error::RoFs => Nfs4Error::RoFs,
        Nfs3Error::MLink => Nfs4Error::MLink,
        Nfs3Error::NameTooLong => Nfs4Error::NameTooLong,
        Nfs3Error::NotEmpty => Nfs4Error::NotEmpty,
        Nfs3Error::DQuot => Nfs4Error::DQuot,
        Nfs3Error::Stale => Nfs4Error::Stale,
        Nfs3Error::BadHandle => Nfs4Error::BadHandle,
        Nfs3Error::BadCookie => Nfs4Error::BadCookie,
        Nfs3Error::NotSupp => Nfs4Error::NotSupp,
        Nfs3Error::TooSmall => Nfs4Error::TooSmall,
        Nfs3Error::BadType => Nfs4Error::BadType,
        Nfs3Error::Jukebox => Nfs4Error::Delay,
        Nfs3Error::NoDev | Nfs3Error::Inval | Nfs3Error::Remote | Nfs3Error::NotSync => {
            Nfs4Error::Inval
        }
        Nfs3Error::ServerFault => Nfs4Error::ServerFault,
    }
}

fn fail<T, F>(outcome: Outcome<T, F>) -> Result<T, Nfs4Error> {
    match outcome {
        Outcome::Ok(ok) => Ok(ok),
        Outcome::Fail(err, _) => Err(err4(err)),
    }
}

impl Env<'_> {
    pub fn current(&self) -> Result<&Fh, Nfs4Error> {
        self.current.as_ref().ok_or(Nfs4Error::NoFileHandle)
    }

    /// The current handle if it is a real object's (`pseudo` answers a pseudo directory).
    fn real(&self, pseudo: Nfs4Error) -> Result<nfs3::FileHandle, Nfs4Error> {
        match self.current()? {
            Fh::Real(handle) => Ok(handle.clone()),
            Fh::Pseudo(_) => Err(pseudo),
        }
    }

    /// Runs v3's `call` as the export lets this client (the caller squashed as it says).
    fn run(&self, call: &Nfs3Call, run: impl FnOnce(&Caller) -> Nfs3Reply) -> OpResult<Nfs3Reply> {
        let admitted = self
            .ctx
            .admit(self.client, self.caller.clone(), call)
            .map_err(err4)?;
        Ok(limit_access(run(&admitted.caller), admitted.read_only))
    }

    fn getattr3(&self, handle: &nfs3::FileHandle) -> OpResult<nfs3::Fattr3> {
        let args = nfs3::HandleArgs {
            object: handle.clone(),
        };
        match self.run(&Nfs3Call::Getattr(args.clone()), |_| {
            procs::getattr(self.ctx, &args)
        })? {
            Nfs3Reply::Getattr(outcome) => fail(outcome),
            _ => Err(Nfs4Error::ServerFault),
        }
    }

    /// The change attribute of the directory `handle` now (0 if it cannot be read).
    fn change_of(&self, handle: &nfs3::FileHandle) -> u64 {
        self.getattr3(handle)
            .map(|fattr| pseudo::real_values(&fattr, &Fh::Real(handle.clone()), (0, 0, 0)))
            .ok()
            .and_then(|values| values.change)
            .unwrap_or(0)
    }

    /// The space figures of the filesystem `handle` is in, when `mask` asks for them.
    fn space(&self, handle: &nfs3::FileHandle, mask: &Bitmap4) -> Space {
        let wanted = [
            attr::files_avail,
            attr::files_free,
            attr::files_total,
            attr::space_avail,
            attr::space_free,
            attr::space_total,
        ];
        if !wanted.iter().any(|bit| mask.is_set(*bit)) {
            return (0, 0, 0);
        }
        let Ok(r) = self.ctx.resolve_any(handle) else {
            return (0, 0, 0);
        };
        let (total, avail) = r.export.space();
        let space = r.export.fs.space(total, avail);
        (space.total_bytes, space.available_bytes, space.used_objects)
    }

    /// The attributes of `fh` that `mask` asks for.
    pub fn attrs_of(&self, fh: &Fh, mask: &Bitmap4) -> OpResult<AttrValues> {
        let values = match fh {
            Fh::Pseudo(path) => {
                let entries = pseudo::pseudo_children(self.ctx, path).ok_or(Nfs4Error::Stale)?;
                pseudo::pseudo_values(path, &entries)
            }
            Fh::Real(handle) => {
                let fattr = self.getattr3(handle)?;
                pseudo::real_values(&fattr, fh, self.space(handle, mask))
            }
        };
        Ok(values.only(mask))
    }

    pub fn putfh(&mut self, fh: &cairn_nfs::nfs4::Nfs4Fh) -> OpResult<()> {
        let fh = Fh::from_wire(fh).ok_or(Nfs4Error::BadHandle)?;
        match &fh {
            Fh::Pseudo(path) => {
                pseudo::pseudo_children(self.ctx, path).ok_or(Nfs4Error::Stale)?;
            }
            Fh::Real(handle) => {
                self.ctx.resolve_any(handle).map_err(err4)?;
            }
        }
        self.current = Some(fh);
        Ok(())
    }

    pub fn lookup(&mut self, name: &Component) -> OpResult<()> {
        let name = name.as_bytes();
        if name.is_empty() {
            return Err(Nfs4Error::Inval);
        }
        if name == b"." || name == b".." {
            return Err(Nfs4Error::BadName);
        }
        let found = match self.current()?.clone() {
            Fh::Pseudo(path) => self.pseudo_lookup(&path, name)?,
            Fh::Real(dir) => Fh::Real(self.lookup3(&dir, name)?),
        };
        self.current = Some(found);
        Ok(())
    }

    fn lookup3(&self, dir: &nfs3::FileHandle, name: &[u8]) -> OpResult<nfs3::FileHandle> {
        let name = nfs3::Filename::new(name.to_vec()).map_err(|_| Nfs4Error::NameTooLong)?;
        let args = nfs3::DirOpArgs3 {
            dir: dir.clone(),
            name,
        };
        match self.run(&Nfs3Call::Lookup(args.clone()), |caller| {
            procs::lookup(self.ctx, caller, &args)
        })? {
            Nfs3Reply::Lookup(outcome) => fail(outcome).map(|ok| ok.object),
            _ => Err(Nfs4Error::ServerFault),
        }
    }

    fn pseudo_lookup(&self, path: &str, name: &[u8]) -> OpResult<Fh> {
        let entries = pseudo::pseudo_children(self.ctx, path).ok_or(Nfs4Error::Stale)?;
        let (_, child) = entries
            .into_iter()
            .find(|(entry, _)| entry.as_bytes() == name)
            .ok_or(Nfs4Error::NoEnt)?;
        match child {
            PseudoChild::Pseudo(path) => Ok(Fh::Pseudo(path)),
            PseudoChild::Export(dataset) => {
                let (export, object, attrs) = self
                    .ctx
                    .mount_point(format!("/{dataset}").as_bytes())
                    .map_err(|_| Nfs4Error::NoEnt)?;
                Ok(Fh::Real(export.handle(object, &attrs)))
            }
        }
    }

    pub fn lookupp(&mut self) -> OpResult<()> {
        let parent = match self.current()?.clone() {
            Fh::Pseudo(path) if path.is_empty() => return Err(Nfs4Error::NoEnt),
            Fh::Pseudo(path) => Fh::Pseudo(path.rsplit_once('/').map_or("", |(up, _)| up).into()),
            Fh::Real(handle) => {
                let r = self.ctx.resolve_any(&handle).map_err(err4)?;
                if r.is_live() && r.object == r.export.fs.root() {
                    let dataset = &r.export.dataset;
                    Fh::Pseudo(dataset.rsplit_once('/').map_or("", |(up, _)| up).into())
                } else {
                    Fh::Real(self.lookup3(&handle, b"..")?)
                }
            }
        };
        self.current = Some(parent);
        Ok(())
    }

    pub fn access(&self, asked: u32) -> OpResult<AccessOk> {
        let asked = asked & 0x3f;
        let granted = match self.current()?.clone() {
            Fh::Pseudo(_) => asked & (access4::READ | access4::LOOKUP),
            Fh::Real(handle) => {
                let args = nfs3::AccessArgs {
                    object: handle,
                    access: asked,
                };
                match self.run(&Nfs3Call::Access(args.clone()), |caller| {
                    procs::access(self.ctx, caller, &args)
                })? {
                    Nfs3Reply::Access(outcome) => fail(outcome)?.access,
                    _ => return Err(Nfs4Error::ServerFault),
                }
            }
        };
        Ok(AccessOk {
            supported: asked,
            access: granted,
        })
    }

    /// Checks the stateid of a READ or WRITE (`write`: it must allow writing).
    fn check_io(&self, stateid: &Stateid4, handle: &nfs3::FileHandle, write: bool) -> OpResult<()> {
        let special = [Stateid4::ANONYMOUS, Stateid4::BYPASS, Stateid4::CURRENT];
        if special.contains(stateid) {
            return Ok(());
        }
        let open = self.state.open_of(stateid, handle)?;
        if write && open.access & share_access4::WRITE == 0 {
            return Err(Nfs4Error::OpenMode);
        }
        Ok(())
    }

    pub fn read(&self, args: &ReadArgs) -> OpResult<ReadOk> {
        let handle = self.real(Nfs4Error::IsDir)?;
        self.check_io(&args.stateid, &handle, false)?;
        let args3 = nfs3::RangeArgs {
            file: handle,
            offset_bytes: args.offset_bytes,
            count_bytes: args.count_bytes,
        };
        match self.run(&Nfs3Call::Read(args3.clone()), |caller| {
            procs::read(self.ctx, caller, &args3)
        })? {
            Nfs3Reply::Read(outcome) => fail(outcome).map(|ok| ReadOk {
                eof: ok.eof,
                data: ok.data,
            }),
            _ => Err(Nfs4Error::ServerFault),
        }
    }

    pub fn write(&self, args: &WriteArgs) -> OpResult<WriteOk> {
        let handle = self.real(Nfs4Error::IsDir)?;
        self.check_io(&args.stateid, &handle, true)?;
        let args3 = nfs3::WriteArgs {
            file: handle,
            offset_bytes: args.offset_bytes,
            stable: match args.stable {
                StableHow4::Unstable => nfs3::StableHow::Unstable,
                StableHow4::DataSync => nfs3::StableHow::DataSync,
                StableHow4::FileSync => nfs3::StableHow::FileSync,
            },
            data: args.data.clone(),
        };
        match self.run(&Nfs3Call::Write(args3.clone()), |caller| {
            write::write(self.ctx, caller, &args3)
        })? {
            Nfs3Reply::Write(outcome) => fail(outcome).map(|ok| WriteOk {
                count_bytes: ok.count_bytes,
                committed: match ok.committed {
                    nfs3::StableHow::Unstable => StableHow4::Unstable,
                    nfs3::StableHow::DataSync => StableHow4::DataSync,
                    nfs3::StableHow::FileSync => StableHow4::FileSync,
                },
                verf: ok.verf,
            }),
            _ => Err(Nfs4Error::ServerFault),
        }
    }

    pub fn commit(&self, args: &CommitArgs) -> OpResult<[u8; 8]> {
        let handle = self.real(Nfs4Error::IsDir)?;
        let args3 = nfs3::RangeArgs {
            file: handle,
            offset_bytes: args.offset_bytes,
            count_bytes: args.count_bytes,
        };
        match self.run(&Nfs3Call::Commit(args3.clone()), |_| {
            write::commit(self.ctx, &args3)
        })? {
            Nfs3Reply::Commit(outcome) => fail(outcome).map(|ok| ok.verf),
            _ => Err(Nfs4Error::ServerFault),
        }
    }

    pub fn remove(&self, name: &Component) -> OpResult<ChangeInfo4> {
        let dir = self.real(Nfs4Error::RoFs)?;
        let name =
            nfs3::Filename::new(name.as_bytes().to_vec()).map_err(|_| Nfs4Error::NameTooLong)?;
        let before = self.change_of(&dir);
        let args = nfs3::DirOpArgs3 {
            dir: dir.clone(),
            name,
        };
        // A directory is removed by REMOVE too in v4.
        let is_dir = self
            .lookup3(&dir, args.name.as_bytes())
            .and_then(|child| self.getattr3(&child))
            .is_ok_and(|fattr| fattr.ftype == nfs3::Ftype3::Dir);
        let reply = if is_dir {
            self.run(&Nfs3Call::Rmdir(args.clone()), |caller| {
                changes::rmdir(self.ctx, caller, &args)
            })?
        } else {
            self.run(&Nfs3Call::Remove(args.clone()), |caller| {
                changes::remove(self.ctx, caller, &args)
            })?
        };
        match reply {
            Nfs3Reply::Remove(outcome) | Nfs3Reply::Rmdir(outcome) => fail(outcome)?,
            _ => return Err(Nfs4Error::ServerFault),
        };
        Ok(ChangeInfo4 {
            atomic: false,
            before,
            after: self.change_of(&dir),
        })
    }

    pub fn setattr(&self, args: &SetattrArgs) -> SetattrRes {
        let status = self.setattr_inner(args);
        SetattrRes {
            attrsset: if status.is_ok() {
                args.attrs.mask.clone()
            } else {
                Bitmap4::default()
            },
            status,
        }
    }

    fn setattr_inner(&self, args: &SetattrArgs) -> OpResult<()> {
        let handle = self.real(Nfs4Error::RoFs)?;
        let values = settable(&args.attrs)?;
        if values.size.is_some() {
            self.check_io(&args.stateid, &handle, true)?;
        }
        self.setattr3(&handle, sattr_of(&values)?)
    }

    fn setattr3(&self, handle: &nfs3::FileHandle, sattr: nfs3::Sattr3) -> OpResult<()> {
        let args = nfs3::SetattrArgs {
            object: handle.clone(),
            new_attributes: sattr,
            guard: None,
        };
        match self.run(&Nfs3Call::Setattr(args.clone()), |caller| {
            changes::setattr(self.ctx, caller, &args)
        })? {
            Nfs3Reply::Setattr(outcome) => fail(outcome).map(|_| ()),
            _ => Err(Nfs4Error::ServerFault),
        }
    }

    pub fn readdir(&self, args: &ReaddirArgs) -> OpResult<ReaddirOk> {
        match self.current()?.clone() {
            Fh::Pseudo(path) => self.pseudo_readdir(&path, args),
            Fh::Real(dir) => self.real_readdir(dir, args),
        }
    }

    fn pseudo_readdir(&self, path: &str, args: &ReaddirArgs) -> OpResult<ReaddirOk> {
        let entries = pseudo::pseudo_children(self.ctx, path).ok_or(Nfs4Error::Stale)?;
        let mut listed = Vec::new();
        for (index, (name, child)) in entries.into_iter().enumerate() {
            let cookie = index as u64 + 3;
            if cookie <= args.cookie {
                continue;
            }
            let fh = match child {
                PseudoChild::Pseudo(path) => Fh::Pseudo(path),
                PseudoChild::Export(_) => match self.pseudo_lookup(path, name.as_bytes()) {
                    Ok(fh) => fh,
                    Err(_) => continue,
                },
            };
            let Ok(values) = self.attrs_of(&fh, &args.attr_request) else {
                continue;
            };
            listed.push((cookie, name.into_bytes(), values));
        }
        fit(listed, true, args.maxcount_bytes)
    }

    fn real_readdir(&self, dir: nfs3::FileHandle, args: &ReaddirArgs) -> OpResult<ReaddirOk> {
        let args3 = nfs3::ReaddirplusArgs {
            dir,
            cookie: args.cookie,
            cookieverf: [0; 8],
            dircount_bytes: args.dircount_bytes,
            maxcount_bytes: args.maxcount_bytes,
        };
        let listing = match self.run(&Nfs3Call::Readdirplus(args3.clone()), |caller| {
            procs::readdirplus(self.ctx, caller, &args3)
        })? {
            Nfs3Reply::Readdirplus(outcome) => fail(outcome)?,
            _ => return Err(Nfs4Error::ServerFault),
        };
        let space = self.space(&args3.dir, &args.attr_request);
        let mut listed = Vec::new();
        for entry in listing.entries {
            let name = entry.name.into_bytes();
            if name == b"." || name == b".." {
                continue;
            }
            let values = match (entry.name_attributes, entry.name_handle) {
                (Some(fattr), Some(handle)) => {
                    pseudo::real_values(&fattr, &Fh::Real(handle), space).only(&args.attr_request)
                }
                // Gone since it was listed.
                _ if args.attr_request.is_set(attr::rdattr_error) => AttrValues {
                    rdattr_error: Some(Nfs4Error::NoEnt.as_u32()),
                    ..AttrValues::default()
                },
                _ => continue,
            };
            listed.push((entry.cookie, name, values));
        }
        fit(listed, listing.eof, args.maxcount_bytes)
    }

    pub fn open(&mut self, args: &OpenArgs) -> OpResult<OpenOk> {
        if args.share_deny != 0 {
            // Deny modes are not implemented yet: refused rather than ignored.
            return Err(Nfs4Error::NotSupp);
        }
        let access = args.share_access & share_access4::MASK;
        if access == 0 || access > share_access4::BOTH {
            return Err(Nfs4Error::Inval);
        }
        let (file, cinfo, attrset) = match &args.claim {
            OpenClaim4::Null(name) => self.open_by_name(name, args.create.as_ref(), access)?,
            OpenClaim4::Fh => {
                let file = self.real(Nfs4Error::IsDir)?;
                self.check_open(&file, access)?;
                (file, unchanged(), Bitmap4::default())
            }
            OpenClaim4::Previous(_) => return Err(Nfs4Error::NoGrace),
            _ => return Err(Nfs4Error::NotSupp),
        };
        let stateid = self
            .state
            .open(self.clientid, args.owner.owner.as_bytes(), &file, access)?;
        self.current = Some(Fh::Real(file));
        Ok(OpenOk {
            stateid,
            cinfo,
            rflags: 0,
            attrset,
            delegation: OpenDelegation4::None,
        })
    }

    /// OPEN by name in the current directory, creating as `create` says: the file, the
    /// directory's change, the attributes set.
    fn open_by_name(
        &self,
        name: &Component,
        create: Option<&CreateHow4>,
        access: u32,
    ) -> OpResult<(nfs3::FileHandle, ChangeInfo4, Bitmap4)> {
        let dir = match self.current()? {
            Fh::Real(dir) => dir.clone(),
            Fh::Pseudo(_) if create.is_some() => return Err(Nfs4Error::RoFs),
            Fh::Pseudo(_) => return Err(Nfs4Error::IsDir),
        };
        let Some(how) = create else {
            let file = self.lookup3(&dir, name.as_bytes())?;
            self.check_open(&file, access)?;
            return Ok((file, unchanged(), Bitmap4::default()));
        };
        let before = self.change_of(&dir);
        let existed = self.lookup3(&dir, name.as_bytes()).ok();
        let (how3, later, attrset) = create_how(how)?;
        if let (Some(file), nfs3::CreateHow::Unchecked(sattr)) = (&existed, &how3) {
            // An existing file is opened, and truncated if a size is asked: its mode decides,
            // before anything changes (writing, for a truncation).
            let truncating = sattr.size_bytes.is_some();
            let want = access | if truncating { share_access4::WRITE } else { 0 };
            self.check_open(file, want)?;
        }
        let name3 =
            nfs3::Filename::new(name.as_bytes().to_vec()).map_err(|_| Nfs4Error::NameTooLong)?;
        let args = nfs3::CreateArgs {
            location: nfs3::DirOpArgs3 {
                dir: dir.clone(),
                name: name3,
            },
            how: how3,
        };
        let made = match self.run(&Nfs3Call::Create(args.clone()), |caller| {
            changes::create(self.ctx, caller, &args)
        })? {
            Nfs3Reply::Create(outcome) => fail(outcome)?,
            _ => return Err(Nfs4Error::ServerFault),
        };
        let file = made.object.ok_or(Nfs4Error::ServerFault)?;
        match &existed {
            // Opened what was there: its mode decides.
            Some(_) => self.check_open(&file, access)?,
            None => {
                if let Some(sattr) = later {
                    self.setattr3(&file, sattr)?;
                }
            }
        }
        let cinfo = ChangeInfo4 {
            atomic: false,
            before,
            after: self.change_of(&dir),
        };
        Ok((
            file,
            cinfo,
            if existed.is_some() {
                Bitmap4::default()
            } else {
                attrset
            },
        ))
    }

    /// Whether the caller may open `file` for `access` (a regular file, by its mode).
    fn check_open(&self, file: &nfs3::FileHandle, access: u32) -> OpResult<()> {
        let fattr = self.getattr3(file)?;
        match fattr.ftype {
            nfs3::Ftype3::Reg => {}
            nfs3::Ftype3::Dir => return Err(Nfs4Error::IsDir),
            nfs3::Ftype3::Lnk => return Err(Nfs4Error::Symlink),
            _ => return Err(Nfs4Error::WrongType),
        }
        let r = self.ctx.resolve_any(file).map_err(err4)?;
        let caller = self
            .ctx
            .admit(
                self.client,
                self.caller.clone(),
                &Nfs3Call::Getattr(nfs3::HandleArgs {
                    object: file.clone(),
                }),
            )
            .map_err(err4)?
            .caller;
        let mut want = 0;
        if access & share_access4::READ != 0 {
            want |= MAY_READ;
        }
        if access & share_access4::WRITE != 0 {
            want |= MAY_WRITE;
        }
        if !caller.may(&r.attrs, want) {
            return Err(Nfs4Error::Access);
        }
        Ok(())
    }
}

fn unchanged() -> ChangeInfo4 {
    ChangeInfo4 {
        atomic: false,
        before: 0,
        after: 0,
    }
}

/// Attributes a client may set, read from `fattr` (ATTRNOTSUPP, BADXDR, INVAL for one that
/// cannot be set).
fn settable(fattr: &cairn_nfs::nfs4::Fattr4) -> OpResult<AttrValues> {
    let values = AttrValues::from_fattr(fattr).map_err(|err| match err {
        AttrError::NotSupported(_) => Nfs4Error::AttrNotSupp,
        AttrError::Garbage(_) => Nfs4Error::BadXdr,
    })?;
    if fattr.mask.bits().any(|bit| !SETTABLE_BITS.contains(&bit)) {
        return Err(Nfs4Error::Inval);
    }
    Ok(values)
}

fn numeric_id(owner: &cairn_nfs::nfs4::types::Opaque4) -> OpResult<u32> {
    std::str::from_utf8(owner.as_bytes())
        .ok()
        .and_then(|text| text.parse().ok())
        .ok_or(Nfs4Error::BadOwner)
}

/// v3's `sattr3` of settable v4 attributes.
fn sattr_of(values: &AttrValues) -> OpResult<nfs3::Sattr3> {
    let time = |how: &Option<SetTime4>| match how {
        None => nfs3::SetTime::DontChange,
        Some(SetTime4::ServerTime) => nfs3::SetTime::ServerTime,
        Some(SetTime4::ClientTime(time)) => nfs3::SetTime::ClientTime(nfs3::NfsTime3 {
            seconds: u32::try_from(time.seconds.max(0)).unwrap_or(u32::MAX),
            nseconds: time.nseconds,
        }),
    };
    Ok(nfs3::Sattr3 {
        mode: values.mode,
        uid: values.owner.as_ref().map(numeric_id).transpose()?,
        gid: values.owner_group.as_ref().map(numeric_id).transpose()?,
        size_bytes: values.size,
        atime: time(&values.time_access_set),
        mtime: time(&values.time_modify_set),
    })
}

/// v3's create mode for OPEN's, the attributes to set after an exclusive create, and the
/// attributes OPEN reports set.
fn create_how(how: &CreateHow4) -> OpResult<(nfs3::CreateHow, Option<nfs3::Sattr3>, Bitmap4)> {
    Ok(match how {
        CreateHow4::Unchecked(attrs) => {
            let sattr = sattr_of(&settable(attrs)?)?;
            (nfs3::CreateHow::Unchecked(sattr), None, attrs.mask.clone())
        }
        CreateHow4::Guarded(attrs) => {
            let sattr = sattr_of(&settable(attrs)?)?;
            (nfs3::CreateHow::Guarded(sattr), None, attrs.mask.clone())
        }
        CreateHow4::Exclusive(verf) => {
            (nfs3::CreateHow::Exclusive(*verf), None, Bitmap4::default())
        }
        CreateHow4::Exclusive41(verf, attrs) => {
            let values = settable(attrs)?;
            // The verifier lives in the times (as v3's exclusive create keeps it).
            if values.time_access_set.is_some() || values.time_modify_set.is_some() {
                return Err(Nfs4Error::Inval);
            }
            let sattr = sattr_of(&values)?;
            (
                nfs3::CreateHow::Exclusive(*verf),
                Some(sattr),
                attrs.mask.clone(),
            )
        }
    })
}

/// Bytes of a READDIR reply besides its entries.
const READDIR_OVERHEAD_BYTES: usize = 128;

/// The entries that fit in `maxcount_bytes` (TOOSMALL if none does and there were some).
fn fit(
    listed: Vec<(u64, Vec<u8>, AttrValues)>,
    eof: bool,
    maxcount_bytes: u32,
) -> OpResult<ReaddirOk> {
    let budget = (maxcount_bytes as usize).min(super::super::memory::IO_BYTES_MAX as usize);
    let mut used = READDIR_OVERHEAD_BYTES;
    let mut entries = Vec::new();
    let total = listed.len();
    for (cookie, name, values) in listed {
        let entry = Entry4 {
            cookie,
            name: Component::new(name).map_err(|_| Nfs4Error::NameTooLong)?,
            attrs: values.to_fattr(),
        };
        let bytes = 4 + cairn_nfs::xdr::encoded_len_bytes(&entry);
        if used + bytes > budget {
            break;
        }
        used += bytes;
        entries.push(entry);
    }
    let complete = entries.len() == total;
    if entries.is_empty() && !complete {
        return Err(Nfs4Error::TooSmall);
    }
    Ok(ReaddirOk {
        cookieverf: [0; 8],
        entries,
        eof: eof && complete,
    })
}
