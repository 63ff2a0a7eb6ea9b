#!/usr/bin/env bash
# failure.sh - the paper's figure 8 (section 6.4), scaled to this machine:
# throughput over time while two whole nodes fail, for Cocytus with online
# recovery, Cocytus with blocked recovery (writes wait until every unit is
# rebuilt) and PBR.  For each system and workload (read-only, 95:5, 50:50;
# 1 KB values, zipfian): a 5-node cluster with its coordinator on free
# loopback ports (RS(3,5): 25 processes; PBR with 2 backups: 15), RECORDS
# records preloaded, then cocytus-bench with the cached slot map (libcocytus)
# for DURATION seconds with per-interval throughput; every process of node
# 1 killed (SIGKILL to the cocytus-node process group) at KILL1_AT s, every
# process of node 2 at KILL2_AT s.  Meanwhile the coordinator's `cocytus
# groups` is polled every POLL_MS: when each failure was served again
# (served_at_ms) and when all data was recovered (no group taking over or
# recovering, every data process served, every `rec` progress at its total).
#
# usage: bench/eval/failure.sh
#   ROUNDS=3 SYSTEMS="online blocked pbr" WORKLOADS="1 0.95 0.5"
#   RECORDS=300000 DURATION=40 KILL1_AT=10 KILL2_AT=20 INTERVAL_MS=200
#   CONNS=8 POLL_MS=100 KILL_NODES="1 2" MEMORY_MB=256 REGION_MB=128
#   KILL2_AFTER_MS=N: the second kill N ms after the first (to land inside
#   the first recovery, which lasts well under a second at this scale)
#   NAME=failure: the output files' base name
# Writes docs/evaluation/failure.csv (the time series), failure-events.csv
# (one row per run and round: failure and recovery times, throughput before / during
# / after, time without service, get latency), failure.png and failure.md
# (the tables, the settings, how busy the machine was, the paper's
# figures); failure-table.md is the tables alone.
# Takes about 27 minutes with the defaults (3 rounds of 9 runs of ~60 s).
# Exit 0 when every run completed (errors of the load generator are
# figures here, not failures: a stalled system fails requests).

source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

read -r -a SYSTEMS <<<"${SYSTEMS:-online blocked pbr}"
read -r -a WORKLOADS <<<"${WORKLOADS:-1 0.95 0.5}"
read -r -a KILL_NODES <<<"${KILL_NODES:-1 2}"
ROUNDS=${ROUNDS:-3}
RECORDS=${RECORDS:-300000}
DURATION=${DURATION:-40}
KILL1_AT=${KILL1_AT:-10}
KILL2_AT=${KILL2_AT:-20}
KILL2_AFTER_MS=${KILL2_AFTER_MS:-}   # set: the second kill that many ms after the first instead
INTERVAL_MS=${INTERVAL_MS:-200}
CONNS=${CONNS:-8}
POLL_MS=${POLL_MS:-100}
MEMORY_MB=${MEMORY_MB:-256}
REGION_MB=${REGION_MB:-128}
VALUE=1024
NODES=5
NOSERVICE_SHARE=10          # an interval below 10% of the throughput before counts as no service

for v in ROUNDS RECORDS DURATION KILL1_AT KILL2_AT INTERVAL_MS CONNS POLL_MS MEMORY_MB REGION_MB; do
    is_uint "${!v}" && [ "${!v}" -ge 1 ] || { echo "failure.sh: $v must be a positive number" >&2; exit 2; }
done
[ -z "$KILL2_AFTER_MS" ] || is_uint "$KILL2_AFTER_MS" || { echo "failure.sh: KILL2_AFTER_MS must be a number" >&2; exit 2; }
[ "$KILL1_AT" -lt "$KILL2_AT" ] && [ "$KILL2_AT" -lt "$DURATION" ] \
    || { echo "failure.sh: need KILL1_AT < KILL2_AT < DURATION" >&2; exit 2; }
[ "${#KILL_NODES[@]}" -eq 2 ] || { echo "failure.sh: KILL_NODES names two nodes" >&2; exit 2; }
for n in "${KILL_NODES[@]}"; do
    is_uint "$n" && [ "$n" -ge 1 ] && [ "$n" -lt "$NODES" ] \
        || { echo "failure.sh: KILL_NODES must be nodes 1..$((NODES - 1)) (node 0 runs the coordinator)" >&2; exit 2; }
done

