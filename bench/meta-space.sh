#!/usr/bin/env bash
# Space that metadata takes, as a user sees it through each file system's mount: cairn (FUSE),
# zfs-fuse 0.7 and ext4 on a loop file, each on a 4 GiB file under --dir. In one directory,
# COUNT (2,000) empty directories, then COUNT empty files, then one user extended attribute on
# each of those files, then a copy (`cp -a`) of TREE (/usr/share/doc: thousands of small
# files, a few large ones); after each step the file system is synced (cairn: `pool sync`;
# zfs-fuse: `sync` and a wait past its 5 s txg timeout) and the used space read from statfs
# (`df`'s used: blocks minus free blocks).
#
# Prints, per system, bytes per empty directory, per empty file and per first xattr, and the
# bytes the copy of TREE took. Needs root (mounts) and zfs-fuse installed (`apt-get install
# zfs-fuse`), or pass --systems cairn,ext4.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DIR=$ROOT/target/bench-meta-space
SYSTEMS=(cairn zfs-fuse ext4)
COUNT=2000
TREE=/usr/share/doc
while [[ $# -gt 0 ]]; do
    case $1 in
        --dir) DIR=$2; shift 2 ;;
        --systems) IFS=, read -r -a SYSTEMS <<<"$2"; shift 2 ;;
        --count) COUNT=$2; shift 2 ;;
        --tree) TREE=$2; shift 2 ;;
        -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
        *) echo "unknown argument: $1" >&2; exit 2 ;;
    esac
done
# shellcheck source=lib.sh
source "$ROOT/bench/lib.sh"
# shellcheck source=fs-lib.sh
source "$ROOT/bench/fs-lib.sh"
start_fs_bench python3 mkfs.ext4 losetup stat

# settle SYSTEM: everything written so far is on the pool (or disk) and counted by statfs.
settle() {
    sync -f "$MNT"
    case $1 in
        cairn) "$CAIRN" --state-dir "$CAIRN_STATE" pool sync tank >/dev/null ;;
        zfs-fuse) sleep 6 ;;
        ext4) sync ;;
    esac
}

# used_bytes: what statfs says is in use at $MNT.
used_bytes() {
    stat -f -c '%b %f %S' "$MNT" | awk '{print ($1 - $2) * $3}'
}

for system in "${SYSTEMS[@]}"; do
    log "$system"
    mount_system "$system" 128K
    mkdir "$MNT/d" "$MNT/f"
    settle "$system"
    start=$(used_bytes)
    python3 -c "
import os, sys
for i in range(int(sys.argv[2])):
    os.mkdir(os.path.join(sys.argv[1], f'd{i}'))
" "$MNT/d" "$COUNT"
    settle "$system"
    dirs=$(used_bytes)
    python3 -c "
import os, sys
for i in range(int(sys.argv[2])):
    open(os.path.join(sys.argv[1], f'f{i}'), 'w').close()
" "$MNT/f" "$COUNT"
    settle "$system"
    files=$(used_bytes)
    if python3 -c "
import os, sys
for i in range(int(sys.argv[2])):
    os.setxattr(os.path.join(sys.argv[1], f'f{i}'), 'user.tag', b'v')
" "$MNT/f" "$COUNT" 2>"$DIR/results/$system.xattr.err"; then
        settle "$system"
        xattrs=$(used_bytes)
        per_xattr=$(( (xattrs - files) / COUNT ))
    else
        per_xattr="n/a ($(tail -1 "$DIR/results/$system.xattr.err"))"
    fi
    settle "$system"
    before_tree=$(used_bytes)
    cp -a "$TREE" "$MNT/tree"
    settle "$system"
    tree=$(( $(used_bytes) - before_tree ))
    echo "$system $(( (dirs - start) / COUNT )) $(( (files - dirs) / COUNT )) $tree $per_xattr" \
        | tee "$DIR/results/$system.txt"
done
cleanup

echo
echo "Copied: $TREE, $(find "$TREE" | wc -l) names, $(du -s --apparent-size -B1 "$TREE" | cut -f1) bytes of contents"
echo "| system | bytes per empty directory | bytes per empty file | bytes per first xattr | bytes the copy took |"
echo "|---|---:|---:|---:|---:|"
for system in "${SYSTEMS[@]}"; do
    read -r name dir file tree xattr <"$DIR/results/$system.txt"
    echo "| $name | $dir | $file | $xattr | $tree |"
done
