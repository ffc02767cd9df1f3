#!/usr/bin/env bash
# What watching costs (issue 16): NBD sync writes and cached reads with `cairn serve --http` on
# and a real Prometheus scraping it every second, against the same server without it.
#
#   bench/analytics-overhead.sh [--dir DIR] [--runtime SECONDS] [--rounds N]
#
# Each round starts two servers in turn (the order alternates by round), each on a fresh pool
# (an emulated hdd-7200 with an ssd-plp log device, backing files on tmpfs, as sync-write.sh's
# hdd+slog row), one volume of volblocksize=8K:
#   off  `cairn serve`
#   on   `cairn serve --http 127.0.0.1:PORT`, Prometheus (Debian `prometheus`) scraping
#        /metrics every second for the whole run, and the server's own history sampler
# and runs on each:
#   sync-write   nbd-load: 8 KiB random writes with FUA, QD1 (the intent log's path), RUNTIME s
#   cached-read  fio nbd engine: 4 KiB random reads at QD1 over a 256 MiB working set that was
#                written, synced and read once (so it is in the ARC), RUNTIME s
# Prints medians of the rounds (and every round) and on/off ratios; the target is a loss of at
# most 2% (ratio >= 0.98). Scrape counts from Prometheus's `up` series are printed to show the
# scraping really ran. Needs root only for nothing; needs fio, prometheus, python3.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DIR=$ROOT/target/bench-analytics
RUNTIME=10
ROUNDS=5
while [[ $# -gt 0 ]]; do
    case $1 in
        --dir) DIR=$2; shift 2 ;;
        --runtime) RUNTIME=$2; shift 2 ;;
        --rounds) ROUNDS=$2; shift 2 ;;
        -h|--help) sed -n '2,21p' "$0"; exit 0 ;;
        *) echo "unknown argument: $1" >&2; exit 2 ;;
    esac
done
for tool in cargo fio prometheus python3 timeout curl; do
    command -v "$tool" >/dev/null || { echo "missing tool: $tool (apt-get install it)" >&2; exit 1; }
done
# shellcheck source=lib.sh
source "$ROOT/bench/lib.sh"

build_release -p cairn-bench
LOAD=$ROOT/target/release/nbd-load
rm -rf "$DIR"
mkdir -p "$DIR/results"
DIR=$(cd "$DIR" && pwd)
EMU_DIR=/dev/shm/cairn-bench-analytics
SERVER_PID=
PROM_PID=

stop_all() {
    for pid in $SERVER_PID $PROM_PID; do
        kill -TERM "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
    SERVER_PID=
    PROM_PID=
}
trap 'stop_all; rm -rf "$EMU_DIR"' EXIT

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

wait_for() { # what command...
    local what=$1 i
    shift
    for i in $(seq 1 300); do
        "$@" >/dev/null 2>&1 && return 0
        sleep 0.1
    done
    echo "timed out waiting for $what" >&2
    exit 1
}

