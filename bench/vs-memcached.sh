#!/usr/bin/env bash
# vs-memcached.sh - benchmark Cocytus-KV's plain server against Debian's
# memcached on loopback: throughput and latency under memcaslap (90% get and
# 100% set, 1 KB values), and resident memory after loading the same
# 100,000 x 1 KB items with bench/mc-load.c.  Prints per-round figures,
# medians, the ratio ours/memcached and PASS/FAIL against the targets
# (throughput ratio >= 1.0, RSS ratio <= 1.0).  Exits 0 whatever the ratios;
# 1 when something broke (a server would not start, a tool failed).
#
# Environment (all optional):
#   COCYTUS_SERVER  our server binary      (default: <repo>/memcached/cocytus-server)
#   MEMCACHED       reference server       (default: /usr/bin/memcached, run with -t 1)
#   MEMCASLAP       load generator         (default: /usr/bin/memcaslap)
#   MC_LOAD         built bench/mc-load    (default: compiled into a temp dir)
#   ROUNDS=6 ROUND_SECS=8 WARMUP_SECS=2 CONNS=20 VALUE_SIZE=1024 KEY_LEN=32
#   WINDOW=10k (memcaslap keys per connection)  LOAD_KEYS=100000  MEM_MB=1024
#   PIN=0           PIN=1: taskset the load generator onto one CPU and both
#                   servers onto the other (default: no pinning, see below)
#   MAX_TOTAL_SECS=290  rounds that would start past this budget are skipped
#
# Method.  Both servers run at once on free loopback ports picked at run time,
# each fresh (a new pair per workload and for the memory test).  Rounds
# alternate the systems in the order ours, memcached | memcached, ours | ...
# (ABBA), so a steady drift in machine load favours neither; each workload
# starts with an unmeasured warm-up run per server.  memcaslap's gets only ask
# for keys its connection has already set (its "window"), so the 90% get
# workload hits without a separate preload; the get_miss column proves it.
# Besides ops/s the script reports the server's own CPU time per operation
# (utime+stime from /proc/PID/stat over the round): on a shared machine that
# figure moves far less than throughput does.
# Pinning: off by default.  On the 2-core development machine, shared with
# other builds, pinning made results worse: a pinned process cannot leave a
# core that a compiler has taken, so throughput fell 1.5-4x and the spread
# did not shrink.  PIN=1 is there for quiet machines.

set -u
set -o pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_DIR=$(cd "$SCRIPT_DIR/.." && pwd)

COCYTUS_SERVER=${COCYTUS_SERVER:-$REPO_DIR/memcached/cocytus-server}
MEMCACHED=${MEMCACHED:-/usr/bin/memcached}
MEMCASLAP=${MEMCASLAP:-/usr/bin/memcaslap}
MC_LOAD=${MC_LOAD:-}
ROUNDS=${ROUNDS:-6}
ROUND_SECS=${ROUND_SECS:-8}
WARMUP_SECS=${WARMUP_SECS:-2}
CONNS=${CONNS:-20}
VALUE_SIZE=${VALUE_SIZE:-1024}
KEY_LEN=${KEY_LEN:-32}
WINDOW=${WINDOW:-10k}
LOAD_KEYS=${LOAD_KEYS:-100000}
MEM_MB=${MEM_MB:-1024}
PIN=${PIN:-0}
MAX_TOTAL_SECS=${MAX_TOTAL_SECS:-290}

SECONDS=0
PIDS=()            # every server this script started
declare -A LOGS    # pid -> that server's output file
WORK=""

die() { echo "vs-memcached: error: $*" >&2; exit 1; }
note() { echo "vs-memcached: $*" >&2; }

# ---- cleanup ---------------------------------------------------------------

