#!/usr/bin/env bash
# vs-twemproxy.sh - cocytus-proxy against twemproxy, and through the proxy
# against direct cached-map routing (issue #12).
#
#   bench/vs-twemproxy.sh                       # 3 rounds of 10 s per run
#   ROUNDS=5 SECONDS=20 bench/vs-twemproxy.sh
#   PROXY_BIN=/path/to/build/client/cocytus-proxy bench/vs-twemproxy.sh
#
# What runs, all on 127.0.0.1, on free ports the script picks:
#   twemproxy      Debian's nutcracker (0.5.0, one thread) in front of three
#                  Debian memcached processes (memcached -t 1 by default:
#                  one worker thread each, like one cocytus-server process);
#                  YAML written to the work directory: distribution ketama,
#                  hash fnv1a_64, auto_eject_hosts false, server_connections 1.
#   cocytus-proxy  in front of a 3-node plain cluster started by
#                  scripts/cluster up --nodes 3 --scheme plain --proxy-port P
#                  (three plain cocytus-server processes and a coordinator).
#   direct         the same cluster without the proxy: cocytus-bench with the
#                  cached slot map, seeded with one of the cluster's servers.
#
# Loads (the same through each system; 20 connections, 1 KB values, 90% get,
# 10,000 records, preloaded before the first measured run):
#   cocytus-bench/raw  cocytus-bench --route follow-raw: its own text-protocol
#                      client, every request to the one endpoint.  Not the
#                      libcocytus route: libcocytus first asks
#                      `config get cluster`, which cocytus-proxy answers with
#                      ERROR (so libcocytus would use it as a single endpoint)
#                      but twemproxy answers by closing the connection.
#   memtier            memtier_benchmark -t 2 -c 10 --ratio 1:9 -d 1024
#                      --protocol memcache_text, keys 1..10000 (when found:
#                      MEMTIER=path, else memtier_benchmark on PATH).  Its
#                      ops/s here is requests / --test-time: memtier's own
#                      run time can be a second off (see run_memtier).
#   cocytus-bench/map  cocytus-bench --route map (libcocytus): through the
#                      proxy (single endpoint, it answers ERROR to the map
#                      request) against direct to the cluster's servers.
#
# Each round runs every pair back to back and alternates the order from one
# round to the next (A B | B A | ...), so a steady drift in machine load
# favours neither side.  Per run: ops/s, get and set p50/p99 as the tool
# reports them; the proxy's CPU time per request (utime + stime of the proxy
# process from /proc/PID/stat, all its threads, delta over the run, divided
# by the requests the tool reports completed) and the same for the three
# backend servers together.
#
# Syscalls per request are measured apart: counting slows the proxy (strace
# by a large factor), so after the rounds each proxy is measured once per
# load generator with the counter attached to the whole proxy process for a
# fixed window that encloses one run of SYSCALL_SECS: perf stat -e
# raw_syscalls:sys_enter when perf can count that tracepoint, else strace -f
# -c.  Syscalls counted in the window / requests that run completed.  The
# window also holds about 2.5 s of idle proxy: neither proxy makes a syscall
# while idle (perf counted none in 5 s), so the idle part adds nothing.
#
# Output: per-run lines, a summary table of medians, the ratios
# cocytus-proxy/twemproxy and proxy/direct, issue #12's targets beside them,
# and a CSV ($OUT) with one row per run.  Exit 0 when every run completed
# (whatever the ratios), 1 when something broke.
#
# Environment (all optional):
#   ROUNDS=3               rounds (1..50)
#   SECONDS=10             seconds per measured run (ROUND_SECS works too;
#                          bash's own SECONDS timer is read from the
#                          environment this script was started with)
#   WARMUP_SECS=2          unmeasured warm-up run per system and load
#   SYSCALL_SECS=5         length of the syscall-counting run
#   SYSCALL_TOOL=auto      auto | perf | strace | none
#   CONNS=20               connections of every load (even; memtier -t 2 -c CONNS/2)
#   VALUE_SIZE=1024 RECORDS=10000
#   PROXY_BIN              cocytus-proxy to test (default: $COCYTUS_BUILD_DIR/client/cocytus-proxy)
#   PROXY_THREADS          pass -T N to it (default: the proxy's own default)
#   COCYTUS_BUILD_DIR      build tree of cocytus-server, cocytus-node and
#                          cocytus-bench (default <repo>/build, else the source tree)
#   COCYTUS_BENCH          cocytus-bench binary (default $COCYTUS_BUILD_DIR/bench/cocytus-bench)
#   NUTCRACKER=/usr/sbin/nutcracker  MEMCACHED=/usr/bin/memcached  MEMCACHED_THREADS=1
#   TW_HASH=fnv1a_64 (or one_at_a_time...)  TW_DIST=ketama (or modula)
#   MEMTIER                memtier_benchmark binary; MEMTIER=none skips it
#   OUT=docs/evaluation/proxy.csv   (relative to the repository when relative)
#   PORT_LO=24000 PORT_HI=32000     range the ports are picked from
#   MAX_TOTAL_SECS=1800    rounds that would start past this are skipped
#   KEEP=1                 keep the work directory (configs, logs, raw outputs)

set -u
set -o pipefail

# SECONDS is bash's timer: a value in the environment seeds it, so read the
# value this script was started with before anything else.
ENV_SECONDS=$(tr '\0' '\n' <"/proc/$$/environ" 2>/dev/null | sed -n 's/^SECONDS=//p' | head -n 1)
[ -n "$ENV_SECONDS" ] || { [ "$SECONDS" -gt 0 ] && ENV_SECONDS=$SECONDS; }
ROUND_SECS=${ROUND_SECS:-${ENV_SECONDS:-10}}
SECONDS=0

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_DIR=$(cd "$SCRIPT_DIR/.." && pwd)
CLUSTER=$REPO_DIR/scripts/cluster

