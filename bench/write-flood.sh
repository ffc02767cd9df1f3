#!/usr/bin/env bash
# A deep queue of large writes against `cairn serve --arc-max 512M`, several times on fresh pools
# (issue 13, first acceptance point).
#
#   bench/write-flood.sh [--runs N] [--seed S]
#
# Runs the CI test `write_flood` (crates/cairn/tests/write_flood.rs) N times (default 5), each
# with its own request plan (seeds S, S+1, ...; default 1) and its own fresh pool: a mirror of two
# 3 GiB files, one 1 GiB volume, four NBD connections pipelining 184 requests of up to 32 MiB
# with FUA writes and FLUSHes among them. Each run passes when no connection waited 5 s for a
# reply with requests outstanding, every request succeeded, the server's VmHWM stayed within the
# memory budget it stated (and under 4 GiB), and its resident memory fell back to the cache's
# limit plus the budget's fixed part within a minute. The script prints one line per run (pass
# or fail, budget, peak, longest reply gap, resident memory after the burst) and the tally;
# it exits non-zero unless every run passed. The server is the test profile's build, as in CI.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
RUNS=5
SEED=1
while [[ $# -gt 0 ]]; do
    case $1 in
        --runs) RUNS=$2; shift 2 ;;
        --seed) SEED=$2; shift 2 ;;
        -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
        *) echo "unknown argument $1" >&2; exit 2 ;;
    esac
done
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"

log "building the write_flood test"
(cd "$ROOT" && cargo test -p cairn --test write_flood --no-run --quiet)

mib() { echo $(($1 / 1048576)); }
passed=0
printf '%-4s %-6s %-5s %10s %10s %9s %13s\n' run seed ok budget VmHWM gap after
for ((run = 1; run <= RUNS; run++)); do
    seed=$((SEED + run - 1))
    log "run $run of $RUNS (seed $seed)"
    out=$(cd "$ROOT" && CAIRN_FLOOD_SEED=$seed cargo test -p cairn --test write_flood --quiet \
        -- --nocapture 2>&1) && ok=pass || ok=FAIL
    peaks=$(grep -o 'flood: budget [0-9]* B, VmHWM [0-9]* B.*gap [0-9.]* s' <<<"$out" || true)
    after=$(grep -o 'resident after the burst [0-9]* B after [0-9.]* s' <<<"$out" || true)
    read -r budget hwm gap < <(sed -E 's/.*budget ([0-9]+) B, VmHWM ([0-9]+) B.*gap ([0-9.]+) s/\1 \2 \3/' <<<"$peaks" || true)
    read -r rss settle < <(sed -E 's/.*burst ([0-9]+) B after ([0-9.]+) s/\1 \2/' <<<"$after" || true)
    printf '%-4s %-6s %-5s %8sMi %8sMi %8ss %7sMi/%ss\n' "$run" "$seed" "$ok" \
        "$(mib "${budget:-0}")" "$(mib "${hwm:-0}")" "${gap:--}" "$(mib "${rss:-0}")" "${settle:--}"
    if [[ $ok == pass ]]; then
        passed=$((passed + 1))
    else
        grep -E 'panicked|waited|exceeds|did not' <<<"$out" | head -5 >&2 || true
    fi
done
echo "$passed of $RUNS runs passed"
[[ $passed == "$RUNS" ]]
