#!/usr/bin/env bash
# Synchronous writes over NBD (issue 4): what the intent log and log devices buy, in one run.
#
#   bench/sync-write.sh [--dir DIR] [--runtime SECONDS] [--only ROW[,ROW...]]
#
# Every row starts a fresh `cairn serve` on a fresh pool in DIR (default target/bench-sync,
# wiped first), runs fio's nbd engine against volume tank/vol over a Unix socket, and stops the
# server. fio's nbd engine cannot set the FUA flag on a write, so each write is followed by an
# NBD FLUSH (fio fsync=1): for cairn that is the same intent-log commit a FUA write triggers
# (the write is logged, the flush commits it), and for qemu-nbd it is the fdatasync its
# writethrough mode does per write anyway. Emulated devices (`emu:MODEL:PATH`) keep real time:
# an hdd-7200 flush waits for the platter, an ssd-plp flush is nearly free.
#
# Rows (ids for --only):
#   hdd        hdd-7200 pool, no log device, 8 KiB random sync writes, QD1
#   hdd+slog   the same pool with an emulated ssd-plp log device, QD1
#   hdd-64     hdd-7200 pool, no log device, 64 writers (64 connections, QD1 each)
#   file       pool on a plain file of this machine's disk, QD1
#   raw        the raw rate: fio psync 8 KiB random write + fdatasync on a plain file, QD1
#   qemu-nbd   qemu-nbd --cache=writethrough serving a plain file, fio nbd with fsync=1, QD1
#   1m-hdd     1 MiB sync writes, hdd-7200 pool, no log device, QD1
#   1m-slog    1 MiB sync writes, the same pool with an ssd-plp log device, QD1
#   lanes-1    one volume, 16 writers, two ssd-sata log devices, loglanes=1
#   lanes-4    the same with loglanes=4
# and prints one markdown table with the ratios the issue asks for.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DIR=$ROOT/target/bench-sync
RUNTIME=10
ONLY=
while [[ $# -gt 0 ]]; do
    case $1 in
        --dir) DIR=$2; shift 2 ;;
        --runtime) RUNTIME=$2; shift 2 ;;
        --only) ONLY=$2; shift 2 ;;
        -h|--help) sed -n '2,27p' "$0"; exit 0 ;;
        *) echo "unknown argument: $1" >&2; exit 2 ;;
    esac
done
ROWS=(hdd hdd+slog hdd-64 file raw qemu-nbd 1m-hdd 1m-slog lanes-1 lanes-4)
if [[ -n $ONLY ]]; then IFS=, read -r -a ROWS <<<"$ONLY"; fi

for tool in cargo fio qemu-nbd python3 timeout; do
    command -v "$tool" >/dev/null || { echo "missing tool: $tool" >&2; exit 1; }
done
START=$(date +%s)
log() { printf '[%4ds] %s\n' $(($(date +%s) - START)) "$*" >&2; }

log "building cairn (release)"
(cd "$ROOT" && cargo build --release -p cairn --quiet)
CAIRN=$ROOT/target/release/cairn
rm -rf "$DIR"
mkdir -p "$DIR/results"
DIR=$(cd "$DIR" && pwd)
SERVER_PID=

stop_server() {
    if [[ -n $SERVER_PID ]]; then
        kill -TERM "$SERVER_PID" 2>/dev/null || true
        wait "$SERVER_PID" 2>/dev/null || true
        SERVER_PID=
    fi
}
trap stop_server EXIT

wait_for_socket() { # socket
    local i
    for i in $(seq 1 300); do
        [[ -S $1 ]] && return 0
        kill -0 "$SERVER_PID" 2>/dev/null || { echo "server exited; see its log" >&2; exit 1; }
        sleep 0.1
    done
    echo "no socket $1 after 30 s" >&2
    exit 1
}

# Backing files of emulated devices live on tmpfs (EMU_DIR) so that the model, not this
# machine's disk, sets their timing (see cairn-device's emulated.rs); plain-file rows use DIR.
EMU_DIR=/dev/shm/cairn-bench-sync
rm -rf "$EMU_DIR"
mkdir -p "$EMU_DIR"
trap 'stop_server; rm -rf "$EMU_DIR"' EXIT

