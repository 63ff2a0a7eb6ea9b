#!/usr/bin/env bash
# move_source_dies.sh - a slot move's source dies after the destination
# took the slot but before the source reported the move done: the move
# must count as done, and the slot's keys stay at the destination.
#
# The source reports "migrated ... ok" only after deleting its copies of
# the slot (CLEAN).  The coordinator used to fail a move whose source died
# ("outcome not known here") and publish the takeover's map without it, at
# the epoch the destination had taken with the slot: the destination kept
# its own map, every other process routed the slot to the dead source's
# recovery process, whose copies of the slot were being deleted.  Now the
# coordinator waits a moment for the destination's heartbeat: if it
# reports the move's epoch, the move is committed (and the takeover's map,
# held meanwhile, goes out with it).
#
# Three nodes, RS(2,3): three groups, a coordinator, no proxy.  The parity
# process of group 0 is stopped, so that the source's deletes wait for
# its acknowledgement: a slot of group 0's data process 0 moves to group
# 1's data process 0, and once the source says it is deleting its copies
# it is killed (SIGKILL).  The move must end done, every key read back
# through the map, every process hold the coordinator's map, and verify
# pass once the groups are whole again.
set -u

script_dir=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$script_dir/lib.sh"
need_built "$server_bin" "$build_dir/cocytus/cocytus-node" "$build_dir/client/cocytus-cli" \
    "$build_dir/bench/cocytus-bench"
bench=$build_dir/bench/cocytus-bench
cli=$build_dir/client/cocytus-cli

# The parity process is stopped for a few seconds on purpose: not a death.
export COCYTUS_DEAD_AFTER_MS=8000

dir=$(mktemp -d "${TMPDIR:-/tmp}/move_source_dies.XXXXXX")
stopped=""
cleanup() {
    [ -n "$stopped" ] && kill -CONT "$stopped" 2>/dev/null
    cluster_remove "$dir"
}
on_exit cleanup

move_cluster "$dir" 3 rs:2:3 data || finish
keys=$(awk -v s="$slot" '$1 == s' "$dir/all.slots" | wc -l)

p0=$(group0_pid "$dir" parity 0)
s_pid=$(group0_pid "$dir" data 0)
[ -n "$p0" ] && [ -n "$s_pid" ] || { fail "no parity process 0 or data process 0 in group 0"; finish; }
kill -STOP "$p0" && stopped=$p0
"$cli" --dir "$dir" --timeout 20000 move "$slot" 1 0 >"$dir/move.out" 2>&1 &
move_pid=$!
# Killed within about 10 ms of the destination's commit: mostly before the
# source's next heartbeat (every 250 ms) tells the coordinator its epoch,
# so the destination's must.
committed() { grep -q "slot $slot.*committed; deleting the local copies" "$dir/data-0-0.log"; }
t0=${EPOCHREALTIME/[.,]/}
until committed; do
    [ $((${EPOCHREALTIME/[.,]/} - t0)) -lt 10000000 ] || break
    sleep 0.01
done
if committed; then
    kill -KILL "$s_pid"
    ok "the source killed after the destination took slot $slot ($keys of the bench's keys), its deletes waiting"
else
    fail "the source never got to deleting its copies: $(grep "slot $slot" "$dir/data-0-0.log" | tail -n 3)"
fi
if wait_for 50 grep -q "move of slot $slot .* done" "$dir/coordinator.log"; then
    ok "the coordinator counts the move done: $(grep "holds epoch .* the move of slot $slot" "$dir/coordinator.log" | tail -n 1 | sed 's/.*: group/group/')"
else
    fail "the move of slot $slot: $(grep -E "slot $slot" "$dir/coordinator.log" | tail -n 3)"
fi
kill -CONT "$p0"
stopped=""
wait "$move_pid"

cluster_healthy_again "$dir" "after the source died during the move"
if "$cli" --dir "$dir" map >"$dir/map.out" 2>&1; then
    ok "every process holds the coordinator's map: $(head -n 1 "$dir/map.out")"
else
    fail "the processes' maps differ: $(grep -v ' this map' "$dir/map.out" | head -n 6 | tr '\n' ' ')"
fi
owner=$("$cli" --dir "$dir" --full map 2>/dev/null |
    awk -v s="$slot" '$1 == "slots" { split($2, r, "-"); if (s >= r[1] && s <= r[2]) print $3 }')
[ "$owner" = "$dst" ] && ok "slot $slot is served by the destination $dst" ||
    fail "slot $slot is served by '$owner', not the destination $dst"
"$bench" -s "$dst" -n 8000 --no-load -o 16000 -r 1 --verify >"$dir/read.out" 2>&1
if grep -q "total_errors=0 total_wrong=0" "$dir/read.out" && grep -q "misses=0" "$dir/read.out"; then
    ok "every key written before reads back through the map (16000 reads, --verify)"
else
    fail "keys do not read back: $(grep -E 'errors|misses' "$dir/read.out" | tail -3)"
fi
cluster_check_ok "$dir" verify "after the source died during the move"
finish
