#!/usr/bin/env bash
# rmw_kill.sh - counters and logs survive kills: incr, decr, gets + cas,
# append and prepend (rmw_load.py, four pymemcache clients through
# cocytus-proxy) on a 3-node RS(2,3) cluster through three failures, each
# followed by the rebuild to full redundancy:
#   1. data process 0 of group 0 SIGKILLed: its keys are read and changed
#      on the parity process that takes them over (values decoded from
#      the other data processes and the parity regions);
#   2. the same process, started again by its node and rebuilt, stopped
#      for 3 s (SIGSTOP: taken over while its clients wait);
#   3. a parity process of group 0 stopped for 3 s: every write of its
#      group waits for its acks until the coordinator declares it dead
#      (1.5 s), longer than cocytus-proxy's try timeout (1 s).  No call
#      may fail: the proxy keeps waiting for a request that cannot be sent
#      twice, up to its deadline, instead of answering "may have been
#      applied" (px_backend.c, be_hold).  Through a second proxy with a 4 s
#      deadline (-D 4000; the default 2 s leaves 0.4 s to a loaded machine);
#   4. node 1 SIGKILLed: two data processes and a parity process at once.
# Each time: no acknowledged change lost, none applied twice (a counter
# lies between its acknowledged changes and those plus the calls that
# failed with "may have been applied"; a log holds each acknowledged
# token once and in order), and a call succeeded after the failure; keys
# whose TTL was changed by touch or gat before the failure live or expire
# by the changed TTL, and an expired key does not come back.  At the end
# verify and decode-check.
# Skipped (77) without pymemcache (Debian: python3-pymemcache).
# The trap stops the cluster.
set -u

script_dir=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$script_dir/lib.sh"
need_built "$build_dir/client/cocytus-proxy" "$build_dir/cocytus/cocytus-node"
need_pymemcache
load=$script_dir/rmw_load.py

dir=$(mktemp -d "${TMPDIR:-/tmp}/rmw_kill.XXXXXX")
stopped=""
proxy_pid=""
cleanup() {
    [ -z "$stopped" ] || kill -CONT "$stopped" 2>/dev/null
    [ -z "$proxy_pid" ] || stop_pid "$proxy_pid"
    cluster_remove "$dir"
}
on_exit cleanup

# rmw_through WHAT CMD [ARGS...]: the load with CMD run 2 s in.
rmw_through() {
    if "$py" "$load" --target "${target:-$proxy}" --seconds 7 --at 2 --threads 4 --cmd "$2" "${@:3}"; then
        ok "incr/decr/cas/append/prepend through $1: nothing lost, nothing applied twice, TTLs kept"
    else
        fail "incr/decr/cas/append/prepend through $1 (above)"
    fi
}

proxy_port=$(pick_port)
# 9 processes and the coordinator: 2 ports each; the proxy's is the kernel's choice.
if ! cluster_up "$dir" 20 14000 20000 --nodes 3 --scheme rs:2:3 --memory 32 --region 32 \
    --proxy-port "$proxy_port"; then
    fail "RS(2,3) cluster with cocytus-proxy did not come up"
    finish
fi
proxy=$(cat "$dir/proxy")
seeds=$(awk '$1 == "data" { printf "%s%s", sep, $5; sep = "," }' "$dir/endpoints")
if ! start_proxy "$dir/proxy-d4.log" --seeds "$seeds" -D 4000; then
    fail "a second cocytus-proxy (-D 4000) did not start"
    finish
fi

pid=$(group0_pid "$dir" data 0)
if [ -n "$pid" ]; then
    rmw_through "a SIGKILL of a data process" "kill -KILL $pid && echo killed $pid"
else
    fail "no pid for data process 0 of group 0"
fi
cluster_healthy_again "$dir" "after the kill"

# stop_through ROLE WHAT [ARGS...]: the load through a 3 s stop of process
# 0 of group 0 in ROLE (data, parity), ARGS passed to the load.
stop_through() {
    local pid
    pid=$(group0_pid "$dir" "$1" 0)
    if [ -z "$pid" ]; then
        fail "no pid for $1 process 0 of group 0"
        return
    fi
    stopped=$pid
    rmw_through "$2" "kill -STOP $pid && sleep 3 && kill -CONT $pid && echo stopped $pid for 3 s" \
        "${@:3}"
    stopped=""
}

stop_through data "a 3 s stop of a data process"
cluster_healthy_again "$dir" "after the stop"

target=127.0.0.1:$proxy_port stop_through parity \
    "a 3 s stop of a parity process, with no call failing" --max-failed 0
if grep -q "waiting, since a request in flight cannot be sent twice" "$dir/proxy-d4.log"; then
    ok "the proxy waited past its try timeout for a request it cannot send twice"
else
    fail "the proxy did not log a wait for a request it cannot send twice"
    tail -n 20 "$dir/proxy-d4.log"
fi
cluster_healthy_again "$dir" "after the parity process's stop"

rmw_through "a node kill" \
    "bash $(printf '%q' "$cluster_script") kill-node --node 1 --dir $(printf '%q' "$dir")"
cluster_check_ok "$dir" verify "after the node kill"
cluster_check_ok "$dir" decode-check "after the node kill"
finish
