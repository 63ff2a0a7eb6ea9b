#!/usr/bin/env bash
# proxy.sh - memcached conformance through cocytus-proxy: libmemcached's
# memccapable in ASCII (-a) and binary (-b) mode must pass 27/27 through a
# proxy in front of (1) a plain cocytus-server without a cluster, and (2) a
# 3-node plain cluster from scripts/cluster, where the proxy routes every
# key to its slot's owner; then `stats backends` must show every server up
# and used.  Everything runs on free loopback ports and is
# stopped by the trap.  Exits 77 (skip) when memccapable is not installed.
set -u

RUN_TIMEOUT=90              # seconds for one memccapable run
NODES=3

script_dir=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$script_dir/lib.sh"
proxy_bin=${COCYTUS_PROXY:-$build_dir/client/cocytus-proxy}

server_pid=""
proxy_pid=""
cluster_dir=""

need_memccapable
need_built "$server_bin" "$proxy_bin"

cleanup() {
    stop_pid "$proxy_pid"
    proxy_pid=""
    stop_pid "$server_pid"
    server_pid=""
    cluster_remove "$cluster_dir"
    cluster_dir=""
}
on_exit cleanup

# proxy_for SEEDS: a proxy in front of SEEDS (start_proxy: sets proxy_pid
# and proxy_port); a failed check if it never came up.
proxy_for() {
    start_proxy /dev/null --seeds "$1" -W 5 && return 0
    fail "$proxy_bin did not start with --seeds $1"
    return 1
}

# run_mode WHAT MODE: one memccapable run through the proxy.
run_mode() {
    memccapable_check "through cocytus-proxy to $1" "$2" "127.0.0.1:$proxy_port" "$RUN_TIMEOUT"
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
        fail "memcaslap through the proxy to $what: gets=${gets:-?} verify_failed=${failed:-?}"
        return 1
    fi
    ok "memcaslap through the proxy to $what: $gets gets, none wrong"
}

# cas_zero WHAT: a text cas with unique 0 matches no item, as in memcached:
# NOT_FOUND for a missing key, EXISTS for a present one, whose value stays
# (the proxy speaks binary to servers, where a CAS of 0 means "no CAS": it
# used to store the value, a plain set).
cas_zero() {
    local a="127.0.0.1:$proxy_port" k="caszero_$RANDOM" r1 r2 r3
    r1=$(mc "$a" "cas $k 0 0 1 0\r\na\r\n")
    r2=$(mc "$a" "set $k 0 0 1\r\nb\r\n")
    r2="$r2 $(mc "$a" "cas $k 0 0 1 0\r\nc\r\n")"
    r3=$(mc "$a" "get $k\r\n" | tr '\n' ' ')
    if [ "$r1" = NOT_FOUND ] && [ "$r2" = "STORED EXISTS" ] && [ "$r3" = "VALUE $k 0 1 b END " ]; then
        ok "text cas with unique 0 through the proxy to $1: NOT_FOUND, EXISTS, value kept"
    else
        fail "text cas with unique 0 through the proxy to $1: '$r1' / '$r2' / '$r3'"
    fi
}

# bin_verbosity WHAT: a binary verbosity is an unknown command (status
# 0x81), as memcached 1.6 and cocytus-server answer it; the proxy said OK.
bin_verbosity() {
    local status
    status=$(timeout 5 python3 -c '
import socket, struct, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=3)
s.sendall(struct.pack(">BBHBBHIIQI", 0x80, 0x1b, 0, 4, 0, 0, 4, 7, 0, 1))
h = b""
while len(h) < 24:
    h += s.recv(24 - len(h))
print("%04x" % struct.unpack(">H", h[6:8])[0])' "$proxy_port" 2>&1)
    [ "$status" = 0081 ] && ok "binary verbosity through the proxy to $1: unknown command" ||
        fail "binary verbosity through the proxy to $1: status '$status', want 0081"
}

