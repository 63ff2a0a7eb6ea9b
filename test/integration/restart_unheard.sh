#!/usr/bin/env bash
# restart_unheard.sh - a data process that dies before the coordinator has
# heard from it, and comes back at once, is still taken over.
#
# The coordinator learns of a death from the process's control link (its
# end, or silence), from its new pid after a restart it did not see, or
# from its peers' word.  A process it never heard from has no pid to
# compare: if it dies and its node starts it again before the startup
# grace ends and before its peers' word counts, the coordinator only ever
# sees the new process, which restarted without its state, refuses writes
# and serves nothing; nobody took its keys over, and they stayed
# unavailable (a full make check hit this once, on a loaded machine, in
# recovery_overlap.sh).  Now such a process says so in its heartbeat
# ("nostate"), and the coordinator takes its keys over as after a death it
# did not see.
#
# One node, RS(3,5), a coordinator, no proxy, routing off.  The first data
# process 0 runs without a link to the coordinator (the test fault
# COCYTUS_TEST_MUTE_DIR/unlinked-data-0-0), so the coordinator never hears
# from it; the startup grace and the silence that counts as death are 30 s
# (COCYTUS_STARTUP_GRACE_MS, COCYTUS_DEAD_AFTER_MS), longer than the test.
# A key is stored through it, it is killed, and the fault is lifted for
# the process its node starts again.  Parity process 0 must serve its keys
# (the key reads back through it), and data process 0 must take them back:
# the key reads back through it at full redundancy.
set -u

script_dir=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$script_dir/lib.sh"
need_built "$server_bin" "$build_dir/cocytus/cocytus-node" "$build_dir/client/cocytus-cli"

dir=$(mktemp -d "${TMPDIR:-/tmp}/restart_unheard.XXXXXX")
cleanup() {
    cluster_remove "$dir"
}
on_exit cleanup

export COCYTUS_TEST_MUTE_DIR=$dir COCYTUS_STARTUP_GRACE_MS=30000 COCYTUS_DEAD_AFTER_MS=30000
touch "$dir/unlinked-data-0-0"
cluster_up "$dir" 12 10000 20000 --nodes 1 --scheme rs:3:5 --routing off --no-proxy ||
    { fail "cluster up"; exit 1; }
dp0=$(group0_addr "$dir" data 0)
pp0=$(group0_addr "$dir" parity 0)
reply=$(mc "$dp0" "set unheard 0 0 5\r\nvalue\r\n")
[ "$reply" = STORED ] && ok "a key stored through data process 0" || { fail "set: $reply"; finish; }
if grep -q "group 0 data 0 .* alive" "$dir/coordinator.log"; then
    fail "the coordinator heard from the unlinked data process 0: the test misses its case"
    finish
fi
ok "the coordinator has not heard from data process 0"

kill -KILL "$(group0_pid "$dir" data 0)"
rm -f "$dir/unlinked-data-0-0"
if wait_for 150 grep -q "group 0 dp 0 is served by parity process 0" "$dir/coordinator.log"; then
    if grep -q "group 0 data 0 .* restarted without its state, and no death of it was seen" \
        "$dir/coordinator.log"; then
        ok "parity process 0 serves data process 0: the new process said it has no state"
    else
        grep "group 0" "$dir/coordinator.log" | tail -8
        fail "parity process 0 serves data process 0, but not on its word: the test misses its case"
    fi
else
    grep "group 0" "$dir/coordinator.log" | tail -8
    fail "data process 0's keys were never taken over"
    finish
fi
reply=$(MC_TIMEOUT=10 mc "$pp0" "get unheard\r\n" | sed -n 2p)
[ "$reply" = value ] && ok "the key reads back through parity process 0" ||
    fail "get unheard through parity process 0: '$reply'"
group0_dp0_back "$dir"
reply=$(mc "$dp0" "get unheard\r\n" | sed -n 2p)
[ "$reply" = value ] && ok "the key reads back through data process 0" ||
    fail "get unheard through data process 0: '$reply'"
finish