ROUNDS=${ROUNDS:-3}
WARMUP_SECS=${WARMUP_SECS:-2}
SYSCALL_SECS=${SYSCALL_SECS:-5}
SYSCALL_TOOL=${SYSCALL_TOOL:-auto}
CONNS=${CONNS:-20}
VALUE_SIZE=${VALUE_SIZE:-1024}
RECORDS=${RECORDS:-10000}
PROXY_THREADS=${PROXY_THREADS:-}
NUTCRACKER=${NUTCRACKER:-/usr/sbin/nutcracker}
MEMCACHED=${MEMCACHED:-/usr/bin/memcached}
MEMCACHED_THREADS=${MEMCACHED_THREADS:-1}
TW_HASH=${TW_HASH:-fnv1a_64}
TW_DIST=${TW_DIST:-ketama}
PORT_LO=${PORT_LO:-24000}
PORT_HI=${PORT_HI:-32000}
MAX_TOTAL_SECS=${MAX_TOTAL_SECS:-1800}
KEEP=${KEEP:-0}
OUT=${OUT:-docs/evaluation/proxy.csv}
case $OUT in /*) ;; *) OUT=$REPO_DIR/$OUT ;; esac

READ_RATIO=0.9          # cocytus-bench -r; memtier --ratio 1:9 (set:get)
MEMTIER_RATIO=1:9

WORK=""
SHIM=""
SERVER_PIDS=()          # memcached and nutcracker processes started here
COUNTER_PIDS=()         # perf / strace started here
CLUSTER_DIR=""          # set once scripts/cluster up was called
CLK_TCK=$(getconf CLK_TCK 2>/dev/null || echo 100)

die() { echo "vs-twemproxy: error: $*" >&2; exit 1; }
note() { echo "vs-twemproxy: $*" >&2; }
is_uint() { case $1 in '' | *[!0-9]*) return 1 ;; *) return 0 ;; esac; }

# ---- cleanup ---------------------------------------------------------------

stop_pid() {
    local pid=$1 i
    kill -0 "$pid" 2>/dev/null || { wait "$pid" 2>/dev/null; return 0; }
    kill -TERM "$pid" 2>/dev/null
    for i in 1 2 3 4 5 6 7 8 9 10; do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.2
    done
    kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
    return 0
}

cleanup() {
    local pid
    trap - EXIT INT TERM
    for pid in "${COUNTER_PIDS[@]}"; do
        kill -0 "$pid" 2>/dev/null && kill -INT "$pid" 2>/dev/null
    done
    for pid in "${COUNTER_PIDS[@]}"; do
        stop_pid "$pid"
    done
    if [ -n "$CLUSTER_DIR" ] && [ -d "$CLUSTER_DIR" ]; then
        COCYTUS_BUILD_DIR=$SHIM timeout -k 5 60 "$CLUSTER" down --dir "$CLUSTER_DIR" >/dev/null 2>&1 \
            || note "scripts/cluster down --dir $CLUSTER_DIR failed"
    fi
    for pid in "${SERVER_PIDS[@]}"; do
        stop_pid "$pid"
    done
    if [ -n "$WORK" ]; then
        if [ "$KEEP" = 1 ]; then note "work directory kept: $WORK"; else rm -rf "$WORK"; fi
    fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# ---- checks ----------------------------------------------------------------

for v in ROUNDS ROUND_SECS WARMUP_SECS SYSCALL_SECS CONNS VALUE_SIZE RECORDS MEMCACHED_THREADS \
    PORT_LO PORT_HI MAX_TOTAL_SECS; do
    is_uint "${!v}" || die "$v must be a whole number (got '${!v}')"
done
[ "$ROUNDS" -ge 1 ] && [ "$ROUNDS" -le 50 ] || die "ROUNDS must be 1..50"
[ "$ROUND_SECS" -ge 1 ] && [ "$ROUND_SECS" -le 600 ] || die "SECONDS (per run) must be 1..600"
[ "$WARMUP_SECS" -le 60 ] || die "WARMUP_SECS must be 0..60"
[ "$SYSCALL_SECS" -ge 1 ] && [ "$SYSCALL_SECS" -le 60 ] || die "SYSCALL_SECS must be 1..60"
[ "$CONNS" -ge 2 ] && [ "$CONNS" -le 1000 ] && [ $((CONNS % 2)) -eq 0 ] || die "CONNS must be even, 2..1000"
[ "$VALUE_SIZE" -ge 1 ] && [ "$VALUE_SIZE" -le 500000 ] || die "VALUE_SIZE must be 1..500000"
[ "$RECORDS" -ge 100 ] && [ "$RECORDS" -le 10000000 ] || die "RECORDS must be 100..10000000"
[ "$MEMCACHED_THREADS" -ge 1 ] && [ "$MEMCACHED_THREADS" -le 64 ] || die "MEMCACHED_THREADS must be 1..64"
[ "$PORT_LO" -ge 1024 ] && [ "$PORT_HI" -le 65000 ] && [ $((PORT_HI - PORT_LO)) -ge 100 ] \
    || die "want 1024 <= PORT_LO, PORT_HI <= 65000, at least 100 ports between them"
[ -z "$PROXY_THREADS" ] || { is_uint "$PROXY_THREADS" && [ "$PROXY_THREADS" -ge 1 ]; } \
    || die "PROXY_THREADS must be a positive number"
case $TW_DIST in ketama | modula | random) ;; *) die "TW_DIST must be ketama, modula or random" ;; esac
case $SYSCALL_TOOL in auto | perf | strace | none) ;; *) die "SYSCALL_TOOL must be auto, perf, strace or none" ;; esac

BUILD_DIR=""
for d in ${COCYTUS_BUILD_DIR:-} "$REPO_DIR/build" "$REPO_DIR"; do
    if [ -x "$d/memcached/cocytus-server" ] && [ -x "$d/cocytus/cocytus-node" ]; then
        BUILD_DIR=$(cd "$d" && pwd)
        break
    fi
done
[ -n "$BUILD_DIR" ] || die "no built cocytus-server and cocytus-node (build first, or set COCYTUS_BUILD_DIR)"
BENCH=${COCYTUS_BENCH:-$BUILD_DIR/bench/cocytus-bench}
PROXY_BIN=${PROXY_BIN:-$BUILD_DIR/client/cocytus-proxy}
[ -x "$BENCH" ] || die "no cocytus-bench at $BENCH (make, or set COCYTUS_BENCH)"
[ -x "$PROXY_BIN" ] || die "no cocytus-proxy at $PROXY_BIN (make, or set PROXY_BIN)"
PROXY_BIN=$(cd "$(dirname "$PROXY_BIN")" && pwd)/$(basename "$PROXY_BIN")
[ -x "$NUTCRACKER" ] || die "$NUTCRACKER is missing (apt-get install nutcracker)"
[ -x "$MEMCACHED" ] || die "$MEMCACHED is missing (apt-get install memcached)"
[ -x "$CLUSTER" ] || die "$CLUSTER is missing"
command -v timeout >/dev/null || die "timeout (coreutils) is missing"

MEMTIER=${MEMTIER:-$(command -v memtier_benchmark 2>/dev/null || true)}
[ "$MEMTIER" = none ] && MEMTIER=""
if [ -n "$MEMTIER" ]; then
    [ -x "$MEMTIER" ] || die "MEMTIER=$MEMTIER is not executable (MEMTIER=none to skip it)"
    command -v python3 >/dev/null || die "python3 is needed to read memtier's JSON (or MEMTIER=none)"
fi

WORK=$(mktemp -d "${TMPDIR:-/tmp}/vs-twemproxy.XXXXXX") || die "mktemp failed"

# ---- ports -----------------------------------------------------------------

declare -A TAKEN=()

# port_busy PORT: some socket on this host uses PORT, or this script took it.
port_busy() {
    [ -n "${TAKEN[$1]:-}" ] && return 0
    if command -v ss >/dev/null; then
        [ -n "$(ss -Htan "( sport = :$1 )" 2>/dev/null)" ]
    else
        (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
    fi
}

# pick_ports N: sets PICKED to the first of N consecutive free ports in
# PORT_LO..PORT_HI, chosen at random (at most 100 tries), and takes them.
pick_ports() {
    local n=$1 try base p ok
    for try in $(seq 1 100); do
        base=$((PORT_LO + (RANDOM * 32768 + RANDOM) % (PORT_HI - PORT_LO - n)))
        ok=1
        for ((p = base; p < base + n; p++)); do
            port_busy "$p" && { ok=0; break; }
        done
        [ "$ok" = 1 ] || continue
        for ((p = base; p < base + n; p++)); do TAKEN[$p]=1; done
        PICKED=$base
        return 0
    done
    die "no run of $n free ports found in $PORT_LO..$PORT_HI"
}

# wait_listening PID PORT: 127.0.0.1:PORT accepts while PID lives (<= 10 s).
wait_listening() {
    local pid=$1 port=$2 i
    for i in $(seq 1 100); do
        kill -0 "$pid" 2>/dev/null || return 1
        (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && return 0
        sleep 0.1
    done
    return 1
}

# ---- processes and /proc ---------------------------------------------------

# cpu_ticks PID...: utime + stime of the processes (all threads), clock ticks.
cpu_ticks() {
    local pid sum=0 t
    for pid in "$@"; do
        t=$(sed 's/^.*) //' "/proc/$pid/stat" 2>/dev/null | awk '{ print $12 + $13 }')
        [ -n "$t" ] || return 1
        sum=$((sum + t))
    done
    echo "$sum"
}

alive() { local pid; for pid in "$@"; do kill -0 "$pid" 2>/dev/null || return 1; done; }

# ---- twemproxy in front of three memcached -----------------------------------

MC_PIDS=()
MC_PORTS=()
MC_USER=()
[ "$(id -u)" -eq 0 ] && MC_USER=(-u root)

start_memcached() {
    local i=$1 try port pid log
    for try in 1 2 3 4 5; do
        pick_ports 1; port=$PICKED
        log=$WORK/memcached-$i.log
        "$MEMCACHED" -t "$MEMCACHED_THREADS" -p "$port" -l 127.0.0.1 -U 0 -m 64 -c 1024 \
            "${MC_USER[@]}" >"$log" 2>&1 &
        pid=$!
        SERVER_PIDS+=("$pid")
        if wait_listening "$pid" "$port"; then
            MC_PIDS+=("$pid"); MC_PORTS+=("$port")
            return 0
        fi
        stop_pid "$pid"
        note "memcached $i did not come up on port $port (try $try): $(tail -n 2 "$log" | tr '\n' ' ')"
    done
    die "could not start memcached $i"
}

start_twemproxy() {
    local try conf log pid i
    for try in 1 2 3 4 5; do
        pick_ports 2; TW_PORT=$PICKED; TW_STATS=$((PICKED + 1))
        conf=$WORK/nutcracker.yml
        {
            echo "# written by bench/vs-twemproxy.sh"
            echo "cocytus_bench:"
            echo "  listen: 127.0.0.1:$TW_PORT"
            echo "  hash: $TW_HASH"
            echo "  distribution: $TW_DIST"
            echo "  timeout: 2000"
            echo "  auto_eject_hosts: false"
            echo "  server_connections: 1"
            echo "  servers:"
            for i in 0 1 2; do
                echo "   - 127.0.0.1:${MC_PORTS[$i]}:1 mc$i"
            done
        } >"$conf"
        timeout 10 "$NUTCRACKER" -t -c "$conf" >"$WORK/nutcracker-test.log" 2>&1 \
            || die "nutcracker rejects $conf: $(tail -n 3 "$WORK/nutcracker-test.log" | tr '\n' ' ')"
        log=$WORK/nutcracker.log
        "$NUTCRACKER" -c "$conf" -o "$log" -s "$TW_STATS" -a 127.0.0.1 >/dev/null 2>&1 &
        pid=$!
        SERVER_PIDS+=("$pid")
        if wait_listening "$pid" "$TW_PORT"; then
            TW_PID=$pid
            return 0
        fi
        stop_pid "$pid"
        note "nutcracker did not come up on port $TW_PORT (try $try): $(tail -n 2 "$log" 2>/dev/null | tr '\n' ' ')"
    done
    die "could not start nutcracker"
}

# ---- cocytus-proxy in front of a 3-node plain cluster -------------------------

# scripts/cluster takes every binary from one build directory: a directory of
# links to BUILD_DIR's server and node, with client/cocytus-proxy pointing at
# PROXY_BIN (through a wrapper adding -T when PROXY_THREADS is set).  The
# links keep the name cocytus-proxy, which scripts/cluster looks for.
make_shim() {
    SHIM=$WORK/build
    mkdir -p "$SHIM/cocytus" "$SHIM/memcached" "$SHIM/client/real" || die "mkdir $SHIM failed"
    ln -s "$BUILD_DIR/cocytus/cocytus-node" "$SHIM/cocytus/cocytus-node"
    ln -s "$BUILD_DIR/memcached/cocytus-server" "$SHIM/memcached/cocytus-server"
    if [ -z "$PROXY_THREADS" ]; then
        ln -s "$PROXY_BIN" "$SHIM/client/cocytus-proxy"
    else
        ln -s "$PROXY_BIN" "$SHIM/client/real/cocytus-proxy"
        printf '#!/bin/sh\nexec "%s" -T %s "$@"\n' "$SHIM/client/real/cocytus-proxy" "$PROXY_THREADS" \
            >"$SHIM/client/cocytus-proxy"
        chmod +x "$SHIM/client/cocytus-proxy"
    fi
}

start_cluster() {
    local try base
    make_shim
    CLUSTER_DIR=$WORK/cluster
    for try in 1 2 3; do
        pick_ports 8; base=$PICKED       # 3 servers x 2 ports, coordinator 2
        pick_ports 1; PX_PORT=$PICKED
        if COCYTUS_BUILD_DIR=$SHIM timeout -k 5 120 "$CLUSTER" up --nodes 3 --scheme plain \
            --dir "$CLUSTER_DIR" --base-port "$base" --proxy-port "$PX_PORT" \
            >"$WORK/cluster-up.log" 2>&1; then
            PX_PID=$(cat "$CLUSTER_DIR/proxy.pid" 2>/dev/null)
            mapfile -t CL_PIDS < <(awk '$1 == "plain" { print $6 }' "$CLUSTER_DIR/endpoints")
            mapfile -t CL_ADDRS < <(awk '$1 == "plain" { print $5 }' "$CLUSTER_DIR/endpoints")
            [ "${#CL_PIDS[@]}" -eq 3 ] && is_uint "$PX_PID" && alive "$PX_PID" "${CL_PIDS[@]}" \
                || die "cluster up did not leave 3 plain servers and a proxy: $(cat "$CLUSTER_DIR/endpoints" 2>/dev/null | tr '\n' ';')"
            return 0
        fi
        note "scripts/cluster up failed (try $try): $(tail -n 3 "$WORK/cluster-up.log" | tr '\n' ' ')"
        COCYTUS_BUILD_DIR=$SHIM timeout -k 5 60 "$CLUSTER" down --dir "$CLUSTER_DIR" >/dev/null 2>&1
    done
    die "could not start the cluster"
}

# ---- load generators -------------------------------------------------------

# A run prints one line: requests seconds ops_per_s get_p50 get_p99 set_p50
# set_p99 errors get_misses (latencies in microseconds, "-" if unknown).

# run_cb ROUTE HOST:PORT SECS OUTBASE [extra cocytus-bench options]
run_cb() {
    local route=$1 ep=$2 secs=$3 out=$4
    shift 4
    timeout -k 5 $((secs + 60)) "$BENCH" -s "$ep" --route "$route" -c "$CONNS" -v "$VALUE_SIZE" \
        -r "$READ_RATIO" -n "$RECORDS" -t "$secs" -q "$@" >"$out.txt" 2>"$out.err" || return 1
    awk '
        /^phase=run / { for (i = 1; i <= NF; i++) { split($i, kv, "="); run[kv[1]] = kv[2] } }
        /^op=get / { for (i = 1; i <= NF; i++) { split($i, kv, "="); get[kv[1]] = kv[2] } }
        /^op=set / { for (i = 1; i <= NF; i++) { split($i, kv, "="); set[kv[1]] = kv[2] } }
        END {
            if (run["ops"] == "") exit 1
            err = get["errors"] + set["errors"]
            printf "%d %s %s %s %s %s %s %d %d\n", run["ops"] - err, run["seconds"], run["ops_per_s"],
                get["p50_us"], get["p99_us"], set["p50_us"], set["p99_us"], err, get["misses"] }' "$out.txt"
}

# run_memtier HOST:PORT SECS OUTBASE
run_memtier() {
    local ep=$1 secs=$2 out=$3
    timeout -k 5 $((secs + 60)) "$MEMTIER" -s "${ep%:*}" -p "${ep##*:}" --protocol memcache_text \
        -t 2 -c $((CONNS / 2)) --ratio "$MEMTIER_RATIO" -d "$VALUE_SIZE" \
        --key-prefix mt- --key-minimum 1 --key-maximum "$RECORDS" --key-pattern R:R \
        --test-time "$secs" --hide-histogram --print-percentiles 50,99 \
        --json-out-file "$out.json" >"$out.txt" 2>"$out.err" || return 1
    python3 - "$out.json" "$secs" <<'EOF'
import json, sys
stats = json.load(open(sys.argv[1]))["ALL STATS"]
secs = float(sys.argv[2])
def pct(op, q):
    # memtier names them "p50.00" (its "p%.3f" cut to 7 characters)
    for k, v in stats[op].get("Percentile Latencies", {}).items():
        if k.startswith("p") and k[1:].replace(".", "", 1).isdigit() and abs(float(k[1:]) - q) < 1e-6:
            return "%.1f" % (float(v) * 1000.0)
    return "-"
# memtier's own run time (and so its Ops/sec) can be a second off: it
# averages the clients' start and end times field by field (tv_sec, tv_usec)
# in integers.  Every client runs --test-time seconds, so divide by that.
count = int(stats["Totals"]["Count"])
gets = stats["Gets"]
hit, miss = float(gets.get("Hits/sec", 0)), float(gets.get("Misses/sec", 0))
misses = round(int(gets["Count"]) * miss / (hit + miss)) if hit + miss > 0 else 0
print("%d %.3f %.1f %s %s %s %s %d %d" % (count, secs, count / secs,
      pct("Gets", 50), pct("Gets", 99), pct("Sets", 50), pct("Sets", 99),
      int(stats["Totals"].get("Connection Errors", 0)), misses))
EOF
}

# memtier_fill HOST:PORT: set keys 1..RECORDS once, so its gets hit.
memtier_fill() {
    local ep=$1 out=$2
    timeout -k 5 300 "$MEMTIER" -s "${ep%:*}" -p "${ep##*:}" --protocol memcache_text \
        -t 1 -c 4 --ratio 1:0 -d "$VALUE_SIZE" --key-prefix mt- --key-minimum 1 \
        --key-maximum "$RECORDS" --key-pattern P:P --requests allkeys --hide-histogram \
        >"$out.txt" 2>"$out.err"
}

# ---- systems ---------------------------------------------------------------

# endpoint / proxy pid / backend pids of a system
sys_endpoint() {
    case $1 in
        twemproxy) echo "127.0.0.1:$TW_PORT" ;;
        cocytus-proxy) echo "127.0.0.1:$PX_PORT" ;;
        direct) echo "${CL_ADDRS[0]}" ;;
    esac
}
sys_proxy_pid() {
    case $1 in
        twemproxy) echo "$TW_PID" ;;
        cocytus-proxy) echo "$PX_PID" ;;
        direct) echo "" ;;
    esac
}
sys_backends() {
    case $1 in
        twemproxy) echo "${MC_PIDS[*]}" ;;
        *) echo "${CL_PIDS[*]}" ;;
    esac
}

# run_tool TOOL SYSTEM SECS OUTBASE: one run, the line of run_cb/run_memtier.
run_tool() {
    local tool=$1 sys=$2 secs=$3 out=$4 ep
    ep=$(sys_endpoint "$sys")
    case $tool in
        cocytus-bench/raw) run_cb follow-raw "$ep" "$secs" "$out" --no-load ;;
        cocytus-bench/map) run_cb map "$ep" "$secs" "$out" --no-load ;;
        memtier) run_memtier "$ep" "$secs" "$out" ;;
    esac
}

check_system() {
    local sys=$1 what=$2 pid
    for pid in $(sys_proxy_pid "$sys") $(sys_backends "$sys"); do
        alive "$pid" || die "a process of $sys (pid $pid) is gone ($what); see the logs in $WORK (KEEP=1 keeps them)"
    done
}

ROWS=$WORK/rows       # phase round tool system requests seconds ops/s gp50 gp99 sp50 sp99 errors misses pcpu bcpu syscalls method

per_req() { # per_req TICKS REQUESTS -> microseconds per request
    awk -v t="$1" -v n="$2" -v hz="$CLK_TCK" 'BEGIN { if (n > 0 && t != "") printf "%.2f", t * 1e6 / hz / n; else print "-" }'
}

# measure ROUND TOOL SYSTEM
measure() {
    local round=$1 tool=$2 sys=$3 out line ppid bpids p0 p1 b0 b1 pcpu bcpu
    local req secs ops gp50 gp99 sp50 sp99 err miss
    out=$WORK/r$round.${tool//\//-}.$sys
    ppid=$(sys_proxy_pid "$sys"); bpids=$(sys_backends "$sys")
    check_system "$sys" "before round $round"
    p0=""; [ -n "$ppid" ] && p0=$(cpu_ticks "$ppid")
    # shellcheck disable=SC2086
    b0=$(cpu_ticks $bpids)
    line=$(run_tool "$tool" "$sys" "$ROUND_SECS" "$out") \
        || die "$tool through $sys failed in round $round: $(tail -n 3 "$out.err" "$out.txt" 2>/dev/null | tr '\n' ' ')"
    p1=""; [ -n "$ppid" ] && p1=$(cpu_ticks "$ppid")
    # shellcheck disable=SC2086
    b1=$(cpu_ticks $bpids)
    check_system "$sys" "in round $round"
    read -r req secs ops gp50 gp99 sp50 sp99 err miss <<<"$line"
    pcpu=-; [ -n "$ppid" ] && pcpu=$(per_req $((p1 - p0)) "$req")
    bcpu=$(per_req $((b1 - b0)) "$req")
    echo "round $round $tool $sys $line $pcpu $bcpu - -" >>"$ROWS"
    printf '  %-5s %-18s %-14s %9s %9s %8s %8s %8s %6s %9s %9s\n' "$round" "$tool" "$sys" \
        "$ops" "$req" "$gp50" "$gp99" "$sp99" "$err" "$pcpu" "$bcpu"
}

# ---- syscall counting ------------------------------------------------------

choose_syscall_tool() {
    local t=$SYSCALL_TOOL
    if [ "$t" = auto ] || [ "$t" = perf ]; then
        if command -v perf >/dev/null \
            && timeout 20 perf stat -x, -e raw_syscalls:sys_enter -o "$WORK/perf-probe.txt" -- true >/dev/null 2>&1 \
            && grep -q '^[0-9][0-9]*,.*raw_syscalls:sys_enter' "$WORK/perf-probe.txt"; then
            SYSCALL_TOOL=perf; return
        fi
        [ "$t" = perf ] && die "SYSCALL_TOOL=perf, but perf cannot count raw_syscalls:sys_enter here"
    fi
    if [ "$t" = auto ] || [ "$t" = strace ]; then
        if command -v strace >/dev/null; then SYSCALL_TOOL=strace; return; fi
        [ "$t" = strace ] && die "SYSCALL_TOOL=strace, but strace is missing"
    fi
    SYSCALL_TOOL=none
}

# count_syscalls TOOL SYSTEM: one run of SYSCALL_SECS inside a counting
# window attached to the proxy process (all threads).
count_syscalls() {
    local tool=$1 sys=$2 out pid win cpid line n req ops calls per
    out=$WORK/sys.${tool//\//-}.$sys
    pid=$(sys_proxy_pid "$sys")
    win=$((SYSCALL_SECS + 4))
    check_system "$sys" "before counting syscalls"
    if [ "$SYSCALL_TOOL" = perf ]; then
        timeout -k 5 $((win + 30)) perf stat -x, -e raw_syscalls:sys_enter -o "$out.count" \
            -p "$pid" -- sleep "$win" >/dev/null 2>"$out.counter.err" &
    else
        timeout -s INT -k 5 "$win" strace -f -c -q -o "$out.count" -p "$pid" \
            >/dev/null 2>"$out.counter.err" &
    fi
    cpid=$!
    COUNTER_PIDS+=("$cpid")
    sleep 1.5                               # attached before the load starts
    kill -0 "$cpid" 2>/dev/null || die "$SYSCALL_TOOL could not attach to $sys (pid $pid): $(head -c 300 "$out.counter.err")"
    line=$(run_tool "$tool" "$sys" "$SYSCALL_SECS" "$out") \
        || die "$tool through $sys failed while counting syscalls: $(tail -n 3 "$out.err" 2>/dev/null | tr '\n' ' ')"
    n=ok
    kill -0 "$cpid" 2>/dev/null || n=late   # the window closed before the run ended
    wait "$cpid" 2>/dev/null
    check_system "$sys" "while counting syscalls"
    read -r req _ ops _ <<<"$line"
    if [ "$SYSCALL_TOOL" = perf ]; then
        calls=$(awk -F, '/raw_syscalls:sys_enter/ && $1 ~ /^[0-9]+$/ { print $1 }' "$out.count" 2>/dev/null)
    else
        calls=$(awk '$NF == "total" { print $4 }' "$out.count" 2>/dev/null)
    fi
    per=-
    if [ "$n" = late ]; then
        note "syscall window of $sys closed before the $tool run ended: not counted"
    elif is_uint "$calls"; then
        per=$(awk -v c="$calls" -v n="$req" 'BEGIN { if (n > 0) printf "%.2f", c / n; else print "-" }')
    else
        note "no syscall count for $sys: $(head -c 300 "$out.counter.err" "$out.count" 2>/dev/null | tr '\n' ' ')"
    fi
    echo "syscalls - $tool $sys $line - - $per $SYSCALL_TOOL" >>"$ROWS"
    printf '  %-18s %-14s %9s requests (%s ops/s while counted)  %10s syscalls  %6s per request\n' \
        "$tool" "$sys" "$req" "$ops" "${calls:--}" "$per"
}

# ---- statistics ------------------------------------------------------------

median() { grep -v '^-$' | grep -v '^nan$' | sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print "-";
    else if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a != "-" && b != "-" && b > 0) printf "%.2f", a / b; else print "-" }'; }
# col PHASE TOOL SYSTEM FIELD: that field of the matching rows
col() { awk -v p="$1" -v t="$2" -v s="$3" -v f="$4" '$1 == p && $3 == t && $4 == s { print $f }' "$ROWS"; }
# per-round ratios A/B of ops/s for TOOL, then their median
round_ratio() {
    awk -v t="$1" -v a="$2" -v b="$3" '$1 == "round" && $3 == t { v[$4 " " $2] = $7; r[$2] = 1 }
        END { for (k in r) if (v[b " " k] > 0 && (a " " k) in v) print v[a " " k] / v[b " " k] }' "$ROWS" \
        | median | awk '{ if ($1 == "-") print; else printf "%.2f\n", $1 }'
}
# meets VALUE OP LIMIT -> "met" / "not met" / "no figure"
meets() {
    awk -v v="$1" -v op="$2" -v l="$3" 'BEGIN { if (v == "-") { print "no figure"; exit }
        ok = (op == "ge") ? (v + 0 >= l + 0) : (v + 0 <= l + 0); print (ok ? "met" : "not met") }'
}

# ---- main ------------------------------------------------------------------

TOOLS=(cocytus-bench/raw)
[ -n "$MEMTIER" ] && TOOLS+=(memtier)

echo "vs-twemproxy: $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "vs-twemproxy: cocytus-proxy = $PROXY_BIN (modified $(date -u -r "$PROXY_BIN" '+%Y-%m-%d %H:%M UTC'))${PROXY_THREADS:+, -T $PROXY_THREADS}"
echo "vs-twemproxy: servers and cocytus-bench from $BUILD_DIR; $("$NUTCRACKER" -V 2>&1 | head -n 1); $("$MEMCACHED" -V) -t $MEMCACHED_THREADS"
echo "vs-twemproxy: memtier = ${MEMTIER:-not found (MEMTIER=path to use it)}"
echo "vs-twemproxy: $ROUNDS rounds x $ROUND_SECS s per run; $CONNS connections, $VALUE_SIZE B values, ${READ_RATIO} get, $RECORDS records"

for i in 0 1 2; do start_memcached "$i"; done
start_twemproxy
start_cluster
echo "vs-twemproxy: twemproxy 127.0.0.1:$TW_PORT (pid $TW_PID, $TW_DIST/$TW_HASH) -> memcached ${MC_PORTS[*]/#/127.0.0.1:}"
echo "vs-twemproxy: cocytus-proxy 127.0.0.1:$PX_PORT (pid $PX_PID) -> plain cluster ${CL_ADDRS[*]}"
echo

# Preload and warm up: cocytus-bench's records (its load phase), memtier's keys.
echo "== preload and warm-up (unmeasured) =="
warm_secs=$WARMUP_SECS; warm_extra=()
[ "$WARMUP_SECS" -gt 0 ] || { warm_secs=1; warm_extra=(--no-run); }
for sys in twemproxy cocytus-proxy; do
    ep=$(sys_endpoint "$sys")
    run_cb follow-raw "$ep" "$warm_secs" "$WORK/warm.raw.$sys" "${warm_extra[@]}" >/dev/null \
        || die "preload through $sys failed: $(tail -n 3 "$WORK/warm.raw.$sys.err" | tr '\n' ' ')"
    if [ -n "$MEMTIER" ]; then
        memtier_fill "$ep" "$WORK/fill.memtier.$sys" \
            || die "memtier preload through $sys failed: $(tail -n 3 "$WORK/fill.memtier.$sys.err" | tr '\n' ' ')"
        if [ "$WARMUP_SECS" -gt 0 ]; then
            run_memtier "$ep" "$WARMUP_SECS" "$WORK/warm.memtier.$sys" >/dev/null \
                || die "memtier warm-up through $sys failed"
        fi
    fi
    echo "  $sys: $RECORDS cocytus-bench records${MEMTIER:+ and $RECORDS memtier keys} loaded"
done
if [ "$WARMUP_SECS" -gt 0 ]; then
    for sys in cocytus-proxy direct; do
        run_cb map "$(sys_endpoint "$sys")" "$WARMUP_SECS" "$WORK/warm.map.$sys" --no-load >/dev/null \
            || die "cocytus-bench --route map warm-up against $sys failed: $(tail -n 3 "$WORK/warm.map.$sys.err" | tr '\n' ' ')"
    done
fi
echo

echo "== rounds: each pair back to back, order alternating; latencies in us; CPU in us per request =="
printf '  %-5s %-18s %-14s %9s %9s %8s %8s %8s %6s %9s %9s\n' round tool system ops/s requests \
    get_p50 get_p99 set_p99 errors proxy_cpu backend_cpu
: >"$ROWS"
runs_per_round=$(( 2 * ${#TOOLS[@]} + 2 ))
done_rounds=0
for round in $(seq 1 "$ROUNDS"); do
    if [ $((SECONDS + runs_per_round * (ROUND_SECS + 3) + 4 * (SYSCALL_SECS + 6))) -gt "$MAX_TOTAL_SECS" ]; then
        note "time budget MAX_TOTAL_SECS=$MAX_TOTAL_SECS reached: stopping after $done_rounds rounds"
        break
    fi
    if [ $((round % 2)) -eq 1 ]; then pair=(twemproxy cocytus-proxy); direct_pair=(cocytus-proxy direct)
    else pair=(cocytus-proxy twemproxy); direct_pair=(direct cocytus-proxy); fi
    for tool in "${TOOLS[@]}"; do
        for sys in "${pair[@]}"; do measure "$round" "$tool" "$sys"; done
    done
    for sys in "${direct_pair[@]}"; do measure "$round" cocytus-bench/map "$sys"; done
    done_rounds=$round
done
[ "$done_rounds" -ge 1 ] || die "no round ran"
echo

choose_syscall_tool
if [ "$SYSCALL_TOOL" != none ]; then
    echo "== syscalls per request: one ${SYSCALL_SECS} s run per proxy and load, counted by $SYSCALL_TOOL attached to the proxy process =="
    for tool in "${TOOLS[@]}"; do
        for sys in twemproxy cocytus-proxy; do count_syscalls "$tool" "$sys"; done
    done
else
    note "neither perf (raw_syscalls:sys_enter) nor strace usable: no syscall counts"
fi
echo

# ---- summary ---------------------------------------------------------------

echo "== summary: medians of $done_rounds rounds (syscalls: the separate counted run) =="
printf '  %-18s %-14s %9s %8s %8s %8s %10s %12s %12s\n' tool system ops/s get_p50 get_p99 set_p99 \
    proxy_cpu backend_cpu syscalls/req
declare -A M=()
for tool in "${TOOLS[@]}" cocytus-bench/map; do
    if [ "$tool" = cocytus-bench/map ]; then systems=(cocytus-proxy direct); else systems=(twemproxy cocytus-proxy); fi
    for sys in "${systems[@]}"; do
        M[$tool,$sys,ops]=$(col round "$tool" "$sys" 7 | median)
        M[$tool,$sys,gp50]=$(col round "$tool" "$sys" 8 | median)
        M[$tool,$sys,gp99]=$(col round "$tool" "$sys" 9 | median)
        M[$tool,$sys,sp99]=$(col round "$tool" "$sys" 11 | median)
        M[$tool,$sys,pcpu]=$(col round "$tool" "$sys" 14 | median)
        M[$tool,$sys,bcpu]=$(col round "$tool" "$sys" 15 | median)
        M[$tool,$sys,sysc]=$(col syscalls "$tool" "$sys" 16 | median)
        printf '  %-18s %-14s %9s %8s %8s %8s %10s %12s %12s\n' "$tool" "$sys" \
            "$(awk -v v="${M[$tool,$sys,ops]}" 'BEGIN { if (v == "-") print v; else printf "%.0f", v }')" \
            "${M[$tool,$sys,gp50]}" "${M[$tool,$sys,gp99]}" "${M[$tool,$sys,sp99]}" \
            "${M[$tool,$sys,pcpu]}" "${M[$tool,$sys,bcpu]}" "${M[$tool,$sys,sysc]}"
    done
done
echo "  (latencies in us as the tool reports them; CPU = utime+stime in us per completed request)"
echo
echo "== ratios =="
for tool in "${TOOLS[@]}"; do
    a="$tool,cocytus-proxy"; b="$tool,twemproxy"
    echo "  $tool, cocytus-proxy/twemproxy: ops/s $(ratio "${M[$a,ops]}" "${M[$b,ops]}")" \
        "(median of per-round ratios $(round_ratio "$tool" cocytus-proxy twemproxy)," \
        "$(col round "$tool" cocytus-proxy 7 | paste -sd/ -) vs $(col round "$tool" twemproxy 7 | paste -sd/ -));" \
        "get p99 $(ratio "${M[$a,gp99]}" "${M[$b,gp99]}");" \
        "proxy CPU/req $(ratio "${M[$a,pcpu]}" "${M[$b,pcpu]}");" \
        "syscalls/req $(ratio "${M[$a,sysc]}" "${M[$b,sysc]}")"
done
a="cocytus-bench/map,cocytus-proxy"; b="cocytus-bench/map,direct"
R_DIRECT=$(ratio "${M[$a,ops]}" "${M[$b,ops]}")
echo "  cocytus-bench/map, through the proxy/direct: ops/s $R_DIRECT" \
    "(median of per-round ratios $(round_ratio cocytus-bench/map cocytus-proxy direct));" \
    "get p99 $(ratio "${M[$a,gp99]}" "${M[$b,gp99]}")"
echo
echo "== issue #12 targets (informative; a shared machine makes single runs noisy) =="
for tool in "${TOOLS[@]}"; do
    r=$(ratio "${M[$tool,cocytus-proxy,ops]}" "${M[$tool,twemproxy,ops]}")
    echo "  $tool: throughput vs twemproxy $r (>= 1.0, aim 1.2): $(meets "$r" ge 1.0);" \
        "syscalls/req ${M[$tool,cocytus-proxy,sysc]} (<= 4): $(meets "${M[$tool,cocytus-proxy,sysc]}" le 4);" \
        "proxy CPU-us/req ${M[$tool,cocytus-proxy,pcpu]} (<= 12): $(meets "${M[$tool,cocytus-proxy,pcpu]}" le 12)"
done
echo "  through the proxy vs direct $R_DIRECT (>= 0.8): $(meets "$R_DIRECT" ge 0.8)"

# ---- CSV -------------------------------------------------------------------

mkdir -p "$(dirname "$OUT")" || die "cannot create $(dirname "$OUT")"
{
    echo "phase,round,tool,system,requests,seconds,ops_per_s,get_p50_us,get_p99_us,set_p50_us,set_p99_us,errors,get_misses,proxy_cpu_us_per_req,backend_cpu_us_per_req,syscalls_per_req,syscall_counter,conns,value_bytes,read_ratio"
    awk -v c="$CONNS" -v v="$VALUE_SIZE" -v r="$READ_RATIO" '{
        line = ""
        for (i = 1; i <= 17; i++) line = line (i > 1 ? "," : "") ($i == "-" ? "" : $i)
        print line "," c "," v "," r }' "$ROWS"
} >"$OUT.tmp" && mv "$OUT.tmp" "$OUT" || die "cannot write $OUT"
echo
echo "vs-twemproxy: $(wc -l <"$ROWS") rows written to $OUT; took ${SECONDS}s"
