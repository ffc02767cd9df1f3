#!/usr/bin/env bash
# bench/nfs.sh: cairn's NFS server against NFS-Ganesha, and against NBD on the same pool, with
# the same user-space client (issue 35).
#
#   bench/nfs.sh [--quick] [--dir DIR] [--runtime S] [--ramp S] [--systems SYS[,SYS...]]
#                [--rows ROW[,ROW...]] [--recordsize SIZE] [--no-nbd] [--no-seed]
#
# The client is `nfs-load` (bench/src/bin/nfs-load.rs): NFSv3 over TCP on cairn-nfs's codec,
# one TCP connection and one call in flight per job, AUTH_SYS as uid/gid 1000, checking every
# reply (NFS3_OK, counts, stability, verifiers, the bytes it reads). The host has no kernel
# NFS client and the emulated guest is too slow to make load, so this is what loads both.
#
# Systems (all up at once; every row runs against each in turn, the order rotating per row):
#   cairn        `cairn serve --nfs` of tank/fs (sharenfs=on, recordsize=8K: the size of the
#                synchronous writes, as for the NBD volume; --recordsize changes it) in a pool
#                of one emulated ssd-sata data device and an emulated ssd-plp log device, their
#                backing files on tmpfs (/dev/shm) so that the device models, not this
#                machine's disk, set the timing (see bench/sync-write.sh)
#   cairn-file   the same on a pool of one plain file in DIR (no log device): the same disk
#                as the two Ganesha exports below
#   ganesha-ext4 NFS-Ganesha (FSAL VFS) exporting a directory of ext4 on a loop device over a
#                file in DIR, as large as the pools
#   ganesha-dir  the same Ganesha exporting a directory in DIR itself: the file system the
#                pool files live on (this machine's disk)
# One Ganesha serves both its exports (NFS and MOUNT on free loopback ports, no root squash,
# NLM off, graceless; it registers with rpcbind, which is started if none runs). Pool files,
# the ext4 file and the volume are written out in full first, so no row pays for the
# underlying file system's allocations (as in bench/sync-write.sh).
#
# Rows (--rows ids), each RUNTIME s measured after a RAMP s ramp:
#   sync-1         8 KiB WRITEs, FILE_SYNC, random offsets of a 64 MiB file, 1 job (QD1)
#   sync-16        the same from 16 jobs, each its own file
#   stream         4 jobs, each writing 64 MiB files with UNSTABLE WRITEs of the server's
#                  preferred size (FSINFO wtpref; 1 MiB for cairn and Ganesha) and one COMMIT
#                  per file, then removing it: MB/s of files committed in the window
#   read-cached    128 KiB READs at random over 4 files of 64 MiB just written, 4 jobs
#   read-uncached  8 KiB READs at random over 16 files of 64 MiB (1 GiB), 4 jobs, no ramp,
#                  after a cold start: cairn's server stopped and started (empty ARC), every
#                  system's page cache dropped (echo 3 >/proc/sys/vm/drop_caches)
#   create         4 jobs, each in its own directory: CREATE, a 4 KiB UNSTABLE WRITE, COMMIT
#                  (what a kernel client sends for create, write, close): files per second
# The 16 files of 64 MiB are laid out once (`nfs-load --workload fill`, timed and shown).
# NBD (unless --no-nbd): on each cairn pool, volume tank/vol (1 GiB, volblocksize=8K) takes
# the same 8 KiB writes with the FUA flag from `nbd-load` (bench/src/bin/nbd-load.rs) over TCP
# on loopback as NFS, QD1 and 16 connections: NFS FILE_SYNC against NBD FUA is the protocol's
# cost
# (the volume is not written out first, as in bench/sync-write.sh: copy-on-write allocates
# every write anyway; the NFS files are, for the peers' sake and for the reads).
# The seed's experiment (unless --no-seed; seed 003 saw ~8 → ~61 MB/s): an emulated hdd-7200
# mirror without and with an emulated ssd-plp log device, 8 KiB FILE_SYNC writes from 4 jobs,
# one fresh pool each; the log device's gain.
#
# Prints markdown tables: rates per system with ratios cairn / each Ganesha (> 1 = cairn
# ahead), latencies, NFS / NBD, the seed's gain, and the issue's targets (ahead of
# ganesha-ext4 on sync writes; NBD FUA within 1.2× of NFS FILE_SYNC; seed gain ≥ 7.6×).
# Raw `key=value` lines, server logs and Ganesha's configuration stay in DIR (default
# $CARGO_TARGET_DIR/bench-nfs, else target/bench-nfs; wiped first).
#
# The real run (~9 min on 2 cores, estimated from the smoke run; nothing else should run on
# the machine):
#   CARGO_TARGET_DIR=/work/tgt-bench bench/nfs.sh
# --quick: a smoke run (2 s rows after a 1 s ramp, 8 MiB files, 1 GiB pools; ~2 min), its
# figures meaningless. Needs root (loop device, mounts, drop_caches, a FUSE mount to give the
# filesystem's root to uid 1000: NFS squashes root), and NFS-Ganesha with its VFS back end,
# rpcbind, e2fsprogs, mount; it checks for them and names the Debian packages when missing:
#   apt-get update && apt-get install -y nfs-ganesha nfs-ganesha-vfs rpcbind e2fsprogs mount
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
DIR=$TARGET/bench-nfs
QUICK=0
RUNTIME=
RAMP=
RECORDSIZE=8K
SYSTEMS=(cairn cairn-file ganesha-ext4 ganesha-dir)
ROWS=(sync-1 sync-16 stream read-cached read-uncached create)
NBD=1
SEED=1
while [[ $# -gt 0 ]]; do
    case $1 in
        --quick) QUICK=1; shift ;;
        --dir) DIR=$2; shift 2 ;;
        --runtime) RUNTIME=$2; shift 2 ;;
        --ramp) RAMP=$2; shift 2 ;;
        --systems) IFS=, read -r -a SYSTEMS <<<"$2"; shift 2 ;;
        --rows) IFS=, read -r -a ROWS <<<"$2"; shift 2 ;;
        --recordsize) RECORDSIZE=$2; shift 2 ;;
        --no-nbd) NBD=0; shift ;;
        --no-seed) SEED=0; shift ;;
        -h|--help) sed -n '2,65p' "$0"; exit 0 ;;
        *) echo "unknown argument: $1" >&2; exit 2 ;;
    esac
