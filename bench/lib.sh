# Sourced by the bench scripts (after they set ROOT): timestamped progress lines, the release
# build, servers stopped on exit, and a cairn server started and stopped on STATE (for the
# scripts that set DIR and STATE).

START=$(date +%s)
log() { printf '[%4ds] %s\n' $(($(date +%s) - START)) "$*" >&2; }

# Builds cairn in release (plus any `-p PACKAGE` given) and sets CAIRN to the binary (under
# CARGO_TARGET_DIR when set, as cargo itself does).
build_release() {
    log "building cairn${*:+ ($*)} (release)"
    (cd "$ROOT" && cargo build --release -p cairn "$@" --quiet)
    CAIRN=${CARGO_TARGET_DIR:-$ROOT/target}/release/cairn
}

# Each server's PID goes into PID[name]; after `stop_servers_on_exit`, every one of them is
# stopped (TERM, then waited for) when the script exits, however it exits.
declare -A PID
stop_servers() {
    local t
    for t in "${!PID[@]}"; do
        kill -TERM "${PID[$t]}" 2>/dev/null || true
    done
    for t in "${!PID[@]}"; do
        wait "${PID[$t]}" 2>/dev/null || true
    done
}
stop_servers_on_exit() { trap stop_servers EXIT; }

# Waits until the server PID has made its socket PATH (30 s at most); exits if it died.
wait_for_socket() { # PATH PID
    local i
    for i in $(seq 1 300); do
        [[ -S $1 ]] && return 0
        kill -0 "$2" 2>/dev/null || { echo "server exited; see $DIR/serve.log" >&2; exit 1; }
        sleep 0.1
    done
    echo "no socket $1 after 30 s" >&2
    exit 1
}

# `cairn serve` on STATE (ARC at most 2 GiB, log in DIR/serve.log) as PID[cairn], and its stop.
start_cairn_server() {
    rm -f "$STATE/nbd.sock"
    # Not through a wrapper function: one in the background is a subshell, and TERM must reach
    # cairn itself.
    "$CAIRN" --state-dir "$STATE" serve --arc-max 2G >>"$DIR/serve.log" 2>&1 &
    PID[cairn]=$!
    wait_for_socket "$STATE/nbd.sock" "${PID[cairn]}"
}
stop_cairn_server() {
    kill -TERM "${PID[cairn]}"
    wait "${PID[cairn]}" 2>/dev/null || true
    unset 'PID[cairn]'
}
