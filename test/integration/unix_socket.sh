#!/usr/bin/env bash
# unix_socket.sh - memcached's -s and -a: a plain server listens on a Unix
# socket instead of TCP (memcached/unixsock.c).
#
# A server started with -s PATH -a 0770 serves pymemcache over the socket
# (set, get, incr, delete, the binary-safe value of a multi-get), makes no
# TCP listener on the -p port, and says so in `stats settings`
# (domain_socket PATH, umask 770, as memcached prints them) and `stats
# conns`.  The socket file has mode 0770.  A second server on the same
# path is refused (the first one keeps serving), also with the socket file
# removed under the first (it holds PATH.lock), and of two started at
# once exactly one serves; a path that is a regular file is refused (and
# left as it was), and so is -s with a cluster role.  A server killed with
# SIGKILL leaves its socket file, and the next one on the path replaces
# it; a clean stop removes it.  Run as root with -u nobody, the file is
# made by and belongs to nobody, as memcached's would, and an unknown
# user is refused before anything is made.  cocytus-proxy --unix-socket
# serves pymemcache in front of a server the same way.
set -u

script_dir=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$script_dir/lib.sh"
need_built "$server_bin" "$build_dir/client/cocytus-proxy"
need_pymemcache

dir=$(mktemp -d "${TMPDIR:-/tmp}/unix_socket.XXXXXX")
pids=""
cleanup() {
    local p
    for p in $pids; do stop_pid "$p"; done
    rm -rf "$dir"
}
on_exit cleanup
sock=$dir/mc.sock

# socket_up PID PATH: waits (5 s at most) until PATH is a socket that
# accepts; false if PID exited first or it never did.
socket_up() {
    for _ in $(seq 50); do
        kill -0 "$1" 2>/dev/null || return 1
        [ -S "$2" ] && "$py" - "$2" <<'EOF' 2>/dev/null && return 0
import socket, sys
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
EOF
        sleep 0.1
    done
    return 1
}

# start_unix LOG ARGS...: a server on $sock; sets pid once the file is a
# socket that accepts (false if it exited or never did).
start_unix() {
    local log=$1
    shift
    "$server_bin" -s "$sock" -U 0 "$@" </dev/null >"$log" 2>&1 &
    pid=$!
    pids="$pids $pid"
    socket_up "$pid" "$sock"
}

# py_run SCRIPT: runs a pymemcache script against $sock; prints its output.
py_run() {
    "$py" - "$sock" <<EOF
import sys
from pymemcache.client.base import Client
c = Client(sys.argv[1], connect_timeout=2, timeout=2)
$1
EOF
}

port=$(pick_port) || { fail "no free port"; finish; }
start_unix "$dir/first.log" -a 0770 -p "$port" -l 127.0.0.1 ||
    { fail "the server did not come up on $sock: $(cat "$dir/first.log")"; finish; }
first=$pid

mode=$(stat -c '%F %a' "$sock")
[ "$mode" = "socket 770" ] && ok "-a 0770: $sock is a socket with mode 770" ||
    fail "$sock: '$mode', expected 'socket 770'"

