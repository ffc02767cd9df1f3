#!/usr/bin/env bash
# bench/send.sh: send and receive against peers in the same run (issue 36).
#
#   bench/send.sh [--quick] [--volsize SIZE] [--block-size SIZE] [--model MODEL]
#                 [--systems cairn,cairn-file,zfs-fuse,btrfs] [--dir DIR]
#
# Systems, one after another, each on devices whose backing files live on tmpfs (/dev/shm):
#   cairn     pool `tank` on one emulated SSD (`emu:MODEL:FILE`, default ssd-sata: the model,
#             not this machine, sets its timing) with volume tank/vol of VOLSIZE
#             (volblocksize=BLOCK); the receiving pool `backup` on another emulated SSD of the
#             same model. The volume is written, and later 1 % rewritten, through `cairn serve`
#             and fio's nbd engine (cairn has no in-process writer); send and receive are
#             measured IN PROCESS: the server is stopped first and `cairn send` / `cairn
#             receive` open the pool themselves (send through a running server is not merged
#             yet). Each send is a fresh process, so its ARC starts empty.
#   cairn-file the same on pools of one plain file each on the same tmpfs as the peers' (no
#             device model): the row that compares like with like, RAM against RAM.
#   zfs-fuse  zfs-fuse 0.7 (Debian; pool version 23), pools on plain files. It has no zvols
#             (`zfs create -V` aborts), so the "volume" is a file of VOLSIZE in a filesystem
#             with recordsize=BLOCK (the same unit as cairn's volblocksize, so "1 % of the
#             blocks" is the same bytes on both); `zfs send | zfs receive`. The pool is
#             exported and imported before each read or send (its ARC starts empty).
#   btrfs     btrfs on loop devices over files; the volume is a file in subvolume `vol`,
#             snapshots are read-only snapshots of it; `btrfs send | btrfs receive`. Unmounted
#             and mounted again before each read or send (its page cache starts empty).
# The peers' files on tmpfs make their devices RAM: faster than cairn's emulated SSD.
#
# Measured, per system (every figure is wall time around the command, bytes over seconds):
#   seq read   the volume read once in order, 1 MiB requests (cairn: fio nbd, QD8, through a
#              freshly started server; peers: fio on the file, O_DIRECT on btrfs)
#   full send  `send VOL@a > /dev/null`; the stream's size comes from a second send to a file
#              on tmpfs (kept for the receive). Target: ≥ 0.8 × seq read.
#   seq write  a fresh receiving pool, a new volume (file) of VOLSIZE written once in order,
#              1 MiB requests, flushed at the end (fio end_fsync); then that pool is destroyed
#   receive    the stream from its tmpfs file into another fresh receiving pool, to durable
#              (cairn: the command's exit, which syncs and closes the pool; zfs: `zfs receive`
#              exits after its txg; btrfs: `btrfs receive` then `btrfs filesystem sync`).
#              Target: ≥ 0.7 × seq write.
#   incr send  1 % of the volume's BLOCK blocks rewritten at random (fio randwrite, no
#              block twice, bs=BLOCK), snapshot @b, `send -i @a VOL@b > /dev/null` timed
#              against the full send. Target: ≤ 3 % of the full send's time.
# The source pool is destroyed before the receive (and the stream file after it), so at most
# about twice VOLSIZE sits on tmpfs at any time; the script checks MemAvailable first. cairn's
# in-process send keeps what it reads in its ARC (default: half the usable memory; measured:
# RSS ~ the volume's size at 512 MiB and 1.5 GiB), so during the full run the ARC's pressure
# monitor must shrink it as tmpfs fills: the report prints cairn's peak RSS per command.
#
# Full run (the one for BENCHMARKS.md): `bench/send.sh` (VOLSIZE 8 GiB, BLOCK 16K); expect
# ~15 min on 2 cores (the --quick rates scaled: cairn ~6 min, most of it its two full sends
# at ~100 MB/s; zfs-fuse ~4, btrfs ~3). --quick: a smoke run with a 512 MiB volume (~1 min).
# Prints markdown tables: per measure cairn, zfs-fuse, btrfs and cairn's ratio to each peer
# (rates: cairn over peer, higher is better; times: peer over cairn, × faster), then the
# targets. Needs root (loop devices, mounts), fio, zfs-fuse and btrfs-progs; it checks for
# them and names the Debian packages when one is missing:
#   apt-get update && apt-get install -y zfs-fuse btrfs-progs fio
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DIR=$ROOT/target/bench-send
QUICK=0
VOLSIZE=
BLOCK=16K
MODEL=ssd-sata
SYSTEMS=(cairn cairn-file zfs-fuse btrfs)
while [[ $# -gt 0 ]]; do
    case $1 in
        --quick) QUICK=1; shift ;;
        --volsize) VOLSIZE=$2; shift 2 ;;
        --block-size) BLOCK=$2; shift 2 ;;
        --model) MODEL=$2; shift 2 ;;
        --systems) IFS=, read -r -a SYSTEMS <<<"$2"; shift 2 ;;
        --dir) DIR=$2; shift 2 ;;
        -h|--help) sed -n '2,53p' "$0"; exit 0 ;;
        *) echo "unknown argument: $1" >&2; exit 2 ;;
    esac
