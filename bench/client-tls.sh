#!/usr/bin/env bash
# client-tls.sh - what TLS on a cluster's client ports (the cluster file's
# client_tls line) costs, against the same cluster with its client ports
# in the clear as the anchor.  Two RS(3,5) clusters of one node run side by
# side (scripts/cluster up, each with its coordinator and cocytus-proxy;
# the second with --client-tls-*, so its proxy dials the servers over TLS
# and every server speaks it).  Each round runs the same closed-loop load
# (cocytus-bench through the proxy: CONNS connections, READ_RATIO gets,
# SIZE-byte values over RECORDS keys loaded before, SECS seconds) against
# each, the order alternating between rounds.  CPU is utime + stime from
# /proc/PID/stat over the run: the servers' (the five group processes)
# and the proxy's.  Printed: per round ops/s and CPU-us per operation,
# then medians and the TLS / clear ratios taken within each round.
#
#   ROUNDS=4 SECS=6 CONNS=4 SIZE=1024 READ_RATIO=0.5 bench/client-tls.sh
#   COCYTUS_BUILD_DIR=build (default: ./build)
set -u

ROUNDS=${ROUNDS:-4}
SECS=${SECS:-6}
CONNS=${CONNS:-4}
SIZE=${SIZE:-1024}
READ_RATIO=${READ_RATIO:-0.5}
RECORDS=${RECORDS:-20000}
BUILD=${COCYTUS_BUILD_DIR:-build}
top=$(cd "$(dirname "$0")/.." && pwd)
bench=$BUILD/bench/cocytus-bench
[ -x "$bench" ] || { echo "client-tls.sh: $bench is not built" >&2; exit 2; }
command -v openssl >/dev/null || { echo "client-tls.sh: the openssl tool is needed" >&2; exit 2; }
command -v python3 >/dev/null || { echo "client-tls.sh: python3 is needed (free ports)" >&2; exit 2; }
dir=$(mktemp -d "${TMPDIR:-/tmp}/client-tls-bench.XXXXXX")
cleanup() {
    local s
    for s in clear tls; do
        COCYTUS_BUILD_DIR=$BUILD bash "$top/scripts/cluster" down --dir "$dir/$s" >/dev/null 2>&1
    done
    rm -rf "$dir"
}
trap cleanup EXIT
{ bash "$top/scripts/certs" ca "$dir" && bash "$top/scripts/certs" signed "$dir" node IP:127.0.0.1; } ||
    { echo "client-tls.sh: could not make certificates" >&2; exit 1; }

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
up() {  # up NAME [extra]: ports from the first free run (scripts/cluster)
    local name=$1
    shift
    COCYTUS_BUILD_DIR=$BUILD bash "$top/scripts/cluster" up --dir "$dir/$name" --nodes 1 \
        --scheme rs:3:5 --proxy-port "$(free_port)" "$@" >"$dir/$name.up" 2>&1 ||
        { echo "client-tls.sh: cluster $name did not start:"; tail -5 "$dir/$name.up"; exit 1; } >&2
}
up clear
up tls --client-tls-cert "$dir/node.pem" --client-tls-key "$dir/node.key" \
    --client-tls-ca "$dir/ca.pem"

pids_of() {  # the group's five processes, then the proxy
    awk '{ printf "%s ", $6 }' "$dir/$1/endpoints"
    cat "$dir/$1/proxy.pid"
}
ticks() {  # ticks PID...: utime + stime of each, one line
    local p
    for p in "$@"; do
        awk '{ printf "%d ", $14 + $15 }' "/proc/$p/stat"
    done
    echo
}
hz=$(getconf CLK_TCK)
for s in clear tls; do
    "$bench" -s "$(cat "$dir/$s/proxy")" -n "$RECORDS" -v "$SIZE" --no-run -q >"$dir/$s.load" 2>&1 ||
        { echo "client-tls.sh: load of $s failed: $(tail -2 "$dir/$s.load")" >&2; exit 1; }
done

echo "RS(3,5), 1 node, through cocytus-proxy: $CONNS connections, gets $READ_RATIO, $SIZE-byte values, $RECORDS keys, $SECS s per run"
echo "round system ops_per_s server_us_per_op proxy_us_per_op"
results=$dir/results
: >"$results"
for ((r = 1; r <= ROUNDS; r++)); do
    order="clear tls"
    [ $((r % 2)) -eq 0 ] && order="tls clear"
    for s in $order; do
        read -r -a pids <<<"$(pids_of "$s")"
        t0=$(ticks "${pids[@]}")
        out=$("$bench" -s "$(cat "$dir/$s/proxy")" -n "$RECORDS" -v "$SIZE" --no-load -r "$READ_RATIO" \
            -c "$CONNS" -t "$SECS" -q 2>&1)
        t1=$(ticks "${pids[@]}")
        ops=$(echo "$out" | awk -F'[ =]' '/^phase=run/ { for (i = 1; i < NF; i++) if ($i == "ops") print $(i + 1) }')
        errs=$(echo "$out" | awk -F'[ =]' '/^total_errors=/ { print $2 }')
        [ -n "$ops" ] && [ "$ops" -gt 0 ] && [ "${errs:-1}" = 0 ] ||
            { echo "client-tls.sh: round $r $s: $(echo "$out" | tail -2)" >&2; exit 1; }
        echo "$t0" "$t1" | awk -v n="${#pids[@]}" -v hz="$hz" -v ops="$ops" -v secs="$SECS" -v r="$r" -v s="$s" '{
            srv = 0; for (i = 1; i < n; i++) srv += $(n + i) - $i
            px = $(2 * n) - $n
            printf "%d %s %.0f %.2f %.2f\n", r, s, ops / secs, srv / hz * 1e6 / ops, px / hz * 1e6 / ops }' |
            tee -a "$results"
    done
done
echo "medians (ratios taken within each round):"
awk '{ key = $1; v[$2, key, "ops"] = $3; v[$2, key, "srv"] = $4; v[$2, key, "px"] = $5; rounds[key] = 1 }
     END {
       n = 0
       for (k in rounds) {
         n++
         ro[n] = v["tls", k, "ops"] / v["clear", k, "ops"]
         rs[n] = v["tls", k, "srv"] / v["clear", k, "srv"]
         rp[n] = v["tls", k, "px"] / v["clear", k, "px"]
         for (sys_i = 0; sys_i < 2; sys_i++) {
           s = sys_i ? "tls" : "clear"
           o[s, n] = v[s, k, "ops"]; c[s, n] = v[s, k, "srv"]; p[s, n] = v[s, k, "px"]
         }
       }
       printf "clear: %.0f ops/s, server %.2f us/op, proxy %.2f us/op\n", med(o, "clear", n), med(c, "clear", n), med(p, "clear", n)
       printf "tls:   %.0f ops/s, server %.2f us/op, proxy %.2f us/op\n", med(o, "tls", n), med(c, "tls", n), med(p, "tls", n)
       printf "tls / clear: ops/s %.2fx, server CPU per op %.2fx, proxy CPU per op %.2fx\n", med1(ro, n), med1(rs, n), med1(rp, n)
     }
     function med(a, s, n,   i, x, t) { for (i = 1; i <= n; i++) x[i] = a[s, i]; return med1(x, n) }
     function med1(x, n,   i, j, t) {
       for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (x[j] < x[i]) { t = x[i]; x[i] = x[j]; x[j] = t }
       return n % 2 ? x[(n + 1) / 2] : (x[n / 2] + x[n / 2 + 1]) / 2
     }' "$results"
