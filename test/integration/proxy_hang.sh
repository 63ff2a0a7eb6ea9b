#!/usr/bin/env bash
# proxy_hang.sh - a data process that stops answering (SIGSTOP: a paused VM,
# a stuck disk, a cut link) costs the clients of cocytus-proxy a wait, not
# an error.
#
# A 3-node RS(2,3) cluster with cocytus-proxy in front of it (its defaults:
# -t 1000, a try unanswered for 1 s fails; -D 2000, a request is retried
# for 2 s).  Four pymemcache clients write and read back their keys through
# the proxy while data process 0 of group 0 is stopped for 3 s.  The
# coordinator declares it dead after 1.5 s without a heartbeat and a parity
# process takes its keys over; resumed, the process finds itself replaced
# and exits, and its node starts it again empty to be rebuilt.
#
# What the proxy must do: a request in flight at the stopped process when
# the map gives its slot to the parity process is sent there (px_route.c,
# "A silent server").  Before, such a request, tried once (1 s), then again
# at the same process because the map had not changed yet (1 s more), was
# answered "SERVER_ERROR gave up after 2 tries in 2000 ms" to every client
# that had one in flight: each of the four here.  Checked: no call failed,
# nothing acknowledged lost, no stale read, the proxy logged the hand-over,
# and after the rebuild verify passes.  Then the same with meta commands
# (meta_load.py: ms, then mg of the same key, four connections), which
# travel on connections of their own, through a second stop of the same
# process; at the end verify and decode-check.
# Skipped (77) without pymemcache (Debian: python3-pymemcache).
# The trap stops the cluster.
set -u

script_dir=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$script_dir/lib.sh"
need_built "$build_dir/client/cocytus-proxy" "$build_dir/cocytus/cocytus-node"
need_pymemcache
client=$script_dir/pymemcache_client.py

dir=$(mktemp -d "${TMPDIR:-/tmp}/proxy_hang.XXXXXX")
stopped=""
cleanup() {
    [ -z "$stopped" ] || kill -CONT "$stopped" 2>/dev/null
    cluster_remove "$dir"
}
on_exit cleanup

proxy_port=$(pick_port)
# 9 processes and the coordinator: 2 ports each; the proxy's is the kernel's choice.
if ! cluster_up "$dir" 20 14000 20000 --nodes 3 --scheme rs:2:3 --memory 32 --region 32 \
    --proxy-port "$proxy_port"; then
    fail "RS(2,3) cluster with cocytus-proxy did not come up"
    finish
fi
proxy=$(cat "$dir/proxy")
pid=$(group0_pid "$dir" data 0)
if [ -z "$pid" ]; then
    fail "no pid for data process 0 of group 0"
    finish
fi
stopped=$pid

hang_cmd="kill -STOP $pid && sleep 3 && kill -CONT $pid && echo stopped $pid for 3 s"
if "$py" "$client" load --target "$proxy" --seconds 9 --kill-at 2 --threads 4 \
    --kill-cmd "$hang_cmd" --max-errors 0 --json "$dir/load.json"; then
    ok "pymemcache through a 3 s stop of a data process: no call failed, nothing lost or stale"
else
    fail "pymemcache through a 3 s stop of a data process (above)"
fi
stopped=""

if grep -q "backend .*: silent, and the map gives slot" "$dir/proxy.log"; then
    ok "the proxy sent the stopped process's requests to its keys' new owner"
else
    fail "the proxy did not log the hand-over of the stopped process's requests"
    tail -n 20 "$dir/proxy.log"
fi

cluster_healthy_again "$dir" "after the first stop"
cluster_check_ok "$dir" verify "after the stop"
# The same for meta commands (ms, mg), which the proxy forwards over text
# connections of their own: the same data process, started again by its
# node and rebuilt, stopped once more.
pid=$(group0_pid "$dir" data 0)
stopped=$pid
hang_cmd="kill -STOP $pid && sleep 3 && kill -CONT $pid && echo stopped $pid for 3 s"
if [ -n "$pid" ] && python3 "$script_dir/meta_load.py" --target "$proxy" --seconds 9 --at 2 \
    --cmd "$hang_cmd"; then
    ok "meta commands through a 3 s stop of a data process: no error, every mg read its ms"
else
    fail "meta commands through a 3 s stop of a data process (above)"
fi
stopped=""
if grep -q "meta connection to .*: silent, and the map gives slot" "$dir/proxy.log"; then
    ok "the proxy sent the stopped process's meta commands to its keys' new owner"
else
    fail "the proxy did not log the hand-over of the stopped process's meta commands"
    tail -n 20 "$dir/proxy.log"
fi

cluster_healthy_again "$dir" "after the second stop"
cluster_check_ok "$dir" verify "after the stops"
cluster_check_ok "$dir" decode-check "after the stops"
finish
