#!/usr/bin/env bash
# auth_cluster.sh - a cluster that wants memcached's authentication:
# `scripts/cluster up --auth-file FILE` starts every server process (through
# cocytus-node --auth-file) and cocytus-proxy with -Y, the proxy presenting
# the file's first pair to the servers.  On a 3-node RS(2,3) cluster:
#   - a client that has not authenticated is refused, at the proxy and at a
#     data process, and a wrong password too; an authenticated session
#     through the proxy stores and reads;
#   - the cluster's own tools still work (cocytus-cli map, status,
#     wait-healthy prove the cluster secret instead);
#   - libcocytus with credentials (cocytus-bench --auth-file, ASCII, every
#     value read checked) runs through a kill of node 1 with no error,
#     the node's processes come back with -Y and are rebuilt, and a binary
#     (SASL PLAIN) load runs after, then loads over cocytus-bench's own raw
#     text connections (--depth 8, --route follow-raw), which send the
#     authentication set when asked; verify and decode-check at the end.
# The trap stops the cluster.
set -u

script_dir=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$script_dir/lib.sh"
bench=$build_dir/bench/cocytus-bench
cli=$build_dir/client/cocytus-cli
need_built "$build_dir/client/cocytus-proxy" "$build_dir/cocytus/cocytus-node" "$bench"

dir=$(mktemp -d "${TMPDIR:-/tmp}/auth_cluster.XXXXXX")
cleanup() {
    cluster_remove "$dir"
}
on_exit cleanup
users=$dir/users
printf 'alice:s3cr:et\nbob:hunter2\n' >"$users"

# session ADDR REQUEST: like mc, but prints every reply line until 1 s of
# silence (several requests in one connection), joined by spaces.
session() {
    local addr=$1 line out=()
    exec 3<>"/dev/tcp/${addr%:*}/${addr##*:}" || return 1
    printf '%b' "$2" >&3
    while IFS= read -r -t 1 line <&3; do
        out+=("${line%$'\r'}")
    done
    exec 3<&- 3>&-
    echo "${out[*]}"
}

expect() {
    if [ "$2" = "$3" ]; then
        ok "$1"
    else
        fail "$1: got '$2', want '$3'"
    fi
}

proxy_port=$(pick_port)
if ! cluster_up "$dir" 20 14000 20000 --nodes 3 --scheme rs:2:3 --memory 32 --region 32 \
    --proxy-port "$proxy_port" --auth-file "$users"; then
    fail "RS(2,3) cluster with --auth-file did not come up"
    finish
fi
proxy=$(cat "$dir/proxy")
data0=$(group0_addr "$dir" data 0)

# servers_with_y: "<server processes> <of them without -Y DIR/auth>"
servers_with_y() {
    local all
    all=$(pgrep -af -- "--cluster $dir/cluster.conf --group")
    echo "$(echo "$all" | grep -c .) $(echo "$all" | grep -vc -- " -Y $dir/auth")"
}
expect "all 9 server processes run with -Y" "$(servers_with_y)" "9 0"

expect "the proxy refuses a client that has not authenticated" \
    "$(session "$proxy" 'get k\r\n')" "CLIENT_ERROR unauthenticated"
expect "a data process refuses a client that has not authenticated" \
    "$(session "$data0" 'get k\r\n')" "CLIENT_ERROR unauthenticated"
expect "the proxy refuses a wrong password" \
    "$(session "$proxy" 'set auth 0 0 10\r\nalice nope\r\nget k\r\n')" \
    "CLIENT_ERROR authentication failure CLIENT_ERROR unauthenticated"
expect "an authenticated session through the proxy stores and reads" \
    "$(session "$proxy" 'set auth 0 0 11\r\nbob hunter2\r\nset k 0 0 2\r\nv1\r\nget k\r\n')" \
    "STORED STORED VALUE k 0 2 v1 END"

if "$cli" --dir "$dir" map 2>&1 | grep -q "^9 of 9 processes answer this map"; then
    ok "cocytus-cli map reaches every -Y process (with the cluster secret)"
else
    fail "cocytus-cli map on the -Y cluster"
    "$cli" --dir "$dir" map 2>&1 | tail -n 5
fi
cluster_healthy_again "$dir" "at the start (wait-healthy asks every process)"

# bench_ok WHAT ARGS...: cocytus-bench with the file's first pair; no error,
# no wrong value.
bench_ok() {
    local what=$1 out
    shift
    out=$("$bench" -s "$data0" --auth-file "$users" -n 2000 -c 4 -r 0.5 --verify \
        --deadline-ms 5000 -q "$@" 2>&1)
    local rc=$?
    if [ "$rc" -eq 0 ] && echo "$out" | grep -q "^total_errors=0 total_wrong=0"; then
        ok "libcocytus with credentials $what: $(echo "$out" | grep '^phase=run')"
    else
        fail "libcocytus with credentials $what (exit $rc)"
        echo "$out" | tail -n 8
    fi
}

(sleep 2 && bash "$cluster_script" kill-node --node 1 --dir "$dir" >"$dir/kill.out" 2>&1) &
killer=$!
bench_ok "through a kill of node 1" -t 7
wait "$killer"
grep -q "killed" "$dir/kill.out" && ok "node 1 was killed during the load" ||
    fail "node 1 was not killed: $(cat "$dir/kill.out")"

bash "$cluster_script" start-node --node 1 --dir "$dir" >"$dir/start.out" 2>&1 ||
    fail "start-node 1: $(cat "$dir/start.out")"
cluster_healthy_again "$dir" "after node 1 started again"
expect "node 1's restarted processes run with -Y too" "$(servers_with_y)" "9 0"

bench_ok "in the binary protocol (SASL PLAIN)" -t 2 --binary
# cocytus-bench's raw text connections (pipelined, and following MOVED)
# authenticate themselves when the server asks
bench_ok "over raw pipelined connections (--depth 8)" -t 2 --depth 8
bench_ok "over raw connections following MOVED" -t 2 --route follow-raw
cluster_check_ok "$dir" verify "at the end"
cluster_check_ok "$dir" decode-check "at the end"
finish
