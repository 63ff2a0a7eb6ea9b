#!/usr/bin/env bash
# multi_address.sh - a host name with two addresses.  A host on two
# networks is often known by both, and which address a resolver gives
# first depends on the asking host (RFC 6724 prefers the one nearest its
# own): a peer may dial the address a server did not bind, and a record
# left from a host's old address may come first.  So:
#   - a link listener binds every address of its name (memcached's -l
#     does so for the client port already), and a link that cannot connect
#     dials the name's next address on its next attempt (test_link's
#     "addresses" case);
#   - cocytus-proxy, whose seed and map name a server by such a name while
#     the server listens on the second address only, reaches it: a connect
#     that fails moves the backend to the next address;
#   - and when a name moves to another address (a node replaced on a
#     spare host), the proxy follows it within its deadline;
#   - and a name the proxy meets first while the name server does not
#     answer does not stop its worker (below).
# The name exists only in this test: it re-runs itself in a mount
# namespace of its own (unshare -m) where /etc/hosts is a file it wrote,
# giving the name 127.0.0.1 and 127.0.0.3.  Skipped (77) if no mount
# namespace can be had.
set -u

script_dir=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$script_dir/lib.sh"
need_built "$server_bin" "$build_dir/client/cocytus-proxy" "$build_dir/test/unit/test_link"
name=cocytus-two-addresses.test

if [ -z "${MULTI_ADDRESS_HOSTS:-}" ]; then
    hosts=$(mktemp "${TMPDIR:-/tmp}/multi_address.XXXXXX")
    trap 'rm -f "$hosts"' EXIT
    printf '127.0.0.1 localhost\n127.0.0.3 %s\n127.0.0.1 %s\n' "$name" "$name" >"$hosts"
    unshare_cmd=(unshare -m)
    [ "$(id -u)" -eq 0 ] || unshare_cmd=(unshare -r -m)
    if ! "${unshare_cmd[@]}" true 2>/dev/null; then
        echo "SKIP: cannot make a mount namespace (${unshare_cmd[*]})"
        exit 77
    fi
    MULTI_ADDRESS_HOSTS=$hosts "${unshare_cmd[@]}" bash "$0"
    exit $?
fi

# In the namespace: the name is ours.  Private first, so that nothing
# mounted here can reach the host's mount table (util-linux's unshare makes
# it so already; older ones did not).
mount --make-rprivate / 2>/dev/null
mount --bind "$MULTI_ADDRESS_HOSTS" /etc/hosts ||
    { echo "SKIP: cannot bind-mount a file over /etc/hosts"; exit 77; }
mapfile -t addrs < <(getent ahostsv4 "$name" | awk '$2 == "STREAM" { print $1 }')
if [ "${#addrs[@]}" -ne 2 ]; then
    # (a hosts cache such as nscd's does not read this file)
    fail "$name resolves to '${addrs[*]}', not to 127.0.0.1 and 127.0.0.3" \
        "($(grep '^hosts' /etc/nsswitch.conf 2>/dev/null))"
    finish
fi
first=${addrs[0]} second=${addrs[1]}
ok "$name resolves to $first, then $second"

# ---- links ----
out=$(cd "$build_dir/test" && TEST_LINK_MULTI_NAME=$name CK_RUN_CASE=addresses \
    ./unit/test_link 2>&1)
if [ $? -eq 0 ] && printf '%s\n' "$out" | grep -q "100%: Checks: 2,"; then
    ok "links: a listener binds both addresses, a dial moves on to the second"
else
    printf '%s\n' "$out" | tail -5
    fail "test_link's address cases"
fi

# ---- the proxy ----
server_pid="" proxy_pid=""
cleanup() {
    stop_pid "$proxy_pid"
    stop_pid "$server_pid"
}
on_exit cleanup
log=$(mktemp "${TMPDIR:-/tmp}/multi_address_log.XXXXXX")
user_args=()
[ "$(id -u)" -eq 0 ] && user_args=(-u root)
for _ in 1 2 3 4 5; do
    port=$(pick_port) || continue
    "$server_bin" -p "$port" -l "$second" -U 0 "${user_args[@]}" </dev/null >"$log.server" 2>&1 &
    server_pid=$!
    for _ in $(seq 30); do
        (exec 3<>"/dev/tcp/$second/$port") 2>/dev/null && break
        sleep 0.1
    done
    (exec 3<>"/dev/tcp/$second/$port") 2>/dev/null && break
    stop_pid "$server_pid"
    server_pid=""
done
[ -n "$server_pid" ] || { fail "no server on $second"; finish; }
if (exec 3<>"/dev/tcp/$first/$port") 2>/dev/null; then
    fail "something listens on $first:$port: the test would not test anything"
    finish
