#!/usr/bin/env bash
# migration_abort.sh - a data process killed after its copy arrived but
# before it took its keys back must not leave its recovery process stuck.
#
# The copy of a recovery process r to its returning data process f puts f
# in r's ack set (full sync: every write waits for f's ack too).  A copy
# that ended makes f a settled peer, which a lost link does not drop, so
# when f died between the copy's end and the handoff, r's writes waited for
# a dead f for good, and every later attempt to copy to the restarted f
# failed ("it cannot join the ack set"): the group never came back.  The
# coordinator now tells r `resume` whenever it abandons a migration past
# its start, and r drops f from its ack set.
#
# One node, RS(3,5), a coordinator, no proxy, routing off (any process
# takes any key).  A key is stored through data process 0, which is
# killed: a parity process takes its keys over (r), cocytus-node starts
# it again, and the coordinator starts the migration back.  As soon as r
# logs the copy's request the coordinator is stopped (SIGSTOP), so that
# nothing moves past the copy; once r has sent the copy's end, r is
# stopped too, and the node (so that it does not start f again before the
# write below: the next copy would rescue r too, engine_data_rebuild), f
# is killed, and the coordinator continues: it reads f's
# "copied" and then its death, with r unable to answer the handoff in
# between (had r answered, f would have been given its keys back before it
# was seen dead: a different path, a takeover of a dead f, which the kill
# drills cover).  r continues once the coordinator has abandoned the
# migration.  Then a write through r must be stored, and in the end the
# restarted data process must hold both keys and serve them, at full
# redundancy.  The copy of one key takes a few milliseconds, less than
# the test takes to see its start and stop the coordinator: the restarted
# process says `copied` 100 ms late (COCYTUS_TEST_COPIED_DELAY_MS).
set -u

script_dir=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$script_dir/lib.sh"
need_built "$server_bin" "$build_dir/cocytus/cocytus-node" "$build_dir/client/cocytus-cli"

dir=$(mktemp -d "${TMPDIR:-/tmp}/migration_abort.XXXXXX")
coord_pid=""
r_pid=""
node_pid=""
cleanup() {
    [ -n "$coord_pid" ] && kill -CONT "$coord_pid" 2>/dev/null
    [ -n "$r_pid" ] && kill -CONT "$r_pid" 2>/dev/null
    [ -n "$node_pid" ] && kill -CONT "$node_pid" 2>/dev/null
    cluster_remove "$dir"
}
on_exit cleanup

export COCYTUS_TEST_COPIED_DELAY_MS=100
cluster_up "$dir" 12 10000 20000 --nodes 1 --scheme rs:3:5 --routing off --no-proxy ||
    { fail "cluster up"; exit 1; }
dp=$(awk '$1 == "data" && $2 == 0 && $3 == 0 { print $5; exit }' "$dir/endpoints")
dp_pid=$(awk '$1 == "data" && $2 == 0 && $3 == 0 { print $6; exit }' "$dir/endpoints")
coord=$(awk '$1 == "coordinator" { print $2 ":" $3; exit }' "$dir/cluster.conf")
coord_pid=$(pgrep -f -- "--role coordinator --cluster $dir/cluster.conf -l ${coord%:*} -p ${coord##*:}( |$)")
[ -n "$dp" ] && [ -n "$dp_pid" ] && [ -n "$coord_pid" ] ||
    { fail "no data process 0 or coordinator (dp '$dp' pid '$dp_pid' coordinator '$coord' pid '$coord_pid')"; exit 1; }
stopped_coord=$coord_pid
coord_pid=""

reply=$(mc "$dp" 'set before_key 0 0 6\r\nbefore\r\n')
[ "$reply" = STORED ] && ok "set through data process 0" || fail "set: $reply"

