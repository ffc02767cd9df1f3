#!/usr/bin/env bash
# bench/fs.sh: filesystem datasets against peers in the same run (issue 15). Each system is
# mounted on a 4 GiB plain file laid out in full on the same file system (target/):
#
#   cairn     cairn pool on the file, a filesystem dataset mounted through FUSE (release build)
#   cairn-base the same with another build of cairn (`--baseline BINARY`, e.g. an older
#             commit's target/release/cairn): the column `cairn / cairn-base` is what a change
#             moved, measured in the same run
#   zfs-fuse  zfs-fuse 0.7 (Debian) pool on the file, its filesystem
#   ext4      ext4 on a loop device over the file: the kernel's upper bound
#   raw       the file system the files are on, used directly (a directory of it bind-mounted):
#             what the device under the pools does for the same load, no pool in between
#
# Rows (fio unless noted; each for RUNTIME seconds after a 2 s ramp, one round):
#   dsync-1      8 KiB random writes, O_DSYNC, QD1, one job, 128 MiB file per job
#   dsync-16     the same with 16 jobs
#   rewrite-128k 8 KiB random rewrites (no O_DSYNC) into a file of 128 KiB records
#                (recordsize=128K on cairn and zfs-fuse): the partial-write path
#   aligned-8k   the same with recordsize=8K, for the ratio the issue asks for
#   read-cached  8 KiB random reads of a file just written (in the caches)
#   read-uncached 8 KiB random reads, QD1, of a 2 GiB file (recordsize=8K) in no cache: laid
#                out, then the file system stopped and started again (cairn: its server, so
#                its ARC is empty; zfs-fuse: the pool exported and imported; ext4: unmounted
#                and mounted) and the kernel's caches dropped. It warms as it runs, as any
#                cache would: what is measured is the first RUNTIME seconds from cold.
#   seq-write    1 MiB sequential writes, end with fsync
#   seq-read     1 MiB sequential reads after dropping the page cache
#   creates      files created per second (4 KiB each, one directory, 20,000 files; a shell
#                loop of this script, not fio)
#   pgbench      PostgreSQL 15 (Debian) transactions per second: initdb onto the mount
#                (recordsize=8K on cairn and zfs-fuse, PostgreSQL's page size; default
#                settings: fsync on, synchronous_commit on), `pgbench -i -s 10`, then
#                PGBENCH_RUNTIME (60) seconds of the TPC-B-like script with 4 clients, 2 threads
#   dbench-4     dbench 4 clients (its NetBench load file) for DBENCH_RUNTIME (60) seconds, MB/s
#   ls-l         `ls -l` of one directory of 100,000 empty files, warm (listed once before),
#                files per second (a shell command of this script, as the rows below)
#   rm-rf        `rm -rf` of that directory (listed once before), files per second
#   find-ls      `find -ls` of a replica of /usr/share (its names, sizes and links, files
#                sparse: the tree's metadata, not its data), warm, entries per second
#
# --only ROW,ROW runs some rows; --systems SYS,SYS some systems; --rounds N repeats the whole set
# N times, systems interleaved within each round (the disk under them is shared and its state
# drifts: single rounds of the same build varied by up to 1.5x here), and reports medians. Prints
# a markdown table and the ratios the issue asks for. Needs root (mounts; PostgreSQL runs as the `postgres` user);
# installs nothing itself: run .ci/run's packages plus `apt-get install zfs-fuse dbench` first.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DIR=$ROOT/target/bench-fs
RUNTIME=15
PGBENCH_RUNTIME=60
DBENCH_RUNTIME=60
ONLY=
ROUNDS=1
SYSTEMS=(cairn zfs-fuse ext4 raw)
BASELINE=
while [[ $# -gt 0 ]]; do
    case $1 in
        --dir) DIR=$2; shift 2 ;;
        --runtime) RUNTIME=$2; shift 2 ;;
        --pgbench-runtime) PGBENCH_RUNTIME=$2; shift 2 ;;
        --dbench-runtime) DBENCH_RUNTIME=$2; shift 2 ;;
        --only) ONLY=$2; shift 2 ;;
        --rounds) ROUNDS=$2; shift 2 ;;
        --systems) IFS=, read -r -a SYSTEMS <<<"$2"; shift 2 ;;
        --baseline) BASELINE=$(cd "$(dirname "$2")" && pwd)/$(basename "$2"); shift 2 ;;
        -h|--help) sed -n '2,33p' "$0"; exit 0 ;;
        *) echo "unknown argument: $1" >&2; exit 2 ;;
    esac
