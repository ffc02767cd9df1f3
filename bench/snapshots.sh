#!/usr/bin/env bash
# bench/snapshots.sh: snapshots against peers in the same run (issue 34).
#
#   bench/snapshots.sh [--snapshots N] [--snapshots-of SYSTEM=N]... [--quick] [--model MODEL]
#                      [--systems cairn,zfs-fuse,btrfs] [--diff-size SIZE] [--baseline-seconds S]
#                      [--no-diff | --diff-only] [--dir DIR]
#
# --snapshots-of SYSTEM=N takes N snapshots on that system instead (a peer too slow for 10,000
# in the time a run may take); its list points are then 1,000 (or N/10) and N. --no-diff leaves
# out the diff part, --diff-only runs nothing else.
#
# Systems, each on one device whose backing file lives on tmpfs (/dev/shm), one after another:
#   cairn     a pool on one emulated SSD (`emu:MODEL:FILE`, default ssd-sata: the model, not this
#             machine's disk, sets its timing), volume tank/vol (1 GiB, volblocksize=8K) served
#             by `cairn serve`; every command below goes through the CLI to the server's socket
#   zfs-fuse  zfs-fuse 0.7 (Debian; pool version 23) on a 4 GiB plain file; it has no zvols
#             (`zfs create -V` aborts: "Function not implemented"), so the "volume" is a 1 GiB
#             file in a filesystem (recordsize=8K)
#   btrfs     btrfs on a loop device over a 4 GiB file; the volume is a 1 GiB file in a
#             subvolume, snapshots are read-only snapshots of that subvolume
# The peers' files on tmpfs make their devices RAM: faster than cairn's emulated SSD.
#
# Measured, per system:
#   create    N snapshots of the volume, each after a 4 KiB write of random bytes at a random
#             offset (cairn: through NBD with libnbd; peers: pwrite on the file). Every
#             snapshot command (`cairn snapshot tank/vol@sI`, `zfs snapshot`, `btrfs subvolume
#             snapshot -r`) is timed from spawn to exit: p50, p99, max. A no-op command of each
#             tool (cairn/zfs list of the volume, btrfs subvolume show), run 20 times first,
#             gives the floor any command pays (spawn, one round trip to the daemon). For cairn
#             the txgs synced over the loop are counted (`pool txgs`).
#   list      after snapshot 1,000 (N/10 when N ≤ 1,000) and after snapshot N, the list command
#             three times (best kept): `cairn list -t snapshot -H -p`, `zfs list -t snapshot`,
#             `btrfs subvolume list`
#   destroy   all N while fio writes 8 KiB at random, QD1, no flushes (cairn: fio's nbd engine
#             on the served volume; peers: psync on the file): BASELINE (15 s) of fio alone,
#             then the destroy (cairn: one `cairn destroy tank/vol@s1%sN`, freed in the
#             background until `pool get freeing` is 0; zfs-fuse: one `zfs destroy` per
#             snapshot, its version has no ranges; btrfs: `btrfs subvolume delete` of all,
#             1,000 paths per command, then `btrfs subvolume sync` until the cleaner is done),
#             then 3 s more. fio's per-second IOPS before and during the destroy; space used
#             before and after (cairn: pool ALLOC; zfs: used; btrfs: filesystem usage Used)
#             over the time to free it; cairn: every txg's sync time (`pool txgs`, sampled
#             every ~0.25 s) against the 500 ms sync target, and `pool get freeing` over time
#   diff      cairn only (the peers have no equivalent): `cairn diff --blocks -H -p` between a
#             snapshot of a DIFF-SIZE (4 GiB) volume written in full and one after 1% of its
#             16K blocks were rewritten at random, and after all of it was rewritten; also 1%
#             rewritten as one run of blocks (`1%-run`); first with a freshly started server
#             (empty ARC), then twice warm. A pool of its own on the same emulated model; its
#             backing file goes on tmpfs when memory allows (twice DIFF-SIZE + 6 GiB
#             available), else under DIR (the page cache holds it)
#
# The run in BENCHMARKS.md ("Snapshots against zfs-fuse and btrfs"), ~22 min on 2 cores:
#   bench/snapshots.sh --snapshots-of zfs-fuse=3000 --snapshots-of btrfs=3000
#
# --quick: a smoke run (N=100 unless --snapshots is given, 256 MiB diff volume, 5 s baseline).
# Prints markdown tables; ratios are peer time over cairn time (× faster) or cairn over peer
# rates. Needs root (loop devices, mounts), fio, libnbd's Python module, zfs-fuse and
# btrfs-progs; it checks for them and names the Debian packages when one is missing:
#   apt-get update && apt-get install -y zfs-fuse btrfs-progs fio python3-libnbd
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DIR=$ROOT/target/bench-snapshots
N=
declare -A N_OF
QUICK=0
MODEL=ssd-sata
SYSTEMS=(cairn zfs-fuse btrfs)
DIFF_SIZE=
BASELINE_S=
PARTS=both
while [[ $# -gt 0 ]]; do
    case $1 in
        --snapshots) N=$2; shift 2 ;;
        --snapshots-of) N_OF[${2%%=*}]=${2#*=}; shift 2 ;;
        --quick) QUICK=1; shift ;;
        --model) MODEL=$2; shift 2 ;;
        --systems) IFS=, read -r -a SYSTEMS <<<"$2"; shift 2 ;;
        --diff-size) DIFF_SIZE=$2; shift 2 ;;
        --baseline-seconds) BASELINE_S=$2; shift 2 ;;
        --dir) DIR=$2; shift 2 ;;
        --no-diff) PARTS=snapshots; shift ;;
        --diff-only) PARTS=diff; shift ;;
        -h|--help) sed -n '2,59p' "$0"; exit 0 ;;
        *) echo "unknown argument: $1" >&2; exit 2 ;;
    esac
