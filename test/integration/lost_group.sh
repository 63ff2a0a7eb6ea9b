#!/usr/bin/env bash
# lost_group.sh - a coding group that loses more than it tolerates comes
# back: the keys it lost are misses, every other key keeps its value, and
# the group returns to full redundancy by itself once its processes are
# alive again (docs/recovery.md, "When a group loses data").  Before, such a
# group refused the lost keys for ever (2 s timeouts at the proxy, or
# "does not serve keys") and was never rebuilt.
#
# One RS(2,3) group (data processes 0 and 1, parity process 0) on one node
# with a coordinator and cocytus-proxy; cocytus-node restarts what dies.
#
#   1. Admission.  Parity process 0 is killed, then data process 0: no
#      parity is left, the coordinator reports the group LOST.  Both come
#      back empty; data process 0 is admitted empty, parity process 0 is
#      rebuilt.  Data process 1's keys (and writes made while the group was
#      lost) keep their values, data process 0's are misses.
#   1b. Cut off, not dead.  Data process 0 and parity process 0 are stopped
#      together: the coordinator declares one dead and waits for the other
#      (declaring both would lose data; their links are up), then both
#      resume: the group is never LOST, and data process 0 ends with every
#      key it held.  (Before 2026-12-05 both were declared dead, LOST, and
#      data process 0 was admitted back with its keys since nobody had
#      served them.)
#   1c. Cut off, and served meanwhile.  Data process 0 is stopped, parity
#      process 0 takes it over and the keys are deleted through it, then
#      parity process 0 is killed (LOST) and data process 0 resumes: its
#      state is older than what clients were told, so it is emptied (no
#      deleted key comes back).
#   2. A recovery that cannot finish.  Data process 1 is stopped (SIGSTOP),
#      then data process 0 killed: parity process 0 takes it over but
#      cannot rebuild a unit without data process 1.  The coordinator waits
#      for the silent data process 1 (its death would lose data); it is
#      killed, declared dead (LOST), and comes back empty.  After 5 s
#      without progress the recovery gives up its missing units (their keys
#      are deleted), data process 0 takes its keys back, data process 1 is
#      admitted, parity process 0 is rebuilt.
#
#   3. A PBR(1) group whose primary and backup are killed together: it
#      serves again (empty) once a member is back, its backup rebuilt.
#   3b. Cut off, not dead: both stopped together; the coordinator waits for
#      the last one holding every acknowledged write (never LOST); the
#      backup resumes first, the primary 7 s later: every key is kept.
#   3c. The same with the primary resumed first: the primary is the one
#      waited for, and serves again at once with its backup still stopped.
#
# After 1, 1b, 1c and 2: wait-healthy, every key a hit with its value or a miss (never
# a wrong value, never an error), new writes and reads through the proxy,
# verify and decode-check.  The trap stops the cluster.
set -u

script_dir=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$script_dir/lib.sh"
need_built "$build_dir/client/cocytus-proxy" "$build_dir/cocytus/cocytus-node"
if ! command -v python3 >/dev/null; then
    echo "SKIP: no python3"
    exit 77
fi
keys="python3 $script_dir/lost_keys.py"
cli="$build_dir/client/cocytus-cli"

dir=$(mktemp -d "${TMPDIR:-/tmp}/lost_group.XXXXXX")
stopped=""
cleanup() {
    local p
    for p in $stopped; do kill -CONT "$p" 2>/dev/null; done
    cluster_remove "$dir"
}
on_exit cleanup

proxy_port=$(pick_port)
if ! cluster_up "$dir" 10 14000 20000 --nodes 1 --scheme rs:2:3 --memory 16 --region 16 \
    --proxy-port "$proxy_port"; then
    fail "RS(2,3) cluster did not come up"
    finish
fi
proxy=$(cat "$dir/proxy")

# endpoints and node-0.procs: ROLE GROUP INDEX NODE ADDR PID; the node adds
# a line for each restart, so a process's last line has its pid.
addr_of() { awk -v r="$1" -v i="$2" '$1 == r && $3 == i { print $5; exit }' "$dir/endpoints"; }
pid_of() { awk -v r="$1" -v i="$2" '$1 == r && $3 == i { p = $6 } END { print p }' "$dir/node-0.procs"; }
dp0=$(addr_of data 0)
dp1=$(addr_of data 1)

