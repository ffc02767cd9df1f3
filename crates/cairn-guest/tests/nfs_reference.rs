//! The guest's kernel NFS client against the reference server, NFS-Ganesha on the host: the
//! mount the NFS tests will make against `cairn serve --nfs` (v3 over TCP, explicit ports,
//! `nolock`) works, data written in the guest with fsync lands in the exported host directory,
//! and a host file reads back in the guest.

use cairn_guest::{BootOptions, Ganesha, Guest, HOST_ADDRESS};
use std::path::PathBuf;
use std::time::Duration;

fn cache_dir() -> PathBuf {
    let tmp = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    tmp.parent()
        .map_or(tmp.clone(), |target| target.join("guest"))
}

#[test]
fn guest_mounts_ganesha_over_nfs3() {
    let guest = Guest::prepare(&cache_dir()).expect("prepare the guest kernel");
    let dir = tempfile::tempdir().expect("tempdir");
    let export = dir.path().join("export");
    let work = dir.path().join("ganesha");
    std::fs::create_dir_all(&export).expect("mkdir");
    std::fs::create_dir_all(&work).expect("mkdir");
    std::fs::write(export.join("host.txt"), "written on the host\n").expect("write");
    let ganesha = Ganesha::start(&export, &work).expect("start NFS-Ganesha");

    // retry=0: a server that does not answer fails the mount at once, not after 2 minutes.
    let script = format!(
        r#"set -eu
mkdir -p /mnt/nfs
mount -t nfs -o {options},retry=0 {HOST_ADDRESS}:{export} /mnt/nfs
grep ' /mnt/nfs nfs ' /proc/mounts
cat /mnt/nfs/host.txt
dd if=/dev/zero of=/mnt/nfs/guest.bin bs=64k count=40 conv=fsync status=none
echo "written in the guest" > /mnt/nfs/guest.txt
umount /mnt/nfs
"#,
        options = ganesha.mount_options(),
        export = export.display(),
    );
    let options = BootOptions {
        timeout: Duration::from_secs(180),
        ..BootOptions::default()
    };
    let run = guest.boot(&script, &options).expect("boot");
    let output = run.output();
    assert!(
        run.success(),
        "exit {}:\n{}\n--- ganesha log ---\n{}",
        run.exit_code,
        run.console,
        ganesha.log()
    );
    assert!(output.contains("vers=3"), "{output}");
    assert!(output.contains("written on the host"), "{output}");
    assert_eq!(
        std::fs::read_to_string(export.join("guest.txt")).expect("the guest's file"),
        "written in the guest\n"
    );
    let written = std::fs::read(export.join("guest.bin")).expect("the guest's data");
    assert_eq!(written.len(), 40 * 65536);
    assert!(written.iter().all(|byte| *byte == 0));
}