done
ROWS=(dsync-1 dsync-16 rewrite-128k aligned-8k read-cached read-uncached seq-write seq-read creates
    pgbench dbench-4 ls-l rm-rf find-ls)
if [[ -n $ONLY ]]; then IFS=, read -r -a ROWS <<<"$ONLY"; fi
if [[ -n $BASELINE ]]; then
    [[ -x $BASELINE ]] || { echo "no executable baseline $BASELINE" >&2; exit 2; }
    SYSTEMS+=(cairn-base)
fi
for tool in fio python3 mkfs.ext4 losetup setpriv; do
    command -v "$tool" >/dev/null || { echo "missing tool: $tool" >&2; exit 1; }
done
PG_BIN=/usr/lib/postgresql/15/bin
if [[ " ${ROWS[*]} " == *" pgbench "* ]] && ! [[ -x $PG_BIN/pgbench && -x $PG_BIN/postgres ]]; then
    echo "PostgreSQL 15 is not installed (apt-get install postgresql-15 postgresql-client-15)" >&2
    exit 1
fi
if [[ " ${ROWS[*]} " == *" dbench-4 "* ]] && ! command -v dbench >/dev/null; then
    echo "dbench is not installed (apt-get install dbench)" >&2
    exit 1
fi
# shellcheck source=lib.sh
source "$ROOT/bench/lib.sh"
# shellcheck source=fs-lib.sh
source "$ROOT/bench/fs-lib.sh"
require_systems "${SYSTEMS[@]}"
prepare_bench_dir
RESULTS=$DIR/results/r1
PG_SOCK=$DIR/pgsock
PG_DATA=$MNT/pgdata

# as_postgres CMD ARGS...: runs a PostgreSQL program as the `postgres` user (it refuses root).
as_postgres() {
    setpriv --reuid=postgres --regid=postgres --init-groups -- "$@"
}

cleanup() {
    if [[ -f $PG_DATA/postmaster.pid ]]; then
        as_postgres "$PG_BIN/pg_ctl" -D "$PG_DATA" -m immediate -w stop >/dev/null 2>&1 || true
    fi
    cleanup_mounts
}
trap cleanup EXIT

# remount_cold SYSTEM: the file system at $MNT stopped and started again with empty caches.
remount_cold() {
    local system=$1
    case $system in
        cairn | cairn-base)
            local bin
            bin=$(cairn_of "$system")
            "$bin" --state-dir "$CAIRN_STATE" unmount tank/fs >/dev/null
            pkill -INT -f "$CAIRN_STATE serve" 2>/dev/null || true
            for _ in $(seq 1 100); do
                pgrep -f "$CAIRN_STATE serve" >/dev/null || break
                sleep 0.1
            done
            if pgrep -f "$CAIRN_STATE serve" >/dev/null; then
                echo "the cairn server did not stop" >&2
                exit 1
            fi
            "$bin" --state-dir "$CAIRN_STATE" mount tank/fs "$MNT" >/dev/null 2>&1
            ;;
        zfs-fuse)
            zpool export zbench
            zpool import -d "$DIR" zbench
            ;;
        ext4)
            umount "$MNT"
            mount "$LOOP" "$MNT"
            ;;
        raw) ;; # its only cache is the kernel's, dropped below
    esac
    sync
    echo 3 >/proc/sys/vm/drop_caches
}

# run_fio SYSTEM ROW ARGS...: one fio job on $MNT, JSON to results/SYSTEM.ROW.json.
run_fio() {
    local system=$1 row=$2
    shift 2
    timeout $((RUNTIME + 600)) fio --name="$row" --directory="$MNT" --output-format=json \
        --output="$RESULTS/$system.$row.json" --group_reporting=1 "$@" \
        2>"$RESULTS/$system.$row.stderr"
}