done
if [[ $QUICK == 1 ]]; then
    RUNTIME=${RUNTIME:-2} RAMP=${RAMP:-1} FILE_SIZE=$((8 << 20)) POOL_SIZE=1G POOL_MIB=1024
    VOL_SIZE=256M
else
    RUNTIME=${RUNTIME:-10} RAMP=${RAMP:-2} FILE_SIZE=$((64 << 20)) POOL_SIZE=4G POOL_MIB=4096
    VOL_SIZE=1G
fi
NFS_UID=1000
for system in "${SYSTEMS[@]}"; do
    case $system in cairn|cairn-file|ganesha-ext4|ganesha-dir) ;;
        *) echo "unknown system $system" >&2; exit 2 ;; esac
done
for row in "${ROWS[@]}"; do
    case $row in sync-1|sync-16|stream|read-cached|read-uncached|create) ;;
        *) echo "unknown row $row" >&2; exit 2 ;; esac
done
has_ganesha=0
[[ " ${SYSTEMS[*]} " == *" ganesha-"* ]] && has_ganesha=1

missing=()
for tool in cargo python3 timeout losetup mkfs.ext4 mount umount; do
    command -v "$tool" >/dev/null || missing+=("$tool")
done
if ((has_ganesha)); then
    for tool in ganesha.nfsd rpcbind; do
        command -v "$tool" >/dev/null || missing+=("$tool")
    done
    compgen -G "/usr/lib/*/ganesha/libfsalvfs.so" >/dev/null || missing+=("nfs-ganesha-vfs")
