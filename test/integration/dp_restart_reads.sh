#!/usr/bin/env bash
# dp_restart_reads.sh - a data process that restarts empty must not answer
# a read before it knows whether it did.  Its table is empty, and until a
# parity process tells it the group holds records beyond its own, a get of
# a key the group holds would be answered as a miss: a client then sees a
# stored value vanish (zk_coordinator.sh once caught such misses in the
# milliseconds between a restart and the parity links' handshake, while no
# coordinator led).
#
# An RS(3,5) group without a coordinator (nobody takes the process over):
# a key is stored through data process 0, both parity processes are
# stopped (SIGSTOP) so that no link can tell the restarted process
# anything, and data process 0 is killed; cocytus-node starts it again.
# Its answer to the get must not be a miss (it waits), and a write sent
# then must not be acknowledged (it waits).  Then the parity processes
# continue: the process learns it restarted without its state, refuses
# that write and later ones, and still answers no miss.
set -u

script_dir=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$script_dir/lib.sh"
need_built "$server_bin" "$build_dir/cocytus/cocytus-node"

dir=$(mktemp -d "${TMPDIR:-/tmp}/dp_restart_reads.XXXXXX")
stopped=""
cleanup() {
    local p
    for p in $stopped; do kill -CONT "$p" 2>/dev/null; done
    cluster_remove "$dir"
}
on_exit cleanup

cluster_up "$dir" 10 10000 20000 --nodes 1 --scheme rs:3:5 --routing off --no-proxy \
    --no-coordinator || { fail "cluster up"; exit 1; }
dp=$(awk '$1 == "data" && $3 == 0 { print $5; exit }' "$dir/endpoints")
dp_pid=$(awk '$1 == "data" && $3 == 0 { print $6; exit }' "$dir/endpoints")
pps=$(awk '$1 == "parity" { print $6 }' "$dir/endpoints")
[ -n "$dp" ] && [ -n "$dp_pid" ] && [ -n "$pps" ] || { fail "no data process 0 or parity in endpoints"; exit 1; }

reply=$(mc "$dp" 'set restart_key 0 0 5\r\nhello\r\n')
[ "$reply" = STORED ] && ok "set through data process 0" || fail "set: $reply"
reply=$(mc "$dp" 'get restart_key\r\n' | head -1)
[ "$reply" = "VALUE restart_key 0 5" ] || fail "get before the kill: $reply"

for p in $pps; do
    kill -STOP "$p" && stopped="$stopped $p"
done
kill -KILL "$dp_pid"
port=${dp##*:}
# cocytus-node starts it again: wait for a new process on the port
new_listener() {
    port_is_open "$port" && ! port_listener_is "$dp_pid" "$port"
}
if wait_for 100 new_listener; then
    ok "data process 0 restarted"
else
    fail "data process 0 did not come back on $dp"
    finish
fi

# mc waits 2 s for a reply line; a waiting read prints nothing.
reply=$(mc "$dp" 'get restart_key\r\n' | head -1)
case $reply in
    END) fail "restarted data process answered a miss before any parity process spoke" ;;
    "") ok "the restarted process holds the read while no parity process can tell it anything" ;;
    *) fail "get on the restarted process: $reply" ;;
esac

# A write sent now, before any parity process can say anything, must not
# be acknowledged: it would take xid 1 again, which the parity processes
# hold already and would acknowledge as a duplicate without applying it
# (a stored value that is in no parity: CI caught this, 2026-12-02, a
# write that came in before the links' handshake ended).  It waits, and is
# refused once the links come up.
early=$dir/early-write.out
( mc "$dp" 'set early_key 0 0 5\r\nearly\r\n' >"$early" 2>&1 ) &
early_pid=$!
sleep 0.5
for p in $stopped; do kill -CONT "$p"; done
stopped=""
wait "$early_pid"
case $(head -1 "$early") in
    *"without its state"*) ok "a write sent before the links came up was refused: $(head -1 "$early")" ;;
    STORED) fail "a write sent before the links came up was acknowledged" ;;
    *) fail "a write sent before the links came up: '$(head -1 "$early")'" ;;
esac
# The links come up and the parity processes hold more than it: it refuses
# writes (the refusal names why) and keeps holding reads.
refused=""
for _ in $(seq 20); do
    reply=$(mc "$dp" 'set other_key 0 0 1\r\nx\r\n')
    case $reply in *"without its state"*) refused=$reply; break ;; esac
    sleep 0.2
done
[ -n "$refused" ] && ok "writes refused: $refused" || fail "no refusal of writes; last reply: $reply"
reply=$(mc "$dp" 'get restart_key\r\n' | head -1)
case $reply in
    END) fail "restarted data process answered a miss once it knew" ;;
    "") ok "reads still held once it knows it restarted without its state" ;;
    *) fail "get after the links came up: $reply" ;;
esac
finish
