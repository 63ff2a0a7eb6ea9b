#!/usr/bin/env bash
# recovery_overlap.sh - a recovery process whose allocator cannot be built
# answers what it can and fails the rest with an error, instead of holding
# clients for good.  The allocator is built from the dead data process's
# pieces; pieces that overlap mean the stream the parity process kept is
# inconsistent, and no allocator can hold them (docs/recovery.md, "The
# recovery process").  Nothing but a fault makes them overlap, so the
# processes here run with COCYTUS_TEST_TAKEOVER_FAIL=overlap: every build
# finds them overlapping.
#
# One node, RS(3,5), a coordinator, no proxy, routing off.  A key is stored
# through data process 0, which is killed (cocytus-node starts it again,
# and it never gets its keys back: the copy fails too).  Once parity
# process 0 serves it:
#   - the key reads back and is overwritten in place (no space needed);
#   - a new key and a flush_all are answered SERVER_ERROR, naming why;
#   - the process still runs and its log says why.  (Real overlapping
#   pieces would also show in verify, as alloc_digest overlap; faked ones
#   do not.)
set -u

script_dir=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$script_dir/lib.sh"
need_built "$server_bin" "$build_dir/cocytus/cocytus-node" "$build_dir/client/cocytus-cli"

dir=$(mktemp -d "${TMPDIR:-/tmp}/recovery_overlap.XXXXXX")
cleanup() {
    cluster_remove "$dir"
}
on_exit cleanup

export COCYTUS_TEST_TAKEOVER_FAIL=overlap
cluster_up "$dir" 12 10000 20000 --nodes 1 --scheme rs:3:5 --routing off --no-proxy ||
    { fail "cluster up"; exit 1; }
dp0=$(group0_addr "$dir" data 0)
pp0=$(group0_addr "$dir" parity 0)
reply=$(mc "$dp0" "set overlap_key 0 0 5\r\nhello\r\n")
[ "$reply" = STORED ] && ok "set through data process 0" || fail "set through data process 0: $reply"

group0_kill_dp0 "$dir" || finish
pp0_log="$dir/parity-0-0.log"
pp0_pid=$(group0_pid "$dir" parity 0)

export MC_TIMEOUT=10
reply=$(mc "$pp0" "get overlap_key\r\n" | sed -n 2p)
[ "$reply" = hello ] && ok "the key reads back through the recovery process" ||
    fail "get overlap_key through the recovery process: '$reply'"
reply=$(mc "$pp0" "set overlap_key 0 0 5\r\nHELLO\r\n")
[ "$reply" = STORED ] && ok "an overwrite in place is stored" ||
    fail "overwrite of overlap_key through the recovery process: '$reply'"
for req in "set new_key 0 0 3\r\nnew\r\n" "flush_all\r\n"; do
    reply=$(mc "$pp0" "$req")
    case $reply in
        "SERVER_ERROR recovery process cannot allocate"*)
            ok "'${req%%\\r*}' is refused: $reply" ;;
        *) fail "'${req%%\\r*}' through the recovery process: '${reply:-nothing in 10 s}'" ;;
    esac
done
reply=$(mc "$pp0" "get overlap_key\r\n" | sed -n 2p)
[ "$reply" = HELLO ] && ok "the overwritten value reads back" ||
    fail "get overlap_key after the overwrite: '$reply'"
kill -0 "$pp0_pid" 2>/dev/null && ok "parity process 0 still runs" || fail "parity process 0 died"
grep -q "CANNOT BUILD the allocator: two of them overlap" "$pp0_log" &&
    ok "its log says why" || fail "no line about the allocator in its log"
finish
