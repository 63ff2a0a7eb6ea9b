#!/usr/bin/env bash
# routing-cache.sh - the Redis key-to-node caching paper's figs. 6-7 on
# Cocytus-KV: throughput of clients that cache the slot map (--route map:
# every request goes straight to the slot's owner) against clients that send
# every request to one fixed node and follow the MOVED reply each time
# (nothing cached), for plain clusters of 1, 2, 3 and 5 nodes (and RS(3,5)
# on 5 nodes).  Two follow clients are measured: --route follow (libcocytus
# on libmemcached, which reconnects after every MOVED because libmemcached
# closes its connection on any SERVER_ERROR) and --route follow-raw (kept
# raw text-protocol sockets, as a Redis cluster client keeps its
# connections: the fair baseline).
#
# usage: bench/routing-cache.sh        (settings through the environment)
#   NODES="1 2 3 5"   plain cluster sizes      RS=1  also RS(3,5) on RS_NODES=5 nodes
#   ROUNDS=3  ROUND_SECS=4  WARMUP_SECS=1      CONNS=8 (client connections)
#   ROUTES="map follow follow-raw"  (map must be among them: the ratios use it)
#   RECORDS=10000  VALUE=1024  READ_RATIO=0.95  DIST=uniform  PROTO=ascii|binary
#   MAX_TOTAL_SECS=540  rounds that would end past this budget are skipped
#   plus bench/eval/lib.sh's COCYTUS_BUILD_DIR, COCYTUS_BENCH, EVAL_OUT, EVAL_KEEP
#
# Method.  For each cluster size one cluster is started (scripts/cluster up
# --no-proxy, free ports, private directory), RECORDS records of VALUE bytes
# are loaded, every route warms up unmeasured, then R rounds run the routes
# back to back, the order reversed every other round (map follow follow-raw
# | follow-raw follow map | ...), with the same seeds (every serving
# process, group 0's first), the same connections, key distribution and read
# ratio.  Per route: the median ops/s over the rounds and the min-max
# spread; the ratios map/follow and map/follow-raw of the medians (and the
# range of the per-round ratios); redirects/ops from the bench's counters;
# new TCP connections/op from the servers' total_connections; and the CPU
# share of the first seed's server process, the one every follow request
# reaches first.
#
# Writes docs/evaluation/routing-cache.csv (one row per cluster),
# routing-cache-rounds.csv (every run), routing-cache.md and .png.  Exit 0
# whatever the figures; 1 when something broke.

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=eval/lib.sh
. "$SCRIPT_DIR/eval/lib.sh"

NODES=${NODES:-"1 2 3 5"}
RS=${RS:-1}
RS_NODES=${RS_NODES:-5}
ROUNDS=${ROUNDS:-3}
ROUND_SECS=${ROUND_SECS:-4}
WARMUP_SECS=${WARMUP_SECS:-1}
CONNS=${CONNS:-8}
RECORDS=${RECORDS:-10000}
VALUE=${VALUE:-1024}
READ_RATIO=${READ_RATIO:-0.95}
DIST=${DIST:-uniform}
PROTO=${PROTO:-ascii}
MAX_TOTAL_SECS=${MAX_TOTAL_SECS:-540}

TARGET_RATIO=2.0       # issue #5: map/follow >= 2x at 3 nodes
ROUTES=${ROUTES:-"map follow follow-raw"}
LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)

for v in RS RS_NODES ROUNDS ROUND_SECS WARMUP_SECS CONNS RECORDS VALUE MAX_TOTAL_SECS; do
    is_uint "${!v}" || { echo "routing-cache: $v must be a whole number (got '${!v}')" >&2; exit 1; }
done
[ "$ROUNDS" -ge 1 ] && [ "$ROUNDS" -le 50 ] || { echo "routing-cache: ROUNDS must be 1..50" >&2; exit 1; }
[ "$ROUND_SECS" -ge 1 ] && [ "$ROUND_SECS" -le 120 ] || { echo "routing-cache: ROUND_SECS must be 1..120" >&2; exit 1; }
[ "$CONNS" -ge 1 ] && [ "$CONNS" -le 256 ] || { echo "routing-cache: CONNS must be 1..256" >&2; exit 1; }
for n in $NODES; do
    is_uint "$n" && [ "$n" -ge 1 ] && [ "$n" -le 16 ] || { echo "routing-cache: bad node count '$n' (1..16)" >&2; exit 1; }