done
[[ $PARTS == diff ]] && SYSTEMS=()
if [[ $QUICK == 1 ]]; then
    N=${N:-100} DIFF_SIZE=${DIFF_SIZE:-256M} BASELINE_S=${BASELINE_S:-5}
else
    N=${N:-10000} DIFF_SIZE=${DIFF_SIZE:-4G} BASELINE_S=${BASELINE_S:-15}
fi
n_of() { echo "${N_OF[$1]:-$N}"; } # SYSTEM: how many snapshots it takes
list_at() { # COUNT: the first point the list is timed at
    if (($1 > 1000)); then echo 1000; else echo $((($1 + 9) / 10)); fi
}
to_mib() { # SIZE with an optional K/M/G suffix, in MiB
    local n=${1%[KkMmGg]}
    case ${1: -1} in [Gg]) echo $((n * 1024)) ;; [Mm]) echo "$n" ;; [Kk]) echo $((n / 1024)) ;; *) echo $((n >> 20)) ;; esac
}
DIFF_MIB=$(to_mib "$DIFF_SIZE")
VOL_MIB=1024
POOL_MIB=$((VOL_MIB + 2 * DIFF_MIB + 4096)) # the volume, the diff volume twice, room for metadata
PEER_MIB=4096
PY=/usr/bin/python3 # Debian's, where python3-libnbd installs its module

missing=()
for tool in cargo fio losetup mkfs.btrfs btrfs zfs-fuse zpool zfs timeout; do
    command -v "$tool" >/dev/null || missing+=("$tool")
