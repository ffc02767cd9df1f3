#!/usr/bin/env bash
# The ARC's memory bound under a working set 4x arc_max, over NBD (issue 5).
#
#   bench/arc-memory.sh [--dir DIR] [--minutes M] [--arc-max SIZE] [--interval SECONDS]
#
# The issue's memory acceptance: during M minutes (default 10) of random reads over a working set
# 4x arc_max, the server's resident memory stays within arc_max + the dirty-data limit + a fixed
# overhead, and the cache never collapses to its minimum without memory pressure.
#
# Builds cairn in release, then in DIR (default target/bench-arc-memory, wiped first): a sparse
# single-file pool with one volume tank/vol (volblocksize=4K) of 4 x ARC_MAX (default 256M, so
# 1 GiB), written in full with random data (fio, 1 MiB sequential writes) through a first
# `cairn serve`, flushed, `pool sync`ed and that server stopped. A fresh `cairn serve --arc-max
# ARC_MAX` then imports the pool; its resident memory a few seconds later, before any read, is
# the overhead baseline. fio's nbd engine then reads the whole volume at random (4 KiB, QD8, one
# connection, time based) for M minutes, and every INTERVAL s (default 5) the script samples the
# server's VmRSS / VmHWM / RssAnon (/proc/PID/status), `cairn stat arc -H -p` (size, c, c_min,
# shrinks, ...), MemAvailable and the memory PSI. Samples go to DIR/samples.tsv; the script prints
# a markdown table and the bound checks:
#   max RSS <= arc_max + dirty limit + baseline RSS (measured), and
#   max RSS <= arc_max + dirty limit + 64 MiB (a fixed allowance),
# where the dirty limit is cairn's TxgConfig default (10% of MemTotal, at most 4 GiB; per pool)
# and max RSS is the kernel's high-water mark VmHWM (catches peaks between samples). It also
# prints the tighter check without the dirty allowance (no writes happen during the reads), and
# whether c ever fell to c_min, against the shrinks, arc_no_grow and memory pressure seen.
# The script never fails on a target, only on errors.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DIR=$ROOT/target/bench-arc-memory
MINUTES=10
ARC_MAX=256M
INTERVAL=5
while [[ $# -gt 0 ]]; do
    case $1 in
        --dir) DIR=$2; shift 2 ;;
        --minutes) MINUTES=$2; shift 2 ;;
        --arc-max) ARC_MAX=$2; shift 2 ;;
        --interval) INTERVAL=$2; shift 2 ;;
        -h|--help) sed -n '2,26p' "$0"; exit 0 ;;
        *) echo "unknown argument: $1" >&2; exit 2 ;;
    esac
done

for tool in cargo fio qemu-nbd qemu-io python3 timeout numfmt; do
    command -v "$tool" >/dev/null || { echo "missing tool: $tool" >&2; exit 1; }
done

bytes() { # SIZE with an optional K/M/G/T suffix (powers of 1024) -> bytes
    numfmt --from=iec "${1%B}" 2>/dev/null || { echo "not a size: $1" >&2; exit 2; }
}
[[ $MINUTES =~ ^[0-9]+([.][0-9]+)?$ ]] || { echo "--minutes must be a number" >&2; exit 2; }
[[ $INTERVAL =~ ^[1-9][0-9]*$ ]] || { echo "--interval must be a positive integer" >&2; exit 2; }
RUNTIME=$(python3 -c "print(max(1, round(float('$MINUTES') * 60)))")
ARC_MAX_BYTES=$(bytes "$ARC_MAX")
((ARC_MAX_BYTES >= 4096)) || { echo "--arc-max is too small" >&2; exit 2; }
# Working set = volume size = 4 x arc_max, in whole MiB.
WS_BYTES=$(((4 * ARC_MAX_BYTES + (1 << 20) - 1) >> 20 << 20))
POOL_BYTES=$((2 * WS_BYTES + (2 << 30)))
((POOL_BYTES >= 4 << 30)) || POOL_BYTES=$((4 << 30))
# cairn's dirty-data limit (crates/cairn-pool/src/txg.rs, default_dirty_bytes_max): 10% of
# MemTotal (computed as MemTotal / 100 * 10), at most 4 GiB; one per pool, and this is one pool.
MEM_TOTAL=$(($(awk '/^MemTotal:/ { print $2 }' /proc/meminfo) * 1024))
# shellcheck disable=SC2017 # the same integer arithmetic as the Rust code
DIRTY_MAX=$((MEM_TOTAL / 100 * 10))
((DIRTY_MAX <= 4 << 30)) || DIRTY_MAX=$((4 << 30))
ALLOWANCE=$((64 << 20))