done
case $PROTO in ascii) PROTO_ARGS=() ;; binary) PROTO_ARGS=(--binary) ;;
    *) echo "routing-cache: PROTO must be ascii or binary" >&2; exit 1 ;; esac
case $DIST in uniform | zipfian) ;; *) echo "routing-cache: DIST must be uniform or zipfian" >&2; exit 1 ;; esac
NROUTES=0
for r in $ROUTES; do
    case $r in map | follow | follow-raw) NROUTES=$((NROUTES + 1)) ;;
        *) echo "routing-cache: ROUTES: unknown route '$r' (map, follow, follow-raw)" >&2; exit 1 ;; esac
done
case " $ROUTES " in *" map "*) ;; *) echo "routing-cache: ROUTES must include map" >&2; exit 1 ;; esac
[ "$PROTO" = binary ] && case " $ROUTES " in *" follow-raw "*)
    echo "routing-cache: follow-raw speaks the text protocol: drop it from ROUTES with PROTO=binary" >&2; exit 1 ;; esac

eval_init routing-cache

CSV="$OUT_DIR/routing-cache.csv"
ROUNDS_CSV="$OUT_DIR/routing-cache-rounds.csv"
MD="$OUT_DIR/routing-cache.md"
PNG="$OUT_DIR/routing-cache.png"
RUN_ARGS=(--no-load --run -n "$RECORDS" -r "$READ_RATIO" -d "$DIST" -v "$VALUE" -c "$CONNS" "${PROTO_ARGS[@]}")

echo "routing-cache: $0 with NODES='$NODES' RS=$RS ROUNDS=$ROUNDS ROUND_SECS=$ROUND_SECS CONNS=$CONNS" \
     "RECORDS=$RECORDS VALUE=$VALUE READ_RATIO=$READ_RATIO DIST=$DIST PROTO=$PROTO"
echo "routing-cache: each run: $BENCH -s <seeds> -q --route <${ROUTES// /|}> ${RUN_ARGS[*]} -t $ROUND_SECS"
echo "routing-cache: $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg)"

echo "scheme,nodes,route,round,ops_per_s,ops,redirects,seed_cpu_pct,servers_cpu_pct,client_cpu_pct,get_p50_us,get_p99_us,connections_opened" \
    >"$WORK/rounds.csv"

# first_serving_pid DIR: pid of the first serving process (the first seed).
first_serving_pid() {
    awk '$1 == "plain" || $1 == "data" || $1 == "primary" { print $6; exit }' "$1/endpoints"
}

# servers_seconds CPUFILE: CPU seconds of every server role in a .cpu file.
servers_seconds() {
    awk '$1 != "client" && $1 != "wall" { s += $2 } END { printf "%.3f", s }' "$1"
}

# stat_of HOST PORT NAME: the value of `STAT NAME` in the server's `stats`.
stat_of() {
    local line val=""
    exec 3<>"/dev/tcp/$1/$2" || return 1
    printf 'stats\r\n' >&3
    while IFS= read -r -t 2 line <&3; do
        line=${line%$'\r'}
        [ "$line" = END ] && break
        case $line in "STAT $3 "*) val=${line#"STAT $3 "} ;; esac
    done
    exec 3<&- 3>&-
    echo "${val:-0}"
}

