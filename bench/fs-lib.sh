# Sourced by the file-system bench scripts (after lib.sh, with DIR set, and a `cleanup` of their
# own that calls `cleanup_mounts`): their checks and setup (`require_systems`,
# `prepare_bench_dir`), a fresh cairn, zfs-fuse or ext4 file system at $MNT on a 4 GiB file
# under $DIR, and all of it torn down again.

# cleanup_mounts: unmounts $MNT and stops whatever served it.
cleanup_mounts() {
    umount "$MNT" 2>/dev/null || umount -l "$MNT" 2>/dev/null || true
    [[ -n $LOOP ]] && losetup -d "$LOOP" 2>/dev/null || true
    LOOP=
    if [[ -S $CAIRN_STATE/control.sock ]]; then
        pkill -INT -f "$CAIRN_STATE serve" 2>/dev/null || true
        sleep 2
    fi
    if [[ -n $ZFS_PID ]]; then
        zpool export -f zbench 2>/dev/null || true
        kill "$ZFS_PID" 2>/dev/null || true
        wait "$ZFS_PID" 2>/dev/null || true
        ZFS_PID=
    fi
}

# cairn_of SYSTEM: the cairn binary of system `cairn` (this build) or `cairn-base` (the build
# given with --baseline, run beside it to measure what a change moved).
cairn_of() {
    if [[ $1 == cairn-base ]]; then echo "$BASELINE"; else echo "$CAIRN"; fi
}

# mount_system SYSTEM RECORDSIZE [EXT4_INODES]: a fresh file system of SYSTEM at $MNT.
# `raw` is the file system the images are on, used directly: an empty directory of it
# bind-mounted at $MNT (what the other systems' devices can do at best).
mount_system() {
    local system=$1 recordsize=$2 inodes=${3:-} image=$DIR/$1.img
    cleanup
    rm -f "$image"
    rm -rf "$DIR/raw-fs"
    if [[ $system == raw ]]; then
        mkdir "$DIR/raw-fs"
        mount --bind "$DIR/raw-fs" "$MNT"
        chmod 777 "$MNT"
        return
    fi
    dd if=/dev/zero of="$image" bs=1M count=4096 conv=fsync status=none
    case $system in
        cairn | cairn-base)
            local bin
            bin=$(cairn_of "$system")
            rm -rf "$CAIRN_STATE"
            "$bin" --state-dir "$CAIRN_STATE" pool create -f tank "$image" >/dev/null
            "$bin" --state-dir "$CAIRN_STATE" create -o "recordsize=$recordsize" tank/fs
            "$bin" --state-dir "$CAIRN_STATE" mount tank/fs "$MNT" >/dev/null 2>&1
            ;;
        zfs-fuse)
            zfs-fuse --no-daemon >"$DIR/zfs-fuse.log" 2>&1 &
            ZFS_PID=$!
            sleep 2
            zpool create -f -m "$MNT" zbench "$image"
            zfs set "recordsize=$recordsize" zbench
            ;;
        ext4)
            LOOP=$(losetup --find --show "$image")
            mkfs.ext4 -q -F ${inodes:+-N "$inodes"} "$LOOP"
            mount "$LOOP" "$MNT"
            ;;
    esac
    chmod 777 "$MNT"
}

# require_systems SYSTEM...: exits with what to install when a system's tools are missing.
require_systems() {
    local system
    for system in "$@"; do
        if [[ $system == zfs-fuse ]] && ! command -v zfs-fuse >/dev/null; then
            echo "zfs-fuse is not installed (apt-get install zfs-fuse), or pass --systems cairn,ext4" >&2
            exit 1
        fi
    done
}

# prepare_bench_dir: the release build, an empty $DIR (made absolute) with results/, and the
# mount point and state the helpers above use.
prepare_bench_dir() {
    build_release
    rm -rf "$DIR"
    mkdir -p "$DIR/results"
    DIR=$(cd "$DIR" && pwd)
    MNT=$DIR/mnt
    mkdir -p "$MNT"
    LOOP=
    ZFS_PID=
    CAIRN_STATE=$DIR/cairn-state
}

# start_fs_bench TOOL...: the common start of a file-system bench script that needs nothing
# torn down beyond the mounts: exits naming a missing TOOL or system, prepares $DIR (see
# `prepare_bench_dir`) and unmounts everything on exit.
start_fs_bench() {
    local tool
    for tool in "$@"; do
        command -v "$tool" >/dev/null || { echo "missing tool: $tool" >&2; exit 1; }
    done
    require_systems "${SYSTEMS[@]}"
    prepare_bench_dir
    cleanup() { cleanup_mounts; }
    trap cleanup EXIT
}
