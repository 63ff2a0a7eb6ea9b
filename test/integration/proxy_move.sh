#!/usr/bin/env bash
# proxy_move.sh - make-check test: slots move under load and the callers of
# cocytus-proxy see no error and no wrong value.
#
# Brings up a cluster with scripts/cluster (coordinator and proxy included:
# the default configuration a user gets), loads records through the proxy
# with cocytus-bench, then runs a verified read/write load through the
# proxy while `cocytus-cli move` moves slots that hold the bench's keys
# from group to group.  Asserts: every move ends ok, the epoch grew by one
# per move at every process, the proxy met MOVED replies, and cocytus-bench
# saw no error and no wrong value: with --verify-latest every connection
# writes only its own keys, and every read of them must return the last
# write it was told succeeded (a write lost in a move reads stale).  Done for a 3-node plain cluster and a 3-node RS(2,3) cluster.
# Every process started is stopped by the trap.
set -u

script_dir=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$script_dir/lib.sh"
bench_bin=${COCYTUS_BENCH:-$build_dir/bench/cocytus-bench}
cli=$build_dir/client/cocytus-cli

RECORDS=400           # keys in the bench's key space: few, so the moved slots are busy
MOVES=4               # slot moves during the run
RUN_SECONDS=8         # verified load while the slots move

need_built "$server_bin" "$bench_bin" "$cli" "$build_dir/cocytus/cocytus-node" \
    "$build_dir/client/cocytus-proxy"

dir=""
bench_pid=""

cleanup() {
    [ -n "$bench_pid" ] && kill -KILL "$bench_pid" 2>/dev/null
    bench_pid=""
    cluster_remove "$dir"
    dir=""
}
on_exit cleanup

# epoch_at HOST:PORT: the epoch of that process's map.
epoch_at() {
    mc "$1" 'config get cluster\r\n' | sed -n 2p
}

# run_scheme SCHEME NODES NPROCS
run_scheme() {
    local scheme=$1 nodes=$2 nprocs=$3 proxy_port
    echo "== $scheme, $nodes nodes: slot moves under a verified load through the proxy"
    dir=$(mktemp -d "${TMPDIR:-/tmp}/proxy-move.XXXXXX")
    # servers and coordinator: 2 ports a process, 2 more; the proxy's port
    # is the kernel's choice.
    proxy_port=$(pick_port)
    if ! cluster_up "$dir" $((2 * nprocs + 2)) 3000 6000 --nodes "$nodes" --scheme "$scheme" \
        --memory 32 --region 32 --proxy-port "$proxy_port"; then
        fail "scripts/cluster up --scheme $scheme --nodes $nodes"
        cleanup
        return
    fi
    local proxy ngroups first_server
    proxy=$(cat "$dir/proxy")
    first_server=$(awk '$1 != "parity" && $1 != "backup" { print $5; exit }' "$dir/endpoints")
    ngroups=$(awk '{ print $2 }' "$dir/endpoints" | sort -u | wc -l)
    local epoch0
    epoch0=$(epoch_at "$first_server")

    # Load phase through the proxy.
    local out
    if ! out=$("$bench_bin" -s "$proxy" -n "$RECORDS" -v 200 -c 2 --no-run --verify -q 2>&1) \
        || ! grep -q '^phase=load .*errors=0' <<<"$out"; then
        fail "$scheme: load through the proxy: $out"
        cleanup
        return
    fi

    # The slots to move: those holding the most of the bench's keys.
    "$bench_bin" -s "$proxy" -n "$RECORDS" -d uniform -v 200 -c 4 -r 0.5 -t "$RUN_SECONDS" \
        --no-load --verify-latest -q >"$dir/bench.out" 2>&1 &
    bench_pid=$!
    local slots moved=0 s g
    slots=$("$bench_bin" --print-keys -n "$RECORDS" | awk '{ print $1 }' | sort -n | uniq -c \
        | sort -k1,1nr -k2,2n | awk '{ print $2 }' | head -n $((2 * MOVES)))
    sleep 1
    for s in $slots; do
        [ "$moved" -ge "$MOVES" ] && break
        g=$(( (moved + 1) % ngroups ))
        if out=$("$cli" --dir "$dir" move "$s" "$g" 2>&1); then
            moved=$((moved + 1))
        else
            # Same owner already: try the next group.
            g=$(( (g + 1) % ngroups ))
            if out=$("$cli" --dir "$dir" move "$s" "$g" 2>&1); then
                moved=$((moved + 1))
            else
                fail "$scheme: move slot $s to group $g: $out"
            fi
        fi
        sleep 0.5
    done
    wait "$bench_pid"
    bench_pid=""
    cat "$dir/bench.out"
    local errors wrong gets sets
    errors=$(sed -n 's/^total_errors=\([0-9]*\).*/\1/p' "$dir/bench.out")
    wrong=$(sed -n 's/.*total_wrong=\([0-9]*\).*/\1/p' "$dir/bench.out")
    gets=$(sed -n 's/^op=get count=\([0-9]*\).*/\1/p' "$dir/bench.out")
    sets=$(sed -n 's/^op=set count=\([0-9]*\).*/\1/p' "$dir/bench.out")
    if [ "$moved" -ne "$MOVES" ]; then
        fail "$scheme: only $moved of $MOVES slot moves succeeded"
    fi
    if [ "${errors:-x}" != 0 ] || [ "${wrong:-x}" != 0 ] || [ "${gets:-0}" -eq 0 ] \
        || [ "${sets:-0}" -eq 0 ]; then
        fail "$scheme: callers of the proxy saw errors=${errors:-?} wrong=${wrong:-?} (gets=${gets:-?} sets=${sets:-?})"
    else
        ok "$scheme: $moved slot moves under load, $gets gets and $sets sets through the proxy, no error, no wrong value"
    fi
    # The proxy did meet the moves (and hid them).
    local redirects
    redirects=$(mc "$proxy" 'stats\r\n' | sed -n 's/^STAT moved_redirects //p')
    if [ "${redirects:-0}" -eq 0 ]; then
        fail "$scheme: the proxy met no MOVED: the moves did not touch the load"
    else
        ok "$scheme: the proxy followed $redirects MOVED replies"
    fi
    # Every serving process has the last epoch (pushed by the coordinator).
    local want=$((epoch0 + moved)) ep e
    for ep in $(awk '{ print $5 }' "$dir/endpoints"); do
        wait_for 30 eval 'e=$(epoch_at "$ep"); [ "$e" = "$want" ]' \
            || fail "$scheme: $ep has epoch ${e:-?}, want $want"
    done
    cleanup
}

run_scheme plain 3 3
run_scheme rs:2:3 3 9

finish
