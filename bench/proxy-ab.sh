#!/usr/bin/env bash
# proxy-ab.sh - one build against another through cocytus-proxy, in front of
# the same kind of cluster: what a change is worth to an ordinary memcached
# client (many connections, one request in flight each, all multiplexed by
# the proxy over its few server connections).
#
# The idea: both builds run at once, each a whole cluster (scripts/cluster
# up, no coordinator) with its own proxy on free loopback ports; the same
# cocytus-bench load goes through each proxy (single endpoint, --route
# follow-raw: plain text requests, as any memcached client sends) in rounds
# that alternate the order (new base | base new | ...).  Reported per run:
# ops/s, get and set p50/p99; then medians over rounds, the spread, and the
# median of the per-round new/base throughput ratios.  Exit 1 if a run had
# errors or wrong values (cocytus-bench verifies every value it reads).
#
# usage: BASE_BUILD=/path/to/other/build bench/proxy-ab.sh
#   SCHEME=rs:3:5 NODES=1 RATIO=0.5 (cocytus-bench -r) CONNS=20 SECS=6 ROUNDS=3
#   RECORDS=20000 SIZE=1024 RATE= (cocytus-bench --rate: an open-loop load of
#   that many ops/s in all, for latencies below saturation; empty: closed loop)
#   OUT=docs/evaluation/proxy-ab (writes OUT.csv and OUT.md; empty: print only)
# Environment of bench/eval/lib.sh too (COCYTUS_BUILD_DIR: the new build).
EVAL_SCRIPT_DIR=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=eval/lib.sh
. "$EVAL_SCRIPT_DIR/eval/lib.sh"

SCHEME=${SCHEME:-rs:3:5}
NODES=${NODES:-1}
RATIO=${RATIO:-0.5}
CONNS=${CONNS:-20}
SECS=${SECS:-6}
ROUNDS=${ROUNDS:-3}
RECORDS=${RECORDS:-20000}
SIZE=${SIZE:-1024}
RATE=${RATE:-}
OUT=${OUT-}
BASE_BUILD=${BASE_BUILD:-}

eval_init proxy-ab
[ -n "$BASE_BUILD" ] || die "set BASE_BUILD to the build to compare against"
[ -x "$BASE_BUILD/memcached/cocytus-server" ] || die "BASE_BUILD=$BASE_BUILD has no cocytus-server"
BASE_BUILD=$(cd "$BASE_BUILD" && pwd)
NEW_BUILD=$BUILD_DIR

declare -A PROXY=()

# up NAME BUILD: a cluster of that build with its proxy on free ports.
up() {
    local name=$1 build=$2 d="$WORK/$1" base pport
    base=$(free_run 40) || die "no free ports"
    pport=$(free_port) || die "no free port"
    CLEANUP_CMDS+=("COCYTUS_BUILD_DIR=$build '$CLUSTER' down --dir '$d'")
    COCYTUS_BUILD_DIR=$build "$CLUSTER" up --nodes "$NODES" --scheme "$SCHEME" --no-coordinator \
        --region 128 --memory 256 --base-port "$base" --proxy-port "$pport" --dir "$d" \
        >"$d.up.log" 2>&1 || die "$name: cluster up failed: $(tail -n 3 "$d.up.log" | tr '\n' ' ')"
    PROXY[$name]=127.0.0.1:$pport
    note "$name up: $SCHEME on $NODES node(s) from $build, proxy ${PROXY[$name]}"
}

run() {
    timeout -k 5 $((SECS + 60)) "$BENCH" -s "${PROXY[$1]}" --route follow-raw -q "${@:2}"
}

up new "$NEW_BUILD"
up base "$BASE_BUILD"
for sys in new base; do
    run "$sys" --load --no-run -n "$RECORDS" -v "$SIZE" -c 4 >"$WORK/load-$sys.txt" 2>&1 \
        || die "loading $sys failed: $(tail -n 3 "$WORK/load-$sys.txt" | tr '\n' ' ')"
