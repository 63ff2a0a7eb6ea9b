#!/usr/bin/env bash
# shutdown_pending.sh - a data process told to stop while writes wait for
# acknowledgements that never come exits promptly and frees every
# connection, the closed ones the engine still held included (their
# completions die with the engine; under ASan, LeakSanitizer used to report
# them, and the drills count any sanitizer report as a failure).
#
# One RS(2,3) group without a coordinator or restarts: a key is stored
# through data process 0, the parity process is stopped (SIGSTOP), and two
# clients send a set that can no longer be acknowledged: one hangs up, the
# other stays connected.  SIGTERM to data process 0: it must exit within
# 5 s, and its log must hold no sanitizer report.
set -u

script_dir=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$script_dir/lib.sh"
need_built "$server_bin" "$build_dir/cocytus/cocytus-node"

dir=$(mktemp -d "${TMPDIR:-/tmp}/shutdown_pending.XXXXXX")
stopped=""
cleanup() {
    local p
    { exec 4<&- 4>&-; } 2>/dev/null
    for p in $stopped; do kill -CONT "$p" 2>/dev/null; done
    cluster_remove "$dir"
}
on_exit cleanup

cluster_up "$dir" 6 14000 22000 --nodes 1 --scheme rs:2:3 --routing off --no-proxy \
    --no-coordinator --restart off || { fail "cluster up"; exit 1; }
dp=$(awk '$1 == "data" && $3 == 0 { print $5; exit }' "$dir/endpoints")
dp_pid=$(awk '$1 == "data" && $3 == 0 { print $6; exit }' "$dir/endpoints")
pp_pid=$(awk '$1 == "parity" { print $6; exit }' "$dir/endpoints")
[ -n "$dp" ] && [ -n "$dp_pid" ] && [ -n "$pp_pid" ] || { fail "no data or parity process in endpoints"; exit 1; }

reply=$(mc "$dp" 'set pending_key 0 0 5\r\nhello\r\n')
[ "$reply" = STORED ] && ok "set through data process 0" || fail "set: $reply"

kill -STOP "$pp_pid" && stopped=$pp_pid

# pending_set FD: a set on a new connection at FD, whose reply must not
# come (the parity process cannot acknowledge it).
pending_set() {
    local line
    eval "exec $1<>/dev/tcp/${dp%:*}/${dp##*:}" || return 1
    printf 'set pending_key 0 0 5\r\nworld\r\n' >&"$1"
    if IFS= read -r -t 0.5 line <&"$1"; then
        echo "answered: $line"
        return 1
    fi
    return 0
}
pending_set 3 && ok "a set waits for the stopped parity process" || fail "the first set did not wait"
exec 3<&- 3>&-          # this client hangs up while its set waits
pending_set 4 && ok "a second set waits, its client stays" || fail "the second set did not wait"
sleep 0.2

kill -TERM "$dp_pid"
if wait_for 50 eval '! kill -0 "$dp_pid" 2>/dev/null'; then
    ok "data process 0 exited on SIGTERM with two sets waiting"
else
    fail "data process 0 still runs 5 s after SIGTERM"
fi
exec 4<&- 4>&-

log="$dir/data-0-0.log"
if [ ! -f "$log" ]; then
    fail "no log $log"
elif grep -q -E "AddressSanitizer|LeakSanitizer|runtime error" "$log"; then
    grep -A 20 -E "AddressSanitizer|LeakSanitizer|runtime error" "$log" | head -40
    fail "sanitizer report in $log"
else
    ok "no sanitizer report in data process 0's log"
fi
finish
