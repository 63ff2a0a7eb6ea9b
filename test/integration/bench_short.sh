#!/usr/bin/env bash
# bench_short.sh - make-check test of cocytus-bench: bad arguments and an
# unreachable server exit 2 with a clear message; then a short verified run
# (--verify -n 2000 -t 3 -c 2, half gets, half sets) against a plain
# cocytus-server, a 2-node plain cluster (also with --route follow-raw,
# which must follow MOVED: redirects > 0, and with --only-server <first
# seed> none) and a 5-node rs:3:5 cluster, each
# of which must answer every operation correctly (total_errors=0,
# total_wrong=0, gets and sets both issued).  On the plain server it also
# checks the CSV and JSON files and that --verify does catch values that do
# not match (a load with one value size read back expecting another).
# The trap always stops what the test started.
set -u

script_dir=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$script_dir/lib.sh"
bench_bin=${COCYTUS_BENCH:-$top_srcdir/bench/cocytus-bench}
need_built "$server_bin" "$bench_bin" "$build_dir/cocytus/cocytus-node"

dir=$(mktemp -d "${TMPDIR:-/tmp}/bench_short.XXXXXX")
server_pid=""

cleanup() {
    stop_pid "$server_pid"
    for c in "$dir"/cluster-*; do
        [ -d "$c" ] && cluster_remove "$c"
    done
    rm -rf "$dir"
}
on_exit cleanup

# bench ARGS...: runs cocytus-bench (bounded by timeout), output in
# $dir/out and $dir/err, exit status in bench_rc.
bench() {
    timeout 60 "$bench_bin" "$@" >"$dir/out" 2>"$dir/err"
    bench_rc=$?
}

# field LINE_PREFIX KEY: the value of KEY= on the stdout line starting with
# LINE_PREFIX (e.g. field 'op=get' count).
field() {
    awk -v pre="$1" -v key="$2" 'index($0, pre) == 1 {
        for (i = 1; i <= NF; i++) if (index($i, key "=") == 1) { print substr($i, length(key) + 2); exit }
    }' "$dir/out"
}

# check_run LABEL: the last run answered everything correctly.
check_run() {
    local label=$1 gets sets
    gets=$(field op=get count)
    sets=$(field op=set count)
    if [ "$bench_rc" -ne 0 ] || [ "$(field total_errors total_errors)" != 0 ] \
        || [ "$(field total_errors total_wrong)" != 0 ] \
        || [ "${gets:-0}" -le 0 ] || [ "${sets:-0}" -le 0 ] \
        || [ "$(field phase=load ops)" != 2000 ]; then
        fail "$label: exit $bench_rc; stdout: $(tr '\n' ';' <"$dir/out") stderr: $(head -5 "$dir/err" | tr '\n' ';')"
        return 1
    fi
    ok "$label: $gets gets, $sets sets, no errors, no wrong values ($(field phase=run ops_per_s) ops/s)"
}

# --- bad arguments: exit 2 and a message naming the problem ---
bad_args() {
    local want=$1
    shift
    bench "$@"
    if [ "$bench_rc" -ne 2 ] || ! grep -qF -- "$want" "$dir/err"; then
        fail "cocytus-bench $*: exit $bench_rc, stderr '$(tr '\n' ';' <"$dir/err")', want 2 and '$want'"
    fi
}
bad_args "bad --read-ratio '1.5'" -r 1.5
bad_args "bad --read-ratio 'x'" --read-ratio x
bad_args "bad --connections '0'" -c 0
bad_args "bad --records '0'" -n 0
bad_args "bad --value-size 'zipf:9:3'" -v zipf:9:3
bad_args "bad --value-size '0'" -v 0
bad_args "bad --distribution 'hot'" -d hot
bad_args "bad --route 'maybe'" --route maybe
bad_args "follow-raw speaks the text protocol" --route follow-raw --binary
bad_args "bad --duration '-1'" -t -1
bad_args "bad --depth '0'" --depth 0
bad_args "bad --depth '257'" --depth 257
bad_args "cannot be combined with --rate" --depth 4 --rate 100
bad_args "cannot be combined with --route follow" --depth 4 --route follow
bad_args "cannot be combined with --route follow-raw" --depth 4 --route follow-raw
bad_args "cannot be combined with --binary" --depth 4 --binary
bad_args "unknown option '--bogus'" --bogus
bad_args "option '-n' needs a value" -n
bad_args "unexpected argument 'extra'" extra
bad_args "nothing to do" --no-load --no-run
dead_port=$(pick_base_port 1 23000 31000)
bad_args "cannot reach a server of '127.0.0.1:$dead_port'" -s "127.0.0.1:$dead_port" -q
bench --help
[ "$bench_rc" -eq 0 ] && grep -q -- '--read-ratio' "$dir/out" || fail "--help: exit $bench_rc"
ok "bad arguments and an unreachable server: exit 2 with a message"