fi
if ((${#missing[@]})); then
    echo "missing: ${missing[*]}; apt-get update && apt-get install -y nfs-ganesha" \
        "nfs-ganesha-vfs rpcbind e2fsprogs mount" >&2
    exit 1
fi
[[ $(id -u) == 0 ]] || { echo "needs root (loop device, mounts, drop_caches)" >&2; exit 1; }
[[ -c /dev/fuse ]] || { echo "needs /dev/fuse (to give tank/fs's root to uid $NFS_UID)" >&2; exit 1; }

# shellcheck source=lib.sh
source "$ROOT/bench/lib.sh"
build_release -p cairn-bench
NFS_LOAD=$TARGET/release/nfs-load
NBD_LOAD=$TARGET/release/nbd-load

rm -rf "$DIR"
mkdir -p "$DIR/results"
DIR=$(cd "$DIR" && pwd)
RES=$DIR/results
# One per run (the PID): two runs on one machine must not clear each other's backing files.
EMU=/dev/shm/cairn-bench-nfs.$$
mkdir -p "$EMU"
declare -A NFS_PORT MOUNT_PORT NBD_PORT EXPORT STATE
LOOP=
RPCBIND_PID=

cleanup() {
    stop_servers
    if [[ -n $RPCBIND_PID ]]; then
        kill -TERM "$RPCBIND_PID" 2>/dev/null || true
        wait "$RPCBIND_PID" 2>/dev/null || true
    fi
    for state in "${STATE[@]}"; do
        umount -l "$(dirname "$state")/mnt" 2>/dev/null || true
    done
    umount "$DIR/ext4-mnt" 2>/dev/null || true
    [[ -n $LOOP ]] && losetup -d "$LOOP" 2>/dev/null || true
    rm -rf "$EMU"
}
trap cleanup EXIT

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# wait_for_port NAME PORT: until PORT accepts TCP connections (NAME's server still running).
wait_for_port() {
    local i
    for i in $(seq 1 600); do
        if (exec 3<>"/dev/tcp/127.0.0.1/$2") 2>/dev/null; then return 0; fi
        kill -0 "${PID[$1]}" 2>/dev/null || { echo "$1 exited; see $DIR/$1/*.log" >&2; exit 1; }
        sleep 0.1
    done
    echo "$1 did not listen on port $2 within 60 s" >&2
    exit 1
}

# lay_out FILE MIB: FILE written out in full (zeros), on stable storage.
lay_out() {
    dd if=/dev/zero of="$1" bs=1M count="$2" conv=fsync status=none
}

# serve_cairn NAME: `cairn serve` of NAME's pool with NFS on its port and NBD on a socket.
serve_cairn() {
    local name=$1 work=$DIR/$1
    rm -f "$work/nbd.sock"
    "$CAIRN" --state-dir "${STATE[$name]}" serve --listen "127.0.0.1:${NBD_PORT[$name]}" \
        --socket "$work/nbd.sock" \
        --nfs "127.0.0.1:${NFS_PORT[$name]}" >>"$work/serve.log" 2>&1 &
    PID[$name]=$!
    wait_for_port "$name" "${NFS_PORT[$name]}"
    wait_for_port "$name" "${NBD_PORT[$name]}"
    local i
    for i in $(seq 1 300); do
        [[ -S $work/nbd.sock ]] && return 0
        sleep 0.1
    done
    echo "$name: no NBD socket after 30 s" >&2
    exit 1
}

stop_cairn() {
    kill -TERM "${PID[$1]}" 2>/dev/null || true
    wait "${PID[$1]}" 2>/dev/null || true
    unset "PID[$1]"
}

# start_cairn NAME VDEV...: a pool of the vdevs with tank/fs (shared, its root given to uid
# NFS_UID through a FUSE mount) and volume tank/vol, served.
start_cairn() {
    local name=$1 work=$DIR/$1
    shift
    mkdir -p "$work/mnt"
    STATE[$name]=$work/state
    NFS_PORT[$name]=$(free_port)
    NBD_PORT[$name]=$(free_port)
    MOUNT_PORT[$name]=${NFS_PORT[$name]}
    EXPORT[$name]=/tank/fs
    local cairn=("$CAIRN" --state-dir "${STATE[$name]}")
    {
        "${cairn[@]}" pool create --size "$POOL_SIZE" tank "$@"
        "${cairn[@]}" create -o sharenfs=on -o recordsize="$RECORDSIZE" tank/fs
        "${cairn[@]}" create -V "$VOL_SIZE" -o volblocksize=8K tank/vol
    } >"$work/setup.log"
    serve_cairn "$name"
    "${cairn[@]}" mount tank/fs "$work/mnt" >>"$work/setup.log"
    chown "$NFS_UID:$NFS_UID" "$work/mnt"
    "${cairn[@]}" unmount tank/fs >>"$work/setup.log"
}

start_ganesha() {
    local work=$DIR/ganesha nfs_port mount_port
    mkdir -p "$work/recovery"
    if ! (exec 3<>/dev/tcp/127.0.0.1/111) 2>/dev/null; then
        rpcbind -f -w >"$work/rpcbind.log" 2>&1 &
        RPCBIND_PID=$!
        for _ in $(seq 1 100); do
            (exec 3<>/dev/tcp/127.0.0.1/111) 2>/dev/null && break
            sleep 0.1
        done
    fi
    nfs_port=$(free_port)
    mount_port=$(free_port)
    local exports= id=0 system path
    for system in ganesha-ext4 ganesha-dir; do
        [[ " ${SYSTEMS[*]} " == *" $system "* ]] || continue
        id=$((id + 1))
        path=${EXPORT[$system]}
        NFS_PORT[$system]=$nfs_port
        MOUNT_PORT[$system]=$mount_port
        exports+="EXPORT {
  Export_Id = $id;
  Path = \"$path\";
  Pseudo = \"$path\";
  Protocols = 3;
  Transports = TCP;
  Access_Type = RW;
  Squash = No_Root_Squash;
  SecType = sys;
  FSAL { Name = VFS; }
}
"
    done
    cat >"$work/ganesha.conf" <<EOF
NFS_CORE_PARAM {
  Protocols = 3;
  NFS_Port = $nfs_port;
  MNT_Port = $mount_port;
  Enable_NLM = false;
  Enable_RQUOTA = false;
  Bind_addr = 127.0.0.1;
}
NFS_KRB5 { Active_krb5 = false; }
NFSV4 { Graceless = true; RecoveryRoot = "$work/recovery"; }
$exports
LOG { Default_Log_Level = EVENT; }
EOF
    ganesha.nfsd -F -L "$work/ganesha.log" -f "$work/ganesha.conf" -p "$work/ganesha.pid" \
        </dev/null >/dev/null 2>&1 &
    PID[ganesha]=$!
    wait_for_port ganesha "$nfs_port"
    wait_for_port ganesha "$mount_port"
}

setup_systems() {
    local system
    for system in "${SYSTEMS[@]}"; do
        case $system in
            cairn)
                mkdir -p "$EMU/cairn"
                log "cairn: pool on emulated ssd-sata + ssd-plp log ($EMU)"
                start_cairn cairn "emu:ssd-sata:$EMU/cairn/d0.img" log "emu:ssd-plp:$EMU/cairn/slog.img" ;;
            cairn-file)
                mkdir -p "$DIR/cairn-file"
                log "cairn-file: pool on a plain file of $POOL_SIZE in $DIR (written out first)"
                lay_out "$DIR/cairn-file/d0.img" "$POOL_MIB"
                start_cairn cairn-file "$DIR/cairn-file/d0.img" ;;
            ganesha-ext4)
                log "ganesha-ext4: ext4 on a loop device over a $POOL_SIZE file in $DIR"
                lay_out "$DIR/ext4.img" "$POOL_MIB"
                LOOP=$(losetup --find --show "$DIR/ext4.img")
                mkfs.ext4 -q -F "$LOOP"
                mkdir -p "$DIR/ext4-mnt"
                mount "$LOOP" "$DIR/ext4-mnt"
                mkdir -p "$DIR/ext4-mnt/export"
                chown "$NFS_UID:$NFS_UID" "$DIR/ext4-mnt/export"
                EXPORT[ganesha-ext4]=$DIR/ext4-mnt/export ;;
            ganesha-dir)
                mkdir -p "$DIR/dir-export"
                chown "$NFS_UID:$NFS_UID" "$DIR/dir-export"
                EXPORT[ganesha-dir]=$DIR/dir-export ;;
        esac
    done
    if ((has_ganesha)); then
        log "starting NFS-Ganesha"
        start_ganesha
    fi
}

