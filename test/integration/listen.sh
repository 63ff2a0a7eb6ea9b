#!/usr/bin/env bash
# listen.sh - memcached's -l: every comma-separated entry may name its own
# port (host:port, [v6addr]:port), a bare IPv6 address takes -p's, and
# under -Z an entry after "notls:" serves clients in the clear
# (memcached/listen_spec.c, server.c).
#
# A plain server with -p P0 -l 127.0.0.1:P1,127.0.0.2 answers on
# 127.0.0.1:P1 and 127.0.0.2:P0 and not on 127.0.0.1:P0, and says tcpport
# P0 in `stats settings`; with only ports of their own (-l
# 127.0.0.1:P1,127.0.0.1:P2) both answer; -l given three times adds to
# the list, a repeated entry once (stats settings inter 127.0.0.1,127.0.0.2); [::1]:P3 answers over IPv6
# when the host has it.  Refused starts, with memcached's reasons: a port
# that is not a number or is empty, an unclosed '[', notls: without -Z.
# With -Z, -l 127.0.0.1,notls:127.0.0.1:P4: the -p port is TLS (a plain
# request is not served) and P4 answers a plain request.  Debian's
# memcached takes the same -l lists (checked when installed).
# cocytus-proxy takes the same lists (memcached/listen_bind.c): -p P6 -l
# 127.0.0.1:P5,127.0.0.2 -l 127.0.0.3:P7 answers on all three, says tcpport
# P6 and inter with the whole list; the same refusals; with --tls-cert,
# -l 127.0.0.1,notls:127.0.0.1:P8 takes TLS on -p's port and plain on P8.
set -u

script_dir=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$script_dir/lib.sh"
need_built "$server_bin" "$build_dir/client/cocytus-proxy"

dir=$(mktemp -d "${TMPDIR:-/tmp}/listen.XXXXXX")
pids=""
cleanup() {
    local p
    for p in $pids; do stop_pid "$p"; done
    rm -rf "$dir"
}
on_exit cleanup
user_args=()
[ "$(id -u)" -eq 0 ] && user_args=(-u root)

# serve BIN LOG ARGS...: a server; its pid in pid (its ports are the caller's).
serve() {
    local bin=$1 log=$2
    shift 2
    "$bin" -U 0 "$@" </dev/null >"$log" 2>&1 &
    pid=$!
    pids="$pids $pid"
}

# answers ADDR: a version request there gets VERSION (waits up to 5 s).
answers() {
    local out
    for _ in $(seq 50); do
        out=$(mc "$1" "version\r\n" 2>/dev/null)
        case $out in VERSION*) return 0 ;; esac
        sleep 0.1
    done
    return 1
}

# tls_mc PORT CERT REQUEST: REQUEST over TLS to 127.0.0.1:PORT (trusting
# CERT); prints the reply up to its END or VERSION line, CRs dropped.
tls_mc() {
    python3 - "$@" <<'PYEOF'
import socket, ssl, sys
ctx = ssl.create_default_context(cafile=sys.argv[2])
ctx.check_hostname = False
s = ctx.wrap_socket(socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=5))
s.sendall(sys.argv[3].encode().decode("unicode_escape").encode("latin-1"))
got = b""
while not (got.endswith(b"END\r\n") or got.startswith(b"VERSION") and got.endswith(b"\r\n")):
    chunk = s.recv(4096)
    if not chunk:
        break
    got += chunk
sys.stdout.write(got.decode("latin-1").replace("\r", ""))
PYEOF
}