# The coordinator's word for it (a status would wait for a stopped process).
lost_logged() {
    [ "$(grep -c "DATA LOSS in \(pbr \)\?group 0" "$dir/coordinator.log")" -ge "$1" ]
}

# back_to_full WHAT: wait-healthy, counted as WHAT; the status and the
# coordinator's last words if not.
back_to_full() {
    if "$cli" --dir "$dir" wait-healthy --timeout 60; then
        ok "$1"
        return 0
    fi
    fail "not: $1"
    "$cli" --dir "$dir" status 2>&1 | tail -n 8
    tail -n 30 "$dir/coordinator.log"
    return 1
}

healthy_and_checked() {
    local when=$1
    back_to_full "the group is at full redundancy again $when" || return 1
    local fresh="fresh$RANDOM"
    if $keys fill "$proxy" "$fresh" 300 && $keys check "$proxy" "$fresh" 300 |
        grep -qx "all hits 300 misses 0"; then
        ok "300 new keys written and read back through the proxy $when"
    else
        fail "new keys through the proxy $when"
    fi
    cluster_check_ok "$dir" verify "$when"
    cluster_check_ok "$dir" decode-check "$when"
}

# tally PREFIX N WHEN: every key of PREFIX a hit with its value or a miss;
# prints per owner "ADDR hits H misses M" into $dir/PREFIX.tally
tally() {
    if $keys count "$dir/$1.owners" "$proxy" "$1" "$2" >"$dir/$1.tally"; then
        ok "every $1 key answered with its value or a miss $3: $(tr '\n' ';' <"$dir/$1.tally")"
    else
        fail "a $1 key answered wrongly $3: $(cat "$dir/$1.tally")"
    fi
}

# ---- 1. admission ----
$keys fill "$proxy" a 600 >/dev/null || fail "fill a"
$keys owners a 600 "$dp0" "$dp1" >"$dir/a.owners"
n0=$(awk -v a="$dp0" '$2 == a' "$dir/a.owners" | wc -l)
n1=$(awk -v a="$dp1" '$2 == a' "$dir/a.owners" | wc -l)
if [ "$n0" -gt 0 ] && [ "$n1" -gt 0 ] && [ $((n0 + n1)) -eq 600 ]; then
    ok "600 keys stored: $n0 on data process 0, $n1 on data process 1"
else
    fail "keys not found on their data processes ($n0 + $n1 of 600)"
fi

# Together: once parity process 0 is back it would be rebuilt at once.
kill -KILL "$(pid_of parity 0)" "$(pid_of data 0)"
if wait_for 100 lost_logged 1; then
    ok "with no parity left, the death of data process 0 is reported: group 0 LOST"
else
    fail "the group was not reported LOST"
fi
# data process 1 serves on meanwhile: these writes must survive
$keys fill "$proxy" b 200 >/dev/null || fail "writes while the group was lost"
$keys owners b 200 "$dp1" >"$dir/b.owners"
healthy_and_checked "after the admission"
tally a 600 "after the admission"
if "$cli" --dir "$dir" status 2>&1 | grep -q "^group 0: lost keys at .* every key is served again"; then
    ok "cocytus-cli status: $("$cli" --dir "$dir" status 2>&1 | grep -m1 "^group 0: lost keys at")"
else
    fail "cocytus-cli status does not tell of the past loss"
fi
if grep -qx "$dp1 hits $n1 misses 0" "$dir/a.tally" &&
    grep -qx "$dp0 hits 0 misses $n0" "$dir/a.tally"; then
    ok "data process 1's $n1 keys kept their values; data process 0's $n0 were lost"
else
    fail "unexpected hits and misses after the admission: $(tr '\n' ';' <"$dir/a.tally")"