# --- a plain cocytus-server ---
if start_server "$dir/plain.log" -m 64; then
    bench -s "127.0.0.1:$server_port" --verify -n 2000 -t 3 -c 2 -q --read-ratio 0.5 \
        --csv "$dir/run.csv" --json "$dir/run.json" -i 500
    check_run "plain server"
    head -1 "$dir/run.csv" | grep -qx 't_s,ops,ops_per_s,get_p50_us,get_p99_us,set_p50_us,set_p99_us,errors' \
        || fail "CSV header: $(head -1 "$dir/run.csv")"
    rows=$(($(wc -l <"$dir/run.csv") - 1))
    [ "$rows" -ge 3 ] || fail "CSV has $rows rows for a 3 s run at 500 ms"
    grep -q '"total_wrong": 0' "$dir/run.json" && grep -q '"verify": true' "$dir/run.json" \
        || fail "JSON summary: $(tr '\n' ' ' <"$dir/run.json")"
    # Loaded with 100-byte values, read expecting 200-byte ones: all wrong.
    bench -s "127.0.0.1:$server_port" -n 200 -v 100 --no-run -q
    bench -s "127.0.0.1:$server_port" -n 200 -v 200 --no-load -o 300 -r 1 --verify -q
    wrong=$(field op=get wrong)
    [ "$bench_rc" -eq 1 ] && [ "${wrong:-0}" -eq 300 ] \
        || fail "--verify on mismatched values: exit $bench_rc, wrong=$wrong, want 1 and 300"
    grep -q 'wrong value' "$dir/err" || fail "no 'wrong value' line on stderr"
    ok "CSV ($rows rows), JSON, and --verify catches mismatched values"
    # --verify-latest alone: every read of its own records is its last write.
    bench -s "127.0.0.1:$server_port" -n 300 -v 64 -c 2 -t 1 -r 0.5 --verify-latest -q
    [ "$bench_rc" -eq 0 ] && [ "$(field total_errors total_errors)" = 0 ] \
        || fail "--verify-latest alone: exit $bench_rc, stdout: $(tr '\n' ';' <"$dir/out")"
    # ... and with another writer on the same keys it sees stale values.
    "$bench_bin" -s "127.0.0.1:$server_port" -n 30 -v 64 -c 2 -t 2 -r 0.2 --no-load --seed 9 -q \
        >/dev/null 2>&1 &
    other=$!
    bench -s "127.0.0.1:$server_port" -n 30 -v 64 -c 1 -t 1 -r 0.5 --verify-latest -q
    wait "$other"
    [ "$bench_rc" -eq 1 ] && grep -q 'stale value' "$dir/err" \
        || fail "--verify-latest with another writer: exit $bench_rc, want 1 and 'stale value'"
    ok "--verify-latest: clean alone, catches another writer's versions"
    # --depth: requests pipelined per connection, same checks.
    for depth in 8 32; do
        bench -s "127.0.0.1:$server_port" --verify -n 2000 -t 2 -c 2 -q --read-ratio 0.5 \
            --depth "$depth" --json "$dir/depth.json"
        check_run "plain server, --depth $depth"
    done
    grep -q '"depth": 32' "$dir/depth.json" || fail "JSON config has no \"depth\": 32"
    # Records hold 1024-byte values now: pipelined reads expecting 200 are all wrong.
    bench -s "127.0.0.1:$server_port" -n 200 -v 200 --no-load -o 300 -r 1 --verify --depth 16 -q
    [ "$bench_rc" -eq 1 ] && [ "$(field op=get wrong)" = 300 ] \
        || fail "--verify --depth 16 on mismatched values: exit $bench_rc, wrong=$(field op=get wrong), want 1 and 300"
    bench -s "127.0.0.1:$server_port" -n 300 -v zipf:10:3000 -c 2 -t 1 -r 0.5 --verify-latest \
        --depth 16 -q
    [ "$bench_rc" -eq 0 ] && [ "$(field total_errors total_errors)" = 0 ] \
        && [ "$(field total_errors total_wrong)" = 0 ] \
        || fail "--verify-latest --depth 16: exit $bench_rc, stdout: $(tr '\n' ';' <"$dir/out")"
    ok "--depth 8/32 --verify and --depth 16 --verify-latest clean; --depth catches wrong values"
    stop_pid "$server_pid"
    server_pid=""
