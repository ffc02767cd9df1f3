#!/usr/bin/env bash
# Synchronous writes over NBD (issue 4): what the intent log and log devices buy, in one run.
#
#   bench/sync-write.sh [--dir DIR] [--runtime SECONDS] [--rounds N] [--only ROW[,ROW...]]
#                       [--baseline CAIRN_BINARY]
#
# With --baseline, every cairn row also runs with that other build of cairn (an older commit's
# target/release/cairn) as row `ROW@base`, interleaved with the others round by round, and the
# table ends with each row's ratio to its baseline: how a change moved the figures, measured in
# the same run (a refactor must stay within a few percent).
#
# Every row starts a fresh `cairn serve` on a fresh pool in DIR (default target/bench-sync,
# wiped first), drives volume tank/vol over a Unix socket, and stops the server. With --rounds N
# every row runs N times, the rows interleaved (round 1 of every row, then round 2, ...), and the
# table shows each row's median round: this VM's disk and CPU drift by tens of percent over a
# few minutes, and interleaving spreads the drift over every row alike. The load is
# random writes with the NBD FUA flag, from `nbd-load` (bench/src/bin/nbd-load.rs): fio's nbd
# engine cannot set FUA, so fio is used where it can be — the raw-file baseline (psync + fdatasync)
# and, for comparison, the same QD1 rows as fio write + FLUSH pairs (`*-fio`). Emulated devices
# (`emu:MODEL:PATH`) keep real time; their backing files live on tmpfs so the model, not this
# machine's disk, sets their speed: an hdd-7200 flush waits for the platter, an ssd-plp flush
# is nearly free.
#
# Rows (ids for --only):
#   hdd          hdd-7200 pool, no log device, 8 KiB FUA writes, QD1
#   hdd+slog     the same pool with an emulated ssd-plp log device, QD1
#   hdd-64       hdd-7200 pool, no log device, 64 writers (64 connections, QD1 each)
#   file         pool on a plain file of this machine's disk, QD1
#   raw          the raw rate: fio psync 8 KiB random write + fdatasync on a plain file, QD1
#   qemu-nbd     qemu-nbd --cache=writethrough serving a plain file, FUA writes, QD1
#   file-fio     as `file`, with fio's nbd engine (write + FLUSH per write)
#   qemu-nbd-fio as `qemu-nbd`, with fio's nbd engine (write + FLUSH per write)
#   1m-hdd       1 MiB FUA writes, hdd-7200 pool, no log device, QD1
#   1m-slog      1 MiB FUA writes, the same pool with an ssd-plp log device, QD1
#   1m-slog-tp   as 1m-slog with logbias=throughput: the data goes once, in place, to the disk
#   lanes-1      one volume, 16 writers, two ssd-plp log devices, loglanes=1
#   lanes-4      the same with loglanes=4
# The plain files of the `file*`, `raw` and `qemu-nbd*` rows are written out in full before the
# row (fio lays out its file that way anyway): a write into a hole of a sparse file makes the
# file system allocate, and fdatasync then commits its journal too, which would charge one
# contender for file-system work the others do not do.
# Volumes use volblocksize=8K, the size of the writes (as a DBA would set it): 8 KiB writes into
# 16 KiB blocks would each need a read of the old block first, which on the emulated disk is a
# seek. Prints one markdown table with the ratios the issue asks for.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DIR=$ROOT/target/bench-sync
RUNTIME=10
ROUNDS=1
ONLY=
BASELINE=
while [[ $# -gt 0 ]]; do
    case $1 in
        --dir) DIR=$2; shift 2 ;;
        --runtime) RUNTIME=$2; shift 2 ;;
        --rounds) ROUNDS=$2; shift 2 ;;
        --only) ONLY=$2; shift 2 ;;
        --baseline) BASELINE=$(cd "$(dirname "$2")" && pwd)/$(basename "$2"); shift 2 ;;
        -h|--help) sed -n '2,41p' "$0"; exit 0 ;;
        *) echo "unknown argument: $1" >&2; exit 2 ;;
    esac