# start_cairn ROW VOLOPTS VDEV...: a pool from the given vdevs, a 1 GiB volume, a server.
start_cairn() {
    local row=$1 volopts=$2
    shift 2
    local work=$DIR/$row
    mkdir -p "$work"
    "$CAIRN" --state-dir "$work/state" pool create --size 2G tank "$@" >"$work/setup.log"
    "$CAIRN" --state-dir "$work/state" create -V 1G $volopts tank/vol >>"$work/setup.log"
    "$CAIRN" --state-dir "$work/state" serve --listen 127.0.0.1:0 --socket "$work/nbd.sock" \
        >"$work/serve.log" 2>&1 &
    SERVER_PID=$!
    wait_for_socket "$work/nbd.sock"
    URI="nbd+unix:///tank/vol?socket=$work/nbd.sock"
}

# fio_nbd ROW URI BS JOBS: time-based random sync writes over the nbd engine.
fio_nbd() {
    local row=$1 uri=$2 bs=$3 jobs=$4
    timeout $((RUNTIME + 120)) fio --name="$row" --ioengine=nbd --uri="$uri" --rw=randwrite \
        --bs="$bs" --iodepth=1 --numjobs="$jobs" --fsync=1 --size=1G --norandommap=1 \
        --time_based=1 --runtime="$RUNTIME" --ramp_time=2 --group_reporting=1 \
        --output-format=json --output="$DIR/results/$row.json" 2>"$DIR/results/$row.stderr"
}

run_row() {
    local row=$1 work=$DIR/$1 emu=$EMU_DIR/$1
    mkdir -p "$emu"
    log "row $row"
    case $row in
        hdd) start_cairn "$row" "" "emu:hdd-7200:$emu/d0.img" ;;
        hdd+slog) start_cairn "$row" "" "emu:hdd-7200:$emu/d0.img" log "emu:ssd-plp:$emu/slog.img" ;;
        hdd-64) start_cairn "$row" "" "emu:hdd-7200:$emu/d0.img" ;;
        file) start_cairn "$row" "" "$work/d0.img" ;;
        1m-hdd) start_cairn "$row" "" "emu:hdd-7200:$emu/d0.img" ;;
        1m-slog) start_cairn "$row" "" "emu:hdd-7200:$emu/d0.img" log "emu:ssd-plp:$emu/slog.img" ;;
        lanes-1) start_cairn "$row" "-o loglanes=1" "emu:hdd-7200:$emu/d0.img" \
            log "emu:ssd-sata:$emu/s0.img" "emu:ssd-sata:$emu/s1.img" ;;
        lanes-4) start_cairn "$row" "-o loglanes=4" "emu:hdd-7200:$emu/d0.img" \
            log "emu:ssd-sata:$emu/s0.img" "emu:ssd-sata:$emu/s1.img" ;;
        raw)
            mkdir -p "$work"
            timeout $((RUNTIME + 120)) fio --name=raw --ioengine=psync --filename="$work/raw.img" \
                --size=1G --rw=randwrite --bs=8k --fdatasync=1 --norandommap=1 --time_based=1 \
                --runtime="$RUNTIME" --ramp_time=2 --output-format=json \
                --output="$DIR/results/raw.json" 2>"$DIR/results/raw.stderr"
            return ;;
        qemu-nbd)
            mkdir -p "$work"
            truncate -s 1G "$work/raw.img"
            qemu-nbd -f raw -t -e 4 --cache=writethrough --aio=threads -k "$work/nbd.sock" \
                "$work/raw.img" >"$work/serve.log" 2>&1 &
            SERVER_PID=$!
            wait_for_socket "$work/nbd.sock"
            fio_nbd "$row" "nbd+unix:///?socket=$work/nbd.sock" 8k 1
            stop_server
            return ;;
        *) echo "unknown row $row" >&2; exit 2 ;;
    esac
    case $row in
        hdd-64) fio_nbd "$row" "$URI" 8k 64 ;;
        1m-*) fio_nbd "$row" "$URI" 1M 1 ;;
        lanes-*) fio_nbd "$row" "$URI" 8k 16 ;;
        *) fio_nbd "$row" "$URI" 8k 1 ;;
    esac
    "$CAIRN" --state-dir "$work/state" stat zil >"$DIR/results/$row.zil.txt" 2>&1 || true
    stop_server
}

