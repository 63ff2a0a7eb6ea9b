#!/usr/bin/env bash
# move_commit_lost.sh - a slot move's destination takes the commit, serves
# writes of the slot, and dies, and its answer to the commit never reached
# the source: the move must count as done, and those writes must survive.
#
# The source, that never heard the answer, keeps the new map, deletes
# nothing and reports the outcome unknown.  The coordinator used to count
# that as a failed move: the takeover's map then gave the slot back to the
# source, whose copies are older than what the destination acknowledged.
# The destination holds every key of the slot whatever became of the commit
# (the copy and every forwarded write were acknowledged before the commit
# was sent), so the move now counts as done.
#
# Across hosts that answer is lost when the destination's host dies with it
# in flight; here a test fault stands in for the network
# (COCYTUS_TEST_MUTE_DIR/commit-lost-data-1-0: the destination takes the
# commit without answering it and refuses the source's retries), and the
# destination is muted to the coordinator (mute-data-1-0), so that its
# heartbeat cannot tell the coordinator its new epoch first.
#
# Three nodes, RS(2,3), a coordinator, no proxy.  A slot of group 0's data
# process 0 moves to group 1's data process 0; once the destination took
# it, four of its keys are written there, the source reports, and the
# destination is killed (SIGKILL).  Those four values must read back from
# the slot's owner by the coordinator's map once the groups are whole, and
# verify must pass.
set -u

script_dir=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$script_dir/lib.sh"
need_built "$server_bin" "$build_dir/cocytus/cocytus-node" "$build_dir/client/cocytus-cli" \
    "$build_dir/bench/cocytus-bench"
cli=$build_dir/client/cocytus-cli

# The destination is muted for the source's commit retries (about 6 s):
# not a death until it is killed.
export COCYTUS_DEAD_AFTER_MS=15000

# run_taken SCHEME NODES ROLE WHEN: the destination takes the commit
# unanswered, takes writes, and is killed after the source reported (WHEN
# "after"), or at once ("before": the source's retries then reach its
# restarted successor, which refuses a commit of a copy it never received,
# and its report finds the destination dead, its data with the process
# that took it over); ROLE is the serving role (data, primary).
run_taken() {
local scheme=$1 nodes=$2 role=$3 when=$4 n k reply got
echo "== $scheme: the destination took the commit, then died ($when the source's report)"
dir=$(mktemp -d "${TMPDIR:-/tmp}/move_commit_lost.XXXXXX")
on_exit "cluster_remove '$dir'"
mkdir -p "$dir/faults"
export COCYTUS_TEST_MUTE_DIR=$dir/faults

move_cluster "$dir" "$nodes" "$scheme" "$role" || return
keys=$(awk -v s="$slot" '$1 == s { print $2 }' "$dir/all.slots" | head -n 4)
d_pid=$(proc_pid "$dir" "$role" 1 0)
[ -n "$d_pid" ] || { fail "no pid for group 1's $role process 0"; return; }

touch "$dir/faults/mute-$role-1-0" "$dir/faults/commit-lost-$role-1-0"
"$cli" --dir "$dir" --timeout 20000 move "$slot" 1 0 >"$dir/move.out" 2>&1 &
move_pid=$!
took() { grep -q "import: took slot $slot .*test fault: not answered" "$dir/$role-1-0.log"; }
if wait_for 100 took; then
    ok "the destination took slot $slot without answering the commit"
else
    fail "the destination never took slot $slot: $(grep "slot $slot" "$dir/$role-1-0.log" | tail -n 2)"
    return
fi
n=0
for k in $keys; do
    reply=$(mc "$dst" "set $k 0 0 7\r\nafter_$n\r\n")
    [ "$reply" = STORED ] || fail "set $k at the destination: $reply"
    n=$((n + 1))
done
ok "$n keys of slot $slot rewritten at the destination after it took the slot"
if [ "$when" = before ]; then
    kill -KILL "$d_pid"
    rm -f "$dir/faults/mute-$role-1-0" "$dir/faults/commit-lost-$role-1-0"
fi
if wait_for 200 grep -q "slot $slot .*commit outcome unknown" "$dir/coordinator.log"; then
    ok "the source reported: $(grep "slot $slot .*commit outcome unknown" "$dir/coordinator.log" |
        tail -n 1 | sed 's/.*reports/reports/')"
else
    fail "no report of the commit's unknown outcome: $(grep "slot $slot" "$dir/coordinator.log" | tail -n 3)"
fi
if [ "$when" = after ]; then
    kill -KILL "$d_pid"
    rm -f "$dir/faults/mute-$role-1-0" "$dir/faults/commit-lost-$role-1-0"
fi
wait "$move_pid"
if grep -q "move of slot $slot .* done" "$dir/coordinator.log"; then
    ok "the coordinator counts the move done"