done
ROWS=(hdd hdd+slog hdd-64 file raw qemu-nbd file-fio qemu-nbd-fio 1m-hdd 1m-slog 1m-slog-tp lanes-1
    lanes-4)
if [[ -n $ONLY ]]; then IFS=, read -r -a ROWS <<<"$ONLY"; fi
if [[ -n $BASELINE ]]; then
    [[ -x $BASELINE ]] || { echo "no executable baseline $BASELINE" >&2; exit 2; }
    for row in "${ROWS[@]}"; do
        case $row in raw|qemu-nbd|qemu-nbd-fio) ;; *) ROWS+=("$row@base") ;; esac
    done
fi

for tool in cargo fio qemu-nbd python3 timeout; do
    command -v "$tool" >/dev/null || { echo "missing tool: $tool" >&2; exit 1; }
done
# shellcheck source=lib.sh
source "$ROOT/bench/lib.sh"

build_release -p cairn-bench
LOAD=$ROOT/target/release/nbd-load
NEW_CAIRN=$CAIRN
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

# lay_out FILE MIB: FILE written out in full (zeros), on stable storage.
lay_out() {
    dd if=/dev/zero of="$1" bs=1M count="$2" conv=fsync status=none
}

# start_cairn ROW VOLOPTS VDEV...: a pool from the given vdevs, a 1 GiB volume, a server.
start_cairn() {
    local row=$1 volopts=$2
    shift 2
    local work=$DIR/$row
    mkdir -p "$work"
    "$CAIRN" --state-dir "$work/state" pool create --size 2G tank "$@" >"$work/setup.log"
    "$CAIRN" --state-dir "$work/state" create -V 1G -o volblocksize=8K $volopts tank/vol \
        >>"$work/setup.log"
    "$CAIRN" --state-dir "$work/state" serve --listen 127.0.0.1:0 --socket "$work/nbd.sock" \
        >"$work/serve.log" 2>&1 &
    SERVER_PID=$!
    wait_for_socket "$work/nbd.sock"
    SOCKET=$work/nbd.sock
    URI="nbd+unix:///tank/vol?socket=$work/nbd.sock"
}

# load ROW SOCKET EXPORT BS CONNECTIONS: FUA writes with nbd-load, QD1 per connection.
load() {
    timeout $((RUNTIME + 120)) "$LOAD" --socket "$2" --export "$3" --bs "$4" \
        --connections "$5" --qd 1 --seconds "$RUNTIME" --ramp 2 --mode fua \
        >"$DIR/results/$1.$ROUND.txt" 2>"$DIR/results/$1.$ROUND.stderr"
}

# fio_nbd ROW URI BS JOBS: time-based random sync writes over the nbd engine.
fio_nbd() {
    local row=$1 uri=$2 bs=$3 jobs=$4
    timeout $((RUNTIME + 120)) fio --name="$row" --ioengine=nbd --uri="$uri" --rw=randwrite \
        --bs="$bs" --iodepth=1 --numjobs="$jobs" --fsync=1 --size=1G --norandommap=1 \
        --time_based=1 --runtime="$RUNTIME" --ramp_time=2 --group_reporting=1 \
        --output-format=json --output="$DIR/results/$row.$ROUND.json" \
        2>"$DIR/results/$row.$ROUND.stderr"
}

