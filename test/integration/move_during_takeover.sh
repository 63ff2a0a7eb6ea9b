#!/usr/bin/env bash
# move_during_takeover.sh - a data process dies while a slot moves: the
# takeover's map and the move's map must not share an epoch, and neither
# may undo the other.
#
# A move is given the epoch after the coordinator's when it starts; its
# source and destination switch to that epoch by themselves, and the
# coordinator adopts the move's map when the source reports it done.  A
# takeover published meanwhile took the same epoch (the coordinator's + 1),
# so two different maps had one epoch, and a process holding one ignored
# the other; the next takeovers' maps, newer, gave the moved slot back to
# its source, which had handed it over: writes the destination had
# acknowledged were lost (`drill soak --kinds move`, a node killed during
# moves: 1 acknowledged write lost).  Now the takeover's map waits for the
# move to end and is published with its outcome, at an epoch above every
# epoch given out.
#
# One node, RS(3,5), a coordinator, no proxy.  Data process 1 (the
# destination) is stopped, a slot of data process 0 with keys in it starts
# moving to it (the copy waits), data process 2 is killed (its takeover
# is ready while the move runs), and data process 1 resumes.  The move must
# end done, every process hold the coordinator's map, the keys written
# before and the moved slot's keys written after read back through the
# map, and verify and decode-check pass once the group is whole again.
# Then the same with a second slot, and the coordinator is killed while it
# holds the takeover's map.
set -u

script_dir=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$script_dir/lib.sh"
need_built "$server_bin" "$build_dir/cocytus/cocytus-node" "$build_dir/client/cocytus-cli" \
    "$build_dir/bench/cocytus-bench"
bench=$build_dir/bench/cocytus-bench
cli=$build_dir/client/cocytus-cli

# Data process 1 is stopped for up to 2 s on purpose: not a death.
export COCYTUS_DEAD_AFTER_MS=6000

dir=$(mktemp -d "${TMPDIR:-/tmp}/move_during_takeover.XXXXXX")
stopped=""
node_stopped=""
cleanup() {
    [ -n "$stopped" ] && kill -CONT "$stopped" 2>/dev/null
    [ -n "$node_stopped" ] && kill -CONT "$node_stopped" 2>/dev/null
    cluster_remove "$dir"
}
on_exit cleanup

cluster_up "$dir" 12 10000 20000 --nodes 1 --scheme rs:3:5 --no-proxy ||
    { fail "cluster up"; exit 1; }
dp0=$(group0_addr "$dir" data 0)
"$bench" -s "$dp0" -n 8000 --no-run >"$dir/load.out" 2>&1 &&
    grep -q "total_errors=0" "$dir/load.out" && ok "8000 keys written" ||
    fail "load: $(tail -n 2 "$dir/load.out")"

# The slot of data process 0's holding the most of the bench's keys.
key_owners "$dir" 8000 || { fail "cannot read the slot map"; finish; }
slot=$(owned_slots "$dir" "$dp0" | head -n 1)
[ -n "$slot" ] || { fail "no slot of data process 0 holds a key"; finish; }

d1=$(group0_pid "$dir" data 1)
d2=$(group0_pid "$dir" data 2)
[ -n "$d1" ] && [ -n "$d2" ] || { fail "data processes 1 and 2 not found"; finish; }

# The node is stopped too (not its servers), so that it does not start
# data process 2 again until the maps are checked: the process's return
# makes a new map, which would hide a wrong one.
node=$(cat "$dir/node-0.pid")
kill -STOP "$node" && node_stopped=$node
kill -STOP "$d1" && stopped=$d1
"$cli" --dir "$dir" --timeout 20000 move "$slot" 0 1 >"$dir/move.out" 2>&1 &
move_pid=$!
wait_for 50 grep -q "moving slot $slot " "$dir/coordinator.log" ||
    fail "the coordinator did not start the move: $(cat "$dir/move.out")"
sleep 0.3
kill -KILL "$d2"
if wait_for 50 grep -q "group 0 dp 2 is served" "$dir/coordinator.log"; then
    ok "data process 2's keys are served by a parity process while slot $slot moves"
else
    fail "data process 2's takeover did not happen while slot $slot moved"
fi
sleep 0.3
kill -CONT "$d1"
stopped=""
wait "$move_pid"
if grep -q "move $slot .* done" "$dir/move.out"; then
    ok "slot $slot moved: $(tail -n 1 "$dir/move.out")"
else
    fail "the move of slot $slot: $(cat "$dir/move.out")"
    grep -E "move|slot $slot|epoch" "$dir/coordinator.log" | tail -n 8 | sed 's/^/  /'
fi
grep "waits for the move\|map waited" "$dir/coordinator.log" | sed 's/^/  /'
# Source and destination switched to the move's epoch with their own map;
# the map with the takeover in it must be newer than that, or they keep
# theirs.  Data process 2 is still dead here.
# maps_agree: the four live processes answer one map (data process 2
# cannot), at the coordinator's epoch.
maps_agree() {
    local epoch coord
    "$cli" --dir "$dir" map >"$dir/map.out" 2>&1
    grep -q "^4 of 5 processes answer this map" "$dir/map.out" || return 1
    epoch=$(sed -n '1s/.*: epoch \([0-9]*\),.*/\1/p' "$dir/map.out")
    coord=$(mc "$(cat "$dir/coordinator")" 'stats\r\n' | awk '$2 == "coord_epoch" { print $3 }' | tr -d '\r')
    [ -n "$epoch" ] && [ "$epoch" = "$coord" ]
}
if wait_for 30 maps_agree; then
    ok "the live processes hold the coordinator's map, the move and the takeover in it: $(head -n 1 "$dir/map.out")"