stop_pid() {
    local pid=$1 i
    kill -0 "$pid" 2>/dev/null || return 0
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
    for pid in "${PIDS[@]}"; do
        stop_pid "$pid"
    done
    [ -n "$WORK" ] && rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# ---- checks and setup ------------------------------------------------------

for v in ROUNDS ROUND_SECS WARMUP_SECS CONNS VALUE_SIZE KEY_LEN LOAD_KEYS MEM_MB MAX_TOTAL_SECS; do
    case ${!v} in ''|*[!0-9]*) die "$v must be a whole number (got '${!v}')";; esac
done
[ "$ROUNDS" -ge 1 ] && [ "$ROUNDS" -le 50 ] || die "ROUNDS must be 1..50"
[ "$ROUND_SECS" -ge 1 ] && [ "$ROUND_SECS" -le 600 ] || die "ROUND_SECS must be 1..600"
[ "$KEY_LEN" -ge 17 ] && [ "$KEY_LEN" -le 250 ] || die "KEY_LEN must be 17..250 (memcaslap needs > 16)"
[ -x "$COCYTUS_SERVER" ] || die "our server $COCYTUS_SERVER is missing (build it, or set COCYTUS_SERVER)"
[ -x "$MEMCACHED" ] || die "$MEMCACHED is missing (apt-get install memcached)"
[ -x "$MEMCASLAP" ] || die "$MEMCASLAP is missing (apt-get install libmemcached-tools)"
command -v timeout >/dev/null || die "timeout (coreutils) is missing"
command -v ss >/dev/null || die "ss (iproute2) is missing"

WORK=$(mktemp -d "${TMPDIR:-/tmp}/vs-memcached.XXXXXX") || die "mktemp failed"

if [ -z "$MC_LOAD" ]; then
    command -v pkg-config >/dev/null || die "pkg-config is missing"
    MC_LOAD=$WORK/mc-load
    # shellcheck disable=SC2046
    ${CC:-cc} -O2 -Wall -o "$MC_LOAD" "$SCRIPT_DIR/mc-load.c" \
        $(pkg-config --cflags --libs libmemcached) >"$WORK/cc.log" 2>&1 \
        || { cat "$WORK/cc.log" >&2; die "could not build mc-load (apt-get install libmemcached-dev)"; }
fi
[ -x "$MC_LOAD" ] || die "mc-load $MC_LOAD is not executable"

MEMCACHED_USER=()
[ "$(id -u)" -eq 0 ] && MEMCACHED_USER=(-u root)