else
    fail "could not start a plain server"
fi

# --- clusters from scripts/cluster ---
# cluster_run NAME NODES SCHEME PROCESSES: up, verified bench run through
# three seeds, down.
cluster_run() {
    local name=$1 nodes=$2 scheme=$3 procs=$4 cdir=$dir/cluster-$1 seeds
    # 2 ports a process, 2 for the coordinator
    if ! cluster_up "$cdir" $((2 * procs + 2)) 23000 31000 --nodes "$nodes" --scheme "$scheme" \
        --no-proxy --memory 16 --region 16; then
        fail "$name cluster up"
        return
    fi
    seeds=$(awk '$1 == "plain" || $1 == "data" { print $5 }' "$cdir/endpoints" | head -3 | paste -sd, -)
    bench -s "$seeds" --verify -n 2000 -t 3 -c 2 -q --read-ratio 0.5
    check_run "$name cluster ($seeds)"
    if [ "$name" = plain-2 ]; then
        # follow-raw: kept raw sockets, every request to the first seed, so
        # about half of them must come back MOVED and be followed.
        bench -s "$seeds" --route follow-raw --verify -n 2000 -t 2 -c 2 -q --read-ratio 0.5
        local redirects
        redirects=$(field redirects= redirects)
        if check_run "$name cluster, --route follow-raw" && [ "${redirects:-0}" -le 0 ]; then
            fail "$name cluster, --route follow-raw: redirects=$redirects, want > 0"
        fi
        bench -s "$seeds" --verify-latest -n 2000 -t 2 -c 2 -q --read-ratio 0.5 --depth 16
        check_run "$name cluster, --depth 16 --verify-latest"
        # --only-server: every record is a key of that server, so follow-raw,
        # which sends everything to the first seed, is never redirected.
        local first=${seeds%%,*}
        bench -s "$seeds" --only-server "$first" --route follow-raw --verify -n 2000 -t 2 -c 2 \
            -q --read-ratio 0.5
        redirects=$(field redirects= redirects)
        if check_run "$name cluster, --only-server $first" && [ "${redirects:-1}" != 0 ]; then
            fail "$name cluster, --only-server $first: redirects=$redirects, want 0"
        fi
        bad_args "--only-server 127.0.0.1:1 is not in the servers' map" -s "$seeds" \
            --only-server 127.0.0.1:1 -t 1
    fi
    bash "$cluster_script" down --dir "$cdir" >/dev/null 2>&1 || fail "$name cluster down"
}

cluster_run plain-2 2 plain 2
cluster_run rs-3-5 5 rs:3:5 25

finish
