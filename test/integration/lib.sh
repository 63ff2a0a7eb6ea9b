# lib.sh - helpers shared by the shell integration tests (sourced, not run).
#
# A test sets script_dir to its own directory and sources this file from
# there, so it works from the source tree, an out-of-tree build and the
# distcheck tree alike.  Sourcing sets the paths every test uses:
#   top_srcdir      the source tree (scripts/cluster lives there)
#   cluster_script  scripts/cluster
#   server_bin      $COCYTUS_SERVER (set by make check), else the in-tree binary
#   build_dir       the build tree holding server_bin; exported as
#                   COCYTUS_BUILD_DIR for scripts/cluster
#   failures        0; fail counts, finish reports
# and defines small functions: checks (fail, ok, finish), binaries
# (need_built), clean-up (on_exit), ports (port_is_open, port_busy,
# port_free, ports_free, pick_port, pick_base_port, take_base_port, wait_port, wait_for), processes
# (stop_pid, start_server, start_proxy), clusters (cluster_up, key_owners,
# cluster_remove, cluster_check_ok), a one-request memcached text client (mc) and
# an authenticated control command (ctl).

top_srcdir=$script_dir/../..
cluster_script=$top_srcdir/scripts/cluster
server_bin=${COCYTUS_SERVER:-$top_srcdir/memcached/cocytus-server}
build_dir=$(cd "$(dirname "$server_bin")/.." 2>/dev/null && pwd)
COCYTUS_BUILD_DIR=$build_dir
export COCYTUS_BUILD_DIR
failures=0

# --- checks ---

# fail MESSAGE: reports a failed check and counts it.
fail() {
    echo "FAIL: $*"
    failures=$((failures + 1))
}

# ok MESSAGE: reports a passed check.
ok() {
    echo "ok: $*"
}

# finish: exits 1 with a summary if any check failed, else prints PASS and
# exits 0.
finish() {
    if [ "$failures" -ne 0 ]; then
        echo "FAIL: $failures check(s) failed"
        exit 1
    fi
    echo "PASS"
    exit 0
}

# need_built FILE...: exits 1 unless every FILE is an executable (run by
# hand, set COCYTUS_SERVER / COCYTUS_BENCH to the built binaries).
need_built() {
    local b
    for b in "$@"; do
        if [ ! -x "$b" ]; then
            echo "FAIL: $b not built (set COCYTUS_SERVER, COCYTUS_BENCH)"
            exit 1
        fi
    done
}

# need_pymemcache: sets py to a python3 that imports pymemcache, or skips
# the test (exit 77).
need_pymemcache() {
    local candidate
    py=""
    for candidate in python3 /usr/bin/python3; do
        if "$candidate" -c 'import pymemcache' 2>/dev/null; then
            py=$candidate
            return 0
        fi
    done
    echo "SKIP: pymemcache is not installed (apt-get install python3-pymemcache)"
    exit 77
}

# on_exit FUNCTION: runs FUNCTION when the test exits, also on INT and TERM
# (which exit 130 and 143), then gives back the ports the test held.
on_exit() {
    trap "$1; release_port_blocks" EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
}

# --- ports ---

# shellcheck source=../../scripts/ports.sh
. "$top_srcdir/scripts/ports.sh"