fi
tally b 200 "(written while the group was lost)"
b1=$(awk -v a="$dp1" '$2 == a' "$dir/b.owners" | wc -l)
grep -qx "$dp1 hits $b1 misses 0" "$dir/b.tally" ||
    fail "a write acknowledged by data process 1 while the group was lost was not kept"
grep -q "dp 0 serves its keys again" "$dir/coordinator.log" &&
    ok "coordinator: $(grep -m1 "serves every key again" "$dir/coordinator.log")" ||
    fail "no admission in the coordinator's log"

# ---- 1b. cut off, not dead: nothing is lost ----
# Data process 0 and parity process 0 stop answering (SIGSTOP) together:
# one is declared dead, and the coordinator waits for the other, whose
# death would leave RS(2,3) nothing to recover from (its link is up: it may
# only be paused).  They resume: the group was never LOST, and data
# process 0 ends with every key it held.
$keys fill "$proxy" d 600 >/dev/null || fail "fill d"
$keys owners d 600 "$(addr_of data 0)" "$(addr_of data 1)" >"$dir/d.owners"
d0=$(awk -v a="$dp0" '$2 == a' "$dir/d.owners" | wc -l)
dp0_pid=$(pid_of data 0)
pp_pid=$(pid_of parity 0)
waits_before=$(grep -c "would lose data, so the coordinator waits" "$dir/coordinator.log")
waiting() {
    [ "$(grep -c "would lose data, so the coordinator waits" "$dir/coordinator.log")" -gt "$waits_before" ]
}
kill -STOP "$dp0_pid" "$pp_pid" && stopped="$dp0_pid $pp_pid"
if wait_for 100 waiting; then
    ok "data process 0 and parity process 0 silent: $(grep "would lose data" "$dir/coordinator.log" | tail -1 | cut -c14-120)..."
else
    fail "the coordinator did not wait for the second silent process"
fi
sleep 1
lost_logged 2 && fail "group 0 was reported LOST with its processes only stopped"
kill -CONT "$dp0_pid" "$pp_pid"
stopped=""
healthy_and_checked "after data process 0 was only cut off"
tally d 600 "after data process 0 was only cut off"
# Whichever was declared dead (data process 0 is taken over and given its
# keys back; parity process 0 is rebuilt), every key keeps its value.
if ! grep -q "misses [1-9]" "$dir/d.tally" &&
    [ "$(awk '{ n += $3 } END { print n + 0 }' "$dir/d.tally")" = 600 ]; then
    ok "every d key kept its value ($d0 of them on data process 0): it was cut off, not dead"
else
    fail "data process 0's keys after it was only cut off: $(tr '\n' ';' <"$dir/d.tally")"
fi

# ---- 1c. cut off, and served meanwhile: its old state must not return ----
# Data process 0 stops; parity process 0 takes it over and the keys are
# deleted through it; then parity process 0 is killed (LOST) and data
# process 0 resumes.  What it holds is older than what clients were told:
# it is emptied, and no deleted key comes back.
$keys fill "$proxy" e 400 >/dev/null || fail "fill e"
$keys owners e 400 "$(addr_of data 0)" "$(addr_of data 1)" >"$dir/e.owners"
served_before=$(grep -c "dp 0 is served by parity process 0" "$dir/coordinator.log")
takeover_logged() {
    [ "$(grep -c "dp 0 is served by parity process 0" "$dir/coordinator.log")" -gt "$served_before" ]
}
dp0_pid=$(pid_of data 0)
kill -STOP "$dp0_pid" && stopped="$dp0_pid"
if wait_for 100 takeover_logged; then
    ok "data process 0 silent: parity process 0 serves its keys"
else
    fail "no takeover of the stopped data process 0"
fi
$keys delete "$proxy" e 400 >/dev/null || fail "deleting e through the recovery process"
kill -KILL "$(pid_of parity 0)"
wait_for 100 lost_logged 2 || fail "the group was not reported LOST after its recovery process died"
kill -CONT "$dp0_pid"
stopped=""
healthy_and_checked "after data process 0 resumed with state older than the group's"
tally e 400 "after data process 0 resumed with state older than the group's"
if grep -q " hits [1-9]" "$dir/e.tally"; then
    fail "a deleted key came back: $(tr '\n' ';' <"$dir/e.tally")"