# shellcheck source=lib.sh
source "$ROOT/bench/lib.sh"

build_release

stop_servers_on_exit

rm -rf "$DIR"
mkdir -p "$DIR/results"
DIR=$(cd "$DIR" && pwd)
STATE=$DIR/cairn-state
SOCK=$DIR/cairn.sock
URI="nbd+unix:///tank/vol?socket=$SOCK"

start_server() { # log-file
    rm -f "$SOCK"
    "$CAIRN" --state-dir "$STATE" serve --listen 127.0.0.1:0 --socket "$SOCK" \
        --arc-max "$ARC_MAX" >"$1" 2>&1 &
    PID[cairn]=$!
    local _
    for _ in $(seq 1 600); do
        [[ -S $SOCK ]] && return 0
        kill -0 "${PID[cairn]}" 2>/dev/null || { echo "cairn serve exited; see $1" >&2; exit 1; }
        sleep 0.1
    done
    echo "cairn serve did not create $SOCK within 60 s; see $1" >&2
    exit 1
}

stop_server() {
    kill -TERM "${PID[cairn]}"
    local rc=0
    wait "${PID[cairn]}" || rc=$?
    unset 'PID[cairn]'
    ((rc == 0)) || { echo "cairn serve exited with status $rc on SIGTERM" >&2; exit 1; }
}

cpu_ticks() { # pid -> utime+stime of the whole process (all threads), in clock ticks
    awk '{ sub(/^.*\) /, ""); print $12 + $13 }' "/proc/$1/stat"
}

ARC_FIELDS=(size c c_min c_max data_size metadata_size hdr_size blocks evictions shrinks grows
            arc_no_grow memory_available_bytes demand_data_hits demand_data_iohits
            demand_metadata_hits demand_metadata_iohits demand_data_misses demand_metadata_misses)
SAMPLES=$DIR/samples.tsv
printf 'phase\tt_s\trss_bytes\thwm_bytes\trss_anon_bytes\tmeminfo_available_bytes\tpsi_some_avg10' >"$SAMPLES"
printf '\t%s' "${ARC_FIELDS[@]}" >>"$SAMPLES"
printf '\n' >>"$SAMPLES"

