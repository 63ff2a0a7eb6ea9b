#!/usr/bin/env bash
# Protocol conformance: runs libmemcached's memccapable in ASCII (-a) and
# binary (-b) mode, each against a freshly started server on a free loopback
# port.  Passes only if both modes report all 27 tests passed; exits 77
# (automake's "skip") when memccapable is not installed.
set -u

EXPECTED_PASSES=27          # what memccapable 1.1.x runs per mode (memcached passes all)
READY_TIMEOUT_TENTHS=50     # 5 s for the server to start accepting
RUN_TIMEOUT=60              # seconds for one memccapable run

case "$0" in
    */*) script_dir=$(cd "${0%/*}" && pwd) ;;
    *) script_dir=$(pwd) ;;
esac
server_bin=${COCYTUS_SERVER:-$script_dir/../../memcached/cocytus-server}
server_pid=""

memccapable_bin=${MEMCCAPABLE:-}
[ -x "$memccapable_bin" ] || memccapable_bin=$(command -v memccapable || command -v memcapable || true)
if [ -z "$memccapable_bin" ]; then
    echo "SKIP: memccapable not installed (apt-get install libmemcached-tools)"
    exit 77
fi
if [ ! -x "$server_bin" ]; then
    echo "FAIL: server binary $server_bin not found (set COCYTUS_SERVER)"
    exit 1
fi

stop_server() {
    [ -n "$server_pid" ] || return 0
    kill -TERM "$server_pid" 2>/dev/null
    for _ in $(seq 30); do
        kill -0 "$server_pid" 2>/dev/null || break
        sleep 0.1
    done
    kill -KILL "$server_pid" 2>/dev/null
    wait "$server_pid" 2>/dev/null
    server_pid=""
}
trap stop_server EXIT
trap 'stop_server; exit 130' INT
trap 'stop_server; exit 143' TERM

port_is_open() {
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

pick_port() {
    if command -v python3 >/dev/null 2>&1; then
        python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
        return
    fi
    local port
    for _ in $(seq 50); do
        port=$((20000 + RANDOM % 40000))
        if ! port_is_open "$port"; then
            echo "$port"
            return
        fi
    done
    return 1
}

# Starts the server; sets server_pid and port.  Retries on another port.
start_server() {
    local user_args=()
    [ "$(id -u)" -eq 0 ] && user_args=(-u root)
    for _ in 1 2 3 4 5; do
        port=$(pick_port) || continue
        "$server_bin" -p "$port" -l 127.0.0.1 -U 0 "${user_args[@]}" </dev/null >/dev/null 2>&1 &
        server_pid=$!
        for _ in $(seq "$READY_TIMEOUT_TENTHS"); do
            if ! kill -0 "$server_pid" 2>/dev/null; then
                break
            fi
            if port_is_open "$port"; then
                return 0
            fi
            sleep 0.1
        done
        stop_server
    done
    echo "FAIL: $server_bin did not start"
    return 1
}

# Runs one memccapable mode; returns 0 only on a complete pass.
run_mode() {
    local mode=$1 output status passes
    start_server || return 1
    echo "== memccapable $mode against $server_bin on port $port"
    output=$(timeout "$RUN_TIMEOUT" "$memccapable_bin" "$mode" -t 5 -h 127.0.0.1 -p "$port" 2>&1)
    status=$?
    stop_server
    echo "$output"
    passes=$(printf '%s\n' "$output" | grep -c '\[pass\]$')
    if [ "$status" -ne 0 ] \
        || ! printf '%s\n' "$output" | grep -qx 'All tests passed' \
        || [ "$passes" -ne "$EXPECTED_PASSES" ]; then
        echo "FAIL: memccapable $mode: exit $status, $passes/$EXPECTED_PASSES passed"
        return 1
    fi
    echo "ok: memccapable $mode: $passes/$EXPECTED_PASSES passed"
    return 0
}

result=0
run_mode -a || result=1
run_mode -b || result=1
exit "$result"
