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
#     that fails moves the backend to the next address.
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
rm -f "$log" "$log.server" "$log.proxy"
finish