# connections_opened NAME: total_connections summed over the serving
# processes, minus the one this question opens at each.
connections_opened() {
    local addr sum=0 n
    for addr in ${SYS_SEEDS[$1]//,/ }; do
        n=$(stat_of "${addr%:*}" "${addr##*:}" total_connections)
        sum=$((sum + n - 1))
    done
    echo "$sum"
}

pct() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.1f", 100 * a / b; else print "nan" }'; }

# one_run NAME SCHEME NODES ROUTE ROUND SECS: one measured run, a row in rounds.csv.
one_run() {
    local name=$1 scheme=$2 nodes=$3 route=$4 round=$5 secs=$6
    local out="$WORK/$name-$route-$round" pid t0 t1 c0 c1 wall seed_s
    pid=$(first_serving_pid "${SYS_DIR[$name]}")
    c0=$(connections_opened "$name")
    t0=$(proc_ticks "$pid")
    bench_run "$name" "$out" $((secs + 30)) --route "$route" "${RUN_ARGS[@]}" -t "$secs" --seed "$round" \
        || die "$name: cocytus-bench --route $route failed (round $round): $(tail -n 3 "$out.err" | tr '\n' ' ')"
    t1=$(proc_ticks "$pid")
    c1=$(connections_opened "$name")
    bench_check "$out" "$name $route round $round" || die "$name: the $route run reported errors"
    sys_alive "$name" || die "$name: a server died during the $route run"
    wall=$(cval "$out.cpu" wall)
    seed_s=$(awk -v a="$t0" -v b="$t1" -v hz="$CLK_TCK" 'BEGIN { printf "%.3f", (b - a) / hz }')
    printf '%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s\n' "$scheme" "$nodes" "$route" "$round" \
        "$(bval "$out.txt" phase=run ops_per_s)" "$(bval "$out.txt" phase=run ops)" \
        "$(bval "$out.txt" redirects= redirects)" "$(pct "$seed_s" "$wall")" \
        "$(pct "$(servers_seconds "$out.cpu")" "$wall")" "$(pct "$(cval "$out.cpu" client)" "$wall")" \
        "$(bval "$out.txt" op=get p50_us)" "$(bval "$out.txt" op=get p99_us)" "$((c1 - c0))" >>"$WORK/rounds.csv"
    tail -n 1 "$WORK/rounds.csv" | awk -F, '{ printf "  round %s %-10s %9.0f ops/s  redirects/op %.4f  connections opened/op %.4f  first seed CPU %s%%  servers %s%%  client %s%%\n",
        $4, $3, $5, ($6 > 0 ? $7 / $6 : 0), ($6 > 0 ? $13 / $6 : 0), $8, $9, $10 }'
}

# run_config SCHEME NODES: one cluster, all its rounds.
run_config() {
    local scheme=$1 nodes=$2 name route round done_rounds=0 load
    name="${scheme//:/-}-n$nodes"
    if [ $((SECONDS + NROUTES * (ROUND_SECS + 4) + 20)) -gt "$MAX_TOTAL_SECS" ]; then
        note "time budget: skipping $scheme on $nodes nodes"
        return 0
    fi
    echo "== $scheme, $nodes node(s) =="
    sys_up_cluster "$name" "$scheme" "$nodes"
    load="$WORK/$name-load"
    bench_run "$name" "$load" 300 --load --no-run -n "$RECORDS" -v "$VALUE" -c "$CONNS" "${PROTO_ARGS[@]}" \
        || die "$name: loading failed: $(tail -n 3 "$load.err" | tr '\n' ' ')"
    bench_check "$load" "$name load" || die "$name: the load phase reported errors"
    echo "  loaded $RECORDS records: $(bval "$load.txt" phase=load ops_per_s) sets/s"
    if [ "$WARMUP_SECS" -gt 0 ]; then
        for route in $ROUTES; do
            bench_run "$name" "$WORK/$name-warm-$route" $((WARMUP_SECS + 30)) --route "$route" \
                "${RUN_ARGS[@]}" -t "$WARMUP_SECS" || die "$name: warm-up ($route) failed"
        done
    fi
    for ((round = 1; round <= ROUNDS; round++)); do
        if [ $((SECONDS + NROUTES * (ROUND_SECS + 3))) -gt "$MAX_TOTAL_SECS" ]; then
            note "time budget: $name stops after $done_rounds rounds"
            break
        fi
        # shellcheck disable=SC2046
        for route in $(order_for "$round" $ROUTES); do
            one_run "$name" "$scheme" "$nodes" "$route" "$round" "$ROUND_SECS"
        done
        done_rounds=$round
    done
    sys_down "$name"
    [ "$done_rounds" -ge 1 ] || die "$name: no rounds ran"
}

CONFIGS=()
for n in $NODES; do CONFIGS+=("plain $n"); done
[ "$RS" = 1 ] && CONFIGS+=("rs:3:5 $RS_NODES")
for c in "${CONFIGS[@]}"; do
    # shellcheck disable=SC2086
    run_config $c
done


# ---- summary ---------------------------------------------------------------------------

