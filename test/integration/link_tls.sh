#!/usr/bin/env bash
# link_tls.sh - a cluster whose links run TLS (the cluster file's link_tls
# line; `scripts/cluster up --link-tls-cert/-key/-ca`; docs/security.md,
# "TLS on links").  Certificates are made here with the openssl tool.  With
# COCYTUS_LINK_TCP_ONLY=1 the links go over TCP even on one host, where
# TLS runs.  On a 3-node RS(2,3) cluster with a coordinator:
#   - every server process logs a link up over TLS 1.3 (replication links, control
#     links to the coordinator) and none logs a TLS failure;
#   - libcocytus (cocytus-bench --verify, every value read checked) runs
#     through a kill of node 1 with no error; node 1's processes come back,
#     are rebuilt over TLS links, and the cluster is at full redundancy;
#     cocytus-cli verify and decode-check pass;
#   - node 1 started again with a certificate its CA did not sign is kept
#     out: its peers log the refused certificate and the cluster does not
#     count it as healthy; with the right certificate again it rejoins;
#   - refresh_certs on a process reads the files again: an error naming the
#     key while it is missing, OK once it is back;
#   - a server whose link_tls key does not load refuses to start, naming it.
# The trap stops the cluster.
set -u

script_dir=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$script_dir/lib.sh"
bench=$build_dir/bench/cocytus-bench
cli=$build_dir/client/cocytus-cli
server=$build_dir/memcached/cocytus-server
need_built "$build_dir/cocytus/cocytus-node" "$bench" "$cli" "$server"

need_tls

dir=$(mktemp -d "${TMPDIR:-/tmp}/link_tls.XXXXXX")
cleanup() {
    cluster_remove "$dir/c"
    rm -rf "$dir"
}
on_exit cleanup
export COCYTUS_LINK_TCP_ONLY=1

certs=$top_srcdir/scripts/certs
{ bash "$certs" ca "$dir" && bash "$certs" signed "$dir" node IP:127.0.0.1 &&
    bash "$certs" self "$dir" rogue IP:127.0.0.1 &&
    cp "$dir/node.pem" "$dir/good.pem" && cp "$dir/node.key" "$dir/good.key"; } ||
    { fail "could not make certificates"; finish; }

c=$dir/c
if ! cluster_up "$c" 20 14000 20000 --nodes 3 --scheme rs:2:3 --memory 32 --region 32 \
    --no-proxy --link-tls-cert "$dir/node.pem" --link-tls-key "$dir/node.key" \
    --link-tls-ca "$dir/ca.pem"; then
    fail "RS(2,3) cluster with link TLS did not come up"
    finish
fi
grep -q "^link_tls $dir/node.pem $dir/node.key $dir/ca.pem$" "$c/cluster.conf" &&
    ok "cluster.conf has the link_tls line" || fail "cluster.conf: no link_tls line"
cluster_healthy_again "$c" "at the start"

# Every server process has at least one TLS 1.3 link: the data processes
# dial their parity processes and the coordinator, the parity processes the
# coordinator.  No Unix-socket link, no TLS failure.
no_tls=""
for f in "$c"/data-*.log "$c"/parity-*.log; do
    grep -q "link 127.0.0.1:[0-9]*: up over TLS: TLSv1.3 " "$f" || no_tls="$no_tls $(basename "$f")"
done
[ -z "$no_tls" ] && ok "every server process logs a TLS 1.3 link" ||
    fail "no TLS link logged by:$no_tls"