# nfs_load OUT SYSTEM ARGS...: nfs-load against SYSTEM's export, its line into OUT.
nfs_load() {
    local out=$1 system=$2
    shift 2
    if ! timeout $((RUNTIME + RAMP + 600)) "$NFS_LOAD" --host 127.0.0.1 \
        --port "${NFS_PORT[$system]}" --mount-port "${MOUNT_PORT[$system]}" \
        --export "${EXPORT[$system]}" --uid "$NFS_UID" --gid "$NFS_UID" \
        --seconds "$RUNTIME" --ramp "$RAMP" --file-size "$FILE_SIZE" "$@" \
        >"$out" 2>"$out.stderr"; then
        echo "nfs-load $* against $system failed; see $out.stderr:" >&2
        cat "$out.stderr" >&2
        exit 1
    fi
}

# cold SYSTEM: SYSTEM's caches emptied (cairn's server restarted), then every page cache.
cold() {
    case $1 in
        cairn|cairn-file)
            stop_cairn "$1"
            serve_cairn "$1" ;;
    esac
    sync
    echo 3 >/proc/sys/vm/drop_caches
}

run_row() { # ROW SYSTEM
    local row=$1 system=$2 out=$RES/$1.$2.txt
    log "$row against $system"
    case $row in
        sync-1) nfs_load "$out" "$system" --workload sync-write --bs 8192 --jobs 1 ;;
        sync-16) nfs_load "$out" "$system" --workload sync-write --bs 8192 --jobs 16 ;;
        stream) nfs_load "$out" "$system" --workload stream --jobs 4 ;;
        read-cached) nfs_load "$out" "$system" --workload read --bs 131072 --jobs 4 --files 4 ;;
        read-uncached)
            cold "$system"
            nfs_load "$out" "$system" --workload read --bs 8192 --jobs 4 --files 16 --ramp 0 ;;
        create) nfs_load "$out" "$system" --workload create --bs 4096 --jobs 4 ;;
    esac
}

