#!/usr/bin/env bash
# garbage_parity.sh - a parity process and a recovery process survive
# garbage on their client ports.  test_garbage.c aims at ports that store
# what they are sent; a parity process's client port stores nothing (it
# answers MOVED), and a recovery process's keeps only the keys of the data
# process it stands in for, so the barrages run here with GARBAGE_STORES=0:
# after every round every process must still run and the port must still
# answer a text and a binary version request.  On an RS(3,5) group
# (scripts/cluster: one node, its coordinator, no restarts) with some
# values loaded by cocytus-bench:
#   1. the barrages at parity 0's and parity 1's client ports, then
#      cocytus-cli verify;
#   2. data process 0 is SIGKILLed; once parity 0 serves it as its recovery
#      process and has rebuilt it, the barrages at that port (keys in the
#      dead process's slots are stored there, the rest answer MOVED), then
#      the full barrages (values stored first and checked byte for byte
#      after every round) through cocytus-proxy, which sends data 0's keys
#      to the recovery process;
#   3. cocytus-cli verify and decode-check on the degraded group.
# The trap stops everything.
set -u

script_dir=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$script_dir/lib.sh"
proxy_bin=${COCYTUS_PROXY:-$build_dir/client/cocytus-proxy}
garbage_bin=${COCYTUS_GARBAGE:-$build_dir/test/integration/test_garbage}
bench_bin=${COCYTUS_BENCH:-$build_dir/bench/cocytus-bench}
cli=$build_dir/client/cocytus-cli

need_built "$server_bin" "$proxy_bin" "$garbage_bin" "$bench_bin" "$cli" "$build_dir/cocytus/cocytus-node"

dir=""
proxy_pid=""
cleanup() {
    stop_pid "$proxy_pid"
    proxy_pid=""
    cluster_remove "$dir"
    dir=""
}
on_exit cleanup

# endpoint ROLE INDEX FIELD: a field of DIR/endpoints (5: address, 6: pid)
endpoint() {
    awk -v r="$1" -v i="$2" -v f="$3" '$1 == r && $3 == i { print $f }' "$dir/endpoints"
}

# barrage NAME PORT STORES PIDS: test_garbage at PORT; counts a failure
# unless it passes.
barrage() {
    local name=$1 port=$2 stores=$3 pids=$4
    echo "---- $name: 127.0.0.1:$port, GARBAGE_STORES=$stores, must stay up: $pids"
    if GARBAGE_PORT=$port GARBAGE_PIDS=$pids GARBAGE_STORES=$stores "$garbage_bin"; then
        ok "test_garbage at $name"
    else
        fail "test_garbage at $name"
        for f in "$dir"/*.log; do
            echo "==> $f (tail) <=="
            tail -n 10 "$f"
        done
    fi
}

# recovered: status shows parity 0 serving data 0, its rebuild done
recovered() {
    local st
    st=$("$cli" --dir "$dir" status 2>&1)
    grep -q "^group 0: data 0 served by recovery process parity 0" <<<"$st" &&
        grep -q "^group 0: parity 0 rebuilt data 0 .* done" <<<"$st"
}

dir=$(mktemp -d "${TMPDIR:-/tmp}/garbage-parity.XXXXXX")
# 5 servers and the coordinator: 2 ports each
if ! cluster_up "$dir" 12 12000 20000 --nodes 1 --scheme rs:3:5 --no-proxy --restart off; then
    fail "scripts/cluster up --nodes 1 --scheme rs:3:5"
    finish
fi
seeds=$(awk '$1 == "data" { printf "%s%s", sep, $5; sep = "," }' "$dir/endpoints")
if ! "$bench_bin" -s "$seeds" -n 2000 -v zipf:100:2000 --load --no-run -q >"$dir/bench.out" 2>&1; then
    fail "cocytus-bench could not load 2000 records"
    cat "$dir/bench.out"
    finish
fi
ok "2000 records loaded"

all_pids="$(awk '$1 == "data" || $1 == "parity" { printf "%s ", $6 }' "$dir/endpoints")"
for p in 0 1; do
    addr=$(endpoint parity "$p" 5)
    barrage "parity $p" "${addr##*:}" 0 "$all_pids"
done
cluster_check_ok "$dir" verify "after the barrages at both parity processes"

kill -KILL "$(endpoint data 0 6)"
if wait_for 200 recovered; then
    ok "parity 0 serves data 0 and rebuilt it"
else
    fail "parity 0 did not take over and rebuild data 0 within 20 s"
    "$cli" --dir "$dir" status
    finish
fi
survivors="$(awk '($1 == "data" && $3 != 0) || $1 == "parity" { printf "%s ", $6 }' "$dir/endpoints")"
addr=$(endpoint parity 0 5)
barrage "the recovery process (parity 0 serving data 0)" "${addr##*:}" 0 "$survivors"

if start_proxy "$dir/proxy.log" --seeds "$seeds" -W 5; then
    barrage "cocytus-proxy in front of the degraded group" "$proxy_port" 1 "$proxy_pid $survivors"
else
    fail "$proxy_bin did not start with --seeds $seeds"
fi

logs_printable "$dir"
cluster_check_ok "$dir" verify "on the degraded group after the barrages"
cluster_check_ok "$dir" decode-check "on the degraded group after the barrages"
finish