declare -A LABEL=([online]="Cocytus online" [blocked]="Cocytus blocked" [pbr]="PBR (2 backups)")
declare -A WLABEL=([1]="read-only" [0.95]="95:5" [0.5]="50:50")

NAME=${NAME:-failure}       # output file names: $NAME.csv, $NAME-events.csv, $NAME.png, $NAME-table.md
CSV=$OUT_DIR/$NAME.csv
EVENTS=$OUT_DIR/$NAME-events.csv
AGG=""                      # the events' medians over the rounds (in $WORK)
TABLE=$OUT_DIR/$NAME-table.md
PNG=$OUT_DIR/$NAME.png

now_ms() {
    local t=$EPOCHREALTIME
    echo $((10#${t/./} / 1000))
}

# sleep_until MS: sleeps until the wall clock reaches MS (unix ms).
sleep_until() {
    local left=$(($1 - $(now_ms)))
    [ "$left" -gt 0 ] && sleep "$(awk -v m="$left" 'BEGIN { printf "%.3f", m / 1000 }')"
    return 0
}

# ---- the cluster ----------------------------------------------------------------

# up SYSTEM: a 5-node cluster with its coordinator (no proxy) on a free run
# of ports; registered with lib.sh so that the EXIT trap stops it.
up() {
    local sys=$1 d="$WORK/sys-$1" scheme try base
    local extra=()
    case $sys in
        online) scheme=rs:3:5; extra=(--recovery online) ;;
        blocked) scheme=rs:3:5; extra=(--recovery blocked) ;;
        pbr) scheme=pbr:2 ;;
    esac
    mkdir -p "$d"
    SYS_NAMES+=("$sys")
    SYS_KIND[$sys]=cluster
    SYS_DIR[$sys]=$d
    for try in 1 2 3; do
        base=$(free_run 60) || die "no run of 60 free ports"
        if "$CLUSTER" up --nodes "$NODES" --scheme "$scheme" --no-proxy --dir "$d" --base-port "$base" \
            --memory "$MEMORY_MB" --region "$REGION_MB" "${extra[@]}" >"$d.up.log" 2>&1; then
            SYS_SEEDS[$sys]=$(awk -v a="${KILL_NODES[0]}" -v b="${KILL_NODES[1]}" '
                ($1 == "data" || $1 == "primary") && $4 != a && $4 != b { printf "%s%s", sep, $5; sep = "," }' \
                "$d/endpoints")
            note "$sys up: $scheme on $NODES nodes, $(wc -l <"$d/endpoints") processes, base port $base"
            return 0
        fi
        note "$sys: cluster up (try $try) failed: $(tail -n 2 "$d.up.log" | tr '\n' ' ')"
        "$CLUSTER" down --dir "$d" >/dev/null 2>&1
        sleep 1
    done
    die "could not start $sys"
}

# kill_node SYSTEM NODE: SIGKILL to the node's process group (cocytus-node
# and every server it started).
kill_node() {
    local d=${SYS_DIR[$1]} pg
    pg=$(cat "$d/node-$2.pid" 2>/dev/null)
    is_uint "$pg" || { note "$1: no pid for node $2"; return 1; }
    kill -KILL -- "-$pg" 2>/dev/null || note "$1: node $2 (process group $pg) was not running"
}

# ---- the coordinator poller -----------------------------------------------------

# poll_groups DIR COORD OUT END_MS: every POLL_MS until END_MS, "poll <unix
# ms>" and the reply lines of `cocytus groups` appended to OUT.  Control
# commands need the cluster secret (docs/security.md), so each poll is one
# `cocytus-cli admin` (its own authenticated connection; the poll time is
# taken before it starts).
poll_groups() {
    local d=$1 hp=$2 out=$3 end=$4 t
    while [ "$(now_ms)" -lt "$end" ]; do
        t=$(now_ms)
        echo "poll $t"
        "$CLUSTER_CLI" --dir "$d" --timeout 2000 admin "$hp" groups 2>/dev/null
        sleep "$(awk -v m="$POLL_MS" 'BEGIN { printf "%.3f", m / 1000 }')"
    done >>"$out"
    return 0
}

# served_between POLLS FROM_MS TO_MS: the latest served_at_ms (a takeover's
# new map published) in [FROM, TO) over every poll, or "-".
served_between() {
    awk -v a="$2" -v b="$3" '
        $1 == "group" { for (i = 4; i < NF; i++) if ($i == "served_at_ms") {
            v = $(i + 1) + 0; if (v >= a && v < b && v > m) m = v } }
        END { if (m > 0) printf "%.0f\n", m; else print "-" }' "$1"
}

