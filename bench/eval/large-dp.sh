#!/usr/bin/env bash
# large-dp.sh - a data process with about a million keys killed under a
# verified load: how long writes stop while it is taken over, copied back
# to its restarted process and its recovery process rebuilt as parity
# (docs/recovery.md, "A large data process under load").
#
# One node, RS(3,5), one group, --memory 512 --region 256, a coordinator,
# no proxy.  RECORDS keys of 32 bytes are loaded (about 1.1 million per
# data process with the default 3,000,000); then cocytus-bench runs a
# verified load (READ_RATIO gets, 4 connections, INTERVAL_MS time series)
# for DURATION s, and data process 1 is SIGKILLed at KILL_AT s.  Its node
# starts it again at once, so the run covers the takeover, the copy back,
# the handoff and the parity rebuild.  Each build given is run in turn,
# ROUNDS times (alternating: the machine is shared and noisy).
#
# usage: bench/eval/large-dp.sh [BUILD_DIR...]      (default: this tree's build)
#   ROUNDS=1 RECORDS=3000000 DURATION=16 KILL_AT=4 READ_RATIO=0.95 INTERVAL_MS=100
#   OUT=/tmp/large-dp: the runs' directories (time series, logs, bench output)
# Prints one line per run: the time without service after the kill (the
# intervals of INTERVAL_MS in which no operation completed, in ms), the
# worst interval's set p99, the intervals whose set p99 was 100 ms or
# more, the fewest operations in an interval against the median before it,
# the load's totals (errors, wrong values, misses), and from the logs the
# takeover, migration and rebuild times and each copy's "records committed
# meanwhile" (builds older than 2026-12-04 log none).
set -u

top=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
ROUNDS=${ROUNDS:-1}
RECORDS=${RECORDS:-3000000}
DURATION=${DURATION:-16}
KILL_AT=${KILL_AT:-4}
READ_RATIO=${READ_RATIO:-0.95}
INTERVAL_MS=${INTERVAL_MS:-100}
OUT=${OUT:-/tmp/large-dp}
builds=("$@")
[ ${#builds[@]} -gt 0 ] || builds=("$top/build")

running=""
cleanup() {
    [ -n "$running" ] && COCYTUS_BUILD_DIR=$running_build bash "$top/scripts/cluster" down \
        --dir "$running" >/dev/null 2>&1
}
trap cleanup EXIT

# run BUILD DIR: one run; prints its line.
run() {
    local b=$1 d=$2 port pid bp
    rm -rf "$d"
    mkdir -p "$d"
    running=$d running_build=$b
    COCYTUS_BUILD_DIR=$b bash "$top/scripts/cluster" up --dir "$d" --nodes 1 --scheme rs:3:5 \
        --memory 512 --region 256 --no-proxy >"$d/up.log" 2>&1 || { echo "cluster up failed: $d"; return 1; }
    port=$(awk '$1 == "data" && $3 == 0 { print $5 }' "$d/endpoints")
    "$b/bench/cocytus-bench" -s "$port" -n "$RECORDS" -v 32 -c 4 --depth 32 --no-run -q \
        >"$d/load.out" 2>&1
    "$b/bench/cocytus-bench" -s "$port" -n "$RECORDS" -v 32 -c 4 --no-load -r "$READ_RATIO" \
        -t "$DURATION" -i "$INTERVAL_MS" --verify --csv "$d/run.csv" >"$d/bench.out" 2>&1 &
    bp=$!
    sleep "$KILL_AT"
    pid=$(awk '$1 == "data" && $3 == 1 { print $6 }' "$d/endpoints")
    kill -KILL "$pid"
    wait "$bp"
    # Let the repair finish if the load ended first (at most 30 s).
    for _ in $(seq 300); do
        grep -q "is at full redundancy again" "$d/coordinator.log" && break
        sleep 0.1
    done
    COCYTUS_BUILD_DIR=$b bash "$top/scripts/cluster" down --dir "$d" >/dev/null 2>&1
    running=""
    local stats median totals events copies
    median=$(awk -F, -v k="$KILL_AT" 'NR > 1 && $1 <= k { print $2 }' "$d/run.csv" | sort -n |
        awk '{ v[NR] = $1 } END { print NR ? v[int((NR + 1) / 2)] : 0 }')
    stats=$(awk -F, -v k="$KILL_AT" -v med="$median" -v ms="$INTERVAL_MS" 'NR > 1 && $1 > k {
            if ($7 > worst) worst = $7; if ($7 >= 100000) slow++;
            if ($2 == 0) idle++;
            if (min == "" || $2 + 0 < min + 0) min = $2
        } END {
            printf "no_op_ms=%d worst_set_p99_ms=%.1f slow_intervals=%d min_ops=%d median_ops_before=%d",
                   idle * ms, worst / 1000, slow, min, med }' "$d/run.csv")
    totals=$(grep -o "total_errors=[0-9]* total_wrong=[0-9]*" "$d/bench.out")
    totals="$totals $(grep -o "misses=[0-9]*" "$d/bench.out" | head -1)"
    events="served_ms=$(sed -n 's/.*, \([0-9]*\) ms after its death was seen.*/\1/p' "$d/coordinator.log" | head -1)"
    events="$events migration_ms=$(sed -n 's/.*migration took \([0-9.]*\) ms.*/\1/p' "$d/coordinator.log" | head -1)"
    events="$events rebuild_ms=$(sed -n 's/.*rebuild took \([0-9.]*\) ms.*/\1/p' "$d/coordinator.log" | head -1)"
    copies=$(cat "$d"/*.log | sed -n 's/.*metadata of the copy to \([a-z]* [0-9]*\) sent.*, \([0-9]*\) ms; \([0-9]*\) records committed meanwhile/\1:\2ms:\3/p' |
        tr ' ' '_' | tr '\n' ' ')
    echo "$(cd "$b/.." && git rev-parse --short HEAD 2>/dev/null) $stats $totals $events copies=[${copies% }]"
}

mkdir -p "$OUT"
uptime
for r in $(seq "$ROUNDS"); do
    for i in "${!builds[@]}"; do
        echo "round $r build $i ($(cd "${builds[$i]}/.." && git rev-parse --short HEAD 2>/dev/null)):"
        run "${builds[$i]}" "$OUT/r$r-b$i"
    done
done
uptime
