#!/usr/bin/env bash
# pause_beyond.sh - silence is not a death when declaring it would lose
# data.  One node, RS(3,5), a coordinator and cocytus-proxy; drill-writer
# sets keys through the proxy all along and every acknowledged one is
# read back at the end.  Data process 0 is stopped (SIGSTOP): after 1.5 s
# of silence it is declared dead and a parity process serves its keys and
# takes their writes.  Then both parity processes are stopped for 4 s, and
# everything resumes.  Three silent places are one more than an RS(3,5)
# group has parity for: the coordinator must declare one of the parity
# processes dead and wait for the other (their links are up: they may be
# paused, not dead), so the group is never LOST and nothing acknowledged
# is lost.  The build before declared all three dead, the group LOST, and
# threw away the recovery process's writes: lost 19,621 of 153,139.
# Then the same for a coordinator that starts while processes are paused
# (below, "2."), and a coordinator that is itself stopped as it starts
# ("3.").
set -u

script_dir=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$script_dir/lib.sh"
writer=$build_dir/bench/drill-writer
need_built "$writer" "$build_dir/client/cocytus-proxy" "$build_dir/cocytus/cocytus-node" \
    "$build_dir/client/cocytus-cli"

dir=$(mktemp -d "${TMPDIR:-/tmp}/pause_beyond.XXXXXX")
stopped=""
writer_pid=""
cleanup() {
    [ -n "$stopped" ] && kill -CONT $stopped 2>/dev/null
    stop_pid "$writer_pid"
    cluster_remove "$dir"
}
on_exit cleanup

proxy_port=$(pick_port)
if ! cluster_up "$dir" 12 14000 20000 --nodes 1 --scheme rs:3:5 --memory 64 --region 64 \
    --proxy-port "$proxy_port"; then
    fail "RS(3,5) cluster did not come up"
    finish
fi
proxy=$(cat "$dir/proxy")
# Every writer sets the keys d<conn>-<seq> from 0 on, with 1 KB values:
# capped at 100,000 sets (about 35 MB per data process), the group's
# 64 MB regions never fill.  Uncapped, a fast run of the third part (a
# CI's) set 164,841 and the check missed 1,143: the fullest data process
# evicts past about 61,000 items (memcached's rule when full; 170,000
# sets here: 3,140 evicted, 3,140 "lost").
cap="-n 100000"
dp0=$(awk '$1 == "data" && $3 == 0 { print $6 }' "$dir/endpoints")
pps=$(awk '$1 == "parity" { printf "%s ", $6 }' "$dir/endpoints")
served() { grep -q "dp 0 is served by parity process" "$dir/coordinator.log"; }

"$writer" write -h "${proxy%:*}" -p "${proxy##*:}" -o "$dir/acked" -t 12 $cap -c 2 -d 2 -z 1024 \
    2>"$dir/writer.log" &
writer_pid=$!
sleep 2
kill -STOP "$dp0" && stopped="$dp0"
if wait_for 100 served; then
    ok "data process 0 silent: $(grep -m1 "dp 0 is served by parity process" "$dir/coordinator.log" | cut -c14-)"
else
    fail "data process 0 was not taken over"
fi
sleep 1
kill -STOP $pps && stopped="$dp0 $pps"
sleep 4
kill -CONT $dp0 $pps
stopped=""
wait "$writer_pid"
writer_pid=""
cat "$dir/writer.log"
if grep -q "declaring it dead would lose data, so the coordinator waits for it" "$dir/coordinator.log"; then
    ok "coordinator: $(grep -m1 "would lose data" "$dir/coordinator.log" | cut -c14-200)"
else
    fail "the coordinator did not wait for a silent process beyond the group's parity"
fi
# no_loss ACKED LOSSES_BEFORE WHEN: no new DATA LOSS line, the cluster
# healthy again, every write in ACKED reads back, verify clean; WHEN ends
# the messages.
no_loss() {
    local acked=$1 before=$2 when=$3 check
    if [ "$(cat "$dir"/coordinator*.log | grep -c "DATA LOSS")" -gt "$before" ]; then
        cat "$dir"/coordinator*.log | grep "DATA LOSS\|dead:" | tail -8
        fail "the group was declared LOST while its processes were only paused $when"
    else
        ok "no DATA LOSS declared $when"
    fi
    "$build_dir/client/cocytus-cli" --dir "$dir" --timeout 60 wait-healthy >"$dir/healthy.out" 2>&1 ||
        fail "not healthy again $when: $(tail -1 "$dir/healthy.out")"
    check=$("$writer" check -h "${proxy%:*}" -p "${proxy##*:}" -i "$acked" 2>&1)
    case $check in
        *"acknowledged 0,"*) fail "nothing was acknowledged $when: $check" ;;
        *", lost 0"*) ok "every acknowledged write reads back $when: $check" ;;
        *) fail "acknowledged writes lost $when: $check"
           for p in $(awk '$1 == "data" { print $5 }' "$dir/endpoints"); do
               echo "data process at $p: $(mc "$p" "stats\r\n" | tr -d '\r' | awk '$2 == "evictions" || $2 == "curr_items" { printf "%s %s ", $2, $3 }')"
           done ;;
    esac
    "$build_dir/client/cocytus-cli" --dir "$dir" verify >"$dir/verify.out" 2>&1 &&
        ok "cocytus-cli verify $when" || { tail -5 "$dir/verify.out"; fail "cocytus-cli verify $when"; }
}
no_loss "$dir/acked" 0 "(recovery process, then both parity processes paused)"

