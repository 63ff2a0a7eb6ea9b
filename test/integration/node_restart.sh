#!/usr/bin/env bash
# node_restart.sh - the node that runs the coordinator is SIGKILLed and
# started again: every process of the node, and the coordinator, come back
# at once, so the restarted coordinator learns of each death only from the
# process's new pid (docs/routing.md, "Epochs and the state file").  Two
# clusters, each with keys stored through cocytus-proxy first:
#
#  pbr  3 nodes, PBR(2): node 0 holds group 0's primary and a backup of the
#       two other groups.  The group must fail over to a backup rather than
#       confirm its empty primary, and the restarted backups must be
#       dropped from their primaries' ack sets and rebuilt: the cluster is
#       healthy again, every stored key reads back, and writes to every
#       group are stored.
#       Then group 1's primary dies while a backup is stopped, so the
#       coordinator is still fencing when the primary comes back and when
#       the coordinator is killed: the next one must fail the group over.
#       Last, node 2 dies 50 ms after the coordinator and stays down: the
#       restarted coordinator never hears from its processes, and must
#       declare them dead on their peers' word that their links are down
#       (coord_lost.c) rather than wait out its 3 s startup grace.
#  rs   4 nodes, RS(2,4), nodes not restarting dead processes: one data
#       process of the group whose parity process 0 is on node 0 is killed
#       for good, so that parity process serves it; then node 0 restarts.
#       The data process's takeover must start again on the group's other
#       parity process once it is heard from, not at once (with no parity
#       process heard yet, that was a false DATA LOSS and its keys missed).
#       Every takeover that node 0's restart causes (that recovery process,
#       node 0's data processes) must be prepared at once: what streamed
#       the dead data process is gone, so no read lease needs waiting out.
#
# The trap stops both clusters.
set -u

script_dir=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$script_dir/lib.sh"
bench=$build_dir/bench/cocytus-bench
cli=$build_dir/client/cocytus-cli
need_built "$build_dir/client/cocytus-proxy" "$build_dir/cocytus/cocytus-node" "$bench" "$cli"

RECORDS=20000
dir=""
cleanup() {
    cluster_remove "$dir"
}
on_exit cleanup

# bench_get LABEL: every stored key read back through the proxy, verified.
bench_get() {
    local out
    out=$(timeout 60 "$bench" -s "$proxy" -n "$RECORDS" --no-load -o "$RECORDS" -r 1 --verify \
        -v 100 -q 2>&1)
    if echo "$out" | grep -q "^op=get count=$RECORDS .* errors=0 misses=0 wrong=0"; then
        ok "$1: all $RECORDS keys read back"
    else
        fail "$1: reads: $(echo "$out" | grep -E '^op=get|total_errors' | tr '\n' ' ')"
    fi
}

# bench_mixed LABEL: sets and verified gets across every group.
bench_mixed() {
    local out rc
    out=$(timeout 60 "$bench" -s "$proxy" -n "$RECORDS" --no-load -o 6000 -r 0.5 \
        --verify-latest -v 100 -q 2>&1)
    rc=$?
    if [ "$rc" = 0 ] && echo "$out" | grep -q "^total_errors=0 total_wrong=0"; then
        ok "$1: sets stored and read back"
    else
        fail "$1: cocytus-bench exit $rc$([ "$rc" = 124 ] && echo ' (timed out: writes hang)') $(echo "$out" | grep -E '^op=|total_errors' | tr '\n' ' ')"
    fi
}

restart_node0() {
    bash "$cluster_script" kill-node --dir "$dir" --node 0 >/dev/null || fail "kill-node 0"
    sleep 1
    bash "$cluster_script" start-node --dir "$dir" --node 0 >/dev/null || fail "start-node 0"
}

no_data_loss_logged() {
    if grep -q "DATA LOSS" "$dir/coordinator.log"; then
        fail "$1: the coordinator reported $(grep -m1 "DATA LOSS" "$dir/coordinator.log")"
    else
        ok "$1: no data loss reported"
    fi
}

# ---- PBR(2) ----
dir=$(mktemp -d "${TMPDIR:-/tmp}/node_restart_pbr.XXXXXX")
proxy_port=$(pick_port)
# 9 processes and the coordinator: 2 ports each.
if ! cluster_up "$dir" 20 22000 30000 --nodes 3 --scheme pbr:2 --memory 32 --region 16 \
    --proxy-port "$proxy_port"; then
    fail "PBR(2) cluster did not come up"
    finish
fi
proxy=$(cat "$dir/proxy")
timeout 60 "$bench" -s "$proxy" -n "$RECORDS" --load --no-run -v 100 -q >/dev/null 2>&1 \
    || fail "pbr: loading $RECORDS keys"
# Reads all along: errors while node 0 is down are expected, but no read
# may miss a stored key (the restarted primary must not serve its empty
# store before the group fails over).
timeout 60 "$bench" -s "$proxy" -n "$RECORDS" --no-load -t 8 -r 1 --verify -v 100 -q \
    -c 2 >"$dir/reader.txt" 2>&1 &