# variant ROUND off|on: one server, both loads.
variant() {
    local round=$1 mode=$2 work=$DIR/$2.$1 emu=$EMU_DIR/$2
    rm -rf "$work" "$emu"
    mkdir -p "$work" "$emu"
    log "round $round: analytics $mode"
    local state=$work/state socket=$work/nbd.sock
    "$CAIRN" --state-dir "$state" pool create --size 2G tank "emu:hdd-7200:$emu/d0.img" \
        log "emu:ssd-plp:$emu/slog.img" >"$work/setup.log"
    "$CAIRN" --state-dir "$state" create -V 1G -o volblocksize=8K tank/vol >>"$work/setup.log"
    local http=()
    local port=
    if [[ $mode == on ]]; then
        port=$(free_port)
        http=(--http "127.0.0.1:$port")
    fi
    "$CAIRN" --state-dir "$state" serve --arc-max 1G --socket "$socket" "${http[@]}" \
        >"$work/serve.log" 2>&1 &
    SERVER_PID=$!
    wait_for "the server's socket" test -S "$socket"
    if [[ $mode == on ]]; then
        local prom_port
        prom_port=$(free_port)
        cat >"$work/prometheus.yml" <<EOF
global:
  scrape_interval: 1s
scrape_configs:
  - job_name: cairn
    scrape_interval: 1s
    scrape_timeout: 900ms
    static_configs:
      - targets: ['127.0.0.1:$port']
EOF
        prometheus --config.file="$work/prometheus.yml" --storage.tsdb.path="$work/prom" \
            --web.listen-address="127.0.0.1:$prom_port" >"$work/prometheus.log" 2>&1 &
        PROM_PID=$!
        wait_for "prometheus" curl -sf "http://127.0.0.1:$prom_port/-/ready"
        PROM_URL=http://127.0.0.1:$prom_port
    fi
    local uri="nbd+unix:///tank/vol?socket=$socket"
    timeout $((RUNTIME + 120)) "$LOAD" --socket "$socket" --export tank/vol --bs 8192 \
        --connections 1 --qd 1 --seconds "$RUNTIME" --ramp 2 --mode fua \
        >"$DIR/results/sync-write.$mode.$round.txt" 2>"$work/load.stderr"
    # The working set: written, made durable and synced, read once into the ARC.
    fio --name=fill --ioengine=nbd --uri="$uri" --rw=write --bs=1M --size=256M --iodepth=4 \
        --output="$work/fill.txt" >/dev/null 2>&1
    "$CAIRN" --state-dir "$state" pool sync tank >/dev/null
    fio --name=warm --ioengine=nbd --uri="$uri" --rw=read --bs=1M --size=256M --iodepth=4 \
        --output="$work/warm.txt" >/dev/null 2>&1
    timeout $((RUNTIME + 120)) fio --name=cached-read --ioengine=nbd --uri="$uri" \
        --rw=randread --bs=4k --size=256M --iodepth=1 --norandommap=1 --time_based=1 \
        --runtime="$RUNTIME" --ramp_time=2 --output-format=json \
        --output="$DIR/results/cached-read.$mode.$round.json" 2>"$work/fio.stderr"
    if [[ $mode == on ]]; then
        curl -sf "$PROM_URL/api/v1/query?query=count_over_time(up%7Bjob%3D%22cairn%22%7D%5B5m%5D)" \
            >"$DIR/results/scrapes.$round.json" || true
        curl -sf "$PROM_URL/api/v1/query?query=sum_over_time(up%7Bjob%3D%22cairn%22%7D%5B5m%5D)" \
            >"$DIR/results/scrapes-up.$round.json" || true
    fi
    stop_all
}

for round in $(seq 1 "$ROUNDS"); do
    if ((round % 2)); then order=(off on); else order=(on off); fi
    for mode in "${order[@]}"; do
        variant "$round" "$mode"
    done
done
log "done in $(($(date +%s) - START))s"

python3 - "$DIR" "$ROUNDS" "$RUNTIME" <<'EOF'
import json, os, statistics, sys

d, rounds, runtime = sys.argv[1], int(sys.argv[2]), sys.argv[3]
res = os.path.join(d, "results")

def sync_write(mode, k):
    kv = dict(item.split("=", 1) for item in open(f"{res}/sync-write.{mode}.{k}.txt").read().split())
    return float(kv["iops"])

def cached_read(mode, k):
    text = open(f"{res}/cached-read.{mode}.{k}.json").read()
    job = json.loads(text[text.index("{"):])["jobs"][0]
    if job["error"]:
        sys.exit(f"cached-read.{mode}.{k}: fio error {job['error']}")
    return job["read"]["iops"]

def scrapes(k):
    try:
        total = json.load(open(f"{res}/scrapes.{k}.json"))["data"]["result"][0]["value"][1]
        up = json.load(open(f"{res}/scrapes-up.{k}.json"))["data"]["result"][0]["value"][1]
        return f"{float(up):.0f}/{float(total):.0f}"
    except (OSError, KeyError, IndexError, ValueError):
        return "?"

print()
print("| load | analytics off: median IOPS (rounds) | on, Prometheus scraping every 1 s: median IOPS (rounds) | on / off | target |")
print("|---|---|---|---:|---|")
for name, get in (("sync-write: 8K FUA writes, QD1, hdd-7200 + ssd-plp log", sync_write),
                  ("cached-read: 4K random reads, QD1, 256M in the ARC", cached_read)):
    off = [get("off", k) for k in range(1, rounds + 1)]
    on = [get("on", k) for k in range(1, rounds + 1)]
    ratio = statistics.median(on) / statistics.median(off)
    verdict = "met" if ratio >= 0.98 else "NOT met"
    fmt = lambda xs: ", ".join(f"{x:,.0f}" for x in xs)
    print(f"| {name} | {statistics.median(off):,.0f} ({fmt(off)}) | {statistics.median(on):,.0f} ({fmt(on)}) | "
          f"{ratio:.3f} | ≥ 0.98: {verdict} |")
print()
print(f"Successful scrapes per 'on' round (up == 1 / scrapes): {', '.join(scrapes(k) for k in range(1, rounds + 1))}. "
      f"{runtime} s measured per load after a 2 s ramp; rounds interleaved, the order alternating.")
EOF