R="$WORK/rounds.csv"
# col SCHEME NODES ROUTE COLUMN: that column over the matching runs
col() { csv_col "$R" "$4" "c[\"scheme\"] == \"$1\" && c[\"nodes\"] == \"$2\" && c[\"route\"] == \"$3\""; }
sum_col() { col "$@" | awk '{ s += $1 } END { print s + 0 }'; }
# share SCHEME NODES ROUTE COLUMN DECIMALS: the column's sum over the route's
# runs / their ops (nan when the route did not run)
share() {
    awk -v a="$(sum_col "$1" "$2" "$3" "$4")" -v o="$(sum_col "$1" "$2" "$3" ops)" -v d="$5" \
        'BEGIN { if (o > 0) printf "%.*f", d, a / o; else print "nan" }'
}
# med SCHEME NODES ROUTE COLUMN: the median of the column over the route's runs
med() { col "$@" | median; }
# ops_stats SCHEME NODES ROUTE: "median,min,max,spread" of the route's ops/s
ops_stats() {
    local v
    v=$(col "$1" "$2" "$3" ops_per_s | grep -v nan)
    if [ -z "$v" ]; then
        echo "nan,nan,nan,nan"
        return
    fi
    printf '%.0f,%.0f,%.0f,%s\n' "$(median <<<"$v")" "$(sort -g <<<"$v" | head -n 1)" \
        "$(sort -g <<<"$v" | tail -n 1)" "$(spread <<<"$v")"
}
# round_ratios SCHEME NODES ROUTE: map / ROUTE in each round, sorted, one a line
round_ratios() {
    awk -F, -v s="$1" -v n="$2" -v r="$3" 'NR > 1 && $1 == s && $2 == n { t[$3 " " $4] = $5 }
        END { for (k in t) { split(k, a, " "); if (a[1] == "map" && t[r " " a[2]] > 0)
            printf "%.3f\n", t[k] / t[r " " a[2]] } }' "$R" | sort -g
}
# cpu_per_op SCHEME NODES ROUTE: median over the route's runs of the CPU time
# (client and every server process) per operation, in microseconds.  On a
# shared, loaded machine this is steadier than ops/s: it does not count the
# time other people's jobs held the cores.
cpu_per_op() {
    awk -F, -v s="$1" -v n="$2" -v r="$3" 'NR > 1 && $1 == s && $2 == n && $3 == r && $5 > 0 {
        printf "%.1f\n", ($9 + $10) * 10000 / $5 }' "$R" | median
}
first_or_nan() { local v; v=$(head -n 1); echo "${v:-nan}"; }
last_or_nan() { local v; v=$(tail -n 1); echo "${v:-nan}"; }

# Columns 1-24 are those of the two-route script (map, follow); the
# follow_raw_* columns and ratio_raw (map / follow-raw) follow them, then the
# CPU microseconds per operation of each route.
echo "scheme,nodes,rounds,map_ops_per_s,map_min,map_max,map_spread_pct,follow_ops_per_s,follow_min,follow_max,follow_spread_pct,ratio,round_ratio_min,round_ratio_max,map_redirect_share,follow_redirect_share,map_seed_cpu_pct,follow_seed_cpu_pct,map_servers_cpu_pct,follow_servers_cpu_pct,map_get_p50_us,follow_get_p50_us,map_conns_per_op,follow_conns_per_op,follow_raw_ops_per_s,follow_raw_min,follow_raw_max,follow_raw_spread_pct,ratio_raw,round_ratio_raw_min,round_ratio_raw_max,follow_raw_redirect_share,follow_raw_seed_cpu_pct,follow_raw_servers_cpu_pct,follow_raw_get_p50_us,follow_raw_conns_per_op,map_cpu_us_per_op,follow_cpu_us_per_op,follow_raw_cpu_us_per_op" \
    >"$WORK/summary.csv"
