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
#     a meta command whose server is stopped during the proxy's
#     authentication exchange fails as not sent, not as "may have been
#     applied", and was not applied; with a wrong pair the proxy does not
#     start serving (it cannot read the map) and says why.
#  3. --server-auth in front of a 3-node cluster with one -Y server and
#     two without (the owner of the key "auth" among them): everything of
#     part 2's "through" works (the backends list the SASL mechanisms, the
#     meta connections send mn, and only the -Y server gets the pair); a
#     seed without -Y is noted, not refused; the owner of "auth" answers
#     `get auth` END (a proxy that presents the pair unasked would have
#     stored it there as an item).
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
elif what == "stalled":
    # the server is stopped before the proxy's meta connection to it got
    # through the authentication exchange: the ma was never written
    s, f = conn()
    s.settimeout(15)
    got = text(s, f, b"ma cnt v\r\n")[0]
    print("ma answered: %r" % got)
    check("a request never written is not 'may have been applied'",
          got.startswith(b"SERVER_ERROR") and b"may have been applied" not in got, True)
elif what == "cnt":
    s, f = conn()
    check("the counter is unchanged", text(s, f, b"get cnt\r\n", 3)[1], b"5")
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

# through_proxy LOG SEED WHAT: a proxy with --server-auth on SEED passes
# check.py's "through" (classic, meta and metadump requests).
through_proxy() {
    if start_proxy "$1" --seeds "$2" -W 5 --server-auth "$work/servers"; then
        pycheck through "$proxy_port"
    else
        fail "the proxy with --server-auth did not start in front of $3: $(tail -n 3 "$1")"
    fi
    stop_pid "$proxy_pid"
    proxy_pid=""
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
through_proxy "$work/proxy2.log" "127.0.0.1:$server_port" "a -Y server"
# A meta connection whose server stops during the authentication exchange
# holds nothing that may have been applied: its requests go again until
# the deadline, then fail as not sent.
if start_proxy "$work/proxy2b.log" --seeds "127.0.0.1:$server_port" -W 5 --server-auth "$work/servers"; then
    reply=$(mc "127.0.0.1:$proxy_port" 'set cnt 0 0 1\r\n5\r\n' | head -n 1)
    [ "$reply" = STORED ] || fail "set cnt through the proxy: $reply"
    kill -STOP "$server_pid"
    pycheck stalled "$proxy_port"
    kill -CONT "$server_pid"
    pycheck cnt "$proxy_port"
else
    fail "the proxy with --server-auth did not start: $(tail -n 3 "$work/proxy2b.log")"
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

# --- 3: --server-auth in front of a cluster with one -Y server and two
# without: the pair goes only to the one that asks ---
stop_pid "$server_pid"
server_pid=""
mixed_part() {
    local cdir=$1 owner yes="" i addr reply seeds
    # the process that owns the key "auth" must run without -Y (a set of
    # it elsewhere is MOVED, stored nowhere); node k, another, gets -Y
    reply=$(mc "$(awk 'NR == 1 { print $5 }' "$cdir/endpoints")" 'get auth\r\n' | head -n 1)
    case $reply in
        END) owner=$(awk 'NR == 1 { print $5 }' "$cdir/endpoints") ;;
        "SERVER_ERROR MOVED "*) owner=${reply##* } ;;
        *) fail "get auth on node 0: $reply"; return ;;
    esac
    for i in 0 1 2; do
        addr=$(awk -v n="$i" '$4 == n { print $5 }' "$cdir/endpoints")
        [ "$addr" != "$owner" ] && { yes=$i; yes_addr=$addr; break; }
    done
    (umask 077 && cp "$work/servers" "$cdir/auth")
    bash "$cluster_script" kill-node --node "$yes" --dir "$cdir" >/dev/null 2>&1
    if ! bash "$cluster_script" start-node --node "$yes" --dir "$cdir" >"$work/start-node.log" 2>&1; then
        fail "node $yes did not start with -Y: $(tail -n 3 "$work/start-node.log")"
        return
    fi
    # start-node returns once the node has forked its processes
    for _ in $(seq 50); do
        reply=$(mc "$yes_addr" 'version\r\n' 2>/dev/null | head -n 1)
        [ "$reply" = "CLIENT_ERROR unauthenticated" ] && break
        sleep 0.1
    done
    [ "$reply" = "CLIENT_ERROR unauthenticated" ] || { fail "node $yes ($yes_addr) does not ask: $reply"; return; }
    ok "node $yes ($yes_addr) runs with -Y; $owner, which owns the key auth, and one more do not"
    # the seed is the -Y process: the map fetch authenticates
    through_proxy "$work/proxy4.log" "$yes_addr" "the mixed cluster"
    # a seed without -Y: noted, not refused
    seeds=$owner
    if start_proxy "$work/proxy5.log" --seeds "$seeds" -W 5 --server-auth "$work/servers"; then
        reply=$(mc "127.0.0.1:$proxy_port" 'set seeded 0 0 2\r\nok\r\n' | head -n 1)
        if [ "$reply" = STORED ] && grep -q 'does not ask for credentials' "$work/proxy5.log"; then
            ok "a seed without -Y: the proxy serves and notes it: $(grep -m1 'does not ask' "$work/proxy5.log")"
        else
            fail "a seed without -Y: set $reply; $(tail -n 3 "$work/proxy5.log")"
        fi
    else
        fail "the proxy did not start on a seed without -Y: $(tail -n 3 "$work/proxy5.log")"
    fi
    stop_pid "$proxy_pid"
    proxy_pid=""
    reply=$(mc "$owner" 'get auth\r\n' | head -n 1)
    if [ "$reply" = END ]; then
        ok "the server without -Y that owns the key auth stored no credentials (get auth: END)"
    else
        fail "the server without -Y that owns the key auth answers get auth: $reply"
    fi
}
cluster_dir="$work/cluster3"
if cluster_up "$cluster_dir" $((NODES * 2 + 2)) 6000 9000 --nodes "$NODES" --scheme plain --no-proxy; then
    mixed_part "$cluster_dir"
else
    fail "cluster up failed"
fi
finish
