#!/usr/bin/env bash
# pymemcache_kill.sh - pymemcache, the Python client memcached users run,
# through cocytus-proxy in front of a 3-node RS(2,3) cluster: its calls
# answered as memcached answers them (pymemcache_client.py api), then four
# pymemcache clients writing and reading back with noreply=False while
# node 1 (its node supervisor and all three of its servers) is SIGKILLed:
# no acknowledged write lost, no stale read, and service after the kill
# (the longest time without a successful operation is printed).  Then the
# cluster's verify and decode-check.
# Skipped (77) without pymemcache (Debian: python3-pymemcache) or memcached.
# The trap stops the cluster.
set -u

script_dir=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$script_dir/lib.sh"
need_built "$build_dir/client/cocytus-proxy" "$build_dir/cocytus/cocytus-node"
need_pymemcache
memcached_bin=${MEMCACHED:-$(command -v memcached || echo /usr/bin/memcached)}
if [ ! -x "$memcached_bin" ]; then
    echo "SKIP: no memcached to compare with (apt-get install memcached)"
    exit 77
fi
client=$script_dir/pymemcache_client.py

dir=$(mktemp -d "${TMPDIR:-/tmp}/pymemcache.XXXXXX")
cleanup() {
    cluster_remove "$dir"
}
on_exit cleanup

proxy_port=$(pick_port)
# 9 processes and the coordinator: 2 ports each; the proxy's is the kernel's choice.
if ! cluster_up "$dir" 20 14000 20000 --nodes 3 --scheme rs:2:3 --memory 32 --region 32 \
    --restart off --proxy-port "$proxy_port"; then
    fail "RS(2,3) cluster with cocytus-proxy did not come up"
    finish
fi
proxy=$(cat "$dir/proxy")

if "$py" "$client" api --target "$proxy" --memcached "$memcached_bin"; then
    ok "pymemcache's calls through the proxy answered as memcached's"
else
    fail "pymemcache's calls through the proxy differ from memcached's"
fi

kill_cmd="bash $(printf '%q' "$cluster_script") kill-node --node 1 --dir $(printf '%q' "$dir")"
if "$py" "$client" load --target "$proxy" --seconds 10 --kill-at 3 --threads 4 \
    --kill-cmd "$kill_cmd" --json "$dir/load.json"; then
    ok "pymemcache load through a node kill: no acknowledged write lost, no stale read"
else
    fail "pymemcache load through a node kill (above)"
fi

cluster_check_ok "$dir" verify "after the node kill"
cluster_check_ok "$dir" decode-check "after the node kill"
finish