# creates SYSTEM: files per second for 20,000 creates of 4 KiB in one directory.
creates() {
    local system=$1 start end
    mkdir "$MNT/many"
    start=$(date +%s.%N)
    python3 - "$MNT/many" <<'EOF'
import os, sys
d = sys.argv[1]
block = b"x" * 4096
for i in range(20000):
    with open(os.path.join(d, f"f{i:06d}"), "wb") as f:
        f.write(block)
EOF
    sync -f "$MNT/many"
    end=$(date +%s.%N)
    python3 -c "print(20000 / ($end - $start))" >"$RESULTS/$system.creates.txt"
}

# many_files: 100,000 empty files in $MNT/many, synced.
many_files() {
    mkdir "$MNT/many"
    python3 - "$MNT/many" <<'EOF'
import os, sys
d = sys.argv[1]
for i in range(100000):
    os.close(os.open(os.path.join(d, f"f{i:06d}"), os.O_CREAT | os.O_WRONLY, 0o644))
EOF
    sync -f "$MNT/many"
}

# timed_rate SYSTEM ROW COUNT CMD...: runs CMD (output dropped) and writes COUNT per second
# of its run to results/SYSTEM.ROW.txt.
timed_rate() {
    local system=$1 row=$2 count=$3 start end
    shift 3
    start=$(date +%s.%N)
    "$@" >/dev/null
    end=$(date +%s.%N)
    python3 -c "print($count / ($end - $start))" >"$RESULTS/$system.$row.txt"
}

# usr_share_replica DIR: /usr/share's tree under DIR (directories, symlinks, and files of the
# same sizes left sparse); prints the number of entries.
usr_share_replica() {
    python3 - /usr/share "$1" <<'EOF'
import os, sys
source, target = sys.argv[1], sys.argv[2]
entries = 0
for root, dirs, files in os.walk(source):
    into = os.path.join(target, os.path.relpath(root, source))
    os.makedirs(into, exist_ok=True)
    entries += 1
    for name in files:
        path, copy = os.path.join(root, name), os.path.join(into, name)
        if os.path.islink(path):
            os.symlink(os.readlink(path), copy)
        elif os.path.isfile(path):
            with open(copy, "wb") as f:
                f.truncate(os.path.getsize(path))
        else:
            continue
        entries += 1
    for name in dirs:
        path = os.path.join(root, name)
        if os.path.islink(path):
            os.symlink(os.readlink(path), os.path.join(into, name))
            entries += 1
print(entries)
EOF
}

# pgbench SYSTEM: a PostgreSQL cluster on $MNT, `pgbench -i -s 10`, then PGBENCH_RUNTIME seconds
# of 4 clients; pgbench's report to results/SYSTEM.pgbench.txt.
pgbench_row() {
    local system=$1 out=$RESULTS/$1.pgbench
    mkdir -p "$PG_SOCK" "$PG_DATA"
    chown postgres: "$PG_SOCK" "$PG_DATA"
    chmod 700 "$PG_DATA"
    as_postgres "$PG_BIN/initdb" -D "$PG_DATA" -A trust -U postgres --no-instructions \
        >"$out.initdb.log" 2>&1
    as_postgres "$PG_BIN/pg_ctl" -D "$PG_DATA" -l "$PG_SOCK/$system.log" -w -t 300 \
        -o "-p 5432 -k $PG_SOCK -c listen_addresses=''" start >/dev/null
    local connect=(-h "$PG_SOCK" -p 5432 -U postgres)
    as_postgres "$PG_BIN/pgbench" "${connect[@]}" -i -s 10 -q postgres >"$out.init.log" 2>&1
    as_postgres "$PG_BIN/pgbench" "${connect[@]}" -c 4 -j 2 -T "$PGBENCH_RUNTIME" postgres \
        >"$out.txt" 2>"$out.stderr"
    as_postgres "$PG_BIN/pg_ctl" -D "$PG_DATA" -m fast -w -t 300 stop >/dev/null
}

