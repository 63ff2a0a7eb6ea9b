#!/usr/bin/env bash
# move_then_recover.sh - a data process that has moved a slot still takes
# part in recovery and rebuild.
#
# The first slot move on a process puts the move's engine (migrate.c) in
# front of the data engine for good.  It passed on reads, writes, stats,
# admin commands and the slot walk, but not the other optional operations:
# the coordinator's recovery messages (`group`, `rebuild`, `prepare`, ...),
# the heartbeat's progress words, the meta commands' marks, the dumps and
# the news of a new slot map went nowhere.  So after any move, a parity
# process that died was never rebuilt (the mover never began its copy:
# "rebuild made no progress ... starting over", every 10 s, for good).
#
# One node, RS(3,5), a coordinator, no proxy.  A slot of data process 0
# with keys in it moves to data process 1; then parity process 1 is killed
# (cocytus-node starts it again) and must be rebuilt, with data process 0
# among its sources; then data process 2 is killed, and its keys must be
# served and it rebuilt while data process 0 gets the new group views.
# verify and decode-check must pass, and the keys written before read back.
# Then the same for PBR(1) on two nodes: group 0's primary moves a slot to
# group 1, its backup is killed, and writes through it must go on and the
# group be whole again.
set -u

script_dir=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$script_dir/lib.sh"
need_built "$server_bin" "$build_dir/cocytus/cocytus-node" "$build_dir/client/cocytus-cli" \
    "$build_dir/bench/cocytus-bench"
bench=$build_dir/bench/cocytus-bench
cli=$build_dir/client/cocytus-cli

dir=$(mktemp -d "${TMPDIR:-/tmp}/move_then_recover.XXXXXX")
cleanup() { cluster_remove "$dir"; }
on_exit cleanup

cluster_up "$dir" 12 10000 20000 --nodes 1 --scheme rs:3:5 --no-proxy ||
    { fail "cluster up"; exit 1; }
dp0=$(group0_addr "$dir" data 0)
"$bench" -s "$dp0" -n 4000 --no-run >"$dir/load.out" 2>&1 &&
    grep -q "total_errors=0" "$dir/load.out" && ok "4000 keys written" || fail "load: $(tail -n 2 "$dir/load.out")"

# move_a_slot FROM TO... LOG: the slot of FROM's that holds the most of
# the bench's keys moves (`cocytus-cli move SLOT TO...`); FROM's LOG must
# say it sent keys.
move_a_slot() {
    local from=$1 log=${*: -1} slot out
    local to=("${@:2:$(($# - 2))}")
    key_owners "$dir" 4000 || fail "cannot read the slot map"
    slot=$(owned_slots "$dir" "$from" | head -n 1)
    [ -n "$slot" ] || { fail "no slot of $from holds a key"; finish; }
    out=$("$cli" --dir "$dir" --timeout 20000 move "$slot" "${to[@]}" 2>&1)
    if echo "$out" | grep -q "done" && grep -q "migrate slot $slot .*done ([1-9][0-9]* keys sent" "$log"; then
        ok "slot $slot moved from $from: $(grep "migrate slot $slot .*done" "$log")"
    else
        fail "move of slot $slot: $out"
        finish
    fi
}
move_a_slot "$dp0" 0 1 "$dir/data-0-0.log"

# Parity process 1 dies; it is rebuilt from the three data processes.
p1=$(group0_pid "$dir" parity 1)
[ -n "$p1" ] || { fail "no parity process 1 found"; finish; }
kill -KILL "$p1" 2>/dev/null
wait_for 100 grep -q "group 0 parity process 1 is rebuilt from" "$dir/coordinator.log" ||
    fail "the coordinator did not start rebuilding parity process 1"
cluster_healthy_again "$dir" "after parity process 1 was killed and rebuilt"
if grep -q "copy of our state to parity 1 sent" "$dir/data-0-0.log"; then
    ok "data process 0 (the mover) copied its state to parity process 1"
else
    fail "data process 0 (the mover) never copied its state to parity process 1"
    grep "parity process 1" "$dir/coordinator.log" | tail -4
fi

# Data process 2 dies: a parity process serves its keys, it comes back.
d2=$(group0_pid "$dir" data 2)
[ -n "$d2" ] || { fail "no data process 2 found"; finish; }
kill -KILL "$d2" 2>/dev/null
cluster_healthy_again "$dir" "after data process 2 was killed"

"$bench" -s "$dp0" -n 4000 --no-load -o 8000 -r 1 --verify >"$dir/read.out" 2>&1
if grep -q "total_errors=0 total_wrong=0" "$dir/read.out" && grep -q "misses=0" "$dir/read.out"; then
    ok "every key written before reads back (8000 reads, --verify)"
else
    fail "keys do not read back: $(grep -E 'errors|misses' "$dir/read.out" | tail -3)"
fi
cluster_check_ok "$dir" verify "after both recoveries"
cluster_check_ok "$dir" decode-check "after both recoveries"
cluster_remove "$dir"

# PBR(1), two nodes (two groups): a slot with keys moves from group 0's
# primary to group 1; then group 0's backup is killed.  The primary must
# hear the coordinator (its backup dead, then back and admitted): writes
# through it go on, and the group is at full redundancy again.
dir=$(mktemp -d "${TMPDIR:-/tmp}/move_then_recover.XXXXXX")
cluster_up "$dir" 12 10000 20000 --nodes 2 --scheme pbr:1 --no-proxy ||
    { fail "PBR cluster up"; finish; }
primary=$(group0_addr "$dir" primary 0)
"$bench" -s "$primary" -n 4000 --no-run >"$dir/load.out" 2>&1 &&
    grep -q "total_errors=0" "$dir/load.out" && ok "PBR: 4000 keys written" ||
    fail "PBR load: $(tail -n 2 "$dir/load.out")"
move_a_slot "$primary" 1 "$dir/primary-0-0.log"
backup=$(group0_pid "$dir" backup 0)
[ -n "$backup" ] || { fail "PBR: no backup process found"; finish; }
kill -KILL "$backup" 2>/dev/null
# (Bounded: on the build before, every write waited for the dead backup
# for good.)
timeout 60 "$bench" -s "$primary" -n 4000 --no-load -r 0 -t 4 --deadline-ms 5000 -q >"$dir/write.out" 2>&1
writes=$(awk -F'[ =]' '/^phase=run/ { for (i = 1; i < NF; i++) if ($i == "ops") print $(i + 1) }' "$dir/write.out")
if grep -q "total_errors=0 total_wrong=0" "$dir/write.out" && [ "${writes:-0}" -ge 100 ]; then
    ok "PBR: $writes writes through the mover in 4 s after its backup was killed, no error"
else
    fail "PBR: writes through the mover after its backup was killed: ${writes:-no} writes, $(grep -E 'error|total' "$dir/write.out" | tail -n 2)"
fi
cluster_healthy_again "$dir" "after the PBR backup was killed"
finish
