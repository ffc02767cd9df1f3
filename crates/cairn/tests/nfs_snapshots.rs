//! Snapshots over NFS (issue 35, point 6), at the protocol level with the raw NFSv3 client
//! (`nfs_common`): a shared filesystem's snapshots are listed under `.cairn/snapshot`, read as
//! they were taken, refuse every change with ROFS, keep their handles across a server
//! restart, and answer STALE once destroyed, also when a snapshot of the same name is taken
//! again, and read through the pool imported again after an export under the running
//! server; `.cairn` is found by name whatever `snapdir` says and listed only when visible, and
//! the name cannot be taken in the root. Mounting (to give the filesystem's root to a user)
//! needs root and /dev/fuse (CI runs as root).

// A test is one scenario read top to bottom: split into helpers, it reads worse.
#![allow(clippy::too_many_lines)]

mod nbd_common;
mod nfs_common;

use cairn_nfs::nfs3::*;
use nbd_common::*;
use nfs_common::*;

fn name(text: &str) -> Filename {
    Filename::new(text.as_bytes().to_vec()).unwrap()
}

/// `names` sorted (a listing is in the order of its hash keys, not by name).
fn sorted(mut names: Vec<String>) -> Vec<String> {
    names.sort();
    names
}

fn dirop(dir: &FileHandle, text: &str) -> DirOpArgs3 {
    DirOpArgs3 {
        dir: dir.clone(),
        name: name(text),
    }
}

impl Raw {
    /// Every name in `dir`, by READDIR (in small replies, so cookies are followed) and by
    /// READDIRPLUS, which must agree; the READDIRPLUS entries' handles by name.
    fn names(&mut self, dir: &FileHandle) -> Vec<String> {
        let mut names = Vec::new();
        let mut cookie = 0;
        loop {
            let args = ReaddirArgs {
                dir: dir.clone(),
                cookie,
                cookieverf: [0; 8],
                count_bytes: 300,
            };
            let ok = match self.nfs(Nfs3Proc::Readdir, &args) {
                Nfs3Reply::Readdir(Outcome::Ok(ok)) => ok,
                other => panic!("READDIR: {other:?}"),
            };
            for entry in &ok.entries {
                names.push(String::from_utf8(entry.name.as_bytes().to_vec()).unwrap());
                cookie = entry.cookie;
            }
            if ok.eof {
                break;
            }
        }
        let plus: Vec<String> = self
            .plus(dir)
            .into_iter()
            .map(|entry| String::from_utf8(entry.name.as_bytes().to_vec()).unwrap())
            .collect();
        assert_eq!(plus, names, "READDIRPLUS and READDIR list alike");
        names
    }

    /// One READDIR of all of `dir` after `cookie`: (name, cookie) pairs.
    fn cookies_after(&mut self, dir: &FileHandle, cookie: u64) -> Vec<(String, u64)> {
        let args = ReaddirArgs {
            dir: dir.clone(),
            cookie,
            cookieverf: [0; 8],
            count_bytes: 64 * 1024,
        };
        match self.nfs(Nfs3Proc::Readdir, &args) {
            Nfs3Reply::Readdir(Outcome::Ok(ok)) => {
                assert!(ok.eof);
                ok.entries
                    .into_iter()
                    .map(|entry| {
                        let name = String::from_utf8(entry.name.as_bytes().to_vec()).unwrap();
                        (name, entry.cookie)
                    })
                    .collect()
            }
            other => panic!("READDIR: {other:?}"),
        }
    }

    /// One READDIRPLUS of all of `dir`.
    fn plus(&mut self, dir: &FileHandle) -> Vec<EntryPlus3> {
        let args = ReaddirplusArgs {
            dir: dir.clone(),
            cookie: 0,
            cookieverf: [0; 8],
            dircount_bytes: 64 * 1024,
            maxcount_bytes: 64 * 1024,
        };
        match self.nfs(Nfs3Proc::Readdirplus, &args) {
            Nfs3Reply::Readdirplus(Outcome::Ok(ok)) => {
                assert!(ok.eof);
                ok.entries
            }
            other => panic!("READDIRPLUS: {other:?}"),
        }
    }