# check_lists BIN NAME: the -l lists on BIN (cocytus-server, or memcached).
check_lists() {
    local bin=$1 name=$2 p0 p1 p2 extra=("${user_args[@]}")
    [ "$name" = memcached ] && [ "$(id -u)" -eq 0 ] && extra=(-u nobody)
    p0=$(pick_port) p1=$(pick_port) p2=$(pick_port)
    serve "$bin" "$dir/$name-1.log" "${extra[@]}" -p "$p0" -l "127.0.0.1:$p1,127.0.0.2"
    if answers "127.0.0.1:$p1" && answers "127.0.0.2:$p0"; then
        ok "$name -p $p0 -l 127.0.0.1:$p1,127.0.0.2: answers on 127.0.0.1:$p1 and 127.0.0.2:$p0"
    else
        fail "$name -l 127.0.0.1:$p1,127.0.0.2 (-p $p0): $(head -2 "$dir/$name-1.log")"
    fi
    case $(mc "127.0.0.1:$p0" "version\r\n" 2>/dev/null) in
        VERSION*) fail "$name listens on 127.0.0.1:$p0, which no entry names" ;;
        *) ok "$name: nothing on 127.0.0.1:$p0 (the first entry has a port of its own)" ;;
    esac
    if [ "$name" = cocytus-server ]; then
        local tcpport
        tcpport=$(mc "127.0.0.2:$p0" "stats settings\r\n" | awk '$2 == "tcpport" { print $3 }')
        [ "$tcpport" = "$p0" ] && ok "stats settings tcpport $tcpport (-p's)" ||
            fail "stats settings tcpport '$tcpport', want $p0"
    fi
    stop_pid "$pid"
    serve "$bin" "$dir/$name-2.log" "${extra[@]}" -p "$p0" -l "127.0.0.1:$p1,127.0.0.1:$p2"
    if answers "127.0.0.1:$p1" && answers "127.0.0.1:$p2"; then
        ok "$name -l 127.0.0.1:$p1,127.0.0.1:$p2: both answer"
    else
        fail "$name -l 127.0.0.1:$p1,127.0.0.1:$p2: $(head -2 "$dir/$name-2.log")"
    fi
    stop_pid "$pid"
    # -l given again adds to the list (a repeated entry once)
    serve "$bin" "$dir/$name-3.log" "${extra[@]}" -p "$p0" -l 127.0.0.1 -l 127.0.0.2 -l 127.0.0.1
    local inter
    if answers "127.0.0.1:$p0" && answers "127.0.0.2:$p0"; then
        inter=$(mc "127.0.0.1:$p0" "stats settings\r\n" | awk '$2 == "inter" { print $3 }')
        [ "$inter" = "127.0.0.1,127.0.0.2" ] &&
            ok "$name -l 127.0.0.1 -l 127.0.0.2 -l 127.0.0.1: both answer, stats settings inter $inter" ||
            fail "$name: three -l: stats settings inter '$inter'"
    else
        fail "$name -l 127.0.0.1 -l 127.0.0.2: $(head -2 "$dir/$name-3.log")"
    fi
    stop_pid "$pid"
}

check_lists "$server_bin" cocytus-server
mc_bin=$(command -v memcached || true)
if [ -n "$mc_bin" ]; then
    check_lists "$mc_bin" memcached
else
    echo "note: no memcached here; its -l lists are not compared"
fi

# IPv6, when the host has ::1.
if python3 -c 'import socket; s = socket.socket(socket.AF_INET6); s.bind(("::1", 0))' 2>/dev/null; then
    p3=$(pick_port)
    serve "$server_bin" "$dir/v6.log" "${user_args[@]}" -p "$(pick_port)" -l "[::1]:$p3"
    if python3 - "$p3" <<'PYEOF'
import socket, sys, time
for _ in range(50):
    try:
        s = socket.create_connection(("::1", int(sys.argv[1])), timeout=2)
        s.sendall(b"version\r\n")
        sys.exit(0 if s.recv(100).startswith(b"VERSION") else 1)
    except OSError:
        time.sleep(0.1)
sys.exit(1)
PYEOF
    then
        ok "-l [::1]:$p3 answers over IPv6"
    else
        fail "-l [::1]:$p3: $(head -2 "$dir/v6.log")"
    fi
    stop_pid "$pid"
else
    echo "note: no IPv6 loopback here; [::1]:port not checked"
