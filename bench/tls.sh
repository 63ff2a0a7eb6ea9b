#!/usr/bin/env bash
# tls.sh - what TLS (-Z) costs a server per operation, against memcached
# -Z as the anchor: memcached -t 1 and a plain cocytus-server, each over
# plain TCP and over TLS, CPU-us per operation of the server and of the
# client.
#
# The client is memtier_benchmark (RedisLabs), which speaks memcached's
# text protocol over TLS; it is not a Debian package: build it from its
# source (./configure && make, with libssl-dev installed) and set MEMTIER.
# Four servers run at once; each round runs the same closed-loop load
# (CONNS connections of one thread, REQS requests each, SIZE-byte values,
# RATIO sets:gets over KEYS keys loaded before) against each in turn, the
# order alternating between rounds.  Server CPU is utime + stime from
# /proc/PID/stat over the run, client CPU memtier's user + system time.
# Printed: per round, then medians, TLS / TCP for each server and
# plain / memcached for each transport, ratios taken within each round.
# With PROXY=1, also cocytus-proxy in front of the plain TCP server, once
# in the clear and once with --tls-cert (px_tcp, px_tls): the "server"
# figure is then the proxy's CPU alone.
#
#   MEMTIER=/path/to/memtier_benchmark ROUNDS=5 REQS=20000 CONNS=4 SIZE=1024 \
#       RATIO=1:1 PROXY=0 bench/tls.sh
#   COCYTUS_BUILD_DIR=build (default: ./build)
set -u

ROUNDS=${ROUNDS:-5}
REQS=${REQS:-20000}
CONNS=${CONNS:-4}
SIZE=${SIZE:-1024}
RATIO=${RATIO:-1:1}
KEYS=${KEYS:-10000}
PROXY=${PROXY:-0}
BUILD=${COCYTUS_BUILD_DIR:-build}
MEMTIER=${MEMTIER:-$(command -v memtier_benchmark)}
server=$BUILD/memcached/cocytus-server
for b in "$server" /usr/bin/memcached "$MEMTIER"; do
    [ -n "$b" ] && [ -x "$b" ] || {
        echo "tls.sh: ${b:-memtier_benchmark} is not built or installed (set MEMTIER)" >&2; exit 2; }
done
command -v openssl >/dev/null || { echo "tls.sh: the openssl tool is needed" >&2; exit 2; }
dir=$(mktemp -d "${TMPDIR:-/tmp}/tls-bench.XXXXXX")
pids=()
cleanup() {
    local p
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
    wait 2>/dev/null
    rm -rf "$dir"
}
trap cleanup EXIT
mc_user=() cy_user=()
[ "$(id -u)" -eq 0 ] && mc_user=(-u nobody) cy_user=(-u root)
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout "$dir/key.pem" \
    -out "$dir/cert.pem" -days 2 -subj /CN=bench -addext subjectAltName=IP:127.0.0.1 2>/dev/null ||
    { echo "tls.sh: openssl could not make a certificate" >&2; exit 1; }