# recovered_at POLLS KILL_MS: the first poll at or after the kill at KILL_MS
# (unix ms) in which some group saw a death at or after it (dead_at_ms) and
# every group is settled (no data process without a server, no group taking
# over or recovering, every rec progress at its total), or "-" when none
# qualifies (no recovery: PBR without failover).
recovered_at() {
    awk -v k="$2" '
        function judge() {
            if (t >= k && seen && settled && ngroups > 0 && !found) {
                found = 1; rec = t
            }
        }
        $1 == "poll" { judge(); t = $2; seen = 0; settled = 1; ngroups = 0; next }
        $1 == "group" {
            ngroups++
            if ($3 == "taking-over" || $3 == "recovering" || $3 == "lost") settled = 0
            if ($8 ~ /x/) settled = 0
            for (i = 4; i < NF; i++) {
                if ($i == "dead_at_ms" && $(i + 1) + 0 >= k) seen = 1
                if ($i == "rec" && $(i + 3) == "units") {
                    split($(i + 4), u, "/"); if (u[1] + 0 < u[2] + 0 || u[2] + 0 == 0) settled = 0
                }
            }
        }
        END { judge(); if (found) print rec; else print "-" }' "$1"
}

# ---- one run --------------------------------------------------------------------

# run_one SYSTEM WORKLOAD: start, preload, run with two node kills, collect.
run_one() {
    local sys=$1 rr=$2 round=$3 d out coord t0 first_t first_wall k1 k2 end poll_pid bench_pid rc
    up "$sys"
    d=${SYS_DIR[$sys]}
    out="$WORK/$sys-$rr-$round"
    coord=$(cat "$d/coordinator")
    note "$sys ${WLABEL[$rr]}: loading $RECORDS records of $VALUE B"
    "$BENCH" -s "${SYS_SEEDS[$sys]}" -n "$RECORDS" -v "$VALUE" --no-run -c 8 --depth 16 -q \
        >"$out.load.txt" 2>"$out.load.err" || die "$sys: load failed: $(tail -n 3 "$out.load.err" | tr '\n' ' ')"
    rc=$(bval "$out.load.txt" total_errors total_errors)
    [ "$rc" = 0 ] || note "$sys: the load had $rc errors"
    "$CLUSTER_CLI" --dir "$d" wait-healthy --timeout 20 >"$out.healthy" 2>&1 \
        || note "$sys: not healthy before the run: $(tr '\n' ' ' <"$out.healthy")"

    : >"$out.polls"
    t0=$(now_ms)
    timeout -k 5 $((DURATION + 60)) "$BENCH" -s "${SYS_SEEDS[$sys]}" -n "$RECORDS" -v "$VALUE" --no-load \
        -r "$rr" -c "$CONNS" -t "$DURATION" -i "$INTERVAL_MS" --csv "$out.csv" -q \
        >"$out.txt" 2>"$out.err" &
    bench_pid=$!
    poll_groups "$d" "$coord" "$out.polls" $((t0 + (DURATION + 30) * 1000)) &
    poll_pid=$!
    # The run's clock: t_s of the first CSV row against the wall clock.
    for _ in $(seq 200); do
        [ -f "$out.csv" ] && [ "$(wc -l <"$out.csv")" -ge 2 ] && break
        sleep 0.05
    done
    first_wall=$(now_ms)
    first_t=$(sed -n 2p "$out.csv" | cut -d, -f1)
    [ -n "$first_t" ] || die "$sys: the bench wrote no interval (see $out.err)"
    t0=$(awk -v w="$first_wall" -v t="$first_t" 'BEGIN { printf "%.0f", w - t * 1000 }')
    sleep_until $((t0 + KILL1_AT * 1000))
    k1=$(now_ms)
    kill_node "$sys" "${KILL_NODES[0]}"
    if [ -n "$KILL2_AFTER_MS" ]; then
        sleep_until $((k1 + KILL2_AFTER_MS))
    else
        sleep_until $((t0 + KILL2_AT * 1000))
    fi
    k2=$(now_ms)
    kill_node "$sys" "${KILL_NODES[1]}"
    note "$sys ${WLABEL[$rr]}: killed node ${KILL_NODES[0]} at $(((k1 - t0) / 1000)).$(((k1 - t0) % 1000 / 100)) s and node ${KILL_NODES[1]} at $(((k2 - t0) / 1000)).$(((k2 - t0) % 1000 / 100)) s"
    wait "$bench_pid"
    rc=$?
    [ "$rc" -le 1 ] || note "$sys: cocytus-bench exit $rc: $(tail -n 2 "$out.err" | tr '\n' ' ')"
    # A little longer for a recovery that runs past the load.
    end=$(($(now_ms) + 3000))
    sleep_until "$end"
    kill "$poll_pid" 2>/dev/null
    wait "$poll_pid" 2>/dev/null
    sys_down "$sys"
    collect "$sys" "$rr" "$out" "$t0" "$k1" "$k2" "$3"
}