# port_is_open PORT: something accepts connections on 127.0.0.1:PORT.
port_is_open() {
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# port_busy PORT: PORT accepts, or ss lists a socket on it (a listener not
# yet accepting, a connection in TIME_WAIT) that would make a bind fail.
port_busy() {
    # TIME-WAIT leftovers do not count: every listener here binds with
    # SO_REUSEADDR, and a busy machine holds thousands of them.
    port_is_open "$1" || ss -Htan exclude time-wait 2>/dev/null | awk '{print $4}' | grep -q ":$1\$"
}

port_free() {
    ! port_busy "$1"
}

# pick_port: one free port (the kernel's choice when python3 is there).
pick_port() {
    if command -v python3 >/dev/null 2>&1; then
        python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
        return
    fi
    local port
    for _ in $(seq 50); do
        port=$((20000 + RANDOM % 40000))
        if port_free "$port"; then
            echo "$port"
            return 0
        fi
    done
    return 1
}

# pick_base_port COUNT [LOW HIGH]: prints an even base port in [LOW, HIGH)
# (default 22000-32000, below the ephemeral range) such that the COUNT
# ports from it look free.  Tests use different ranges to meet less when
# make check runs them in parallel.
pick_base_port() {
    local count=$1 low=${2:-22000} high=${3:-32000} base
    for _ in $(seq 50); do
        base=$((low + 2 * (RANDOM % ((high - low) / 2))))
        ports_free "$base" "$count" && { echo "$base"; return 0; }
    done
    return 1
}

# ports_free BASE COUNT: the COUNT ports from BASE all look free.
ports_free() {
    local p
    for ((p = $1; p < $1 + $2; p++)); do
        port_free "$p" || return 1
    done
    return 0
}

# take_base_port COUNT LOW HIGH: sets base_port as pick_base_port chooses
# it, with the buckets of 100 ports it touches held (scripts/ports.sh) so
# that no concurrent test or drill takes them, even after one of ours is
# freed by a kill; ports_taken lists the locks, for release_ports.
take_base_port() {
    local count=$1 low=$2 high=$3
    for _ in $(seq 50); do
        base_port=$((low + 2 * (RANDOM % ((high - low) / 2))))
        reserve_ports "$base_port" "$count" || continue
        ports_free "$base_port" "$count" && return 0
        release_ports "$ports_taken"
    done
    return 1
}

# wait_for TENTHS COMMAND...: true once COMMAND succeeds, polled every
# 0.1 s for at most TENTHS tenths of a second.
wait_for() {
    local tenths=$1
    shift
    for _ in $(seq "$tenths"); do
        "$@" && return 0
        sleep 0.1
    done
    return 1
}

# refused_start WHY ARGS...: $server_bin with -U 0 and ARGS must exit
# non-zero within 10 s, its message containing WHY; one that keeps
# running started where it should have refused (stopped, and a failure).
refused_start() {
    local why=$1 log p rc=0
    shift
    log=$(mktemp "${TMPDIR:-/tmp}/refused.XXXXXX")
    "$server_bin" -U 0 "$@" </dev/null >"$log" 2>&1 &
    p=$!
    if ! wait_for 100 eval '! kill -0 $p 2>/dev/null'; then
        stop_pid "$p"
        fail "started with $*"
    else
        wait "$p" 2>/dev/null || rc=$?
        if [ "$rc" -ne 0 ] && grep -q -- "$why" "$log"; then
            ok "refused: $* ($(grep -m1 -- "$why" "$log"))"
        else
            fail "with $*: exit $rc, $(head -2 "$log") (want '$why')"
        fi
    fi
    rm -f "$log"
}

# lines_above FILE PATTERN N: FILE has more than N lines matching PATTERN.
lines_above() {
    [ "$(grep -c "$2" "$1")" -gt "$3" ]
}

# port_listener_is PID PORT: the socket listening on PORT belongs to PID
# (or to a child of it).  Another test of a parallel make check may hold a
# port we picked; a bare "the port accepts" would then pass for our process
# being up.  True when ss cannot name the owner (then only the port counts).
port_listener_is() {
    local pid=$1 port=$2 owners p
    owners=$(ss -Hltnp "sport = :$port" 2>/dev/null | grep -o 'pid=[0-9]*' | cut -d= -f2)
    [ -n "$owners" ] || return 0
    for p in $owners; do
        [ "$p" = "$pid" ] && return 0
        [ "$(awk '{ print $4 }' "/proc/$p/stat" 2>/dev/null)" = "$pid" ] && return 0
    done
    return 1
}

# wait_port PID PORT [TENTHS]: true once PORT accepts while PID lives and
# PID is the one listening there (default: 5 s).
wait_port() {
    local pid=$1 port=$2 tenths=${3:-50}
    for _ in $(seq "$tenths"); do
        kill -0 "$pid" 2>/dev/null || return 1
        port_is_open "$port" && port_listener_is "$pid" "$port" && return 0
        sleep 0.1
    done
    return 1
}

# --- processes ---

# stop_pid PID: SIGTERM, up to 3 s to exit, then SIGKILL; reaps it.  An
# empty PID does nothing.
stop_pid() {
    local pid=$1
    [ -n "$pid" ] || return 0
    kill -TERM "$pid" 2>/dev/null
    for _ in $(seq 30); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    kill -KILL "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
}

# start_server LOG [ARGS...]: starts $server_bin on a free loopback port
# (-l 127.0.0.1 -U 0, -u root when run as root, then ARGS), output to LOG;
# sets server_pid and server_port once it accepts.  Retries on another
# port; false if it never came up.  Not for $(...): the server would hold
# the output pipe open.
start_server() {
    local log=$1 user_args=()
    shift
    [ "$(id -u)" -eq 0 ] && user_args=(-u root)
    for _ in 1 2 3 4 5; do
        server_port=$(pick_port) || continue
        "$server_bin" -p "$server_port" -l 127.0.0.1 -U 0 "${user_args[@]}" "$@" </dev/null >"$log" 2>&1 &
        server_pid=$!
        wait_port "$server_pid" "$server_port" && return 0
        stop_pid "$server_pid"
        server_pid=""
    done
    return 1
}

# start_proxy LOG [ARGS...]: starts $proxy_bin (the caller's, else the
# in-tree cocytus-proxy) on a free loopback port (-p PORT -l 127.0.0.1,
# then ARGS), output to LOG; sets proxy_pid and proxy_port once it
# accepts.  Retries on another port; false if it never came up.  Not for
# $(...): the proxy would hold the output pipe open.
start_proxy() {
    local log=$1 bin=${proxy_bin:-$build_dir/client/cocytus-proxy}
    shift
    for _ in 1 2 3 4 5; do
        proxy_port=$(pick_port) || continue
        "$bin" -p "$proxy_port" -l 127.0.0.1 "$@" </dev/null >"$log" 2>&1 &
        proxy_pid=$!
        wait_port "$proxy_pid" "$proxy_port" && return 0
        stop_pid "$proxy_pid"
        proxy_pid=""
    done
    return 1
}

# --- clusters ---

# cluster_up DIR NPORTS LOW HIGH [UP-ARGS...]: `scripts/cluster up --dir DIR
# --base-port B UP-ARGS...` with B from take_base_port NPORTS LOW HIGH (its
# ports held until cluster_remove DIR or the test's exit); up to 3 tries on
# new ports, as a program outside the tests may take ours meanwhile (a
# failed try is brought down first).  Output in DIR/up.log, its tail shown
# if every try failed.  Sets base_port.
cluster_up() {
    local cdir=$1 nports=$2 low=$3 high=$4 attempt
    shift 4
    mkdir -p "$cdir" || return 1
    for attempt in 1 2 3; do
        take_base_port "$nports" "$low" "$high" || continue
        echo "$ports_taken" >"$cdir/port-locks"
        bash "$cluster_script" up --dir "$cdir" --base-port "$base_port" "$@" >"$cdir/up.log" 2>&1 \
            && return 0
        echo "cluster up failed on base port $base_port (attempt $attempt)"
        bash "$cluster_script" down --dir "$cdir" >/dev/null 2>&1
        release_ports "$ports_taken"
    done
    tail -n 20 "$cdir/up.log" 2>/dev/null
    return 1
}

# key_owners DIR RECORDS: DIR/owners, a line "KEY HOST:PORT" (or "KEY
# none") for each of cocytus-bench's first RECORDS keys, by the slot map of
# the cluster scripts/cluster runs in DIR (`cocytus-cli map --full`); also
# DIR/all.slots and DIR/map.txt.  False if a tool failed (its message is in
# DIR/map.txt or on stderr).
key_owners() {
    local d=$1 n=$2 bench=${bench_bin:-$build_dir/bench/cocytus-bench}
    "$bench" --print-keys -n "$n" >"$d/all.slots" || return 1
    "$build_dir/client/cocytus-cli" --dir "$d" --full map >"$d/map.txt" 2>&1 || return 1
    # "slots A-B HOST:PORT" lines, then "SLOT KEY" lines
    awk 'BEGIN { n = 0 }
         NR == FNR { if ($1 == "slots") { split($2, r, "-"); lo[n] = r[1] + 0; hi[n] = r[2] + 0; own[n++] = $3 }
                     next }
         { s = $1 + 0; o = "none"
           for (i = 0; i < n; i++) if (s >= lo[i] && s <= hi[i]) { o = own[i]; break }
           print $2, o }' "$d/map.txt" "$d/all.slots" >"$d/owners"
}

# owned_slots DIR ADDR: after key_owners, the slots ADDR serves that hold
# any of cocytus-bench's keys, one per line, the one with the most first.
owned_slots() {
    awk -v a="$2" 'NR == FNR { own[$1] = $2; next }
                   own[$2] == a { c[$1]++ }
                   END { for (s in c) print c[s], s }' "$1/owners" "$1/all.slots" |
        sort -k1,1nr -k2,2n | awk '{ print $2 }'
}

# move_cluster DIR NODES SCHEME ROLE: the start of the move tests.  A
# cluster in DIR (no proxy), cocytus-bench's first 8000 keys written, and
# src and dst set to ROLE's process 0 of groups 0 and 1 (data, primary,
# plain) and slot to src's slot holding the most of those keys.  False,
# with the failure counted, when a step fails.
move_cluster() {
    local d=$1 nodes=$2 scheme=$3 role=$4
    cluster_up "$d" 20 10000 20000 --nodes "$nodes" --scheme "$scheme" --no-proxy ||
        { fail "cluster up ($scheme)"; return 1; }
    src=$(awk -v r="$role" '$1 == r && $2 == 0 && $3 == 0 { print $5; exit }' "$d/endpoints")
    dst=$(awk -v r="$role" '$1 == r && $2 == 1 && $3 == 0 { print $5; exit }' "$d/endpoints")
    [ -n "$src" ] && [ -n "$dst" ] || { fail "no $role process 0 in groups 0 and 1"; return 1; }
    if ! "$build_dir/bench/cocytus-bench" -s "$src" -n 8000 --no-run >"$d/load.out" 2>&1 ||
        ! grep -q "total_errors=0" "$d/load.out"; then
        fail "load: $(tail -n 2 "$d/load.out")"
        return 1
    fi
    ok "8000 keys written"
    key_owners "$d" 8000 || { fail "cannot read the slot map"; return 1; }
    slot=$(owned_slots "$d" "$src" | head -n 1)
    [ -n "$slot" ] || { fail "no slot of $src holds a key"; return 1; }
}

# cluster_remove DIR: brings down quietly whatever scripts/cluster runs in
# DIR, then removes DIR.  An empty DIR does nothing.
cluster_remove() {
    [ -n "$1" ] || return 0
    bash "$cluster_script" down --dir "$1" >/dev/null 2>&1
    release_ports "$(cat "$1/port-locks" 2>/dev/null)"
    rm -rf "$1"
}

# cluster_healthy_again DIR WHEN: counts a failure unless every group of
# the cluster in DIR is at full redundancy again within 60 s (`cocytus-cli
# wait-healthy`); WHEN ends the message.
cluster_healthy_again() {
    if "$build_dir/client/cocytus-cli" --dir "$1" wait-healthy --timeout 60 \
        >"$1/healthy.out" 2>&1; then
        ok "full redundancy again $2: $(tail -n 1 "$1/healthy.out")"
    else
        fail "no full redundancy again $2"
        tail -n 20 "$1/healthy.out"
    fi
}

# cluster_check_ok DIR CHECK WHEN: runs `cocytus-cli --dir DIR CHECK`
# (verify, decode-check), shows its output, and counts a failed check
# unless it says "group 0: OK" and "CHECK: all groups OK".  WHEN ends the
# check's message.
cluster_check_ok() {
    local out
    out=$("$build_dir/client/cocytus-cli" --dir "$1" "$2" 2>&1)
    echo "$ cocytus-cli $2"
    echo "$out"
    if echo "$out" | grep -q "group 0: OK" && echo "$out" | grep -q "^$2: all groups OK"; then
        ok "cocytus-cli $2 $3"
    else
        fail "cocytus-cli $2 $3"
    fi
}

# listen_ports PID: the TCP ports PID listens on, one per line.
listen_ports() {
    ss -Hltnp 2>/dev/null | grep "pid=$1," | awk '{ n = split($4, a, ":"); print a[n] }' | sort -u
}

# link_port_of PID CLIENT_PORT: the port PID listens on besides its client
# port (a parity process's, a backup's link port); empty if none.
link_port_of() {
    listen_ports "$1" | grep -vx "$2" | head -n 1
}

# established PORT: connections accepted on PORT still established, over
# TCP or over the port's local twin (a link from a process on this host:
# repl/localtwin.c), whose accepted end is named @cocytus-link/ADDR:PORT.
established() {
    {
        ss -Htn state established "( sport = :$1 )"
        ss -Hx state established | awk -v p=":$1" \
            'index($4, "@cocytus-link/") == 1 && substr($4, length($4) - length(p) + 1) == p'
    } 2>/dev/null | wc -l
}

# port_holds PORT N: exactly N connections accepted on PORT are established
# (for wait_for, which must count afresh on every try).
port_holds() {
    [ "$(established "$1")" -eq "$2" ]
}

# logs_printable DIR: counts a failure if a log in DIR holds a byte outside
# printable ASCII or a line a peer's text forged (link_garbage.py's foreign
# cluster names hold "\nFORGED"; a quoted one stays inside its own line).
logs_printable() {
    if LC_ALL=C grep -n '[^ -~]' "$1"/*.log | head -n 5 | grep -q .; then
        fail "a log holds bytes outside printable ASCII:"
        LC_ALL=C grep -n '[^ -~]' "$1"/*.log | head -n 5 | cat -v
    else
        ok "every log is printable ASCII"
    fi
    if grep -n '^FORGED' "$1"/*.log | head -n 3 | grep -q .; then
        fail "a log line was forged: $(grep -n '^FORGED' "$1"/*.log | head -n 3)"
    else
        ok "no forged log line"
    fi
}

# server_pid HOST:PORT: the pid a server (or the coordinator) at HOST:PORT
# reports in its stats; empty if it does not answer.
server_pid() {
    mc "$1" 'stats\r\n' | awk '$1 == "STAT" && $2 == "pid" { print $3 }'
}

# --- libmemcached's memccapable ---

MEMCCAPABLE_PASSES=27   # tests memccapable 1.1.x runs per mode (memcached passes all)

# need_tls: exits 77 (automake's skip) without the openssl tool (the tests
# make their certificates with it: scripts/certs) or when the build has no
# OpenSSL (configure found no libssl-dev: -Z and TLS lines are refused).
need_tls() {
    if ! command -v openssl >/dev/null 2>&1; then
        echo "SKIP: the openssl tool is not installed (apt-get install openssl)"
        exit 77
    fi
    # The build's config.h says; a server outside a build tree
    # (COCYTUS_SERVER) is asked instead: one built without OpenSSL refuses
    # -Z with "built without TLS", one with it wants a certificate.
    if [ -f "$build_dir/config.h" ]; then
        grep -q '^#define HAVE_OPENSSL 1' "$build_dir/config.h" && return 0
    elif ! timeout 5 "$server_bin" -Z -p 0 -l 127.0.0.1 2>&1 | grep -q 'built without TLS'; then
        return 0
    fi
    echo "SKIP: $server_bin was built without OpenSSL (apt-get install libssl-dev, configure again)"
    exit 77
}

# need_memccapable: sets memccapable_bin ($MEMCCAPABLE, else from PATH), or
# exits 77 (automake's skip) when it is not installed.
need_memccapable() {
    memccapable_bin=${MEMCCAPABLE:-}
    [ -x "$memccapable_bin" ] || memccapable_bin=$(command -v memccapable || command -v memcapable || true)
    if [ -z "$memccapable_bin" ]; then
        echo "SKIP: memccapable not installed (apt-get install libmemcached-tools)"
        exit 77
    fi
}

# memccapable_check LABEL MODE HOST:PORT [SECONDS [IO_TIMEOUT]]: one
# memccapable run in MODE (-a ASCII, -b binary) with its output shown; ok
# if every test passed (exit 0, "All tests passed", MEMCCAPABLE_PASSES
# passes), else fail.  SECONDS bounds the run (default 90), IO_TIMEOUT is
# memccapable's -t (default 5).
memccapable_check() {
    local label=$1 mode=$2 addr=$3 limit=${4:-90} io=${5:-5} output status passes
    echo "== memccapable $mode: $label ($addr)"
    output=$(timeout "$limit" "$memccapable_bin" "$mode" -t "$io" -h "${addr%:*}" -p "${addr##*:}" 2>&1)
    status=$?
    echo "$output"
    passes=$(printf '%s\n' "$output" | grep -c '\[pass\]$')
    if [ "$status" -ne 0 ] || ! printf '%s\n' "$output" | grep -qx 'All tests passed' \
        || [ "$passes" -ne "$MEMCCAPABLE_PASSES" ]; then
        fail "memccapable $mode: $label: exit $status, $passes/$MEMCCAPABLE_PASSES passed"
        return 1
    fi
    ok "memccapable $mode: $label: $passes/$MEMCCAPABLE_PASSES passed"
}

# --- a memcached text client ---

# ctl DIR HOST:PORT 'cocytus WORDS': a control command on a connection that
# proved the cluster secret of DIR/cluster.conf (cocytus-cli admin; the
# servers and the coordinator refuse "cocytus ..." otherwise); prints the
# reply lines.  HOST:PORT may be "coordinator".  A trailing \r\n is dropped.
ctl() {
    local d=$1 addr=$2 cmd=${3%\\r\\n}
    "$build_dir/client/cocytus-cli" --dir "$d" --timeout 2000 admin "$addr" $cmd 2>&1
}

# mc HOST:PORT REQUEST: sends one request (printf %b escapes, so \r\n may be
# written as such) on a new connection and prints the reply lines without
# their \r, up to the line that ends a reply or a 2 s silence (MC_TIMEOUT
# seconds if set).
mc() {
    local addr=$1 request=$2 line
    exec 3<>"/dev/tcp/${addr%:*}/${addr##*:}" || return 1
    printf '%b' "$request" >&3
    while IFS= read -r -t "${MC_TIMEOUT:-2}" line <&3; do
        line=${line%$'\r'}
        echo "$line"
        case $line in
            END | VERSION* | STORED | NOT_STORED | EXISTS | DELETED | TOUCHED | NOT_FOUND | OK* | \
                ERROR* | CLIENT_ERROR* | SERVER_ERROR*) break ;;
        esac
    done
    exec 3<&- 3>&-
}

# --- writers through group 0's data processes (one node, routing off) ---

# group0_addr DIR ROLE I: the client address of group 0's ROLE I, from
# DIR/endpoints (scripts/cluster).
group0_addr() {
    awk -v r="$2" -v i="$3" '$1 == r && $2 == 0 && $3 == i { print $5; exit }' "$1/endpoints"
}

# proc_pid DIR ROLE G I: the pid of group G's ROLE I of the cluster in DIR
# (from the process list: a process restarted by its node has a new one).
proc_pid() {
    pgrep -f -- "--role $2 --cluster $1/cluster.conf --group $3 --index $4( |\$)" | head -1
}

# group0_pid DIR ROLE I: proc_pid in group 0.
group0_pid() {
    proc_pid "$1" "$2" 0 "$3"
}

# group0_before DIR: before_<i> stored through each of data processes 0-2
# (group0_after reads them back).
group0_before() {
    local d=$1 i reply
    for i in 0 1 2; do
        reply=$(mc "$(group0_addr "$d" data "$i")" "set before_$i 0 0 8\r\nbefore_$i\r\n")
        [ "$reply" = STORED ] && ok "set through data process $i" ||
            fail "set through data process $i: $reply"
    done
}

# writer DIR NAME ADDR: sets w<NAME>_<n> = n through ADDR, one connection,
# for at most 20 s and 3000 writes or until DIR/stop-writers exists; each
# reply goes to DIR/writer-NAME.out as "n REPLY".
writer() {
    local d=$1 name=$2 a=$3 n=0 reply end=$((SECONDS + 20))
    while [ "$n" -lt 3000 ] && [ "$SECONDS" -lt "$end" ] && [ ! -e "$d/stop-writers" ]; do
        n=$((n + 1))
        reply=$(mc "$a" "set w${name}_$n 0 0 ${#n}\r\n$n\r\n")
        echo "$n $reply" >>"$d/writer-$name.out"
    done
}

# Writers in the background.  writer_bg DIR NAME ADDR runs `writer` in the
# background and adds its pid to writer_pids; writers_finish DIR tells them
# to stop and waits for them; writers_kill DIR, for a test's exit cleanup,
# stops and kills those left.
writer_pids=""
writer_bg() {
    writer "$@" &
    writer_pids="$writer_pids $!"
}

writers_finish() {
    touch "$1/stop-writers"
    # shellcheck disable=SC2086
    wait $writer_pids
    writer_pids=""
}

writers_kill() {
    touch "$1/stop-writers" 2>/dev/null
    # shellcheck disable=SC2086
    [ -n "$writer_pids" ] && kill $writer_pids 2>/dev/null
    writer_pids=""
}

# writer_read_back DIR NAME ADDR: every write that writer NAME saw STORED
# reads back through ADDR, and there was at least one.
writer_read_back() {
    local d=$1 name=$2 a=$3 stored missing n
    stored=$(awk '$2 == "STORED"' "$d/writer-$name.out" | wc -l)
    missing=0
    for n in $(awk '$2 == "STORED" { print $1 }' "$d/writer-$name.out"); do
        [ "$(mc "$a" "get w${name}_$n\r\n" | head -1)" = "VALUE w${name}_$n 0 ${#n}" ] ||
            missing=$((missing + 1))
    done
    [ "$stored" -gt 0 ] && [ "$missing" = 0 ] &&
        ok "writer $name: $stored writes stored, every one reads back" ||
        fail "writer $name: $stored writes stored, $missing of them do not read back"
}

# group0_writer_bg DIR I: writer I through group 0's data process I, in the
# background (writer_bg).
group0_writer_bg() {
    writer_bg "$1" "$2" "$(group0_addr "$1" data "$2")"
}

# group0_writers_read_back DIR I...: writer_read_back of each writer I
# through data process I.
group0_writers_read_back() {
    local d=$1 i
    shift
    for i in "$@"; do
        writer_read_back "$d" "$i" "$(group0_addr "$d" data "$i")"
    done
}

# group0_kill_dp0 DIR: SIGKILLs group 0's data process 0 (its node starts
# it again) and waits up to 15 s for the coordinator to log that parity
# process 0 serves it: ok, or fail with the coordinator's last lines and
# return 1.
group0_kill_dp0() {
    local d=$1
    kill -KILL "$(group0_pid "$d" data 0)"
    if wait_for 150 grep -q "group 0 dp 0 is served by parity process 0" "$d/coordinator.log"; then
        ok "parity process 0 serves data process 0"
    else
        grep "group 0" "$d/coordinator.log" | tail -8
        fail "parity process 0 never served data process 0"
        return 1
    fi
}

# group0_kill_pp1 DIR: SIGKILLs group 0's parity process 1 (its node starts
# it again) and waits up to 30 s for the coordinator to log that it holds
# parity again: ok, or fail with the coordinator's last lines.
group0_kill_pp1() {
    local d=$1
    kill -KILL "$(group0_pid "$d" parity 1)"
    if wait_for 300 grep -q "group 0 parity process 1 holds parity again" "$d/coordinator.log"; then
        ok "parity process 1 was rebuilt"
    else
        grep "group 0" "$d/coordinator.log" | tail -8
        fail "parity process 1 was never rebuilt"
    fi
}

# group0_dp0_back DIR: waits up to 30 s each for data process 0 to serve its
# keys again and for group 0 to be at full redundancy (again since the call:
# a test may have rebuilt a process before): ok, or fail with the
# coordinator's last lines.
group0_dp0_back() {
    local d=$1 healthy="group 0 is at full redundancy again" before
    before=$(grep -c "$healthy" "$d/coordinator.log")
    if wait_for 300 grep -q "group 0 dp 0 serves its keys again" "$d/coordinator.log" &&
        wait_for 300 lines_above "$d/coordinator.log" "$healthy" "$before"; then
        ok "data process 0 serves its keys again, the group is at full redundancy"
    else
        grep "group 0" "$d/coordinator.log" | tail -8
        fail "the group did not return to full redundancy"
    fi
}

# group0_after DIR WHAT: verify finds group 0 exact, and through each of
# data processes 0-2 a new set is stored and before_<i> (group0_before)
# reads back; WHAT ends the messages ("after the rebuild").
group0_after() {
    local d=$1 what=$2 i a reply
    if "$build_dir/client/cocytus-cli" --dir "$d" --timeout 5000 verify >"$d/verify.out" 2>&1; then
        ok "verify $what: the group's parity and metadata are exact"
    else
        tail -5 "$d/verify.out"
        fail "verify $what"
    fi
    for i in 0 1 2; do
        a=$(group0_addr "$d" data "$i")
        reply=$(mc "$a" "set after_$i 0 0 7\r\nafter_$i\r\n")
        [ "$reply" = STORED ] && ok "set through data process $i $what" ||
            fail "set through data process $i $what: ${reply:-nothing in 2 s}"
        reply=$(mc "$a" "get before_$i\r\n" | head -1)
        [ "$reply" = "VALUE before_$i 0 8" ] || fail "get before_$i $what: $reply"
    done
}
