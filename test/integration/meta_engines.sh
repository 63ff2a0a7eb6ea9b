#!/usr/bin/env bash
# meta_engines.sh - the meta commands in every engine that serves keys,
# each compared with memcached itself by meta_check.py (one script of
# mg/ms/md/ma/mn/me with their flags, touch, gat and TTL reads; replies
# equal after masking CAS values, TTL counts and key names):
#   - a plain cocytus-server;
#   - an RS(2,3) cluster (3 nodes, coordinator, cocytus-proxy): a data
#     process directly (keys of its own slots), then cocytus-proxy;
#   - the same cluster after SIGKILL to a data process (nodes do not
#     restart it): the recovery process that took its slots, directly;
#   - a PBR group (a primary and 2 backups): the primary directly.
# At each of them, and at a parity process and a PBR backup, stats_check.py
# checks the `stats` replies monitoring tools read (every group answers,
# lines in memcached's shape, binary STAT, `stats reset`) and, where keys
# are served, that the counters move as memcached's under one sequence of
# operations; at cocytus-proxy, that `stats` gives curr_items, total_items,
# bytes and limit_maxbytes as the sums over the data processes.
# Skipped (77) without Debian's memcached to compare with.  The traps stop
# everything the test started.
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
check=$script_dir/meta_check.py
RECOVERY_TENTHS=600     # a slow (sanitizer, busy) machine: the takeover within 60 s

server_pid=""
rsdir=""
pbrdir=""
cleanup() {
    stop_pid "$server_pid"
    cluster_remove "$rsdir"
    cluster_remove "$pbrdir"
}
on_exit cleanup

# meta LABEL HOST:PORT [--direct]: one meta_check.py run.
meta() {
    local label=$1 target=$2
    shift 2
    if python3 "$check" --target "$target" --label "$label" "$@"; then
        return 0
    fi
    fail "meta commands on $label differ from memcached's"
}

# stats LABEL HOST:PORT [stats_check.py options]: the stats checks.
stats() {
    local label=$1 target=$2
    shift 2
    if python3 "$script_dir/stats_check.py" --target "$target" --label "$label" "$@"; then
        return 0
    fi
    fail "stats of $label are not what monitoring tools read from memcached"
}

# admin HOST:PORT COMMAND: the reply lines of one admin command, on a
# connection that proved the cluster secret of the RS cluster (ctl, lib.sh).
admin() {
    ctl "$rsdir" "$1" "$2"
}

# --- plain ---
if start_server "$(mktemp "${TMPDIR:-/tmp}/meta_plain.XXXXXX")"; then
    meta "a plain cocytus-server" "127.0.0.1:$server_port"
    stats "a plain cocytus-server" "127.0.0.1:$server_port" --counters --metadump
    stop_pid "$server_pid"
    server_pid=""
else
    fail "plain server did not start"
fi

# --- RS(2,3): data process, proxy, then a recovery process ---
rsdir=$(mktemp -d "${TMPDIR:-/tmp}/meta_rs.XXXXXX")
proxy_port=$(pick_port)
# 9 processes and the coordinator: 2 ports each; the proxy's is the kernel's choice.
if cluster_up "$rsdir" 20 14000 20000 --nodes 3 --scheme rs:2:3 --memory 16 --region 16 \
    --restart off --proxy-port "$proxy_port"; then
    dp=$(awk '$1 == "data" { print $5; exit }' "$rsdir/endpoints")
    meta "data process $dp" "$dp" --direct
    stats "data process $dp" "$dp" --direct --counters --metadump
    pp=$(awk '$1 == "parity" { print $5; exit }' "$rsdir/endpoints")
    stats "parity process $pp" "$pp"
    reply=$(mc "$pp" 'lru_crawler metadump all\r\n' | head -n 1)
    [ "$reply" = ERROR ] && ok "a parity process serving nobody refuses metadump" ||
        fail "metadump on a parity process: $reply"
    meta "cocytus-proxy in front of RS(2,3)" "$(cat "$rsdir/proxy")"
    stats "cocytus-proxy in front of RS(2,3)" "$(cat "$rsdir/proxy")" --counters \
        --servers "$(awk '$1 == "data" { printf "%s%s", sep, $5; sep = "," }' "$rsdir/endpoints")"

    victim_pid=$(awk '$1 == "data" { print $6; exit }' "$rsdir/endpoints")
    kill -KILL "$victim_pid"
    # The recovery process: a parity process that reports serving_dp and
    # serves keys (its slots moved to it).
    serving() {
        local hp
        for hp in $(awk '$1 == "parity" { print $5 }' "$rsdir/endpoints"); do
            admin "$hp" "cocytus info" 2>/dev/null | grep -q '^STAT serving_dp' || continue
            echo "$hp"
            return 0
        done
        return 1
    }
    rp=""
    for _ in $(seq "$RECOVERY_TENTHS"); do
        rp=$(serving) && break
        sleep 0.1
    done
    if [ -n "$rp" ]; then
        ok "recovery process $rp serves the killed data process's slots"
        meta "recovery process $rp" "$rp" --direct
        stats "recovery process $rp" "$rp" --direct --counters --metadump
    else
        fail "no recovery process took over after SIGKILL to data process $dp"
    fi
else
    fail "RS(2,3) cluster up"
fi
cluster_remove "$rsdir"
rsdir=""

# --- PBR: the primary ---
pbrdir=$(mktemp -d "${TMPDIR:-/tmp}/meta_pbr.XXXXXX")
if cluster_up "$pbrdir" 8 6000 9000 --nodes 1 --scheme pbr:2 --memory 16 --no-proxy; then
    primary=$(awk '$1 == "primary" { print $5; exit }' "$pbrdir/endpoints")
    meta "PBR primary $primary" "$primary" --direct
    stats "PBR primary $primary" "$primary" --direct --counters --metadump
    backup=$(awk '$1 == "backup" { print $5; exit }' "$pbrdir/endpoints")
    stats "PBR backup $backup" "$backup"
    reply=$(mc "$backup" 'lru_crawler metadump all\r\n' | head -n 1)
    [ "$reply" = ERROR ] && ok "a PBR backup refuses metadump" ||
        fail "metadump on a PBR backup: $reply"
else
    fail "PBR cluster up"
fi
finish