reader=$!
sleep 1
restart_node0
start=$(date +%s%N)
if timeout 40 "$cli" --dir "$dir" wait-healthy --timeout 30 >"$dir/healthy.txt" 2>&1; then
    ok "pbr: healthy $(( ($(date +%s%N) - start) / 1000000 )) ms after node 0 was started again"
else
    fail "pbr: not healthy 30 s after node 0 restarted: $(tail -n 5 "$dir/healthy.txt" | tr '\n' ' ')"
    "$cli" --dir "$dir" status 2>&1 | grep -v '^proc'
fi
wait "$reader"
misses=$(sed -n 's/^op=get .* misses=\([0-9]*\) .*/\1/p' "$dir/reader.txt")
if [ "$misses" = 0 ]; then
    ok "pbr: reads during the restart: no miss ($(grep '^op=get' "$dir/reader.txt"))"
else
    fail "pbr: reads during the restart missed stored keys: $(grep -E '^op=get|total' "$dir/reader.txt" | tr '\n' ' ')"
fi
grep -q "group 0's primary (member 2) is dead: fencing" "$dir/coordinator.log" \
    && ok "pbr: group 0 failed over from its restarted primary" \
    || fail "pbr: group 0 did not fail over from its restarted primary"
bench_get "pbr after node 0 restarted"
bench_mixed "pbr after node 0 restarted"
no_data_loss_logged pbr

# The coordinator dies while it fences: group 1's primary is SIGKILLed
# while one of its backups is stopped (the fence waits for its answer), the
# primary's node starts it again (its hello, with the new pid, reaches the
# coordinator), then the coordinator is SIGKILLed and its node starts it
# again.  The new coordinator takes that pid for the original's: unless it
# resumes the failover, it confirms the empty primary (before: "healthy"
# and 6,683 of 20,000 keys missed).
# endpoints: "<role> <group> <index> <node> <host:port> <pid>" (the pid
# of node 0's processes has changed since: asked of the process instead)
place_addr() {
    awk -v r="$1" -v g="$2" -v i="$3" '$1 == r && $2 == g && $3 == i { print $5 }' "$dir/endpoints"
}
coord_pid=$(server_pid "$(cat "$dir/coordinator")")
p1=$(server_pid "$(place_addr primary 1 0)")
b11=$(server_pid "$(place_addr backup 1 1)")
if [ -n "$coord_pid" ] && [ -n "$p1" ] && [ -n "$b11" ]; then
    kill -STOP "$b11"
    kill -KILL "$p1"
    sleep 1
    kill -KILL "$coord_pid"
    sleep 0.3
    kill -CONT "$b11"
    if timeout 40 "$cli" --dir "$dir" wait-healthy --timeout 30 >"$dir/healthy.txt" 2>&1; then
        ok "pbr: healthy again after the coordinator died while fencing"
    else
        fail "pbr: not healthy 30 s after the coordinator died while fencing"
    fi
    grep -q "resuming group 1's failover" "$dir/coordinator.log" \
        && ok "pbr: the restarted coordinator resumed group 1's failover" \
        || fail "pbr: the restarted coordinator did not resume group 1's failover"
    bench_get "pbr after the coordinator died while fencing"
else
    fail "pbr: no coordinator ($coord_pid), primary 1/0 ($p1) or backup 1/1 ($b11) process"
fi

# Node 2 (one process of each group) dies while no coordinator runs.  Once
# all three are declared dead: whoever was found dead from peers' word is
# on node 2, and each primary that died (a group that fails over) was
# found that way.  (A backup on node 2 may be found either way: its
# primary drops it from its ack set at once and stops reporting it, and
# the startup grace then decides.)
PEERS_SAID="dead: not heard from since the coordinator started, and its .* live peer(s) report their links to it down"
node2_dead() {
    local addr
    for addr in $(awk '$4 == 2 { print $5 }' "$dir/endpoints"); do
        tail -n "+$((log_before + 1))" "$dir/coordinator.log" | grep -qF " $addr dead: " || return 1
    done
}
found_by_peers() {
    local new addr g
    new=$(tail -n "+$((log_before + 1))" "$dir/coordinator.log")
    printf '%s\n' "$new" | grep -q "'s primary (member [0-9]*) is dead: fencing" || return 1
    for addr in $(printf '%s\n' "$new" | grep "$PEERS_SAID" | awk '{ print $6 }'); do
        awk -v a="$addr" '$4 == 2 && $5 == a { f = 1 } END { exit !f }' "$dir/endpoints" || return 1
    done
    for g in $(printf '%s\n' "$new" | sed -n "s/^coordinator: group \([0-9]*\)'s primary (member [0-9]*) is dead: fencing.*/\1/p"); do
        printf '%s\n' "$new" | grep "$PEERS_SAID" | grep -q "^coordinator: group $g " || return 1
    done
}
log_before=$(wc -l <"$dir/coordinator.log")
coord_pid=$(server_pid "$(cat "$dir/coordinator")")
if [ -n "$coord_pid" ]; then
    kill -KILL "$coord_pid"
    sleep 0.05
    bash "$cluster_script" kill-node --dir "$dir" --node 2 >/dev/null || fail "kill-node 2"
    if ! wait_for 100 node2_dead; then
        tail -n "+$((log_before + 1))" "$dir/coordinator.log" | grep " dead"
        fail "pbr: node 2's processes were not all declared dead in 10 s"
    elif found_by_peers; then
        ok "pbr: node 2's primaries were found dead from their backups' links"
    else
        tail -n "+$((log_before + 1))" "$dir/coordinator.log" | grep " dead"
        fail "pbr: node 2's primaries were not found dead from their backups' links, or others were"
    fi
    bash "$cluster_script" start-node --dir "$dir" --node 2 >/dev/null || fail "start-node 2"
    if timeout 40 "$cli" --dir "$dir" wait-healthy --timeout 30 >"$dir/healthy.txt" 2>&1; then
        ok "pbr: healthy again after node 2 died with the coordinator"
    else
        fail "pbr: not healthy 30 s after node 2 was started again"
    fi
    bench_get "pbr after node 2 died with the coordinator"