else
    fail "the move of slot $slot: $(grep -E "slot $slot" "$dir/coordinator.log" | tail -n 3)"
fi

cluster_healthy_again "$dir" "after the destination died"
if "$cli" --dir "$dir" map >"$dir/map.out" 2>&1; then
    ok "every process holds the coordinator's map: $(head -n 1 "$dir/map.out")"
else
    fail "the processes' maps differ: $(grep -v ' this map' "$dir/map.out" | head -n 6 | tr '\n' ' ')"
fi
owner=$("$cli" --dir "$dir" --full map 2>/dev/null |
    awk -v s="$slot" '$1 == "slots" { split($2, r, "-"); if (s >= r[1] && s <= r[2]) print $3 }')
[ -n "$owner" ] && [ "$owner" != "$src" ] && ok "slot $slot is served by $owner, not the source" ||
    fail "slot $slot is served by '$owner' (the source is $src)"
n=0
for k in $keys; do
    got=$(mc "$owner" "get $k\r\n" | sed -n 2p)
    [ "$got" = "after_$n" ] && ok "$k reads back after_$n" ||
        fail "$k reads back '${got:0:40}', not the acknowledged after_$n"
    n=$((n + 1))
done
cluster_check_ok "$dir" verify "after the destination died"
cluster_remove "$dir"
}

run_taken rs:2:3 3 data after
run_taken rs:2:3 3 data before
run_taken pbr:1 2 primary after
run_taken pbr:1 2 primary before

# Part 2: the same in a plain cluster, whose processes restart empty: the
# destination's place keeps nothing, the source's copies are the only
# ones, so the move fails and the slot stays with the source (its map,
# switched, is corrected by the map published past the move's epoch).
echo "== plain: the destination restarts empty"
dir=$(mktemp -d "${TMPDIR:-/tmp}/move_commit_lost.XXXXXX")
on_exit "cluster_remove '$dir'"
mkdir -p "$dir/faults"
export COCYTUS_TEST_MUTE_DIR=$dir/faults
move_cluster "$dir" 2 plain plain || finish
d_pid=$(proc_pid "$dir" plain 1 0)
[ -n "$d_pid" ] || { fail "plain: no pid for group 1's plain process 0"; finish; }
touch "$dir/faults/mute-plain-1-0" "$dir/faults/commit-lost-plain-1-0"
"$cli" --dir "$dir" --timeout 20000 move "$slot" 1 0 >"$dir/move.out" 2>&1 &
move_pid=$!
took() { grep -q "import: took slot $slot .*test fault: not answered" "$dir/plain-1-0.log"; }
if wait_for 100 took; then
    kill -KILL "$d_pid"
    # its successor, started by the node, is not faulted: it must refuse
    # the source's retried commit itself (it never received the copy)
    rm -f "$dir/faults/mute-plain-1-0" "$dir/faults/commit-lost-plain-1-0"
    ok "plain: the destination took slot $slot without answering, and was killed"
else
    fail "plain: the destination never took slot $slot"
fi
if wait_for 200 grep -q "move of slot $slot .* failed: commit outcome unknown" "$dir/coordinator.log"; then
    ok "plain: $(grep "slot $slot .*kept no copy" "$dir/coordinator.log" | tail -n 1 | sed 's/.*, and the/the/')"
else
    fail "plain: the move of slot $slot: $(grep "slot $slot" "$dir/coordinator.log" | tail -n 3)"
fi
wait "$move_pid"
if wait_for 100 "$cli" --dir "$dir" map >"$dir/map.out" 2>&1; then
    ok "plain: every process holds the coordinator's map: $(head -n 1 "$dir/map.out")"
else
    fail "plain: the processes' maps differ: $(grep -v ' this map' "$dir/map.out" | head -n 6 | tr '\n' ' ')"
fi
owner=$("$cli" --dir "$dir" --full map 2>/dev/null |
    awk -v s="$slot" '$1 == "slots" { split($2, r, "-"); if (s >= r[1] && s <= r[2]) print $3 }')
[ "$owner" = "$src" ] && ok "plain: slot $slot stays with the source $src" ||
    fail "plain: slot $slot is served by '$owner', not the source $src"
# (The destination's own slots are gone with it: plain keeps no copies.)
total=0 found=0
for k in $(awk -v s="$slot" '$1 == s { print $2 }' "$dir/all.slots"); do
    total=$((total + 1))
    mc "$src" "get $k\r\n" | grep -q "^VALUE $k " && found=$((found + 1))
done
[ "$total" -gt 0 ] && [ "$found" = "$total" ] &&
    ok "plain: all $total keys of slot $slot read back from the source" ||
    fail "plain: $found of $total keys of slot $slot read back from the source"
finish