else
    ok "no deleted key came back: data process 0's old state was emptied"
fi

# ---- 2. a recovery that cannot finish ----
$keys fill "$proxy" c 600 >/dev/null || fail "fill c"
$keys owners c 600 "$(addr_of data 0)" "$(addr_of data 1)" >"$dir/c.owners"
dp1_pid=$(pid_of data 1)
dp0_pid=$(pid_of data 0)
waits_before=$(grep -c "would lose data, so the coordinator waits" "$dir/coordinator.log")
kill -STOP "$dp1_pid" && stopped="$dp1_pid"
kill -KILL "$dp0_pid"
if wait_for 100 waiting; then
    ok "data process 1 silent while parity process 0 recovers data process 0: the coordinator waits for it"
else
    fail "the coordinator did not wait for data process 1"
fi
kill -KILL "$dp1_pid"
kill -CONT "$dp1_pid" 2>/dev/null
if wait_for 100 lost_logged 3; then
    ok "data process 1 killed with the recovery stuck: group 0 LOST"
else
    fail "the group was not reported LOST with a recovery stuck"
fi
stopped=""
healthy_and_checked "after a recovery that could not finish"
tally c 600 "after a recovery that could not finish"
if grep -q "cannot finish: the keys in the missing units are given up" "$dir/coordinator.log"; then
    ok "coordinator: $(grep -m1 "cannot finish" "$dir/coordinator.log" | cut -c1-160)"
else
    fail "the stuck recovery was not given up"
fi
grep -h "given up\|cannot be rebuilt are deleted" "$dir"/parity-*.log | head -n 2
logs_printable "$dir"
cluster_remove "$dir"

# ---- 3. a PBR(1) group: primary and backup killed together ----
dir=$(mktemp -d "${TMPDIR:-/tmp}/lost_group_pbr.XXXXXX")
proxy_port=$(pick_port)
if ! cluster_up "$dir" 8 14000 20000 --nodes 1 --scheme pbr:1 --memory 16 \
    --proxy-port "$proxy_port"; then
    fail "PBR(1) cluster did not come up"
    finish
fi
proxy=$(cat "$dir/proxy")
$keys fill "$proxy" p 300 >/dev/null || fail "fill p"
kill -KILL "$(pid_of primary 0)" "$(pid_of backup 0)"
if wait_for 100 lost_logged 1; then
    ok "primary and backup killed: $(grep -m1 "DATA LOSS" "$dir/coordinator.log" | cut -c1-120)"
else
    fail "the PBR group was not reported LOST"
fi
back_to_full "the PBR group serves again with its backup rebuilt"
if $keys check "$proxy" p 300 | grep -qx "all hits 0 misses 300"; then
    ok "its 300 keys are misses (both copies were killed), never errors or wrong values"
else
    fail "the PBR group's old keys: $($keys check "$proxy" p 300)"
fi
if $keys fill "$proxy" q 300 >/dev/null && $keys check "$proxy" q 300 | grep -qx "all hits 300 misses 0"; then
    ok "300 new keys written and read back through the proxy"
else
    fail "new keys through the proxy after the PBR group came back"
fi
grep -m1 "serves again, member" "$dir/coordinator.log"

# 3b: cut off, not dead.  Both members stopped together: the coordinator
# declares at most one dead and waits for the other, the only one left
# holding every acknowledged write (its link is up: it may only be
# paused).  The member that is not the group's primary resumes first, the
# primary 7 s later: the group was never LOST and keeps every key.  (The
# build before the PBR wait (2026-12-05) declared both dead, LOST, and after
# 5 s without its primary admitted the other member empty: the primary's
# keys were dropped when it rejoined.)
$keys fill "$proxy" r 300 >/dev/null || fail "fill r"
member=$(grep "serves again, member" "$dir/coordinator.log" | tail -n 1 |
    sed -n 's/.*serves again, member \([0-9]*\) .*/\1/p')
# pbr:1: member 1 is `primary 0` of the cluster file, member 0 is `backup 0`
if [ "$member" = 1 ]; then
    prim_pid=$(pid_of primary 0) other_pid=$(pid_of backup 0)
