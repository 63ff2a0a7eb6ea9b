#!/usr/bin/env bash
# pbr-sync.sh - throughput and latency of a PBR(2) group (1 primary + 2
# backups, one node, loopback) in its three sync modes, full, semi and async,
# under an all-set workload: 50 connections, each with one set in flight
# (bench/sync-load.c, closed loop), 100 B and 4 KB values.  Prints per-round
# ops/s and latency, per mode the median, and the ratios full/async and
# semi/async against the targets (full >= 0.90, semi >= 0.97), with how
# noisy the run was.  Exit 0 whatever the ratios; 1 when something broke
# (a group would not start, a load failed, verify found a difference).
#
# usage: bench/pbr-sync.sh        (settings through the environment)
#   SIZES="100 4096"  value sizes        CONNS=50        connections
#   ROUNDS=8  ROUND_SECS=8  WARMUP_SECS=2  KEYS=25000 (key space)  KEY_LEN=12
#   MODES="async full semi"  order of the first round (later rounds alternate)
#   MAX_TOTAL_SECS=560  rounds that would end past this budget are skipped
#   COCYTUS_BUILD_DIR  where memcached/, cocytus/, client/ are built (as scripts/cluster)
#   SYNC_LOAD, MC_LOAD built bench/sync-load, bench/mc-load (default: the
#                      in-tree builds when up to date, else compiled into a temp dir)
#
# Method.  For each value size, one fresh PBR(2) group per mode is started
# (scripts/cluster up --scheme pbr:2 --sync MODE; free ports found at run
# time), its key space preloaded with bench/mc-load and warmed up unmeasured;
# the three groups stay up for all rounds of that size.  Rounds alternate the
# modes in the order A B C | C B A | A B C ..., so a steady drift of machine
# load favours none.  Keys are drawn uniformly from KEYS keys, so every set
# after the preload overwrites an item and memory stays flat.  Besides ops/s
# each round records the group's server CPU time per set (utime+stime of its
# three processes from /proc): on a shared machine it moves far less than
# throughput.  The ratios use the per-mode medians; the median of the
# per-round ratios (modes run back to back within a round) is the
# cross-check.  Afterwards `cocytus-cli verify` must find every backup equal
# to its primary.

set -u
set -o pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_DIR=$(cd "$SCRIPT_DIR/.." && pwd)
CLUSTER="$REPO_DIR/scripts/cluster"

SIZES=${SIZES:-"100 4096"}
CONNS=${CONNS:-50}
ROUNDS=${ROUNDS:-8}
ROUND_SECS=${ROUND_SECS:-8}
WARMUP_SECS=${WARMUP_SECS:-2}
KEYS=${KEYS:-25000}
KEY_LEN=${KEY_LEN:-12}
MODES=${MODES:-"async full semi"}
MAX_TOTAL_SECS=${MAX_TOTAL_SECS:-560}

TARGET_FULL=0.90
TARGET_SEMI=0.97
PAPER_FULL=0.5        # Redis paper (key-to-node caching, semi-sync), about
PAPER_SEMI=0.95

SECONDS=0
WORK=""
UP_DIRS=()            # cluster directories that may hold a running group
SUMMARY=()

die() { echo "pbr-sync: error: $*" >&2; exit 1; }
note() { echo "pbr-sync: $*" >&2; }

# ---- cleanup -------------------------------------------------------------------

cleanup() {
    local d
    for d in "${UP_DIRS[@]}"; do
        [ -d "$d" ] && "$CLUSTER" down --dir "$d" >/dev/null 2>&1
    done
    UP_DIRS=()
    [ -n "$WORK" ] && rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# ---- checks and tools -----------------------------------------------------------

is_uint() { case $1 in '' | *[!0-9]*) return 1 ;; *) return 0 ;; esac; }

for v in CONNS ROUNDS ROUND_SECS WARMUP_SECS KEYS KEY_LEN MAX_TOTAL_SECS; do
    is_uint "${!v}" || die "$v must be a whole number (got '${!v}')"
done
[ "$ROUNDS" -ge 1 ] && [ "$ROUNDS" -le 50 ] || die "ROUNDS must be 1..50"
[ "$ROUND_SECS" -ge 1 ] && [ "$ROUND_SECS" -le 120 ] || die "ROUND_SECS must be 1..120"
[ "$CONNS" -ge 1 ] && [ "$CONNS" -le 1000 ] || die "CONNS must be 1..1000"
[ "$KEYS" -ge 1 ] && [ "$KEYS" -le 10000000 ] || die "KEYS must be 1..10000000"
for s in $SIZES; do
    is_uint "$s" && [ "$s" -ge 1 ] && [ "$s" -le 1048576 ] || die "bad size '$s' (1 to 1048576)"