nbd_load() { # OUT SYSTEM CONNECTIONS
    if ! timeout $((RUNTIME + RAMP + 120)) "$NBD_LOAD" --tcp "127.0.0.1:${NBD_PORT[$2]}" \
        --export tank/vol --bs 8192 --connections "$3" --qd 1 --seconds "$RUNTIME" \
        --ramp "$RAMP" --mode fua >"$1" 2>"$1.stderr"; then
        echo "nbd-load against $2 failed; see $1.stderr" >&2
        exit 1
    fi
}

setup_systems
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
for system in "${SYSTEMS[@]}"; do
    log "laying out 16 files of $((FILE_SIZE >> 20)) MiB on $system"
    nfs_load "$RES/fill.$system.txt" "$system" --workload fill --jobs 4 --files 16
done
i=0
for row in "${ROWS[@]}"; do
    n=${#SYSTEMS[@]}
    for k in $(seq 0 $((n - 1))); do
        run_row "$row" "${SYSTEMS[$(((i + k) % n))]}"
    done
    i=$((i + 1))
done
if ((NBD)); then
    for system in cairn cairn-file; do
        [[ " ${SYSTEMS[*]} " == *" $system "* ]] || continue
        log "NBD FUA writes on $system's volume"
        nbd_load "$RES/nbd-1.$system.txt" "$system" 1
        nbd_load "$RES/nbd-16.$system.txt" "$system" 16
    done
fi
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)
stop_servers
PID=()