sample() { # phase: one line of samples.tsv (RSS, MemAvailable, PSI, the ARC's counters)
    local t mem arc avail psi
    t=$(($(date +%s) - T0))
    mem=$(awk '/^VmRSS:/ { r = $2 } /^VmHWM:/ { h = $2 } /^RssAnon:/ { a = $2 }
               END { printf "%d\t%d\t%d", r * 1024, h * 1024, a * 1024 }' "/proc/${PID[cairn]}/status")
    if ! timeout 60 "$CAIRN" --state-dir "$STATE" stat arc -H -p >"$DIR/arc-last.tsv" 2>"$DIR/arc-last.stderr"; then
        echo "cairn stat arc -H -p failed; see $DIR/arc-last.stderr" >&2
        exit 1
    fi
    arc=$(awk -F'\t' -v names="${ARC_FIELDS[*]}" '
        { v[$1] = $2 }
        END {
            n = split(names, want, " ")
            for (i = 1; i <= n; i++) {
                if (!(want[i] in v)) { print "stat arc has no " want[i] > "/dev/stderr"; exit 1 }
                printf "%s%s", (i > 1 ? "\t" : ""), v[want[i]]
            }
        }' "$DIR/arc-last.tsv")
    avail=$(($(awk '/^MemAvailable:/ { print $2 }' /proc/meminfo) * 1024))
    psi=NA
    if [[ -r /proc/pressure/memory ]]; then
        psi=$(awk '/^some/ { sub(/avg10=/, "", $2); print $2 }' /proc/pressure/memory)
    fi
    printf '%s\t%d\t%s\t%s\t%s\t%s\n' "$1" "$t" "$mem" "$avail" "$psi" "$arc" >>"$SAMPLES"
}

log "pool of $(numfmt --to=iec "$POOL_BYTES") (sparse) in $DIR ($(df --output=source,fstype "$DIR" | tail -1 | tr -s ' ')), volume of $(numfmt --to=iec "$WS_BYTES")"
"$CAIRN" --state-dir "$STATE" pool create --size "$POOL_BYTES" tank "$DIR/pool.img" >"$DIR/cairn-setup.log"
"$CAIRN" --state-dir "$STATE" create -V "$WS_BYTES" -o volblocksize=4K tank/vol >>"$DIR/cairn-setup.log"

log "filling the volume with random data (1 MiB sequential writes), FLUSH, pool sync"
start_server "$DIR/cairn-fill.log"
if ! timeout 1800 fio --name=fill --ioengine=nbd "--uri=$URI" --rw=write --bs=1M --iodepth=8 \
    --numjobs=1 --refill_buffers=1 --offset=0 "--size=$WS_BYTES" \
    --output-format=json --output="$DIR/results/fill.json" 2>"$DIR/results/fill.json.stderr"; then
    echo "fio fill failed; see $DIR/results/fill.json.stderr" >&2
    exit 1
fi
timeout 120 qemu-io -f raw -c flush "$URI" >/dev/null
timeout 600 "$CAIRN" --state-dir "$STATE" pool sync tank >>"$DIR/cairn-setup.log"
stop_server
sync -f "$DIR"

log "starting the measured server (--arc-max $ARC_MAX); baseline after import, before any read"
start_server "$DIR/cairn.log"
T0=$(date +%s)
sleep 3
sample baseline
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)

log "random 4 KiB reads at QD8 over the whole $(numfmt --to=iec "$WS_BYTES") for ${RUNTIME}s, sampling every ${INTERVAL}s"
CPU_BEFORE=$(cpu_ticks "${PID[cairn]}")
timeout $((RUNTIME + 300)) fio --name=randread-4k-qd8 --ioengine=nbd "--uri=$URI" --rw=randread \
    --bs=4k --iodepth=8 --numjobs=1 --randrepeat=1 --norandommap=1 --offset=0 "--size=$WS_BYTES" \
    --time_based=1 "--runtime=$RUNTIME" --output-format=json --output="$DIR/results/randread.json" \
    2>"$DIR/results/randread.json.stderr" &
PID[fio]=$!
RUN_T0=$(date +%s)
k=0
while kill -0 "${PID[fio]}" 2>/dev/null; do
    k=$((k + 1))
    delay=$((RUN_T0 + k * INTERVAL - $(date +%s)))
    while ((delay > 0)) && kill -0 "${PID[fio]}" 2>/dev/null; do
        sleep 1
        delay=$((delay - 1))
    done
    kill -0 "${PID[fio]}" 2>/dev/null || break
    sample run
done
rc=0
wait "${PID[fio]}" || rc=$?
unset 'PID[fio]'
((rc == 0)) || { echo "fio randread failed (status $rc); see $DIR/results/randread.json.stderr" >&2; exit 1; }
sample end
CPU_AFTER=$(cpu_ticks "${PID[cairn]}")
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)
"$CAIRN" --state-dir "$STATE" stat arc >"$DIR/cairn-stat-arc.txt" 2>&1 || true
cp "/proc/${PID[cairn]}/status" "$DIR/cairn-proc-status.txt"
FINAL_HWM=$(($(awk '/^VmHWM:/ { print $2 }' "$DIR/cairn-proc-status.txt") * 1024))
stop_server

ELAPSED=$(($(date +%s) - START))
log "done in ${ELAPSED}s"

python3 - "$DIR" "$RUNTIME" "$ARC_MAX_BYTES" "$WS_BYTES" "$DIRTY_MAX" "$MEM_TOTAL" "$ALLOWANCE" \
    "$((CPU_AFTER - CPU_BEFORE))" "$(getconf CLK_TCK)" "$LOAD_BEFORE" "$LOAD_AFTER" "$ELAPSED" \
    "$INTERVAL" "$FINAL_HWM" <<'EOF'
import csv, json, os, sys

(d, runtime, arc_max, ws, dirty_max, mem_total, allowance, cpu, clk, load_before, load_after,
 elapsed, interval, final_hwm) = sys.argv[1:15]
runtime, arc_max, ws, dirty_max, mem_total, allowance, cpu, clk, interval, final_hwm = map(
    int, (runtime, arc_max, ws, dirty_max, mem_total, allowance, cpu, clk, interval, final_hwm))

rows = list(csv.DictReader(open(os.path.join(d, "samples.tsv")), delimiter="\t"))
for r in rows:
    for k, v in r.items():
        if k not in ("phase", "psi_some_avg10"):
            r[k] = int(v)
base = rows[0]
assert base["phase"] == "baseline"
run = [r for r in rows if r["phase"] != "baseline"]
if not run:
    sys.exit("no samples taken during the reads")
end = rows[-1]