done
for m in $MODES; do
    case $m in full | semi | async) ;; *) die "bad mode '$m' in MODES" ;; esac
done
case " $MODES " in *" async "*) ;; *) die "MODES must include async (the ratios' base)" ;; esac
command -v timeout >/dev/null || die "timeout (coreutils) is missing"

find_cli() {
    local d
    for d in ${COCYTUS_BUILD_DIR:-} "$REPO_DIR/build" "$REPO_DIR"; do
        if [ -x "$d/client/cocytus-cli" ]; then
            CLI="$d/client/cocytus-cli"
            return 0
        fi
    done
    die "no client/cocytus-cli built (run make, or set COCYTUS_BUILD_DIR)"
}

# pick_tool VAR NAME EXTRA_LIBS: $VAR if set, else bench/NAME when it is not
# older than its source, else NAME compiled into $WORK.
pick_tool() {
    local var=$1 name=$2 libs=$3 given=${!1:-} built="$SCRIPT_DIR/$2"
    if [ -n "$given" ]; then
        [ -x "$given" ] || die "$var=$given is not executable"
        printf -v "$var" '%s' "$given"
        return
    fi
    if [ -x "$built" ] && ! [ "$SCRIPT_DIR/$name.c" -nt "$built" ]; then
        printf -v "$var" '%s' "$built"
        return
    fi
    # shellcheck disable=SC2086
    ${CC:-cc} -O2 -Wall -o "$WORK/$name" "$SCRIPT_DIR/$name.c" $libs >"$WORK/cc-$name.log" 2>&1 \
        || { cat "$WORK/cc-$name.log" >&2; die "cannot build bench/$name.c"; }
    printf -v "$var" '%s' "$WORK/$name"
}

# ---- groups ---------------------------------------------------------------------

# primary_port DIR: client port of group 0's primary.
primary_port() {
    awk '$1 == "primary" && $2 == 0 { n = split($5, a, ":"); print a[n] }' "$1/endpoints"
}

# server_pids DIR: pids of every server process of the group.
server_pids() {
    awk '{ print $6 }' "$1/endpoints"
}

# cpu_ticks PID...: user+system clock ticks the processes have used.
cpu_ticks() {
    local pid sum=0 t
    for pid in "$@"; do
        t=$(sed 's/^.*) //' "/proc/$pid/stat" 2>/dev/null | awk '{ print $12 + $13 }')
        sum=$(( sum + ${t:-0} ))
    done
    echo "$sum"
}

# group_alive DIR: every server process of the group still runs.
group_alive() {
    local pid
    for pid in $(server_pids "$1"); do
        kill -0 "$pid" 2>/dev/null || return 1
    done
    return 0
}

# setting_of PORT NAME: value of `STAT NAME` in the server's `stats settings`.
setting_of() {
    local port=$1 name=$2 line i val=""
    exec 3<>"/dev/tcp/127.0.0.1/$port" || return 1
    printf 'stats settings\r\n' >&3
    for ((i = 0; i < 1000; i++)); do
        IFS= read -r -t 2 line <&3 || break
        line=${line%$'\r'}
        [ "$line" = END ] && break
        case $line in "STAT $name "*) val=${line#"STAT $name "} ;; esac
    done
    exec 3<&- 3>&-
    echo "$val"
}

# group_up MODE SIZE: starts a PBR(2) group in $WORK/SIZE-MODE (3 tries: a
# concurrent cluster may take the ports between the search and the bind).
group_up() {
    local mode=$1 size=$2 d="$WORK/$2-$1" mem try
    # per process: the key space at (value + ~100 B item overhead) x 1.5, + 32 MiB
    mem=$(( KEYS * (size + 100) * 3 / 2 / 1048576 + 32 ))
    mkdir -p "$d"
    for try in 1 2 3; do
        UP_DIRS+=("$d")
        if "$CLUSTER" up --nodes 1 --scheme pbr:2 --sync "$mode" --no-proxy --memory "$mem" \
                --dir "$d" >"$d.up.log" 2>&1; then
            return 0
        fi
        note "cluster up ($mode, try $try) failed: $(tail -n 2 "$d.up.log" | tr '\n' ' ')"
        "$CLUSTER" down --dir "$d" >/dev/null 2>&1
        sleep 1
    done
    die "could not start a PBR(2) group with --sync $mode"
}

group_down() {
    "$CLUSTER" down --dir "$1" >/dev/null 2>&1
}

# ---- statistics -----------------------------------------------------------------

median() { sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print "nan";
    else if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.3f", a / b; else print "nan" }'; }
verdict() { # verdict VALUE LIMIT: PASS when VALUE >= LIMIT
    awk -v v="$1" -v l="$2" 'BEGIN { if (v == "nan") print "FAIL (no figure)";
        else print (v + 0 >= l + 0) ? "PASS" : "FAIL" }'
}
# kv LINE KEY: the word after KEY in a sync-load result line
kv() { awk -v k="$2" '{ for (i = 1; i < NF; i++) if ($i == k) { print $(i + 1); exit } }' <<<"$1"; }

# ---- one value size -------------------------------------------------------------

# run_load DIR SIZE SECS OUT: sync-load against the group's primary (bounded).
run_load() {
    local d=$1 size=$2 secs=$3 out=$4
    timeout -k 5 $(( secs + 20 )) "$SYNC_LOAD" -p "$(primary_port "$d")" -c "$CONNS" \
        -z "$size" -n "$KEYS" -k "$KEY_LEN" -d "$secs" >"$out" 2>&1
}

bench_size() {
    local size=$1 deadline=$2 mode d port got rows="$WORK/rows-$1"
    echo "== value $size B: $CONNS connections, all sets, $KEYS keys of $KEY_LEN B, $ROUND_SECS s rounds =="
    declare -A DIR
    for mode in $MODES; do
        group_up "$mode" "$size"
        d="$WORK/$size-$mode"
        DIR[$mode]=$d
        port=$(primary_port "$d")
        got=$(setting_of "$port" sync)
        [ "$got" = "$mode" ] || die "the primary at port $port reports sync '$got', want $mode"
        timeout 300 "$MC_LOAD" -p "$port" -n "$KEYS" -z "$size" -k "$KEY_LEN" -v 100 -q \
            >"$d.preload" 2>&1 || die "preloading the $mode group failed: $(tail -n 2 "$d.preload")"
        if [ "$WARMUP_SECS" -gt 0 ]; then
            run_load "$d" "$size" "$WARMUP_SECS" "$d.warm" \
                || die "warm-up of the $mode group failed: $(tail -n 3 "$d.warm" | tr '\n' ' ')"
        fi
        echo "  $mode: ports $(awk '{ n = split($5, a, ":"); printf "%s ", a[n] }' "$d/endpoints")(primary $port), preloaded and warmed up"
    done

    printf '  %-5s %-5s %9s %8s %8s %8s %9s %10s\n' round mode ops/s avg_us p50_us p99_us max_us cpu_us/op
    : >"$rows"
    local round order out line ops_s avg p50 p99 max ops t0 t1 cpu_op done_rounds=0 nmodes
    local clk_tck
    clk_tck=$(getconf CLK_TCK 2>/dev/null || echo 100)
    nmodes=$(wc -w <<<"$MODES")
    for ((round = 1; round <= ROUNDS; round++)); do
        if [ $(( SECONDS + nmodes * (ROUND_SECS + 2) )) -gt "$deadline" ]; then
            note "time budget: value $size B stops after $done_rounds rounds"
            break
        fi
        if [ $(( round % 2 )) -eq 1 ]; then order=$MODES
        else order=$(tr ' ' '\n' <<<"$MODES" | grep . | tac | tr '\n' ' '); fi
        for mode in $order; do
            d=${DIR[$mode]}
            group_alive "$d" || die "a server of the $mode group died before round $round"
            out="$d.round-$round"
            # shellcheck disable=SC2046
            t0=$(cpu_ticks $(server_pids "$d"))
            run_load "$d" "$size" "$ROUND_SECS" "$out" \
                || die "sync-load against the $mode group failed in round $round: $(tail -n 3 "$out" | tr '\n' ' ')"
            # shellcheck disable=SC2046
            t1=$(cpu_ticks $(server_pids "$d"))
            group_alive "$d" || die "a server of the $mode group died in round $round"
            line=$(grep '^sync-load:' "$out")
            ops_s=$(kv "$line" ops_s); avg=$(kv "$line" avg_us); p50=$(kv "$line" p50_us)
            p99=$(kv "$line" p99_us); max=$(kv "$line" max_us); ops=$(kv "$line" ops)
            cpu_op=$(awk -v d=$(( t1 - t0 )) -v hz="$clk_tck" -v n="$ops" \
                'BEGIN { if (n > 0) printf "%.2f", d * 1e6 / hz / n; else print "nan" }')
            echo "$mode $round $ops_s $avg $p50 $p99 $max $cpu_op" >>"$rows"
            printf '  %-5s %-5s %9s %8s %8s %8s %9s %10s\n' "$round" "$mode" "$ops_s" "$avg" "$p50" "$p99" "$max" "$cpu_op"
        done
        done_rounds=$round
    done
    [ "$done_rounds" -ge 1 ] || die "no rounds ran for value $size B"

    # every backup must hold what its primary holds (async: let it catch up)
    sleep 1
    for mode in $MODES; do
        d=${DIR[$mode]}
        "$CLI" --dir "$d" verify >"$d.verify" 2>&1 \
            || { cat "$d.verify" >&2; die "cocytus-cli verify failed on the $mode group"; }
        echo "  verify $mode: $(head -n 1 "$d.verify")"
        group_down "$d"
    done

    # per mode: medians and spread
    col() { awk -v m="$1" -v c="$2" '$1 == m { print $c }' "$rows"; }
    local -A MED CPU
    local med mn mx spread
    echo
    echo "  | mode | rounds | median ops/s | min | max | spread | avg us | p50 us | p99 us | server CPU us/set |"
    echo "  |---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    for mode in $MODES; do
        med=$(col "$mode" 3 | median)
        mn=$(col "$mode" 3 | sort -g | head -n 1); mx=$(col "$mode" 3 | sort -g | tail -n 1)
        spread=$(awk -v a="$mn" -v b="$mx" -v m="$med" 'BEGIN { printf "%.1f%%", (m > 0) ? 100 * (b - a) / m : 0 }')
        MED[$mode]=$med
        CPU[$mode]=$(col "$mode" 8 | median)
        printf '  | %s | %d | %.0f | %.0f | %.0f | %s | %.0f | %.0f | %.0f | %.2f |\n' "$mode" "$(col "$mode" 3 | wc -l)" \
            "$med" "$mn" "$mx" "$spread" "$(col "$mode" 4 | median)" "$(col "$mode" 5 | median)" \
            "$(col "$mode" 6 | median)" "${CPU[$mode]}"
    done
    echo
    local r rr target paper lo hi
    for mode in $MODES; do
        [ "$mode" = async ] && continue
        if [ "$mode" = full ]; then target=$TARGET_FULL; paper=$PAPER_FULL
        else target=$TARGET_SEMI; paper=$PAPER_SEMI; fi
        r=$(ratio "${MED[$mode]}" "${MED[async]}")
        # the same ratio within each round (back-to-back runs)
        awk -v m="$mode" '{ t[$1 " " $2] = $3 } END { for (k in t) { split(k, a, " ");
                if (a[1] == m && t["async " a[2]] > 0) printf "%.3f\n", t[k] / t["async " a[2]] } }' \
            "$rows" | sort -g >"$WORK/per-round-$mode"
        rr=$(median <"$WORK/per-round-$mode")
        lo=$(head -n 1 "$WORK/per-round-$mode"); hi=$(tail -n 1 "$WORK/per-round-$mode")
        printf '  %s/async: %s (target >= %s: %s; Redis paper ~%s); per-round ratios median %.3f, range %s..%s; server CPU/set ratio %s\n' \
            "$mode" "$r" "$target" "$(verdict "$r" "$target")" "$paper" "$rr" "$lo" "$hi" \
            "$(ratio "${CPU[$mode]}" "${CPU[async]}")"
        SUMMARY+=("$(printf '| %s B | %s/async | %s | >= %s | %s | %.3f | %s..%s |' "$size" "$mode" "$r" \
            "$target" "$(verdict "$r" "$target")" "$rr" "$lo" "$hi")")
    done
    echo
}