chmod 755 "$dir"
chmod 644 "$dir"/*.pem
tls=(-Z -o "ssl_chain_cert=$dir/cert.pem,ssl_key=$dir/key.pem")

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

declare -A pid port
start() {
    local name=$1
    shift
    port[$name]=$(free_port)
    "$@" -p "${port[$name]}" </dev/null >"$dir/$name.log" 2>&1 &
    pid[$name]=$!
    pids+=("$!")
}
start mc_tcp /usr/bin/memcached -t 1 -m 256 -U 0 -l 127.0.0.1 "${mc_user[@]}"
start mc_tls /usr/bin/memcached -t 1 -m 256 -U 0 -l 127.0.0.1 "${mc_user[@]}" "${tls[@]}"
start plain_tcp "$server" -m 256 -U 0 -l 127.0.0.1 "${cy_user[@]}"
start plain_tls "$server" -m 256 -U 0 -l 127.0.0.1 "${cy_user[@]}" "${tls[@]}"
systems=(mc_tcp mc_tls plain_tcp plain_tls)
sleep 1
if [ "$PROXY" = 1 ]; then
    proxy=$BUILD/client/cocytus-proxy
    [ -x "$proxy" ] || { echo "tls.sh: $proxy is not built" >&2; exit 2; }
    seed=127.0.0.1:${port[plain_tcp]}
    start px_tcp "$proxy" --seeds "$seed" -l 127.0.0.1 -T 1
    start px_tls "$proxy" --seeds "$seed" -l 127.0.0.1 -T 1 --tls-cert "$dir/cert.pem" \
        --tls-key "$dir/key.pem"
    systems+=(px_tcp px_tls)
    sleep 1
fi

# memtier SYSTEM ARGS...: one memtier run against SYSTEM, over TLS if it is one.
memtier() {
    local s=$1
    shift
    local t=()
    [[ $s == *_tls ]] && t=(--tls --tls-skip-verify)
    "$MEMTIER" -s 127.0.0.1 -p "${port[$s]}" -P memcache_text "${t[@]}" -t 1 -d "$SIZE" \
        --key-maximum "$KEYS" --hide-histogram "$@"
}
for s in "${systems[@]}"; do
    memtier "$s" -c 1 --ratio 1:0 --key-pattern P:P --requests allkeys >"$dir/load-$s.out" 2>&1 ||
        { echo "tls.sh: loading $s failed: $(tail -3 "$dir/load-$s.out")" >&2; exit 1; }
done

ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
hz=$(getconf CLK_TCK)

# run SYSTEM ROUND: one load; appends "round system ops/s server_us client_us".
run() {
    local s=$1 r=$2 t0 t1 cl ops=$((CONNS * REQS)) rate
    t0=$(ticks "${pid[$s]}")
    cl=$( { TIMEFORMAT='%U %S'; time memtier "$s" -c "$CONNS" -n "$REQS" --ratio "$RATIO" \
        --key-pattern R:R >"$dir/run.out" 2>&1; } 2>&1 )
    t1=$(ticks "${pid[$s]}")
    rate=$(awk '$1 == "Totals" { print $2; exit }' "$dir/run.out")
    [ -n "$rate" ] || { echo "tls.sh: no result from $s: $(tail -3 "$dir/run.out")" >&2; exit 1; }
    awk -v r="$r" -v s="$s" -v ops="$ops" -v rate="$rate" -v d=$((t1 - t0)) -v hz="$hz" \
        -v cl="$cl" 'BEGIN {
        split(cl, c, " ");
        printf "%d %s %.0f %.2f %.2f\n", r, s, rate, d * 1e6 / hz / ops, (c[1] + c[2]) * 1e6 / ops }' \
        >>"$dir/results"
}

echo "tls.sh: ROUNDS=$ROUNDS REQS=$REQS CONNS=$CONNS SIZE=$SIZE RATIO=$RATIO KEYS=$KEYS;" \
    "memtier $("$MEMTIER" --version 2>&1 | head -1); load average $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq "$ROUNDS"); do
    order=("${systems[@]}")
    if [ $((r % 2)) -eq 0 ]; then
        order=()
        for ((i = ${#systems[@]} - 1; i >= 0; i--)); do order+=("${systems[$i]}"); done
    fi
    for s in "${order[@]}"; do run "$s" "$r"; done
    awk -v r="$r" '$1 == r { printf "round %d %-10s %8d ops/s  server %6.2f  client %6.2f us/op\n", $1, $2, $3, $4, $5 }' \
        "$dir/results"
done
echo "load average at the end $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$dir/results" <<'EOF'
import sys, statistics as st
rows = [l.split() for l in open(sys.argv[1])]
by = {}
for r, s, rate, sv, cl in rows:
    by.setdefault(s, {})[int(r)] = (float(rate), float(sv), float(cl))
def med(s, i):
    return st.median(v[i] for v in by[s].values())
def spread(s, i):
    xs = [v[i] for v in by[s].values()]
    return (max(xs) - min(xs)) / st.median(xs) * 100
print("| system | ops/s | server CPU-us/op | client CPU-us/op |")
print("|---|---:|---:|---:|")
for s in [x for x in ("mc_tcp", "mc_tls", "plain_tcp", "plain_tls", "px_tcp", "px_tls") if x in by]:
    print("| %s | %.0f | %.2f (spread %.0f%%) | %.2f (spread %.0f%%) |" % (
        s, med(s, 0), med(s, 1), spread(s, 1), med(s, 2), spread(s, 2)))
print()
print("| medians of per-round ratios | server | client | ops/s |")
print("|---|---:|---:|---:|")
for a, b in (("mc_tls", "mc_tcp"), ("plain_tls", "plain_tcp"), ("plain_tcp", "mc_tcp"),
             ("plain_tls", "mc_tls"), ("px_tls", "px_tcp")):
    if a not in by or b not in by:
        continue
    rs = sorted(set(by[a]) & set(by[b]))
    r = [[by[a][k][i] / by[b][k][i] for k in rs] for i in (1, 2, 0)]
    print("| %s / %s | %.2fx | %.2fx | %.2fx |" % (a, b, st.median(r[0]), st.median(r[1]), st.median(r[2])))
EOF
