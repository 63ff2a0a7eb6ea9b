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
#     spare host), the proxy follows it within its deadline.
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
rm -f "$log" "$log.server" "$log.proxy" "$log.old" "$log.new"
finish