if ((SEED)); then
    for variant in hdd-mirror hdd-mirror+slog; do
        log "seed experiment: $variant, 8 KiB FILE_SYNC from 4 jobs"
        emu=$EMU/$variant
        mkdir -p "$emu"
        vdevs=(mirror "emu:hdd-7200:$emu/d0.img" "emu:hdd-7200:$emu/d1.img")
        [[ $variant == *+slog ]] && vdevs+=(log "emu:ssd-plp:$emu/slog.img")
        start_cairn "$variant" "${vdevs[@]}"
        nfs_load "$RES/seed.$variant.txt" "$variant" --workload sync-write --bs 8192 --jobs 4
        stop_cairn "$variant"
        rm -rf "$emu"
    done
fi
ELAPSED=$(($(date +%s) - START))
log "done in ${ELAPSED}s"

python3 - "$DIR" "$RUNTIME" "$RAMP" "$FILE_SIZE" "$RECORDSIZE" "$ELAPSED" "$LOAD_BEFORE" \
    "$LOAD_AFTER" "$QUICK" "${SYSTEMS[*]}" "${ROWS[*]}" <<'EOF'
import os, sys

d, runtime, ramp, file_bytes, recordsize, elapsed, load_before, load_after, quick = sys.argv[1:10]
systems, rows = sys.argv[10].split(), sys.argv[11].split()
res = os.path.join(d, "results")

def read(name):
    path = os.path.join(res, name + ".txt")
    if not os.path.exists(path):
        return None
    return {k: v for k, v in (item.split("=", 1) for item in open(path).read().split())}

labels = {
    "sync-1": ("8K FILE_SYNC WRITE, 1 job (QD1)", "ops_per_s", "IOPS"),
    "sync-16": ("8K FILE_SYNC WRITE, 16 jobs", "ops_per_s", "IOPS"),
    "stream": ("UNSTABLE 1M WRITEs + COMMIT per file, 4 jobs", "mb_per_s", "MB/s"),
    "read-cached": ("128K READ, random, cached, 4 jobs", "ops_per_s", "IOPS"),
    "read-uncached": ("8K READ, random, from cold, 4 jobs", "ops_per_s", "IOPS"),
    "create": ("CREATE + 4K WRITE + COMMIT, 4 jobs", "files_per_s", "files/s"),
}
cairns = [s for s in systems if s.startswith("cairn")]
peers = [s for s in systems if s.startswith("ganesha")]

def num(x):
    return f"{x:,.0f}" if x >= 100 else f"{x:.1f}"

print()
head = "| row | measure | " + " | ".join(systems) + " |"
pairs = [(c, p) for c in cairns for p in peers]
head += "".join(f" {c} / {p} |" for c, p in pairs)
print(head)
print("|---|---|" + "---:|" * (len(systems) + len(pairs)))
value = {}
for row in rows:
    label, key, unit = labels[row]
    cells = []
    for s in systems:
        r = read(f"{row}.{s}")
        value[row, s] = float(r[key]) if r else None
        cells.append(num(value[row, s]) if r else "–")
    ratios = []
    for c, p in pairs:
        a, b = value[row, c], value[row, p]
        ratios.append(f"**{a / b:.2f}×**" if a and b else "–")
    print(f"| {row}: {label} | {unit} | " + " | ".join(cells + ratios) + " |")
print()
print("| row | " + " | ".join(f"{s} p50 / p99 µs" for s in systems) + " |")
print("|---|" + "---:|" * len(systems))
for row in rows:
    cells = []
    for s in systems:
        r = read(f"{row}.{s}")
        if not r:
            cells.append("–")
        elif row == "stream":
            cells.append(f"{r['p50_us']} / {r['p99_us']} (COMMIT {r['commit_p50_us']} / {r['commit_p99_us']})")
        else:
            cells.append(f"{r['p50_us']} / {r['p99_us']}")
    print(f"| {row} | " + " | ".join(cells) + " |")

