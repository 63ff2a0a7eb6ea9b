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
# servers' logs.  Between the two, the plain server's 400,000-key listing
# through cocytus-proxy by a client that reads nothing for 2 s: every key
# comes, then the reply of the request behind it, and the proxy's peak RSS
# grows by less than half the listing (it streams, and stops reading the
# server while its client lags); then three listings pipelined come one
# after the other, whole, with one listing connection open at a time.
set -u

script_dir=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$script_dir/lib.sh"
proxy_bin=${COCYTUS_PROXY:-$build_dir/client/cocytus-proxy}
need_built "$server_bin" "$build_dir/cocytus/cocytus-node" "$proxy_bin"

dir=$(mktemp -d "${TMPDIR:-/tmp}/metadump_stream.XXXXXX")
server_pid=""
stopped=""
cleanup() {
    local p
    stop_pid "$proxy_pid"
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
# --- the same listing through cocytus-proxy ---
# The proxy streams a listing: a client that reads nothing for 2 s and
# then the rest costs the proxy a few buffers (it stops reading the
# server), not the listing (about 30 MB here; it kept all of it, twice,
# until 2026-12-03).
proxy_pid=""
# (ASan keeps freed memory in quarantine, 256 MB by default: a little
# here, so that its RSS is the proxy's)
if ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}quarantine_size_mb=2" \
    start_proxy "$dir/proxy.log" --seeds "127.0.0.1:$server_port" -W 5; then
    cat >"$dir/proxy_dump.py" <<'PYEOF'
import os, socket, sys, time
port, pid = int(sys.argv[1]), int(sys.argv[2])
def hwm():
    for line in open("/proc/%d/status" % pid):
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
before = hwm()
s = socket.create_connection(("127.0.0.1", port), timeout=60)
s.sendall(b"lru_crawler metadump all\r\nversion\r\n")
time.sleep(2)
data = bytearray()
while not data.endswith(b"END\r\nVERSION ") and b"\r\nVERSION " not in data[-64:]:
    chunk = s.recv(1 << 16)
    if not chunk:
        break
    data += chunk
while not data.endswith(b"\r\n"):
    data += s.recv(1 << 16)
keys = set(l.split(b" ")[0] for l in bytes(data).split(b"\n") if l.startswith(b"key="))
grew = hwm() - before
print("listing of %d bytes, %d keys, then %r; the proxy's peak RSS grew %d kB"
      % (len(data), len(keys), bytes(data[-24:]), grew))
ok = len(keys) >= 300000 and grew * 1024 < len(data) // 2 and b"END\r\nVERSION " in data[-64:]
# three listings pipelined: one after the other, each whole, and one
# listing connection at a time (each listing takes one per server)
fds = lambda: len(os.listdir("/proc/%d/fd" % pid))
base, most = fds(), 0
s.sendall(b"lru_crawler metadump all\r\n" * 3 + b"version\r\n")
data = bytearray()
while b"VERSION " not in data[-64:]:
    chunk = s.recv(1 << 16)
    if not chunk:
        break
    data += chunk
    most = max(most, fds())
while not data.endswith(b"\r\n"):
    data += s.recv(1 << 16)
parts = bytes(data).split(b"END\r\n")
counts = [sum(1 for l in p.split(b"\n") if l.startswith(b"key=")) for p in parts[:3]]
print("three pipelined listings: %s keys, %d END; the proxy held at most %d descriptors more"
      % (counts, len(parts) - 1, most - base))
ok = ok and counts == [len(keys)] * 3 and len(parts) == 4 and most - base <= 1
sys.exit(0 if ok else 1)
PYEOF
    if out=$(timeout 120 python3 "$dir/proxy_dump.py" "$proxy_port" "$proxy_pid" 2>&1); then
        ok "a metadump through the proxy: $out"
    else
        fail "a metadump through the proxy: $out"
    fi
else
    fail "the proxy did not start: $(tail -n 3 "$dir/proxy.log")"
fi
stop_pid "$proxy_pid"
proxy_pid=""
no_sanitizer_report "$dir/proxy.log"
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
