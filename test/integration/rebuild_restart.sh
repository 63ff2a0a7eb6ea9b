#!/usr/bin/env bash
# rebuild_restart.sh - a parity process's rebuild that the coordinator
# starts over must still end, with the parity exact.
#
# A rebuild of parity process j whose progress stops for a while (10 s;
# here COCYTUS_REPAIR_STALL_MS=300) starts over: j starts empty again and
# every source copies its state to it once more.  A source whose first copy
# had ended held j as a settled peer, still streaming to it, so the second
# `rebuild` failed there ("it cannot join the ack set"), the emptied j got
# that source's records without their start, and the rebuild stalled and
# started over every 10 s, for good.  Now the coordinator declares j dead
# before it starts over (each source drops it, as before a first attempt),
# a source drops what is left of an earlier attempt itself when the next
# one is asked for, the emptied j drops what an old stream still sends
# until that source's new copy begins, and a copy's BEGIN names its
# attempt (j ignores a copy for another one).
#
# One node, RS(3,5), a coordinator, no proxy, routing off.  A key is
# stored through each data process; data process 2 is stopped (SIGSTOP,
# at most 4 s; the coordinator is told to declare a process dead after 5 s
# of silence rather than 1.5 s) and parity process 1 killed.  cocytus-node
# starts it again, and its rebuild starts: data processes 0 and 1 copy to
# j, data process 2 cannot, so j's progress stops and the coordinator
# starts the rebuild over, with 0 and 1's first copies ended.  (Should the
# rebuild not start over within the 4 s, on a very loaded machine, it is
# let finish and tried again: up to 3 tries.)
# Writes go on through data processes 0 and 1 all along.  Then data
# process 2 continues; j must hold parity again after the second attempt,
# a source must have copied to it twice, verify must find the group exact,
# every write acknowledged must read back, and a write through each data
# process must be stored.  On the old code the rebuild starts over for
# good and writes hang.
set -u

script_dir=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$script_dir/lib.sh"
need_built "$server_bin" "$build_dir/cocytus/cocytus-node" "$build_dir/client/cocytus-cli"

dir=$(mktemp -d "${TMPDIR:-/tmp}/rebuild_restart.XXXXXX")
stopped=""
cleanup() {
    [ -n "$stopped" ] && kill -CONT "$stopped" 2>/dev/null
    writers_kill "$dir"
    cluster_remove "$dir"
}
on_exit cleanup

# A stopped data process is declared dead after 5 s here, not 1.5 s: the
# test stops one for up to 3 s.
export COCYTUS_REPAIR_STALL_MS=300 COCYTUS_DEAD_AFTER_MS=5000
cluster_up "$dir" 12 10000 20000 --nodes 1 --scheme rs:3:5 --routing off --no-proxy ||
    { fail "cluster up"; exit 1; }
group0_before "$dir"

# try: data process 2 is stopped, for at most 4 s, and parity process 1
# killed.
# True if the rebuild started over meanwhile; else (the rebuild may not
# have started at all in time, on a loaded machine) it is let finish.
holds() { [ "$(grep -c "group 0 parity process 1 holds parity again" "$dir/coordinator.log")" -gt "$held" ]; }
started_over() { [ "$(grep -c "group 0 parity process 1: rebuild made no progress" "$dir/coordinator.log")" -gt "$overs" ]; }
try() {
    local j_old dp2
    held=$(grep -c "group 0 parity process 1 holds parity again" "$dir/coordinator.log")
    overs=$(grep -c "group 0 parity process 1: rebuild made no progress" "$dir/coordinator.log")
    j_old=$(group0_pid "$dir" parity 1)
    dp2=$(group0_pid "$dir" data 2)
    [ -n "$j_old" ] && [ -n "$dp2" ] || { fail "no parity process 1 or data process 2"; return 1; }
    # dp2 stops first: j comes back (cocytus-node starts it again after
    # 0.5 s, 1 s, 2 s as it keeps dying), says hello, and its rebuild starts
    # while dp2 cannot copy.
    kill -STOP "$dp2" && stopped=$dp2
    kill -KILL "$j_old"
    # Stopped for 4 s at most, by the clock (5 s of silence is death
    # here), or until the rebuild started over (then 50 ms more, for its
    # messages to go out).
    local t0=${EPOCHREALTIME/./} now
    while ! started_over && ! holds; do
        now=${EPOCHREALTIME/./}
        [ $((now - t0)) -lt 4000000 ] || break
        sleep 0.01
    done
    started_over && sleep 0.05
    kill -CONT "$stopped" && stopped=""
    started_over && return 0
    wait_for 100 holds
    return 1
}

# Writes through data processes 0 and 1 go on meanwhile (bounded: 20 s,
# 3000 writes each), so that records are in flight when the rebuild
# starts over: what a source's old stream still sends to the emptied
# parity process must be dropped there, not diverge the source.
group0_writer_bg "$dir" 0
group0_writer_bg "$dir" 1
tried=0
while [ "$tried" -lt 3 ]; do
    tried=$((tried + 1))
    try && break
done
if started_over; then
    ok "the coordinator started the rebuild over with data process 2 stopped (try $tried)"
else
    grep "group 0" "$dir/coordinator.log" | tail -6
    fail "in $tried tries, the rebuild never started over while data process 2 was stopped"
fi
writers_finish "$dir"
if wait_for 150 holds; then
    ok "parity process 1 holds parity again ($(grep -c "parity process 1 is rebuilt from" "$dir/coordinator.log") attempts)"
else
    grep -E "parity process 1|view" "$dir/coordinator.log" | tail -8
    grep -h "parity 1\|ack set" "$dir"/data-0-*.log | tail -8
    fail "the rebuild of parity process 1 never ended"
fi
# A source that had ended its copy was asked again, and copied again.
again=0
for i in 0 1; do
    n=$(grep -c "copy of our state to parity 1 sent" "$dir/data-0-$i.log" 2>/dev/null)
    [ "${n:-0}" -gt "$tried" ] && again=$((again + 1))
done
[ "$again" -ge 1 ] && ok "$again of data processes 0 and 1 sent parity process 1 a second copy after the first ended" ||
    fail "neither data process 0 nor 1 copied twice: the test missed what it is about"
group0_writers_read_back "$dir" 0 1
group0_after "$dir" "after the rebuild"
finish
