#!/usr/bin/env bash
# garbage_links.sh - the ports between processes survive garbage, and the
# group goes on writing through it.  On an RS(3,5) group (scripts/cluster:
# one node, its coordinator, no restarts), while cocytus-bench writes and
# reads its own writes back (--verify-latest) through the cached slot map:
#   - link_garbage.py at the link ports of both parity processes and of the
#     coordinator, at once: random bytes, bad and out-of-turn frames,
#     oversized handshake frames, HELLOs with a wrong cluster name (some
#     holding a newline or a terminal escape), a wrong proof, or a correct
#     proof for an identity nobody has, half frames and silence.  Every
#     connection must be refused (closed, a REJECT first for a well-formed
#     HELLO) within the handshake limit; none may be welcomed;
#   - test_garbage at the coordinator's client port (GARBAGE_STORES=0: it
#     keeps nothing for clients; it must still answer version).
# Then: the bench saw no error or stale read, every process runs, the link
# ports hold only the group's own links again, the coordinator saw nobody
# die (the group is at full redundancy), no log holds a byte outside
# printable ASCII or a forged line, and verify and decode-check pass.
# The trap stops everything.
set -u

script_dir=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$script_dir/lib.sh"
garbage_bin=${COCYTUS_GARBAGE:-$build_dir/test/integration/test_garbage}
bench_bin=${COCYTUS_BENCH:-$build_dir/bench/cocytus-bench}
cli=$build_dir/client/cocytus-cli
link_garbage=$script_dir/link_garbage.py

need_built "$server_bin" "$garbage_bin" "$bench_bin" "$cli" "$build_dir/cocytus/cocytus-node"
if ! command -v python3 >/dev/null 2>&1; then
    echo "SKIP: python3 is not installed"
    exit 77
fi

dir=""
bench_pid=""
cleanup() {
    stop_pid "$bench_pid"
    bench_pid=""
    cluster_remove "$dir"
    dir=""
}
on_exit cleanup

dir=$(mktemp -d "${TMPDIR:-/tmp}/garbage-links.XXXXXX")
# 5 servers and the coordinator: 2 ports each
if ! cluster_up "$dir" 12 12000 20000 --nodes 1 --scheme rs:3:5 --no-proxy --restart off; then
    fail "scripts/cluster up --nodes 1 --scheme rs:3:5"
    finish
fi
cluster=$(awk '$1 == "cluster" { print $2 }' "$dir/cluster.conf")
secret=$(awk '$1 == "secret" { print $2 }' "$dir/cluster.conf")
read -r _ coord_host coord_port coord_link < <(grep '^coordinator ' "$dir/cluster.conf")
coord_pid=$(server_pid "$coord_host:$coord_port")
seeds=$(awk '$1 == "data" { printf "%s%s", sep, $5; sep = "," }' "$dir/endpoints")
server_pids="$(awk '$1 == "data" || $1 == "parity" { printf "%s ", $6 }' "$dir/endpoints")"
if [ -z "$coord_pid" ] || [ -z "$cluster" ]; then
    fail "cannot read the cluster's name or the coordinator's pid"
    finish
fi

# the link ports: each parity process's port that is not its client port,
# and the coordinator's
targets=""
for p in 0 1; do
    pid=$(awk -v i="$p" '$1 == "parity" && $3 == i { print $6 }' "$dir/endpoints")
    client=$(awk -v i="$p" '$1 == "parity" && $3 == i { n = split($5, a, ":"); print a[n] }' "$dir/endpoints")
    link=$(link_port_of "$pid" "$client")
    [ -n "$link" ] || { fail "no link port for parity $p (pid $pid)"; finish; }
    targets="$targets parity-$p:$link:3"     # 3 data processes link to it
done
targets="$targets coordinator:$coord_link:5"  # and 5 servers to the coordinator
echo "cluster $cluster; link ports:$targets; coordinator 127.0.0.1:$coord_port (pid $coord_pid)"

if ! "$bench_bin" -s "$seeds" -n 2000 -v 512 --load --no-run -q >"$dir/load.out" 2>&1; then
    fail "cocytus-bench could not load 2000 records"
    cat "$dir/load.out"
    finish
fi
"$bench_bin" -s "$seeds" -n 2000 -v 512 -c 2 -r 0.5 --no-load -t 12 --verify-latest -q \
    --json "$dir/bench.json" >"$dir/bench.out" 2>&1 &
bench_pid=$!

lg_pids=""
seed=1
for t in $targets; do
    name=${t%%:*}
    rest=${t#*:}
    python3 "$link_garbage" --port "${rest%%:*}" --cluster "$cluster" --secret "$secret" \
        --seed "$seed" --seconds 4 --conns 12 >"$dir/link-garbage-$name.out" 2>&1 &
    lg_pids="$lg_pids $!:$name"
    seed=$((seed + 1))
done
for e in $lg_pids; do
    if wait "${e%%:*}"; then
        ok "link garbage at ${e#*:}: $(grep -o 'connections.*' "$dir/link-garbage-${e#*:}.out")"
    else
        fail "link garbage at ${e#*:}"
        cat "$dir/link-garbage-${e#*:}.out"
    fi
done

if GARBAGE_PORT=$coord_port GARBAGE_PIDS="$coord_pid $server_pids" GARBAGE_STORES=0 "$garbage_bin"; then
    ok "test_garbage at the coordinator's client port"
else
    fail "test_garbage at the coordinator's client port"
fi

if wait "$bench_pid"; then
    ok "cocytus-bench --verify-latest through the garbage: $(tail -n 1 "$dir/bench.out")"
else
    fail "cocytus-bench --verify-latest through the garbage (exit $?)"
    tail -n 20 "$dir/bench.out"
fi
bench_pid=""
# every operation kind: no error, miss or wrong value; some sets and gets
if python3 - "$dir/bench.json" <<'PY'
import json, sys
ops = {k: v for k, v in json.load(open(sys.argv[1])).items()
       if isinstance(v, dict) and "count" in v}
bad = [k for k, v in ops.items()
       if v.get("errors", 0) or v.get("misses", 0) or v.get("wrong", 0)]
sys.exit(1 if bad or ops.get("set", {}).get("count", 0) < 100
         or ops.get("get", {}).get("count", 0) < 100 else 0)
PY
then
    ok "the bench saw no error, miss or stale value"
else
    fail "the bench's figures: $(cat "$dir/bench.json" 2>/dev/null)"
fi

for pid in $coord_pid $server_pids; do
    kill -0 "$pid" 2>/dev/null || fail "process $pid is gone"
done
for t in $targets; do
    name=${t%%:*}
    rest=${t#*:}
    port=${rest%%:*}
    want=${rest#*:}
    if wait_for 30 port_holds "$port" "$want"; then
        ok "$name's link port $port holds its $want links and nothing else"
    else
        fail "$name's link port $port holds $(established "$port") connections, want $want"
    fi
done
st=$("$cli" --dir "$dir" status 2>&1)
if grep -q '^groups: 1 of 1 at full redundancy$' <<<"$st"; then
    ok "the coordinator saw nobody die"
else
    fail "the group is not at full redundancy after the garbage"
    echo "$st"
fi
logs_printable "$dir"

cluster_check_ok "$dir" verify "after the garbage"
cluster_check_ok "$dir" decode-check "after the garbage"
finish