run_row() {
    local row=$1 work=$DIR/$1 emu=$EMU_DIR/$1
    rm -rf "$work" "$emu"
    mkdir -p "$emu" "$work"
    log "row $row (round $ROUND of $ROUNDS)"
    # A baseline row is its row, run by the baseline binary.
    CAIRN=$NEW_CAIRN
    if [[ $row == *@base ]]; then CAIRN=$BASELINE; fi
    case ${row%@base} in
        hdd|hdd-64|1m-hdd) start_cairn "$row" "" "emu:hdd-7200:$emu/d0.img" ;;
        hdd+slog|1m-slog) start_cairn "$row" "" "emu:hdd-7200:$emu/d0.img" \
            log "emu:ssd-plp:$emu/slog.img" ;;
        1m-slog-tp) start_cairn "$row" "-o logbias=throughput" "emu:hdd-7200:$emu/d0.img" \
            log "emu:ssd-plp:$emu/slog.img" ;;
        file|file-fio)
            lay_out "$work/d0.img" 2048
            start_cairn "$row" "" "$work/d0.img" ;;
        lanes-1|lanes-4) start_cairn "$row" "-o loglanes=${row#lanes-}" \
            "emu:hdd-7200:$emu/d0.img" log "emu:ssd-plp:$emu/s0.img" "emu:ssd-plp:$emu/s1.img" ;;
        raw)
            timeout $((RUNTIME + 120)) fio --name=raw --ioengine=psync --filename="$work/raw.img" \
                --size=1G --rw=randwrite --bs=8k --fdatasync=1 --norandommap=1 --time_based=1 \
                --runtime="$RUNTIME" --ramp_time=2 --output-format=json \
                --output="$DIR/results/raw.$ROUND.json" 2>"$DIR/results/raw.$ROUND.stderr"
            return ;;
        qemu-nbd|qemu-nbd-fio)
            lay_out "$work/raw.img" 1024
            qemu-nbd -f raw -t -e 4 --cache=writethrough --aio=threads -k "$work/nbd.sock" \
                "$work/raw.img" >"$work/serve.log" 2>&1 &
            SERVER_PID=$!
            wait_for_socket "$work/nbd.sock"
            if [[ $row == qemu-nbd ]]; then
                load "$row" "$work/nbd.sock" "" 8192 1
            else
                fio_nbd "$row" "nbd+unix:///?socket=$work/nbd.sock" 8k 1
            fi
            stop_server
            return ;;
        *) echo "unknown row $row" >&2; exit 2 ;;
    esac
    case ${row%@base} in
        hdd-64) load "$row" "$SOCKET" tank/vol 8192 64 ;;
        1m-*) load "$row" "$SOCKET" tank/vol 1048576 1 ;;
        lanes-*) load "$row" "$SOCKET" tank/vol 8192 16 ;;
        file-fio) fio_nbd "$row" "$URI" 8k 1 ;;
        *) load "$row" "$SOCKET" tank/vol 8192 1 ;;
    esac
    "$CAIRN" --state-dir "$work/state" stat zil >"$DIR/results/$row.$ROUND.zil.txt" 2>&1 || true
    stop_server
}

for ROUND in $(seq 1 "$ROUNDS"); do
    for row in "${ROWS[@]}"; do
        run_row "$row"
    done
done
log "done in $(($(date +%s) - START))s"

python3 - "$DIR" "$RUNTIME" "$ROUNDS" "${ROWS[@]}" <<'EOF'
import json, os, statistics, sys

d, runtime, rounds, rows = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4:]
labels = {
    "hdd": "hdd-7200 pool, no log device, 8K QD1",
    "file-fio": "pool on a plain file, 8K QD1",
    "qemu-nbd-fio": "qemu-nbd --cache=writethrough, plain file, 8K QD1",
    "hdd+slog": "hdd-7200 pool + ssd-plp log device, 8K QD1",
    "hdd-64": "hdd-7200 pool, no log device, 8K, 64 writers",
    "file": "pool on a plain file, 8K QD1",
    "raw": "plain file: 8K write + fdatasync (fio psync), QD1",
    "qemu-nbd": "qemu-nbd --cache=writethrough, plain file, 8K QD1",
    "1m-hdd": "hdd-7200 pool, no log device, 1M QD1",
    "1m-slog": "hdd-7200 pool + ssd-plp log device, 1M QD1",
    "1m-slog-tp": "hdd-7200 pool + ssd-plp log device, logbias=throughput, 1M QD1",
    "lanes-1": "16 writers, 2 ssd-plp log devices, loglanes=1",
    "lanes-4": "16 writers, 2 ssd-plp log devices, loglanes=4",
}
def one_round(base):
    if os.path.exists(base + ".txt"):
        kv = dict(item.split("=", 1) for item in open(base + ".txt").read().split())
        return dict(iops=float(kv["iops"]), mbs=float(kv["mb_per_s"]),
                    p50=float(kv["p50_us"]), p99=float(kv["p99_us"]), load="nbd-load FUA")
    text = open(base + ".json").read()
    job = json.loads(text[text.index("{"):])["jobs"][0]
    if job["error"]:
        sys.exit(f"{base}.json: fio error {job['error']}")
    w = job["write"]
    return dict(iops=w["iops"], mbs=w["bw_bytes"] / 1e6,
                p50=w["clat_ns"]["percentile"]["50.000000"] / 1e3,
                p99=w["clat_ns"]["percentile"]["99.000000"] / 1e3,
                load="fio psync+fdatasync" if os.path.basename(base).startswith("raw.")
                else "fio nbd write+FLUSH")