mib = lambda b: f"{b / 2**20:,.1f} MiB"
HITS = ["demand_data_hits", "demand_data_iohits", "demand_metadata_hits", "demand_metadata_iohits"]
MISSES = ["demand_data_misses", "demand_metadata_misses"]
h = sum(end[n] - base[n] for n in HITS)
m = sum(end[n] - base[n] for n in MISSES)
hit = 100.0 * h / (h + m) if h + m else float("nan")
dh = sum(end[n] - base[n] for n in HITS[:2])
dm = end["demand_data_misses"] - base["demand_data_misses"]
data_hit = 100.0 * dh / (dh + dm) if dh + dm else float("nan")

text = open(os.path.join(d, "results", "randread.json")).read()
job = json.loads(text[text.index("{"):])["jobs"][0]
if job["error"]:
    sys.exit(f"fio error {job['error']}")
iops = job["read"]["iops"]

rss0 = base["rss_bytes"]
max_rss_sampled = max(r["rss_bytes"] for r in rows)
hwm = max([r["hwm_bytes"] for r in rows] + [final_hwm])  # VmHWM also read just before the stop
max_size = max(r["size"] for r in rows)
min_c = min(r["c"] for r in run)
c_min = base["c_min"]
c_max = base["c_max"]
hit_min = [r for r in run if r["c"] <= r["c_min"]]
shrinks = end["shrinks"] - base["shrinks"]
no_grow = sum(1 for r in run if r["arc_no_grow"])
min_avail = min(r["meminfo_available_bytes"] for r in rows)
psi = [float(r["psi_some_avg10"]) for r in rows if r["psi_some_avg10"] != "NA"]
max_psi = max(psi) if psi else None
pressure = shrinks > 0 or no_grow > 0 or (max_psi is not None and max_psi > 0)

print()
print("| measure | value |")
print("|---|---:|")
print(f"| arc_max (c_max) | {mib(c_max)} |")
print(f"| working set (random 4 KiB reads, QD8) | {mib(ws)} ({ws / c_max:.1f}× c_max) |")
print(f"| read IOPS (fio, {runtime} s) | {iops:,.0f} |")
print(f"| demand hit % over the run: data + metadata / data only | {hit:.2f} / {data_hit:.2f} |")
print(f"| RSS at start (after import, before reads) | {mib(rss0)} |")
print(f"| max RSS (VmHWM) / max sampled VmRSS | {mib(hwm)} / {mib(max_rss_sampled)} |")
print(f"| RssAnon at the end | {mib(end['rss_anon_bytes'])} |")
print(f"| max ARC size | {mib(max_size)} |")
print(f"| ARC size / c at the end | {mib(end['size'])} / {mib(end['c'])} |")
print(f"| headers (hdr_size) at the end | {mib(end['hdr_size'])} ({end['blocks']:,} blocks) |")
print(f"| min c seen / c_min | {mib(min_c)} / {mib(c_min)} |")
print(f"| c reached c_min | {'**yes**, in ' + str(len(hit_min)) + ' samples' if hit_min else 'no'} |")
print(f"| shrinks during the run / samples with arc_no_grow | {shrinks} / {no_grow} |")
print(f"| min MemAvailable / max memory PSI some avg10 | {mib(min_avail)} / "
      + (f"{max_psi:.2f}" if max_psi is not None else "n/a") + " |")
print(f"| server CPU % (100 = one core) | {100.0 * cpu / clk / runtime:.0f} |")
print()
print("| bound | value | max RSS (VmHWM) | result |")
print("|---|---:|---:|---|")
checks = [
    ("arc_max + dirty limit + RSS at start", arc_max + dirty_max + rss0),
    ("arc_max + dirty limit + 64 MiB", arc_max + dirty_max + allowance),
    ("arc_max + RSS at start (no dirty allowance; no writes during the reads)", arc_max + rss0),
    ("arc_max + 64 MiB (no dirty allowance)", arc_max + allowance),
]
for name, bound in checks:
    print(f"| {name} | {mib(bound)} | {mib(hwm)} | {'met' if hwm <= bound else '**NOT met**'} "
          f"({(hwm - bound) / 2**20:+,.1f} MiB) |")
collapse = bool(hit_min) and not pressure
print(f"| cache never at c_min without memory pressure | | | {'**NOT met**' if collapse else 'met'} |")
print()
print(f"Dirty-data limit {mib(dirty_max)}: cairn's default `dirty_bytes_max` (crates/cairn-pool/src/txg.rs), "
      f"10% of MemTotal ({mib(mem_total)}), at most 4 GiB, one per pool. "
      f"{len(rows)} samples every {interval} s in {d}/samples.tsv. "
      f"Load average (1/5/15 min) before the reads: {load_before}; after: {load_after}. "
      f"Whole script: {elapsed} s.")
EOF
