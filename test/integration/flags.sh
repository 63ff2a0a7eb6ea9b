#!/usr/bin/env bash
# flags.sh - memcached's -X, -W, -k and -N on a plain server (memcached/main.c).
#
# -X: `lru_crawler metadump` and `stats cachedump` are refused with
# memcached's words and `stats settings` says dump_enabled no (difftest_short.sh
# compares the replies with memcached -X -W byte for byte); -W: watch is
# refused with memcached's words; -k: the server locks its memory (or warns
# as memcached does when the limit refuses; an ASan build does not try)
# and serves; -N: accepted.  A bad value of a long-only option (--group) is
# named by its long name.
set -u

script_dir=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$script_dir/lib.sh"
need_built "$server_bin"

dir=$(mktemp -d "${TMPDIR:-/tmp}/flags.XXXXXX")
cleanup() {
    stop_pid "${server_pid:-}"
    rm -rf "$dir"
}
on_exit cleanup

start_server "$dir/x.log" -X -W || { fail "-X -W: $(head -2 "$dir/x.log")"; finish; }
addr=127.0.0.1:$server_port
mc "$addr" "set a 0 0 1\r\nx\r\n" >/dev/null
check() {
    local what=$1 request=$2 want=$3 got
    got=$(mc "$addr" "$request" | tail -n 1)
    [ "$got" = "$want" ] && ok "$what: $got" || fail "$what: '$got' (want '$want')"
}
check "-X lru_crawler metadump all" "lru_crawler metadump all\r\n" "ERROR metadump not allowed"
check "-X stats cachedump" "stats cachedump 1 1\r\n" "CLIENT_ERROR stats cachedump not allowed"
check "-W watch" "watch fetchers\r\n" "CLIENT_ERROR watch commands not allowed"
dump=$(mc "$addr" "stats settings\r\n" | awk '$2 == "dump_enabled" { print $3 }')
[ "$dump" = no ] && ok "-X: stats settings dump_enabled no" || fail "-X: dump_enabled '$dump'"
check "-X: get still served" "get a\r\n" "END"
stop_pid "$server_pid"

start_server "$dir/k.log" -k -N 4 || { fail "-k -N 4: $(head -2 "$dir/k.log")"; finish; }
out=$(mc "127.0.0.1:$server_port" "version\r\n")
case $out in
    VERSION*) ok "-k -N 4: serves ($(grep -m1 -E 'mlockall|napi' "$dir/k.log" || echo "memory locked"))" ;;
    *) fail "-k -N 4: '$out'" ;;
esac
locked=$(awk '/^VmLck:/ { print $2 }' "/proc/$server_pid/status" 2>/dev/null)
if grep -q "mlockall() failed\|AddressSanitizer build" "$dir/k.log"; then
    ok "-k: not locked here, and said so: $(grep -m1 "mlockall\|AddressSanitizer" "$dir/k.log")"
elif [ "${locked:-0}" -gt 0 ]; then
    ok "-k: $locked kB locked (VmLck)"
else
    fail "-k: no memory locked and no warning (VmLck '${locked:-}')"
fi

out=$("$server_bin" --group=x 2>&1)
rc=$?
want="cocytus-server: invalid value 'x' for --group"
[ "$rc" -ne 0 ] && [ "$out" = "$want" ] && ok "--group=x refused: $out" \
    || fail "--group=x: exit $rc, '$out' (want '$want')"
finish
