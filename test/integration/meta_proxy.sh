#!/usr/bin/env bash
# meta_proxy.sh - a client's meta and TTL operations through cocytus-proxy in
# front of the default cluster (scripts/cluster up: 5 nodes, RS(3,5),
# coordinator, proxy), compared with memcached itself by meta_check.py: mg
# ms md ma mn me with their flags (base64 keys, opaque, quiet mode with mn,
# TTL reads and updates, vivify, recache, invalidation, CAS, the ms and ma
# modes), touch, gat and gats, as pymemcache-style clients issue them.
# Two runs with different keys, so they land on different servers.
# Then `lru_crawler metadump` through the proxy (metadump_check.py):
# memcached-tool's keys and dump against the proxy end by themselves and
# list every key once and restore every value (the proxy asks every server
# and joins their lines behind one END); a bad class gets BADCLASS; `stats
# cachedump` likewise (libmemcached's memcdump lists every key, a limit
# holds over all servers, bad arguments get the servers' errors);
# concurrent and abandoned dumps; a dump keeps its place in a pipeline of
# classic and meta commands; a dump right after a data process is killed
# lists every key (it follows the dead process's slots to the recovery
# process and back: 10 kills); with a data process stopped (SIGSTOP) a
# metadump still ends, listing the other servers' keys and a SERVER_ERROR
# line naming the stopped one.  Then a PBR(2) cluster's proxy: memcdump
# and cachedump, and a metadump right after each of three primaries is
# killed lists every key.
# Skipped (77) without Debian's memcached.  The trap stops the clusters.
set -u

script_dir=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$script_dir/lib.sh"
need_built "$build_dir/client/cocytus-proxy" "$build_dir/cocytus/cocytus-node"
memcached_bin=${MEMCACHED:-$(command -v memcached || echo /usr/bin/memcached)}
if [ ! -x "$memcached_bin" ]; then
    echo "SKIP: no memcached to compare with (apt-get install memcached)"
    exit 77
fi
export MEMCACHED=$memcached_bin

dir=$(mktemp -d "${TMPDIR:-/tmp}/meta_proxy.XXXXXX")
pdir=""
cleanup() {
    cluster_remove "$dir"
    cluster_remove "$pdir"
}
on_exit cleanup

# 25 processes and the coordinator: 2 ports each; the proxy's is the kernel's choice.
proxy_port=$(pick_port)
if ! cluster_up "$dir" 52 3000 12000 --memory 16 --region 16 --proxy-port "$proxy_port"; then
    fail "the default cluster (5 nodes, RS(3,5)) did not come up"
    finish
fi
proxy=$(cat "$dir/proxy")
for prefix in pa_ pb_; do
    python3 "$script_dir/meta_check.py" --target "$proxy" --prefix "$prefix" \
        --label "cocytus-proxy in front of the default cluster (keys $prefix*)" \
        || fail "meta operations through the proxy (keys $prefix*) differ from memcached's"
done

md() {
    timeout 120 python3 "$script_dir/metadump_check.py" "$@" --target "$proxy" --prefix md_ \
        --count 300 || fail "metadump_check.py $1 failed"
}
tool=/usr/share/memcached/scripts/memcached-tool
md fill
if [ -r "$tool" ] && command -v perl >/dev/null; then
    md tool --tool "$tool"
else
    echo "note: no $tool (Debian's memcached package) or perl: memcached-tool not run"
fi
md errors
md cachedump
md concurrent
md order
# Real kills during dumps: a data process of each group (not the one
# stopped below) SIGKILLed, a metadump right after it and 10 ms later;
# its node restarts it, a recovery process serves its keys meanwhile.
cli=$build_dir/client/cocytus-cli
for g in 0 1 2 3 4; do
    victim=$(awk -v g="$g" '$1 == "data" && $2 == g && $3 == 1 { print $5 }' "$dir/endpoints")
    for delay in 0 0.01; do
        md killdump --server "$victim" --delay "$delay"
        "$cli" --dir "$dir" wait-healthy --timeout 30 >/dev/null 2>&1 ||
            fail "the cluster is not healthy 30 s after $victim was killed"
    done
done
# A data process that holds some of the keys, stopped: the proxy's
# metadump waits for it at most its deadline, then ends without its lines.
read -r _ _ _ _ dp_addr _ < <(grep '^data ' "$dir/endpoints" | head -n 1)
dp_pid=$(server_pid "$dp_addr")     # (the endpoints file's pid is stale after a restart)
on_dp=$(timeout 30 python3 "$script_dir/metadump_check.py" count --target "$dp_addr" --prefix md_)
if [ -n "$on_dp" ] && [ "$on_dp" -gt 0 ] 2>/dev/null && kill -STOP "$dp_pid"; then
    md partial --missing "$on_dp" --server "$dp_addr"
    kill -CONT "$dp_pid"
else
    fail "no data process with keys to stop ($dp_addr, pid $dp_pid, $on_dp keys)"
fi
cluster_remove "$dir"

# The same listings through a PBR(2) cluster's proxy, across failovers:
# three groups' primaries SIGKILLed, a metadump at once or 10 ms later
# (the dump follows the dead primary's slots to the promoted backup).
pdir=$(mktemp -d "${TMPDIR:-/tmp}/meta_proxy_pbr.XXXXXX")
pbr_proxy_port=$(pick_port)
if cluster_up "$pdir" 40 3000 12000 --scheme pbr:2 --memory 16 --proxy-port "$pbr_proxy_port"; then
    proxy=$(cat "$pdir/proxy")
    md fill
    md cachedump
    for g in 0 1 2; do
        victim=$(awk -v g="$g" '$1 == "primary" && $2 == g { print $5 }' "$pdir/endpoints")
        md killdump --server "$victim" --delay "$([ "$g" = 1 ] && echo 0.01 || echo 0)"
        "$cli" --dir "$pdir" wait-healthy --timeout 30 >/dev/null 2>&1 ||
            fail "the PBR cluster is not healthy 30 s after $victim was killed"
    done
else
    fail "a 5-node PBR(2) cluster did not come up"
fi
finish
