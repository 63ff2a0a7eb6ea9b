#!/usr/bin/env bash
# proxy_auth.sh - client authentication through cocytus-proxy (-Y FILE, as
# memcached's -Y) and the proxy's own credentials towards servers that run
# with -Y (--server-auth FILE).
#
#  1. A proxy with -Y in front of a 3-node plain cluster: in ASCII a
#     command before authenticating gets CLIENT_ERROR unauthenticated, a
#     wrong pair CLIENT_ERROR authentication failure, the right pair STORED
#     and then the connection works; in binary every command before SASL
#     gets status 0x20, list-mechanisms answers PLAIN, a wrong PLAIN pair
#     0x20, the right one 0x00 and then the connection works.  stats counts
#     auth_cmds and auth_errors.
#  2. A cocytus-server with -Y behind a proxy: with --server-auth naming a
#     pair the server knows, sets and gets go through (the proxy's map
#     fetch and its meta commands' text connections authenticate in ASCII,
#     its backend connections with SASL PLAIN; ms, mg, md and a metadump
#     go through);
#     with a wrong pair the proxy does not start serving (it cannot read
#     the map) and says why.
#  3. --server-auth towards a server without -Y: the proxy would present
#     the pair unasked (the server would store the ASCII set as an item),
#     so it does not start, and says why; the server stored nothing.
# Runs on free loopback ports; everything started is stopped by the trap.
set -u

NODES=3

script_dir=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$script_dir/lib.sh"
proxy_bin=${COCYTUS_PROXY:-$build_dir/client/cocytus-proxy}

need_built "$server_bin" "$proxy_bin"
if ! command -v python3 >/dev/null 2>&1; then
    echo "SKIP: python3 not installed (apt-get install python3)"
    exit 77
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/proxy_auth.XXXXXX")
proxy_pid=""
server_pid=""
cluster_dir=""

cleanup() {
    stop_pid "$proxy_pid"
    proxy_pid=""
    stop_pid "$server_pid"
    server_pid=""
    cluster_remove "$cluster_dir"
    cluster_dir=""
    rm -rf "$work"
}
on_exit cleanup

# The protocol checks: python3 CHECK PORT; prints "ok: ..." / "FAIL: ...".
cat >"$work/check.py" <<'EOF'
import socket, struct, sys

what, port = sys.argv[1], int(sys.argv[2])
failed = False

def check(label, got, want):
    global failed
    if got == want:
        print("ok: %s: %r" % (label, got))
    else:
        failed = True
        print("FAIL: %s: got %r, want %r" % (label, got, want))

def conn():
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    return s, s.makefile("rb")

def text(s, f, req, lines=1):
    s.sendall(req)
    return [f.readline().rstrip(b"\r\n") for _ in range(lines)]

def breq(op, key=b"", val=b"", extras=b"", opaque=0x1234):
    return struct.pack(">BBHBBHIIQ", 0x80, op, len(key), len(extras), 0, 0,
                       len(key) + len(extras) + len(val), opaque, 0) + extras + key + val

def bread(f):
    h = f.read(24)
    _, op, kl, el, _, st, bl, opq, _ = struct.unpack(">BBHBBHIIQ", h)
    body = f.read(bl)
    return st, body[el + kl:], opq

if what == "text":
    s, f = conn()
    check("get before auth", text(s, f, b"get k\r\n"), [b"CLIENT_ERROR unauthenticated"])
    check("wrong pair", text(s, f, b"set a 0 0 11\r\nalice wrong\r\n"),
          [b"CLIENT_ERROR authentication failure"])
    check("still refused", text(s, f, b"version\r\n"), [b"CLIENT_ERROR unauthenticated"])
    check("right pair", text(s, f, b"set a 0 0 13\r\nalice secret1\r\n"), [b"STORED"])
    check("set after auth", text(s, f, b"set k 0 0 2\r\nhi\r\n"), [b"STORED"])
    check("get after auth", text(s, f, b"get k\r\n", 3), [b"VALUE k 0 2", b"hi", b"END"])
    s2, f2 = conn()
    check("other connection still refused", text(s2, f2, b"get k\r\n"),
          [b"CLIENT_ERROR unauthenticated"])
elif what == "binary":
    s, f = conn()
    s.sendall(breq(0x00, b"k"))
    check("get before auth", bread(f)[:2], (0x20, b"Auth failure"))
    s.sendall(breq(0x20))
    check("list mechanisms", bread(f)[:2], (0, b"PLAIN"))
    s.sendall(breq(0x21, b"PLAIN", b"\0bob\0nope"))
    check("wrong pair", bread(f)[:2], (0x20, b"Auth failure"))
    s.sendall(breq(0x21, b"PLAIN", b"\0bob\0pw2", opaque=77))
    check("right pair", bread(f), (0, b"Authenticated", 77))
    s.sendall(breq(0x00, b"k"))
    st, body, _ = bread(f)
    check("get after auth", (st, body), (0, b"hi"))
elif what == "stats":
    s, f = conn()
    text(s, f, b"set a 0 0 13\r\nalice secret1\r\n")
    s.sendall(b"stats\r\n")
    stats = {}
    while True:
        line = f.readline().rstrip(b"\r\n").decode()
        if line == "END" or not line:
            break
        _, k, v = line.split(" ", 2)
        stats[k] = v
    check("auth_cmds counted", int(stats.get("auth_cmds", 0)) >= 5, True)
    check("auth_errors counted", int(stats.get("auth_errors", 0)) >= 5, True)