# ---- 2. paused while a new coordinator starts ----
# The three data processes are stopped and the coordinator killed at the
# same moment; its node starts it again.  The new coordinator never hears
# from the data processes, and its startup grace, or the parity processes'
# word that their links to them are silent, would declare all three dead:
# the group LOST, though nothing died.  Their links are up, so it must
# declare two of them dead and wait for the third.  Resumed 5 s later,
# nothing acknowledged is lost.
coord_pid() { pgrep -f -- "--role coordinator --cluster $dir/cluster.conf" | head -1; }
dps=$(for i in 0 1 2; do group0_pid "$dir" data "$i"; done | tr '\n' ' ')
c_old=$(coord_pid)
[ "$(echo $dps | wc -w)" = 3 ] && [ -n "$c_old" ] ||
    { fail "no data processes ($dps) or coordinator ($c_old)"; finish; }
loss_before=$(cat "$dir"/coordinator*.log | grep -c "DATA LOSS")
"$writer" write -h "${proxy%:*}" -p "${proxy##*:}" -o "$dir/acked2" -t 12 $cap -c 2 -d 2 -z 1024 \
    2>"$dir/writer2.log" &
writer_pid=$!
sleep 2
kill -STOP $dps && stopped="$dps"
kill -KILL "$c_old"
sleep 5
kill -CONT $dps
stopped=""
wait "$writer_pid"
writer_pid=""
cat "$dir/writer2.log"
if cat "$dir"/coordinator*.log | grep -q "not heard from since the coordinator started, but its live peers report their links to it up"; then
    ok "new coordinator: $(cat "$dir"/coordinator*.log | grep -m1 "but its live peers report their links to it up" | cut -c14-220)"
else
    fail "the new coordinator did not wait for a paused process it never heard from"
fi
no_loss "$dir/acked2" "$loss_before" "(a new coordinator during the pause)"

# ---- 3. the new coordinator itself stalls just after it starts ----
# Killed again, and its successor stopped for 3 s as soon as it listens,
# before its first check: that time it could hear nobody, so it is no
# evidence against anyone (forgive_own_stall).  The build before counted
# it into the startup grace and declared all five processes dead, though
# every one was alive: DATA LOSS.
started_lines() { cat "$dir"/coordinator*.log | grep -c "control links on"; }
dead_before=$(cat "$dir"/coordinator*.log | grep -c " dead: ")
stalls_before=$(cat "$dir"/coordinator*.log | grep -c "did not run for")
loss_before=$(cat "$dir"/coordinator*.log | grep -c "DATA LOSS")
lines_before=$(started_lines)
c_old=$(coord_pid)
"$writer" write -h "${proxy%:*}" -p "${proxy##*:}" -o "$dir/acked3" -t 9 $cap -c 2 -d 2 -z 1024 \
    2>"$dir/writer3.log" &
writer_pid=$!
sleep 1
kill -KILL "$c_old"
# polled every 20 ms: the stop must come before the first check, 250 ms on
listening=""
for _ in $(seq 1500); do
    [ "$(started_lines)" -gt "$lines_before" ] && { listening=1; break; }
    sleep 0.02
done
c_new=$(coord_pid)
if [ -n "$listening" ] && [ -n "$c_new" ] && kill -STOP "$c_new"; then
    stopped="$c_new"
    sleep 3
    kill -CONT "$c_new"
    stopped=""
else
    fail "the coordinator was not started again, or could not be stopped"
fi
wait "$writer_pid"
writer_pid=""
cat "$dir/writer3.log"
# It must have seen its own stall, or this part proved nothing.  (Only a
# stop before its first check tells the builds apart; the polls above
# make that likely, not certain.)
if [ "$(cat "$dir"/coordinator*.log | grep -c "did not run for")" -le "$stalls_before" ]; then
    fail "the stopped coordinator did not log its stall ('did not run for')"
elif [ "$(cat "$dir"/coordinator*.log | grep -c " dead: ")" -gt "$dead_before" ]; then
    cat "$dir"/coordinator*.log | grep " dead: \|did not run" | tail -6
    fail "a coordinator stopped as it started declared live processes dead"
else
    ok "a coordinator stopped as it started declared nobody dead: $(cat "$dir"/coordinator*.log | grep "did not run for" | tail -1 | cut -c14-120)"
fi
no_loss "$dir/acked3" "$loss_before" "(a coordinator stopped as it started)"
finish