fills = {s: read(f"fill.{s}") for s in systems}
print()
print("Lay-out of the 16 files (nfs-load fill, 4 jobs, UNSTABLE + COMMIT): "
      + ", ".join(f"{s} {float(f['mb_per_s']):.0f} MB/s" for s, f in fills.items() if f) + ".")

nbd_rows = [(c, read(f"nbd-1.{c}"), read(f"nbd-16.{c}")) for c in cairns]
if any(n1 for _, n1, _ in nbd_rows):
    print()
    print("| pool | NFS FILE_SYNC 8K QD1 IOPS | NBD FUA 8K QD1 IOPS | NBD / NFS | "
          "NFS 16 jobs IOPS | NBD 16 conn. IOPS | NBD / NFS | NFS / NBD p50 µs (QD1) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for c, n1, n16 in nbd_rows:
        if not n1:
            continue
        s1, s16 = read(f"sync-1.{c}"), read(f"sync-16.{c}")
        def ratio(nbd, nfs):
            return f"**{float(nbd['iops']) / float(nfs['ops_per_s']):.2f}×**" if nbd and nfs else "–"
        print(f"| {c} | {num(float(s1['ops_per_s'])) if s1 else '–'} | {num(float(n1['iops']))} | "
              f"{ratio(n1, s1)} | {num(float(s16['ops_per_s'])) if s16 else '–'} | "
              f"{num(float(n16['iops'])) if n16 else '–'} | {ratio(n16, s16)} | "
              f"{s1['p50_us'] if s1 else '–'} / {n1['p50_us']} |")

seed = {v: read(f"seed.{v}") for v in ("hdd-mirror", "hdd-mirror+slog")}
if all(seed.values()):
    print()
    print("| seed experiment: 8K FILE_SYNC, 4 jobs | MB/s | IOPS | p50 / p99 µs |")
    print("|---|---:|---:|---:|")
    for v, r in seed.items():
        print(f"| {v} | {float(r['mb_per_s']):.1f} | {num(float(r['ops_per_s']))} | "
              f"{r['p50_us']} / {r['p99_us']} |")
    gain = float(seed["hdd-mirror+slog"]["mb_per_s"]) / float(seed["hdd-mirror"]["mb_per_s"])
    print(f"| gain of the log device | **{gain:.2f}×** | | target ≥ 7.6× (seed 003: ~8 → ~61 MB/s) |")

print()
print("| target | result |")
print("|---|---|")
for c in cairns:
    for row in ("sync-1", "sync-16"):
        a, b = value.get((row, c)), value.get((row, "ganesha-ext4"))
        if a and b:
            print(f"| {c} ahead of ganesha-ext4 on {row} | {a / b:.2f}× ({'met' if a > b else 'not met'}) |")
    for n, row in ((1, "sync-1"), (16, "sync-16")):
        nbd, nfs = read(f"nbd-{n}.{c}"), read(f"{row}.{c}")
        if nbd and nfs:
            r = float(nbd["iops"]) / float(nfs["ops_per_s"])
            print(f"| {c}: NBD FUA within 1.2× of NFS FILE_SYNC, {row} | {r:.2f}× "
                  f"({'met' if r <= 1.2 else 'not met'}) |")
if all(seed.values()):
    print(f"| seed: log device gain ≥ 7.6× | {gain:.2f}× ({'met' if gain >= 7.6 else 'not met'}) |")

print()
print(f"{'QUICK SMOKE RUN (--quick): figures meaningless. ' if quick == '1' else ''}"
      f"nfs-load over TCP loopback, one connection and one call in flight per job, AUTH_SYS "
      f"uid 1000; {runtime} s measured per row after a {ramp} s ramp (read-uncached: none, from "
      f"cold); files of {int(file_bytes) >> 20} MiB; cairn filesystems recordsize={recordsize}, "
      f"volumes volblocksize=8K; nbd-load over TCP on loopback too. Load average (1/5/15 min) before "
      f"the rows: {load_before}, after: {load_after}. Whole script: {elapsed} s.")
EOF
