#!/usr/bin/env bash
# Lookups in one large directory as a user sees them, through each file system's mount: cairn
# (FUSE), zfs-fuse 0.7 and ext4 on a loop file, each on a 4 GiB file under --dir. One directory
# grown to 1,000, 100,000 and 1,000,000 empty files; at each size the kernel's dentry and inode
# caches are dropped and stat() of up to 20,000 distinct random names is timed (each a cold
# lookup: one FUSE LOOKUP on the FUSE mounts), after an untimed warm-up of lookups of missing
# names. The in-process view (no FUSE round trip, which hides the directory's own cost) is
# `cargo run --release -p cairn-bench --bin dir-scale`.
#
# Prints, per system and size: creates per second (since the previous size), mean and p99
# lookup time, then each system's lookup time at 1,000,000 entries over that at 1,000 (the
# issue asks for at most 2x). Needs root (mounts, drop_caches) and zfs-fuse installed
# (`apt-get install zfs-fuse`), or pass --systems cairn,ext4.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DIR=$ROOT/target/bench-dir-lookups
SYSTEMS=(cairn zfs-fuse ext4)
while [[ $# -gt 0 ]]; do
    case $1 in
        --dir) DIR=$2; shift 2 ;;
        --systems) IFS=, read -r -a SYSTEMS <<<"$2"; shift 2 ;;
        -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
        *) echo "unknown argument: $1" >&2; exit 2 ;;
    esac
done
# shellcheck source=lib.sh
source "$ROOT/bench/lib.sh"
# shellcheck source=fs-lib.sh
source "$ROOT/bench/fs-lib.sh"
start_fs_bench python3 mkfs.ext4 losetup

for system in "${SYSTEMS[@]}"; do
    log "$system"
    # ext4's default inode count for 4 GiB (262,144) is short of a million files.
    mount_system "$system" 128K 1100000
    python3 "$ROOT/bench/dir-lookups.py" "$MNT/big" | tee "$DIR/results/$system.txt"
done
cleanup

echo
echo "| system | entries | creates/s | lookup mean (µs) | lookup p99 (µs) |"
echo "|---|---:|---:|---:|---:|"
for system in "${SYSTEMS[@]}"; do
    sed -E "s/^([0-9]+) entries: creates ([0-9]+)\/s, lookup mean ([0-9.]+) us p99 ([0-9.]+) us$/| $system | \1 | \2 | \3 | \4 |/" \
        "$DIR/results/$system.txt"
done
echo
for system in "${SYSTEMS[@]}"; do
    awk -v s="$system" '{m[$1] = $7} END {printf "%s: lookup at 1,000,000 entries / at 1,000: %.2fx\n", s, m[1000000] / m[1000]}' \
        "$DIR/results/$system.txt"
done