    fn try_read(&mut self, file: &FileHandle) -> Result<Vec<u8>, Nfs3Error> {
        let args = RangeArgs {
            file: file.clone(),
            offset_bytes: 0,
            count_bytes: 1 << 20,
        };
        match self.nfs(Nfs3Proc::Read, &args) {
            Nfs3Reply::Read(Outcome::Ok(ok)) => Ok(ok.data),
            Nfs3Reply::Read(Outcome::Fail(err, _)) => Err(err),
            other => panic!("READ: {other:?}"),
        }
    }

    fn mkdir(&mut self, dir: &FileHandle, text: &str) -> Result<FileHandle, Nfs3Error> {
        let args = MkdirArgs {
            location: dirop(dir, text),
            attributes: Sattr3 {
                mode: Some(0o755),
                ..Sattr3::default()
            },
        };
        match self.nfs(Nfs3Proc::Mkdir, &args) {
            Nfs3Reply::Mkdir(Outcome::Ok(ok)) => Ok(ok.object.expect("a handle")),
            Nfs3Reply::Mkdir(Outcome::Fail(err, _)) => Err(err),
            other => panic!("MKDIR: {other:?}"),
        }
    }

    fn try_create(&mut self, dir: &FileHandle, text: &str) -> Result<(), Nfs3Error> {
        let args = CreateArgs {
            location: dirop(dir, text),
            how: CreateHow::Unchecked(Sattr3::default()),
        };
        match self.nfs(Nfs3Proc::Create, &args) {
            Nfs3Reply::Create(Outcome::Ok(_)) => Ok(()),
            Nfs3Reply::Create(Outcome::Fail(err, _)) => Err(err),
            other => panic!("CREATE: {other:?}"),
        }
    }

    fn try_remove(&mut self, dir: &FileHandle, text: &str) -> Result<(), Nfs3Error> {
        match self.nfs(Nfs3Proc::Remove, &dirop(dir, text)) {
            Nfs3Reply::Remove(Outcome::Ok(_)) => Ok(()),
            Nfs3Reply::Remove(Outcome::Fail(err, _)) => Err(err),
            other => panic!("REMOVE: {other:?}"),
        }
    }

    fn try_write(&mut self, file: &FileHandle, data: &[u8]) -> Result<(), Nfs3Error> {
        let args = WriteArgs {
            file: file.clone(),
            offset_bytes: 0,
            stable: StableHow::FileSync,
            data: data.to_vec(),
        };
        match self.nfs(Nfs3Proc::Write, &args) {
            Nfs3Reply::Write(Outcome::Ok(_)) => Ok(()),
            Nfs3Reply::Write(Outcome::Fail(err, _)) => Err(err),
            other => panic!("WRITE: {other:?}"),
        }
    }

    fn try_setattr(&mut self, object: &FileHandle) -> Result<(), Nfs3Error> {
        let args = SetattrArgs {
            object: object.clone(),
            new_attributes: Sattr3 {
                mode: Some(0o600),
                ..Sattr3::default()
            },
            guard: None,
        };
        match self.nfs(Nfs3Proc::Setattr, &args) {
            Nfs3Reply::Setattr(Outcome::Ok(_)) => Ok(()),
            Nfs3Reply::Setattr(Outcome::Fail(err, _)) => Err(err),
            other => panic!("SETATTR: {other:?}"),
        }
    }

    fn rename(&mut self, dir: &FileHandle, from: &str, to: &str) -> Result<(), Nfs3Error> {
        let args = RenameArgs {
            from: dirop(dir, from),
            to: dirop(dir, to),
        };
        match self.nfs(Nfs3Proc::Rename, &args) {
            Nfs3Reply::Rename(Outcome::Ok(_)) => Ok(()),
            Nfs3Reply::Rename(Outcome::Fail(err, _)) => Err(err),
            other => panic!("RENAME: {other:?}"),
        }
    }

    /// The access bits granted of all asked.
    fn access(&mut self, object: &FileHandle) -> u32 {
        let args = AccessArgs {
            object: object.clone(),
            access: access::READ
                | access::LOOKUP
                | access::MODIFY
                | access::EXTEND
                | access::DELETE
                | access::EXECUTE,
        };
        match self.nfs(Nfs3Proc::Access, &args) {
            Nfs3Reply::Access(Outcome::Ok(ok)) => ok.access,
            other => panic!("ACCESS: {other:?}"),
        }
    }

    fn readlink(&mut self, link: &FileHandle) -> Vec<u8> {
        let args = HandleArgs {
            object: link.clone(),
        };
        match self.nfs(Nfs3Proc::Readlink, &args) {
            Nfs3Reply::Readlink(Outcome::Ok(ok)) => ok.target.as_bytes().to_vec(),
            other => panic!("READLINK: {other:?}"),
        }
    }
}

