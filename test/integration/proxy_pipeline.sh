#!/usr/bin/env bash
# proxy_pipeline.sh - make-check test: pipelined loads through cocytus-proxy
# get every value right (issue #12).
#
# A 3-node plain cluster (scripts/cluster) with cocytus-proxy in front of it
# (started here).  Through the proxy:
#   1. ASCII: cocytus-bench with --depth 16 (16 text requests written back to
#      back on each of 4 connections; the proxy answers `config get
#      cluster` with ERROR, so the bench takes it for a single server that
#      owns every slot) and --verify-latest: every value read is checked,
#      and each connection's reads of its own records must return its last
#      acknowledged write.  Asserts exit 0, total_errors=0, total_wrong=0,
#      every record loaded, and gets (all of them verified) and sets done.
#   2. Binary: memcaslap -B -d 16: each multi-get is 16 binary GETs sent in
#      one write; memcaslap matches the replies to its keys by their order
#      and checks every value (-v 1).  Asserts cmd_get > 0, verify_failed=0
#      and verify_misses=0.  Skipped (noted) when memcaslap is not installed.
# Both run twice: through a proxy that batches a loop pass's writes with
# io_uring (its default, where the kernel allows; the log says which), and
# through one started with --no-io-uring (one sendmsg() per connection).
# Everything runs on free loopback ports and is stopped by the trap.
set -u

NODES=3
RECORDS=2000
RUN_SECONDS=3

script_dir=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$script_dir/lib.sh"
proxy_bin=${COCYTUS_PROXY:-$build_dir/client/cocytus-proxy}
bench_bin=${COCYTUS_BENCH:-$build_dir/bench/cocytus-bench}

need_built "$server_bin" "$proxy_bin" "$bench_bin" "$build_dir/cocytus/cocytus-node"

dir=""
proxy_pid=""

cleanup() {
    stop_pid "$proxy_pid"
    proxy_pid=""
    cluster_remove "$dir"
    dir=""
}
on_exit cleanup

dir=$(mktemp -d "${TMPDIR:-/tmp}/proxy-pipeline.XXXXXX")
if ! cluster_up "$dir" $((2 * NODES + 2)) 12000 20000 --nodes "$NODES" --scheme plain \
    --no-proxy --memory 64; then
    fail "scripts/cluster up --nodes $NODES --scheme plain"
    finish
fi
seeds=$(awk '$1 == "plain" { printf "%s%s", sep, $5; sep = "," }' "$dir/endpoints")

# run_checks: both loads through the proxy at $proxy.
run_checks() {
# --- 1. ASCII, cocytus-bench --depth 16 --verify-latest -----------------------
# field KEY LINE_PREFIX: the value of KEY= on the bench's line starting with
# LINE_PREFIX.
field() {
    awk -v pre="$2" -v key="$1" 'index($0, pre) == 1 {
        for (i = 1; i <= NF; i++) if (index($i, key "=") == 1) { print substr($i, length(key) + 2); exit }
    }' "$dir/bench.out"
}
echo "== cocytus-bench --depth 16 -c 4 --verify-latest through cocytus-proxy ($proxy)"
timeout 60 "$bench_bin" -s "$proxy" --depth 16 -c 4 --verify-latest -t "$RUN_SECONDS" \
    -n "$RECORDS" -v zipf:10:3000 -r 0.7 -q >"$dir/bench.out" 2>"$dir/bench.err"
bench_rc=$?
cat "$dir/bench.out"
gets=$(field count op=get)
sets=$(field count op=set)
if [ "$bench_rc" -ne 0 ] || [ "$(field total_errors total_errors)" != 0 ] \
    || [ "$(field total_wrong total_errors)" != 0 ] || [ "$(field ops phase=load)" != "$RECORDS" ] \
    || [ "${gets:-0}" -le 0 ] || [ "${sets:-0}" -le 0 ]; then
    fail "cocytus-bench --depth 16 through the proxy: exit $bench_rc;" \
        "$(head -5 "$dir/bench.err" | tr '\n' ';')"
else
    ok "ASCII, 16 requests in flight on each of 4 connections: $gets gets verified (own records:" \
        "the last write), $sets sets, 0 errors, 0 wrong values"
fi

# --- 2. binary, memcaslap -B -d 16 --------------------------------------------
slap_bin=$(command -v memcaslap || command -v memaslap || true)
if [ -z "$slap_bin" ]; then
    echo "note: memcaslap not installed (libmemcached-tools); the binary pipelined load is skipped"
else
    echo "== memcaslap -B -d 16 through cocytus-proxy ($proxy)"
    # -X 200 -w 1k: a working set far below the cluster's memory (a miss
    # would count as a failed verification).
    timeout 60 "$slap_bin" -s "$proxy" -B -d 16 -X 200 -w 1k -c 8 -T 2 -t "${RUN_SECONDS}s" -v 1 \
        >"$dir/slap.out" 2>&1
    slap_rc=$?
    grep -E '^(cmd_get|cmd_set|get_misses|verify_misses|verify_failed|Run time)' "$dir/slap.out"
    slap_field() {
        awk -v k="$1:" '$1 == k { print $2; exit }' "$dir/slap.out"
    }
    cmd_get=$(slap_field cmd_get)
    failed=$(slap_field verify_failed)
    vmisses=$(slap_field verify_misses)
    if [ "$slap_rc" -ne 0 ] || [ "${cmd_get:-0}" -le 0 ] || [ "${failed:-1}" != 0 ] \
        || [ "${vmisses:-1}" != 0 ]; then
        fail "memcaslap -B -d 16 through the proxy: exit $slap_rc, cmd_get=${cmd_get:-?}," \
            "verify_failed=${failed:-?}, verify_misses=${vmisses:-?}; $(tail -5 "$dir/slap.out" | tr '\n' ';')"
    else
        ok "binary, 16 GETs per write on 8 connections: $cmd_get gets, every value checked in" \
            "order, none wrong or missing"
    fi
fi
}

for mode in default --no-io-uring; do
    args=(--seeds "$seeds" -W 5)
    [ "$mode" = default ] || args+=("$mode")
    if ! start_proxy "$dir/proxy.log" "${args[@]}"; then
        fail "$proxy_bin did not start with ${args[*]}"
        break
    fi
    proxy=127.0.0.1:$proxy_port
    echo "=== proxy $mode: $(grep -E 'io_uring' "$dir/proxy.log" | head -1)"
    run_checks
    stop_pid "$proxy_pid"
    proxy_pid=""
done

finish