out=$(py_run '
c.set("k", b"hello")
c.set("bin", b"a\r\nb\x00c")
c.set("n", b"41")
print(c.get("k"), c.incr("n", 1), c.get_many(["k", "bin", "missing"]))
print(c.delete("k", noreply=False), c.get("k"))
st = c.stats("settings")
print(st[b"domain_socket"], st[b"umask"])
print(sorted(set(v for k, v in c.stats("conns").items() if k.endswith(b":addr"))))' 2>&1)
# (pymemcache reads umask as octal, as memcached prints it: 770 is 504)
expected="b'hello' 42 {'k': b'hello', 'bin': b'a\\r\\nb\\x00c'}
True None
b'$sock' 504
[b'unix:', b'unix:$sock']"
[ "$out" = "$expected" ] && ok "pymemcache over the socket: set, get, incr, get_many, delete, stats settings" ||
    fail "pymemcache over the socket: got
$out
expected
$expected"

if ss -Hltnp 2>/dev/null | grep -q "pid=$first,"; then
    fail "-s made a TCP listener (memcached makes none): $(ss -Hltnp | grep "pid=$first,")"
elif ! ss -Hlxp 2>/dev/null | grep -q "pid=$first,"; then
    fail "ss does not list the server's Unix listener: $(ss -Hlxp | head -3)"
else
    ok "no TCP listener (-p $port was given), only the Unix one"
fi

# Refused before its loop starts: it exits at once (one that took the
# path would serve until timeout stops it).
timeout 5 "$server_bin" -s "$sock" -U 0 -p 0 </dev/null >"$dir/second.log" 2>&1
rc=$?
if [ "$rc" = 1 ] && grep -q "another server is listening on it" "$dir/second.log"; then
    ok "a second server on the path is refused: $(head -1 "$dir/second.log")"
else
    fail "a second server on the path (exit $rc): $(cat "$dir/second.log")"
fi
out=$(py_run 'c.set("still", b"here"); print(c.get("still"))' 2>&1)
[ "$out" = "b'here'" ] && ok "the first server still serves its socket" ||
    fail "the first server after the refused second: $out"

echo "keep me" >"$dir/plain-file"
timeout 5 "$server_bin" -s "$dir/plain-file" -U 0 -p 0 </dev/null >"$dir/file.log" 2>&1 && fail "-s on a regular file started"
if grep -q "exists and is not a socket" "$dir/file.log" && [ "$(cat "$dir/plain-file")" = "keep me" ]; then
    ok "a path that is a regular file is refused and left as it was"
else
    fail "-s on a regular file: $(cat "$dir/file.log")"
fi

timeout 5 "$server_bin" -s "$dir/data.sock" --role data -U 0 </dev/null >"$dir/role.log" 2>&1 && fail "-s with --role data started"
grep -q "serves the plain role only" "$dir/role.log" && ok "-s with a cluster role is refused" ||
    fail "-s with --role data: $(cat "$dir/role.log")"

timeout 5 "$server_bin" -s "$dir/bad.sock" -a 999 -U 0 </dev/null >"$dir/mask.log" 2>&1 && fail "-a 999 started"
grep -q "invalid value '999' for -a" "$dir/mask.log" && ok "-a 999 (not octal) is refused" ||
    fail "-a 999: $(cat "$dir/mask.log")"

# Two started at once on a new path: one serves, the other is refused.
for round in 1 2 3; do
    rsock=$dir/race$round.sock
    "$server_bin" -s "$rsock" -U 0 -p 0 </dev/null >"$dir/race$round-a.log" 2>&1 &
    ra=$!
    "$server_bin" -s "$rsock" -U 0 -p 0 </dev/null >"$dir/race$round-b.log" 2>&1 &
    rb=$!
    pids="$pids $ra $rb"
    # the refused one exits by itself (a slow start under ASan: up to 5 s)
    for _ in $(seq 50); do
        alive=0
        for p in $ra $rb; do kill -0 "$p" 2>/dev/null && alive=$((alive + 1)); done
        refused=$(cat "$dir/race$round-a.log" "$dir/race$round-b.log" | grep -c "another server is listening")
        [ "$alive" -le 1 ] && [ "$refused" -ge 1 ] && [ -S "$rsock" ] && break
        sleep 0.1
    done
    sleep 0.2   # a second refusal, or a late exit, would show now
    alive=0
    for p in $ra $rb; do kill -0 "$p" 2>/dev/null && alive=$((alive + 1)); done
    refused=$(cat "$dir/race$round-a.log" "$dir/race$round-b.log" | grep -c "another server is listening")
    if [ "$alive" = 1 ] && [ "$refused" = 1 ] && [ -S "$rsock" ]; then
        ok "two servers started at once on one path (round $round): one serves, one refused"
    else
        fail "two servers at once (round $round): $alive alive, $refused refused: $(cat "$dir/race$round-"*.log)"
    fi
    stop_pid "$ra"
    stop_pid "$rb"
done

kill -KILL "$first"
wait "$first" 2>/dev/null
[ -S "$sock" ] && ok "SIGKILL left the socket file behind" || fail "no socket file after SIGKILL"
start_unix "$dir/third.log" -p 0 || fail "a server did not replace the stale socket: $(cat "$dir/third.log")"
third=$pid
out=$(py_run 'c.set("again", b"1"); print(c.get("again"), c.get("still"))' 2>&1)
[ "$out" = "b'1' None" ] && ok "the next server replaced the stale socket file and serves (empty, a new process)" ||
    fail "after replacing the stale socket: $out"
mode=$(stat -c '%a' "$sock")
[ "$mode" = 700 ] && ok "default -a: mode 700" || fail "default mode: $mode"
stop_pid "$third"
[ -e "$sock" ] && fail "a clean stop left $sock" || ok "a clean stop removed the socket file"

# The lock, not the file, says who holds the path.
start_unix "$dir/fourth.log" -p 0 || fail "a server on $sock: $(cat "$dir/fourth.log")"
fourth=$pid
rm -f "$sock"
timeout 5 "$server_bin" -s "$sock" -U 0 -p 0 </dev/null >"$dir/fifth.log" 2>&1
rc=$?
if [ "$rc" = 1 ] && grep -q "another server is listening on it (it holds $sock.lock)" "$dir/fifth.log"; then
    ok "with the socket file removed under a live server, another is still refused"
else
    fail "a server on a path whose file was removed under a live one (exit $rc): $(cat "$dir/fifth.log")"
fi
stop_pid "$fourth"

if [ "$(id -u)" -eq 0 ] && id nobody >/dev/null 2>&1; then
    timeout 5 "$server_bin" -s "$dir/nouser.sock" -u no_such_user_cocytus -U 0 -p 0 \
        </dev/null >"$dir/nouser.log" 2>&1
    if grep -q "can't find the user no_such_user_cocytus" "$dir/nouser.log" &&
        [ ! -e "$dir/nouser.sock" ] && [ ! -e "$dir/nouser.sock.lock" ]; then
        ok "an unknown -u user is refused before anything is made"
    else
        fail "-u no_such_user: $(cat "$dir/nouser.log"); $(ls "$dir")"
    fi
    mkdir "$dir/run" && chown nobody "$dir/run" && chmod 0755 "$dir/run" && chmod 0755 "$dir"
    sock=$dir/run/mc.sock
    start_unix "$dir/user.log" -p 0 -u nobody -a 0700 || fail "-u nobody: $(cat "$dir/user.log")"
    owner=$(stat -c '%U' "$sock" "$sock.lock" | tr '\n' ' ')
    [ "$owner" = "nobody nobody " ] && ok "-u nobody: the socket file and its lock belong to nobody" ||
        fail "-u nobody: the socket file and its lock belong to $owner"
    stop_pid "$pid"
    [ -e "$sock" ] && fail "-u nobody: a clean stop left $sock" ||
        ok "-u nobody: a clean stop removed the socket file"
else
    echo "note: not root: -u not tried"
fi
# cocytus-proxy --unix-socket: the clients of a host reach the cluster
# through a local proxy on a Unix socket (twemproxy's listen on a path).
start_server "$dir/backend.log" || fail "a plain server for the proxy did not start"
pids="$pids $server_pid"
psock=$dir/proxy.sock
"$build_dir/client/cocytus-proxy" --seeds "127.0.0.1:$server_port" --unix-socket "$psock" \
    --unix-mask 0660 </dev/null >"$dir/proxy.log" 2>&1 &
proxy=$!
pids="$pids $proxy"
socket_up "$proxy" "$psock" || fail "the proxy did not accept on $psock: $(cat "$dir/proxy.log")"
mode=$(stat -c '%F %a' "$psock" 2>&1)
[ "$mode" = "socket 660" ] && ok "cocytus-proxy --unix-socket --unix-mask 0660: mode 660" ||
    fail "the proxy's socket: '$mode': $(cat "$dir/proxy.log")"
sock=$psock
out=$(py_run '
c.set("via_proxy", b"yes")
print(c.get_many(["via_proxy", "nothing"]), c.incr("via_proxy_n", 1), c.add("a1", b"1", noreply=False))
st = c.stats("settings")
print(st[b"domain_socket"], st[b"umask"])' 2>&1)
direct=$(mc "127.0.0.1:$server_port" "get via_proxy\r\n" | head -1)
if [ "$out" = "{'via_proxy': b'yes'} None True
b'$psock' 432" ] && [ "$direct" = "VALUE via_proxy 0 3" ]; then
    ok "pymemcache through the proxy's Unix socket reaches the server behind it; its stats settings say domain_socket and umask 660"
else
    fail "through the proxy's Unix socket: '$out', the server has '$direct'"
fi
timeout 5 "$build_dir/client/cocytus-proxy" --seeds "127.0.0.1:$server_port" --unix-socket "$psock" \
    </dev/null >"$dir/proxy2.log" 2>&1
rc=$?
[ "$rc" = 1 ] && grep -q "another server is listening on it" "$dir/proxy2.log" &&
    ok "a second proxy on the path is refused" ||
    fail "a second proxy on the path (exit $rc): $(cat "$dir/proxy2.log")"
stop_pid "$proxy"
[ -e "$psock" ] && fail "the proxy's clean stop left $psock" || ok "the proxy's clean stop removed its socket file"
logs_printable "$dir"
finish