done
note "$RECORDS records of $SIZE B loaded; $ROUNDS rounds of $SECS s, $CONNS connections, read ratio $RATIO${RATE:+, $RATE ops/s open loop}"

rows=()
bad=0
for ((r = 1; r <= ROUNDS; r++)); do
    order="new base"
    [ $((r % 2)) -eq 0 ] && order="base new"
    for sys in $order; do
        f="$WORK/run-$r-$sys"
        run "$sys" --no-load --run -n "$RECORDS" -v "$SIZE" -r "$RATIO" -c "$CONNS" -t "$SECS" ${RATE:+--rate "$RATE"} >"$f.txt" 2>"$f.err"
        bench_check "$f" "round $r $sys" || bad=1
        ops=$(bval "$f.txt" phase=run ops_per_s)
        row="$r,$sys,$ops,$(bval "$f.txt" op=get p50_us),$(bval "$f.txt" op=get p99_us),$(bval "$f.txt" op=set p50_us),$(bval "$f.txt" op=set p99_us)"
        rows+=("$row")
        note "round $r $sys: $(fmt "$ops" 0) ops/s, get p99 $(bval "$f.txt" op=get p99_us) us, set p99 $(bval "$f.txt" op=set p99_us) us"
    done
done

col() { printf '%s\n' "${rows[@]}" | awk -F, -v s="$1" -v c="$2" '$2 == s { print $c }'; }
ratios=$(for ((r = 1; r <= ROUNDS; r++)); do
    n=$(printf '%s\n' "${rows[@]}" | awk -F, -v r="$r" '$1 == r && $2 == "new" { print $3 }')
    b=$(printf '%s\n' "${rows[@]}" | awk -F, -v r="$r" '$1 == r && $2 == "base" { print $3 }')
    ratio "$n" "$b"; echo
done)
table() {
    echo "| build | ops/s | spread | get p50 us | get p99 us | set p50 us | set p99 us |"
    echo "|---|---:|---:|---:|---:|---:|---:|"
    for sys in new base; do
        echo "| $sys | $(col $sys 3 | medf 0) | $(col $sys 3 | spread)% | $(col $sys 4 | medf 1) | $(col $sys 5 | medf 1) | $(col $sys 6 | medf 1) | $(col $sys 7 | medf 1) |"
    done
    echo
    echo "new / base throughput, per round: $(echo "$ratios" | grep -v '^$' | tr '\n' ' ')-> median $(echo "$ratios" | grep -v '^$' | medf 2)x"
}
table

if [ -n "$OUT" ]; then
    {
        echo "round,build,ops_per_s,get_p50_us,get_p99_us,set_p50_us,set_p99_us"
        printf '%s\n' "${rows[@]}"
    } >"$OUT.csv"
    {
        echo "# Through cocytus-proxy: one build against another"
        echo
        echo "Command: \`BASE_BUILD=$BASE_BUILD bench/proxy-ab.sh\` (SCHEME=$SCHEME NODES=$NODES"
        echo "RATIO=$RATIO CONNS=$CONNS SECS=$SECS ROUNDS=$ROUNDS RECORDS=$RECORDS SIZE=$SIZE${RATE:+ RATE=$RATE}); new build $NEW_BUILD"
        echo "(source at $(git -C "$REPO_DIR" rev-parse --short HEAD 2>/dev/null || echo '?'))."
        md_machine
        echo
        echo "Load: cocytus-bench --route follow-raw (text requests, one in flight per connection)"
        echo "through each build's proxy, $CONNS connections, zipfian keys over $RECORDS records of"
        echo "$SIZE B; rounds alternate the order; medians over rounds, spread = (max - min) / median."
        echo
        table
    } >"$OUT.md"
    note "wrote $OUT.csv and $OUT.md"
fi
exit $bad
