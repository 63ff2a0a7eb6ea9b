#!/usr/bin/env bash
# takeover_failed.sh - a parity process that cannot take a dead data process
# over refuses the takeover and stays the parity process it was; the
# coordinator's next attempt, a second later, succeeds, and no acknowledged
# write is lost.  The same for the way back: a restarted data process that
# cannot take its keys back from the recovery process leaves them there,
# and takes them at the coordinator's next request.
#
# A takeover has two steps that can fail, both for want of memory: the
# data engine and recovery's unit map.  They come before the first step
# that changes the process (zeroing the units the dead process's data will
# be rebuilt into), so a refusal changes nothing but the stream settled at
# the stable xid.  The allocator is built after the takeover, on a thread,
# while the recovery process serves; a build that fails is tried again, and
# meanwhile writes that need space wait (reads and overwrites in place do
# not).  Out of memory cannot be caused on purpose, so the processes here
# run with COCYTUS_TEST_TAKEOVER_FAIL=build,engine,units: each of those
# steps fails once on the parity process chosen (the build is then tried
# again 4 s later); with
# COCYTUS_TEST_HANDOFF_FAIL the restarted data process's first handoff fails
# where taking the table and allocator from its replica could.
#
# One node, RS(3,5), a coordinator, no proxy, routing off.  A key is
# stored through each data process, writers run through all three, and
# data process 0 is killed (cocytus-node starts it again).  Then:
#   - parity process 0 refuses two takeovers, one per step, and then
#     serves data process 0's keys: before_0 reads back through it and an
#     overwrite of it in place is stored at once, also once the restarted
#     data process has asked for its keys back (that copy waits for the
#     allocator; before 2026-12-04 every write waited with it), while a
#     new key waits for the allocator's second build and is stored after it;
#   - the restarted data process 0 fails its first handoff, takes its keys
#     back at the next and the group returns to full redundancy;
#   - every write acknowledged reads back, verify and decode-check find the
#     group exact, and a write through each data process is stored.
set -u

script_dir=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$script_dir/lib.sh"
need_built "$server_bin" "$build_dir/cocytus/cocytus-node" "$build_dir/client/cocytus-cli"

dir=$(mktemp -d "${TMPDIR:-/tmp}/takeover_failed.XXXXXX")
cleanup() {
    writers_kill "$dir"
    cluster_remove "$dir"
}
on_exit cleanup

export COCYTUS_TEST_TAKEOVER_FAIL=build,engine,units COCYTUS_TEST_HANDOFF_FAIL=1
cluster_up "$dir" 12 10000 20000 --nodes 1 --scheme rs:3:5 --routing off --no-proxy ||
    { fail "cluster up"; exit 1; }
group0_before "$dir"

for i in 0 1 2; do
    group0_writer_bg "$dir" "$i"
done
sleep 0.3

dp_old=$(group0_pid "$dir" data 0)
[ -n "$dp_old" ] || { fail "no data process 0"; finish; }
pp0_log="$dir/parity-0-0.log"
served() { grep -q "group 0 dp 0 is served by parity process 0" "$dir/coordinator.log"; }
t0=${EPOCHREALTIME/./}
kill -KILL "$dp_old"
if wait_for 300 served; then
    t1=${EPOCHREALTIME/./}
    ok "parity process 0 serves data process 0 $(((t1 - t0) / 1000)) ms after its kill"
else
    grep "group 0" "$dir/coordinator.log" | tail -8
    fail "parity process 0 never served data process 0"
    finish
fi

# Each step failed once, was refused, and the third attempt went through.
for step in "data engine" "unit map"; do
    if grep -q "test fault: this takeover fails at its $step step" "$pp0_log"; then
        ok "the takeover failed once at its $step step"
    else
        fail "no takeover failed at its $step step: the test missed what it is about"
    fi
done
refused=$(grep -c "takeover of dp 0 refused" "$pp0_log")
[ "$refused" -eq 2 ] && ok "parity process 0 refused 2 takeovers" ||
    { grep "takeover" "$pp0_log"; fail "parity process 0 refused $refused takeovers, not 2"; }
grep -q "now the recovery process of dp 0" "$pp0_log" &&
    ok "the next attempt made it data process 0's recovery process" ||
    fail "parity process 0 never became the recovery process"