for c in "${CONFIGS[@]}"; do
    read -r scheme nodes <<<"$c"
    [ -n "$(col "$scheme" "$nodes" map ops_per_s)" ] || continue
    IFS=, read -r mm mmin mmax msp <<<"$(ops_stats "$scheme" "$nodes" map)"
    IFS=, read -r fm fmin fmax fsp <<<"$(ops_stats "$scheme" "$nodes" follow)"
    IFS=, read -r xm xmin xmax xsp <<<"$(ops_stats "$scheme" "$nodes" follow-raw)"
    rf=$(round_ratios "$scheme" "$nodes" follow)
    rx=$(round_ratios "$scheme" "$nodes" follow-raw)
    row=("$scheme" "$nodes" "$(col "$scheme" "$nodes" map ops_per_s | wc -l)"
        "$mm" "$mmin" "$mmax" "$msp" "$fm" "$fmin" "$fmax" "$fsp"
        "$(ratio "$mm" "$fm")" "$(first_or_nan <<<"$rf")" "$(last_or_nan <<<"$rf")"
        "$(share "$scheme" "$nodes" map redirects 6)" "$(share "$scheme" "$nodes" follow redirects 4)"
        "$(med "$scheme" "$nodes" map seed_cpu_pct)" "$(med "$scheme" "$nodes" follow seed_cpu_pct)"
        "$(med "$scheme" "$nodes" map servers_cpu_pct)" "$(med "$scheme" "$nodes" follow servers_cpu_pct)"
        "$(med "$scheme" "$nodes" map get_p50_us)" "$(med "$scheme" "$nodes" follow get_p50_us)"
        "$(share "$scheme" "$nodes" map connections_opened 4)"
        "$(share "$scheme" "$nodes" follow connections_opened 4)"
        "$xm" "$xmin" "$xmax" "$xsp"
        "$(ratio "$mm" "$xm")" "$(first_or_nan <<<"$rx")" "$(last_or_nan <<<"$rx")"
        "$(share "$scheme" "$nodes" follow-raw redirects 4)"
        "$(med "$scheme" "$nodes" follow-raw seed_cpu_pct)" "$(med "$scheme" "$nodes" follow-raw servers_cpu_pct)"
        "$(med "$scheme" "$nodes" follow-raw get_p50_us)"
        "$(share "$scheme" "$nodes" follow-raw connections_opened 4)"
        "$(cpu_per_op "$scheme" "$nodes" map)" "$(cpu_per_op "$scheme" "$nodes" follow)"
        "$(cpu_per_op "$scheme" "$nodes" follow-raw)")
    (IFS=,; echo "${row[*]}") >>"$WORK/summary.csv"
done
cp "$WORK/summary.csv" "$CSV"
cp "$R" "$ROUNDS_CSV"

# ---- plot: throughput vs nodes, one line per route ------------------------------------