kill -KILL "$dp_pid"
# The recovery process that takes dp 0 over, and its address.
taker() {
    grep -l "now the recovery process of dp 0" "$dir"/parity-0-*.log 2>/dev/null | head -1
}
has_taker() { [ -n "$(taker)" ]; }
wait_for 100 has_taker || { fail "nobody took data process 0 over"; finish; }
rlog=$(taker)
ridx=$(basename "$rlog" .log)
ridx=${ridx##*-}
r=$(awk -v i="$ridx" '$1 == "parity" && $2 == 0 && $3 == i { print $5; exit }' "$dir/endpoints")
ok "parity process $ridx ($r) serves data process 0"

# The migration back starts once the restarted process says hello.
# Polled every 5 ms: the whole migration of a few keys takes milliseconds.
copy_asked() { grep -q "copy of our state to data 0 requested" "$rlog"; }
for _ in $(seq 4000); do copy_asked && break; sleep 0.005; done
copy_asked || { fail "no copy to the restarted data process"; finish; }
kill -STOP "$stopped_coord" && coord_pid=$stopped_coord
copy_sent() { grep -q "copy of our state to data 0 sent" "$rlog"; }
if wait_for 100 copy_sent; then
    ok "the copy to the restarted data process ended while the coordinator is stopped"
else
    grep "copy of our state" "$rlog" | tail -3
    fail "the copy did not end"
    finish
fi
sleep 0.2                       # f applies the end and says "copied" (to nobody yet)
f_pid=$(group0_pid "$dir" data 0)
[ -n "$f_pid" ] && [ "$f_pid" != "$dp_pid" ] || { fail "no restarted data process 0 (pid '$f_pid')"; finish; }
stopped_r=$(group0_pid "$dir" parity "$ridx")
[ -n "$stopped_r" ] || { fail "no pid for parity process $ridx"; finish; }
# r stays stopped for well under a second: its links do not time out, and
# the coordinator (which forgives its own stop) takes it for dead only
# after 1.5 s without a heartbeat.
stopped_node=$(pgrep -f -- "cocytus-node --cluster $dir/cluster.conf --node 0( |$)" | head -1)
[ -n "$stopped_node" ] || { fail "no cocytus-node for node 0"; finish; }
kill -STOP "$stopped_node" && node_pid=$stopped_node
kill -STOP "$stopped_r" && r_pid=$stopped_r
kill -KILL "$f_pid"
sleep 0.3
kill -CONT "$coord_pid" && coord_pid=""
abandoned() { grep -q "group 0 dp 0: migration from parity process $ridx abandoned" "$dir/coordinator.log"; }
for _ in $(seq 40); do abandoned && break; sleep 0.02; done
kill -CONT "$r_pid" && r_pid=""
ok "restarted data process 0 (pid $f_pid) killed after the copy; coordinator continued"
if wait_for 50 abandoned; then
    how=$(grep -o "group 0 dp 0: migration from parity process $ridx abandoned .*" "$dir/coordinator.log" | head -1)
    case $how in
        *"abandoned in the copy: the data process died"* | *"abandoned in the handoff: the data process died"*)
            ok "the coordinator abandoned the migration ($how)" ;;
        *) fail "the migration was abandoned past the handoff, or not for f's death: $how" ;;
    esac
else
    grep "group 0 dp 0" "$dir/coordinator.log" | tail -5
    fail "the migration was not abandoned: the kill missed the window between the copy's end and the handoff"
fi

# Writes through r go on (they would wait for the dead process's acks;
# the node is still stopped, so f cannot come back meanwhile).
stored=""
for _ in $(seq 25); do
    reply=$(mc "$r" 'set during_key 0 0 6\r\nduring\r\n')
    [ "$reply" = STORED ] && { stored=1; break; }
    sleep 0.2
done
[ -n "$stored" ] && ok "a write through the recovery process is stored after the abandoned migration" ||
    fail "no write through the recovery process stored (last reply: '${reply:-nothing in 2 s}')"
kill -CONT "$node_pid" && node_pid=""

# The node starts data process 0 once more; the next migration must end
# with it serving both keys at full redundancy.
healthy() { "$build_dir/client/cocytus-cli" --dir "$dir" --timeout 2000 verify >"$dir/verify.out" 2>&1; }
back() {
    [ "$(mc "$dp" 'get during_key\r\n' 2>/dev/null | head -1)" = "VALUE during_key 0 6" ] && healthy
}
if wait_for 300 back; then
    ok "data process 0 serves again after a new migration, verify clean"
else
    tail -5 "$dir/verify.out"
    grep -E "migration|copy|ack set" "$rlog" "$dir/coordinator.log" 2>/dev/null | tail -12
    fail "data process 0 never came back"
fi
reply=$(mc "$dp" 'get before_key\r\n' | head -1)
[ "$reply" = "VALUE before_key 0 6" ] && ok "the key stored before the kills is there" ||
    fail "get before_key: $reply"
finish