# quit_stops WHAT: requests pipelined after a quit are not run, as in
# memcached, which closes there: a get (sent to a server, so still in
# flight when the quit is read) is answered, the set after the quit is not
# stored.  Text, then binary (GET, QUIT, SET in one write).  The proxy used
# to close only once the quit's turn to answer came, running what followed.
quit_stops() {
    local k="quit_$RANDOM" r1 r2 r3
    r1=$(timeout 10 python3 -c '
import socket, struct, sys
def req(op, key, extras=b"", value=b""):
    body = extras + key + value
    return struct.pack(">BBHBBHIIQ", 0x80, op, len(key), len(extras), 0, 0, len(body), 0, 0) + body
def until_closed(data):
    s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=3)
    s.sendall(data)
    out = b""
    while True:
        d = s.recv(4096)
        if not d:
            return out
        out += d
k = sys.argv[2].encode()
print(until_closed(b"get " + k + b"\r\nquit\r\nset " + k + b" 0 0 1\r\nx\r\n").decode().replace("\r\n", " "))
out, ops = until_closed(req(0x00, k + b"b") + req(0x07, b"") +
                        req(0x01, k + b"b", struct.pack(">II", 0, 0), b"x")), []
while len(out) >= 24:
    ops.append("%02x" % out[1])
    out = out[24 + struct.unpack(">I", out[8:12])[0]:]
print("binary " + " ".join(ops))' "$proxy_port" "$k" 2>&1 | tr '\n' '/')
    r2=$(mc "127.0.0.1:$proxy_port" "get $k\r\n")
    r3=$(mc "127.0.0.1:$proxy_port" "get ${k}b\r\n")
    if [ "$r1" = "END /binary 00 07/" ] && [ "$r2" = END ] && [ "$r3" = END ]; then
        ok "quit through the proxy to $1: what follows it is not run (text and binary)"
    else
        fail "quit through the proxy to $1: replies '$r1', then get: '$r2' / '$r3'"
    fi
}

# backend_stats WHAT N: `stats backends` must list N servers, all up, each
# with requests (the loads above reached every one) and latency figures.
backend_stats() {
    local what=$1 want=$2 lines up busy
    lines=$(mc "127.0.0.1:$proxy_port" 'stats backends\r\n')
    up=$(printf '%s\n' "$lines" | grep -c '^STAT backend:.*:state up$')
    busy=$(printf '%s\n' "$lines" | awk '/^STAT backend:.*:requests / && $3 > 0' | wc -l)
    if [ "$up" -eq "$want" ] && [ "$busy" -eq "$want" ] \
        && printf '%s\n' "$lines" | grep -q ':latency_p99_us [1-9]'; then
        ok "stats backends through the proxy to $what: $up up, $busy with requests"
    else
        printf '%s\n' "$lines"
        fail "stats backends through the proxy to $what: $up up, $busy with requests (want $want)"
    fi
}

# --- 1. a plain server -------------------------------------------------------
if ! start_server /dev/null; then
    fail "$server_bin did not start"
elif proxy_for "127.0.0.1:$server_port"; then
    run_mode "a plain server" -a
    run_mode "a plain server" -b
    cas_zero "a plain server"
    bin_verbosity "a plain server"
    quit_stops "a plain server"
    backend_stats "a plain server" 1
fi
cleanup

# --- 2. a 3-node plain cluster ----------------------------------------------
need_built "$build_dir/cocytus/cocytus-node"
cluster_dir=$(mktemp -d "${TMPDIR:-/tmp}/proxy-cluster.XXXXXX")
# servers and the coordinator: 2 ports each
if cluster_up "$cluster_dir" $((2 * NODES + 2)) 26000 32000 --nodes "$NODES" --scheme plain \
    --no-proxy --memory 16; then
    seeds=$(awk '{ printf "%s%s", sep, $5; sep = "," }' "$cluster_dir/endpoints")
    if proxy_for "$seeds"; then
        run_mode "a $NODES-node plain cluster" -a
        run_mode "a $NODES-node plain cluster" -b
        concurrent_load "a $NODES-node plain cluster"
        cas_zero "a $NODES-node plain cluster"
        quit_stops "a $NODES-node plain cluster"
        backend_stats "a $NODES-node plain cluster" "$NODES"
    fi
else
    fail "scripts/cluster up --nodes $NODES --scheme plain"
fi

finish
