#!/usr/bin/env bash
# recovery_flush.sh - flush_all on a recovery process whose allocator is
# still being built.  A recovery process serves as soon as it takes a dead
# data process over and builds that process's allocator on a thread
# meanwhile (docs/recovery.md, "The recovery process"); flush_all resets
# the allocator, so it must wait for it, as writes that need space do,
# instead of resetting one that is not there yet.
#
# One node, RS(3,5), a coordinator, no proxy, routing off, and
# COCYTUS_TEST_TAKEOVER_FAIL=build: the recovery process's first build
# fails and is tried again 4 s later, which keeps the allocator away long
# enough to send requests while it is missing.  A key is stored through
# data process 0, which is killed; once parity process 0 serves it:
#   - a flush_all sent to it is not answered while there is no allocator,
#     then answered OK, and the process still runs;
#   - data process 0 takes its keys back: the key is gone, a new key is
#     stored, and verify and decode-check find the group exact.
set -u

script_dir=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$script_dir/lib.sh"
need_built "$server_bin" "$build_dir/cocytus/cocytus-node" "$build_dir/client/cocytus-cli"

dir=$(mktemp -d "${TMPDIR:-/tmp}/recovery_flush.XXXXXX")
flush_pid=""
cleanup() {
    [ -n "$flush_pid" ] && kill "$flush_pid" 2>/dev/null
    cluster_remove "$dir"
}
on_exit cleanup

export COCYTUS_TEST_TAKEOVER_FAIL=build
cluster_up "$dir" 12 10000 20000 --nodes 1 --scheme rs:3:5 --routing off --no-proxy ||
    { fail "cluster up"; exit 1; }
dp0=$(group0_addr "$dir" data 0)
pp0=$(group0_addr "$dir" parity 0)
reply=$(mc "$dp0" "set flush_key 0 0 5\r\nhello\r\n")
[ "$reply" = STORED ] && ok "set through data process 0" || fail "set through data process 0: $reply"

group0_kill_dp0 "$dir" || finish
pp0_log="$dir/parity-0-0.log"
pp0_pid=$(group0_pid "$dir" parity 0)

out=$dir/flush.out
(
    exec 3<>"/dev/tcp/${pp0%:*}/${pp0##*:}" || exit 1
    printf 'flush_all\r\n' >&3
    IFS= read -r -t 15 line <&3
    echo "${line%$'\r'}" >"$out"
) &
flush_pid=$!
sleep 0.5
answered=no
[ -s "$out" ] && answered=yes
if [ "$answered" = yes ] && ! grep -q "allocator built" "$pp0_log"; then
    fail "flush_all was answered ($(cat "$out")) before the allocator was built"
fi
wait "$flush_pid"
flush_pid=""
[ "$(cat "$out" 2>/dev/null)" = OK ] && ok "flush_all is answered OK once it is built" ||
    fail "flush_all through the recovery process: '$(cat "$out" 2>/dev/null)'"
grep -q "test fault: this allocator build fails" "$pp0_log" &&
    ok "the allocator's first build failed" ||
    fail "no allocator build failed: the test missed what it is about"
waited=$(grep -o "([0-9]* tries of one waited for it)" "$pp0_log" | head -1 | tr -dc '0-9')
[ "${waited:-0}" -ge 1 ] && ok "flush_all waited for the allocator ($waited tries)" ||
    fail "flush_all did not wait for the allocator (${waited:-no build logged})"
kill -0 "$pp0_pid" 2>/dev/null && ok "parity process 0 still runs" ||
    fail "parity process 0 died"
group0_dp0_back "$dir"
# (The recovery process may have handed the keys back already: they are
# read through data process 0.)
reply=$(mc "$dp0" "get flush_key\r\n" | head -1)
[ "$reply" = END ] && ok "the flushed key is gone" || fail "get flush_key after flush_all: '$reply'"
reply=$(mc "$dp0" "set after_flush 0 0 5\r\nworld\r\n")
[ "$reply" = STORED ] && ok "a new key is stored through data process 0" ||
    fail "set after_flush through data process 0: '$reply'"
reply=$(mc "$dp0" "get after_flush\r\n" | sed -n 2p)
[ "$reply" = world ] && ok "the new key reads back through data process 0" ||
    fail "get after_flush through data process 0: '$reply'"
cluster_check_ok "$dir" verify "after the flush"
cluster_check_ok "$dir" decode-check "after the flush"
finish
