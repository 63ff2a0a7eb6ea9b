#!/usr/bin/env bash
# move_orphan_epoch.sh - a slot move whose source dies, and that the
# coordinator fails, leaves its epoch behind in the saved map.
#
# Either end of a move may hold the move's epoch (E) when it dies: the
# source switches to it before the commit, the destination with the
# commit.  The coordinator skips E for its own next maps, but that skip
# lived only in its memory: when no map went out between the failed move
# and a restart of the coordinator (no takeover map yet, here because the
# dead source's parity process does not answer), the restarted coordinator
# could give E to another map.  Now a move failed after a death publishes
# the map again above E, and the saved map's epoch is past it.
#
# Three nodes, RS(2,3), a coordinator, no proxy.  A slot of group 0's
# data process 0 moves to group 1's data process 0.  The destination, the
# source's node and group 0's parity process are stopped (SIGSTOP), so the
# move waits at its start and no takeover of the source can happen; the
# source is killed.  The move must fail, the map go out again above the
# move's epoch and be saved so, before anything is resumed; then the
# groups must come back whole, every process hold the coordinator's map,
# the slot's keys read back, and verify pass.
set -u

script_dir=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$script_dir/lib.sh"
need_built "$server_bin" "$build_dir/cocytus/cocytus-node" "$build_dir/client/cocytus-cli" \
    "$build_dir/bench/cocytus-bench"
bench=$build_dir/bench/cocytus-bench
cli=$build_dir/client/cocytus-cli

# Processes are stopped for a few seconds on purpose: not deaths.
export COCYTUS_DEAD_AFTER_MS=15000

dir=$(mktemp -d "${TMPDIR:-/tmp}/move_orphan_epoch.XXXXXX")
stopped=""
cleanup() {
    local p
    for p in $stopped; do kill -CONT "$p" 2>/dev/null; done
    cluster_remove "$dir"
}
on_exit cleanup

move_cluster "$dir" 3 rs:2:3 data || finish

s_pid=$(group0_pid "$dir" data 0)
p0=$(group0_pid "$dir" parity 0)
d_pid=$(proc_pid "$dir" data 1 0)
node=$(awk -v a="$src" '$1 == "data" && $2 == 0 && $3 == 0 { print $4; exit }' "$dir/endpoints")
node_pid=$(cat "$dir/node-${node:-0}.pid" 2>/dev/null)
[ -n "$s_pid" ] && [ -n "$p0" ] && [ -n "$d_pid" ] && [ -n "$node_pid" ] ||
    { fail "pids: source '$s_pid' parity '$p0' destination '$d_pid' node '$node_pid'"; finish; }
kill -STOP "$node_pid" "$d_pid" "$p0" && stopped="$node_pid $d_pid $p0"
"$cli" --dir "$dir" --timeout 20000 move "$slot" 1 0 >"$dir/move.out" 2>&1 &
move_pid=$!
if wait_for 50 grep -q "moving slot $slot " "$dir/coordinator.log"; then
    epoch=$(grep "moving slot $slot " "$dir/coordinator.log" | tail -n 1 | sed 's/.* at epoch \([0-9]*\).*/\1/')
    ok "the move of slot $slot started at epoch $epoch, its destination stopped"
else
    fail "the move never started: $(tail -n 3 "$dir/move.out")"
    finish
fi
sleep 0.3
kill -KILL "$s_pid"
if wait_for 100 grep -q "move of slot $slot .* failed" "$dir/coordinator.log"; then
    ok "the move failed: $(grep "move of slot $slot .* failed" "$dir/coordinator.log" | tail -n 1 |
        sed 's/.*failed: //')"
else
    fail "the move of slot $slot did not fail: $(grep "slot $slot" "$dir/coordinator.log" | tail -n 3)"
fi
if wait_for 20 grep -q "epoch $epoch may be held by the failed move's" "$dir/coordinator.log"; then
    ok "$(grep "epoch $epoch may be held" "$dir/coordinator.log" | tail -n 1 | sed 's/^coordinator: //')"
else
    fail "the map did not go out again past epoch $epoch"
fi
saved=$(awk '$1 == "epoch" { print $2; exit }' "$dir/coordinator.state" 2>/dev/null)
[ -n "$saved" ] && [ "$saved" -gt "$epoch" ] 2>/dev/null &&
    ok "the saved map's epoch ($saved) is past the move's ($epoch), with every process still stopped" ||
    fail "the saved map's epoch is '$saved', not past the move's $epoch"
kill -CONT "$node_pid" "$d_pid" "$p0"
stopped=""
wait "$move_pid"

cluster_healthy_again "$dir" "after the source died during the move"
if "$cli" --dir "$dir" map >"$dir/map.out" 2>&1; then
    ok "every process holds the coordinator's map: $(head -n 1 "$dir/map.out")"
else
    fail "the processes' maps differ: $(grep -v ' this map' "$dir/map.out" | head -n 6 | tr '\n' ' ')"
fi
"$bench" -s "$dst" -n 8000 --no-load -o 16000 -r 1 --verify >"$dir/read.out" 2>&1
if grep -q "total_errors=0 total_wrong=0" "$dir/read.out" && grep -q "misses=0" "$dir/read.out"; then
    ok "every key written before reads back through the map (16000 reads, --verify)"
else
    fail "keys do not read back: $(grep -E 'errors|misses' "$dir/read.out" | tail -3)"
fi
cluster_check_ok "$dir" verify "after the source died during the move"
finish
