#!/usr/bin/env bash
# unix-socket.sh - what a client on the same host saves by talking to a
# server over a Unix socket (-s) instead of loopback TCP: memcached -t 1 and
# a plain cocytus-server, each over TCP and over -s, CPU-us per operation of
# the server and of the client.
#
# Four servers run at once (two of each, one per transport); each round
# runs the same closed-loop load (cocytus-bench --route follow-raw, CONNS
# connections, 1 KB values, zipfian, read ratio MIX) against each of them
# in turn, the order alternating between rounds (A B C D | D C B A | ...).
# Server CPU is utime + stime of the server from /proc/PID/stat over the
# run; client CPU is cocytus-bench's user + system time (bash's time).
# Printed: per round, then medians and the ratio of each Unix figure to
# its own TCP figure, taken within each round.
#
#   ROUNDS=5 RUN_SECS=5 CONNS=4 MIX=0.5 RECORDS=20000 bench/unix-socket.sh
#   COCYTUS_BUILD_DIR=build (default: ./build)
set -u

ROUNDS=${ROUNDS:-5}
RUN_SECS=${RUN_SECS:-5}
CONNS=${CONNS:-4}
MIX=${MIX:-0.5}
RECORDS=${RECORDS:-20000}
BUILD=${COCYTUS_BUILD_DIR:-build}
server=$BUILD/memcached/cocytus-server
bench=$BUILD/bench/cocytus-bench
for b in "$server" "$bench" /usr/bin/memcached; do
    [ -x "$b" ] || { echo "unix-socket.sh: $b is not built or installed" >&2; exit 2; }
done
dir=$(mktemp -d "${TMPDIR:-/tmp}/unix-socket.XXXXXX")
pids=()
cleanup() {
    local p
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
    wait 2>/dev/null
    rm -rf "$dir"
}
trap cleanup EXIT
user=()
[ "$(id -u)" -eq 0 ] && user=(-u root)

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# start NAME COMMAND...: runs it, remembers its pid as pid_NAME.
declare -A pid addr
start() {
    local name=$1
    shift
    "$@" </dev/null >"$dir/$name.log" 2>&1 &
    pid[$name]=$!
    pids+=("$!")
}
p1=$(free_port) p2=$(free_port)
start mc_tcp /usr/bin/memcached -t 1 -m 256 -U 0 -l 127.0.0.1 -p "$p1" "${user[@]}"
addr[mc_tcp]=127.0.0.1:$p1
start mc_unix /usr/bin/memcached -t 1 -m 256 -U 0 -s "$dir/mc.sock" "${user[@]}"
addr[mc_unix]=$dir/mc.sock
start plain_tcp "$server" -m 256 -U 0 -l 127.0.0.1 -p "$p2" "${user[@]}"
addr[plain_tcp]=127.0.0.1:$p2
start plain_unix "$server" -m 256 -U 0 -s "$dir/plain.sock" "${user[@]}"
addr[plain_unix]=$dir/plain.sock
systems=(mc_tcp mc_unix plain_tcp plain_unix)
sleep 1
for s in "${systems[@]}"; do
    "$bench" --route follow-raw -s "${addr[$s]}" -n "$RECORDS" -c "$CONNS" --no-run -q \
        >"$dir/load-$s.out" 2>&1 || { echo "loading $s failed: $(cat "$dir/load-$s.out")" >&2; exit 1; }
done

ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
hz=$(getconf CLK_TCK)

# run SYSTEM ROUND: one load; appends "round system ops server_us client_us".
run() {
    local s=$1 r=$2 t0 t1 ops cl
    t0=$(ticks "${pid[$s]}")
    cl=$( { TIMEFORMAT='%U %S'; time "$bench" --route follow-raw -s "${addr[$s]}" -n "$RECORDS" \
        -c "$CONNS" --no-load -t "$RUN_SECS" -r "$MIX" -q >"$dir/run.out" 2>&1; } 2>&1 )
    t1=$(ticks "${pid[$s]}")
    ops=$(sed -n 's/^phase=run ops=\([0-9]*\) .*/\1/p' "$dir/run.out")
    grep -q "total_errors=0" "$dir/run.out" || { echo "errors in $s: $(cat "$dir/run.out")" >&2; exit 1; }
    awk -v r="$r" -v s="$s" -v ops="$ops" -v d=$((t1 - t0)) -v hz="$hz" -v cl="$cl" 'BEGIN {
        split(cl, c, " ");
        printf "%d %s %d %.2f %.2f\n", r, s, ops, d * 1e6 / hz / ops, (c[1] + c[2]) * 1e6 / ops }' \
        >>"$dir/results"
}

echo "unix-socket.sh: ROUNDS=$ROUNDS RUN_SECS=$RUN_SECS CONNS=$CONNS MIX=$MIX RECORDS=$RECORDS;" \
    "load average $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq "$ROUNDS"); do
    order=("${systems[@]}")
    if [ $((r % 2)) -eq 0 ]; then
        order=()
        for ((i = ${#systems[@]} - 1; i >= 0; i--)); do order+=("${systems[$i]}"); done
    fi
    for s in "${order[@]}"; do run "$s" "$r"; done
    awk -v r="$r" '$1 == r { printf "round %d %-10s %8d ops  server %6.2f  client %6.2f us/op\n", $1, $2, $3, $4, $5 }' \
        "$dir/results"
done
echo "load average at the end $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$dir/results" "$RUN_SECS" <<'EOF'
import sys, statistics as st
rows = [l.split() for l in open(sys.argv[1])]
by = {}
for r, s, ops, sv, cl in rows:
    by.setdefault(s, {})[int(r)] = (int(ops), float(sv), float(cl))
def med(s, i):
    return st.median(v[i] for v in by[s].values())
def spread(s, i):
    xs = [v[i] for v in by[s].values()]
    return (max(xs) - min(xs)) / st.median(xs) * 100
print("| system | ops/s | server CPU-us/op | client CPU-us/op |")
print("|---|---:|---:|---:|")
secs = float(sys.argv[2])
for s in ("mc_tcp", "mc_unix", "plain_tcp", "plain_unix"):
    print("| %s | %.0f | %.2f (spread %.0f%%) | %.2f (spread %.0f%%) |" % (
        s, med(s, 0) / secs, med(s, 1), spread(s, 1), med(s, 2), spread(s, 2)))
print()
print("| Unix / TCP, medians of per-round ratios | server | client | ops |")
print("|---|---:|---:|---:|")
for a, b in (("mc_unix", "mc_tcp"), ("plain_unix", "plain_tcp")):
    rs = sorted(set(by[a]) & set(by[b]))
    r = [[by[a][k][i] / by[b][k][i] for k in rs] for i in (1, 2, 0)]
    print("| %s / %s | %.2fx | %.2fx | %.2fx |" % (a, b, st.median(r[0]), st.median(r[1]), st.median(r[2])))
rs = sorted(set(by["plain_unix"]) & set(by["mc_unix"]))
print()
print("plain_unix / mc_unix server CPU per op, median of per-round ratios: %.2fx" %
      st.median(by["plain_unix"][k][1] / by["mc_unix"][k][1] for k in rs))
EOF
