#!/usr/bin/env bash
# recovery.sh - the figures of docs/recovery.md: ROUNDS drills of each kind
# on the default cluster (5 nodes, RS(3,5)), and ROUNDS idle rebuilds to
# measure the background recovery rate.
#
#   ROUNDS=10 bench/eval/recovery.sh
#
# Drills (scripts/drill rs ... --during-load --direct): cocytus-bench routes
# by the slot map with --verify-latest (20000 records of 4 KB, half reads),
# drill-writer sets through the proxy and every acknowledged key is read back;
# kinds dp (SIGKILL of a data process), hang (SIGSTOP for 3 s: detection is
# the heartbeat timeout) and node (every process of node 1).  Each drill
# gives time to serve again, preparation time, throughput share during
# recovery and p50/p99 get latency before and during.
# Idle rebuild: IDLE_RECORDS (100000) records of 4 KB loaded (about 29 MB per
# data process, under half of its 64 MB region),
# no client load, SIGKILL of data process 1 of group 0; the rate is the
# bytes the recovery process rebuilt over the time from its first batch to
# its last unit (recovery_rebuild_usec; units known to be zero are not
# counted, neither as bytes nor as time).
# Writes docs/evaluation/recovery.csv, recovery-rate.csv and recovery.md.
set -u
ROUNDS=${ROUNDS:-10}
KINDS=${KINDS:-"dp hang node"}
IDLE_RECORDS=${IDLE_RECORDS:-100000}   # 4 KB records: about 29 MB per data process
top=$(cd "$(dirname "$0")/../.." && pwd)
out=${EVAL_OUT:-$top/docs/evaluation}
build=${COCYTUS_BUILD_DIR:-$top/build}
export COCYTUS_BUILD_DIR=$build
work=$(mktemp -d "${TMPDIR:-/tmp}/eval-recovery.XXXXXX")
trap 'bash "$top/scripts/cluster" down --dir "$work/idle" >/dev/null 2>&1; rm -rf "$work"' EXIT
mkdir -p "$out"

csv=$out/recovery.csv
echo "round,kind,acknowledged,lost,stale,client_errors,serve_ms,prepare_ms,get_p50_before_us,get_p50_during_us,get_p99_before_us,get_p99_during_us,throughput_share,verify" >"$csv"
field() { sed -n "s/.* $1 \([^,]*\),.*/\1/p" <<<"$2"; }
for r in $(seq "$ROUNDS"); do
    for kind in $KINDS; do
        line=$(bash "$top/scripts/drill" rs --kill "$kind" --during-load --direct --seconds 9 \
            --records 20000 --size 4096 --dir "$work/drill" 2>&1 | grep "^drill rs kill")
        echo "round $r: $line" >&2
        case $line in
            *"lost 0, stale 0"*"verify ok"*) ;;
            *) keep_dir=${TMPDIR:-/tmp}/recovery-failed-$kind-$r; rm -rf "$keep_dir"; cp -r "$work/drill" "$keep_dir"
               echo "round $r: kept the failed drill's directory in $keep_dir" >&2 ;;
        esac
        p50=$(field get_p50_us "$line")
        p99=$(field get_p99_us "$line")
        verify=$(sed -n 's/.*verify \(.*\)$/\1/p' <<<"$line")
        echo "$r,$kind,$(field acknowledged "$line"),$(field lost "$line"),$(field stale "$line"),$(field client_errors "$line"),$(field serve_ms "$line"),$(field prepare_ms "$line"),${p50%/*},${p50#*/},${p99%/*},${p99#*/},$(field throughput_share "$line"),$verify" >>"$csv"
    done
done

