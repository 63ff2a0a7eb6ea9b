#!/usr/bin/env bash
# copy_refused.sh - a copy that loses a metadata message is abandoned and
# taken again, never used short of keys.
#
# A process that takes a copy (a parity process being rebuilt, a restarted
# data process taking its keys back from its recovery process) applies the
# copy's metadata as it comes (cocytus/rebuild.h).  Applying one can fail
# for want of memory.  Before 2026-12-05 both only logged it and went on:
# the copy then completed without those keys, and a data process handed
# off so would have served their keys as misses, or a rebuilt parity
# process held parity without their metadata.  Now:
#   - a parity process being rebuilt spoils the attempt and answers
#     rebuild-failed: the coordinator starts the rebuild over at once;
#   - a replacement data process marks the copy's stream diverged: its
#     link to the recovery process is closed and refused (that process
#     drops it from its ack set, and its writes go on), the copy never says
#     it is complete and the handoff is refused.  It tells the coordinator
#     (copy-failed), which abandons the migration at once and asks again;
#     the process makes a new replica for it.  (Until 2026-12-05 the
#     coordinator only abandoned it once its progress had stopped for
#     COCYTUS_REPAIR_STALL_MS, 10 s: this test ran with 1.5 s.)
# Out of memory cannot be caused on purpose, so every process here runs
# with COCYTUS_TEST_COPY_META_REFUSE: the first metadata message of the
# first copy it takes is refused as if out of memory.
#
# One node, RS(3,5), a coordinator, no proxy, routing off, 20,000 keys.
# A: parity process 1 is killed and rebuilt while writers write through
# data processes 0 and 1.  B: data process 0 is killed; a writer writes
# through parity process 0, its recovery process; the restarted data
# process refuses its first copy, takes the second, and the recovery
# process's own rebuild afterwards refuses and starts over once too.  Then
# every acknowledged write reads back and verify and decode-check find the
# group exact.
set -u

script_dir=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$script_dir/lib.sh"
need_built "$server_bin" "$build_dir/cocytus/cocytus-node" "$build_dir/client/cocytus-cli" \
    "$build_dir/bench/cocytus-bench"

dir=$(mktemp -d "${TMPDIR:-/tmp}/copy_refused.XXXXXX")
on_exit 'writers_kill "$dir"; cluster_remove "$dir"'

export COCYTUS_TEST_COPY_META_REFUSE=1
cluster_up "$dir" 12 10000 20000 --nodes 1 --scheme rs:3:5 --routing off --no-proxy ||
    { fail "cluster up"; exit 1; }
group0_before "$dir"
dp0=$(group0_addr "$dir" data 0)
pp0=$(group0_addr "$dir" parity 0)
"$build_dir/bench/cocytus-bench" -s "$dp0" -n 20000 -v 16 -c 2 --depth 32 --no-run -q \
    >"$dir/load.out" 2>&1 && grep -q "errors=0" "$dir/load.out" &&
    ok "20000 keys loaded" || { tail -3 "$dir/load.out"; fail "loading 20000 keys"; finish; }

# refused_and_restarted LOG WHAT: LOG shows a rebuild attempt spoiled by the
# refused metadata message.
refused_and_restarted() {
    if grep -q "cannot finish: test fault: metadata refused as if out of memory" $1; then
        ok "$2 refused the metadata of its first rebuild attempt and asked to start over"
    else
        grep "rebuild" $1 | tail -5
        fail "$2 did not spoil its first rebuild attempt: the test missed what it is about"
    fi
}

# --- A: a parity process's rebuild spoiled once, started over at once.
for i in 0 1; do
    group0_writer_bg "$dir" "$i" 2>/dev/null   # (data process 0 refuses connections while dead)
done
sleep 0.3
group0_kill_pp1 "$dir"
refused_and_restarted "$dir/parity-0-1*.log" "the restarted parity process 1"
grep -q "group 0 parity process 1 cannot finish rebuild attempt .*; starting over" \
    "$dir/coordinator.log" && ok "the coordinator started the rebuild over at once" ||
    fail "the coordinator did not start the rebuild over on rebuild-failed"

# --- B: the copy back to the restarted data process refused once.
writer_bg "$dir" r0 "$pp0"
group0_kill_dp0 "$dir" || finish
spoiled() { cat "$dir"/data-0-0*.log | grep -q "metadata of the copy of dp 0 refused: test fault"; }
if wait_for 300 spoiled; then
    ok "the restarted data process 0 refused its first copy's metadata"
    # The recovery process must not wait for the abandoned copy.
    t0=${EPOCHREALTIME/./}
    reply=$(MC_TIMEOUT=10 mc "$pp0" "set during_refused 0 0 3\r\nyes\r\n")
    t1=${EPOCHREALTIME/./}
    took=$(((t1 - t0) / 1000))
    [ "$reply" = STORED ] && [ "$took" -lt 1000 ] &&
        ok "a set through the recovery process is stored in $took ms after the refusal" ||
        fail "a set through the recovery process after the refusal: '${reply:-nothing}' after $took ms"
else
    fail "the restarted data process 0 never refused a copy: the test missed what it is about"
fi
group0_dp0_back "$dir"
grep -q "group 0 dp 0: migration from parity process 0 abandoned in the copy: the data process could not apply its copy" \
    "$dir/coordinator.log" && ok "the coordinator abandoned the refused copy as soon as it was told" ||
    fail "the coordinator did not abandon the refused copy on copy-failed"
grep -q "abandoned in the copy: no progress" "$dir/coordinator.log" &&
    fail "a copy was abandoned for want of progress (10 s) instead"
cat "$dir"/data-0-0*.log | grep -q "a new copy from parity process 0 replaces the one abandoned" &&
    ok "data process 0 took a new copy" || fail "data process 0 never made a new replica"
copies=$(cat "$dir"/data-0-0*.log | grep -c "copy of dp 0 complete")
handoffs=$(cat "$dir"/data-0-0*.log | grep -c "serving again from xid")
[ "$copies" -eq 1 ] && [ "$handoffs" -eq 1 ] &&
    ok "only the second copy completed, and was handed off" ||
    fail "$copies copies completed and $handoffs handed off, not 1 and 1"
refused_and_restarted "$dir/parity-0-0*.log" "the former recovery process"
writers_finish "$dir"

group0_writers_read_back "$dir" 0 1
writer_read_back "$dir" r0 "$dp0"
reply=$(mc "$dp0" "get during_refused\r\n" | sed -n 2p)
[ "$reply" = yes ] && ok "during_refused reads back through data process 0" ||
    fail "get during_refused through data process 0: '$reply'"
group0_after "$dir" "after the refused copies"
cluster_check_ok "$dir" decode-check "after the refused copies"
finish