else
    prim_pid=$(pid_of backup 0) other_pid=$(pid_of primary 0)
fi
waits_before=$(grep -c "would lose data, so the coordinator waits" "$dir/coordinator.log")
kill -STOP "$prim_pid" "$other_pid" && stopped="$prim_pid $other_pid"
if wait_for 100 waiting; then
    ok "primary (member $member) and backup silent: $(grep "would lose data" "$dir/coordinator.log" | tail -1 | cut -c14-130)..."
else
    fail "the coordinator did not wait for the PBR group's last holder"
fi
kill -CONT "$other_pid"
sleep 7
lost_logged 2 && fail "the PBR group was reported LOST with its members only stopped"
kill -CONT "$prim_pid"
stopped=""
back_to_full "the cut-off PBR group serves again with its backup rebuilt"
if $keys check "$proxy" r 300 | grep -qx "all hits 300 misses 0"; then
    ok "the group, its primary resumed 7 s after the other member, kept all 300 keys"
else
    fail "the cut-off PBR group's keys: $($keys check "$proxy" r 300)"
    grep "group 0 lost its data\|serves again\|waits for it" "$dir/coordinator.log" | tail -n 3
fi

# 3c: the same, the primary resumed first.  Whichever member the check
# meets first, the one waited for is the primary (a silent backup is no
# one to fail over to), so the group serves again as soon as the primary
# resumes, with the backup still stopped.
$keys fill "$proxy" s 300 >/dev/null || fail "fill s"
# Who is the primary now: in 3b the member resumed first may have been
# heard, complete, before the check reached the primary's silence, and
# then the silent primary's death lost nothing and it failed over (seen
# once, in a CI's distcheck pass).
now_member=$("$cli" --dir "$dir" admin "$(cat "$dir/coordinator")" cocytus groups 2>/dev/null |
    sed -n 's/^group 0 .* view pbr primary m\([0-9]*\) .*/\1/p' | head -1)
[ -n "$now_member" ] || fail "the coordinator's groups do not say who the PBR group's primary is"
if [ -n "$now_member" ] && [ "$now_member" != "$member" ]; then
    echo "note: 3b failed over: member $now_member is the primary now"
    member=$now_member
fi
if [ "$member" = 1 ]; then
    prim_pid=$(pid_of primary 0) other_pid=$(pid_of backup 0)
else
    prim_pid=$(pid_of backup 0) other_pid=$(pid_of primary 0)
fi
[ "$member" = 1 ] && prim_role=primary || prim_role=backup
waits_before=$(grep -c "would lose data, so the coordinator waits" "$dir/coordinator.log")
kill -STOP "$prim_pid" "$other_pid" && stopped="$prim_pid $other_pid"
if wait_for 100 waiting; then
    line=$(grep "would lose data" "$dir/coordinator.log" | tail -1)
    case $line in
        *"group 0 $prim_role 0 "*) ok "the primary ($prim_role 0) is the one waited for" ;;
        *) fail "not the primary ($prim_role 0) waited for: $line" ;;
    esac
else
    fail "the coordinator did not wait for the PBR group's primary"
fi
kill -CONT "$prim_pid"
stopped="$other_pid"
reply=$(MC_TIMEOUT=5 mc "$proxy" "set after_primary 0 0 3\r\nyes\r\n")
[ "$reply" = STORED ] && ok "the primary resumed first serves at once, its backup still stopped" ||
    fail "a set with the primary resumed and its backup stopped: '${reply:-nothing in 5 s}'"
kill -CONT "$other_pid"
stopped=""
back_to_full "the PBR group, primary resumed first, is at full redundancy again"
if $keys check "$proxy" s 300 | grep -qx "all hits 300 misses 0"; then
    ok "the group, its primary resumed first, kept all 300 keys"
else
    fail "the PBR group's keys after 3c: $($keys check "$proxy" s 300)"
fi
lost_logged 2 && fail "the PBR group was reported LOST with its members only stopped (3b or 3c)"
logs_printable "$dir"
finish
