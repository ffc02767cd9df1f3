#!/usr/bin/env bash
# Cache policies on the same request traces, in one run (issue 5): cairn's ARC (cairn-arc, with
# its sequential prefetch) against libCacheSim's LRU, ARC, S3-FIFO, SIEVE and W-TinyLFU.
#
#   bench/cache.sh [--requests N] [--catalogue N] [--cache-percent P] [--volume-trace FILE]
#
# Builds `cache-sim` (release), installs the Python packages `libcachesim` and `numpy` if they are
# missing, writes the traces under target/bench-cache and prints a markdown table of miss ratios
# with the issue's targets. See bench/cache.py for the traces.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DIR=$ROOT/target/bench-cache
mkdir -p "$DIR"
python3 -c 'import libcachesim, numpy' 2>/dev/null ||
    python3 -m pip install --quiet libcachesim numpy
cargo build --release --quiet -p cairn-bench --bin cache-sim --manifest-path "$ROOT/Cargo.toml"
exec python3 "$ROOT/bench/cache.py" --cache-sim "$ROOT/target/release/cache-sim" --dir "$DIR" "$@"