# rel MS T0: seconds of run time, or "-".
rel() {
    if [ "$1" = - ] || [ "$1" = 0 ]; then echo -; else awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", (a - b) / 1000 }'; fi
}

# collect SYSTEM WORKLOAD OUT T0 K1 K2: rows of failure.csv and failure-events.csv.
collect() {
    local sys=$1 rr=$2 out=$3 t0=$4 k1=$5 k2=$6 round=$7 s1 rec1 s2 rec2 running
    s1=$(served_between "$out.polls" "$k1" "$k2")
    s2=$(served_between "$out.polls" "$k2" 99999999999999)
    rec1=$(recovered_at "$out.polls" "$k1")
    rec2=$(recovered_at "$out.polls" "$k2")
    # The first failure's recovery counts only if it ended before the second
    # kill; "-" when no recovery was seen at all.
    running=-
    if [ "$rec1" != - ] && [ "$rec1" -ge "$k2" ]; then
        running=yes; rec1=-
    elif [ "$rec1" != - ]; then
        running=no
    fi
    awk -F, -v s="$sys" -v w="$rr" -v r="$round" 'NR > 1 { print s "," w "," $0 "," r }' "$out.csv" >>"$CSV"
    local k1s k2s rec_end figs
    k1s=$(rel "$k1" "$t0")
    k2s=$(rel "$k2" "$t0")
    rec_end=$(rel "$rec2" "$t0")
    figs=$(series_figures "$out.csv" "$k1s" "$rec_end")
    # Latency during the recovery windows: from each kill to its recovery
    # end (the first one's runs to the second kill when it had not ended).
    local w1=- lats
    [ "$running" = yes ] && w1=$k2s
    [ "$running" = no ] && w1=$(rel "$rec1" "$t0")
    lats=$(latency_figures "$out.csv" "$k1s" "$w1" "$k2s" "$rec_end")
    echo "$sys,$rr,$k1s,$(rel "$s1" "$t0"),$(rel "$rec1" "$t0"),$running,$k2s,$(rel "$s2" "$t0"),$rec_end,$figs,$(bval "$out.txt" total_errors total_errors),$(bval "$out.txt" phase=run ops_per_s),$lats,$round" >>"$EVENTS"
    note "$sys ${WLABEL[$rr]} round $round: kills at $k1s/$k2s s; served $(rel "$s1" "$t0")/$(rel "$s2" "$t0"); recovered $(rel "$rec1" "$t0")/$rec_end (first still running at the second kill: $running); before,during,after,min,no_service_s: $figs"
}

# series_figures CSV KILL1_S RECOVERED_S: throughput before the first kill
# (from 1 s on), during (first kill to the end of the last recovery, or to
# the end of the run), after (from 1 s after the recovery to the last full
# interval), the lowest interval after the first kill, and the seconds of
# intervals after it below NOSERVICE_SHARE % of before.
series_figures() {
    awk -F, -v k="$2" -v r="$3" -v share="$NOSERVICE_SHARE" -v iv="$INTERVAL_MS" '
        NR == 1 { next }
        { t[NR] = $1; v[NR] = $3; n = NR }
        END {
            rr = (r == "-") ? 1e18 : r + 0
            for (i = 2; i <= n; i++) {
                if (t[i] > 1 && t[i] <= k) { b += v[i]; nb++ }
                else if (t[i] > k && t[i] <= rr) { d += v[i]; nd++ }
                else if (t[i] > rr + 1 && t[i] < t[n]) { a += v[i]; na++ }
            }
            before = nb ? b / nb : 0
            lo = -1; gap = 0
            for (i = 2; i <= n; i++) {
                if (t[i] <= k) continue
                if (lo < 0 || v[i] < lo) lo = v[i]
                if (v[i] < before * share / 100) gap += (t[i] - t[i - 1])
            }
            printf "%.0f,%s,%s,%.0f,%.1f", before, nd ? sprintf("%.0f", d / nd) : "-",
                na ? sprintf("%.0f", a / na) : "-", lo < 0 ? 0 : lo, gap
        }' "$1"
}

