#!/usr/bin/env bash
# client_tls.sh - a cluster whose processes' client ports speak TLS (the
# cluster file's client_tls line; `scripts/cluster up --client-tls-cert/
# -key/-ca`; docs/security.md, "TLS on client ports").  Certificates are
# made here with the openssl tool.  On a 3-node RS(2,3) cluster with a
# coordinator and cocytus-proxy (which dials the processes with the same
# files: --backend-tls-*):
#   - a process answers a TLS client that shows a certificate of the CA,
#     and nothing else: not a client in the clear, not one without a
#     certificate, not one with a certificate the CA did not sign; and it
#     goes on answering while a client holds part of a TLS record unsent;
#   - refresh_certs reads the files again (an error naming the missing key,
#     then OK);
#   - cocytus-cli (status, verify, decode-check) reads the cluster file's
#     client_tls line and works over TLS;
#   - cocytus-bench --verify through the proxy, text and meta commands
#     through the proxy (its backends, map fetches and meta connections
#     over TLS), runs through a kill of node 1 with no error; node 1 comes
#     back and the cluster is at full redundancy;
#   - a slot with keys moves (the copy dials the destination over TLS);
#   - a proxy that trusts another CA, or dials in the clear, gets no map and
#     says why.
# The trap stops the cluster.
set -u

script_dir=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$script_dir/lib.sh"
bench=$build_dir/bench/cocytus-bench
cli=$build_dir/client/cocytus-cli
server=$build_dir/memcached/cocytus-server
proxy_bin=$build_dir/client/cocytus-proxy
need_built "$build_dir/cocytus/cocytus-node" "$bench" "$cli" "$server" "$proxy_bin"

need_tls

dir=$(mktemp -d "${TMPDIR:-/tmp}/client_tls.XXXXXX")
other_proxy=""
cleanup() {
    [ -n "$other_proxy" ] && kill "$other_proxy" 2>/dev/null
    cluster_remove "$dir/c"
    rm -rf "$dir"
}
on_exit cleanup

certs=$top_srcdir/scripts/certs
{ bash "$certs" ca "$dir" && bash "$certs" signed "$dir" node IP:127.0.0.1 &&
    bash "$certs" self "$dir" rogue IP:127.0.0.1; } || { fail "could not make certificates"; finish; }

c=$dir/c
proxy_port=$(pick_port)
if ! cluster_up "$c" 20 14000 20000 --nodes 3 --scheme rs:2:3 --memory 32 --region 32 \
    --proxy-port "$proxy_port" --client-tls-cert "$dir/node.pem" \
    --client-tls-key "$dir/node.key" --client-tls-ca "$dir/ca.pem"; then
    fail "RS(2,3) cluster with client TLS did not come up"
    finish
fi
grep -q "^client_tls $dir/node.pem $dir/node.key $dir/ca.pem$" "$c/cluster.conf" &&
    ok "cluster.conf has the client_tls line" || fail "cluster.conf: no client_tls line"
proxy=$(cat "$c/proxy")
data0=$(group0_addr "$c" data 0)

# tls_ask ADDR REQUEST [openssl s_client options]: the first line a
# process answers REQUEST (printf %b) with, over TLS.
tls_ask() {
    local a=$1 req=$2
    shift 2
    { printf '%b' "$req"; sleep 0.5; } |
        timeout 5 openssl s_client -quiet -no_ign_eof -connect "$a" -CAfile "$dir/ca.pem" \
            -verify_return_error -verify_ip "${a%:*}" "$@" 2>/dev/null | head -n 1 | tr -d '\r'
}
reply=$(tls_ask "$data0" 'version\r\n' -cert "$dir/node.pem" -key "$dir/node.key")
case $reply in
    VERSION*) ok "data process 0 answers a TLS client with the CA's certificate: $reply" ;;
    *) fail "data process 0 over TLS: '$reply'" ;;
esac
reply=$(tls_ask "$data0" 'version\r\n')
[ -z "$reply" ] && ok "a TLS client without a certificate gets no answer" ||
    fail "a TLS client without a certificate was answered: $reply"
reply=$(tls_ask "$data0" 'version\r\n' -cert "$dir/rogue.pem" -key "$dir/rogue.key")
[ -z "$reply" ] && ok "a TLS client with a certificate the CA did not sign gets no answer" ||
    fail "a rogue client certificate was answered: $reply"
reply=$(MC_TIMEOUT=1 mc "$data0" 'version\r\n')
case $reply in
    VERSION*) fail "data process 0 answered in the clear: $reply" ;;
    *) ok "a client in the clear gets no answer" ;;
esac
# Part of a TLS record, and the rest never sent: the process must go on
# serving others (TLS holds the part; a read that claimed it as pending
# input would run again at once, for ever, and the loop never returned to
# its other connections).
exec 5<>"/dev/tcp/${data0%:*}/${data0##*:}"
printf '\x16\x03\x01\x02\x00%055d' 0 >&5
sleep 0.2
reply=$(tls_ask "$data0" 'version\r\n' -cert "$dir/node.pem" -key "$dir/node.key")
case $reply in
    VERSION*) ok "answered beside a client that sent part of a TLS record: $reply" ;;
    *) fail "not answered beside a client that sent part of a TLS record: '$reply'" ;;
esac
exec 5<&- 5>&-

# refresh_certs reads the client_tls files again: refused with the reason
# while the key is missing, OK once it is back.
cp "$dir/node.key" "$dir/good.key"
rm -f "$dir/node.key"
reply=$(tls_ask "$data0" 'refresh_certs\r\n' -cert "$dir/node.pem" -key "$dir/good.key")
case $reply in
    *"$dir/node.key"*) ok "refresh_certs without the key: $reply" ;;
    *) fail "refresh_certs without the key: '$reply'" ;;