fi

port=$(pick_port)
refused_start 'invalid port number "abc"' "${user_args[@]}" -p "$port" -l 127.0.0.1:abc
refused_start 'invalid port number ""' "${user_args[@]}" -p "$port" -l 127.0.0.1:
refused_start "no ']'" "${user_args[@]}" -p "$port" -l '[::1'
refused_start "'notls' is valid only with -Z (TLS)" "${user_args[@]}" -p "$port" -l "notls:127.0.0.1"

# cocytus-proxy's -l: memcached's lists.
proxy=$build_dir/client/cocytus-proxy
p0=$(pick_port) p5=$(pick_port) p6=$(pick_port) p7=$(pick_port)
serve "$server_bin" "$dir/backend.log" "${user_args[@]}" -p "$p0" -l 127.0.0.1
backend=$pid
if answers "127.0.0.1:$p0"; then
    "$proxy" -p "$p6" -l "127.0.0.1:$p5,127.0.0.2" -l "127.0.0.3:$p7" --seeds "127.0.0.1:$p0" \
        </dev/null >"$dir/proxy.log" 2>&1 &
    pid=$!
    pids="$pids $pid"
    for a in "127.0.0.1:$p5" "127.0.0.2:$p6" "127.0.0.3:$p7"; do
        answers "$a" && ok "cocytus-proxy -p $p6 -l 127.0.0.1:$p5,127.0.0.2 -l 127.0.0.3:$p7 answers on $a" ||
            fail "cocytus-proxy: nothing on $a: $(tail -2 "$dir/proxy.log")"
    done
    case $(MC_TIMEOUT=1 mc "127.0.0.1:$p6" "version\r\n" 2>/dev/null) in
        VERSION*) fail "cocytus-proxy answered on 127.0.0.1:$p6, not in its -l" ;;
        *) ok "cocytus-proxy does not answer on 127.0.0.1:$p6 (not in its -l)" ;;
    esac
    settings=$(mc "127.0.0.2:$p6" "stats settings\r\n")
    tcpport=$(awk '$2 == "tcpport" { print $3 }' <<<"$settings" | tr -d '\r')
    inter=$(awk '$2 == "inter" { print $3 }' <<<"$settings" | tr -d '\r')
    [ "$tcpport" = "$p6" ] && [ "$inter" = "127.0.0.1:$p5,127.0.0.2,127.0.0.3:$p7" ] &&
        ok "cocytus-proxy stats settings: tcpport $tcpport, inter $inter" ||
        fail "cocytus-proxy stats settings: tcpport '$tcpport' inter '$inter'"
    stop_pid "$pid"
    "$proxy" -l "127.0.0.1:$p5" --seeds "127.0.0.1:$p0" </dev/null >"$dir/proxy.log" 2>&1 &
    pid=$!
    pids="$pids $pid"
    tcpport=$(answers "127.0.0.1:$p5" && mc "127.0.0.1:$p5" "stats settings\r\n" |
        awk '$2 == "tcpport" { print $3 }' | tr -d '\r')
    [ "$tcpport" = "$p5" ] && ok "cocytus-proxy -l 127.0.0.1:$p5 answers there (tcpport $tcpport)" ||
        fail "cocytus-proxy -l 127.0.0.1:$p5: tcpport '$tcpport', $(tail -2 "$dir/proxy.log")"
    stop_pid "$pid"
    for bad in "notls:127.0.0.1" "127.0.0.1:x" "[::1"; do
        out=$(timeout 10 "$proxy" -p "$p5" -l "$bad" --seeds "127.0.0.1:$p0" 2>&1 </dev/null | tail -n 1)
        case $out in
            *"-l $bad: "*) ok "cocytus-proxy refuses -l $bad: ${out#cocytus-proxy: }" ;;
            *) fail "cocytus-proxy -l $bad: '$out'" ;;
        esac
    done
else
    fail "the proxy's backend did not start: $(head -2 "$dir/backend.log")"