# latency_figures CSV K1 END1 K2 END2: "p50,p99,p50,p99": medians of the
# intervals' get p50 and p99 before the first kill (from 1 s on) and in the
# intervals that overlap a recovery window [K1, END1] or [K2, END2] ("-"
# when there is none: no recovery).  Intervals without operations are left
# out.
latency_figures() {
    awk -F, -v k1="$2" -v e1="$3" -v k2="$4" -v e2="$5" -v iv="$INTERVAL_MS" '
        function median(a, n,   i, j, t) {
            for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
            return n ? sprintf("%.0f", (n % 2) ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2) : "-"
        }
        function inside(t, k, e) { return k != "-" && e != "-" && t > k + 0 && t - iv / 1000 < e + 0 }
        NR == 1 || $2 == 0 { next }
        $1 > 1 && $1 <= k1 + 0 { nb++; b50[nb] = $4; b99[nb] = $5; next }
        inside($1, k1, e1) || inside($1, k2, e2) { nd++; d50[nd] = $4; d99[nd] = $5 }
        END { printf "%s,%s,%s,%s", median(b50, nb), median(b99, nb), median(d50, nd), median(d99, nd) }' "$1"
}

# ---- outputs --------------------------------------------------------------------

# aggregate: $AGG, one row per (system, workload) with the columns of
# $EVENTS: the median over the rounds of every figure ("-" values left out;
# "-" when there is none), and for first_running_at_kill2 "yes", "no", "-"
# or "yes in k of n".
aggregate() {
    AGG=$WORK/events-median.csv
    awk -F, '
        function median(key, c,   i, j, t, k, a) {
            k = 0
            for (i = 1; i <= cnt[key]; i++) if (val[key, i, c] != "-") a[++k] = val[key, i, c] + 0
            if (k == 0) return "-"
            for (i = 1; i <= k; i++) for (j = i + 1; j <= k; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
            t = (k % 2) ? a[(k + 1) / 2] : (a[k / 2] + a[k / 2 + 1]) / 2
            return (t >= 100 || (t == int(t) && c >= 10)) ? sprintf("%.0f", t) : sprintf("%.2f", t)
        }
        function running(key,   i, y, d) {
            for (i = 1; i <= cnt[key]; i++) { y += val[key, i, 6] == "yes"; d += val[key, i, 6] == "-" }
            if (d == cnt[key]) return "-"
            if (y == 0) return "no"
            if (y == cnt[key]) return "yes"
            return sprintf("yes in %d of %d", y, cnt[key])
        }
        NR == 1 { ncol = NF - 1; next }
        { key = $1 "," $2; if (!(key in cnt)) order[++nk] = key; cnt[key]++
          for (c = 1; c <= ncol; c++) val[key, cnt[key], c] = $c }
        END {
            for (x = 1; x <= nk; x++) {
                key = order[x]; line = key
                for (c = 3; c <= ncol; c++) line = line "," (c == 6 ? running(key) : median(key, c))
                print line
            }
        }' "$EVENTS" >"$AGG"
}

plot() {
    local gp="$WORK/failure.gp" sys rr i=0 col lt
    declare -A COLOR=([online]="#1f77b4" [blocked]="#d62728" [pbr]="#2ca02c")
    for rr in "${WORKLOADS[@]}"; do
        for sys in "${SYSTEMS[@]}"; do
            # the median over the rounds of each interval (by its end time)
            awk -F, -v s="$sys" -v w="$rr" -v iv="$INTERVAL_MS" '$1 == s && $2 == w {
                    b = int($3 * 1000 / iv + 0.5); n[b]++; v[b, n[b]] = $5 / 1000; if (b > top) top = b }
                function median(b,   i, j, t, k) {
                    k = n[b]; for (i = 1; i <= k; i++) a[i] = v[b, i]
                    for (i = 1; i <= k; i++) for (j = i + 1; j <= k; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
                    return (k % 2) ? a[(k + 1) / 2] : (a[k / 2] + a[k / 2 + 1]) / 2 }
                END { for (b = 0; b <= top; b++) if (n[b]) printf "%.3f\t%.3f\n", b * iv / 1000, median(b) }' "$CSV" \
                >"$WORK/plot-$sys-$rr.dat"
        done
    done
    {
        echo "set terminal pngcairo size 1100,$((300 * ${#WORKLOADS[@]} + 60)) noenhanced font \",10\""
        echo "set output \"$PNG\""
        echo "set multiplot layout ${#WORKLOADS[@]},1 title \"Throughput while nodes ${KILL_NODES[0]} and ${KILL_NODES[1]} fail (1 KB, zipfian, $CONNS connections, ${INTERVAL_MS} ms intervals; dashed: failures, dotted: all data recovered)\""
        echo 'set grid'
        echo 'set key outside right top'
        echo 'set ylabel "kops/s"'
        echo "set xrange [0:$DURATION]"
        echo 'set yrange [0:*]'
        for rr in "${WORKLOADS[@]}"; do
            echo "set title \"${WLABEL[$rr]:-read ratio $rr}\""
            echo 'unset arrow'
            echo "set xlabel \"$([ "$rr" = "${WORKLOADS[-1]}" ] && echo 'seconds since the load started')\""
            # failures (from the first system's run) and each system's recovery end
            awk -F, -v w="$rr" -v s="${SYSTEMS[0]}" '$1 == s && $2 == w {
                printf "set arrow from %s, graph 0 to %s, graph 1 nohead lc rgb \"#555555\" dt 2 lw 1.5\n", $3, $3
                printf "set arrow from %s, graph 0 to %s, graph 1 nohead lc rgb \"#555555\" dt 2 lw 1.5\n", $7, $7 }' "$AGG"
            for sys in "${SYSTEMS[@]}"; do
                col=${COLOR[$sys]}
                awk -F, -v w="$rr" -v s="$sys" -v c="$col" '$1 == s && $2 == w {
                    if ($5 != "-") printf "set arrow from %s, graph 0 to %s, graph 1 nohead lc rgb \"%s\" dt 3 lw 2\n", $5, $5, c
                    if ($9 != "-") printf "set arrow from %s, graph 0 to %s, graph 1 nohead lc rgb \"%s\" dt 3 lw 2\n", $9, $9, c }' "$AGG"
            done
            printf 'plot '
            i=0
            for sys in "${SYSTEMS[@]}"; do
                [ "$i" -gt 0 ] && printf ', '
                printf '"%s" using 1:2 with lines lw 1.5 lc rgb "%s" title "%s"' \
                    "$WORK/plot-$sys-$rr.dat" "${COLOR[$sys]}" "${LABEL[$sys]}"
                i=$((i + 1))
            done
            printf '\n'
        done
        echo 'unset multiplot'
    } >"$gp"
    gnuplot_run "$gp"
}

