#!/usr/bin/env bash
# routing.sh - make-check test of slot routing on real processes: a plain
# cocytus-server without --cluster still answers `config get cluster` with
# ERROR (as memcached does); then a 3-node plain cluster from
# scripts/cluster, where every process must answer the same map (covering
# slots 0-16383), serve the keys of its own slots, and answer MOVED naming
# the right process for the others (text: every keyed command and a
# multi-get; binary: a get); `cocytus-cli map` must find the map on every
# process.  Slots are computed here in bash, a second implementation of the
# one-at-a-time hash.  The trap always cleans up.
set -u

script_dir=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$script_dir/lib.sh"
NODES=3
NKEYS=40

need_built "$server_bin" "$build_dir/cocytus/cocytus-node"

dir=$(mktemp -d "${TMPDIR:-/tmp}/routing.XXXXXX")
server_pid=""

cleanup() {
    stop_pid "$server_pid"
    cluster_remove "$dir"
}
on_exit cleanup

# slot_of KEY: one-at-a-time hash & 16383 (ASCII keys).
slot_of() {
    local key=$1 h=0 i c
    for ((i = 0; i < ${#key}; i++)); do
        printf -v c '%d' "'${key:i:1}"
        h=$(((h + c) & 0xFFFFFFFF))
        h=$(((h + (h << 10)) & 0xFFFFFFFF))
        h=$((h ^ (h >> 6)))
    done
    h=$(((h + (h << 3)) & 0xFFFFFFFF))
    h=$((h ^ (h >> 11)))
    h=$(((h + (h << 15)) & 0xFFFFFFFF))
    echo $((h & 16383))
}

# --- a plain server without --cluster: config get cluster is ERROR ---
if start_server "$dir/plain.log"; then
    reply=$(mc "127.0.0.1:$server_port" 'config get cluster\r\n')
    [ "$reply" = ERROR ] || fail "plain server: config get cluster -> '$reply', want ERROR"
    reply=$(mc "127.0.0.1:$server_port" 'set a 0 0 1\r\nx\r\n')
    [ "$reply" = STORED ] || fail "plain server: set -> '$reply'"
    stop_pid "$server_pid"
    server_pid=""
    ok "plain server without --cluster: config get cluster is ERROR, keys served"
else
    fail "could not start a plain server"
fi

# --- a 3-node plain cluster ---
# servers and the coordinator: 2 ports each
cluster_up "$dir" $((2 * NODES + 2)) 26000 32000 --nodes "$NODES" --scheme plain --no-proxy \
    --memory 8 || { fail "cluster up"; exit 1; }
mapfile -t addrs < <(awk '{ print $5 }' "$dir/endpoints")
[ "${#addrs[@]}" -eq "$NODES" ] || { fail "endpoints has ${#addrs[@]} lines"; exit 1; }
ok "cluster up: ${addrs[*]}"

# --- the same map from every process ---
first_map=""
for a in "${addrs[@]}"; do
    map=$(mc "$a" 'config get cluster\r\n')
    if [ -z "$first_map" ]; then
        first_map=$map
    elif [ "$map" != "$first_map" ]; then
        fail "config get cluster of $a differs from ${addrs[0]}'s"
    fi
done
mapfile -t lines <<<"$first_map"
# CONFIG cluster 0 <bytes> / epoch / endpoints / ranges / (empty) / END
[ "${#lines[@]}" -eq 6 ] || fail "map reply has ${#lines[@]} lines: $first_map"
body="${lines[1]}"$'\n'"${lines[2]}"$'\n'"${lines[3]}"$'\n'
[ "${lines[0]}" = "CONFIG cluster 0 ${#body}" ] || fail "header '${lines[0]}', body is ${#body} bytes"
[ "${lines[1]}" = 1 ] || fail "epoch '${lines[1]}', want 1"
want_eps=""
for a in "${addrs[@]}"; do
    want_eps+="${want_eps:+ }${a%:*}|${a%:*}|${a##*:}"
done
[ "${lines[2]}" = "$want_eps" ] || fail "endpoints '${lines[2]}', want '$want_eps'"
[ "${lines[4]}" = "" ] && [ "${lines[5]}" = END ] || fail "map reply does not end with an empty line and END"

# owner[slot] from the ranges, which must cover 0-16383 in order
declare -a owner=()
next=0
for range in ${lines[3]}; do
    first=${range%%-*}
    rest=${range#*-}
    last=${rest%%:*}
    idx=${rest#*:}
    [ "$first" -eq "$next" ] && [ "$last" -ge "$first" ] && [ "$idx" -lt "$NODES" ] \
        || { fail "bad range '$range' after slot $((next - 1))"; break; }
    for ((s = first; s <= last; s++)); do
        owner[s]=$idx
    done
    next=$((last + 1))
done
[ "$next" -eq 16384 ] || fail "ranges end at slot $((next - 1)), want 16383"
ok "every process answers the same map (${#first_map} bytes)"

cli_out=$("$build_dir/client/cocytus-cli" --dir "$dir" map 2>&1)
cli_rc=$?
[ "$cli_rc" -eq 0 ] && grep -q "^$NODES of $NODES processes answer this map\$" <<<"$cli_out" \
    && grep -q "^map of ${addrs[0]}: epoch 1, $NODES endpoints, 16384 slots\$" <<<"$cli_out" \
    || fail "cocytus-cli map (exit $cli_rc): $cli_out"
ok "cocytus-cli map: every process has the map"

# --- each process serves its slots and sends the others to the owner ---
declare -a served=(0 0 0)
for ((k = 0; k < NKEYS; k++)); do
    key="route:$k"
    slot=$(slot_of "$key")
    o=${owner[slot]}
    served[o]=$((served[o] + 1))
    moved="SERVER_ERROR MOVED $slot 1 ${addrs[o]}"
    for ((i = 0; i < NODES; i++)); do
        a=${addrs[i]}
        if [ "$i" -eq "$o" ]; then
            reply=$(mc "$a" "set $key 3 0 2\r\nv$i\r\n")
            [ "$reply" = STORED ] || fail "set $key at its owner $a: '$reply'"
            reply=$(mc "$a" "get $key\r\n" | tr '\n' '|')
            [ "$reply" = "VALUE $key 3 2|v$i|END|" ] || fail "get $key at its owner $a: '$reply'"
            continue
        fi
        for req in "set $key 0 0 1\r\nx\r\n" "get $key\r\n" "gets $key\r\n" "gat 0 $key\r\n" \
            "delete $key\r\n" "incr $key 1\r\n" "touch $key 0\r\n" "append $key 0 0 1\r\nx\r\n" \
            "cas $key 0 0 1 1\r\nx\r\n"; do
            reply=$(mc "$a" "$req")
            [ "$reply" = "$moved" ] || fail "${req%%\\r*} at $a: '$reply', want '$moved'"
        done
    done
done
for ((i = 0; i < NODES; i++)); do
    [ "${served[i]}" -gt 0 ] || fail "none of $NKEYS keys is served by ${addrs[i]}"
done
ok "own keys served, others MOVED to their owner (keys per process: ${served[*]})"

# --- a multi-get with keys of several processes: MOVED for the first foreign key ---
own="" foreign=""
for ((k = 0; k < NKEYS; k++)); do
    key="route:$k"
    o=${owner[$(slot_of "$key")]}
    if [ "$o" -eq 0 ] && [ -z "$own" ]; then own=$key; fi
    if [ "$o" -ne 0 ] && [ -z "$foreign" ]; then foreign=$key; fo=$o; fi
done
reply=$(mc "${addrs[0]}" "get $own $foreign $own\r\n" | tr '\n' '|')
[ "$reply" = "SERVER_ERROR MOVED $(slot_of "$foreign") 1 ${addrs[fo]}|" ] \
    || fail "multi-get '$own $foreign' at ${addrs[0]}: '$reply'"
reply=$(mc "${addrs[0]}" "set $foreign 0 0 1 noreply\r\nx\r\nget $own\r\n" | tr '\n' '|')
[ "$reply" = "VALUE $own 3 2|v0|END|" ] || fail "noreply set of a foreign key said something: '$reply'"
ok "multi-get across processes: MOVED for the first foreign key; noreply stays silent"

# A get's MOVED is written at once, like its reply would be: a get with a
# key too long after it drops only what was not written (difftest --target
# against a data process: the redirect was lost, seed 7 case 80).
exec 3<>"/dev/tcp/${addrs[0]%:*}/${addrs[0]##*:}"
printf 'get %s\r\nget %s\r\nmn\r\n' "$foreign" "$(printf 'a%.0s' $(seq 251))" >&3
reply=""
while IFS= read -r -t 2 line <&3; do
    reply="$reply${line%$'\r'}|"
    [ "${line%$'\r'}" = MN ] && break
done
exec 3<&- 3>&-
[ "$reply" = "SERVER_ERROR MOVED $(slot_of "$foreign") 1 ${addrs[fo]}|CLIENT_ERROR bad command line format|MN|" ] &&
    ok "a get's MOVED survives the error of a get with a key too long after it" ||
    fail "get $foreign, then a key too long: '$reply'"

# --- binary protocol: a get of a foreign key is status 0x0007 with the text ---
bin_get() {
    local addr=$1 key=$2 want_len=$3
    local klen
    klen=$(printf '%02x' "${#key}")
    exec 3<>"/dev/tcp/${addr%:*}/${addr##*:}" || return 1
    printf "\\x80\\x00\\x00\\x$klen\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x$klen\\x12\\x34\\x56\\x78\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x00%s" "$key" >&3
    timeout 3 head -c "$want_len" <&3 | od -An -v -tx1 | tr -d ' \n'
    exec 3<&- 3>&-
}
text="SERVER_ERROR MOVED $(slot_of "$foreign") 1 ${addrs[fo]}"
hex=$(bin_get "${addrs[0]}" "$foreign" $((24 + ${#text})))
body_hex=$(printf '%s' "$text" | od -An -v -tx1 | tr -d ' \n')
want_hex=$(printf '8100000000000007%08x12345678%016x%s' "${#text}" 0 "$body_hex")
[ "$hex" = "$want_hex" ] || fail "binary get of $foreign at ${addrs[0]}: $hex, want $want_hex"
ok "binary get of a foreign key: not my vbucket, '$text'"

finish
