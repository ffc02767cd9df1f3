#!/usr/bin/env bash
# Records a block trace from a real volume workload, for bench/cache.sh --volume-trace.
#
#   bench/record-volume-trace.sh [--dir DIR] [--reads N]      (root: it mounts a file system)
#
# A `cairn serve` with CAIRN_READ_TRACE_DIR set serves tank/vol (volblocksize=4K, on a plain
# file); nbdfuse exposes the export as a file, which is formatted ext4 and mounted through a
# loop device. The workload is a small file server's day: a source tree (/usr/include and
# /usr/lib/python3.11, ~180 MiB, ~14,000 files) is copied in; then clients open files with
# Zipf-skewed popularity (N reads, alpha 0.9), each followed by a `stat` of a few neighbours;
# and every N/4 reads a backup job reads the whole tree (`tar c | cat`). The kernel's own page
# cache sits above the volume, as a guest's would: it is dropped every 16 file reads, so what
# reaches the volume is what a guest would miss. Writes are not traced; reads of the copy
# phase are. Prints the trace's path.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DIR=$ROOT/target/bench-cache/volume
READS=20000
while [[ $# -gt 0 ]]; do
    case $1 in
        --dir) DIR=$2; shift 2 ;;
        --reads) READS=$2; shift 2 ;;
        -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
        *) echo "unknown argument: $1" >&2; exit 2 ;;
    esac
done
[[ $(id -u) == 0 ]] || { echo "needs root (mount, drop_caches)" >&2; exit 1; }
for tool in nbdfuse mkfs.ext4 tar python3; do
    command -v "$tool" >/dev/null || { echo "missing tool: $tool" >&2; exit 1; }
done

cargo build --release --quiet -p cairn --manifest-path "$ROOT/Cargo.toml"
CAIRN=$ROOT/target/release/cairn
rm -rf "$DIR"
mkdir -p "$DIR/state" "$DIR/fuse" "$DIR/mnt" "$DIR/trace"
FUSE_PID= SERVER_PID=
cleanup() {
    umount "$DIR/mnt" 2>/dev/null || true
    [[ -n $FUSE_PID ]] && { fusermount3 -u "$DIR/fuse" 2>/dev/null || umount "$DIR/fuse" 2>/dev/null || true; }
    [[ -n $SERVER_PID ]] && { kill "$SERVER_PID" 2>/dev/null; wait "$SERVER_PID" 2>/dev/null || true; }
}
trap cleanup EXIT

"$CAIRN" --state-dir "$DIR/state" pool create --size 2G tank "$DIR/d0.img" >/dev/null
"$CAIRN" --state-dir "$DIR/state" create -V 1G -o volblocksize=4K tank/vol >/dev/null
CAIRN_READ_TRACE_DIR=$DIR/trace "$CAIRN" --state-dir "$DIR/state" serve --listen 127.0.0.1:0 \
    --socket "$DIR/nbd.sock" >"$DIR/serve.log" 2>&1 &
SERVER_PID=$!
for _ in $(seq 100); do [[ -S $DIR/nbd.sock ]] && break; sleep 0.1; done
nbdfuse "$DIR/fuse/disk" "nbd+unix:///tank/vol?socket=$DIR/nbd.sock" &
FUSE_PID=$!
for _ in $(seq 100); do [[ -f $DIR/fuse/disk ]] && break; sleep 0.1; done
mkfs.ext4 -q -F "$DIR/fuse/disk"
mount -o loop "$DIR/fuse/disk" "$DIR/mnt"
mkdir -p "$DIR/mnt/tree"
cp -a /usr/include /usr/lib/python3.11 "$DIR/mnt/tree/"
sync
echo 3 >/proc/sys/vm/drop_caches

python3 - "$DIR/mnt/tree" "$READS" <<'EOF'
import os, random, subprocess, sys
root, reads = sys.argv[1], int(sys.argv[2])
rng = random.Random(42)
files = sorted(os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs
               if os.path.isfile(os.path.join(d, f)) and not os.path.islink(os.path.join(d, f)))
rng.shuffle(files)
weights = [1 / (rank + 1) ** 0.9 for rank in range(len(files))]
def drop():
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")
for n, path in enumerate(rng.choices(files, weights, k=reads)):
    try:
        with open(path, "rb") as f:
            while f.read(1 << 16):
                pass
    except OSError:
        continue
    for neighbour in os.listdir(os.path.dirname(path))[:4]:
        os.lstat(os.path.join(os.path.dirname(path), neighbour))
    if n % 16 == 15:
        drop()
    if n % (reads // 4) == reads // 4 - 1:
        subprocess.run(f"tar -C {root} -cf - . | cat >/dev/null", shell=True, check=True)
        drop()
print(f"{reads} file reads over {len(files)} files, 4 backups", file=sys.stderr)
EOF
umount "$DIR/mnt"
cleanup
trap - EXIT
sleep 1
echo "$DIR/trace/tank_vol.trace"
