# Sourced by the bench scripts (after they set ROOT): timestamped progress lines, the release
# build, and servers stopped on exit.

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
