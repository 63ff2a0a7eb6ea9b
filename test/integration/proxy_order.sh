#!/usr/bin/env bash
# proxy_order.sh - make-check test: a client's pipelined requests for one key
# are applied in the order it sent them, even when the slot map changes
# while the first is held up at a server.
#
# The window: a request A for key k is in flight at the old owner S1 of
# k's slot (here S1 is stopped), the proxy learns meanwhile that the slot
# has moved to S2 (another client's request met a MOVED), and the same
# client pipelines B for k.  Routed by the map alone, B goes to S2 and is
# applied there at once; A, answered MOVED when S1 runs again (or timed
# out and retried), then lands on S2 after B.  The client is told STORED,
# STORED in that order, yet the key keeps A's value: its acknowledged last
# write is lost (for a get, it reads the value from before its own set).
# The proxy must hold B until A has gone to where B goes.
#
# A 3-node plain cluster (scripts/cluster, with its coordinator) and a
# cocytus-proxy started here with one worker (-T 1: both clients share its
# map).  Keys k, r, mk and mr (owner S1) and q (owner S3) are written
# through the proxy; then `cocytus-cli move` moves all their slots to S2
# (the proxy's map is now old), and S1 is stopped (SIGSTOP).
#   connection 1 sends "set k = a1"       connection 2 sends "set r = a2"
#   connection 3 sends "ms mk = m1"       connection 4 sends "ms mr = n1"
#   (all four wait at the stopped S1)
#   another connection gets q: S3 answers MOVED, the proxy fetches the map
#   connection 1 sends "set k = b1"       connection 2 sends "get r"
#   connection 3 sends "ms mk = m2"       connection 4 sends "mg mr v"
# S1 is continued a moment later.  Asserts: connection 1 reads STORED
# twice and then k is b1 (through the proxy and at S2); connection 2 reads
# STORED and then the value a2 (its own write); the same with the meta
# commands (classic and meta requests take different server connections
# and code paths in the proxy: px_route.c, px_meta.c); the proxy's order_waits
# counted the four holds (so the window was really met: B was sent once the
# proxy's map had the cluster's epoch).  Every process is stopped by the
# trap.
set -u

script_dir=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$script_dir/lib.sh"
proxy_bin=${COCYTUS_PROXY:-$build_dir/client/cocytus-proxy}
bench_bin=${COCYTUS_BENCH:-$build_dir/bench/cocytus-bench}
cli=$build_dir/client/cocytus-cli

need_built "$server_bin" "$proxy_bin" "$bench_bin" "$cli" "$build_dir/cocytus/cocytus-node"

dir=""
proxy_pid=""
stopped_pid=""

cleanup() {
    [ -n "$stopped_pid" ] && kill -CONT "$stopped_pid" 2>/dev/null
    stopped_pid=""
    exec 3<&- 3>&- 4<&- 4>&- 5<&- 5>&- 6<&- 6>&- 2>/dev/null
    stop_pid "$proxy_pid"
    proxy_pid=""
    cluster_remove "$dir"
    dir=""
}
on_exit cleanup

# read_reply FD: one reply line (without \r) from FD, or "(none)" after 5 s.
read_reply() {
    local line
    if IFS= read -r -t 5 line <&"$1"; then
        echo "${line%$'\r'}"
    else
        echo "(none)"
    fi
}

# read_value FD: the value of a one-key get reply on FD ("VALUE ..." line,
# data, END), or what came instead.
read_value() {
    local head data end
    head=$(read_reply "$1")
    case $head in
        VALUE*) ;;
        *) echo "$head"; return ;;
    esac
    data=$(read_reply "$1")
    end=$(read_reply "$1")
    [ "$end" = END ] || { echo "$head / $data / $end"; return; }
    echo "$data"
}

dir=$(mktemp -d "${TMPDIR:-/tmp}/proxy-order.XXXXXX")
if ! cluster_up "$dir" 8 3000 6000 --nodes 3 --scheme plain --memory 32 --no-proxy; then
    fail "scripts/cluster up --scheme plain --nodes 3"
    finish
fi
key_owners "$dir" 400 || { fail "key owners: $(tail -3 "$dir/map.txt")"; finish; }
s1=$(awk '$1 == "plain" && $2 == 1 { print $5 }' "$dir/endpoints")
s1_pid=$(awk '$1 == "plain" && $2 == 1 { print $6 }' "$dir/endpoints")
s2=$(awk '$1 == "plain" && $2 == 2 { print $5 }' "$dir/endpoints")
s3=$(awk '$1 == "plain" && $2 == 0 { print $5 }' "$dir/endpoints")
k=$(awk -v o="$s1" '$2 == o { print $1 }' "$dir/owners" | sed -n 1p)
r=$(awk -v o="$s1" '$2 == o { print $1 }' "$dir/owners" | sed -n 2p)
mk=$(awk -v o="$s1" '$2 == o { print $1 }' "$dir/owners" | sed -n 3p)
mr=$(awk -v o="$s1" '$2 == o { print $1 }' "$dir/owners" | sed -n 4p)
q=$(awk -v o="$s3" '$2 == o { print $1 }' "$dir/owners" | sed -n 1p)
slot_of() { awk -v key="$1" '$2 == key { print $1; exit }' "$dir/all.slots"; }
if [ -z "$k" ] || [ -z "$r" ] || [ -z "$mk" ] || [ -z "$mr" ] || [ -z "$q" ] || [ -z "$s1_pid" ]; then
    fail "no keys for the test (k=$k r=$r mk=$mk mr=$mr q=$q, S1 $s1 pid $s1_pid)"
    finish