else
    fail "the processes' maps differ: $(grep -v ' this map' "$dir/map.out" | head -n 6 | tr '\n' ' ')"
fi
kill -CONT "$node"
node_stopped=""

cluster_healthy_again "$dir" "after data process 2 was killed during the move"
if "$cli" --dir "$dir" map >"$dir/map.out" 2>&1; then
    ok "every process holds the coordinator's map: $(head -n 1 "$dir/map.out")"
else
    fail "the processes' maps differ: $(grep -v ' this map' "$dir/map.out" | head -n 6 | tr '\n' ' ')"
fi

"$bench" -s "$dp0" -n 8000 --no-load -o 16000 -r 1 --verify >"$dir/read.out" 2>&1
if grep -q "total_errors=0 total_wrong=0" "$dir/read.out" && grep -q "misses=0" "$dir/read.out"; then
    ok "every key written before reads back through the map (16000 reads, --verify)"
else
    fail "keys do not read back: $(grep -E 'errors|misses' "$dir/read.out" | tail -3)"
fi
# Writes and reads of every key, the moved slot's and data process 2's
# among them: each connection must read its own last write.
"$bench" -s "$dp0" -n 8000 --no-load -o 16000 -r 0.5 --verify-latest >"$dir/rw.out" 2>&1
if grep -q "total_errors=0 total_wrong=0" "$dir/rw.out"; then
    ok "writes after the move read back through the map (16000 operations, --verify-latest)"
else
    fail "writes after the move: $(grep -E 'errors|misses' "$dir/rw.out" | tail -3)"
fi
cluster_check_ok "$dir" verify "after the move and the takeover"
cluster_check_ok "$dir" decode-check "after the move and the takeover"

# Again, and the coordinator is killed while it holds the takeover's map
# (the map is not saved; cocytus-node starts the coordinator again): the
# restarted one resumes the move, and every process must end with its
# map and every key read back.
key_owners "$dir" 8000 || { fail "cannot read the slot map"; finish; }
slot2=$(owned_slots "$dir" "$dp0" | grep -vx "$slot" | head -n 1)
d1=$(group0_pid "$dir" data 1)
d2=$(group0_pid "$dir" data 2)
c_old=$(pgrep -f -- "--role coordinator --cluster $dir/cluster.conf" | head -1)
[ -n "$slot2" ] && [ -n "$d1" ] && [ -n "$d2" ] && [ -n "$c_old" ] ||
    { fail "no second slot, data process 1 or 2, or coordinator"; finish; }
kill -STOP "$d1" && stopped=$d1
"$cli" --dir "$dir" --timeout 20000 move "$slot2" 0 1 >"$dir/move2.out" 2>&1 &
move_pid=$!
wait_for 50 grep -q "moving slot $slot2 " "$dir/coordinator.log" ||
    fail "the coordinator did not start the second move: $(cat "$dir/move2.out")"
sleep 0.3
kill -KILL "$d2"
if wait_for 50 grep -q "the map's change waits for the move of slot $slot2 " "$dir/coordinator.log"; then
    kill -KILL "$c_old"
    ok "the coordinator killed while it held data process 2's takeover map for slot $slot2's move"
else
    fail "no takeover map held for slot $slot2's move: $(grep -E "dp 2|slot $slot2" "$dir/coordinator.log" | tail -n 4)"
fi
sleep 0.5
kill -CONT "$d1"
stopped=""
wait "$move_pid"
if wait_for 300 grep -q "move of slot $slot2 .* done" "$dir/coordinator.log"; then
    ok "the restarted coordinator saw slot $slot2's move done"
else
    fail "slot $slot2's move: $(grep -E "slot $slot2" "$dir/coordinator.log" | tail -n 4)"
fi
# (Data process 2 comes back within a second, takes its keys back and
# makes a new map itself, so whether the restarted coordinator published
# the held takeover's map from the saved view first depends on timing.)
grep -E "saved map does not name" "$dir/coordinator.log" | sed 's/^/  /'
cluster_healthy_again "$dir" "after the coordinator died holding a takeover's map"
if "$cli" --dir "$dir" map >"$dir/map.out" 2>&1; then
    ok "every process holds the restarted coordinator's map: $(head -n 1 "$dir/map.out")"
else
    fail "the processes' maps differ: $(grep -v ' this map' "$dir/map.out" | head -n 6 | tr '\n' ' ')"
fi
"$bench" -s "$dp0" -n 8000 --no-load -o 16000 -r 0.5 --verify-latest >"$dir/rw2.out" 2>&1
if grep -q "total_errors=0 total_wrong=0" "$dir/rw2.out"; then
    ok "reads and writes of every key through the map after the restart (--verify-latest)"
else
    fail "after the restart: $(grep -E 'errors|misses' "$dir/rw2.out" | tail -3)"
fi
cluster_check_ok "$dir" verify "after the coordinator's restart"

finish
