#!/usr/bin/env bash
# garbage_proxy.sh - cocytus-proxy survives garbage.  test_garbage's
# barrages (random bytes; broken text, meta and binary requests; pipelines
# whose replies nobody reads; connections closed, reset or abandoned
# mid-request) go through a proxy in front of an RS(3,5) group
# (scripts/cluster: one node, its coordinator, no restarts).  After every
# round the proxy and every server of the group must still run, a fresh
# value must store and read back through the proxy, and every value stored
# before the barrages must come back byte for byte; at the end the group
# must pass cocytus-cli verify and decode-check.  The trap stops
# everything.
set -u

script_dir=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$script_dir/lib.sh"
proxy_bin=${COCYTUS_PROXY:-$build_dir/client/cocytus-proxy}
garbage_bin=${COCYTUS_GARBAGE:-$build_dir/test/integration/test_garbage}

need_built "$server_bin" "$proxy_bin" "$garbage_bin" "$build_dir/client/cocytus-cli" "$build_dir/cocytus/cocytus-node"

dir=""
proxy_pid=""
cleanup() {
    stop_pid "$proxy_pid"
    proxy_pid=""
    cluster_remove "$dir"
    dir=""
}
on_exit cleanup

dir=$(mktemp -d "${TMPDIR:-/tmp}/garbage-proxy.XXXXXX")
# 5 servers and the coordinator: 2 ports each
if ! cluster_up "$dir" 12 12000 20000 --nodes 1 --scheme rs:3:5 --no-proxy --restart off; then
    fail "scripts/cluster up --nodes 1 --scheme rs:3:5"
    finish
fi
seeds=$(awk '$1 == "data" { printf "%s%s", sep, $5; sep = "," }' "$dir/endpoints")
if ! start_proxy "$dir/proxy.log" --seeds "$seeds" -W 5; then
    fail "$proxy_bin did not start with --seeds $seeds"
    finish
fi
pids="$proxy_pid $(awk '$1 == "data" || $1 == "parity" { printf "%s ", $6 }' "$dir/endpoints")"
echo "group: $seeds; proxy: 127.0.0.1:$proxy_port; processes that must stay up: $pids"

if GARBAGE_PORT=$proxy_port GARBAGE_PIDS=$pids "$garbage_bin"; then
    ok "test_garbage through cocytus-proxy"
else
    fail "test_garbage through cocytus-proxy"
    echo "---- proxy log (tail) ----"
    tail -n 20 "$dir/proxy.log"
fi

cluster_check_ok "$dir" verify "after the barrages"
cluster_check_ok "$dir" decode-check "after the barrages"
finish