esac
cp "$dir/good.key" "$dir/node.key"
reply=$(tls_ask "$data0" 'refresh_certs\r\n' -cert "$dir/node.pem" -key "$dir/node.key")
[ "$reply" = OK ] && ok "refresh_certs with the files back: OK" ||
    fail "refresh_certs with the files back: '$reply'"

out=$("$cli" --dir "$c" status 2>&1)
echo "$out" | grep -q "coding groups at full redundancy\|groups: 3 of 3 at full redundancy" &&
    ok "cocytus-cli status over TLS: $(echo "$out" | tail -n 1)" ||
    { fail "cocytus-cli status over TLS"; echo "$out" | tail -n 5; }

# Meta and text commands through the proxy: its meta connections and
# backends dial over TLS.
reply=$(mc "$proxy" 'ms tlsk 5 T0\r\nhello\r\n')
[ "$reply" = HD ] && ok "ms through the proxy: HD" || fail "ms through the proxy: '$reply'"
reply=$(mc "$proxy" 'mg tlsk v\r\n' | tr '\n' ' ')
[ "$reply" = "VA 5 hello " ] && ok "mg through the proxy: $reply" || fail "mg through the proxy: '$reply'"
reply=$(mc "$proxy" 'get tlsk\r\n' | tr '\n' ' ')
[ "$reply" = "VALUE tlsk 0 5 hello END " ] && ok "get through the proxy" ||
    fail "get through the proxy: '$reply'"

# A load through the proxy, verified, through a kill of node 1.
"$bench" -s "$proxy" -n 3000 --no-run -q >"$dir/load.out" 2>&1
grep -q "^total_errors=0" "$dir/load.out" && ok "3000 keys loaded through the proxy" ||
    { fail "load through the proxy"; tail -n 5 "$dir/load.out"; }
(sleep 2 && bash "$cluster_script" kill-node --node 1 --dir "$c" >"$dir/kill.out" 2>&1) &
killer=$!
out=$("$bench" -s "$proxy" -n 3000 --no-load -c 4 -r 0.5 -t 6 --verify -q 2>&1)
rc=$?
wait "$killer"
if [ "$rc" -eq 0 ] && echo "$out" | grep -q "^total_errors=0 total_wrong=0"; then
    ok "cocytus-bench --verify through the proxy, through a kill of node 1: $(echo "$out" | grep '^phase=run')"
else
    fail "cocytus-bench through the proxy, through a kill of node 1 (exit $rc)"
    echo "$out" | tail -n 6
fi
grep -q "killed" "$dir/kill.out" && ok "node 1 was killed during the load" ||
    fail "node 1 was not killed: $(cat "$dir/kill.out")"
bash "$cluster_script" start-node --node 1 --dir "$c" >/dev/null 2>&1
cluster_healthy_again "$c" "after node 1 came back"

# A slot with keys moves: the copy dials the destination over TLS.
key_owners "$c" 3000 || fail "cannot read the slot map"
slot=$(awk -v a="$data0" 'NR == FNR { if ($1 == "slots") { split($2, r, "-"); if ($3 == a) { lo[n] = r[1]; hi[n++] = r[2] } } next }
                         { for (i = 0; i < n; i++) if ($1 >= lo[i] && $1 <= hi[i]) { print $1; exit } }' \
           "$c/map.txt" "$c/all.slots")
if [ -z "$slot" ]; then
    fail "no slot of data process 0 holds a key"
else
    out=$("$cli" --dir "$c" --timeout 20000 move "$slot" 1 2>&1)
    if echo "$out" | grep -q "done" &&
        grep -q "migrate slot $slot .*done ([1-9][0-9]* keys sent" "$c"/data-0-0.log; then
        ok "slot $slot moved over TLS: $(grep -h "migrate slot $slot .*done" "$c"/data-0-0.log)"
    else
        fail "move of slot $slot: $out"
        grep -h "migrate slot $slot" "$c"/data-0-0.log | tail -n 3
    fi
fi
out=$("$bench" -s "$proxy" -n 3000 --no-load -o 6000 -r 1 --verify -q 2>&1)
echo "$out" | grep -q "^total_errors=0 total_wrong=0" && echo "$out" | grep -q "misses=0" &&
    ok "every key reads back through the proxy after the move" ||
    { fail "keys do not read back after the move"; echo "$out" | tail -n 4; }
cluster_check_ok "$c" verify "over TLS"
cluster_check_ok "$c" decode-check "over TLS"

# A proxy that trusts another CA, or dials in the clear, gets no map.
# other_proxy_says ARGS...: its stderr once it has given up.
other_proxy_says() {
    "$proxy_bin" --seeds "$data0" -p "$(pick_port)" -W 1 -t 500 "$@" 2>"$dir/other.log" &
    other_proxy=$!
    wait "$other_proxy"
    other_proxy=""
    cat "$dir/other.log"
}
said=$(other_proxy_says --backend-tls-ca "$dir/rogue.pem" --backend-tls-cert "$dir/node.pem" \
    --backend-tls-key "$dir/node.key")
case $said in
    *"certificate refused"*) ok "a proxy trusting another CA gets no map: $(echo "$said" | tail -n 1)" ;;
    *) fail "a proxy trusting another CA: '$said'" ;;
esac
said=$(other_proxy_says)
case $said in
    *"cannot reach"*) ok "a proxy dialling in the clear gets no map: $(echo "$said" | tail -n 1)" ;;
    *) fail "a proxy dialling in the clear: '$said'" ;;
esac
finish