table() {
    local sys rr
    {
        echo "| workload | system | kill 1 / 2 (s) | served again (s) | all data recovered (s) | 1st recovery still running at kill 2 | ops/s before | during | after | lowest interval | time without service (s) | client errors |"
        echo "|---|---|---|---|---|---|---:|---:|---:|---:|---:|---:|"
        for rr in "${WORKLOADS[@]}"; do
            for sys in "${SYSTEMS[@]}"; do
                awk -F, -v w="$rr" -v s="$sys" -v wl="${WLABEL[$rr]:-$rr}" -v l="${LABEL[$sys]}" '
                    $1 == s && $2 == w {
                        r1 = ($5 == "-") ? "-" : sprintf("%s (+%.2f)", $5, $5 - $3)
                        r2 = ($9 == "-") ? "-" : sprintf("%s (+%.2f)", $9, $9 - $7)
                        printf "| %s | %s | %s / %s | %s / %s | %s / %s | %s | %s | %s | %s | %s | %s | %s |\n",
                            wl, l, $3, $7, $4, $8, r1, r2, $6, $10, $11, $12, $13, $14, $15 }' "$AGG"
            done
        done
        echo
        echo "Get latency, medians of the ${INTERVAL_MS} ms intervals' p50 and p99 (us): before the first failure, and in the intervals that overlap a recovery (from a kill until all data was recovered):"
        echo
        echo "| workload | system | get p50 before | get p50 during recovery | get p99 before | get p99 during recovery |"
        echo "|---|---|---:|---:|---:|---:|"
        for rr in "${WORKLOADS[@]}"; do
            for sys in "${SYSTEMS[@]}"; do
                awk -F, -v w="$rr" -v s="$sys" -v wl="${WLABEL[$rr]:-$rr}" -v l="${LABEL[$sys]}" '
                    $1 == s && $2 == w { printf "| %s | %s | %s | %s | %s | %s |\n", wl, l, $17, $19, $18, $20 }' "$AGG"
            done
        done
    } >"$TABLE"
}

# ---- how busy the machine was --------------------------------------------------