for round in $(seq 1 "$ROUNDS"); do
RESULTS=$DIR/results/r$round
mkdir -p "$RESULTS"
for system in "${SYSTEMS[@]}"; do
    for row in "${ROWS[@]}"; do
        log "round $round/$ROUNDS, $system: $row"
        case $row in
            dsync-1 | dsync-16)
                mount_system "$system" 128K
                jobs=${row#dsync-}
                run_fio "$system" "$row" --rw=randwrite --bs=8k --size=128m --numjobs="$jobs" \
                    --iodepth=1 --ioengine=psync --sync=dsync --time_based=1 --runtime="$RUNTIME" \
                    --ramp_time=2
                ;;
            rewrite-128k | aligned-8k)
                if [[ $row == rewrite-128k ]]; then mount_system "$system" 128K; else mount_system "$system" 8K; fi
                # Lay the file out first (whole records), then rewrite 8 KiB pieces at random.
                fio --name=layout --directory="$MNT" --filename=rw.dat --rw=write --bs=1m \
                    --size=512m --end_fsync=1 >/dev/null
                if [[ $system == cairn* ]]; then
                    "$(cairn_of "$system")" --state-dir "$CAIRN_STATE" pool sync tank >/dev/null
                fi
                run_fio "$system" "$row" --filename=rw.dat --rw=randwrite --bs=8k --size=512m \
                    --iodepth=1 --ioengine=psync --time_based=1 --runtime="$RUNTIME" \
                    --ramp_time=2 --end_fsync=1
                ;;
            read-cached)
                mount_system "$system" 128K
                fio --name=layout --directory="$MNT" --filename=rd.dat --rw=write --bs=1m \
                    --size=256m --end_fsync=1 >/dev/null
                run_fio "$system" "$row" --filename=rd.dat --rw=randread --bs=8k --size=256m \
                    --iodepth=1 --ioengine=psync --time_based=1 --runtime="$RUNTIME" --ramp_time=2
                ;;
            read-uncached)
                mount_system "$system" 8K
                fio --name=layout --directory="$MNT" --filename=cold.dat --rw=write --bs=1m \
                    --size=2g --end_fsync=1 >/dev/null
                remount_cold "$system"
                run_fio "$system" "$row" --filename=cold.dat --rw=randread --bs=8k --size=2g \
                    --iodepth=1 --ioengine=psync --time_based=1 --runtime="$RUNTIME"
                ;;
            seq-write)
                mount_system "$system" 128K
                run_fio "$system" "$row" --filename=seq.dat --rw=write --bs=1m --size=1g \
                    --ioengine=psync --end_fsync=1
                ;;
            seq-read)
                mount_system "$system" 128K
                fio --name=layout --directory="$MNT" --filename=seq.dat --rw=write --bs=1m \
                    --size=1g --end_fsync=1 >/dev/null
                sync
                echo 3 >/proc/sys/vm/drop_caches
                run_fio "$system" "$row" --filename=seq.dat --rw=read --bs=1m --size=1g \
                    --ioengine=psync
                ;;
            creates)
                mount_system "$system" 128K
                creates "$system"
                ;;
            pgbench)
                mount_system "$system" 8K
                pgbench_row "$system"
                ;;
            dbench-4)
                mount_system "$system" 128K
                timeout $((DBENCH_RUNTIME + 600)) dbench -D "$MNT" -t "$DBENCH_RUNTIME" 4 \
                    >"$RESULTS/$system.dbench-4.txt" 2>&1
                ;;
            ls-l | rm-rf)
                mount_system "$system" 128K
                many_files
                ls -l "$MNT/many" >/dev/null
                if [[ $row == ls-l ]]; then
                    timed_rate "$system" "$row" 100000 ls -l "$MNT/many"
                else
                    timed_rate "$system" "$row" 100000 rm -rf "$MNT/many"
                fi
                ;;
            find-ls)
                mount_system "$system" 128K
                entries=$(usr_share_replica "$MNT/share")
                sync -f "$MNT/share"
                find "$MNT/share" -ls >/dev/null
                timed_rate "$system" "$row" "$entries" find "$MNT/share" -ls
                ;;
        esac
    done
    cleanup
    # One 4 GiB image (or the raw system's files) at a time on the disk.
    rm -f "$DIR/$system.img"
    rm -rf "$DIR/raw-fs"
