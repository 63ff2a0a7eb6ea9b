#!/usr/bin/env bash
# rebuild_failed.sh - a parity process that receives a copy it cannot use
# answers rebuild-failed, and the coordinator starts its rebuild over at
# once; the next attempt ends with the parity exact.
#
# A second BEGIN from one source in one attempt cannot be told apart from
# the first: units of the first copy would stay, as of its xids, while the
# stream restarts at the second's x0, so the parity process spoils the
# attempt (takes nothing more of it) and says `rebuild-failed <g> <j>
# <attempt>`.  Nothing outside a fault makes a source send that, so the
# data processes here run with COCYTUS_TEST_REBUILD_BEGIN_TWICE set: each
# sends the BEGIN of its first copy to a parity process twice, and every
# later copy once.
#
# One node, RS(3,5), a coordinator, no proxy, routing off; the coordinator
# would start a stalled rebuild over only after 30 s here
# (COCYTUS_REPAIR_STALL_MS), so an attempt started over sooner was started
# over by rebuild-failed.  A key is stored through each data process,
# writers run through data processes 0 and 1, and parity process 1 is
# killed; cocytus-node starts it again and its rebuild begins.  Then:
#   - parity process 1 logs that its first attempt cannot finish (a second
#     BEGIN), and the coordinator that it starts over;
#   - parity process 1 holds parity again, with no stall on the way, and
#     within 15 s of the kill;
#   - every write acknowledged reads back, verify finds the group's parity
#     and metadata exact, and a write through each data process is stored.
set -u

script_dir=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$script_dir/lib.sh"
need_built "$server_bin" "$build_dir/cocytus/cocytus-node" "$build_dir/client/cocytus-cli"

dir=$(mktemp -d "${TMPDIR:-/tmp}/rebuild_failed.XXXXXX")
cleanup() {
    writers_kill "$dir"
    cluster_remove "$dir"
}
on_exit cleanup

export COCYTUS_TEST_REBUILD_BEGIN_TWICE=1 COCYTUS_REPAIR_STALL_MS=30000
cluster_up "$dir" 12 10000 20000 --nodes 1 --scheme rs:3:5 --routing off --no-proxy ||
    { fail "cluster up"; exit 1; }
group0_before "$dir"

group0_writer_bg "$dir" 0
group0_writer_bg "$dir" 1
sleep 0.3

holds() { grep -q "group 0 parity process 1 holds parity again" "$dir/coordinator.log"; }
j_old=$(group0_pid "$dir" parity 1)
[ -n "$j_old" ] || { fail "no parity process 1"; finish; }
t0=${EPOCHREALTIME/./}
kill -KILL "$j_old"
if wait_for 300 holds; then
    t1=${EPOCHREALTIME/./}
    ms=$(((t1 - t0) / 1000))
    ok "parity process 1 holds parity again, $ms ms after its kill"
else
    grep "group 0" "$dir/coordinator.log" | tail -8
    fail "the rebuild of parity process 1 never ended"
    ms=999999
fi
writers_finish "$dir"

# The fault went out, the parity process refused the attempt, the
# coordinator started over at once (not after a stall).
twice=$(cat "$dir"/data-0-*.log | grep -c "test fault: the BEGIN of this copy to parity 1 goes twice")
[ "$twice" -ge 1 ] && ok "$twice data process(es) sent their BEGIN to parity process 1 twice" ||
    fail "no data process sent a second BEGIN: the test missed what it is about"
# (attempts are numbered by the coordinator's view numbers)
if grep -Eq "rebuild attempt [0-9]+ cannot finish: a second BEGIN" "$dir"/parity-0-1.log; then
    ok "parity process 1 refused the attempt (a second BEGIN)"
else
    grep "rebuild" "$dir"/parity-0-1.log | tail -6
    fail "parity process 1 did not refuse the attempt"
fi
if grep -Eq "group 0 parity process 1 cannot finish rebuild attempt [0-9]+; starting over" "$dir/coordinator.log"; then
    ok "the coordinator started the rebuild over on rebuild-failed"
else
    grep "group 0" "$dir/coordinator.log" | tail -8
    fail "the coordinator did not start the rebuild over on rebuild-failed"
fi
if grep -q "group 0 parity process 1: rebuild made no progress" "$dir/coordinator.log"; then
    fail "a rebuild attempt stalled"
else
    ok "no attempt stalled"
fi
[ "$ms" -le 15000 ] && ok "full redundancy within 15 s of the kill ($ms ms)" ||
    fail "full redundancy only $ms ms after the kill"

group0_writers_read_back "$dir" 0 1
group0_after "$dir" "after the rebuild"
finish