# start_sampler: top every 5 s into $WORK/top.log, stopped by the EXIT trap.
start_sampler() {
    top -b -c -d 5 -w 512 >"$WORK/top.log" 2>/dev/null &
    CLEANUP_CMDS+=("kill $!")
}

# other_cpu: "median max busy" of the CPU (% of one core, of $(nproc)00)
# used by processes that are not this run's (not under $WORK, $BUILD_DIR or
# $REPO_DIR, not this script, not top), per top snapshot, and the share of
# snapshots where that was above half a core.
other_cpu() {
    awk -v w="$WORK" -v b="$BUILD_DIR" -v r="$REPO_DIR" '
        function flush() { if (snap) { n++; v[n] = other } other = 0 }
        /^top - / { flush(); snap = 1; head = 1; next }
        /^ *PID / { head = 0; next }
        head || NF < 12 { next }
        {
            line = $0
            if (index(line, w) || index(line, b) || index(line, r) || index(line, "failure.sh") ||
                $12 == "top") next
            other += $9
        }
        END {
            flush()
            # the first snapshot averages since boot: left out
            for (i = 2; i <= n; i++) { m++; u[m] = v[i]; if (v[i] > 50) busy++; if (v[i] > mx) mx = v[i] }
            for (i = 1; i <= m; i++) for (j = i + 1; j <= m; j++) if (u[j] < u[i]) { t = u[i]; u[i] = u[j]; u[j] = t }
            if (m == 0) print "- - -"
            else printf "%.0f %.0f %.0f\n", (m % 2) ? u[(m + 1) / 2] : (u[m / 2] + u[m / 2 + 1]) / 2, mx, 100 * busy / m
        }' "$WORK/top.log"
}

# ---- the md ------------------------------------------------------------------------