elif what == "through":
    s, f = conn()
    for i in range(20):
        text(s, f, b"set key%d 0 0 5\r\nval%02d\r\n" % (i, i))
    got = [text(s, f, b"get key%d\r\n" % i, 3)[1] for i in range(20)]
    check("20 values through the proxy", got, [b"val%02d" % i for i in range(20)])
    # meta commands travel on the proxy's text connections, which must
    # authenticate too (they timed out against a -Y server before)
    check("ms through the proxy", text(s, f, b"ms mkey 3\r\nabc\r\n"), [b"HD"])
    check("mg through the proxy", text(s, f, b"mg key3 v\r\n", 2), [b"VA 5", b"val03"])
    check("md through the proxy", text(s, f, b"md mkey\r\n"), [b"HD"])
    # a metadump's text connection authenticates before the dump is written
    s.sendall(b"lru_crawler metadump all\r\n")
    dumped = set()
    while True:
        line = f.readline()
        if not line or line == b"END\r\n":
            break
        if line.startswith(b"key="):
            dumped.add(line.split()[0][4:])
    check("metadump through the proxy lists the 20 keys",
          dumped == {b"key%d" % i for i in range(20)}, True)
sys.exit(1 if failed else 0)
EOF

pycheck() {
    local out
    out=$(timeout 30 python3 "$work/check.py" "$@" 2>&1)
    local rc=$?
    echo "$out"
    [ "$rc" -eq 0 ] || fail "python3 check.py $* failed (exit $rc)"
}

umask 077
printf 'alice:secret1\nbob:pw2\n' >"$work/clients"
printf 'proxy:Px-9f3a\n' >"$work/servers"
printf 'proxy:not-it\n' >"$work/wrong"

# --- 1: clients of the proxy ---
cluster_dir="$work/cluster"
if cluster_up "$cluster_dir" $((NODES * 2 + 2)) 6000 9000 --nodes "$NODES" --scheme plain --no-proxy; then
    seeds=$(awk 'NR == 1 { print $5 }' "$cluster_dir/endpoints")
    if start_proxy "$work/proxy1.log" --seeds "$seeds" -W 5 -Y "$work/clients"; then
        pycheck text "$proxy_port"
        pycheck binary "$proxy_port"
        pycheck stats "$proxy_port"
    else
        fail "the proxy with -Y did not start: $(tail -n 3 "$work/proxy1.log")"
    fi
    stop_pid "$proxy_pid"
    proxy_pid=""
else
    fail "cluster up failed"
fi
cluster_remove "$cluster_dir"
cluster_dir=""

# --- 2: servers with -Y behind the proxy ---
if ! start_server "$work/server.log" -Y "$work/servers"; then
    fail "cocytus-server -Y did not start: $(tail -n 3 "$work/server.log")"
    finish
fi
if start_proxy "$work/proxy2.log" --seeds "127.0.0.1:$server_port" -W 2 --server-auth "$work/servers"; then
    pycheck through "$proxy_port"
else
    fail "the proxy with --server-auth did not start: $(tail -n 3 "$work/proxy2.log")"
fi
stop_pid "$proxy_pid"
proxy_pid=""
# The proxy must give up and exit (not whether its port answers: under
# make -j2 check another test may take the port it was given meanwhile).
proxy3_port=$(pick_port)
timeout 30 "$proxy_bin" -p "$proxy3_port" -l 127.0.0.1 --seeds "127.0.0.1:$server_port" -W 1 \
    --server-auth "$work/wrong" </dev/null >"$work/proxy3.log" 2>&1
rc=$?
if [ "$rc" -eq 0 ] || [ "$rc" -eq 124 ]; then
    fail "the proxy started although the server refuses its credentials (exit $rc)"
elif grep -q 'refused the credentials' "$work/proxy3.log"; then
    ok "wrong --server-auth: the proxy exits ($rc) and says: $(grep -m1 'refused' "$work/proxy3.log")"
else
    fail "wrong --server-auth: no clear message (exit $rc): $(tail -n 3 "$work/proxy3.log")"
fi

# --- 3: --server-auth towards a server without -Y: refused at start ---
stop_pid "$server_pid"
server_pid=""
if ! start_server "$work/server-open.log"; then
    fail "cocytus-server without -Y did not start: $(tail -n 3 "$work/server-open.log")"
    finish
fi
timeout 30 "$proxy_bin" -p "$(pick_port)" -l 127.0.0.1 --seeds "127.0.0.1:$server_port" -W 1 \
    --server-auth "$work/servers" </dev/null >"$work/proxy4.log" 2>&1
rc=$?
open_reply=$(mc "127.0.0.1:$server_port" 'get auth\r\n' | head -n 1)
if [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && grep -q 'does not ask for credentials' "$work/proxy4.log" &&
    [ "$open_reply" = END ]; then
    ok "--server-auth towards a server without -Y: the proxy exits ($rc), says why, stored nothing"
else
    fail "--server-auth towards a server without -Y (exit $rc, get auth: $open_reply): $(tail -n 3 "$work/proxy4.log")"
fi
finish