#[test]
fn snapshots_are_browsable_read_only_with_stable_handles() {
    let _heavy = heavy();
    let env = Env::new();
    let port = free_port();
    let mut server = shared_home(&env, port, &[]);
    let mut raw = Raw::connect(port);
    let root = raw.mount("/tank/home");

    let a = raw.create(&root, "a.txt");
    raw.write(&a, 0, b"monday's a", StableHow::FileSync);
    let docs = raw.mkdir(&root, "docs").unwrap();
    let b = raw.create(&docs, "b.txt");
    raw.write(&b, 0, b"monday's b", StableHow::FileSync);
    let symlink = SymlinkArgs {
        location: dirop(&root, "link"),
        attributes: Sattr3::default(),
        target: NfsPath::new(b"docs/b.txt".to_vec()).unwrap(),
    };
    assert!(matches!(
        raw.nfs(Nfs3Proc::Symlink, &symlink),
        Nfs3Reply::Symlink(Outcome::Ok(_))
    ));

    // Before any snapshot: `.cairn` is found by name, not listed (snapdir=hidden), empty.
    assert_eq!(
        sorted(raw.names(&root)),
        [".", "..", "a.txt", "docs", "link"]
    );
    let control = raw.lookup(&root, ".cairn").expect(".cairn by name");
    assert_eq!(raw.names(&control), [".", "..", "snapshot"]);
    let snapdir = raw.lookup(&control, "snapshot").expect(".cairn/snapshot");
    assert_eq!(raw.names(&snapdir), [".", ".."]);
    assert_eq!(raw.lookup(&snapdir, "monday"), Err(Nfs3Error::NoEnt));

    env.ok(&["snapshot", "tank/home@monday"]);
    // Changes after the snapshot: the live filesystem moves on, the snapshot does not.
    raw.write(&a, 0, b"tuesday's a, longer", StableHow::FileSync);
    assert_eq!(raw.try_remove(&docs, "b.txt"), Ok(()));
    env.ok(&["snapshot", "tank/home@tuesday"]);

    // Listed live, with handles and attributes of each snapshot's root.
    assert_eq!(raw.names(&snapdir), [".", "..", "monday", "tuesday"]);
    let monday = raw.lookup(&snapdir, "monday").expect("monday");
    let plus = raw.plus(&snapdir);
    let listed = plus
        .iter()
        .find(|entry| entry.name.as_bytes() == b"monday")
        .expect("monday listed");
    assert_eq!(listed.name_handle.as_ref(), Some(&monday));
    let monday_a = raw.lookup(&monday, "a.txt").expect("monday's a.txt");
    assert_eq!(raw.try_read(&monday_a).unwrap(), b"monday's a");
    assert_eq!(raw.read(&a, 100), b"tuesday's a, longer");
    let monday_docs = raw.lookup(&monday, "docs").unwrap();
    assert_eq!(sorted(raw.names(&monday_docs)), [".", "..", "b.txt"]);
    let monday_b = raw.lookup(&monday_docs, "b.txt").unwrap();
    assert_eq!(raw.try_read(&monday_b).unwrap(), b"monday's b");
    let monday_link = raw.lookup(&monday, "link").unwrap();
    assert_eq!(raw.readlink(&monday_link), b"docs/b.txt");
    let tuesday = raw.lookup(&snapdir, "tuesday").unwrap();
    let tuesday_docs = raw.lookup(&tuesday, "docs").unwrap();
    assert_eq!(raw.names(&tuesday_docs), [".", ".."]);

    // Each snapshot is a filesystem of its own to the client (its own fsid), so the same
    // object number in two of them, or in one and the live filesystem, is two files.
    let live_attrs = raw.getattr(&a).unwrap();
    let monday_attrs = raw.getattr(&monday_a).unwrap();
    let tuesday_a = raw.lookup(&tuesday, "a.txt").unwrap();
    let tuesday_attrs = raw.getattr(&tuesday_a).unwrap();
    assert_eq!(live_attrs.fileid, monday_attrs.fileid);
    let fsids = [live_attrs.fsid, monday_attrs.fsid, tuesday_attrs.fsid];
    assert!(
        fsids[0] != fsids[1] && fsids[1] != fsids[2] && fsids[0] != fsids[2],
        "{fsids:?}"
    );
    assert_eq!(raw.getattr(&monday).unwrap().fsid, monday_attrs.fsid);
    // `.cairn` and `.cairn/snapshot` are in the live filesystem, with file ids of their own.
    let control_attrs = raw.getattr(&control).unwrap();
    let snapdir_attrs = raw.getattr(&snapdir).unwrap();
    assert_eq!(control_attrs.fsid, live_attrs.fsid);
    assert_eq!(snapdir_attrs.fsid, live_attrs.fsid);
    let root_attrs = raw.getattr(&root).unwrap();
    assert!(
        control_attrs.fileid != root_attrs.fileid
            && snapdir_attrs.fileid != root_attrs.fileid
            && control_attrs.fileid != snapdir_attrs.fileid
    );

    // `..` climbs back: snapshot root → .cairn/snapshot → .cairn → the root.
    assert_eq!(raw.lookup(&monday, ".."), Ok(snapdir.clone()));
    assert_eq!(raw.lookup(&snapdir, ".."), Ok(control.clone()));
    assert_eq!(raw.lookup(&control, ".."), Ok(root.clone()));
    assert_eq!(raw.lookup(&monday_docs, ".."), Ok(monday.clone()));

    // Read-only: ACCESS never grants a change there; every change is ROFS.
    let read_lookup = access::READ | access::LOOKUP;
    assert_eq!(raw.access(&monday) & !read_lookup, 0);
    assert_eq!(raw.access(&monday_a) & (access::MODIFY | access::EXTEND), 0);
    assert_eq!(raw.access(&snapdir) & !read_lookup, 0);
    assert_ne!(
        raw.access(&root) & access::MODIFY,
        0,
        "the live root is writable"
    );
    assert_eq!(raw.try_write(&monday_a, b"x"), Err(Nfs3Error::RoFs));
    assert_eq!(raw.try_setattr(&monday_a), Err(Nfs3Error::RoFs));
    assert_eq!(raw.try_create(&monday, "new.txt"), Err(Nfs3Error::RoFs));
    assert_eq!(raw.try_remove(&monday, "a.txt"), Err(Nfs3Error::RoFs));
    assert_eq!(raw.mkdir(&monday_docs, "new"), Err(Nfs3Error::RoFs));
    assert_eq!(raw.rename(&monday, "a.txt", "z.txt"), Err(Nfs3Error::RoFs));
    assert_eq!(raw.mkdir(&snapdir, "wednesday"), Err(Nfs3Error::RoFs));
    assert_eq!(raw.try_remove(&snapdir, "monday"), Err(Nfs3Error::RoFs));
    assert_eq!(raw.try_create(&control, "x"), Err(Nfs3Error::RoFs));
    assert_eq!(raw.try_read(&monday_a).unwrap(), b"monday's a", "unchanged");
    // The name `.cairn` in the root is the control directory's.
    assert_eq!(raw.try_create(&root, ".cairn"), Err(Nfs3Error::Exist));
    assert_eq!(raw.mkdir(&root, ".cairn"), Err(Nfs3Error::Exist));
    assert_eq!(raw.try_remove(&root, ".cairn"), Err(Nfs3Error::Exist));
    assert_eq!(raw.rename(&root, "a.txt", ".cairn"), Err(Nfs3Error::Exist));
    // The rest of the filesystem's procedures that read.
    for procedure in [Nfs3Proc::Fsstat, Nfs3Proc::Fsinfo, Nfs3Proc::Pathconf] {
        let reply = raw.nfs(
            procedure,
            &HandleArgs {
                object: monday.clone(),
            },
        );
        let ok = matches!(
            reply,
            Nfs3Reply::Fsstat(Outcome::Ok(_))
                | Nfs3Reply::Fsinfo(Outcome::Ok(_))
                | Nfs3Reply::Pathconf(Outcome::Ok(_))
        );
        assert!(ok, "{procedure:?}: {reply:?}");
    }

    // snapdir=visible: the root lists `.cairn` (last); hidden again: it does not.
    env.ok(&["set", "snapdir=visible", "tank/home"]);
    let mut listed = raw.names(&root);
    assert_eq!(listed.pop().as_deref(), Some(".cairn"), "{listed:?}");
    assert_eq!(sorted(listed), [".", "..", "a.txt", "docs", "link"]);
    let plus = raw.plus(&root);
    let listed = plus.last().expect("entries");
    assert_eq!(listed.name_handle.as_ref(), Some(&control));
    env.ok(&["set", "snapdir=hidden", "tank/home"]);
    assert_eq!(
        sorted(raw.names(&root)),
        [".", "..", "a.txt", "docs", "link"]
    );

    let cookies = raw.cookies_after(&snapdir, 0);
    let monday_cookie = cookies
        .iter()
        .find(|(name, _)| name == "monday")
        .map(|(_, cookie)| *cookie)
        .expect("monday's cookie");

    // After a restart, every handle from before resolves, to the same contents.
    drop(raw);
    server.kill();
    let mut server = env.serve_with_args(&["--nfs", &format!("127.0.0.1:{port}")]);
    let mut raw = Raw::connect(port);
    assert_eq!(raw.try_read(&monday_a).unwrap(), b"monday's a");
    assert_eq!(raw.try_read(&monday_b).unwrap(), b"monday's b");
    assert_eq!(raw.getattr(&monday).unwrap().fsid, monday_attrs.fsid);
    assert_eq!(raw.getattr(&snapdir).unwrap().fileid, snapdir_attrs.fileid);
    assert_eq!(raw.lookup(&snapdir, "monday"), Ok(monday.clone()));
    assert_eq!(raw.names(&snapdir), [".", "..", "monday", "tuesday"]);
    // The listing's cookies too: the same, and one goes on where it left off.
    assert_eq!(raw.cookies_after(&snapdir, 0), cookies);
    let after_monday: Vec<String> = raw
        .cookies_after(&snapdir, monday_cookie)
        .into_iter()
        .map(|(name, _)| name)
        .collect();
    assert_eq!(after_monday, ["tuesday"]);

    // Destroyed: every handle of it is STALE, its name is gone from the listing.
    env.ok(&["destroy", "tank/home@monday"]);
    assert_eq!(raw.try_read(&monday_a), Err(Nfs3Error::Stale));
    assert_eq!(raw.getattr(&monday_b), Err(Nfs3Error::Stale));
    assert_eq!(raw.getattr(&monday), Err(Nfs3Error::Stale));
    assert_eq!(raw.lookup(&monday, "a.txt"), Err(Nfs3Error::Stale));
    assert_eq!(raw.names(&snapdir), [".", "..", "tuesday"]);
    assert_eq!(raw.lookup(&snapdir, "monday"), Err(Nfs3Error::NoEnt));
    // A cookie of the destroyed snapshot still goes on where it left off.
    let after_monday: Vec<String> = raw
        .cookies_after(&snapdir, monday_cookie)
        .into_iter()
        .map(|(name, _)| name)
        .collect();
    assert_eq!(after_monday, ["tuesday"]);
    // Taken again under the same name: another snapshot, whose handles are not the old
    // one's; the old ones stay STALE, never showing the new snapshot's files.
    env.ok(&["snapshot", "tank/home@monday"]);
    let again = raw.lookup(&snapdir, "monday").expect("the new monday");
    assert_ne!(again, monday);
    assert_eq!(raw.getattr(&monday), Err(Nfs3Error::Stale));
    assert_eq!(raw.try_read(&monday_a), Err(Nfs3Error::Stale));
    let again_a = raw.lookup(&again, "a.txt").unwrap();
    assert_eq!(raw.try_read(&again_a).unwrap(), b"tuesday's a, longer");
    // The live filesystem was never touched by any of it.
    assert_eq!(raw.read(&a, 100), b"tuesday's a, longer");

    // The pool exported and imported again under the running server: another pool of the
    // same guid, whose snapshots are read through it, not through what was kept open of the
    // old one (whose devices are closed).
    env.ok(&["pool", "export", "tank"]);
    assert_eq!(raw.try_read(&again_a), Err(Nfs3Error::Stale));
    let devs = env.path("devs");
    env.ok(&["pool", "import", "-d", devs.to_str().unwrap(), "tank"]);
    assert_eq!(raw.try_read(&again_a).unwrap(), b"tuesday's a, longer");
    assert_eq!(raw.lookup(&snapdir, "tuesday"), Ok(tuesday.clone()));
    let tuesday_a_again = raw.lookup(&tuesday, "a.txt").unwrap();
    assert_eq!(
        raw.try_read(&tuesday_a_again).unwrap(),
        b"tuesday's a, longer"
    );

    drop(raw);
    server.terminate();
    env.assert_pool_check_clean();
}