done
done

python3 - "$DIR/results" "${SYSTEMS[@]}" -- "${ROWS[@]}" <<'EOF'
import json, os, statistics, sys
results_root = sys.argv[1]
rounds = sorted(os.path.join(results_root, d) for d in os.listdir(results_root))
split = sys.argv.index("--")
systems, rows = sys.argv[2:split], sys.argv[split + 1:]

def reported(path, prefix):
    """The number after `prefix` on the first line of a tool's report that starts with it."""
    if not os.path.exists(path):
        return None
    for line in open(path):
        if line.strip().startswith(prefix):
            try:
                return float(line.strip()[len(prefix):].split()[0])
            except (ValueError, IndexError):
                return None
    return None

def value(system, row):
    """The median over rounds of the row's figure (None when no round has one)."""
    found = [v for v in (round_value(results, system, row) for results in rounds) if v]
    return statistics.median(found) if found else None

def each_round(system, row):
    return [round_value(results, system, row) for results in rounds]

def round_value(results, system, row):
    if row == "pgbench":
        return reported(os.path.join(results, f"{system}.pgbench.txt"), "tps = ")
    if row == "dbench-4":
        return reported(os.path.join(results, f"{system}.dbench-4.txt"), "Throughput ")
    if row in ("creates", "ls-l", "rm-rf", "find-ls"):
        path = os.path.join(results, f"{system}.{row}.txt")
        return float(open(path).read()) if os.path.exists(path) else None
    path = os.path.join(results, f"{system}.{row}.json")
    if not os.path.exists(path):
        return None
    try:
        job = json.load(open(path))["jobs"][0]
    except (ValueError, KeyError, IndexError):
        return None
    if row.startswith("seq"):
        side = job["write"] if row == "seq-write" else job["read"]
        return side["bw_bytes"] / 2**20
    side = job["read"] if row.startswith("read") else job["write"]
    return side["iops"]

units = {"seq-write": "MiB/s", "seq-read": "MiB/s", "creates": "files/s", "pgbench": "tps",
         "dbench-4": "MB/s", "ls-l": "files/s", "rm-rf": "files/s", "find-ls": "entries/s"}
against = [peer for peer in ("cairn-base", "zfs-fuse", "ext4", "raw") if peer in systems]
print("| row | unit | " + " | ".join(systems) + " | "
      + " | ".join(f"cairn / {peer}" for peer in against) + " |")
print("|---|---|" + "---:|" * (len(systems) + len(against)))
table = {}
for row in rows:
    cells, values = [], {}
    for system in systems:
        v = value(system, row)
        values[system] = v
        cells.append("–" if v is None else f"{v:,.0f}")
    table[row] = values
    def ratio(a, b):
        x, y = values.get(a), values.get(b)
        return "–" if not x or not y else f"{x / y:.2f}×"
    print(f"| {row} | {units.get(row, 'IOPS')} | " + " | ".join(cells) + " | "
          + " | ".join(ratio("cairn", peer) for peer in against) + " |")
if len(rounds) > 1:
    print(f"\nMedians of {len(rounds)} rounds; each round's figures:\n")
    print("| row | " + " | ".join(systems) + " |")
    print("|---|" + "---|" * len(systems))
    for row in rows:
        cells = [", ".join("–" if v is None else f"{v:,.0f}" for v in each_round(s, row))
                 for s in systems]
        print(f"| {row} | " + " | ".join(cells) + " |")
r = table.get("rewrite-128k", {}).get("cairn"), table.get("aligned-8k", {}).get("cairn")
if all(r):
    print(f"\ncairn 8 KiB rewrites into 128K records / into 8K records: {r[0] / r[1]:.2f}× (target: within 2×, i.e. ≥ 0.5×)")
EOF
