#!/usr/bin/env bash
# proxy.sh - memcached conformance through cocytus-proxy: libmemcached's
# memccapable in ASCII (-a) and binary (-b) mode must pass 27/27 through a
# proxy in front of (1) a plain cocytus-server without a cluster, and (2) a
# 3-node plain cluster from scripts/cluster, where the proxy routes every
# key to its slot's owner.  Everything runs on free loopback ports and is
# stopped by the trap.  Exits 77 (skip) when memccapable is not installed.
set -u

EXPECTED_PASSES=27          # what memccapable 1.1.x runs per mode
READY_TIMEOUT_TENTHS=50     # 5 s for a process to start accepting
RUN_TIMEOUT=90              # seconds for one memccapable run
NODES=3

case "$0" in
    */*) script_dir=$(cd "${0%/*}" && pwd) ;;
    *) script_dir=$(pwd) ;;
esac
server_bin=${COCYTUS_SERVER:-$script_dir/../../memcached/cocytus-server}
build_dir=$(cd "$(dirname "$server_bin")/.." && pwd)
proxy_bin=${COCYTUS_PROXY:-$build_dir/client/cocytus-proxy}
cluster_script=$script_dir/../../scripts/cluster

server_pid=""
proxy_pid=""
cluster_dir=""
failures=0

memccapable_bin=${MEMCCAPABLE:-}
[ -x "$memccapable_bin" ] || memccapable_bin=$(command -v memccapable || command -v memcapable || true)
if [ -z "$memccapable_bin" ]; then
    echo "SKIP: memccapable not installed (apt-get install libmemcached-tools)"
    exit 77
fi
for bin in "$server_bin" "$proxy_bin"; do
    if [ ! -x "$bin" ]; then
        echo "FAIL: $bin not built"
        exit 1
    fi
done

stop_pid() {
    local pid=$1
    [ -n "$pid" ] || return 0
    kill -TERM "$pid" 2>/dev/null
    for _ in $(seq 30); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    kill -KILL "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
}

cleanup() {
    stop_pid "$proxy_pid"
    proxy_pid=""
    stop_pid "$server_pid"
    server_pid=""
    if [ -n "$cluster_dir" ]; then
        bash "$cluster_script" down --dir "$cluster_dir" >/dev/null 2>&1
        rm -rf "$cluster_dir"
        cluster_dir=""
    fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

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

# wait_port PID PORT: true once PORT accepts while PID lives.
wait_port() {
    local pid=$1 port=$2
    for _ in $(seq "$READY_TIMEOUT_TENTHS"); do
        kill -0 "$pid" 2>/dev/null || return 1
        port_is_open "$port" && return 0
        sleep 0.1
    done
    return 1
}

# Starts a plain server; sets server_pid and server_port.
start_server() {
    local user_args=()
    [ "$(id -u)" -eq 0 ] && user_args=(-u root)
    for _ in 1 2 3 4 5; do
        server_port=$(pick_port) || continue
        "$server_bin" -p "$server_port" -l 127.0.0.1 -U 0 "${user_args[@]}" </dev/null >/dev/null 2>&1 &
        server_pid=$!
        wait_port "$server_pid" "$server_port" && return 0
        stop_pid "$server_pid"
        server_pid=""
    done
    echo "FAIL: $server_bin did not start"
    return 1
}

# start_proxy SEEDS: sets proxy_pid and proxy_port.
start_proxy() {
    local seeds=$1
    for _ in 1 2 3 4 5; do
        proxy_port=$(pick_port) || continue
        "$proxy_bin" -p "$proxy_port" -l 127.0.0.1 --seeds "$seeds" -W 5 </dev/null >/dev/null 2>&1 &
        proxy_pid=$!
        wait_port "$proxy_pid" "$proxy_port" && return 0
        stop_pid "$proxy_pid"
        proxy_pid=""
    done
    echo "FAIL: $proxy_bin did not start with --seeds $seeds"
    return 1
}

# run_mode WHAT MODE: one memccapable run through the proxy.
run_mode() {
    local what=$1 mode=$2 output status passes
    echo "== memccapable $mode through cocytus-proxy (port $proxy_port) to $what"
    output=$(timeout "$RUN_TIMEOUT" "$memccapable_bin" "$mode" -t 5 -h 127.0.0.1 -p "$proxy_port" 2>&1)
    status=$?
    echo "$output"
    passes=$(printf '%s\n' "$output" | grep -c '\[pass\]$')
    if [ "$status" -ne 0 ] \
        || ! printf '%s\n' "$output" | grep -qx 'All tests passed' \
        || [ "$passes" -ne "$EXPECTED_PASSES" ]; then
        echo "FAIL: memccapable $mode to $what: exit $status, $passes/$EXPECTED_PASSES passed"
        failures=$((failures + 1))
        return 1
    fi
    echo "ok: memccapable $mode to $what: $passes/$EXPECTED_PASSES passed"
}

# concurrent_load WHAT: memcaslap with 8 connections on the proxy's worker
# threads for 3 s, every value read checked (its keys hold control
# characters: the proxy must carry them).  Misses are allowed (small memory,
# values up to 1 MB evict); a wrong value is not.
concurrent_load() {
    local what=$1 output failed gets
    local slap_bin
    slap_bin=$(command -v memcaslap || command -v memcslap || true)
    if [ -z "$slap_bin" ]; then
        echo "note: memcaslap not installed; concurrent load skipped"
        return 0
    fi
    echo "== memcaslap, 8 connections, through cocytus-proxy to $what"
    output=$(timeout 30 "$slap_bin" -s "127.0.0.1:$proxy_port" -c 8 -T 2 -t 3s -v 1 2>&1)
    failed=$(printf '%s\n' "$output" | awk '/^verify_failed:/ { print $2 }')
    gets=$(printf '%s\n' "$output" | awk '/^cmd_get:/ { print $2 }')
    printf '%s\n' "$output" | grep -E '^(cmd_get|cmd_set|verify_misses|verify_failed|Run time)' 
    if [ -z "$gets" ] || [ "$gets" -eq 0 ] || [ "${failed:-1}" -ne 0 ] \
        || printf '%s\n' "$output" | grep -q 'CLIENT_ERROR\|SERVER_ERROR'; then
        echo "FAIL: memcaslap through the proxy to $what: gets=${gets:-?} verify_failed=${failed:-?}"
        failures=$((failures + 1))
        return 1
    fi
    echo "ok: memcaslap through the proxy to $what: $gets gets, none wrong"
}

# --- 1. a plain server -------------------------------------------------------
if start_server && start_proxy "127.0.0.1:$server_port"; then
    run_mode "a plain server" -a
    run_mode "a plain server" -b
else
    failures=$((failures + 1))
fi
cleanup

# --- 2. a 3-node plain cluster ----------------------------------------------
if [ ! -x "$build_dir/cocytus/cocytus-node" ] || [ ! -f "$cluster_script" ]; then
    echo "FAIL: cocytus-node or scripts/cluster missing"
    exit 1
fi
export COCYTUS_BUILD_DIR=$build_dir
cluster_dir=$(mktemp -d "${TMPDIR:-/tmp}/proxy-cluster.XXXXXX")
up=0
for _ in 1 2 3; do
    base=$((26000 + 2 * (RANDOM % 3000)))
    if bash "$cluster_script" up --nodes "$NODES" --scheme plain --no-proxy --memory 16 \
        --dir "$cluster_dir" --base-port "$base" >/dev/null 2>&1; then
        up=1
        break
    fi
    bash "$cluster_script" down --dir "$cluster_dir" >/dev/null 2>&1
done
if [ "$up" -eq 1 ]; then
    seeds=$(awk '{ printf "%s%s", sep, $5; sep = "," }' "$cluster_dir/endpoints")
    if start_proxy "$seeds"; then
        run_mode "a $NODES-node plain cluster" -a
        run_mode "a $NODES-node plain cluster" -b
        concurrent_load "a $NODES-node plain cluster"
    else
        failures=$((failures + 1))
    fi
else
    echo "FAIL: scripts/cluster up --nodes $NODES --scheme plain"
    failures=$((failures + 1))
fi

[ "$failures" -eq 0 ]
