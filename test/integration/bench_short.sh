#!/usr/bin/env bash
# bench_short.sh - make-check test of cocytus-bench: bad arguments and an
# unreachable server exit 2 with a clear message; then a short verified run
# (--verify -n 2000 -t 3 -c 2, half gets, half sets) against a plain
# cocytus-server, a 2-node plain cluster (also with --route follow-raw,
# which must follow MOVED: redirects > 0) and a 5-node rs:3:5 cluster, each
# of which must answer every operation correctly (total_errors=0,
# total_wrong=0, gets and sets both issued).  On the plain server it also
# checks the CSV and JSON files and that --verify does catch values that do
# not match (a load with one value size read back expecting another).
# The trap always stops what the test started.
set -u

case "$0" in
    */*) script_dir=$(cd "${0%/*}" && pwd) ;;
    *) script_dir=$(pwd) ;;
esac
cluster_script=$script_dir/../../scripts/cluster
server_bin=${COCYTUS_SERVER:-$script_dir/../../memcached/cocytus-server}
bench_bin=${COCYTUS_BENCH:-$script_dir/../../bench/cocytus-bench}

for b in "$server_bin" "$bench_bin"; do
    if [ ! -x "$b" ]; then
        echo "FAIL: $b not found (set COCYTUS_SERVER and COCYTUS_BENCH)"
        exit 1
    fi
done
COCYTUS_BUILD_DIR=$(cd "$(dirname "$server_bin")/.." && pwd)
export COCYTUS_BUILD_DIR
if [ ! -x "$COCYTUS_BUILD_DIR/cocytus/cocytus-node" ]; then
    echo "FAIL: $COCYTUS_BUILD_DIR/cocytus/cocytus-node not built"
    exit 1
fi

dir=$(mktemp -d "${TMPDIR:-/tmp}/bench_short.XXXXXX")
plain_pid=""
failures=0

cleanup() {
    [ -n "$plain_pid" ] && kill -TERM "$plain_pid" 2>/dev/null && wait "$plain_pid" 2>/dev/null
    for c in "$dir"/cluster-*; do
        [ -d "$c" ] && bash "$cluster_script" down --dir "$c" >/dev/null 2>&1
    done
    rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

fail() {
    echo "FAIL: $*"
    failures=$((failures + 1))
}

ok() {
    echo "ok: $*"
}

port_free() {
    ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null &&
        ! ss -Htan 2>/dev/null | awk '{print $4}' | grep -q ":$1\$"
}

# A base port below the ephemeral range whose run of COUNT ports looks free.
pick_base_port() {
    local count=$1 base p busy
    for _ in $(seq 50); do
        base=$((23000 + 2 * (RANDOM % 4000)))
        busy=0
        for ((p = base; p < base + count; p++)); do
            port_free "$p" || { busy=1; break; }
        done
        [ "$busy" -eq 0 ] && { echo "$base"; return 0; }
    done
    return 1
}

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
bad_args "unknown option '--bogus'" --bogus
bad_args "option '-n' needs a value" -n
bad_args "unexpected argument 'extra'" extra
bad_args "nothing to do" --no-load --no-run
dead_port=$(pick_base_port 1)
bad_args "cannot reach a server of '127.0.0.1:$dead_port'" -s "127.0.0.1:$dead_port" -q
bench --help
[ "$bench_rc" -eq 0 ] && grep -q -- '--read-ratio' "$dir/out" || fail "--help: exit $bench_rc"
ok "bad arguments and an unreachable server: exit 2 with a message"

# --- a plain cocytus-server ---
start_plain() {
    local port
    for _ in $(seq 20); do
        port=$(pick_base_port 1) || return 1
        "$server_bin" -p "$port" -l 127.0.0.1 -U 0 -m 64 </dev/null >"$dir/plain.log" 2>&1 &
        plain_pid=$!
        for _ in $(seq 30); do
            if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
                plain_port=$port
                return 0
            fi
            kill -0 "$plain_pid" 2>/dev/null || break
            sleep 0.1
        done
        kill -TERM "$plain_pid" 2>/dev/null
        wait "$plain_pid" 2>/dev/null
        plain_pid=""
    done
    return 1
}

if start_plain; then
    bench -s "127.0.0.1:$plain_port" --verify -n 2000 -t 3 -c 2 -q --read-ratio 0.5 \
        --csv "$dir/run.csv" --json "$dir/run.json" -i 500
    check_run "plain server"
    head -1 "$dir/run.csv" | grep -qx 't_s,ops,ops_per_s,get_p50_us,get_p99_us,set_p50_us,set_p99_us,errors' \
        || fail "CSV header: $(head -1 "$dir/run.csv")"
    rows=$(($(wc -l <"$dir/run.csv") - 1))
    [ "$rows" -ge 3 ] || fail "CSV has $rows rows for a 3 s run at 500 ms"
    grep -q '"total_wrong": 0' "$dir/run.json" && grep -q '"verify": true' "$dir/run.json" \
        || fail "JSON summary: $(tr '\n' ' ' <"$dir/run.json")"
    # Loaded with 100-byte values, read expecting 200-byte ones: all wrong.
    bench -s "127.0.0.1:$plain_port" -n 200 -v 100 --no-run -q
    bench -s "127.0.0.1:$plain_port" -n 200 -v 200 --no-load -o 300 -r 1 --verify -q
    wrong=$(field op=get wrong)
    [ "$bench_rc" -eq 1 ] && [ "${wrong:-0}" -eq 300 ] \
        || fail "--verify on mismatched values: exit $bench_rc, wrong=$wrong, want 1 and 300"
    grep -q 'wrong value' "$dir/err" || fail "no 'wrong value' line on stderr"
    ok "CSV ($rows rows), JSON, and --verify catches mismatched values"
    # --verify-latest alone: every read of its own records is its last write.
    bench -s "127.0.0.1:$plain_port" -n 300 -v 64 -c 2 -t 1 -r 0.5 --verify-latest -q
    [ "$bench_rc" -eq 0 ] && [ "$(field total_errors total_errors)" = 0 ] \
        || fail "--verify-latest alone: exit $bench_rc, stdout: $(tr '\n' ';' <"$dir/out")"
    # ... and with another writer on the same keys it sees stale values.
    "$bench_bin" -s "127.0.0.1:$plain_port" -n 30 -v 64 -c 2 -t 2 -r 0.2 --no-load --seed 9 -q \
        >/dev/null 2>&1 &
    other=$!
    bench -s "127.0.0.1:$plain_port" -n 30 -v 64 -c 1 -t 1 -r 0.5 --verify-latest -q
    wait "$other"
    [ "$bench_rc" -eq 1 ] && grep -q 'stale value' "$dir/err" \
        || fail "--verify-latest with another writer: exit $bench_rc, want 1 and 'stale value'"
    ok "--verify-latest: clean alone, catches another writer's versions"
    kill -TERM "$plain_pid" 2>/dev/null
    wait "$plain_pid" 2>/dev/null
    plain_pid=""
else
    fail "could not start a plain server"
fi

# --- clusters from scripts/cluster ---
# cluster_run NAME NODES SCHEME PROCESSES: up, verified bench run through
# three seeds, down.
cluster_run() {
    local name=$1 nodes=$2 scheme=$3 procs=$4 cdir=$dir/cluster-$1 up_ok=0 base seeds
    mkdir -p "$cdir"
    for attempt in 1 2 3; do
        base=$(pick_base_port $((2 * procs))) || break
        if bash "$cluster_script" up --nodes "$nodes" --scheme "$scheme" --no-proxy --memory 16 \
            --region 16 --dir "$cdir" --base-port "$base" >"$cdir/up.log" 2>&1; then
            up_ok=1
            break
        fi
        echo "up failed on base port $base (attempt $attempt)"
    done
    if [ "$up_ok" -ne 1 ]; then
        fail "$name cluster up: $(tail -3 "$cdir/up.log" | tr '\n' ';')"
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
    fi
    bash "$cluster_script" down --dir "$cdir" >/dev/null 2>&1 || fail "$name cluster down"
}

cluster_run plain-2 2 plain 2
cluster_run rs-3-5 5 rs:3:5 25

if [ "$failures" -ne 0 ]; then
    echo "FAIL: $failures check(s) failed"
    exit 1
fi
echo "PASS"
exit 0
