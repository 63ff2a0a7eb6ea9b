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

case "$0" in
    */*) script_dir=$(cd "${0%/*}" && pwd) ;;
    *) script_dir=$(pwd) ;;
esac
cluster_script=$script_dir/../../scripts/cluster
server_bin=${COCYTUS_SERVER:-$script_dir/../../memcached/cocytus-server}
build_dir=$(cd "$(dirname "$server_bin")/.." && pwd)
bench_bin=${COCYTUS_BENCH:-$build_dir/bench/cocytus-bench}
cli=$build_dir/client/cocytus-cli
export COCYTUS_BUILD_DIR=$build_dir

RECORDS=400           # keys in the bench's key space: few, so the moved slots are busy
MOVES=4               # slot moves during the run
RUN_SECONDS=8         # verified load while the slots move

for b in "$server_bin" "$bench_bin" "$cli" "$build_dir/cocytus/cocytus-node" \
         "$build_dir/client/cocytus-proxy"; do
    [ -x "$b" ] || { echo "FAIL: $b not built"; exit 1; }
done

dir=""
bench_pid=""
failures=0

cleanup() {
    [ -n "$bench_pid" ] && kill -KILL "$bench_pid" 2>/dev/null
    bench_pid=""
    if [ -n "$dir" ]; then
        bash "$cluster_script" down --dir "$dir" >/dev/null 2>&1
        rm -rf "$dir"
        dir=""
    fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

fail() {
    echo "FAIL: $*"
    failures=$((failures + 1))
}

port_busy() {
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null \
        || ss -Htan 2>/dev/null | awk '{print $4}' | grep -q ":$1\$"
}

# A base port whose run of N ports (servers, coordinator) and the proxy
# port after them look free.
pick_base_port() {
    local n=$1 base p busy
    for _ in $(seq 50); do
        base=$((34000 + 2 * (RANDOM % 4000)))
        busy=0
        for ((p = base; p <= base + n; p++)); do
            if port_busy "$p"; then
                busy=1
                break
            fi
        done
        [ "$busy" -eq 0 ] && { echo "$base"; return 0; }
    done
    return 1
}

# mc HOST:PORT REQUEST: one request, prints the reply lines up to END.
mc() {
    local addr=$1 request=$2 line
    exec 3<>"/dev/tcp/${addr%:*}/${addr##*:}" || return 1
    printf '%b' "$request" >&3
    while IFS= read -r -t 2 line <&3; do
        line=${line%$'\r'}
        echo "$line"
        case "$line" in END | ERROR* | SERVER_ERROR*) break ;; esac
    done
    exec 3>&-
}

# epoch_at HOST:PORT: the epoch of that process's map.
epoch_at() {
    mc "$1" 'config get cluster\r\n' | sed -n 2p
}

# run_scheme SCHEME NODES NPROCS
run_scheme() {
    local scheme=$1 nodes=$2 nprocs=$3 base proxy_port up=0
    echo "== $scheme, $nodes nodes: slot moves under a verified load through the proxy"
    dir=$(mktemp -d "${TMPDIR:-/tmp}/proxy-move.XXXXXX")
    for _ in 1 2 3; do
        base=$(pick_base_port $((2 * nprocs + 2))) || continue
        proxy_port=$((base + 2 * nprocs + 2))
        if bash "$cluster_script" up --nodes "$nodes" --scheme "$scheme" --memory 32 --region 32 \
            --dir "$dir" --base-port "$base" --proxy-port "$proxy_port" >"$dir/up.log" 2>&1; then
            up=1
            break
        fi
        bash "$cluster_script" down --dir "$dir" >/dev/null 2>&1
    done
    if [ "$up" -ne 1 ]; then
        fail "scripts/cluster up --scheme $scheme --nodes $nodes"
        cat "$dir/up.log"
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
        echo "ok: $scheme: $moved slot moves under load, $gets gets and $sets sets through the proxy, no error, no wrong value"
    fi
    # The proxy did meet the moves (and hid them).
    local redirects
    redirects=$(mc "$proxy" 'stats\r\n' | sed -n 's/^STAT moved_redirects //p')
    if [ "${redirects:-0}" -eq 0 ]; then
        fail "$scheme: the proxy met no MOVED: the moves did not touch the load"
    else
        echo "ok: $scheme: the proxy followed $redirects MOVED replies"
    fi
    # Every serving process has the last epoch (pushed by the coordinator).
    local want=$((epoch0 + moved)) ep e
    for ep in $(awk '{ print $5 }' "$dir/endpoints"); do
        for _ in $(seq 30); do
            e=$(epoch_at "$ep")
            [ "$e" = "$want" ] && break
            sleep 0.1
        done
        [ "$e" = "$want" ] || fail "$scheme: $ep has epoch ${e:-?}, want $want"
    done
    cleanup
}

run_scheme plain 3 3
run_scheme rs:2:3 3 9

[ "$failures" -eq 0 ]
