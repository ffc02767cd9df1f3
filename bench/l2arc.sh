#!/usr/bin/env bash
# The SSD tier end to end (issue 14): an emulated hdd-7200 pool with and without an emulated
# nvme cache device under random 8 KiB reads over NBD (fio). See bench/l2arc.py for the steps.
#
#   bench/l2arc.sh [--working-set SIZE] [--warm-seconds N] [--steady-seconds N] [--dir DIR]
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DIR=$ROOT/target/bench-l2arc
ARGS=()
while [[ $# -gt 0 ]]; do
    case $1 in
        --dir) DIR=$2; shift 2 ;;
        -h|--help) sed -n '2,6p' "$0"; exit 0 ;;
        *) ARGS+=("$1"); shift ;;
    esac
done
for tool in cargo fio python3; do
    command -v "$tool" >/dev/null || { echo "missing tool: $tool" >&2; exit 1; }
done
# shellcheck source=lib.sh
source "$ROOT/bench/lib.sh"
build_release
exec python3 "$ROOT/bench/l2arc.py" --cairn "$CAIRN" --dir "$DIR" "${ARGS[@]}"