write_md() {
    local md=$OUT_DIR/$NAME.md cmd noise
    read -r -a noise <<<"$(other_cpu)"
    cmd="bench/eval/failure.sh"
    [ "$RECORDS" = 300000 ] || cmd="RECORDS=$RECORDS $cmd"
    [ "$ROUNDS" = 3 ] || cmd="ROUNDS=$ROUNDS $cmd"
    [ "$DURATION" = 40 ] && [ "$KILL1_AT" = 10 ] && [ "$KILL2_AT" = 20 ] ||
        cmd="DURATION=$DURATION KILL1_AT=$KILL1_AT KILL2_AT=$KILL2_AT $cmd"
    [ -z "$KILL2_AFTER_MS" ] || cmd="KILL2_AFTER_MS=$KILL2_AFTER_MS $cmd"
    [ "$NAME" = failure ] || cmd="NAME=$NAME $cmd"
    [ "${SYSTEMS[*]}" = "online blocked pbr" ] || cmd="SYSTEMS=\"${SYSTEMS[*]}\" $cmd"
    [ "${WORKLOADS[*]}" = "1 0.95 0.5" ] || cmd="WORKLOADS=\"${WORKLOADS[*]}\" $cmd"
    [ "$CONNS" = 8 ] && [ "$INTERVAL_MS" = 200 ] || cmd="CONNS=$CONNS INTERVAL_MS=$INTERVAL_MS $cmd"
    {
        echo "<!-- docs/evaluation/$NAME.md - written by bench/eval/failure.sh; the discussion is in README.md. -->"
        echo "# Throughput while two nodes fail (Cocytus fig. 8)"
        echo
        echo "Command: \`$cmd\` (from the repository root, on a build of this tree)."
        echo
        md_machine
        echo
        echo "Other work on the machine during the run (\`top\` every 5 s; CPU of every process that is not this run's, in % of one core, of $(nproc)00%): median ${noise[0]}%, highest ${noise[1]}%, above 50% in ${noise[2]}% of the snapshots."
        echo
        echo "Setup: 5 nodes on loopback, each a \`cocytus-node\` process group, with the coordinator (started by node 0)."
        echo "Cocytus: RS(3,5), 5 coding groups of 3 data + 2 parity processes, one process of each group per node (25 processes), recovery \`online\` or \`blocked\` (the cluster file's \`recovery\` directive; blocked: a recovery process queues every write until all its units are rebuilt)."
        echo "PBR: \`pbr 2\`, 5 groups of a primary and 2 backups, one group member per node on 3 nodes (15 processes)."
        echo "$RECORDS records of $VALUE B preloaded ($(awk -v n="$RECORDS" -v v="$VALUE" 'BEGIN { printf "%.0f", n * v / 1048576 }') MiB of values); then \`cocytus-bench\` with the cached slot map (libcocytus), zipfian keys, $CONNS connections (closed loop), $DURATION s, one CSV row per $INTERVAL_MS ms."
        if [ -n "$KILL2_AFTER_MS" ]; then
            echo "Every process of node ${KILL_NODES[0]} killed (SIGKILL to its process group) at ${KILL1_AT} s, every process of node ${KILL_NODES[1]} $KILL2_AFTER_MS ms later."
        else
            echo "Every process of node ${KILL_NODES[0]} killed (SIGKILL to its process group) at ${KILL1_AT} s, every process of node ${KILL_NODES[1]} at ${KILL2_AT} s."
        fi
        echo "Each node holds one process of every RS group, so every group loses two processes; killed nodes are not restarted."
        echo
        echo "Columns: *served again*: the latest \`served_at_ms\` of the coordinator's \`cocytus groups\` after the kill (the new map naming the recovery processes published); *all data recovered*: the first poll (every $POLL_MS ms) in which no group is taking over or recovering, every data process has a server and every \`rec\` progress is at its total (the recovery processes report progress with their 250 ms heartbeat, so this is up to about 0.35 s late), in brackets the time from the kill; *1st recovery still running at kill 2*: whether the second kill came before that; *ops/s before*: mean of the intervals from 1 s to the first kill; *during*: from the first kill to the end of the last recovery (PBR, which never recovers today: to the end of the run); *after*: from 1 s after the last recovery to the end; *lowest interval*: after the first kill; *time without service*: the intervals after the first kill below ${NOSERVICE_SHARE}% of *before*; *client errors*: requests libcocytus gave up on (2 s retry budget). Times are seconds since the load started."
        echo
        echo "$ROUNDS rounds; every figure in the tables is the median over the rounds (the order of the systems is reversed every other round), and the time from a kill to its recovery in brackets is taken between those medians. The plot shows, for each ${INTERVAL_MS} ms interval, the median of the rounds' throughput; its vertical lines are the median kill and recovery times."
        echo
        cat "$TABLE"
        echo
        echo "Rows: [$NAME.csv]($NAME.csv) (every interval of every run), [$NAME-events.csv]($NAME-events.csv) (one row per run); plot: [$NAME.png]($NAME.png)."
        echo
        echo "## The paper's figure 8"
        echo
        echo "What the paper gives as numbers, in its text (section 6.4): the first node failure at 60 s, the second at 100 s, \"before the recovery of the first failure finishes\"; the repair rate after the first failure, 550 MB/s without client requests; get latency during recovery (read-only) p50 408 us, p90 753 us, p99 1117 us."
        echo "What it says without numbers: read-only and 95:5, Cocytus performs like PBR during recovery; 50:50, recovery lowers throughput \"modestly\" after the first failure and \"more notably\" after the second; the blocked version's throughput collapses even with one failure and 5% sets; the two collapses at the failures come from TCP connection handling."
        echo "The throughput values and the recovery end times are only in the figure's curves, and the copy of the paper available to us is text only: nothing here is read off the figure."
    } >"$md"
}

# ---- main -----------------------------------------------------------------------

eval_init "$NAME"
start_sampler
CLUSTER_CLI=$BUILD_DIR/client/cocytus-cli
[ -x "$CLUSTER_CLI" ] || die "no cocytus-cli at $CLUSTER_CLI"
note "free memory: $(free -m | awk '/^Mem:/ { print $7 }') MB available; $RECORDS records of $VALUE B"
echo "system,workload,t_s,ops,ops_per_s,get_p50_us,get_p99_us,set_p50_us,set_p99_us,errors,round" >"$CSV"
echo "system,workload,kill1_s,served1_s,recovered1_s,first_running_at_kill2,kill2_s,served2_s,recovered_s,before_ops_s,during_ops_s,after_ops_s,lowest_ops_s,no_service_s,client_errors,run_ops_s,get_p50_before_us,get_p99_before_us,get_p50_recovery_us,get_p99_recovery_us,round" >"$EVENTS"
for ((round = 1; round <= ROUNDS; round++)); do
    for rr in "${WORKLOADS[@]}"; do
        for sys in $(order_for "$round" "${SYSTEMS[@]}"); do
            run_one "$sys" "$rr" "$round"
        done
    done
done
aggregate
plot
table
write_md
note "done in ${SECONDS} s; load average $(cut -d' ' -f1-3 /proc/loadavg)"
cat "$TABLE"