rows = list(dict.fromkeys(rows))
for row in rows:
    if row.endswith("@base"):
        labels[row] = labels[row[:-len("@base")]] + " (baseline build)"
res = {}
for row in rows:
    runs = [one_round(os.path.join(d, "results", f"{row}.{k}")) for k in range(1, rounds + 1)]
    runs.sort(key=lambda r: r["iops"])
    # The median round (the lower middle one for an even count), with every round's IOPS.
    res[row] = dict(runs[(len(runs) - 1) // 2], all=[r["iops"] for r in runs])

def ratio(a, b):
    return f"{res[a]['iops'] / res[b]['iops']:.2f}×" if a in res and b in res else "–"

print()
extra = " rounds (IOPS) |" if rounds > 1 else ""
print("| row | configuration | load | write IOPS | MB/s | p50 / p99 µs |" + extra)
print("|---|---|---|---:|---:|---:|" + ("---|" if rounds > 1 else ""))
for row in rows:
    r = res[row]
    all_rounds = (" " + ", ".join(f"{x:,.0f}" for x in r["all"]) + " |") if rounds > 1 else ""
    print(f"| {row} | {labels[row]} | {r['load']} | {r['iops']:,.0f} | {r['mbs']:.2f} | "
          f"{r['p50']:.0f} / {r['p99']:.0f} |" + all_rounds)
print()
print("| ratio | value | target |")
print("|---|---:|---|")
print(f"| hdd+slog / hdd (QD1) | {ratio('hdd+slog', 'hdd')} | ≥ 30× |")
if "hdd-64" in res:
    print(f"| hdd-64 aggregate | {res['hdd-64']['mbs']:.1f} MB/s | ≥ 40 MB/s |")
print(f"| file / raw fdatasync | {ratio('file', 'raw')} | ≥ 0.8× |")
print(f"| file / qemu-nbd writethrough | {ratio('file', 'qemu-nbd')} | > 1× |")
print(f"| file-fio / qemu-nbd-fio (write + FLUSH) | {ratio('file-fio', 'qemu-nbd-fio')} | > 1× |")
print(f"| 1m-slog / 1m-hdd | {ratio('1m-slog', '1m-hdd')} | ≥ 1× |")
print(f"| 1m-slog-tp / 1m-hdd (in place vs. copied into the log) | {ratio('1m-slog-tp', '1m-hdd')} | (none) |")
print(f"| lanes-4 / lanes-1 | {ratio('lanes-4', 'lanes-1')} | > 1× |")
baselined = [row for row in rows if row + "@base" in res]
if baselined:
    print()
    print("| row | this build / baseline (IOPS) | p50 this / baseline µs |")
    print("|---|---:|---:|")
    for row in baselined:
        base = res[row + "@base"]
        print(f"| {row} | {ratio(row, row + '@base')} | {res[row]['p50']:.0f} / {base['p50']:.0f} |")
print()
per_row = "one run per row" if rounds == 1 else f"median of {rounds} interleaved rounds per row"
print(f"Random writes, {runtime} s measured after a 2 s ramp, {per_row}, each row on a fresh "
      "pool and server; nbd-load rows: every write carries FUA and its latency is submission to "
      "reply; fio nbd rows: each write is followed by a FLUSH (fio fsync=1), write latency shown. "
      "Per-row `cairn stat zil` output is in results/ROW.ROUND.zil.txt.")
EOF
