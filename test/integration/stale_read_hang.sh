#!/usr/bin/env bash
# stale_read_hang.sh - a data process that was hung while its keys were
# taken over does not answer a read from its old table when it resumes.
#
# A data process serves reads only within a lease from every parity
# process of its ack set: each answers the clocked PINGs of its link with
# a PONG, and the lease runs LINK_READ_LEASE_MS (0.7 s) from the clock
# answered (repl/link.h).  A process that was stopped longer than that
# resumes without a lease, and the parity processes that fenced it answer
# none of its PINGs, so a read it finds waiting is held, not answered; the
# process then learns it was declared dead and exits (its node starts it
# again, empty, and it takes its keys back).  Before 2026-12-05 it answered
# the read from its table at once: the value from before the takeover,
# though the recovery process had stored a newer one meanwhile.
#
# One node, RS(3,5), a coordinator, no proxy, routing off (so that the
# stopped data process and its recovery process both take key k).  A
# connection to data process 0 is opened, the process is stopped
# (SIGSTOP), parity process 0 takes its keys over, k is overwritten through
# it, a get of k is sent on the open connection, and the process resumes.
# The get must not be answered with the old value.  A second check: while
# a data process runs normally, its stats show no read that waited for a
# lease (reads are not slowed by the lease).
set -u

script_dir=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$script_dir/lib.sh"
need_built "$server_bin" "$build_dir/cocytus/cocytus-node" "$build_dir/client/cocytus-cli"

dir=$(mktemp -d "${TMPDIR:-/tmp}/stale_read_hang.XXXXXX")
stopped=""
cleanup() {
    [ -n "$stopped" ] && kill -CONT "$stopped" 2>/dev/null
    exec 3>&- 2>/dev/null
    cluster_remove "$dir"
}
on_exit cleanup

cluster_up "$dir" 12 10000 20000 --nodes 1 --scheme rs:3:5 --routing off --no-proxy ||
    { fail "cluster up"; exit 1; }
dp0=$(group0_addr "$dir" data 0)
pp0=$(group0_addr "$dir" parity 0)
reply=$(mc "$dp0" "set k 0 0 3\r\nold\r\n")
[ "$reply" = STORED ] && ok "k = old through data process 0" || { fail "set k: $reply"; finish; }
for i in 1 2 3 4 5; do
    mc "$dp0" "get k\r\n" >/dev/null
done
waits=$(mc "$dp0" "stats\r\n" | tr -d '\r' | awk '$2 == "lease_waits" { print $3 }')
[ "$waits" = 0 ] && ok "reads of a process that holds its lease do not wait (lease_waits 0)" ||
    fail "lease_waits of a running data process: '${waits:-none}', not 0"

exec 3<>"/dev/tcp/${dp0%:*}/${dp0##*:}" || { fail "cannot connect to data process 0"; finish; }
stopped=$(group0_pid "$dir" data 0)
kill -STOP "$stopped"
if wait_for 150 grep -q "group 0 dp 0 is served by parity process 0" "$dir/coordinator.log"; then
    ok "parity process 0 serves data process 0 while it is stopped"
else
    grep "group 0" "$dir/coordinator.log" | tail -8
    fail "parity process 0 never served data process 0"
    finish
fi
reply=$(MC_TIMEOUT=10 mc "$pp0" "set k 0 0 3\r\nnew\r\n")
[ "$reply" = STORED ] && ok "k = new through the recovery process" ||
    fail "set k through the recovery process: '${reply:-nothing in 10 s}'"
grep -q "answering once its read lease ran out" "$dir"/parity-0-*.log &&
    fail "a parity process waited for the lease of a process stopped for seconds" ||
    ok "no parity process waited for a lease that had run out"

printf 'get k\r\n' >&3
kill -CONT "$stopped"
stopped=""
line=""
IFS= read -r -t 5 line <&3
line=${line%$'\r'}
exec 3>&-
case "$line" in
"VALUE k 0 3")
    fail "the resumed data process answered k from its old table (a stale read)" ;;
"")
    ok "the resumed data process did not answer the read (it exits, declared dead)" ;;
*)
    ok "the resumed data process answered the read with '$line', not the old value" ;;
esac
if wait_for 100 grep -q "declared dead while still running" "$dir"/data-0-0*.log; then
    ok "the resumed data process learned it was declared dead"
else
    fail "the resumed data process never learned it was declared dead"
fi
group0_dp0_back "$dir"
reply=$(mc "$dp0" "get k\r\n" | sed -n 2p)
[ "$reply" = new ] && ok "k reads new through the returned data process 0" ||
    fail "get k through data process 0: '$reply'"
finish
