#!/usr/bin/env bash
# rebuild_coord_kill.sh - the coordinator dies while a parity process is
# being rebuilt; its node starts it again, and the rebuild must still end
# with exact parity and no acknowledged write lost.
#
# One node, RS(3,5), a coordinator, no proxy, routing off.  Data process
# 2 is stopped (SIGSTOP; death is declared after 5 s of silence here) so
# that the rebuild of parity process 1, killed next, cannot end; once the
# coordinator said it rebuilds parity process 1, the coordinator is killed
# (SIGKILL), and data process 2 continues.  Writes go on through data
# processes 0 and 1 all along.  The restarted coordinator knows nothing of
# the attempt under way: it must bring parity process 1 back to parity,
# report the time to full redundancy from the death the old one saw (the
# saved figures), verify must find the group exact, and every write
# acknowledged must read back.
set -u

script_dir=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$script_dir/lib.sh"
need_built "$server_bin" "$build_dir/cocytus/cocytus-node" "$build_dir/client/cocytus-cli"

dir=$(mktemp -d "${TMPDIR:-/tmp}/rebuild_coord_kill.XXXXXX")
stopped=""
cleanup() {
    [ -n "$stopped" ] && kill -CONT "$stopped" 2>/dev/null
    writers_kill "$dir"
    cluster_remove "$dir"
}
on_exit cleanup

export COCYTUS_DEAD_AFTER_MS=5000
cluster_up "$dir" 12 10000 20000 --nodes 1 --scheme rs:3:5 --routing off --no-proxy ||
    { fail "cluster up"; exit 1; }
coord_pid() { pgrep -f -- "--role coordinator --cluster $dir/cluster.conf" | head -1; }
group0_before "$dir"

group0_writer_bg "$dir" 0
group0_writer_bg "$dir" 1

rebuilding() { grep -q "group 0 parity process 1 is rebuilt from" "$dir"/coordinator*.log; }
holds() { grep -q "group 0 parity process 1 holds parity again" "$dir"/coordinator*.log; }
j_old=$(group0_pid "$dir" parity 1)
dp2=$(group0_pid "$dir" data 2)
c_old=$(coord_pid)
[ -n "$j_old" ] && [ -n "$dp2" ] && [ -n "$c_old" ] || { fail "no parity process 1, data process 2 or coordinator"; exit 1; }
kill -STOP "$dp2" && stopped=$dp2
kill_wall_ms=$(date +%s%3N)
kill -KILL "$j_old"
t0=${EPOCHREALTIME/./}
while ! rebuilding; do
    now=${EPOCHREALTIME/./}
    [ $((now - t0)) -lt 3000000 ] || break
    sleep 0.01
done
if rebuilding && ! holds; then
    sleep 0.2
    kill -KILL "$c_old"
    ok "coordinator killed while parity process 1 was rebuilt"
else
    fail "the rebuild of parity process 1 did not start within 3 s"
fi
sleep 0.5
kill -CONT "$stopped" && stopped=""
writers_finish "$dir"
if wait_for 300 holds; then
    ok "parity process 1 holds parity again"
else
    tail -20 "$dir"/coordinator*.log
    fail "the rebuild of parity process 1 never ended"
fi
c_new=$(coord_pid)
[ -n "$c_new" ] && [ "$c_new" != "$c_old" ] && ok "the coordinator was started again" ||
    fail "no new coordinator process"
# The new coordinator dates the group's degradation from the old one's
# saved figures: from parity process 1's death (seen within moments of the
# kill: its links closed), not from its own start, which came at least
# 0.7 s later (the waits above and the node's back-off).
groups=$("$build_dir/client/cocytus-cli" --dir "$dir" admin coordinator cocytus groups 2>&1)
since=$(awk '$1 == "group" && $2 == 0 { for (i = 3; i < NF; i++) { if ($i == "last_full_ms") f = $(i + 1); if ($i == "full_at_ms") a = $(i + 1) } }
             END { if (f != "" && a != "") printf "%.0f\n", a - f }' <<<"$groups")
if [ -n "$since" ] && [ "$since" -le $((kill_wall_ms + 400)) ] && [ "$since" -ge $((kill_wall_ms - 100)) ]; then
    ok "the restarted coordinator dates the degradation $((since - kill_wall_ms)) ms after the kill"
else
    fail "the restarted coordinator's figures (degraded since ${since:-?}, kill at $kill_wall_ms): ${groups:-nothing}"
fi
group0_writers_read_back "$dir" 0 1
group0_after "$dir" "after the rebuild"
finish