# ---- main -----------------------------------------------------------------------

WORK=$(mktemp -d "${TMPDIR:-/tmp}/pbr-sync.XXXXXX") || die "mktemp failed"
find_cli
pick_tool SYNC_LOAD sync-load ""
# shellcheck disable=SC2046
pick_tool MC_LOAD mc-load "$(pkg-config --cflags --libs libmemcached 2>/dev/null)"

echo "pbr-sync: PBR(2) on 1 node (loopback); loader $SYNC_LOAD: $CONNS connections, one set in flight each"
echo "pbr-sync: $ROUNDS rounds x $ROUND_SECS s per mode, modes alternating ($MODES | reversed); host $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo

nsizes=$(wc -w <<<"$SIZES")
left=$nsizes
for size in $SIZES; do
    # each remaining size gets an equal share of the remaining budget
    deadline=$(( SECONDS + (MAX_TOTAL_SECS - SECONDS) / left - 10 ))
    bench_size "$size" "$deadline"
    left=$(( left - 1 ))
done

echo "== summary (load average now $(cut -d' ' -f1-3 /proc/loadavg), ${SECONDS}s elapsed) =="
echo
echo "| value | ratio | medians | target | verdict | per-round median | per-round range |"
echo "|---|---|---:|---|---|---:|---|"
for line in "${SUMMARY[@]}"; do
    echo "$line"
done
exit 0