# It kept the whole table through the refusals: a key stored before the
# kill reads back, and is overwritten in place, while its allocator's first
# build has failed and the next is 4 s away.  (The waits are generous: the
# units of the key may have to be rebuilt first, on a loaded machine.)
pp0=$(group0_addr "$dir" parity 0)
built() { grep -q "allocator built" "$pp0_log"; }
built && fail "the allocator was built before the checks that need it missing: \
the machine is too slow for this test's 4 s window"
reply=$(MC_TIMEOUT=10 mc "$pp0" "get before_0\r\n" | head -1)
[ "$reply" = "VALUE before_0 0 8" ] && ok "before_0 reads back through the recovery process" ||
    fail "get before_0 through the recovery process: ${reply:-nothing in 10 s}"
reply=$(MC_TIMEOUT=10 mc "$pp0" "set before_0 0 0 8\r\nBEFORE_0\r\n")
answered_before_build=yes
built && answered_before_build=no
[ "$reply" = STORED ] && ok "an overwrite in place is stored (before the allocator was built: $answered_before_build)" ||
    fail "overwrite of before_0 through the recovery process: ${reply:-nothing in 10 s}"
[ "$answered_before_build" = yes ] ||
    fail "the allocator was built before the overwrite was answered: it proves nothing"
# The restarted data process asks for its keys back meanwhile: the copy
# waits for the allocator, and writes through r must not wait with it
# (they did, for the whole build, before 2026-12-04).
requested() { grep -q "copy of our state to data 0 requested" "$pp0_log"; }
if wait_for 30 requested && ! built; then
    t0=${EPOCHREALTIME/./}
    reply=$(MC_TIMEOUT=10 mc "$pp0" "set before_0 0 0 8\r\nBefore_0\r\n")
    t1=${EPOCHREALTIME/./}
    took=$(((t1 - t0) / 1000))
    # The build is about 4 s away (the fault's retry): a reply after 2 s
    # waited for it.
    if [ "$reply" = STORED ] && [ "$took" -lt 2000 ]; then
        ok "an overwrite in place is stored in $took ms while the copy to data process 0 waits for the allocator"
    else
        fail "an overwrite while the copy waits for the allocator: '${reply:-nothing in 10 s}' after $took ms"
    fi
else
    ok "the copy to data process 0 was not asked for before the allocator was built (not checked)"
fi
new_out=$dir/new-key.out
(
    exec 3<>"/dev/tcp/${pp0%:*}/${pp0##*:}" || exit 1
    printf 'set new_key_0 0 0 3\r\nnew\r\n' >&3
    IFS= read -r -t 15 line <&3
    echo "${line%$'\r'}" >"$new_out"
) &
new_pid=$!
sleep 0.5
# Answered first, built second: an answer seen here came before any build
# seen after it.
answered=no
[ -s "$new_out" ] && answered=yes
if [ "$answered" = yes ] && ! built; then
    fail "a new key was answered ($(cat "$new_out")) before the allocator was built"
fi
wait "$new_pid"
[ "$(cat "$new_out" 2>/dev/null)" = STORED ] && ok "the new key is stored once it is built" ||
    fail "set new_key_0 through the recovery process: '$(cat "$new_out" 2>/dev/null)'"
waited=$(grep -o "([0-9]* tries of one waited for it)" "$pp0_log" | head -1 | tr -dc '0-9')
[ "${waited:-0}" -ge 1 ] && ok "the new key waited for the allocator ($waited tries)" ||
    fail "no write waited for the allocator (${waited:-no build logged})"
grep -q "test fault: this allocator build fails" "$pp0_log" &&
    ok "the allocator's first build failed" ||
    fail "no allocator build failed: the test missed what it is about"
if grep -Eq "allocator built from [0-9]+ pieces in [0-9.]+ ms on its own thread" "$pp0_log"; then
    ok "$(grep -o "allocator built from .*" "$pp0_log" | head -1)"
else
    grep "allocator" "$pp0_log"
    fail "the allocator was never built on its thread"
fi

group0_dp0_back "$dir"
# Only the restarted process hands off (the first one was killed).
if cat "$dir"/data-0-0*.log | grep -q "test fault: this handoff fails at taking the table"; then
    ok "the restarted data process 0 failed its first handoff"
else
    fail "no handoff failed: the test missed what it is about"
fi
handoffs=$(cat "$dir"/data-0-0*.log | grep -c "serving again from xid")
[ "$handoffs" -eq 1 ] && ok "it took its keys back at the next request" ||
    fail "it took its keys back $handoffs times, not once"
writers_finish "$dir"

group0_writers_read_back "$dir" 0 1 2
reply=$(mc "$(group0_addr "$dir" data 0)" "get new_key_0\r\n" | sed -n 2p)
[ "$reply" = new ] && ok "new_key_0 reads back through data process 0" ||
    fail "get new_key_0 through data process 0: '$reply'"
group0_after "$dir" "after the refused takeovers"
cluster_check_ok "$dir" decode-check "after the refused takeovers"
finish