rate_csv=$out/recovery-rate.csv
echo "round,bytes,usec,mb_per_s" >"$rate_csv"
# admin HOST:PORT 'cocytus WORDS': a control command through cocytus-cli
# admin, which proves the cluster secret of $d (docs/security.md).
admin() {
    "$build/client/cocytus-cli" --dir "$d" --timeout 2000 admin "$1" $2 2>/dev/null
}
for r in $(seq "$ROUNDS"); do
    d=$work/idle
    bash "$top/scripts/cluster" down --dir "$d" >/dev/null 2>&1
    rm -rf "$d"
    bash "$top/scripts/cluster" up --dir "$d" --no-proxy --base-port $((24000 + (RANDOM % 80) * 100)) \
        >/dev/null 2>&1 || { echo "cluster up failed" >&2; continue; }
    first=$(awk '$1 == "data" { print $5; exit }' "$d/endpoints")
    "$build/bench/cocytus-bench" -s "$first" -n "$IDLE_RECORDS" -v 4096 --no-run -c 8 --depth 8 -q >/dev/null 2>&1
    pp=$(awk '$1 == "parity" && $2 == 0 && $3 == 0 { print $5 }' "$d/endpoints")
    kill -KILL "$(awk '$1 == "data" && $2 == 0 && $3 == 1 { print $6 }' "$d/endpoints")"
    for _ in $(seq 100); do
        info=$(admin "$pp" "cocytus info")
        done_=$(awk '$2 == "recovery_units_done" { print $3 }' <<<"$info")
        total=$(awk '$2 == "recovery_units_total" { print $3 }' <<<"$info")
        [ -n "$done_" ] && [ "$done_" = "$total" ] && break
        sleep 0.1
    done
    bytes=$(awk '$2 == "recovery_bytes" { print $3 }' <<<"$info")
    usec=$(awk '$2 == "recovery_rebuild_usec" { print $3 }' <<<"$info")
    rate=$(awk -v b="$bytes" -v u="$usec" 'BEGIN { if (u > 0) printf "%.1f", b / u; else print "" }')
    echo "idle round $r: $bytes bytes in $usec us = $rate MB/s" >&2
    echo "$r,$bytes,$usec,$rate" >>"$rate_csv"
    bash "$top/scripts/cluster" down --dir "$d" >/dev/null 2>&1
done

# Medians per kind.
median() { sort -n | awk '{ a[NR] = $1 } END { if (NR) print a[int((NR + 1) / 2)]; else print "n/a" }'; }
range() { sort -n | awk 'NR == 1 { lo = $1 } { hi = $1 } END { if (NR) printf "%s-%s", lo, hi }'; }
col() { awk -F, -v k="$1" -v c="$2" 'NR > 1 && $2 == k { print $c }' "$csv"; }
{
    echo "# Recovery figures"
    echo
    echo "Command: \`ROUNDS=$ROUNDS bench/eval/recovery.sh\` ($(date -u +%Y-%m-%d), $(nproc) cores shared by"
    echo "25 server processes, the coordinator, the proxy and the load generators)."
    echo
    echo "| kind | drills | lost | stale | client errors | serve again, ms (median, range) | preparation, ms | throughput during / before | get p50 before -> during, us | get p99 before -> during, us |"
    echo "|---|---:|---:|---:|---:|---|---|---:|---|---|"
    for kind in $KINDS; do
        n=$(col "$kind" 1 | wc -l)
        lost=$(col "$kind" 4 | awk '{ s += $1 } END { print s + 0 }')
        stale=$(col "$kind" 5 | awk '{ s += $1 } END { print s + 0 }')
        errs=$(col "$kind" 6 | awk '{ s += $1 } END { print s + 0 }')
        echo "| $kind | $n | $lost | $stale | $errs | $(col "$kind" 7 | median) ($(col "$kind" 7 | range)) | $(col "$kind" 8 | median) ($(col "$kind" 8 | range)) | $(col "$kind" 13 | median) | $(col "$kind" 9 | median) -> $(col "$kind" 10 | median) | $(col "$kind" 11 | median) -> $(col "$kind" 12 | median) |"
    done
    echo
    rates=$(awk -F, 'NR > 1 && $4 != "" { print $4 }' "$rate_csv")
    echo "Background recovery rate, idle cluster, one recovery process: median $(median <<<"$rates") MB/s (range $(range <<<"$rates"), $ROUNDS rebuilds of $IDLE_RECORDS 4 KB records over 15 data processes, about 29 MB each at the default)."
    echo
    echo "Raw rows: recovery.csv, recovery-rate.csv."
} >"$out/recovery.md"
cat "$out/recovery.md"