for row in "${ROWS[@]}"; do
    run_row "$row"
done
log "done in $(($(date +%s) - START))s"

python3 - "$DIR" "$RUNTIME" "${ROWS[@]}" <<'EOF'
import json, os, sys

d, runtime, rows = sys.argv[1], sys.argv[2], sys.argv[3:]
labels = {
    "hdd": "hdd-7200 pool, no log device, 8K QD1",
    "hdd+slog": "hdd-7200 pool + ssd-plp log device, 8K QD1",
    "hdd-64": "hdd-7200 pool, no log device, 8K, 64 writers",
    "file": "pool on a plain file, 8K QD1",
    "raw": "plain file: 8K write + fdatasync (fio psync), QD1",
    "qemu-nbd": "qemu-nbd --cache=writethrough, plain file, 8K QD1",
    "1m-hdd": "hdd-7200 pool, no log device, 1M QD1",
    "1m-slog": "hdd-7200 pool + ssd-plp log device, 1M QD1",
    "lanes-1": "16 writers, 2 ssd-sata log devices, loglanes=1",
    "lanes-4": "16 writers, 2 ssd-sata log devices, loglanes=4",
}
res = {}
for row in rows:
    path = os.path.join(d, "results", row + ".json")
    text = open(path).read()
    job = json.loads(text[text.index("{"):])["jobs"][0]
    if job["error"]:
        sys.exit(f"{path}: fio error {job['error']}")
    w = job["write"]
    res[row] = dict(iops=w["iops"], mbs=w["bw_bytes"] / 1e6,
                    p50=w["clat_ns"]["percentile"]["50.000000"] / 1e3,
                    p99=w["clat_ns"]["percentile"]["99.000000"] / 1e3,
                    syncs=job["sync"]["total_ios"])

def ratio(a, b):
    return f"{res[a]['iops'] / res[b]['iops']:.2f}×" if a in res and b in res else "–"

print()
print("| row | configuration | write IOPS | MB/s | write p50 / p99 µs | flushes |")
print("|---|---|---:|---:|---:|---:|")
for row in rows:
    r = res[row]
    print(f"| {row} | {labels[row]} | {r['iops']:,.0f} | {r['mbs']:.2f} | "
          f"{r['p50']:.0f} / {r['p99']:.0f} | {r['syncs']:,} |")
print()
print("| ratio | value | target |")
print("|---|---:|---|")
print(f"| hdd+slog / hdd (QD1) | {ratio('hdd+slog', 'hdd')} | ≥ 30× |")
if "hdd-64" in res:
    print(f"| hdd-64 aggregate | {res['hdd-64']['mbs']:.1f} MB/s | ≥ 40 MB/s |")
print(f"| file / raw fdatasync | {ratio('file', 'raw')} | ≥ 0.8× |")
print(f"| file / qemu-nbd writethrough | {ratio('file', 'qemu-nbd')} | > 1× |")
print(f"| 1m-slog / 1m-hdd | {ratio('1m-slog', '1m-hdd')} | ≥ 1× |")
print(f"| lanes-4 / lanes-1 | {ratio('lanes-4', 'lanes-1')} | > 1× |")
print()
print(f"fio nbd engine, random writes each followed by an NBD FLUSH (fsync=1), {runtime} s after a "
      "2 s ramp, one run per row; each row on a fresh pool and server; 'flushes' is the FLUSH "
      "requests fio sent. Per-row `cairn stat zil` output is in results/*.zil.txt.")
EOF