fi
stop_pid "$backend"

# -Z with a notls: entry.
if "$server_bin" -h 2>&1 | grep -q -- --enable-ssl && command -v openssl >/dev/null &&
    openssl req -x509 -newkey rsa:2048 -nodes -keyout "$dir/key.pem" -out "$dir/cert.pem" -days 2 \
        -subj /CN=127.0.0.1 >/dev/null 2>&1; then
    p0=$(pick_port) p4=$(pick_port)
    serve "$server_bin" "$dir/tls.log" "${user_args[@]}" -p "$p0" -l "127.0.0.1,notls:127.0.0.1:$p4" \
        -Z -o "ssl_chain_cert=$dir/cert.pem,ssl_key=$dir/key.pem"
    if answers "127.0.0.1:$p4"; then
        ok "-Z -l 127.0.0.1,notls:127.0.0.1:$p4: a plain request is served on $p4"
    else
        fail "notls:127.0.0.1:$p4 under -Z: $(head -2 "$dir/tls.log")"
    fi
    case $(tls_mc "$p0" "$dir/cert.pem" 'version\r\n' 2>/dev/null) in
        VERSION*) ok "the -p port ($p0) is TLS" ;;
        *) fail "no TLS on the -p port $p0: $(head -2 "$dir/tls.log")" ;;
    esac
    case $(MC_TIMEOUT=1 mc "127.0.0.1:$p0" "version\r\n" 2>/dev/null) in
        VERSION*) fail "a plain request was served on the TLS port $p0" ;;
        *) ok "a plain request is not served on the TLS port $p0" ;;
    esac
    stop_pid "$pid"

    # The proxy under --tls-cert with a notls: entry, the plain server
    # behind it.
    pb=$(pick_port) p8=$(pick_port) p9=$(pick_port)
    serve "$server_bin" "$dir/backend2.log" "${user_args[@]}" -p "$pb" -l 127.0.0.1
    backend=$pid
    answers "127.0.0.1:$pb" || fail "the proxy's backend did not start: $(head -2 "$dir/backend2.log")"
    "$proxy" -p "$p9" -l "127.0.0.1,notls:127.0.0.1:$p8" --tls-cert "$dir/cert.pem" \
        --tls-key "$dir/key.pem" --seeds "127.0.0.1:$pb" </dev/null >"$dir/proxy_tls.log" 2>&1 &
    pid=$!
    pids="$pids $pid"
    if answers "127.0.0.1:$p8" && [ "$(mc "127.0.0.1:$p8" "set lk 0 0 2\r\nhi\r\n")" = STORED ] &&
        [ "$(mc "127.0.0.1:$p8" "get lk\r\n" | tr '\n' ' ')" = "VALUE lk 0 2 hi END " ]; then
        ok "cocytus-proxy --tls-cert -l 127.0.0.1,notls:127.0.0.1:$p8: plain clients set and get on $p8"
    else
        fail "cocytus-proxy notls:127.0.0.1:$p8: $(tail -2 "$dir/proxy_tls.log")"
    fi
    if [ "$(tls_mc "$p9" "$dir/cert.pem" 'get lk\r\n' 2>/dev/null | tr '\n' ' ')" = "VALUE lk 0 2 hi END " ]
    then
        ok "cocytus-proxy: the -p port ($p9) is TLS and serves what the plain client set"
    else
        fail "cocytus-proxy: no TLS get on the -p port $p9: $(tail -2 "$dir/proxy_tls.log")"
    fi
    case $(MC_TIMEOUT=1 mc "127.0.0.1:$p9" "version\r\n" 2>/dev/null) in
        VERSION*) fail "cocytus-proxy served a plain request on its TLS port $p9" ;;
        *) ok "cocytus-proxy does not serve a plain request on its TLS port $p9" ;;
    esac
    stop_pid "$pid"
    stop_pid "$backend"
else
    echo "note: no TLS in this build (or no openssl tool); notls: under -Z not checked"
fi
finish