done
if [[ $QUICK == 1 ]]; then VOLSIZE=${VOLSIZE:-512M}; else VOLSIZE=${VOLSIZE:-8G}; fi
to_kib() { # SIZE with an optional K/M/G suffix, in KiB
    local n=${1%[KkMmGg]}
    case ${1: -1} in [Gg]) echo $((n << 20)) ;; [Mm]) echo $((n << 10)) ;; [Kk]) echo "$n" ;; *) echo $((n >> 10)) ;; esac
}
VOL_KIB=$(to_kib "$VOLSIZE")
VOL_MIB=$((VOL_KIB >> 10))
VOL_BYTES=$((VOL_KIB << 10))
BLOCK_KIB=$(to_kib "$BLOCK")
# 1 % of the volume's blocks, in KiB (whole blocks).
CHANGE_KIB=$((VOL_KIB / BLOCK_KIB / 100 * BLOCK_KIB))
# Room for the volume, its 1 % rewrite and metadata.
POOL_MIB=$((VOL_MIB + VOL_MIB / 10 + 1024))

missing=()
for tool in cargo fio losetup mkfs.btrfs btrfs zfs-fuse zpool zfs bc; do
    command -v "$tool" >/dev/null || missing+=("$tool")
done
if ((${#missing[@]})); then
    echo "missing: ${missing[*]}; apt-get update && apt-get install -y zfs-fuse btrfs-progs fio bc" >&2
    exit 1
fi
[[ $(id -u) == 0 ]] || { echo "needs root (loop devices, mounts)" >&2; exit 1; }
if [[ " ${SYSTEMS[*]} " == *" zfs-fuse "* ]] && pgrep -x zfs-fuse >/dev/null; then
    echo "a zfs-fuse daemon already runs (another benchmark?): one per machine; wait for it" >&2
    exit 1
fi
AVAIL_MIB=$(awk '/MemAvailable/ {print int($2 / 1024)}' /proc/meminfo)
# At most the source pool and the stream, or the stream and the receiving pool, at once.
NEED_MIB=$((2 * VOL_MIB + VOL_MIB / 5 + 2048))
if ((AVAIL_MIB < NEED_MIB)); then
    echo "needs $NEED_MIB MiB of memory for tmpfs backing files, $AVAIL_MIB available: try a smaller --volsize" >&2
    exit 1
fi

# shellcheck source=lib.sh
source "$ROOT/bench/lib.sh"
build_release
rm -rf "$DIR"
mkdir -p "$DIR/results"
DIR=$(cd "$DIR" && pwd)
RES=$DIR/results
# One per run (the PID): two runs on one machine must not clear each other's backing files.
EMU=/dev/shm/cairn-bench-send.$$
STATE=$DIR/cairn-state
ZMNT=$DIR/zfs-mnt
BMNT=$DIR/btrfs-mnt
B2MNT=$DIR/btrfs-recv
STREAM=$EMU/stream
LOOP=
LOOP2=
ZFS_UP=0
rm -rf "$EMU"
mkdir -p "$EMU" "$BMNT" "$B2MNT"
c() { "$CAIRN" --state-dir "$STATE" "$@"; }
now() { date +%s.%N; }

cleanup() {
    if [[ $ZFS_UP == 1 ]]; then
        # A pool left in zfs-fuse's cache would be imported, its file gone, by the next daemon.
        zpool destroy -f zsrc 2>/dev/null || true
        zpool destroy -f zrecv 2>/dev/null || true
    fi
    umount "$BMNT" 2>/dev/null || true
    umount "$B2MNT" 2>/dev/null || true
    [[ -n $LOOP ]] && losetup -d "$LOOP" 2>/dev/null
    [[ -n $LOOP2 ]] && losetup -d "$LOOP2" 2>/dev/null
    stop_servers
    PID=()
    ZFS_UP=0 LOOP= LOOP2=
    rm -rf "${EMU:?}"/*
}
trap 'cleanup; rm -rf "$EMU"' EXIT

# record SYSTEM KEY VALUE: one result, read back by the report.
record() { echo "$3" >"$RES/$1.$2"; }
value() { cat "$RES/$1.$2" 2>/dev/null || echo -; }
# timed SYSTEM KEY COMMAND...: runs COMMAND, records its wall time in seconds.
timed() {
    local s=$1 k=$2 start end
    shift 2
    start=$(now)
    "$@"
    end=$(now)
    record "$s" "$k" "$(echo "$end - $start" | bc)"
}

# wait_for_socket, start_cairn_server, stop_cairn_server: bench/lib.sh.
uri() { echo "nbd+unix:///$1?socket=$STATE/nbd.sock"; }

# fio_nbd NAME URI ARGS...: fio's nbd engine, 1 MiB requests at QD8 unless ARGS say otherwise.
fio_nbd() {
    local name=$1 target=$2
    shift 2
    fio --name="$name" --ioengine=nbd --uri="$target" --bs=1M --iodepth=8 "$@" \
        --output="$RES/$name.fio.txt"
}
# fio_file NAME FILE ARGS...: fio with psync on a file of VOLSIZE.
fio_file() {
    local name=$1 file=$2
    shift 2
    fio --name="$name" --filename="$file" --size="${VOL_MIB}M" --ioengine=psync --bs=1M "$@" \
        --output="$RES/$name.fio.txt"
}
# The 1 % rewrite, the same on every system: distinct random BLOCK blocks, fixed seed.
CHANGE_ARGS=(--rw=randwrite --bs="${BLOCK_KIB}k" --io_size="${CHANGE_KIB}k" --randseed=2)

# The measures common to every system, in order. The hooks are functions per system:
# S_fill, S_seq_read, S_send (ARGS: to stdout), S_change, S_drop_source, S_seq_write,
# S_receive (stdin), S_cold (before a read or send).
run_system() {
    local s=$1 f=${1//-/_}
    log "$s: writing $VOLSIZE"
    "${f}_fill"
    "${f}_cold"
    log "$s: sequential read"
    timed "$s" seq_read_s "${f}_seq_read"
    "${f}_cold"
    log "$s: full send to /dev/null"
    timed "$s" full_send_s "${f}_send" full >/dev/null
    "${f}_send" full >"$STREAM"
    record "$s" stream_bytes "$(stat -c %s "$STREAM")"
    log "$s: rewriting 1 % ($CHANGE_KIB KiB in ${BLOCK} blocks), snapshot @b"
    "${f}_change"
    "${f}_cold"
    log "$s: incremental send to /dev/null"
    timed "$s" incr_send_s "${f}_send" incr >/dev/null
    "${f}_send" incr | wc -c >"$RES/$s.incr_stream_bytes"
    "${f}_drop_source"
    log "$s: sequential write on a fresh pool"
    timed "$s" seq_write_s "${f}_seq_write"
    log "$s: receive from tmpfs"
    timed "$s" receive_s "${f}_receive" <"$STREAM"
    rm -f "$STREAM"
    cleanup
}

# cairn and cairn-file: the same hooks, the device spec and result names from these two.
CAIRN_SYS=cairn
CAIRN_DEV="emu:$MODEL:"
cairn_fill() {
    rm -rf "$STATE"
    c pool create --size "${POOL_MIB}M" tank "$CAIRN_DEV$EMU/src.img" >"$DIR/setup.log"
    c create -V "${VOL_MIB}M" -o volblocksize="$BLOCK" tank/vol >>"$DIR/setup.log"
    start_cairn_server
    fio_nbd $CAIRN_SYS.fill "$(uri tank/vol)" --rw=write --refill_buffers=1 --randseed=1
    c snapshot tank/vol@a
    stop_cairn_server
}
cairn_cold() { :; } # every send is a new process; the read starts a new server
cairn_seq_read() {
    start_cairn_server
    fio_nbd $CAIRN_SYS.seq-read "$(uri tank/vol)" --rw=read
    stop_cairn_server
}
# rss_of NAME COMMAND...: COMMAND, its peak RSS (KiB) into cairn.rss_NAME.
rss_of() {
    local name=$1
    shift
    /usr/bin/time -f %M -o "$RES/$CAIRN_SYS.rss_$name" "$@"
}
cairn_send() {
    if [[ $1 == full ]]; then
        rss_of full_send "$CAIRN" --state-dir "$STATE" send tank/vol@a
    else
        rss_of incr_send "$CAIRN" --state-dir "$STATE" send -i @a tank/vol@b
    fi
}
cairn_change() {
    start_cairn_server
    fio_nbd $CAIRN_SYS.change "$(uri tank/vol)" "${CHANGE_ARGS[@]}" --refill_buffers=1
    c snapshot tank/vol@b
    stop_cairn_server
}
cairn_drop_source() {
    c pool destroy tank >>"$DIR/setup.log"
    rm -f "$EMU/src.img"
}
cairn_seq_write() {
    c pool create --size "${POOL_MIB}M" backup "$CAIRN_DEV$EMU/recv.img" >>"$DIR/setup.log"
    c create -V "${VOL_MIB}M" -o volblocksize="$BLOCK" backup/w >>"$DIR/setup.log"
    start_cairn_server
    fio_nbd $CAIRN_SYS.seq-write "$(uri backup/w)" --rw=write --refill_buffers=1 --end_fsync=1
    stop_cairn_server
    c pool destroy backup >>"$DIR/setup.log"
    rm -f "$EMU/recv.img"
    c pool create --size "${POOL_MIB}M" backup "$CAIRN_DEV$EMU/recv.img" >>"$DIR/setup.log"
}
cairn_receive() { rss_of receive "$CAIRN" --state-dir "$STATE" receive backup/vol; }
# cairn-file: every hook of cairn, on plain files.
for hook in fill cold seq_read send change drop_source seq_write receive; do
    eval "cairn_file_$hook() { CAIRN_SYS=cairn-file CAIRN_DEV= cairn_$hook \"\$@\"; }"
done

# zfs-fuse.
zfs_fuse_fill() {
    truncate -s "${POOL_MIB}M" "$EMU/src.img"
    zfs-fuse --no-daemon >"$DIR/zfs-fuse.log" 2>&1 &
    PID[zfs-fuse]=$!
    sleep 2
    # Pools of these names an earlier, cut run left in zfs-fuse's cache ("pool already exists").
    zpool destroy -f zsrc 2>/dev/null || true
    zpool destroy -f zrecv 2>/dev/null || true
    zpool create -f -m "$ZMNT" zsrc "$EMU/src.img"
    ZFS_UP=1
    zfs create -o recordsize="$BLOCK" zsrc/vol
    fio_file zfs-fuse.fill "$ZMNT/vol/vol.img" --rw=write --refill_buffers=1 --randseed=1 \
        --end_fsync=1
    zfs snapshot zsrc/vol@a
}
zfs_fuse_cold() {
    zpool export zsrc
    zpool import -d "$EMU" zsrc
}
zfs_fuse_seq_read() { fio_file zfs-fuse.seq-read "$ZMNT/vol/vol.img" --rw=read; }
zfs_fuse_send() {
    if [[ $1 == full ]]; then zfs send zsrc/vol@a; else zfs send -i @a zsrc/vol@b; fi
}
zfs_fuse_change() {
    fio_file zfs-fuse.change "$ZMNT/vol/vol.img" "${CHANGE_ARGS[@]}" --refill_buffers=1 \
        --end_fsync=1
    zfs snapshot zsrc/vol@b
}
# zpool_gone POOL: destroyed (zfs-fuse may say "pool is busy" just after a send: retried).
zpool_gone() {
    local i
    for i in $(seq 1 20); do
        zpool destroy -f "$1" 2>/dev/null && return 0
        sleep 0.5
    done
    zpool destroy -f "$1"
}
zfs_fuse_drop_source() {
    zpool_gone zsrc
    rm -f "$EMU/src.img"
}
zfs_fuse_seq_write() {
    truncate -s "${POOL_MIB}M" "$EMU/recv.img"
    zpool create -f -m "$DIR/zfs-recv" zrecv "$EMU/recv.img"
    zfs create -o recordsize="$BLOCK" zrecv/w
    fio_file zfs-fuse.seq-write "$DIR/zfs-recv/w/w.img" --rw=write --refill_buffers=1 \
        --end_fsync=1
    zpool_gone zrecv
    rm -f "$EMU/recv.img"
    truncate -s "${POOL_MIB}M" "$EMU/recv.img"
    zpool create -f -m "$DIR/zfs-recv" zrecv "$EMU/recv.img"
}
zfs_fuse_receive() { zfs receive zrecv/vol; }

# btrfs.
btrfs_fill() {
    truncate -s "${POOL_MIB}M" "$EMU/src.img"
    LOOP=$(losetup --find --show "$EMU/src.img")
    mkfs.btrfs -q -f "$LOOP" >/dev/null 2>&1
    mount "$LOOP" "$BMNT"
    btrfs subvolume create "$BMNT/vol" >/dev/null
    mkdir "$BMNT/snaps"
    fio_file btrfs.fill "$BMNT/vol/vol.img" --rw=write --refill_buffers=1 --randseed=1 \
        --end_fsync=1
    btrfs subvolume snapshot -r "$BMNT/vol" "$BMNT/snaps/a" >/dev/null
}
btrfs_cold() {
    umount "$BMNT"
    mount "$LOOP" "$BMNT"
}
btrfs_seq_read() { fio_file btrfs.seq-read "$BMNT/vol/vol.img" --rw=read --direct=1; }
btrfs_send() {
    if [[ $1 == full ]]; then
        btrfs -q send "$BMNT/snaps/a"
    else
        btrfs -q send -p "$BMNT/snaps/a" "$BMNT/snaps/b"
    fi
}
btrfs_change() {
    fio_file btrfs.change "$BMNT/vol/vol.img" "${CHANGE_ARGS[@]}" --refill_buffers=1 \
        --end_fsync=1
    btrfs subvolume snapshot -r "$BMNT/vol" "$BMNT/snaps/b" >/dev/null
}
btrfs_drop_source() {
    umount "$BMNT"
    losetup -d "$LOOP"
    LOOP=
    rm -f "$EMU/src.img"
}
btrfs_fresh_recv() {
    truncate -s "${POOL_MIB}M" "$EMU/recv.img"
    LOOP2=$(losetup --find --show "$EMU/recv.img")
    mkfs.btrfs -q -f "$LOOP2" >/dev/null 2>&1
    mount "$LOOP2" "$B2MNT"
}
btrfs_seq_write() {
    btrfs_fresh_recv
    fio_file btrfs.seq-write "$B2MNT/w.img" --rw=write --refill_buffers=1 --direct=1 \
        --end_fsync=1
    umount "$B2MNT"
    losetup -d "$LOOP2"
    LOOP2=
    rm -f "$EMU/recv.img"
    btrfs_fresh_recv
}
btrfs_receive() {
    btrfs -q receive "$B2MNT"
    btrfs filesystem sync "$B2MNT"
}

LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
for s in "${SYSTEMS[@]}"; do
    run_system "$s"
done
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)
log "done"

# Report: rates in MB/s (10^6 bytes), ratios to two decimals.
div() { # A B: A / B, or - when either is missing or B is 0
    if [[ $1 == - || $2 == - ]] || [[ $(echo "$2 == 0" | bc) == 1 ]]; then echo -; else echo "scale=6; $1 / $2" | bc; fi
}
fmt() { if [[ $1 == - ]]; then echo -; else printf "%.${2:-2}f" "$1"; fi; }
rate() { div "$(div "$1" "$2")" 1000000; } # BYTES SECONDS → MB/s
derive() {
    local s=$1 bytes
    bytes=$(value "$s" stream_bytes)
    record "$s" seq_read_mbs "$(rate "$VOL_BYTES" "$(value "$s" seq_read_s)")"
    record "$s" seq_write_mbs "$(rate "$VOL_BYTES" "$(value "$s" seq_write_s)")"
    record "$s" full_send_mbs "$(rate "$bytes" "$(value "$s" full_send_s)")"
    record "$s" receive_mbs "$(rate "$bytes" "$(value "$s" receive_s)")"
    record "$s" send_vs_read "$(div "$(value "$s" full_send_mbs)" "$(value "$s" seq_read_mbs)")"
    record "$s" receive_vs_write "$(div "$(value "$s" receive_mbs)" "$(value "$s" seq_write_mbs)")"
    record "$s" incr_vs_full "$(div "$(value "$s" incr_send_s)" "$(value "$s" full_send_s)")"
}
for s in cairn cairn-file zfs-fuse btrfs; do derive "$s"; done
# The peers run on tmpfs files; so does cairn-file: it is the one compared with them.
# row LABEL KEY DIGITS HIGHER_IS_BETTER: one line of a table, with cairn-file's ratio to each peer.
row() {
    local label=$1 key=$2 digits=$3 higher=$4 cv fv zv bv rz rb
    cv=$(value cairn "$key") fv=$(value cairn-file "$key") zv=$(value zfs-fuse "$key") bv=$(value btrfs "$key")
    if [[ $higher == 1 ]]; then rz=$(div "$fv" "$zv") rb=$(div "$fv" "$bv"); else rz=$(div "$zv" "$fv") rb=$(div "$bv" "$fv"); fi
    echo "| $label | $(fmt "$cv" "$digits") | $(fmt "$fv" "$digits") | $(fmt "$zv" "$digits") | $(fmt "$bv" "$digits") | $(fmt "$rz")× | $(fmt "$rb")× |"
}
header() {
    echo
    echo "$1"
    echo
    echo "| | cairn (emu:$MODEL) | cairn-file | zfs-fuse | btrfs | cairn-file vs zfs-fuse | cairn-file vs btrfs |"
    echo "|---|---:|---:|---:|---:|---:|---:|"
}
echo
echo "Send and receive: $VOLSIZE volume, $BLOCK blocks; cairn on emu:$MODEL (tmpfs backing) and on plain tmpfs files (cairn-file), in process (no server); peers on tmpfs files."
echo "Ratios: cairn-file against each peer (both on RAM); rates cairn-file/peer, times and stream bytes peer/cairn-file (above 1: cairn ahead)."
header "Full send (\`send VOL@a > /dev/null\`)"
row "stream bytes" stream_bytes 0 0
row "seconds" full_send_s 2 0
row "send MB/s" full_send_mbs 0 1
row "seq read MB/s (own pool)" seq_read_mbs 0 1
row "send / seq read" send_vs_read 2 1
header "Receive (stream from a tmpfs file into a fresh pool, to durable)"
row "seconds" receive_s 2 0
row "receive MB/s" receive_mbs 0 1
row "seq write MB/s (own fresh pool)" seq_write_mbs 0 1
row "receive / seq write" receive_vs_write 2 1
header "Incremental send (1 % of the blocks rewritten, \`send -i @a VOL@b > /dev/null\`)"
row "stream bytes" incr_stream_bytes 0 0
row "seconds" incr_send_s 3 0
row "incremental / full time" incr_vs_full 4 0
echo
echo "Targets"
echo
echo "| target | cairn (emu:$MODEL) | cairn-file | met (both) |"
echo "|---|---:|---:|---|"
met() { if [[ $1 == - ]]; then echo -; elif [[ $(echo "$1" | bc) == 1 ]]; then echo yes; else echo no; fi; }
cond() { if [[ $1 == - || $3 == - ]]; then echo -; else echo "$1 $2 $3"; fi; }
both() { local a b; a=$(met "$1") b=$(met "$2"); if [[ $a == yes && $b == yes ]]; then echo yes; elif [[ $a == - && $b == - ]]; then echo -; else echo "no ($a, $b)"; fi; }
target() { # LABEL KEY OP LIMIT SCALE
    local v w
    v=$(value cairn "$2") w=$(value cairn-file "$2")
    echo "| $1 | $(fmt "$(div "$v" "$5")" 2) | $(fmt "$(div "$w" "$5")" 2) | $(both "$(cond "$v" "$3" "$4")" "$(cond "$w" "$3" "$4")") |"
}
target "full send ≥ 0.8 × seq read" send_vs_read '>=' 0.8 1
target "receive ≥ 0.7 × seq write" receive_vs_write '>=' 0.7 1
target "incremental ≤ 3 % of full send time (%)" incr_vs_full '<=' 0.03 0.01
echo
echo "| cairn-file ahead of the peers (both on tmpfs) | ratio | met |"
echo "|---|---:|---|"
for key in full_send_mbs:1 receive_mbs:1 incr_send_s:0; do
    k=${key%:*} higher=${key#*:}
    for p in zfs-fuse btrfs; do
        if [[ $higher == 1 ]]; then r=$(div "$(value cairn-file "$k")" "$(value "$p" "$k")"); else r=$(div "$(value "$p" "$k")" "$(value cairn-file "$k")"); fi
        echo "| $k: ahead of $p | $(fmt "$r")× | $(met "$(cond "$r" '>' 1)") |"
    done
done
echo
kib_to_mib() { if [[ $1 == - ]]; then echo -; else echo $(($1 >> 10)); fi; }
for s in cairn cairn-file; do
    echo "$s's peak RSS (MiB): full send $(kib_to_mib "$(value "$s" rss_full_send)"), incremental send $(kib_to_mib "$(value "$s" rss_incr_send)"), receive $(kib_to_mib "$(value "$s" rss_receive)")."
done
echo "send: ${SYSTEMS[*]}; load average before $LOAD_BEFORE, after $LOAD_AFTER; $(nproc) cores; $(($(date +%s) - START)) s in all. Raw figures: $RES"