else
    fail "pbr: no coordinator process"
fi
cluster_remove "$dir"
dir=""

# ---- RS(2,4) ----
dir=$(mktemp -d "${TMPDIR:-/tmp}/node_restart_rs.XXXXXX")
proxy_port=$(pick_port)
# 16 processes and the coordinator: 2 ports each.
if ! cluster_up "$dir" 34 22000 30000 --nodes 4 --scheme rs:2:4 --memory 32 --region 16 \
    --restart off --proxy-port "$proxy_port"; then
    fail "RS(2,4) cluster did not come up"
    finish
fi
proxy=$(cat "$dir/proxy")
timeout 60 "$bench" -s "$proxy" -n "$RECORDS" --load --no-run -v 100 -q >/dev/null 2>&1 \
    || fail "rs: loading $RECORDS keys"
# endpoints: "<role> <group> <index> <node> <host:port> <pid>"
g=$(awk '$1 == "parity" && $3 == 0 && $4 == 0 { print $2; exit }' "$dir/endpoints")
victim=$(awk -v g="$g" '$1 == "data" && $2 == g && $3 == 0 { print $6 }' "$dir/endpoints")
if [ -z "$g" ] || [ -z "$victim" ]; then
    fail "rs: no group with parity process 0 on node 0 in $(tr '\n' ';' <"$dir/endpoints")"
    finish
fi
kill -KILL "$victim"
served() {
    "$cli" --dir "$dir" status 2>/dev/null | grep -q "^group $g: data 0 served by recovery process parity $1 "
}
wait_for 100 served 0 && ok "rs: group $g's data 0 is served by parity 0 (node 0)" \
    || fail "rs: group $g's data 0 not served by parity 0 in 10 s"
log_before=$(wc -l <"$dir/coordinator.log")
restart_node0
if wait_for 200 served 1; then
    ok "rs: group $g's data 0 is served by parity 1 after node 0 restarted"
else
    fail "rs: group $g's data 0 not served by parity 1 20 s after node 0 restarted"
    "$cli" --dir "$dir" status 2>&1 | grep '^group'
fi
# Every takeover node 0's restart caused was learned of from a new pid:
# the process that streamed the dead data process (its recovery process;
# a data process of node 0) is gone, so no prepare may wait out a read
# lease (0.75 s) that its empty successor, already talking to the parity
# processes, holds.
since_restart() { tail -n "+$((log_before + 1))" "$dir/coordinator.log"; }
all_prepared() {
    local done
    done=$(since_restart | grep -c ': stable xid .* (preparation ')
    [ "$(since_restart | grep -c 'died unseen; its takeover starts')" -le "$done" ] &&
        [ "$(since_restart | grep -c 'is dead: preparing its stream')" -le "$done" ]
}
wait_for 50 all_prepared || fail "rs: takeovers after node 0 restarted not all prepared in 5 s"
preps=$(since_restart | sed -n 's/^coordinator: group \([0-9]*\) dp \([0-9]*\): stable xid .* (preparation \([0-9]*\)\..*/g\1 dp\2 \3/p')
slow=$(printf '%s\n' "$preps" | awk '$3 >= 500')
shown=$(printf '%s\n' "$preps" | tr '\n' ',' | sed 's/,$//')
if [ -n "$preps" ] && [ -z "$slow" ] && [ "$(since_restart | grep -c 'preparing its stream on .* at once')" \
    -eq "$(since_restart | grep -c 'is dead: preparing its stream')" ]; then
    ok "rs: every takeover after node 0 restarted was prepared at once ($shown ms)"
else
    fail "rs: takeovers after node 0 restarted not all prepared at once (${shown:-none} ms)"
    since_restart | grep "preparing its stream"
fi
bench_get "rs after node 0 restarted"
no_data_loss_logged rs
finish
