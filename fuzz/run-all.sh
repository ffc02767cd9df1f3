#!/usr/bin/env bash
# Runs every cargo-fuzz target of cairn for SECONDS seconds each (default 20), one after another.
#
#   fuzz/run-all.sh 60          # from anywhere; needs a nightly toolchain and cargo-fuzz
#
# Per-target logs go to fuzz/target/fuzz-logs/TARGET.log, the growing corpus to
# fuzz/corpus/TARGET/ and crashing inputs to fuzz/artifacts/TARGET/. Every target is run even if
# an earlier one fails; the script exits non-zero if any target crashed or failed to build.
# Environment: CAIRN_FUZZ_TOOLCHAIN (default "nightly").
set -euo pipefail

seconds="${1:-20}"
if ! [[ "$seconds" =~ ^[1-9][0-9]*$ ]]; then
    echo "usage: $0 [SECONDS]   (positive integer, per target)" >&2
    exit 2
fi
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
toolchain="${CAIRN_FUZZ_TOOLCHAIN:-nightly}"
fuzz=(cargo "+$toolchain" fuzz)

if ! cargo "+$toolchain" fuzz --version >/dev/null 2>&1; then
    echo "cargo-fuzz or the $toolchain toolchain is missing:" >&2
    echo "  rustup toolchain install $toolchain && cargo install cargo-fuzz --locked" >&2
    exit 2
fi

# Build every target once up front (same flags as `fuzz run`, so the runs below reuse it).
"${fuzz[@]}" build --fuzz-dir "$here"

mapfile -t targets < <("${fuzz[@]}" list --fuzz-dir "$here")
logs="$here/target/fuzz-logs"
mkdir -p "$logs"
failed=()
summary=()
for target in "${targets[@]}"; do
    echo "=== $target: ${seconds}s"
    log="$logs/$target.log"
    # The first corpus directory is where libFuzzer adds inputs; the committed seeds are read too.
    mkdir -p "$here/corpus/$target"
    if "${fuzz[@]}" run --fuzz-dir "$here" "$target" "$here/corpus/$target" "$here/seeds/$target" -- \
        -max_total_time="$seconds" -print_final_stats=1 \
        >"$log" 2>&1; then
        status=ok
    else
        status=FAILED
        failed+=("$target")
        tail -n 60 "$log" >&2
    fi
    runs="$(grep -Eo 'Done [0-9]+ runs in [0-9]+ second' "$log" | tail -n 1 || true)"
    cov="$(grep -Eo 'cov: [0-9]+ ft: [0-9]+ corp: [0-9]+' "$log" | tail -n 1 || true)"
    summary+=("$(printf '%-13s %-6s %s | %s' "$target" "$status" "${runs:-no run count}" "${cov:-}")")
done

echo "=== summary (${seconds}s per target; logs in $logs)"
printf '%s\n' "${summary[@]}"
if ((${#failed[@]})); then
    echo "crashed or failed: ${failed[*]} (inputs in $here/artifacts/)" >&2
    exit 1
fi