bad=$(grep -h "TLS: error\|certificate refused" "$c"/*.log | head -n 3)
[ -z "$bad" ] && ok "no TLS failure logged" || fail "TLS failures: $bad"

data0=$(group0_addr "$c" data 0)

# refresh_certs reads the link_tls files again: refused with the reason
# while the key is missing (the old context stays), OK once it is back.
parity0=$(group0_addr "$c" parity 0)
rm -f "$dir/node.key"
reply=$(MC_TIMEOUT=1 mc "$parity0" 'refresh_certs\r\n')
case $reply in
    "Error loading link TLS key $dir/node.key"*) ok "refresh_certs without the key: $reply" ;;
    *) fail "refresh_certs without the key: '$reply'" ;;
esac
cp "$dir/good.key" "$dir/node.key"
reply=$(mc "$parity0" 'refresh_certs\r\n')
[ "$reply" = OK ] && ok "refresh_certs with the files back: OK" ||
    fail "refresh_certs with the files back: '$reply'"

# bench_ok WHAT ARGS...: a verified load on the cluster; no error, no wrong value.
bench_ok() {
    local what=$1 out
    shift
    out=$("$bench" -s "$data0" -n 2000 -c 4 -r 0.5 --verify --deadline-ms 5000 -q "$@" 2>&1)
    local rc=$?
    if [ "$rc" -eq 0 ] && echo "$out" | grep -q "^total_errors=0 total_wrong=0"; then
        ok "libcocytus over a link-TLS cluster $what: $(echo "$out" | grep '^phase=run')"
    else
        fail "libcocytus over a link-TLS cluster $what (exit $rc)"
        echo "$out" | tail -n 8
    fi
}

(sleep 2 && bash "$cluster_script" kill-node --node 1 --dir "$c" >"$dir/kill.out" 2>&1) &
killer=$!
bench_ok "through a kill of node 1" -t 7
wait "$killer"
grep -q "killed" "$dir/kill.out" && ok "node 1 was killed during the load" ||
    fail "node 1 was not killed: $(cat "$dir/kill.out")"

# Node 1 again, with a certificate the CA did not sign: kept out.
cp "$dir/rogue.pem" "$dir/node.pem" && cp "$dir/rogue.key" "$dir/node.key"
: >"$dir/mark"
bash "$cluster_script" start-node --node 1 --dir "$c" >"$dir/start.out" 2>&1 ||
    fail "start-node 1 (rogue certificate): $(cat "$dir/start.out")"
refused=""
for _ in $(seq 100); do
    refused=$(find "$c" -name '*.log' -newer "$dir/mark" -print0 |
        xargs -0 grep -l "certificate refused: self-signed certificate\|alert unknown ca" 2>/dev/null | head -n 1)
    [ -n "$refused" ] && break
    sleep 0.1
done
[ -n "$refused" ] && ok "node 1 with a rogue certificate is refused ($(basename "$refused"))" ||
    fail "nobody logged node 1's rogue certificate as refused"
if "$cli" --dir "$c" wait-healthy --timeout 3 >"$dir/rogue-healthy.out" 2>&1; then
    fail "the cluster counts node 1 with a rogue certificate as healthy"
else
    ok "the cluster is not healthy while node 1 has a rogue certificate"
fi

# The right certificate again: node 1 rejoins and is rebuilt over TLS.
bash "$cluster_script" kill-node --node 1 --dir "$c" >/dev/null 2>&1
cp "$dir/good.pem" "$dir/node.pem" && cp "$dir/good.key" "$dir/node.key"
bash "$cluster_script" start-node --node 1 --dir "$c" >"$dir/start.out" 2>&1 ||
    fail "start-node 1: $(cat "$dir/start.out")"
cluster_healthy_again "$c" "after node 1 started again with its certificate"
bench_ok "after the rebuild" -t 2
cluster_check_ok "$c" verify "after the kill and the rebuild over TLS links"
cluster_check_ok "$c" decode-check "after the kill and the rebuild over TLS links"

# Stopped, so that a sanitizer build's reports at exit are in the logs too.
bash "$cluster_script" down --dir "$c" >/dev/null 2>&1
bad=$(grep -l -E "AddressSanitizer|LeakSanitizer|runtime error" "$c"/*.log 2>/dev/null)
[ -z "$bad" ] && ok "no sanitizer report in the servers' logs" ||
    fail "sanitizer reports in: $bad"

# A server whose link_tls key does not load refuses to start.
sed "s|^link_tls .*|link_tls $dir/good.pem $dir/nonexistent.key $dir/ca.pem|" "$c/cluster.conf" \
    >"$dir/bad.conf"
chmod 600 "$dir/bad.conf"
user_args=()
[ "$(id -u)" -eq 0 ] && user_args=(-u root)
refused_start "link TLS key $dir/nonexistent.key" --role data --cluster "$dir/bad.conf" \
    --group 0 --index 0 -p "$(pick_port)" "${user_args[@]}"

finish
