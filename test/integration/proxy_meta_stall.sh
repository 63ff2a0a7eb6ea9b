#!/usr/bin/env bash
# proxy_meta_stall.sh - make-check test: meta commands through cocytus-proxy
# while the server owning their key is stopped, continued and killed
# (issue #12: a per-request deadline; a dead or slow server delays only the
# requests for its own slots).
#
# A 3-node plain cluster (scripts/cluster, --restart off: nothing but this
# test touches the victim) with cocytus-proxy in front of it (started here,
# -t 1000 -D 4000).  One key owned by node 1's server and one owned by
# another are picked from `cocytus-cli map --full` and cocytus-bench's key
# space; meta_stall.py then stops, continues and kills node 1's server
# itself and checks the replies and how long they took (see its scenarios).
# The trap continues the victim and stops everything started.
set -u

NODES=3
RECORDS=400
TIMEOUT_MS=1000
DEADLINE_MS=4000

script_dir=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$script_dir/lib.sh"
proxy_bin=${COCYTUS_PROXY:-$build_dir/client/cocytus-proxy}
bench_bin=${COCYTUS_BENCH:-$build_dir/bench/cocytus-bench}
need_built "$server_bin" "$proxy_bin" "$bench_bin" "$build_dir/client/cocytus-cli" "$build_dir/cocytus/cocytus-node"
if ! command -v python3 >/dev/null; then
    echo "SKIP: no python3"
    exit 77
fi

dir=""
proxy_pid=""
victim_pid=""
cleanup() {
    [ -n "$victim_pid" ] && kill -CONT "$victim_pid" 2>/dev/null
    stop_pid "$proxy_pid"
    proxy_pid=""
    cluster_remove "$dir"
    dir=""
}
on_exit cleanup

dir=$(mktemp -d "${TMPDIR:-/tmp}/proxy-meta-stall.XXXXXX")
if ! cluster_up "$dir" $((2 * NODES + 2)) 12000 20000 --nodes "$NODES" --scheme plain \
    --no-proxy --memory 16 --restart off; then
    fail "scripts/cluster up --nodes $NODES --scheme plain"
    finish
fi
seeds=$(awk '$1 == "plain" { printf "%s%s", sep, $5; sep = "," }' "$dir/endpoints")
if ! start_proxy "$dir/proxy.log" --seeds "$seeds" -t "$TIMEOUT_MS" -D "$DEADLINE_MS" -W 5; then
    fail "$proxy_bin did not start with --seeds $seeds"
    finish
fi
echo "cluster: $seeds; proxy: 127.0.0.1:$proxy_port (-t $TIMEOUT_MS -D $DEADLINE_MS)"

victim=$(awk '$1 == "plain" && $4 == 1 { print $5; exit }' "$dir/endpoints")
victim_pid=$(awk '$1 == "plain" && $4 == 1 { print $6; exit }' "$dir/endpoints")
if [ -z "$victim" ] || [ -z "$victim_pid" ] || ! kill -0 "$victim_pid" 2>/dev/null; then
    fail "no running server of node 1 in $dir/endpoints"
    finish
fi
key_owners "$dir" "$RECORDS" || fail "the keys' owners: $(cat "$dir/map.txt" 2>/dev/null)"
stopped_key=$(awk -v v="$victim" '$2 == v { print $1; exit }' "$dir/owners")
healthy_key=$(awk -v v="$victim" '$2 != v && $2 != "none" { print $1; exit }' "$dir/owners")
if [ -z "$stopped_key" ] || [ -z "$healthy_key" ]; then
    fail "no key of $victim and another in $RECORDS keys"
    finish
fi
echo "stopped key $stopped_key ($victim, pid $victim_pid); healthy key $healthy_key"

timeout 120 python3 "$script_dir/meta_stall.py" --proxy "127.0.0.1:$proxy_port" \
    --pid "$victim_pid" --stopped-key "$stopped_key" --healthy-key "$healthy_key" \
    --timeout-ms "$TIMEOUT_MS" --deadline-ms "$DEADLINE_MS" \
    || fail "meta commands through the proxy with a stopped or dead server"
if ! kill -0 "$proxy_pid" 2>/dev/null; then
    fail "the proxy exited: $(tail -5 "$dir/proxy.log")"
fi
echo "proxy log (last lines):"
tail -n 8 "$dir/proxy.log"
victim_pid=""
finish