done
"$PY" -c 'import nbd' 2>/dev/null || missing+=("python3-libnbd")
if ((${#missing[@]})); then
    echo "missing: ${missing[*]}; apt-get update && apt-get install -y zfs-fuse btrfs-progs fio python3-libnbd" >&2
    exit 1
fi
[[ $(id -u) == 0 ]] || { echo "needs root (loop devices, mounts)" >&2; exit 1; }
if [[ " ${SYSTEMS[*]} " == *" zfs-fuse "* ]] && pgrep -x zfs-fuse >/dev/null; then
    echo "a zfs-fuse daemon already runs (another benchmark?): one per machine; wait for it" >&2
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
EMU=/dev/shm/cairn-bench-snapshots.$$
STATE=$DIR/cairn-state
ZMNT=$DIR/zfs-mnt
BMNT=$DIR/btrfs-mnt
LOOP=
FIO_PID=
SAMPLER_PID=
ZFS_UP=0
rm -rf "$EMU"
mkdir -p "$EMU" "$BMNT"
c() { "$CAIRN" --state-dir "$STATE" "$@"; }
now() { date +%s.%N; }

cleanup() {
    [[ -n $FIO_PID ]] && kill -INT "$FIO_PID" 2>/dev/null && wait "$FIO_PID" 2>/dev/null
    [[ -n $SAMPLER_PID ]] && kill "$SAMPLER_PID" 2>/dev/null && wait "$SAMPLER_PID" 2>/dev/null
    # A pool left in zfs-fuse's cache would be imported, its file gone, by the next daemon.
    if [[ $ZFS_UP == 1 ]]; then
        zpool destroy -f zsnap 2>/dev/null || zpool export -f zsnap 2>/dev/null || true
    fi
    umount "$BMNT" 2>/dev/null || true
    [[ -n $LOOP ]] && losetup -d "$LOOP" 2>/dev/null
    stop_servers
    PID=()
    FIO_PID= SAMPLER_PID= ZFS_UP=0 LOOP=
    rm -rf "${EMU:?}"/*
    rm -f "$DIR/diff0.img"
}
trap 'cleanup; rm -rf "$EMU"' EXIT

# wait_for_socket, start_cairn_server, stop_cairn_server: bench/lib.sh.

uri() { echo "nbd+unix:///tank/$1?socket=$STATE/nbd.sock"; }
last_txg() { c pool txgs -H -p tank | tail -1 | cut -f1; }

# setup SYSTEM: a fresh pool or file system with the 1 GiB volume written in full; sets
# TARGET (the volume's URI or file) and the commands the loop runs.
setup() {
    case $1 in
        cairn)
            rm -rf "$STATE"
            c pool create --size "${POOL_MIB}M" tank "emu:$MODEL:$EMU/cairn0.img" >"$DIR/setup.log"
            c create -V "${VOL_MIB}M" -o volblocksize=8K tank/vol >>"$DIR/setup.log"
            start_cairn_server
            TARGET=$(uri vol)
            fio --name=layout --ioengine=nbd --uri="$TARGET" --rw=write --bs=1M --iodepth=8 \
                --output="$RES/cairn.layout.txt"
            c pool sync tank >/dev/null
            SNAP="$CAIRN --state-dir $STATE snapshot tank/vol@s{i}"
            LIST="$CAIRN --state-dir $STATE list -t snapshot -H -p"
            NOOP="$CAIRN --state-dir $STATE list -H -o name tank/vol"
            ;;
        zfs-fuse)
            truncate -s "${PEER_MIB}M" "$EMU/zfs.img"
            zfs-fuse --no-daemon >"$DIR/zfs-fuse.log" 2>&1 &
            PID[zfs-fuse]=$!
            sleep 2
            zpool create -f -m "$ZMNT" zsnap "$EMU/zfs.img"
            ZFS_UP=1
            zfs create -o recordsize=8K zsnap/vol
            TARGET=$ZMNT/vol/vol.img
            fio --name=layout --filename="$TARGET" --rw=write --bs=1M --size="${VOL_MIB}M" \
                --end_fsync=1 --output="$RES/zfs-fuse.layout.txt"
            SNAP="zfs snapshot zsnap/vol@s{i}"
            LIST="zfs list -t snapshot"
            NOOP="zfs list -H -o name zsnap/vol"
            ;;
        btrfs)
            truncate -s "${PEER_MIB}M" "$EMU/btrfs.img"
            LOOP=$(losetup --find --show "$EMU/btrfs.img")
            mkfs.btrfs -q -f "$LOOP" >/dev/null 2>&1
            mount "$LOOP" "$BMNT"
            btrfs subvolume create "$BMNT/vol" >/dev/null
            mkdir "$BMNT/snaps"
            TARGET=$BMNT/vol/vol.img
            fio --name=layout --filename="$TARGET" --rw=write --bs=1M --size="${VOL_MIB}M" \
                --end_fsync=1 --output="$RES/btrfs.layout.txt"
            SNAP="btrfs subvolume snapshot -r $BMNT/vol $BMNT/snaps/s{i}"
            LIST="btrfs subvolume list $BMNT"
            NOOP="btrfs subvolume show $BMNT/vol"
            ;;
    esac
}

used_bytes() { # SYSTEM
    case $1 in
        cairn) c pool list -H -p tank | cut -f3 ;;
        zfs-fuse) zfs get -H -p -o value used zsnap ;;
        btrfs) btrfs filesystem usage -b "$BMNT" 2>/dev/null | awk '$1 == "Used:" {print $2; exit}' ;;
    esac
}

# cairn's sampler: `pool get freeing` and ALLOC, and `pool txgs`, every ~0.25 s.
sample_cairn() {
    while true; do
        echo "$(now) $(c pool get -H -p tank | awk '$2 == "freeing" {print $3}') $(c pool list -H -p tank | cut -f3)" \
            >>"$RES/cairn.samples"
        c pool txgs -H -p tank >>"$RES/cairn.txgs"
        sleep 0.25
    done
}

destroy_all() { # SYSTEM
    case $1 in
        cairn) c destroy "tank/vol@s1%s$NS" ;;
        zfs-fuse) for i in $(seq 1 "$NS"); do zfs destroy "zsnap/vol@s$i"; done ;;
        btrfs) (cd "$BMNT/snaps" && ls -1 | xargs -n 1000 btrfs subvolume delete >/dev/null) ;;
    esac
}

wait_freed() { # SYSTEM
    case $1 in
        cairn)
            while [[ $(c pool get -H -p tank | awk '$2 == "freeing" {print $3}') != 0 ]]; do
                sleep 0.05
            done
            ;;
        zfs-fuse) ;; # pool version 23 frees within the destroy's own txg
        btrfs) btrfs subvolume sync "$BMNT" >/dev/null ;;
    esac
}

destroy_phase() { # SYSTEM
    local s=$1 env=$RES/$1.destroy.env fio_target
    if [[ $s == cairn ]]; then
        fio_target=(--ioengine=nbd --uri="$TARGET")
        sample_cairn &
        SAMPLER_PID=$!
    else
        fio_target=(--ioengine=psync --filename="$TARGET" --size="${VOL_MIB}M")
    fi
    fio --name=destroy "${fio_target[@]}" --rw=randwrite --bs=8k --iodepth=1 --norandommap=1 \
        --time_based=1 --runtime=7200 --write_iops_log="$RES/$s" --log_avg_msec=1000 \
        --log_unix_epoch=1 --output-format=json --output="$RES/$s.destroy-fio.json" \
        2>"$RES/$s.destroy-fio.stderr" &
    FIO_PID=$!
    echo "fio_start=$(now)" >"$env"
    sleep "$BASELINE_S"
    echo "used_before=$(used_bytes "$s")" >>"$env"
    [[ $s == cairn ]] && echo "txg_destroy_start=$(last_txg)" >>"$env"
    echo "destroy_start=$(now)" >>"$env"
    destroy_all "$s"
    echo "destroy_cmd_end=$(now)" >>"$env"
    timeout 3600 bash -c "$(declare -f wait_freed c); CAIRN=$CAIRN STATE=$STATE BMNT=$BMNT wait_freed $s"
    echo "destroy_end=$(now)" >>"$env"
    echo "used_after=$(used_bytes "$s")" >>"$env"
    [[ $s == cairn ]] && echo "txg_destroy_end=$(last_txg)" >>"$env"
    sleep 3
    kill -INT "$FIO_PID"
    wait "$FIO_PID" || true
    FIO_PID=
    if [[ -n $SAMPLER_PID ]]; then
        kill "$SAMPLER_PID"
        wait "$SAMPLER_PID" 2>/dev/null || true
        SAMPLER_PID=
    fi
}

# diff_phase: cairn diff --blocks after 1% and after 100% of a DIFF_SIZE volume changed, in a
# fresh pool of its own.
diff_phase() {
    local avail_mib big backing=$EMU
    avail_mib=$(awk '/MemAvailable/ {print int($2 / 1024)}' /proc/meminfo)
    # The device holds the volume twice (snapshot a, and the rewrite after it).
    if ((avail_mib < 2 * DIFF_MIB + 6144)); then
        backing=$DIR
        log "diff: only ${avail_mib} MiB of memory available: the device's backing file goes under $DIR"
    fi
    echo "backing=$backing avail_mib=$avail_mib" >"$RES/cairn.diff.env"
    rm -rf "$STATE"
    c pool create --size "$((2 * DIFF_MIB + 2048))M" tank "emu:$MODEL:$backing/diff0.img" \
        >>"$DIR/setup.log"
    c create -s -V "${DIFF_MIB}M" -o volblocksize=16K tank/big >>"$DIR/setup.log"
    start_cairn_server
    big=$(uri big)
    log "diff: writing ${DIFF_SIZE} in full, 1% of its blocks, all of it again, 1% in one run"
    fio --name=fill --ioengine=nbd --uri="$big" --rw=write --bs=1M --iodepth=8 --refill_buffers=1 \
        --randseed=1 --output="$RES/cairn.diff-fill1.txt"
    c snapshot tank/big@a
    fio --name=one-percent --ioengine=nbd --uri="$big" --rw=randwrite --bs=16k --iodepth=8 \
        --io_size="$((DIFF_MIB * 1024 / 100 / 16 * 16))k" --refill_buffers=1 --randseed=2 \
        --output="$RES/cairn.diff-1pct.txt"
    c snapshot tank/big@b
    fio --name=fill --ioengine=nbd --uri="$big" --rw=write --bs=1M --iodepth=8 --refill_buffers=1 \
        --randseed=3 --output="$RES/cairn.diff-fill2.txt"
    c snapshot tank/big@c
    # 1% again, in one run of blocks (the middle of the volume): what the walk costs when the
    # changes share their indirect blocks, rather than touching nearly every one as above.
    fio --name=one-percent-run --ioengine=nbd --uri="$big" --rw=write --bs=1M --iodepth=8 \
        --offset="$((DIFF_MIB / 2))M" --io_size="$((DIFF_MIB * 1024 / 100 / 16 * 16))k" \
        --refill_buffers=1 --randseed=4 --output="$RES/cairn.diff-1pct-run.txt"
    c snapshot tank/big@d
    c pool sync tank >/dev/null
    local label older newer run start end
    for label in 1% 1%-run 100%; do
        case $label in
            1%) older=a newer=b ;;
            1%-run) older=c newer=d ;;
            100%) older=a newer=c ;;
        esac
        stop_cairn_server
        start_cairn_server
        for run in cold warm warm; do
            start=$(now)
            c diff --blocks "tank/big@$older" "tank/big@$newer" -H -p >"$RES/cairn.diff.out"
            end=$(now)
            echo "$label $run $(echo "$end - $start" | bc) $(wc -l <"$RES/cairn.diff.out") $(awk '{s += $2} END {printf "%.0f", s}' "$RES/cairn.diff.out")" \
                >>"$RES/cairn.diff.txt"
        done
    done
}

LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
for s in "${SYSTEMS[@]}"; do
    log "$s: setting up"
    setup "$s"
    NS=$(n_of "$s")
    [[ $s == cairn ]] && echo "txg_before=$(last_txg)" >"$RES/cairn.create.env"
    log "$s: $NS snapshots, each after a 4 KiB write (list at $(list_at "$NS") and $NS)"
    "$PY" "$ROOT/bench/snapshots.py" create --system "$s" --out "$RES" --n "$NS" \
        --list-at "$(list_at "$NS")" --snap "$SNAP" --list "$LIST" --noop "$NOOP" --target "$TARGET" \
        --size $((VOL_MIB << 20))
    [[ $s == cairn ]] && echo "txg_after=$(last_txg)" >>"$RES/cairn.create.env"
    log "$s: destroying all $NS under fio"
    destroy_phase "$s"
    [[ $s == cairn ]] && { c stat snapshots >"$RES/cairn.stat-snapshots.txt" 2>&1 || true; }
    cleanup
    if [[ $s == cairn && $PARTS == both ]]; then
        log "cairn: diff --blocks"
        diff_phase
        cleanup
    fi
done
if [[ $PARTS == diff ]]; then
    log "cairn: diff --blocks"
    diff_phase
    cleanup
fi
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)
log "done"

echo
"$PY" "$ROOT/bench/snapshots.py" report --dir "$DIR" --systems "$(IFS=,; echo "${SYSTEMS[*]:-cairn}")"
echo
echo "snapshots: $(for s in "${SYSTEMS[@]}"; do printf '%s %s, ' "$s" "$(n_of "$s")"; done)cairn on emu:$MODEL (tmpfs), peers on tmpfs files; fio baseline ${BASELINE_S} s;" \
    "load average before $LOAD_BEFORE, after $LOAD_AFTER; $(nproc) cores; $(($(date +%s) - START)) s in all."
