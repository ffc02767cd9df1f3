# Sourced by the bench scripts that start servers: each server's PID goes into PID[name], and
# every one of them is stopped (TERM, then waited for) when the script exits, however it exits.

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
trap stop_servers EXIT