fi
echo "S1 $s1 (pid $s1_pid), S2 $s2, S3 $s3; k=$k (slot $(slot_of "$k")), r=$r (slot $(slot_of "$r")), q=$q (slot $(slot_of "$q"))"

if ! start_proxy "$dir/order-proxy.log" -s "$s3" -T 1 -t 3000 -D 10000; then
    fail "cocytus-proxy did not start: $(tail -3 "$dir/order-proxy.log")"
    finish
fi
proxy=127.0.0.1:$proxy_port

for kv in "$k k0" "$r r0" "$mk m0" "$mr n0" "$q q0"; do
    set -- $kv
    got=$(mc "$proxy" "set $1 0 0 2\r\n$2\r\n")
    [ "$got" = STORED ] || { fail "set $1 through the proxy: $got"; finish; }
done

# A move is refused while a process has not yet installed the previous
# move's map ("... is at epoch E, not the coordinator's E+1 yet"): try
# again for up to 10 s.
for key in "$k" "$r" "$mk" "$mr" "$q"; do
    moved=0
    for _ in $(seq 100); do
        if out=$("$cli" --dir "$dir" move "$(slot_of "$key")" 2 2>&1); then
            moved=1
            break
        fi
        case $out in *"not the coordinator's"*yet*) sleep 0.1 ;; *) break ;; esac
    done
    if [ "$moved" != 1 ]; then
        fail "move the slot of $key to group 2: $out"
        finish
    fi
done
echo "moved the slots of k, r, mk, mr and q to S2; the proxy's map is now old"

kill -STOP "$s1_pid"
stopped_pid=$s1_pid
exec 3<>"/dev/tcp/${proxy%:*}/${proxy##*:}" 4<>"/dev/tcp/${proxy%:*}/${proxy##*:}"
exec 5<>"/dev/tcp/${proxy%:*}/${proxy##*:}" 6<>"/dev/tcp/${proxy%:*}/${proxy##*:}"
printf 'set %s 0 0 2\r\na1\r\n' "$k" >&3
printf 'set %s 0 0 2\r\na2\r\n' "$r" >&4
printf 'ms %s 2\r\nm1\r\n' "$mk" >&5
printf 'ms %s 2\r\nn1\r\n' "$mr" >&6
sleep 0.2
got=$(mc "$proxy" "get $q\r\n" | sed -n 2p)
[ "$got" = q0 ] || fail "get q through the proxy (S3 answers MOVED): $got"
# the map fetch that MOVED started: wait until the proxy's worker has the new map
epoch=$(mc "$s2" 'config get cluster\r\n' | sed -n 2p)
proxy_epoch=""
for _ in $(seq 50); do
    proxy_epoch=$(mc "$proxy" 'stats\r\n' | sed -n 's/^STAT cluster_epoch //p')
    [ "$proxy_epoch" = "$epoch" ] && break
    sleep 0.05
done
[ "$proxy_epoch" = "$epoch" ] || fail "the proxy's map is at epoch '$proxy_epoch', the cluster's at '$epoch'"
printf 'set %s 0 0 2\r\nb1\r\n' "$k" >&3
printf 'get %s\r\n' "$r" >&4
printf 'ms %s 2\r\nm2\r\n' "$mk" >&5
printf 'mg %s v\r\n' "$mr" >&6
sleep 0.5                       # a B routed by the map alone is applied at S2 by now
kill -CONT "$s1_pid"
stopped_pid=""

a1=$(read_reply 3)
b1=$(read_reply 3)
a2=$(read_reply 4)
v2=$(read_value 4)
m1=$(read_reply 5)
m2=$(read_reply 5)
n1=$(read_reply 6)
nv=$(read_reply 6)
[ "$nv" = "VA 2" ] && nv=$(read_reply 6)
exec 3<&- 3>&- 4<&- 4>&- 5<&- 5>&- 6<&- 6>&-
if [ "$a1 $b1" = "STORED STORED" ]; then
    ok "connection 1: set k a1, set k b1 pipelined: STORED, STORED"
else
    fail "connection 1: set k a1, set k b1 pipelined: '$a1', '$b1'"
fi
if [ "$a2" = STORED ] && [ "$v2" = a2 ]; then
    ok "connection 2: set r a2, get r pipelined: STORED, then its own write a2"
else
    fail "connection 2: set r a2, get r pipelined: '$a2', then '$v2' (want STORED, a2)"
fi
waits=$(mc "$proxy" 'stats\r\n' | sed -n 's/^STAT order_waits //p')
if [ "${waits:-0}" -ge 4 ]; then
    ok "the proxy held the later requests (order_waits $waits)"
else
    fail "order_waits is '${waits:-?}': the later requests were not held (the window was missed?)"
fi
if [ "$m1 $m2" = "HD HD" ] && [ "$n1" = HD ] && [ "$nv" = n1 ]; then
    ok "meta: ms mk m1, ms mk m2: HD, HD; ms mr n1, mg mr: HD, then n1"
else
    fail "meta: ms mk m1, ms mk m2: '$m1', '$m2'; ms mr n1, mg mr: '$n1', then '$nv' (want n1)"
fi
mv=$(mc "$proxy" "get $mk\r\n" | sed -n 2p)
[ "$mv" = m2 ] || fail "meta: mk holds '$mv', not the last acknowledged write m2"
through=$(mc "$proxy" "get $k\r\n" | sed -n 2p)
at_s2=$(mc "$s2" "get $k\r\n" | sed -n 2p)
if [ "$through" = b1 ] && [ "$at_s2" = b1 ]; then
    ok "k holds the last acknowledged write b1 (through the proxy and at S2)"
else
    fail "k holds '$through' through the proxy and '$at_s2' at S2, not the last acknowledged write b1"
fi
finish
