//! NFS-Ganesha on the host as the reference NFSv3 server for guest tests: the same mount, the
//! same workload against Ganesha's VFS back end, to compare with cairn's NFS server.
//!
//! [`Ganesha::start`] writes a configuration (one export of a host directory, NFSv3 over TCP
//! on loopback, free ports for NFS and MOUNT, no NLM/RQUOTA, Kerberos off, `Graceless` so
//! clients do not wait out a grace period, its state in the caller's work directory), starts
//! `ganesha.nfsd` in the foreground and returns once it accepts connections. Ganesha will not
//! start without `rpcbind` (it registers its programs), so one is started if none answers on
//! port 111; the guard stops what it started. Guests mount it with [`Ganesha::mount_options`]
//! (explicit ports, so the guest never asks the portmapper). One Ganesha runs at a time per
//! process (the RPC program registrations are global), which a lock inside the guard ensures.

use crate::{Error, tool};
use std::net::{TcpListener, TcpStream, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Longest Ganesha (or rpcbind) may take to accept connections.
const READY_TIMEOUT: Duration = Duration::from_secs(30);
const POLL_INTERVAL: Duration = Duration::from_millis(50);
const RPCBIND_PORT: u16 = 111;

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// A running Ganesha; dropping it stops Ganesha and any rpcbind it started.
pub struct Ganesha {
    child: Child,
    rpcbind: Option<Child>,
    /// The NFS program's TCP port on 127.0.0.1 (the guest reaches it at 10.0.2.2).
    pub nfs_port: u16,
    /// The MOUNT program's TCP port.
    pub mount_port: u16,
    log_path: PathBuf,
    _turn: MutexGuard<'static, ()>,
}

impl Ganesha {
    /// Serves `export_path` (read-write, no root squash) as the NFSv3 export of that same path;
    /// configuration, log and state go to `work_dir`.
    pub fn start(export_path: &Path, work_dir: &Path) -> Result<Ganesha, Error> {
        let turn = ONE_AT_A_TIME
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let rpcbind = start_rpcbind()?;
        let nfs_port = free_port(0)?;
        let mount_port = free_port(nfs_port)?;
        let recovery = work_dir.join("recovery");
        std::fs::create_dir_all(&recovery)
            .map_err(|err| Error::io(format!("creating {}", recovery.display()), err))?;
        let config_path = work_dir.join("ganesha.conf");
        let config = config(export_path, &recovery, nfs_port, mount_port);
        std::fs::write(&config_path, config)
            .map_err(|err| Error::io(format!("writing {}", config_path.display()), err))?;
        let log_path = work_dir.join("ganesha.log");
        let child = Command::new("ganesha.nfsd")
            .arg("-F")
            .arg("-L")
            .arg(&log_path)
            .arg("-f")
            .arg(&config_path)
            .arg("-p")
            .arg(work_dir.join("ganesha.pid"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|err| tool::spawn_error("ganesha.nfsd", err))?;
        let mut ganesha = Ganesha {
            child,
            rpcbind,
            nfs_port,
            mount_port,
            log_path,
            _turn: turn,
        };
        ganesha.wait_ready()?;
        Ok(ganesha)
    }

    /// `-o` options for the guest's `mount -t nfs 10.0.2.2:EXPORT_PATH DIR`.
    pub fn mount_options(&self) -> String {
        format!(
            "vers=3,proto=tcp,port={},mountport={},mountproto=tcp,nolock",
            self.nfs_port, self.mount_port
        )
    }

    /// Ganesha's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_default()
    }

    fn wait_ready(&mut self) -> Result<(), Error> {
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            if TcpStream::connect(("127.0.0.1", self.nfs_port)).is_ok()
                && TcpStream::connect(("127.0.0.1", self.mount_port)).is_ok()
            {
                return Ok(());
            }
            let exited = self.child.try_wait().ok().flatten();
            if exited.is_some() || Instant::now() > deadline {
                return Err(Error::Command {
                    command: "ganesha.nfsd".to_string(),
                    status: exited.map_or("not listening in time".to_string(), |s| s.to_string()),
                    stderr: self.log(),
                });
            }
            std::thread::sleep(POLL_INTERVAL);
        }
    }
}

impl Drop for Ganesha {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some(rpcbind) = &mut self.rpcbind {
            let _ = rpcbind.kill();
            let _ = rpcbind.wait();
        }
    }
}

/// An rpcbind of our own if none answers; None if one already runs.
fn start_rpcbind() -> Result<Option<Child>, Error> {
    if TcpStream::connect(("127.0.0.1", RPCBIND_PORT)).is_ok() {
        return Ok(None);
    }
    let mut child = Command::new("rpcbind")
        .args(["-f", "-w"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|err| tool::spawn_error("rpcbind", err))?;
    let deadline = Instant::now() + READY_TIMEOUT;
    while TcpStream::connect(("127.0.0.1", RPCBIND_PORT)).is_err() {
        if let Ok(Some(status)) = child.try_wait() {
            return Err(Error::Command {
                command: "rpcbind -f -w".to_string(),
                status: status.to_string(),
                stderr: String::new(),
            });
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err(Error::Prepare("rpcbind did not listen in time".to_string()));
        }
        std::thread::sleep(POLL_INTERVAL);
    }
    Ok(Some(child))
}

/// A loopback port free for TCP and UDP now (Ganesha binds both), other than `taken`.
fn free_port(taken: u16) -> Result<u16, Error> {
    for _ in 0..100 {
        let listener = TcpListener::bind("127.0.0.1:0")
            .map_err(|err| Error::io("finding a free port", err))?;
        let port = listener
            .local_addr()
            .map_err(|err| Error::io("finding a free port", err))?
            .port();
        if port != taken && UdpSocket::bind(("127.0.0.1", port)).is_ok() {
            return Ok(port);
        }
    }
    Err(Error::Prepare("no free port for Ganesha".to_string()))
}

fn config(export_path: &Path, recovery: &Path, nfs_port: u16, mount_port: u16) -> String {
    format!(
        r#"NFS_CORE_PARAM {{
  Protocols = 3;
  NFS_Port = {nfs_port};
  MNT_Port = {mount_port};
  Enable_NLM = false;
  Enable_RQUOTA = false;
  Bind_addr = 127.0.0.1;
}}
NFS_KRB5 {{ Active_krb5 = false; }}
NFSV4 {{ Graceless = true; RecoveryRoot = "{recovery}"; }}
EXPORT {{
  Export_Id = 1;
  Path = "{path}";
  Pseudo = "{path}";
  Protocols = 3;
  Transports = TCP;
  Access_Type = RW;
  Squash = No_Root_Squash;
  SecType = sys;
  FSAL {{ Name = VFS; }}
}}
LOG {{ Default_Log_Level = EVENT; }}
"#,
        recovery = recovery.display(),
        path = export_path.display(),
    )
}
