#!/usr/bin/env bash
# tls.sh - memcached's -Z: a plain server's clients connect with TLS
# (memcached/tls.c).
#
# Certificates are made here with the openssl tool: a CA, two server
# certificates it signs for 127.0.0.1, a client certificate it signs, and a
# client certificate nobody trusts.  A server with -Z and the first server
# certificate serves pymemcache over TLS (a 1 MB value, a 300-key
# get_many, incr, delete, 1,000 requests pipelined in one write and their
# replies compared byte for byte), a reader that leaves forty 1 MB replies
# unread until the server's writes had to wait (every byte arrives, in
# order), and refuses plain-text requests, a torn ClientHello and random
# bytes without serving them or dying (counted in ssl_handshake_errors).
# `stats settings` says ssl_* as memcached does, and the same lines as
# Debian's memcached -Z with the same files when that is installed.
# refresh_certs reads the files again: new connections get the second
# certificate; a broken file is refused with memcached's error and the
# certificate before stays.  With ssl_verify_mode=2 and ssl_ca_cert a
# client needs a certificate the CA signed; with ssl_min_version=tlsv1.3 a
# TLS 1.2 client is refused.  Run as root with -u nobody, a key only root
# can read is read before the switch, as memcached reads it.  Bad starts
# are refused with a reason: no certificate, a missing key, a bad
# ssl_verify_mode, -Z with -s.  (-Z with a cluster role: client_tls.sh.)  cocytus-proxy
# --tls-cert in front of a server serves the same data and slow-reader
# checks over TLS (what it set is on the server behind it), refuses the
# garbage and counts it, takes a renewed certificate with refresh_certs,
# requires client certificates with --tls-ca, and refuses --tls-key alone
# and a missing certificate.
set -u

script_dir=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$script_dir/lib.sh"
need_built "$server_bin" "$build_dir/client/cocytus-proxy"
need_pymemcache
if ! command -v openssl >/dev/null 2>&1; then
    echo "SKIP: the openssl tool is not installed (apt-get install openssl)"
    exit 77
fi

dir=$(mktemp -d "${TMPDIR:-/tmp}/tls.XXXXXX")
pids=""
cleanup() {
    local p
    for p in $pids; do stop_pid "$p"; done
    rm -rf "$dir"
}
on_exit cleanup
check_py=$script_dir/tls_check.py

