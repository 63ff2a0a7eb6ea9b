#!/usr/bin/env bash
# limits.sh - make-check test of the limits against misuse
# (docs/security.md): a plain server with -c 4 and -o idle_timeout=1 and a
# cocytus-proxy with -c 4 -i 1 in front of it.  Each refuses a connection
# beyond its limit with an error, closes an idle client (waited for up to
# 20 s: nothing here depends on speed), and closes on a request line that
# can never be valid: the server silently, as memcached 1.6 does, the
# proxy after "CLIENT_ERROR line too long".
# A server out of file descriptors pauses accepting and recovers.
set -u

script_dir=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$script_dir/lib.sh"

proxy_bin=${COCYTUS_PROXY:-$build_dir/client/cocytus-proxy}
need_built "$server_bin" "$proxy_bin"
command -v python3 >/dev/null || { echo "SKIP: python3 is needed"; exit 77; }

dir=$(mktemp -d "${TMPDIR:-/tmp}/limits.XXXXXX")
server_pid="" proxy_pid=""
cleanup() {
    stop_pid "$proxy_pid"
    stop_pid "$server_pid"
    rm -rf "$dir"
}
on_exit cleanup

start_server "$dir/server.log" -c 4 -o idle_timeout=1 -v || { fail "server did not start"; exit 1; }
start_proxy "$dir/proxy.log" --seeds "127.0.0.1:$server_port" -c 4 -i 1 ||
    { fail "proxy did not start"; exit 1; }

# probe PORT WHAT: one python client that checks the three limits on PORT
# and prints one line per finding.
probe() {
    python3 - "$1" <<'PY'
import socket, sys, time
port = int(sys.argv[1])

def connect():
    return socket.create_connection(("127.0.0.1", port), timeout=20)

def read_all(s):
    """Everything until the peer closes (or 20 s)."""
    data = b""
    try:
        while True:
            chunk = s.recv(4096)
            if not chunk:
                return data, True
            data += chunk
    except (socket.timeout, ConnectionResetError):
        return data, False if not data else True

# An overlong line (no newline, not a get): an error, then the close.
s = connect()
s.sendall(b"set " + b"k" * 5000)
data, closed = read_all(s)
print("long-line %s %s" % (data.split(b"\r\n")[0].decode(errors="replace").replace(" ", "_"),
                           "closed" if closed else "open"))
s.close()

# An idle client is closed (within 20 s; the timeout is 1 s).
s = connect()
s.sendall(b"version\r\n")
first = s.recv(100)
data, closed = read_all(s)
print("idle %s" % ("closed" if closed and first.startswith(b"VERSION") else "open"))
s.close()

# Connections beyond the limit: refused with an error, or closed at once.
held, refused = [], 0
for i in range(8):
    c = connect()
    c.sendall(b"version\r\n")
    reply = b""
    try:
        reply = c.recv(100)
    except (socket.timeout, ConnectionResetError):
        pass
    if not reply.startswith(b"VERSION"):
        refused += 1
    held.append(c)
print("limit refused %d" % refused)
PY
}

for target in server proxy; do
    port=$server_port
    [ "$target" = proxy ] && port=$proxy_port
    out=$(probe "$port")
    if [ "$target" = server ]; then
        grep -q "^long-line  closed$" <<<"$out" \
            && ok "$target: an overlong line is closed at once, without a reply (memcached's way)" \
            || fail "$target: overlong line: $(grep long-line <<<"$out")"
    else
        grep -q "^long-line CLIENT_ERROR_line_too_long closed$" <<<"$out" \
            && ok "$target: an overlong line gets 'CLIENT_ERROR line too long' and the close" \
            || fail "$target: overlong line: $(grep long-line <<<"$out")"
    fi
    grep -q "^idle closed$" <<<"$out" && ok "$target: an idle client is closed" \
        || fail "$target: idle client: $(grep idle <<<"$out")"
    refused=$(awk '$1 == "limit" { print $3 }' <<<"$out")
    [ -n "$refused" ] && [ "$refused" -ge 4 ] && ok "$target: $refused of 8 connections beyond -c 4 refused" \
        || fail "$target: connections beyond the limit: '$out'"
done
grep -q "idle for [0-9]* s" "$dir/server.log" || fail "the server's log does not say it closed an idle client"

# Out of file descriptors (ulimit -n 80): the server and the proxy stop
# accepting for a while instead of waking up for the same connection again
# and again (the proxy's libevent listener logged a line each time), and
# serve the waiting connections once descriptors are free.
stop_pid "$proxy_pid"
proxy_pid=""

# flood PORT: 120 connections at once, 60 closed, the other 60 asked for
# their version; prints "answered N of 60".
flood() {
    python3 - "$1" <<'PY'
import socket, sys
port = int(sys.argv[1])
socks = [socket.create_connection(("127.0.0.1", port), timeout=20) for _ in range(120)]
for s in socks[:60]:
    s.close()
answered = 0
for s in socks[60:]:
    try:
        s.sendall(b"version\r\n")
        if s.recv(100).startswith(b"VERSION"):
            answered += 1
    except OSError:
        pass
print("answered %d of 60" % answered)
PY
}

# low_fds LOG PROGRAM ARGS...: PROGRAM with an open-files limit of 80, in
# the background; sets fd_pid.
low_fds() {
    local log=$1
    shift
    (ulimit -Sn 80 && ulimit -Hn 80 && exec "$@" </dev/null >"$log" 2>&1) &
    fd_pid=$!
}

fd_port=$(pick_port)
low_fds "$dir/fd.log" "$server_bin" -p "$fd_port" -l 127.0.0.1 -U 0
if wait_port "$fd_pid" "$fd_port"; then
    out=$(flood "$fd_port")
    paused=$(mc "127.0.0.1:$fd_port" "stats\r\n" | awk '$2 == "listen_disabled_num" { print $3 }')
    [ "$out" = "answered 60 of 60" ] && [ "${paused:-0}" -gt 0 ] \
        && ok "server out of descriptors: accepting paused ($paused times), all 60 waiting connections served" \
        || fail "server out of descriptors: '$out', listen_disabled_num '$paused'"
    grep -q "open-files limit (80) is below -c 1024" "$dir/fd.log" \
        || fail "the server does not warn about the open-files limit: $(head -2 "$dir/fd.log")"
else
    fail "server with ulimit -n 80 did not start: $(head -3 "$dir/fd.log")"
fi
stop_pid "$fd_pid"

fd_port=$(pick_port)
low_fds "$dir/fd-proxy.log" "$proxy_bin" -p "$fd_port" -l 127.0.0.1 --seeds "127.0.0.1:$server_port"
if wait_port "$fd_pid" "$fd_port"; then
    out=$(flood "$fd_port")
    lines=$(wc -l <"$dir/fd-proxy.log")
    [ "$out" = "answered 60 of 60" ] && [ "$lines" -lt 50 ] \
        && ok "proxy out of descriptors: all 60 waiting connections served, $lines log lines" \
        || fail "proxy out of descriptors: '$out', $lines log lines: $(sort "$dir/fd-proxy.log" | uniq -c | sort -rn | head -2)"
else
    fail "proxy with ulimit -n 80 did not start: $(head -3 "$dir/fd-proxy.log")"
fi
stop_pid "$fd_pid"

finish
