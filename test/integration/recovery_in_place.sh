#!/usr/bin/env bash
# recovery_in_place.sh - an overwrite in place on a recovery process waits
# for its unit.  A value overwritten by one of the same piece size reuses
# the old piece: the delta sent to the parity processes is taken against
# the bytes there, so on a recovery process, whose region is the dead data
# process's data only unit by unit, the write must wait until that unit is
# rebuilt (engine_data.c, the in-place branch of the store; a delta taken
# against parity bytes would corrupt every parity of the group).
#
# One node, RS(3,5), a coordinator that declares a silent process dead only
# after 30 s (COCYTUS_DEAD_AFTER_MS), no proxy, routing off.  A key is
# stored through each data process; data processes 1 and 2 are stopped
# (SIGSTOP), which leaves two of the four survivors and so no unit of data
# process 0 can be rebuilt; data process 0 is killed, and parity process 0
# takes it over (the takeover needs only the parity processes).  Then:
#   - an overwrite of the key with a value of the same size, sent to the
#     recovery process, gets no reply while the data processes are stopped;
#   - once they continue, it is STORED, as an in-place write
#     (in_place_writes), and the new value reads back;
#   - data process 0, started again by its node but held stopped until
#     then, takes its keys back; verify and decode-check find the group
#     exact, and the value reads back through it.
set -u

script_dir=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$script_dir/lib.sh"
need_built "$server_bin" "$build_dir/cocytus/cocytus-node" "$build_dir/client/cocytus-cli"

dir=$(mktemp -d "${TMPDIR:-/tmp}/recovery_in_place.XXXXXX")
stopped=""
writer_pid=""
cleanup() {
    local p
    for p in $stopped; do kill -CONT "$p" 2>/dev/null; done
    [ -n "$writer_pid" ] && kill "$writer_pid" 2>/dev/null
    cluster_remove "$dir"
}
on_exit cleanup

export COCYTUS_DEAD_AFTER_MS=30000
cluster_up "$dir" 12 10000 20000 --nodes 1 --scheme rs:3:5 --routing off --no-proxy ||
    { fail "cluster up"; exit 1; }
dp0=$(group0_addr "$dir" data 0)
pp0=$(group0_addr "$dir" parity 0)
# One key through each data process, each the first of its region: the
# parity of those bytes then differs from data process 0's value (were the
# others' bytes there zero, parity process 0's parity would equal it, and a
# delta taken against it would be right by chance).
for i in 0 1 2; do
    reply=$(mc "$(group0_addr "$dir" data "$i")" "set inplace_$i 0 0 17\r\nvalue-before-of-$i\r\n")
    [ "$reply" = STORED ] && ok "set through data process $i" ||
        fail "set through data process $i: $reply"
done

for i in 1 2; do
    p=$(group0_pid "$dir" data "$i")
    [ -n "$p" ] && kill -STOP "$p" && stopped="$stopped $p"
done
[ "$(echo $stopped | wc -w)" -eq 2 ] || { fail "cannot stop data processes 1 and 2"; finish; }

old_dp0=$(group0_pid "$dir" data 0)
group0_kill_dp0 "$dir" || finish
# Its node starts data process 0 again at once, and once the group can be
# decoded again it takes its keys back, after which the recovery process
# answers END for them: held stopped until the recovery process has been
# read, so that read cannot race the hand-back (it did, once in CI under
# ASan).  30 s of silence are allowed, far more than it is held.
new_dp0_started() {
    new_dp0=$(group0_pid "$dir" data 0)
    [ -n "$new_dp0" ] && [ "$new_dp0" != "$old_dp0" ]
}
new_dp0=""
if wait_for 100 new_dp0_started && kill -STOP "$new_dp0"; then
    stopped="$stopped $new_dp0"
else
    fail "data process 0 was not started again"
    finish
fi

# The overwrite, on a connection of its own that waits up to 20 s.
out=$dir/in-place.out
(
    exec 3<>"/dev/tcp/${pp0%:*}/${pp0##*:}" || exit 1
    printf 'set inplace_0 0 0 17\r\nvalue-after--of-0\r\n' >&3
    IFS= read -r -t 20 line <&3
    echo "${line%$'\r'}" >"$out"
) &
writer_pid=$!
sleep 1
if [ -s "$out" ]; then
    fail "the overwrite was answered ($(cat "$out")) while its unit could not be rebuilt"
else
    ok "the overwrite waits while its unit cannot be rebuilt"
fi
for p in $stopped; do [ "$p" = "$new_dp0" ] || kill -CONT "$p"; done
stopped=" $new_dp0"
wait "$writer_pid"
writer_pid=""
[ "$(cat "$out" 2>/dev/null)" = STORED ] && ok "once the data processes continue it is STORED" ||
    fail "the overwrite: '$(cat "$out" 2>/dev/null)'"
n=$(mc "$pp0" "stats\r\n" | awk '$2 == "in_place_writes" { print $3 }')
[ "${n:-0}" -ge 1 ] && ok "the recovery process counts it as in place (in_place_writes $n)" ||
    fail "in_place_writes on the recovery process: '${n:-none}'"
full=$(mc "$pp0" "get inplace_0\r\n")
reply=$(printf '%s\n' "$full" | sed -n 2p)
[ "$reply" = "value-after--of-0" ] && ok "the new value reads back through the recovery process" ||
    { fail "get through the recovery process: '$full'"; grep "group 0" "$dir/coordinator.log" | tail -8; }

kill -CONT "$new_dp0"
stopped=""

group0_dp0_back "$dir"
reply=$(mc "$dp0" "get inplace_0\r\n" | sed -n 2p)
[ "$reply" = "value-after--of-0" ] && ok "the new value reads back through data process 0" ||
    fail "get through data process 0: '$reply'"
cluster_check_ok "$dir" verify "after the overwrite"
cluster_check_ok "$dir" decode-check "after the overwrite"
finish
