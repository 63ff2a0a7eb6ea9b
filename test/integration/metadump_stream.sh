#!/usr/bin/env bash
# metadump_stream.sh - a server writes `lru_crawler metadump` a piece at a
# time (memcached/proto_text.c, conn_stream; engine walk).  First one plain
# cocytus-server (-o idle_timeout=1) with 400,000 keys: metadump_stream.py
# checks that a dump its client does not read for 2.5 s costs the server a
# few pieces, not the whole listing, while other clients are answered, and
# is not cut off by the idle timeout; that it lists every key once and the
# request pipelined behind it is answered after its END; that a dump read
# slowly while the hash table doubles lists every key that stayed once and
# none twice; and that abandoned and concurrent dumps leave the server
# well.  Then one RS(2,3) group: a dump pipelined behind a set that waits
# for a stopped parity process must not make the data process spin, and
# comes whole once the set is acknowledged.  No sanitizer report in the
# servers' logs.
set -u

script_dir=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$script_dir/lib.sh"
need_built "$server_bin" "$build_dir/cocytus/cocytus-node"

dir=$(mktemp -d "${TMPDIR:-/tmp}/metadump_stream.XXXXXX")
server_pid=""
stopped=""
cleanup() {
    local p
    stop_pid "$server_pid"
    for p in $stopped; do kill -CONT "$p" 2>/dev/null; done
    cluster_remove "$dir/rs"
    rm -rf "$dir"
}
on_exit cleanup

no_sanitizer_report() {
    if grep -qE "Sanitizer|runtime error" "$1"; then
        fail "sanitizer report in $1"
        grep -A 20 -E "Sanitizer|runtime error" "$1" | head -40
    else
        ok "no sanitizer report in $(basename "$1")"
    fi
}

# --- one plain server ---
start_server "$dir/server.log" -m 1024 -o idle_timeout=1 || { fail "server did not start"; exit 1; }
timeout 240 python3 "$script_dir/metadump_stream.py" --target "127.0.0.1:$server_port" \
    --pid "$server_pid" --keys 400000 || fail "metadump_stream.py"
stop_pid "$server_pid"
server_pid=""
no_sanitizer_report "$dir/server.log"

# --- a data process whose write waits ---
mkdir -p "$dir/rs"
cluster_up "$dir/rs" 6 14000 22000 --nodes 1 --scheme rs:2:3 --routing off --no-proxy \
    --no-coordinator --restart off || { fail "cluster up"; finish; }
dp=$(awk '$1 == "data" && $3 == 0 { print $5; exit }' "$dir/rs/endpoints")
dp_pid=$(awk '$1 == "data" && $3 == 0 { print $6; exit }' "$dir/rs/endpoints")
pp_pid=$(awk '$1 == "parity" { print $6; exit }' "$dir/rs/endpoints")
if [ -n "$dp" ] && [ -n "$dp_pid" ] && [ -n "$pp_pid" ]; then
    stopped=$pp_pid     # the test stops and resumes it; cleanup resumes it anyway
    timeout 120 python3 "$script_dir/metadump_stream.py" --behind-write --target "$dp" \
        --pid "$dp_pid" --parity-pid "$pp_pid" --keys 3000 || fail "metadump_stream.py --behind-write"
    no_sanitizer_report "$dir/rs/data-0-0.log"
else
    fail "no data or parity process in endpoints"
fi
finish
