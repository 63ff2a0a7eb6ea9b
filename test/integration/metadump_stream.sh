#!/usr/bin/env bash
# metadump_stream.sh - a server writes `lru_crawler metadump` a piece at a
# time (memcached/proto_text.c, conn_stream; engine walk): one plain
# cocytus-server with 400,000 keys, then metadump_stream.py checks that a
# dump its client does not read costs the server a few pieces, not the
# whole listing, while other clients are answered; that it lists every key
# once and the request pipelined behind it is answered after its END; that
# a dump read slowly while the hash table doubles lists every key that
# stayed once and none twice; and that abandoned and concurrent dumps
# leave the server well.  The server is stopped with SIGTERM at the end and
# its log must hold no sanitizer report.
set -u

script_dir=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$script_dir/lib.sh"
need_built "$server_bin"

dir=$(mktemp -d "${TMPDIR:-/tmp}/metadump_stream.XXXXXX")
server_pid=""
cleanup() {
    stop_pid "$server_pid"
    rm -rf "$dir"
}
on_exit cleanup

start_server "$dir/server.log" -m 1024 || { fail "server did not start"; exit 1; }
timeout 240 python3 "$script_dir/metadump_stream.py" --target "127.0.0.1:$server_port" \
    --pid "$server_pid" --keys 400000 || fail "metadump_stream.py"
stop_pid "$server_pid"
server_pid=""
if grep -qE "Sanitizer|runtime error" "$dir/server.log"; then
    fail "sanitizer report in the server's log"
    head -40 "$dir/server.log"
else
    ok "no sanitizer report in the server's log"
fi
finish
