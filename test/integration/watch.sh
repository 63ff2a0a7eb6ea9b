#!/usr/bin/env bash
# watch.sh - memcached's `watch` log streams (memcached/watch.c).
#
# A plain cocytus-server: watch_check.py checks the replies to watch's
# arguments, the lines of fetchers, mutations and connevents for a client
# session word for word (and, when memcached is installed, that memcached
# writes the same lines for the same session), that a watcher runs no
# commands of its own, that one that does not read loses lines (counted,
# and told "skipped=N") while clients are served, and that a closed
# watcher is forgotten; memcached's limit of 20 watchers, and 20 that do
# not read costing clients little; connevents' close reasons.  A second
# server with -m 2 and an idle timeout: evictions, and an idle client's
# close.  Then a data process of an RS(2,3) group: a replicated set and
# append are logged once the parity processes acknowledged them, with
# the joined size, and a key another process serves (MOVED) logs nothing.
set -u

script_dir=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$script_dir/lib.sh"
need_built "$server_bin" "$build_dir/cocytus/cocytus-node"

dir=$(mktemp -d "${TMPDIR:-/tmp}/watch.XXXXXX")
server_pid=""
mc_pid=""
evict_pid=""
cleanup() {
    stop_pid "$server_pid"
    stop_pid "$mc_pid"
    stop_pid "$evict_pid"
    cluster_remove "$dir/rs"
    rm -rf "$dir"
}
on_exit cleanup

start_server "$dir/evict.log" -m 2 -o idle_timeout=1 || { fail "server -m 2 did not start"; finish; }
evict_pid=$server_pid
evict_port=$server_port
start_server "$dir/server.log" || { fail "server did not start"; finish; }

mc_args=()
mc_bin=$(command -v memcached || true)
if [ -n "$mc_bin" ]; then
    for _ in 1 2 3; do
        mc_port=$(pick_port) || continue
        mc_user=()
        [ "$(id -u)" -eq 0 ] && mc_user=(-u nobody)
        "$mc_bin" -p "$mc_port" -l 127.0.0.1 -U 0 "${mc_user[@]}" </dev/null >"$dir/mc.log" 2>&1 &
        mc_pid=$!
        if wait_port "$mc_pid" "$mc_port"; then
            mc_args=(--memcached "127.0.0.1:$mc_port")
            break
        fi
        stop_pid "$mc_pid"
        mc_pid=""
    done
else
    echo "# memcached is not installed: our lines are checked alone"
fi

if timeout 180 python3 "$script_dir/watch_check.py" --target "127.0.0.1:$server_port" \
        --evict-target "127.0.0.1:$evict_port" "${mc_args[@]}"; then
    ok "watch_check.py"
else
    fail "watch_check.py"
fi
kill -0 "$server_pid" 2>/dev/null && ok "the server is still up" || fail "the server died"
if grep -qE "Sanitizer|runtime error" "$dir/server.log" "$dir/evict.log"; then
    fail "sanitizer report"
    grep -h -A 20 -E "Sanitizer|runtime error" "$dir/server.log" "$dir/evict.log" | head -40
fi

# --- a data process of an RS(2,3) group ---
cluster_up "$dir/rs" 6 14000 22000 --nodes 1 --scheme rs:2:3 --no-proxy || { fail "cluster did not start"; finish; }
data0=$(awk '$1 == "data" && $2 == 0 && $3 == 0 { print $5 }' "$dir/rs/endpoints")
if timeout 60 python3 - "$data0" <<'PYEOF'; then
import socket, sys, time
host, port = sys.argv[1].rsplit(":", 1)
addr = (host, int(port))
w = socket.create_connection(addr, timeout=5)
w.sendall(b"watch fetchers mutations\r\n")
assert w.recv(100) == b"OK\r\n"
c = socket.create_connection(addr, timeout=5)
mine = None
for i in range(200):
    key = b"wkey%d" % i
    c.sendall(b"get " + key + b"\r\n")
    reply = b""
    while not reply.endswith(b"\r\n") or reply.startswith(b"VALUE"):
        reply += c.recv(1000)
        if reply.endswith(b"END\r\n"):
            break
    if reply == b"END\r\n":
        mine = key
        break
assert mine is not None, "no key served by this data process"
moved = None
for i in range(200):
    key = b"mkey%d" % i
    c.sendall(b"get " + key + b"\r\n")
    reply = c.recv(1000)
    if b"MOVED" in reply:
        moved = key
        break
assert moved is not None, "no key served elsewhere"
# One request at a time: the lookup line of a write pipelined behind
# another write of the same key would show the key as it was before the
# earlier write was acknowledged (docs/compat.md, watch).
for req, want in [(b"set " + mine + b" 0 0 3\r\nabc\r\n", b"STORED\r\n"),
                  (b"append " + mine + b" 0 0 2\r\nxy\r\n", b"STORED\r\n"),
                  (b"get " + mine + b"\r\n", b"VALUE " + mine + b" 0 5\r\nabcxy\r\nEND\r\n")]:
    c.sendall(req)
    got = b""
    deadline = time.time() + 5
    while len(got) < len(want) and time.time() < deadline:
        got += c.recv(1000)
    assert got == want, got
time.sleep(0.3)
w.settimeout(0.5)
lines = []
try:
    while True:
        d = w.recv(65536)
        if not d:
            break
        lines += d.decode().splitlines()
except socket.timeout:
    pass
k = mine.decode()
body = [l.split(" ", 2)[2].replace(" cfd=%s" % l.split("cfd=")[1].split()[0], "") for l in lines]
expect = ["type=item_get key=%s status=not_found clsid=0 size=0" % k,
          "type=item_get key=%s status=not_found clsid=0 size=0" % k,
          "type=item_store key=%s status=stored cmd=set ttl=0 clsid=1 size=3" % k,
          "type=item_get key=%s status=found clsid=1 size=3" % k,
          "type=item_store key=%s status=stored cmd=append ttl=0 clsid=1 size=5" % k,
          "type=item_get key=%s status=found clsid=1 size=5" % k]
assert body == expect, "\n".join(body)
assert not any(moved.decode() in l for l in lines), "a MOVED key was logged"
PYEOF
    ok "data process: a replicated set and append logged once acknowledged; MOVED keys not logged"
else
    fail "data process watch"
fi
finish