fi
start_proxy "$log.proxy" --seeds "$name:$port" ||
    { cat "$log.proxy"; fail "proxy did not start"; finish; }
proxy="127.0.0.1:$proxy_port"
good=0
for i in 1 2 3 4 5; do
    reply=$(MC_TIMEOUT=5 mc "$proxy" "set two_$i 0 0 2\r\nv$i\r\n")
    got=$(MC_TIMEOUT=5 mc "$proxy" "get two_$i\r\n" | sed -n 2p)
    [ "$reply" = STORED ] && [ "$got" = "v$i" ] && good=$((good + 1))
done
if [ "$good" = 5 ]; then
    ok "through the proxy: 5 sets and gets on $name:$port (listening on $second only)"
else
    fail "through the proxy: $good of 5 sets read back (last reply '${reply:-nothing in 5 s}')"
    tail -5 "$log.proxy"
fi
stop_pid "$proxy_pid"
stop_pid "$server_pid"
proxy_pid="" server_pid=""

# ---- a name that moves ----
# A server at the name's only address, another on a second address with
# the same port; the proxy has an idle connection to the first.  The
# first stops (SIGSTOP: its kernel still accepts, as an old host's that is
# only cut off would not; either way it never answers) and the name moves
# to the second, as for a node replaced on a spare host.  A get through
# the proxy must be answered by the second server within the proxy's
# 2 s deadline.  (On loopback the lookup answers before the reconnect, so
# the build before passes too; dropping a connection being made, or idle,
# at an address the name no longer has is for slow lookups, as in the
# netns drills with a silent name server.)
moved=cocytus-moved.test
printf '127.0.0.1 localhost\n127.0.0.1 %s\n' "$moved" >"$MULTI_ADDRESS_HOSTS"
old_pid="" new_pid=""
cleanup() {
    [ -n "$old_pid" ] && kill -CONT "$old_pid" 2>/dev/null
    stop_pid "$proxy_pid"
    stop_pid "$old_pid"
    stop_pid "$new_pid"
}
for _ in 1 2 3 4 5; do
    port=$(pick_port) || continue
    "$server_bin" -p "$port" -l 127.0.0.1 -U 0 "${user_args[@]}" </dev/null >"$log.old" 2>&1 &
    old_pid=$!
    "$server_bin" -p "$port" -l 127.0.0.3 -U 0 "${user_args[@]}" </dev/null >"$log.new" 2>&1 &
    new_pid=$!
    up=0
    for _ in $(seq 30); do
        (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null &&
            (exec 3<>"/dev/tcp/127.0.0.3/$port") 2>/dev/null && { up=1; break; }
        sleep 0.1
    done
    [ "$up" = 1 ] && break
    stop_pid "$old_pid"
    stop_pid "$new_pid"
    old_pid="" new_pid=""
done
[ -n "$old_pid" ] || { fail "no servers for the moving name"; finish; }
start_proxy "$log.proxy" --seeds "$moved:$port" ||
    { cat "$log.proxy"; fail "proxy did not start"; finish; }
proxy="127.0.0.1:$proxy_port"
[ "$(mc "$proxy" "set where 0 0 3\r\nold\r\n")" = STORED ] && ok "set through the proxy to the first address" ||
    fail "set through the proxy to the first address"
[ "$(mc "127.0.0.3:$port" "set where 0 0 3\r\nnew\r\n")" = STORED ] || fail "set on the second server"
kill -STOP "$old_pid"
printf '127.0.0.1 localhost\n127.0.0.3 %s\n' "$moved" >"$MULTI_ADDRESS_HOSTS"
t0=${EPOCHREALTIME/./}
got=$(MC_TIMEOUT=5 mc "$proxy" "get where\r\n" | head -2 | tr '\r\n' '  ')
took=$(((${EPOCHREALTIME/./} - t0) / 1000))
case $got in
    *"VALUE where 0 3 new"*) ok "after the name moved, a get is answered by the new address in $took ms" ;;
    *) fail "after the name moved, a get answered '$got' after $took ms"
       tail -5 "$log.proxy" ;;
esac
stop_pid "$proxy_pid"
stop_pid "$old_pid"
stop_pid "$new_pid"
proxy_pid="" old_pid="" new_pid=""