# --- certificates ---
(
    cd "$dir" || exit 1
    key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:prime256v1 -out "$1" 2>/dev/null; }
    key ca.key && openssl req -x509 -new -key ca.key -out ca.pem -days 2 -subj /CN=tls-test-ca &&
    printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\n' >san.ext &&
    for n in srv srv2 client; do
        key $n.key && openssl req -new -key $n.key -out $n.csr -subj "/CN=$n" &&
        openssl x509 -req -in $n.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out $n.pem \
            -days 2 -extfile san.ext 2>/dev/null || exit 1
    done &&
    key rogue.key && openssl req -x509 -new -key rogue.key -out rogue.pem -days 2 -subj /CN=rogue
) >"$dir/openssl.log" 2>&1 || { cat "$dir/openssl.log"; fail "could not make certificates"; finish; }
cp "$dir/srv.pem" "$dir/cur.pem"
cp "$dir/srv.key" "$dir/cur.key"
chmod 600 "$dir"/*.key

# A server built without OpenSSL refuses -Z; nothing here can run then.
if "$server_bin" -Z -p 0 -U 0 2>&1 | grep -q "built without TLS"; then
    echo "SKIP: this cocytus-server was built without TLS (configure found no libssl-dev)"
    exit 77
fi

tls_args=(-Z -o "ssl_chain_cert=$dir/cur.pem,ssl_key=$dir/cur.key")

# --- serving over TLS ---
start_server "$dir/a.log" "${tls_args[@]}" || { fail "server with -Z did not start"; cat "$dir/a.log"; finish; }
pids="$pids $server_pid"
a_pid=$server_pid
a_port=$server_port

if "$py" "$check_py" data "$a_port" "$dir/ca.pem" >"$dir/data.out" 2>&1; then
    ok "$(cat "$dir/data.out")"
else
    fail "pymemcache over TLS: $(tail -3 "$dir/data.out")"
fi
if "$py" "$check_py" slow "$a_port" "$dir/ca.pem" >"$dir/slow.out" 2>&1; then
    ok "$(cat "$dir/slow.out")"
else
    fail "a slow TLS reader: $(tail -3 "$dir/slow.out")"
fi
# Sessions resume by ticket, as with memcached -Z (compared below).
want_resume="TLSv1_2 full resumed resumed, TLSv1_3 full resumed resumed"
resume=$("$py" "$check_py" resume "$a_port" "$dir/ca.pem" 2>&1)
if [ "$resume" = "$want_resume" ]; then
    ok "session resumption by ticket: $resume"
else
    fail "session resumption: '$resume' (want '$want_resume')"
fi
if "$py" "$check_py" garbage "$a_port" >"$dir/garbage.out" 2>&1; then
    ok "$(cat "$dir/garbage.out")"
else
    fail "garbage on the TLS port: $(tail -3 "$dir/garbage.out")"
fi
if kill -0 "$a_pid" 2>/dev/null; then
    ok "the server lives after the garbage"
else
    fail "the server died; its log: $(tail -5 "$dir/a.log")"
fi
"$py" "$check_py" line "$a_port" "$dir/ca.pem" "stats" "stats settings" 2>&1 | tr -d '\r' >"$dir/stats.out"
hs=$(awk '/^STAT ssl_handshake_errors/ {print $3}' "$dir/stats.out")
if [ -n "$hs" ] && [ "$hs" -ge 20 ]; then
    ok "ssl_handshake_errors $hs after 24 connections of garbage"
else
    fail "ssl_handshake_errors '$hs': $(head -3 "$dir/stats.out")"
fi
grep -q "^STAT time_since_server_cert_refresh [0-9]" "$dir/stats.out" ||
    fail "no time_since_server_cert_refresh in stats"
grep -q "^STAT ssl_new_sessions" "$dir/stats.out" &&
    fail "ssl_new_sessions in stats without ssl_session_cache (memcached shows it only with it)"
grep '^STAT ssl_' "$dir/stats.out" | grep -v ssl_handshake_errors >"$dir/ssl_settings"
want="STAT ssl_enabled yes
STAT ssl_chain_cert $dir/cur.pem
STAT ssl_key $dir/cur.key
STAT ssl_verify_mode 0
STAT ssl_keyformat 1
STAT ssl_ciphers NULL
STAT ssl_ca_cert NULL
STAT ssl_wbuf_size 16384
STAT ssl_session_cache no
STAT ssl_kernel_tls no
STAT ssl_min_version tlsv1.2"
if [ "$(cat "$dir/ssl_settings")" = "$want" ]; then
    ok "stats settings: the ssl_* lines"
else
    fail "stats settings ssl_* lines: $(cat "$dir/ssl_settings")"
fi

# The same lines from memcached -Z, when Debian's memcached has TLS.
mc_bin=$(command -v memcached || echo /usr/bin/memcached)
if [ -x "$mc_bin" ] && "$mc_bin" -h 2>&1 | grep -q enable-ssl; then
    mc_port=$(pick_port)
    mc_user=()
    [ "$(id -u)" -eq 0 ] && mc_user=(-u nobody)
    "$mc_bin" -p "$mc_port" -l 127.0.0.1 -U 0 "${mc_user[@]}" "${tls_args[@]}" >"$dir/mc.log" 2>&1 &
    mc_pid=$!
    pids="$pids $mc_pid"
    if wait_port "$mc_pid" "$mc_port"; then
        "$py" "$check_py" line "$mc_port" "$dir/ca.pem" "stats settings" 2>&1 | tr -d '\r' |
            grep '^STAT ssl_' >"$dir/mc_ssl_settings"
        if diff "$dir/mc_ssl_settings" "$dir/ssl_settings" >"$dir/mc.diff"; then
            ok "stats settings ssl_* lines equal memcached -Z's"
        else
            fail "ssl_* lines differ from memcached's: $(cat "$dir/mc.diff")"
        fi
        mc_resume=$("$py" "$check_py" resume "$mc_port" "$dir/ca.pem" 2>&1)
        if [ "$mc_resume" = "$resume" ]; then
            ok "sessions resume as with memcached -Z: $mc_resume"
        else
            fail "memcached -Z resumes '$mc_resume', this server '$resume'"
        fi
    else
        echo "note: memcached -Z did not start ($(head -2 "$dir/mc.log")); comparison skipped"
    fi
    stop_pid "$mc_pid"
else
    echo "note: no memcached with TLS here; the ssl_* lines are compared with the list above only"
fi

# --- refresh_certs ---
serial1=$("$py" "$check_py" serial "$a_port" "$dir/ca.pem" 2>&1)
cp "$dir/srv2.pem" "$dir/cur.pem"
cp "$dir/srv2.key" "$dir/cur.key"
reply=$("$py" "$check_py" line "$a_port" "$dir/ca.pem" "refresh_certs" 2>&1)
serial2=$("$py" "$check_py" serial "$a_port" "$dir/ca.pem" 2>&1)
want2=$(openssl x509 -in "$dir/srv2.pem" -noout -serial | cut -d= -f2)
if [ "$reply" = "OK" ] && [ "$serial2" = "$want2" ] && [ "$serial1" != "$serial2" ]; then
    ok "refresh_certs: OK, new connections get the second certificate ($serial1 -> $serial2)"
else
    fail "refresh_certs: reply '$reply', serial $serial1 -> $serial2 (want $want2)"
fi
if out=$("$py" "$check_py" refresh_resume "$a_port" "$dir/ca.pem" 2>&1); then
    ok "refresh_certs ends the tickets before it: $out"
else
    fail "session resumption across refresh_certs: $out"
fi
echo "not a certificate" >"$dir/cur.pem"
reply=$("$py" "$check_py" line "$a_port" "$dir/ca.pem" "refresh_certs" 2>&1)
serial3=$("$py" "$check_py" serial "$a_port" "$dir/ca.pem" 2>&1)
case "$reply" in
"Error loading the certificate chain: $dir/cur.pem : "*)
    if [ "$serial3" = "$serial2" ]; then
        ok "a broken certificate file is refused ($reply); the one before stays"
    else
        fail "after a refused refresh the server serves '$serial3', not $serial2"
    fi ;;
*) fail "refresh_certs with a broken file: '$reply'" ;;
esac
cp "$dir/srv2.pem" "$dir/cur.pem"
stop_pid "$a_pid"

# A server without -Z answers refresh_certs as memcached does.
start_server "$dir/p.log" || fail "plain server did not start"
pids="$pids $server_pid"
reply=$(mc "127.0.0.1:$server_port" "refresh_certs\r\n" 2>&1)
if [ "$reply" = "Error TLS not enabled" ]; then
    ok "refresh_certs without -Z: $reply"
else
    fail "refresh_certs without -Z: '$reply'"
fi
stop_pid "$server_pid"

# --- ssl_session_cache: resumption by session id too ---
start_server "$dir/s.log" "${tls_args[@]}" -o ssl_session_cache ||
    fail "server with ssl_session_cache did not start: $(tail -2 "$dir/s.log")"
pids="$pids $server_pid"
out=$("$py" "$check_py" resume "$server_port" "$dir/ca.pem" noticket 2>&1)
if [ "$out" = "TLSv1_2 without tickets full resumed resumed" ]; then
    ok "ssl_session_cache: $out"
else
    fail "ssl_session_cache, a TLS 1.2 client without tickets: '$out'"
fi
"$py" "$check_py" line "$server_port" "$dir/ca.pem" "stats" "stats settings" 2>&1 | tr -d '\r' >"$dir/s_stats.out"
news=$(awk '/^STAT ssl_new_sessions/ {print $3}' "$dir/s_stats.out")
if [ -n "$news" ] && [ "$news" -ge 1 ] && grep -qx "STAT ssl_session_cache yes" "$dir/s_stats.out"; then
    ok "ssl_session_cache: stats ssl_new_sessions $news, stats settings ssl_session_cache yes"
else
    fail "ssl_session_cache stats: ssl_new_sessions '$news', $(grep ssl_session_cache "$dir/s_stats.out")"
fi
stop_pid "$server_pid"

# --- client certificates, minimum version ---
start_server "$dir/b.log" "${tls_args[@]}" -o "ssl_verify_mode=2,ssl_ca_cert=$dir/ca.pem" ||
    fail "server with ssl_verify_mode=2 did not start: $(tail -2 "$dir/b.log")"
pids="$pids $server_pid"
if out=$("$py" "$check_py" refused "$server_port" "$dir/ca.pem" - - - 2>&1); then
    ok "ssl_verify_mode=2, no client certificate: $out"
else
    fail "ssl_verify_mode=2 served a client without a certificate: $out"
fi
if out=$("$py" "$check_py" refused "$server_port" "$dir/ca.pem" "$dir/rogue.pem" "$dir/rogue.key" - 2>&1); then
    ok "ssl_verify_mode=2, a certificate the CA did not sign: $out"
else
    fail "ssl_verify_mode=2 served an untrusted client certificate: $out"
fi
if out=$("$py" "$check_py" accepted "$server_port" "$dir/ca.pem" "$dir/client.pem" "$dir/client.key" 2>&1); then
    ok "ssl_verify_mode=2: $out"
else
    fail "ssl_verify_mode=2 refused a signed client certificate: $out"
fi
stop_pid "$server_pid"

start_server "$dir/c.log" "${tls_args[@]}" -o ssl_min_version=tlsv1.3 ||
    fail "server with ssl_min_version=tlsv1.3 did not start: $(tail -2 "$dir/c.log")"
pids="$pids $server_pid"
if out=$("$py" "$check_py" refused "$server_port" "$dir/ca.pem" - - 1.2 2>&1); then
    ok "ssl_min_version=tlsv1.3 refuses a TLS 1.2 client: $out"
else
    fail "ssl_min_version=tlsv1.3 served TLS 1.2: $out"
fi
out=$("$py" "$check_py" line "$server_port" "$dir/ca.pem" "version" 2>&1)
case "$out" in
VERSION*) ok "ssl_min_version=tlsv1.3 serves TLS 1.3: $out" ;;
*) fail "ssl_min_version=tlsv1.3 did not serve a TLS 1.3 client: $out" ;;
esac
stop_pid "$server_pid"

# --- a key only root reads, with -u nobody ---
if [ "$(id -u)" -eq 0 ] && getent passwd nobody >/dev/null; then
    chmod 755 "$dir"
    port=$(pick_port)
    "$server_bin" -p "$port" -l 127.0.0.1 -U 0 -u nobody "${tls_args[@]}" >"$dir/d.log" 2>&1 &
    d_pid=$!
    pids="$pids $d_pid"
    if wait_port "$d_pid" "$port" &&
        out=$("$py" "$check_py" line "$port" "$dir/ca.pem" "version" 2>&1) && [[ $out == VERSION* ]]; then
        ok "-u nobody: the key (mode 0600, root's) was read before the switch; serves"
    else
        fail "-u nobody with a root-only key: $out $(tail -2 "$dir/d.log")"
    fi
    reply=$("$py" "$check_py" line "$port" "$dir/ca.pem" "refresh_certs" 2>&1)
    case "$reply" in
    Error*) ok "refresh_certs as nobody cannot read the key: refused, still serving" ;;
    *) fail "refresh_certs as nobody: '$reply'" ;;
    esac
    out=$("$py" "$check_py" line "$port" "$dir/ca.pem" "version" 2>&1)
    [[ $out == VERSION* ]] || fail "no service after the refused refresh: $out"
    stop_pid "$d_pid"
fi

# --- cocytus-proxy --tls-cert: TLS at a cluster's edge ---
start_server "$dir/backend.log" || fail "a plain server for the proxy did not start"
pids="$pids $server_pid"
backend=$server_port
backend_pid=$server_pid
if start_proxy "$dir/proxy.log" --seeds "127.0.0.1:$backend" --tls-cert "$dir/cur.pem" \
    --tls-key "$dir/cur.key"; then
    pids="$pids $proxy_pid"
    for what in data slow; do
        if "$py" "$check_py" $what "$proxy_port" "$dir/ca.pem" >"$dir/p$what.out" 2>&1; then
            ok "through cocytus-proxy --tls-cert: $(cat "$dir/p$what.out")"
        else
            fail "through the TLS proxy ($what): $(tail -3 "$dir/p$what.out")"
        fi
    done
    direct=$(mc "127.0.0.1:$backend" "get p7\r\n" | head -2 | tr '\n' ' ')
    [ "$direct" = "VALUE p7 0 2 v7 " ] && ok "the server behind the proxy holds what was set over TLS" ||
        fail "the server behind the proxy has '$direct'"
    "$py" "$check_py" garbage "$proxy_port" >"$dir/pgarbage.out" 2>&1 ||
        fail "garbage on the proxy's TLS port: $(tail -3 "$dir/pgarbage.out")"
    kill -0 "$proxy_pid" 2>/dev/null && ok "the proxy lives after the garbage" ||
        fail "the proxy died: $(tail -5 "$dir/proxy.log")"
    # Part of a TLS record, the rest never sent: the proxy must go on
    # serving its other clients (a read that counted the part as pending
    # input ran again at once, for ever, and starved every connection).
    exec 5<>"/dev/tcp/127.0.0.1/$proxy_port"
    printf '\x16\x03\x01\x02\x00%055d' 0 >&5
    sleep 0.2
    reply=$("$py" "$check_py" line "$proxy_port" "$dir/ca.pem" "version" 2>&1 | tr -d '\r')
    case $reply in
        VERSION*) ok "the proxy answers beside a client that sent part of a TLS record: $reply" ;;
        *) fail "the proxy did not answer beside a client holding part of a TLS record: '$reply'" ;;
    esac
    exec 5<&- 5>&-
    "$py" "$check_py" line "$proxy_port" "$dir/ca.pem" "stats" "stats settings" 2>&1 | tr -d '\r' \
        >"$dir/pstats.out"
    hs=$(awk '/^STAT ssl_handshake_errors/ {print $3}' "$dir/pstats.out")
    if [ -n "$hs" ] && [ "$hs" -ge 20 ] && grep -q "^STAT ssl_enabled yes" "$dir/pstats.out"; then
        ok "the proxy's stats: ssl_enabled yes, ssl_handshake_errors $hs"
    else
        fail "the proxy's stats: '$hs' $(grep ssl "$dir/pstats.out")"
    fi
    cp "$dir/srv.pem" "$dir/cur.pem"
    cp "$dir/srv.key" "$dir/cur.key"
    reply=$("$py" "$check_py" line "$proxy_port" "$dir/ca.pem" "refresh_certs" 2>&1)
    serial=$("$py" "$check_py" serial "$proxy_port" "$dir/ca.pem" 2>&1)
    want1=$(openssl x509 -in "$dir/srv.pem" -noout -serial | cut -d= -f2)
    [ "$reply" = OK ] && [ "$serial" = "$want1" ] &&
        ok "refresh_certs through the proxy: OK, the renewed certificate is served" ||
        fail "refresh_certs through the proxy: '$reply', serial $serial (want $want1)"
    stop_pid "$proxy_pid"
else
    fail "cocytus-proxy --tls-cert did not start: $(tail -3 "$dir/proxy.log")"
fi
if start_proxy "$dir/proxy2.log" --seeds "127.0.0.1:$backend" --tls-cert "$dir/cur.pem" \
    --tls-key "$dir/cur.key" --tls-ca "$dir/ca.pem"; then
    pids="$pids $proxy_pid"
    out=$("$py" "$check_py" refused "$proxy_port" "$dir/ca.pem" - - - 2>&1) &&
        ok "proxy --tls-ca, no client certificate: $out" ||
        fail "proxy --tls-ca served a client without a certificate: $out"
    out=$("$py" "$check_py" accepted "$proxy_port" "$dir/ca.pem" "$dir/client.pem" "$dir/client.key" 2>&1) &&
        ok "proxy --tls-ca: $out" || fail "proxy --tls-ca refused a signed client certificate: $out"
    stop_pid "$proxy_pid"
else
    fail "cocytus-proxy --tls-ca did not start: $(tail -3 "$dir/proxy2.log")"
fi
proxy_bin=$build_dir/client/cocytus-proxy
out=$(timeout 10 "$proxy_bin" --seeds "127.0.0.1:$backend" -p "$(pick_port)" --tls-key "$dir/cur.key" 2>&1 </dev/null)
[ $? -eq 1 ] && grep -q "need --tls-cert" <<<"$out" && ok "proxy refused: --tls-key without --tls-cert" ||
    fail "proxy --tls-key alone: '$out'"
out=$(timeout 10 "$proxy_bin" --seeds "127.0.0.1:$backend" -p "$(pick_port)" --tls-cert "$dir/none.pem" 2>&1 </dev/null)
[ $? -eq 1 ] && grep -q "none.pem" <<<"$out" && ok "proxy refused: a missing certificate ($out)" ||
    fail "proxy with a missing certificate: '$out'"
stop_pid "$backend_pid"

# --- refused starts ---
refused_start() {
    local what=$1 want=$2
    shift 2
    local out
    out=$(timeout 10 "$server_bin" -p 0 -l 127.0.0.1 -U 0 "$@" 2>&1 </dev/null)
    local rc=$?
    if [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && grep -q -- "$want" <<<"$out"; then
        ok "refused: $what ($(head -1 <<<"$out"))"
    else
        fail "$what: rc $rc, '$out'"
    fi
}
refused_start "-Z without a certificate" "ssl_chain_cert" -Z
refused_start "a missing key" "$dir/nokey" -Z -o "ssl_chain_cert=$dir/cur.pem,ssl_key=$dir/nokey"
refused_start "a key of another certificate" "mismatch" -Z \
    -o "ssl_chain_cert=$dir/cur.pem,ssl_key=$dir/client.key"
refused_start "ssl_verify_mode=9" "ssl_verify_mode" "${tls_args[@]}" -o ssl_verify_mode=9
refused_start "ssl_min_version=sslv3" "ssl_min_version" "${tls_args[@]}" -o ssl_min_version=sslv3
refused_start "-Z with -s" "not a Unix socket" "${tls_args[@]}" -s "$dir/mc.sock"

finish
