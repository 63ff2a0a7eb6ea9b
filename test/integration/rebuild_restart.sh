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
# and a source drops what is left of an earlier attempt itself when the
# next one is asked for.
#
# One node, RS(3,5), a coordinator, no proxy, routing off.  A key is
# stored through each data process; parity process 1 is killed, and as
# soon as cocytus-node has started it again and it has said hello, data
# process 2 is stopped (SIGSTOP, at most 1.1 s: less than the 1.5 s after
# which the coordinator would take it for dead).  The rebuild then starts:
# data processes 0 and 1 copy to j, data process 2 cannot, so j's progress
# stops and the coordinator starts the rebuild over, with 0 and 1's first
# copies ended.  (On a machine so loaded that the rebuild did not start
# over within the 1.1 s, it is let finish and tried again: up to 5 tries.)
# Then data process 2 continues; j must hold parity again after the second
# attempt, a source must have copied to it twice, verify must find the
# group exact, and a write through each data process must be stored.  On
# the old code the rebuild starts over for good and writes hang.
set -u

script_dir=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$script_dir/lib.sh"
need_built "$server_bin" "$build_dir/cocytus/cocytus-node" "$build_dir/client/cocytus-cli"

dir=$(mktemp -d "${TMPDIR:-/tmp}/rebuild_restart.XXXXXX")
stopped=""
cleanup() {
    [ -n "$stopped" ] && kill -CONT "$stopped" 2>/dev/null
    cluster_remove "$dir"
}
on_exit cleanup

export COCYTUS_REPAIR_STALL_MS=300
cluster_up "$dir" 12 10000 20000 --nodes 1 --scheme rs:3:5 --routing off --no-proxy ||
    { fail "cluster up"; exit 1; }
addr_of() { awk -v r="$1" -v i="$2" '$1 == r && $2 == 0 && $3 == i { print $5; exit }' "$dir/endpoints"; }
pid_of() { awk -v r="$1" -v i="$2" '$1 == r && $2 == 0 && $3 == i { print $6; exit }' "$dir/endpoints"; }
proc_pid() {
    pgrep -f -- "--role $1 --cluster $dir/cluster.conf --group 0 --index $2( |$)" | head -1
}
for i in 0 1 2; do
    reply=$(mc "$(addr_of data "$i")" "set before_$i 0 0 8\r\nbefore_$i\r\n")
    [ "$reply" = STORED ] && ok "set through data process $i" || fail "set through data process $i: $reply"
done

# try: parity process 1 is killed; once cocytus-node has started it again
# and it has said hello, data process 2 is stopped, for at most 1.1 s.
# True if the rebuild started over meanwhile; else (the rebuild may not
# have started at all in time, on a loaded machine) it is let finish.
holds() { [ "$(grep -c "group 0 parity process 1 holds parity again" "$dir/coordinator.log")" -gt "$held" ]; }
started_over() { [ "$(grep -c "group 0 parity process 1: rebuild made no progress" "$dir/coordinator.log")" -gt "$overs" ]; }
try() {
    local j_old j_new="" dp2
    held=$(grep -c "group 0 parity process 1 holds parity again" "$dir/coordinator.log")
    overs=$(grep -c "group 0 parity process 1: rebuild made no progress" "$dir/coordinator.log")
    j_old=$(proc_pid parity 1)
    dp2=$(proc_pid data 2)
    [ -n "$j_old" ] && [ -n "$dp2" ] || { fail "no parity process 1 or data process 2"; return 1; }
    kill -KILL "$j_old"
    hello() {
        j_new=$(proc_pid parity 1)
        [ -n "$j_new" ] && [ "$j_new" != "$j_old" ] &&
            grep -q "group 0 parity 1 .* alive (pid $j_new," "$dir/coordinator.log"
    }
    for _ in $(seq 1000); do hello && break; sleep 0.005; done
    hello || { fail "parity process 1 was not started again"; return 1; }
    kill -STOP "$dp2" && stopped=$dp2
    for _ in $(seq 55); do started_over && break; sleep 0.02; done
    sleep 0.05
    kill -CONT "$stopped" && stopped=""
    started_over && return 0
    wait_for 100 holds
    return 1
}
tried=0
while [ "$tried" -lt 5 ]; do
    tried=$((tried + 1))
    try && break
done
if started_over; then
    ok "the coordinator started the rebuild over with data process 2 stopped (try $tried)"
else
    grep "group 0" "$dir/coordinator.log" | tail -6
    fail "in $tried tries, the rebuild never started over while data process 2 was stopped"
fi
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
if "$build_dir/client/cocytus-cli" --dir "$dir" --timeout 5000 verify >"$dir/verify.out" 2>&1; then
    ok "verify: the group's parity and metadata are exact"
else
    tail -5 "$dir/verify.out"
    fail "verify"
fi
for i in 0 1 2; do
    a=$(addr_of data "$i")
    reply=$(mc "$a" "set after_$i 0 0 7\r\nafter_$i\r\n")
    [ "$reply" = STORED ] && ok "set through data process $i after the rebuild" ||
        fail "set through data process $i after the rebuild: ${reply:-nothing in 2 s}"
    reply=$(mc "$a" "get before_$i\r\n" | head -1)
    [ "$reply" = "VALUE before_$i 0 8" ] || fail "get before_$i: $reply"
done
finish