# ---- a name first met while the name server does not answer ----
# A server the map names by a name the proxy has not looked up yet (a
# node added to the cluster) while the name server is silent: the build
# before looked it up on the worker's loop, and every client of that
# worker waited out the resolver (here 2 s per try, A and AAAA: a
# "version" sent 0.2 s after the get was answered after 1.8 s), while the
# get itself got nothing in 7 s.  Now the lookup runs on a thread: the
# worker answers at once, the get gets a SERVER_ERROR by its deadline,
# and once the name resolves again requests go through.  Needs root for
# a name server on port 53 (a socket that never answers) and glibc's
# "dns" in nsswitch.conf; skipped with a note otherwise.
late=cocytus-late.test
silent_dns() {
    [ "$(id -u)" -eq 0 ] && [ -f /etc/resolv.conf ] && grep -q '^hosts:.*dns' /etc/nsswitch.conf ||
        return 1
    python3 -c 'import socket, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("127.0.0.77", 53))
print("ready", flush=True)
time.sleep(120)' >"$log.dns" 2>&1 &
    dns_pid=$!
    for _ in $(seq 30); do grep -q ready "$log.dns" && break; sleep 0.1; done
    grep -q ready "$log.dns" || return 1
    resolv=$(mktemp "${TMPDIR:-/tmp}/multi_address_resolv.XXXXXX")
    printf 'nameserver 127.0.0.77\noptions timeout:2 attempts:1\n' >"$resolv"
    mount --bind "$resolv" /etc/resolv.conf || return 1
    local t0=${EPOCHREALTIME/./}
    getent hosts no-such-name.cocytus.test >/dev/null
    [ $(((${EPOCHREALTIME/./} - t0) / 1000)) -ge 1500 ]
}
dns_pid="" cdir=""
cleanup() {
    stop_pid "$proxy_pid"
    # the cluster script and its processes find the name in /etc/hosts again
    printf '127.0.0.1 localhost\n127.0.0.1 %s\n' "$late" >"$MULTI_ADDRESS_HOSTS"
    [ -n "$cdir" ] && cluster_remove "$cdir"
    stop_pid "$dns_pid"
    rm -f "$log" "$log.server" "$log.proxy" "$log.old" "$log.new" "$log.dns" "${resolv:-}"
}
if ! silent_dns; then
    echo "note: no silent name server here (root, /etc/resolv.conf, nsswitch 'dns'): the first-lookup part is skipped"
    finish
fi
printf '127.0.0.1 localhost\n127.0.0.1 %s\n' "$late" >"$MULTI_ADDRESS_HOSTS"
cdir=$(mktemp -d "${TMPDIR:-/tmp}/multi_address_cluster.XXXXXX")
if ! COCYTUS_CLUSTER_HOST=$late cluster_up "$cdir" 4 24000 30000 --nodes 1 --scheme plain --no-proxy; then
    fail "a cluster named $late did not come up"
    finish
fi
data_port=$(awk '$1 == "plain" { n = split($5, a, ":"); print a[n]; exit }' "$cdir/endpoints")
grep -q " $late:$data_port " "$cdir/endpoints" || { cat "$cdir/endpoints"; fail "the map does not name $late"; finish; }
printf '127.0.0.1 localhost\n' >"$MULTI_ADDRESS_HOSTS"    # the name is the silent server's now
start_proxy "$log.proxy" --seeds "127.0.0.1:$data_port" ||
    { cat "$log.proxy"; fail "proxy did not start"; finish; }
proxy="127.0.0.1:$proxy_port"
MC_TIMEOUT=7 mc "$proxy" "get late_key\r\n" >"$log.get" 2>&1 &
get_pid=$!
sleep 0.2
t0=${EPOCHREALTIME/./}
v=$(mc "$proxy" "version\r\n")
took=$(((${EPOCHREALTIME/./} - t0) / 1000))
case $v in
    VERSION*) [ "$took" -lt 1000 ] &&
        ok "while $late is first looked up on a silent name server, the proxy answers in $took ms" ||
        fail "while $late is first looked up, the proxy answered only after $took ms" ;;
    *) fail "no VERSION from the proxy while $late is looked up ('$v' after $took ms)" ;;
esac
wait "$get_pid"
case $(cat "$log.get") in
    SERVER_ERROR*) ok "the get for $late's server: $(head -1 "$log.get")" ;;
    *) fail "the get for $late's server answered '$(cat "$log.get")'"; tail -5 "$log.proxy" ;;
esac
rm -f "$log.get"
printf '127.0.0.1 localhost\n127.0.0.1 %s\n' "$late" >"$MULTI_ADDRESS_HOSTS"
stored=""
for _ in $(seq 40); do
    [ "$(mc "$proxy" "set late_key 0 0 4\r\nlate\r\n")" = STORED ] && { stored=1; break; }
    sleep 0.25
done
[ -n "$stored" ] && [ "$(mc "$proxy" "get late_key\r\n" | sed -n 2p)" = late ] &&
    ok "once $late resolves, sets and gets go through" ||
    { fail "$late resolves again, but nothing was stored through the proxy in 10 s"; tail -5 "$log.proxy"; }
finish
