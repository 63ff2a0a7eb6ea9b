#!/usr/bin/env bash
# lease_wait.sh - a read that waits for a lease goes on as soon as the lease
# is back.
#
# A data process serves reads only within a lease from every parity
# process of its ack set (repl/link.h): 0.7 s from the clock a parity
# process last answered with a PONG.  A parity process that is stopped for
# longer than that, but not long enough to be declared dead, leaves the
# data process without a lease: its reads wait.  When the parity process
# runs again it answers the PING waiting in its socket, and that PONG
# (repl/link.c on_lease, the sender's lease callback) wakes the reads.
# Nothing else polls: a read that nothing woke would wait forever.
#
# One node, a coordinator that declares a process dead only after 5 s
# without a heartbeat (COCYTUS_DEAD_AFTER_MS), no proxy, routing off; RS(3,5)
# then PBR(2), whose primary takes a lease from its backups the same way.
# Parity process 1 (backup 1) is stopped (SIGSTOP) for about 1.3 s; 1 s
# into the stop a get is sent to data process 0 (the primary) on a
# connection opened before.  It must not be answered while the peer is
# stopped, must be answered with the stored value once it continues, within
# 0.2 s (1-2 ms here; a PBR primary's reads are also woken by the
# coordinator's messages, about 0.3 s later without the PONG's wake), and be
# counted in lease_waits; and the peer must not have been declared dead.
set -u

script_dir=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$script_dir/lib.sh"
need_built "$server_bin" "$build_dir/cocytus/cocytus-node" "$build_dir/client/cocytus-cli"

export COCYTUS_DEAD_AFTER_MS=5000
dir=""
stopped=""
cleanup() {
    [ -n "$stopped" ] && kill -CONT "$stopped" 2>/dev/null
    exec 4>&- 2>/dev/null
    cluster_remove "$dir"
}
on_exit cleanup

now_ms() { echo $(( $(date +%s%N) / 1000000 )); }

# stop_and_read NAME SERVER PEER_ROLE: the get of k through SERVER waits
# while PEER_ROLE 1 is stopped, and is answered once it continues.
stop_and_read() {
    local name=$1 server=$2 peer_role=$3 line resumed answered took waits
    exec 4<>"/dev/tcp/${server%:*}/${server##*:}" || { fail "$name: cannot connect"; return; }
    stopped=$(group0_pid "$dir" "$peer_role" 1)
    [ -n "$stopped" ] || { fail "$name: no $peer_role 1"; return; }
    kill -STOP "$stopped"
    sleep 1
    printf 'get k\r\n' >&4
    line=""
    if IFS= read -r -t 0.25 line <&4; then
        fail "$name: the get was answered ('${line%$'\r'}') while $peer_role 1 was stopped past the lease"
    else
        ok "$name: the get waits while $peer_role 1 is stopped past the lease"
    fi
    kill -CONT "$stopped"
    stopped=""
    resumed=$(now_ms)
    line=""
    IFS= read -r -t 3 line <&4
    answered=$(now_ms)
    line=${line%$'\r'}
    exec 4>&-
    if [ "$line" = "VALUE k 0 5" ]; then
        took=$((answered - resumed))
        [ "$took" -lt 200 ] && ok "$name: the get was answered ${took} ms after $peer_role 1 continued" ||
            fail "$name: the get was answered only ${took} ms after $peer_role 1 continued"
    else
        fail "$name: the get was answered '${line:-nothing in 3 s}' after $peer_role 1 continued"
    fi
    waits=$(mc "$server" "stats\r\n" | tr -d '\r' | awk '$2 == "lease_waits" { print $3 }')
    [ "${waits:-0}" -ge 1 ] && ok "$name: the read was counted (lease_waits $waits)" ||
        fail "$name: lease_waits: '${waits:-none}'"
    if grep -q " dead" "$dir/coordinator.log"; then
        fail "$name: a process was declared dead: $(grep -m1 " dead" "$dir/coordinator.log")"
    else
        ok "$name: $peer_role 1 was not declared dead"
    fi
}

# with_cluster NAME SERVER_ROLE PEER_ROLE SCHEME
with_cluster() {
    local name=$1 server_role=$2 peer_role=$3 server reply
    dir=$(mktemp -d "${TMPDIR:-/tmp}/lease_wait.XXXXXX")
    cluster_up "$dir" 12 10000 20000 --nodes 1 --scheme "$4" --routing off --no-proxy ||
        { fail "$name: cluster up"; return; }
    # Every peer in the ack set (a PBR backup is left out until its first
    # copy is complete, and its lease with it).
    timeout 30 "$build_dir/client/cocytus-cli" --dir "$dir" wait-healthy --timeout 20 >/dev/null ||
        fail "$name: not healthy 20 s after the start"
    server=$(group0_addr "$dir" "$server_role" 0)
    reply=$(mc "$server" "set k 0 0 5\r\nvalue\r\n")
    if [ "$reply" = STORED ]; then
        ok "$name: k stored through $server_role 0"
        stop_and_read "$name" "$server" "$peer_role"
    else
        fail "$name: set k: $reply"
    fi
    cluster_remove "$dir"
    dir=""
}

with_cluster rs data parity rs:3:5
with_cluster pbr primary backup pbr:2
finish