# tsv FILTER: nodes, then median, min, max of map, follow, follow-raw
tsv() {
    awk -F, "NR == 1 { for (i = 1; i <= NF; i++) h[\$i] = i; next } $1 {
        printf \"%s\", \$h[\"nodes\"]
        n = split(\"map_ops_per_s map_min map_max follow_ops_per_s follow_min follow_max follow_raw_ops_per_s follow_raw_min follow_raw_max\", k, \" \")
        for (i = 1; i <= n; i++) printf \"\t%s\", \$h[k[i]]
        printf \"\n\" }" "$CSV"
}
tsv '$1 == "plain"' >"$WORK/plain.tsv"
tsv '$1 != "plain"' >"$WORK/rs.tsv"
has_raw=$(awk -F'\t' '$8 != "nan" { print 1; exit }' "$WORK/plain.tsv" "$WORK/rs.tsv")
has_follow=$(awk -F'\t' '$5 != "nan" { print 1; exit }' "$WORK/plain.tsv" "$WORK/rs.tsv")
{
    echo 'set terminal pngcairo size 900,560 noenhanced font ",10"'
    echo "set output \"$PNG\""
    echo "set title \"Cached slot map vs follow-MOVED ($CONNS connections, $READ_RATIO reads, $VALUE B values, $DIST; $(nproc) shared cores)\""
    echo 'set xlabel "nodes"'
    echo 'set ylabel "ops/s (median of rounds, bars: min-max)"'
    echo 'set grid'
    echo 'set key below'
    echo 'set datafile separator "\t"'
    echo 'set datafile missing "nan"'
    echo "set xrange [0.5:$(awk -F, 'NR > 1 && $2 > m { m = $2 } END { print m + 0.5 }' "$CSV")]"
    echo 'set yrange [0:*]'
    echo 'set xtics 1'
    plot="plot \"$WORK/plain.tsv\" using 1:2:3:4 with yerrorlines lw 2 pt 7 title \"plain, cached map (--route map)\""
    [ -n "$has_follow" ] && plot="$plot, \"$WORK/plain.tsv\" using 1:5:6:7 with yerrorlines lw 2 pt 5 title \"plain, follow MOVED, libmemcached: reconnects (--route follow)\""
    [ -n "$has_raw" ] && plot="$plot, \"$WORK/plain.tsv\" using 1:8:9:10 with yerrorlines lw 2 pt 9 title \"plain, follow MOVED, kept sockets (--route follow-raw)\""
    if [ -s "$WORK/rs.tsv" ]; then
        plot="$plot, \"$WORK/rs.tsv\" using 1:2:3:4 with yerrorbars pt 6 ps 1.5 title \"RS(3,5), map\""
        [ -n "$has_follow" ] && plot="$plot, \"$WORK/rs.tsv\" using 1:5:6:7 with yerrorbars pt 4 ps 1.5 title \"RS(3,5), follow\""
        [ -n "$has_raw" ] && plot="$plot, \"$WORK/rs.tsv\" using 1:8:9:10 with yerrorbars pt 8 ps 1.5 title \"RS(3,5), follow-raw\""
    fi
    echo "$plot"
} >"$WORK/plot.gp"
gnuplot_run "$WORK/plot.gp"

# ---- markdown ------------------------------------------------------------------------------

# verdict COLUMN: whether the plain 3-node ratio in COLUMN reaches the target
verdict() {
    awk -F, -v t="$TARGET_RATIO" -v k="$1" 'NR == 1 { for (i = 1; i <= NF; i++) h[$i] = i; next }
        $1 == "plain" && $2 == 3 { v = $h[k]; if (v == "nan") print "no figure";
            else printf "%.2f, %s\n", v, (v + 0 >= t) ? "met" : "not met" }' "$CSV"
}
verdict_follow=$(verdict ratio)
verdict_raw=$(verdict ratio_raw)
# md_rows AWK_PRINTF_BODY: one table row per cluster, columns by name as
# v["name"]; q(a, b) is a / b with 2 decimals (nan when either is missing).
md_rows() {
    awk -F, "function q(a, b) { return (a == \"nan\" || b == \"nan\" || b + 0 == 0) ? \"nan\" : sprintf(\"%.2f\", a / b) }
        NR == 1 { for (i = 1; i <= NF; i++) h[i] = \$i; next }
        { for (i = 1; i <= NF; i++) v[h[i]] = \$i; $1 }" "$CSV"
}
{
    echo "# Cached slot map vs follow-MOVED (issue #5, Redis paper figs. 6-7)"
    echo
    echo "Generated by \`bench/routing-cache.sh\`. $(md_machine) Load average at the start: $LOAD_START."
    echo
    echo "Each run: \`cocytus-bench -s <every serving process> -q --route <route> ${RUN_ARGS[*]} -t $ROUND_SECS\`"
    echo "after \`--load --no-run\` of $RECORDS records; $ROUNDS rounds per cluster, the routes ($ROUTES) back"
    echo "to back, the order reversed every other round, after a ${WARMUP_SECS} s unmeasured warm-up of each."
    echo "Clusters: \`scripts/cluster up --scheme <scheme> --nodes <n> --no-proxy\` on loopback."
    echo
    echo "* \`map\`: libcocytus with its cached slot map (every request straight to the slot's owner)."
    echo "* \`follow\`: libcocytus, every request to the first seed, MOVED followed per request. libmemcached"
    echo "  closes its connection on every SERVER_ERROR reply (\`_read_one_response()\`: a fatal code ->"
    echo "  \`memcached_io_reset()\`), so each MOVED also costs a new TCP connection to the first seed."
    echo "* \`follow-raw\`: the same route over kept raw text-protocol sockets (\`bench/raw_client.c\`): one"
    echo "  per server met, never closed on a MOVED, as a Redis cluster client does. The fair baseline."
    echo
    echo "| scheme | nodes | map ops/s (min-max) | follow ops/s (min-max) | follow-raw ops/s (min-max) | map/follow | map/follow-raw | per-round map/follow | per-round map/follow-raw |"
    echo "|---|---:|---:|---:|---:|---:|---:|---|---|"
    md_rows 'printf "| %s | %s | %s (%s-%s) | %s (%s-%s) | %s (%s-%s) | %s | **%s** | %s-%s | %s-%s |\n",
        v["scheme"], v["nodes"], v["map_ops_per_s"], v["map_min"], v["map_max"],
        v["follow_ops_per_s"], v["follow_min"], v["follow_max"],
        v["follow_raw_ops_per_s"], v["follow_raw_min"], v["follow_raw_max"],
        (v["ratio"] == "nan" ? "nan" : sprintf("%.2f", v["ratio"])),
        (v["ratio_raw"] == "nan" ? "nan" : sprintf("%.2f", v["ratio_raw"])),
        v["round_ratio_min"], v["round_ratio_max"], v["round_ratio_raw_min"], v["round_ratio_raw_max"]'
    echo
    echo "Spread of the rounds (max - min) / median, map / follow / follow-raw, and per-operation figures:"
    echo
    echo "| scheme | nodes | spread map / follow / follow-raw | CPU us/op map / follow / follow-raw | CPU follow / map, follow-raw / map | redirects/op map / follow / follow-raw | new connections/op map / follow / follow-raw | first seed CPU map / follow / follow-raw | all servers CPU map / follow / follow-raw | get p50 us map / follow / follow-raw |"
    echo "|---|---:|---|---|---|---|---|---|---|---|"
    md_rows 'printf "| %s | %s | %s%% / %s%% / %s%% | %s / %s / %s | %s, %s | %s / %s / %s | %s / %s / %s | %s%% / %s%% / %s%% | %s%% / %s%% / %s%% | %s / %s / %s |\n",
        v["scheme"], v["nodes"], v["map_spread_pct"], v["follow_spread_pct"], v["follow_raw_spread_pct"],
        v["map_cpu_us_per_op"], v["follow_cpu_us_per_op"], v["follow_raw_cpu_us_per_op"],
        q(v["follow_cpu_us_per_op"], v["map_cpu_us_per_op"]), q(v["follow_raw_cpu_us_per_op"], v["map_cpu_us_per_op"]),
        v["map_redirect_share"], v["follow_redirect_share"], v["follow_raw_redirect_share"],
        v["map_conns_per_op"], v["follow_conns_per_op"], v["follow_raw_conns_per_op"],
        v["map_seed_cpu_pct"], v["follow_seed_cpu_pct"], v["follow_raw_seed_cpu_pct"],
        v["map_servers_cpu_pct"], v["follow_servers_cpu_pct"], v["follow_raw_servers_cpu_pct"],
        v["map_get_p50_us"], v["follow_get_p50_us"], v["follow_raw_get_p50_us"]'
    echo
    echo "CPU us/op: CPU time of the client and every server process per operation (median of rounds);"
    echo "with every process on the same $(nproc) cores, ops/s can at best follow its inverse, so the CPU"
    echo "ratios are the steadier estimate of the throughput ratios on this machine."
    echo "Seed and server CPU columns: percent of one core over the run (median of rounds)."
    echo "New connections: \`total_connections\` of the serving processes over the runs / ops."
    echo "Target (issue #5): map/follow >= $TARGET_RATIO at 3 nodes. Against \`follow\` (libmemcached,"
    echo "reconnecting): ${verdict_follow:-no figure}. Against \`follow-raw\` (kept connections, the fair"
    echo "baseline): ${verdict_raw:-no figure}."
    echo "Per-run figures: \`routing-cache-rounds.csv\`; plot: \`routing-cache.png\`."
    echo "Discussion beside the Redis paper and NAL: \`routing.md\`."
} >"$MD"

echo
echo "== summary (${SECONDS}s, load average at the start $LOAD_START, at the end $(cut -d' ' -f1-3 /proc/loadavg)) =="
column -s, -t <"$CSV" 2>/dev/null || cat "$CSV"
echo
echo "target map/follow >= $TARGET_RATIO at 3 nodes: ${verdict_follow:-no figure}"
echo "target map/follow-raw >= $TARGET_RATIO at 3 nodes: ${verdict_raw:-no figure}"
echo "wrote $CSV, $ROUNDS_CSV, $MD, $PNG"
exit 0