# CPUs this script may use: expand "0,2-3" into a list.
allowed_cpus() {
    local spec part a b
    spec=$(taskset -cp $$ 2>/dev/null | sed 's/.*: *//') || return 1
    IFS=, read -r -a parts <<<"$spec"
    for part in "${parts[@]}"; do
        if [[ $part == *-* ]]; then
            a=${part%-*}; b=${part#*-}
            seq "$a" "$b"
        else
            echo "$part"
        fi
    done
}

SERVER_PIN=()
CLIENT_PIN=()
PIN_DESC="none (scheduler places server and load generator)"
if [ "$PIN" = 1 ]; then
    if command -v taskset >/dev/null; then
        mapfile -t CPUS < <(allowed_cpus)
        if [ "${#CPUS[@]}" -ge 2 ]; then
            SERVER_PIN=(taskset -c "${CPUS[0]}")
            CLIENT_PIN=(taskset -c "${CPUS[1]}")
            PIN_DESC="servers on CPU ${CPUS[0]}, memcaslap on CPU ${CPUS[1]}"
        else
            note "fewer than 2 CPUs allowed; not pinning"
        fi
    else
        note "taskset missing; not pinning"
    fi
fi

# ---- servers ---------------------------------------------------------------

port_in_use() { [ -n "$(ss -Htan "( sport = :$1 )" 2>/dev/null)" ]; }

# Wait until 127.0.0.1:$2 accepts connections while pid $1 lives (<= 5 s).
wait_listening() {
    local pid=$1 port=$2 i
    for i in $(seq 1 50); do
        kill -0 "$pid" 2>/dev/null || return 1
        if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
            sleep 0.1
            kill -0 "$pid" 2>/dev/null && return 0
            return 1
        fi
        sleep 0.1
    done
    return 1
}

# start_server NAME -> sets SRV_PID and SRV_PORT.  Picks a random free port
# and retries (at most 8 times) if another process takes it first.
start_server() {
    local name=$1 try port pid log
    for try in 1 2 3 4 5 6 7 8; do
        port=$(( 20000 + (RANDOM * 32768 + RANDOM) % 40000 ))
        port_in_use "$port" && continue
        log=$WORK/$name.$port.log
        if [ "$name" = ours ]; then
            "${SERVER_PIN[@]}" "$COCYTUS_SERVER" -p "$port" -l 127.0.0.1 -U 0 \
                -m "$MEM_MB" -c 1024 >"$log" 2>&1 &
        else
            "${SERVER_PIN[@]}" "$MEMCACHED" -t 1 -p "$port" -l 127.0.0.1 -U 0 \
                -m "$MEM_MB" -c 1024 "${MEMCACHED_USER[@]}" >"$log" 2>&1 &
        fi
        pid=$!
        PIDS+=("$pid")
        LOGS[$pid]=$log
        if wait_listening "$pid" "$port"; then
            SRV_PID=$pid
            SRV_PORT=$port
            return 0
        fi
        stop_pid "$pid"
        note "$name did not come up on port $port (try $try): $(tail -n 3 "$log" | tr '\n' ' ')"
    done
    die "could not start $name"
}

CLK_TCK=$(getconf CLK_TCK 2>/dev/null || echo 100)

# CPU time (user+system) a process has used, in clock ticks.
cpu_ticks() { sed 's/^.*) //' "/proc/$1/stat" 2>/dev/null | awk '{ print $12 + $13 }'; }

# Fail if server $2 (pid $1) is gone, saying how it ended.
check_alive() {
    local pid=$1 name=$2 st
    kill -0 "$pid" 2>/dev/null && return 0
    wait "$pid" 2>/dev/null; st=$?
    if [ "$st" -gt 128 ]; then st="killed by signal $(( st - 128 )) ($(kill -l $(( st - 128 )) 2>/dev/null))"
    else st="exit status $st"; fi
    die "$name server (pid $pid) died during $3: $st; its output: $(tail -n 3 "${LOGS[$pid]:-/dev/null}" 2>/dev/null | tr '\n' ' ')"
}

rss_kb() { awk '/^VmRSS:/ { print $2 }' "/proc/$1/status" 2>/dev/null; }

# ---- statistics helpers ----------------------------------------------------

# median of the numbers on stdin (mean of the middle two for an even count)
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print "nan";
    else if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
minimum() { sort -g | head -n 1; }
maximum() { sort -g | tail -n 1; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.3f", a / b; else print "nan" }'; }
verdict() { # verdict VALUE OP LIMIT  (OP: ge or le)
    awk -v v="$1" -v op="$2" -v l="$3" 'BEGIN {
        if (v == "nan") { print "FAIL (no figure)"; exit }
        ok = (op == "ge") ? (v + 0 >= l + 0) : (v + 0 <= l + 0)
        print (ok ? "PASS" : "FAIL") }'
}

# Parse one memcaslap output: prints "tps avg std p50 p99 max get_miss cmd_get ops".
# p50/p99 are the upper edges of memcaslap's power-of-two latency buckets
# ("Log2 Dist" row K, column C counts latencies in (2^(K+C-1), 2^(K+C)] us).
parse_memcaslap() {
    tr -d '\r' <"$1" | sed 's/\x1b\[[0-9;]*[A-Za-z]//g' | awk '
        /^Run time:/ { for (i = 1; i <= NF; i++) { if ($i == "TPS:") tps = $(i + 1); if ($i == "Ops:") ops = $(i + 1) } }
        /^get_misses:/ { miss = $2 }
        /^cmd_get:/ { gets = $2 }
        /^ *Total Statistics \(/ { intotal = 1; next }
        intotal && /^ *Avg:/ { avg = $2 }
        intotal && /^ *Std:/ { std = $2 }
        intotal && /^ *Max:/ { max = $2 }
        intotal && /Log2 Dist:/ { indist = 1; next }
        indist && /^ *[0-9]+:/ {
            base = $1; sub(":", "", base)
            for (i = 2; i <= NF; i++) { b = base + i - 2; cnt[b] = $i; total += $i; if (b > top) top = b }
            next }
        indist { indist = 0; intotal = 0 }
        END {
            p50 = p99 = "nan"; acc = 0
            for (b = 0; b <= top; b++) {
                acc += cnt[b]
                if (p50 == "nan" && total > 0 && acc >= 0.50 * total) p50 = 2 ^ b
                if (p99 == "nan" && total > 0 && acc >= 0.99 * total) p99 = 2 ^ b
            }
            printf "%s %s %s %s %s %s %s %s %s\n", (tps == "" ? 0 : tps), (avg == "" ? "nan" : avg),
                (std == "" ? "nan" : std), p50, p99, (max == "" ? "nan" : max),
                (miss == "" ? 0 : miss), (gets == "" ? 0 : gets), (ops == "" ? 0 : ops) }'
}

# run_memcaslap PORT CFG SECS OUT  (bounded by timeout; fails on rc or 0 ops)
run_memcaslap() {
    local port=$1 cfg=$2 secs=$3 out=$4
    timeout -k 5 $(( secs + 30 )) "${CLIENT_PIN[@]}" "$MEMCASLAP" \
        -s "127.0.0.1:$port" -F "$cfg" -T 1 -c "$CONNS" -w "$WINDOW" \
        -t "${secs}s" -S "${secs}s" >"$out" 2>&1 || return 1
    grep -q '^Run time:.*TPS: *[1-9]' "$out"
}

# ---- memory ----------------------------------------------------------------

PASSFAIL=()

memory_test() {
    local ours_pid ours_port mc_pid mc_port ours_idle mc_idle ours_rss mc_rss r
    echo "== memory: $LOAD_KEYS items, key $KEY_LEN B, value $VALUE_SIZE B, fresh servers -m $MEM_MB =="
    start_server ours;      ours_pid=$SRV_PID; ours_port=$SRV_PORT
    start_server memcached; mc_pid=$SRV_PID;   mc_port=$SRV_PORT
    ours_idle=$(rss_kb "$ours_pid"); mc_idle=$(rss_kb "$mc_pid")
    timeout 120 "$MC_LOAD" -p "$ours_port" -n "$LOAD_KEYS" -z "$VALUE_SIZE" -k "$KEY_LEN" \
        -v "$LOAD_KEYS" | sed 's/^/  ours:      /' || die "mc-load into ours failed"
    timeout 120 "$MC_LOAD" -p "$mc_port" -n "$LOAD_KEYS" -z "$VALUE_SIZE" -k "$KEY_LEN" \
        -v "$LOAD_KEYS" | sed 's/^/  memcached: /' || die "mc-load into memcached failed"
    sleep 1
    check_alive "$ours_pid" ours "the memory test"; check_alive "$mc_pid" memcached "the memory test"
    ours_rss=$(rss_kb "$ours_pid"); mc_rss=$(rss_kb "$mc_pid")
    [ -n "$ours_rss" ] && [ -n "$mc_rss" ] || die "could not read VmRSS"
    printf '  %-10s idle VmRSS %8s kB   loaded VmRSS %8s kB   (+%s kB)\n' \
        ours "$ours_idle" "$ours_rss" $(( ours_rss - ours_idle )) \
        memcached "$mc_idle" "$mc_rss" $(( mc_rss - mc_idle ))
    r=$(ratio "$ours_rss" "$mc_rss")
    echo "  RSS ratio ours/memcached (loaded): $r   target <= 1.0: $(verdict "$r" le 1.0)"
    echo "  (growth ratio, loaded minus idle: $(ratio $(( ours_rss - ours_idle )) $(( mc_rss - mc_idle ))))"
    PASSFAIL+=("memory RSS ratio $r (<= 1.0): $(verdict "$r" le 1.0)")
    stop_pid "$ours_pid"; stop_pid "$mc_pid"
    echo
}

# ---- throughput ------------------------------------------------------------

# workload NAME GET_PROPORTION DESCRIPTION
workload() {
    local name=$1 getp=$2 desc=$3 cfg ours_pid ours_port mc_pid mc_port
    local round sys port out line tps avg std p50 p99 max miss gets done_rounds=0
    cfg=$WORK/$name.cfg
    {
        echo "# memcaslap config: key length, value size, command mix"
        echo "key"
        echo "$KEY_LEN $KEY_LEN 1"
        echo "value"
        echo "$VALUE_SIZE $VALUE_SIZE 1"
        echo "cmd"
        awk -v g="$getp" 'BEGIN { printf "0 %.3f\n", 1 - g; if (g > 0) printf "1 %.3f\n", g }'
    } >"$cfg"

    echo "== $name: $desc, $CONNS connections, key $KEY_LEN B, value $VALUE_SIZE B, $ROUND_SECS s rounds =="
    start_server ours;      ours_pid=$SRV_PID; ours_port=$SRV_PORT
    start_server memcached; mc_pid=$SRV_PID;   mc_port=$SRV_PORT

    # unmeasured warm-up of each server
    if [ "$WARMUP_SECS" -gt 0 ]; then
        run_memcaslap "$ours_port" "$cfg" "$WARMUP_SECS" "$WORK/$name.warm.ours" \
            || die "memcaslap warm-up against ours failed: $(tail -n 3 "$WORK/$name.warm.ours")"
        run_memcaslap "$mc_port" "$cfg" "$WARMUP_SECS" "$WORK/$name.warm.memcached" \
            || die "memcaslap warm-up against memcached failed"
        sleep 0.5
        check_alive "$ours_pid" ours "$name warm-up"; check_alive "$mc_pid" memcached "$name warm-up"
    fi

    printf '  %-5s %-10s %9s %7s %8s %7s %8s %8s %8s %12s\n' \
        round system ops/s avg_us std_us p50_us p99_us max_us cpu_us/op get_miss/gets
    : >"$WORK/$name.rows"
    local order pid t0 t1 cpu_op
    for round in $(seq 1 "$ROUNDS"); do
        if [ $(( SECONDS + 2 * (ROUND_SECS + 2) )) -gt "$MAX_TOTAL_SECS" ]; then
            note "time budget ${MAX_TOTAL_SECS}s reached: $name stops after $done_rounds rounds"
            break
        fi
        if [ $(( round % 2 )) -eq 1 ]; then order="ours memcached"; else order="memcached ours"; fi
        for sys in $order; do
            if [ "$sys" = ours ]; then port=$ours_port; pid=$ours_pid; else port=$mc_port; pid=$mc_pid; fi
            check_alive "$pid" "$sys" "$name before round $round"
            out=$WORK/$name.$round.$sys
            t0=$(cpu_ticks "$pid")
            run_memcaslap "$port" "$cfg" "$ROUND_SECS" "$out" \
                || die "memcaslap against $sys failed in round $round: $(tail -n 3 "$out" | tr '\n' ' ')"
            t1=$(cpu_ticks "$pid")
            check_alive "$pid" "$sys" "$name round $round"
            line=$(parse_memcaslap "$out")
            read -r tps avg std p50 p99 max miss gets ops <<<"$line"
            cpu_op=$(awk -v d=$(( ${t1:-0} - ${t0:-0} )) -v hz="$CLK_TCK" -v n="$ops" \
                'BEGIN { if (n > 0) printf "%.2f", d * 1e6 / hz / n; else print "nan" }')
            # rows: system round tps avg std p50 p99 max miss gets ops cpu_us/op
            echo "$sys $round $line $cpu_op" >>"$WORK/$name.rows"
            printf '  %-5s %-10s %9s %7s %8s %7s %8s %8s %8s %12s\n' \
                "$round" "$sys" "$tps" "$avg" "$std" "<=$p50" "<=$p99" "$max" "$cpu_op" "$miss/$gets"
        done
        done_rounds=$round
    done
    [ "$done_rounds" -ge 1 ] || die "no rounds ran for $name"

    local s med mn mx spread med_avg med_p99 med_cpu r rp rl rc
    local -A MED LAT CPU
    col() { awk -v s="$1" -v c="$2" '$1 == s { print $c }' "$WORK/$name.rows"; }
    for s in ours memcached; do
        med=$(col "$s" 3 | median); mn=$(col "$s" 3 | minimum); mx=$(col "$s" 3 | maximum)
        med_avg=$(col "$s" 4 | median); med_p99=$(col "$s" 7 | median); med_cpu=$(col "$s" 12 | median)
        spread=$(awk -v a="$mn" -v b="$mx" -v m="$med" 'BEGIN { printf "%.1f", (m > 0) ? 100 * (b - a) / m : 0 }')
        printf '  median %-10s %9.0f ops/s (min %s, max %s: spread %s%% of median); avg latency %s us; p99 <=%s us; server CPU %s us/op\n' \
            "$s" "$med" "$mn" "$mx" "$spread" "$med_avg" "$med_p99" "$med_cpu"
        MED[$s]=$med; LAT[$s]=$med_avg; CPU[$s]=$med_cpu
    done
    # ratio of the two runs of each round (they ran back to back, under about
    # the same machine load): their median is a cross-check on the noise
    rp=$(awk '{ t[$1 " " $2] = $3 } END { for (k in t) { split(k, a, " ");
            if (a[1] == "ours" && t["memcached " a[2]] > 0) print t[k] / t["memcached " a[2]] } }' \
            "$WORK/$name.rows" | median)
    r=$(ratio "${MED[ours]}" "${MED[memcached]}")
    rl=$(ratio "${LAT[ours]}" "${LAT[memcached]}")
    rc=$(ratio "${CPU[ours]}" "${CPU[memcached]}")
    echo "  throughput ratio ours/memcached (medians): $r   target >= 1.0: $(verdict "$r" ge 1.0)"
    printf '  cross-checks: median of per-round ratios %.3f; avg latency ratio %s (lower is better); server CPU/op ratio %s (lower is better)\n' \
        "$rp" "$rl" "$rc"
    PASSFAIL+=("$name throughput ratio $r (>= 1.0): $(verdict "$r" ge 1.0)")
    stop_pid "$ours_pid"; stop_pid "$mc_pid"
    echo
}

# ---- main ------------------------------------------------------------------

echo "vs-memcached: ours=$COCYTUS_SERVER  memcached=$MEMCACHED ($("$MEMCACHED" -V 2>/dev/null))"
echo "vs-memcached: memcaslap -T 1 -c $CONNS -w $WINDOW; $ROUNDS rounds x $ROUND_SECS s per system, alternating; pinning: $PIN_DESC"
echo "vs-memcached: host $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo

memory_test
workload get90 0.9 "90% get / 10% set"
workload set100 0 "100% set"

echo "== summary (load average now $(cut -d' ' -f1-3 /proc/loadavg), ${SECONDS}s elapsed) =="
for line in "${PASSFAIL[@]}"; do
    echo "  $line"
done
exit 0
