#!/usr/bin/env bash
# pause_node.sh - a paused machine is not a dead one.  Every process of a
# one-node RS(3,5) cluster (the coordinator, the node, the five servers)
# gets SIGSTOP for 3 s, then SIGCONT, as a VM pause, a suspend or a long
# stall of the host would do, while cocytus-bench writes and reads its own
# writes back (--verify-latest, a deadline longer than the pause).  Before
# the coordinator discounted its own stalls (forgive_own_stall in
# cluster/coord.c) this had every process declared dead at once and the
# group LOST, with all of them running and holding their data.  Now:
# nobody is declared dead, the group stays at full redundancy, the bench
# sees no error or stale value, and verify and decode-check pass.  Then one
# data process alone is stopped: it must still be declared dead after the
# usual 1.5 s of silence, and parity 0 must take over.  The trap continues
# and stops everything.
set -u

script_dir=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$script_dir/lib.sh"
bench_bin=${COCYTUS_BENCH:-$build_dir/bench/cocytus-bench}
cli=$build_dir/client/cocytus-cli
need_built "$server_bin" "$bench_bin" "$cli" "$build_dir/cocytus/cocytus-node"

dir=""
bench_pid=""
stopped=""
cleanup() {
    [ -n "$stopped" ] && kill -CONT -- $stopped 2>/dev/null
    stopped=""
    stop_pid "$bench_pid"
    bench_pid=""
    cluster_remove "$dir"
    dir=""
}
on_exit cleanup

dir=$(mktemp -d "${TMPDIR:-/tmp}/pause-node.XXXXXX")
if ! cluster_up "$dir" 12 12000 20000 --nodes 1 --scheme rs:3:5 --no-proxy --restart off; then
    fail "scripts/cluster up --nodes 1 --scheme rs:3:5"
    finish
fi
# The node leads a process group (scripts/cluster starts it with setsid)
# that holds the coordinator and every server of this one-node cluster:
# stopping the group stops the machine.
pgrp_of() {
    local line
    read -r line <"/proc/$1/stat" 2>/dev/null || return 1
    set -- ${line##*) }         # after the command name: state ppid pgrp ...
    echo "$3"
}
node_pid=$(cat "$dir/node-0.pid" 2>/dev/null)
coord_pid=$(server_pid "$(awk '$1 == "coordinator" { print $2 ":" $3 }' "$dir/cluster.conf")")
seeds=$(awk '$1 == "data" { printf "%s%s", sep, $5; sep = "," }' "$dir/endpoints")
[ -n "$node_pid" ] && [ -n "$coord_pid" ] || { fail "no pid file for node 0, or no pid from the coordinator"; finish; }
for pid in $coord_pid $(awk '{ print $6 }' "$dir/endpoints"); do
    [ "$(pgrp_of "$pid")" = "$node_pid" ] || { fail "process $pid is not in node 0's process group"; finish; }
done
all="-$node_pid"
echo "node 0's process group: $node_pid"

if ! "$bench_bin" -s "$seeds" -n 2000 -v 512 --load --no-run -q >"$dir/load.out" 2>&1; then
    fail "cocytus-bench could not load 2000 records"
    cat "$dir/load.out"
    finish
fi
"$bench_bin" -s "$seeds" -n 2000 -v 512 -c 2 -r 0.5 --no-load -t 9 --deadline-ms 15000 \
    --verify-latest -q --json "$dir/bench.json" >"$dir/bench.out" 2>&1 &
bench_pid=$!
sleep 2

# the whole machine pauses (the bench, the client, goes on)
stopped=$all
kill -STOP -- $all
sleep 3
kill -CONT -- $all
stopped=""
sleep 3
st=$("$cli" --dir "$dir" status 2>&1)
if grep -q '^groups: 1 of 1 at full redundancy$' <<<"$st"; then
    ok "after a 3 s pause of every process the group is at full redundancy"
else
    fail "after a 3 s pause of every process:"
    echo "$st"
fi
if grep -q ' dead' "$dir/coordinator.log"; then
    fail "the coordinator declared a paused process dead: $(grep ' dead' "$dir/coordinator.log" | head -n 3)"
else
    ok "nobody was declared dead"
fi
grep -q 'did not run for' "$dir/coordinator.log" \
    && ok "the coordinator noticed its own pause: $(grep -o 'did not run for [0-9]* ms' "$dir/coordinator.log" | head -n 1)" \
    || fail "the coordinator did not log its pause"

if wait "$bench_pid"; then
    ok "cocytus-bench --verify-latest across the pause: $(tail -n 1 "$dir/bench.out")"
else
    fail "cocytus-bench --verify-latest across the pause (exit $?): $(tail -n 5 "$dir/bench.out")"
fi
bench_pid=""
cluster_check_ok "$dir" verify "after the pause"
cluster_check_ok "$dir" decode-check "after the pause"

# a hung process alone is still found out
dp1=$(awk '$1 == "data" && $3 == 1 { print $6 }' "$dir/endpoints")
stopped=$dp1
kill -STOP "$dp1"
served() {
    "$cli" --dir "$dir" status 2>&1 | grep -q '^group 0: data 1 served by recovery process parity 0'
}
if wait_for 100 served; then
    ok "a stopped data process alone is declared dead and parity 0 serves it"
else
    fail "a stopped data process was not taken over within 10 s"
    "$cli" --dir "$dir" status
fi
grep -q 'data 1 .* dead: no heartbeat for 1500 ms' "$dir/coordinator.log" \
    && ok "it was declared dead for its silence" \
    || fail "no 'dead: no heartbeat' line for data 1: $(grep ' dead' "$dir/coordinator.log" | head -n 3)"
kill -CONT "$dp1"
stopped=""
finish
