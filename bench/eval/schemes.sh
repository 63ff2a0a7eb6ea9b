#!/usr/bin/env bash
# schemes.sh - the paper's figure 9: coding groups RS(4,5), RS(3,5) and
# RS(2,5), each one group of 5 processes (K data + 5-K parity).  Two parts:
# memory (the same raw data loaded into each scheme: RSS beside the ideal
# 5/K x raw) and throughput/latency (50:50 and 95:5 at 1 KB, rounds that
# alternate the schemes).  The idea is the paper's: fewer data processes
# per group cost more memory (5/2 vs 5/4) and send every set's delta to
# more parity processes; throughput should barely move while the servers
# are not the bottleneck, and set latency grows with the parity count.
#
# usage: bench/eval/schemes.sh
#   SCHEMES="rs:4:5 rs:3:5 rs:2:5"
#   MEM_SIZES="1024 4096 16384" RAW_MB=150    memory part (MEM_SIZES="" skips it)
#   RECORDS=30000 ROUNDS=5 RUN_SECS=4 CONNS=8 WORKLOADS="0.5 0.95"   throughput part
# Writes docs/evaluation/schemes.{csv,md,png} (the csv holds both parts:
# part=memory rows and part=run rows).  Exit 0 when all ran cleanly.

source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

read -r -a SCHEMES <<<"${SCHEMES:-rs:4:5 rs:3:5 rs:2:5}"
MEM_SIZES=${MEM_SIZES-"1024 4096 16384"}
RAW_MB=${RAW_MB:-150}
RECORDS=${RECORDS:-30000}
ROUNDS=${ROUNDS:-5}
RUN_SECS=${RUN_SECS:-4}
CONNS=${CONNS:-8}
WORKLOADS=${WORKLOADS:-"0.5 0.95"}
VALUE=1024

for v in RAW_MB RECORDS ROUNDS RUN_SECS CONNS; do
    is_uint "${!v}" && [ "${!v}" -ge 1 ] || { echo "schemes.sh: $v must be a positive number" >&2; exit 2; }
done

label() { local k=${1#rs:}; k=${k%%:*}; echo "RS($k,${1##*:})"; }
kof() { local k=${1#rs:}; echo "${k%%:*}"; }
sname() { echo "s${1//:/_}"; }

# up_schemes RECORDS MAXVALUE: one group per scheme, regions sized for the data.
up_schemes() {
    local n=$1 max=$2 sch k region
    for sch in "${SCHEMES[@]}"; do
        k=$(kof "$sch")
        region=$(( n * (max + 100) / k * 8 / 5 / 1048576 + 32 ))
        sys_up_cluster "$(sname "$sch")" "$sch" 1 --region "$region"
    done
}

down_schemes() {
    local sch
    for sch in "${SCHEMES[@]}"; do sys_down "$(sname "$sch")"; done
    SYS_NAMES=()
}

load_schemes() {
    local n=$1 size=$2 sch s out
    for sch in "${SCHEMES[@]}"; do
        s=$(sname "$sch")
        out="$WORK/$s-load-$size"
        bench_run "$s" "$out" 600 --load --no-run -n "$n" -v "$size" -c 8 --seed 7 \
            || die "loading $(label "$sch") failed: $(tail -n 3 "$out.err" | tr '\n' ' ')"
        bench_check "$out" "load of $(label "$sch")" || die "load had errors"
        note "$(label "$sch"): $n x $size B loaded at $(bval "$out.txt" phase=load ops_per_s) ops/s"
    done
}

memory_part() {
    local size n sch s rss empty
    for size in $MEM_SIZES; do
        n=$((RAW_MB * 1048576 / size))
        up_schemes "$n" "$size"
        declare -A EMPTY=()
        sleep 1
        for sch in "${SCHEMES[@]}"; do EMPTY[$sch]=$(sys_rss "$(sname "$sch")"); done
        load_schemes "$n" "$size"
        sleep 6
        for sch in "${SCHEMES[@]}"; do
            s=$(sname "$sch")
            sys_alive "$s" || die "$(label "$sch") lost a process"
            rss=$(sys_rss "$s")
            echo "memory,$sch,$size,$n,$((n * size)),${EMPTY[$sch]},$rss,,,,,,,,,,,," >>"$CSV"
            note "$(label "$sch") at $size B: RSS $(mib "$rss") MiB for $(mib $((n * size))) MiB raw"
        done
        down_schemes
    done
}

run_part() {
    local round rr sch s out
    up_schemes "$RECORDS" "$VALUE"
    load_schemes "$RECORDS" "$VALUE"
    for ((round = 1; round <= ROUNDS; round++)); do
        for rr in $WORKLOADS; do
            for sch in $(order_for "$round" "${SCHEMES[@]}"); do
                s=$(sname "$sch")
                sys_alive "$s" || die "$(label "$sch") lost a process"
                out="$WORK/run-$round-$rr-$s"
                bench_run "$s" "$out" $((RUN_SECS + 60)) --no-load --run -n "$RECORDS" -v "$VALUE" -r "$rr" \
                    -c "$CONNS" -t "$RUN_SECS" --seed "$round" || { note "bench exit $? ($(label "$sch"))"; FAILED=1; }
                bench_check "$out" "$(label "$sch") r=$rr round $round" || FAILED=1
                echo "run,$sch,$VALUE,$RECORDS,,,,$round,$rr,$(run_fields "$out")" >>"$CSV"
                note "round $round r=$rr $(label "$sch"): $(bval "$out.txt" phase=run ops_per_s) ops/s," \
                     "set p50 $(bval "$out.txt" op=set p50_us) us"
            done
        done
    done
    for sch in "${SCHEMES[@]}"; do
        s=$(sname "$sch")
        out="$WORK/verify-$s"
        bench_run "$s" "$out" 120 --no-load --run -n "$RECORDS" -v "$VALUE" -r 0.5 -o 3000 -c 2 --verify \
            || { note "verify run of $(label "$sch") failed"; FAILED=1; }
        bench_check "$out" "verify run of $(label "$sch")" || FAILED=1
    done
    down_schemes
}

wl_label() { awk -v r="$1" 'BEGIN { printf "%d:%d", r * 100 + 0.5, 100 - (r * 100 + 0.5) + 0.5 }'; }

report() {
    local md="$OUT_DIR/schemes.md" sch rr size base=${SCHEMES[1]:-${SCHEMES[0]}}
    local dat="$WORK/schemes.dat" gp="$WORK/schemes.gp"
    rows() { csv_col "$CSV" "$1" "c[\"part\"] == \"run\" && c[\"scheme\"] == \"$2\" && c[\"read_ratio\"] == \"$3\""; }
    {
        echo "# Coding schemes RS(4,5), RS(3,5), RS(2,5) (paper fig. 9)"
        echo
        echo "Command: \`bench/eval/schemes.sh\` (RAW_MB=$RAW_MB RECORDS=$RECORDS ROUNDS=$ROUNDS RUN_SECS=$RUN_SECS CONNS=$CONNS)."
        md_machine
        echo
        echo "Each scheme is one coding group of 5 processes on loopback (K data + 5-K parity), slot map over"
        echo "its K data processes. Memory: $RAW_MB MiB of raw values per size loaded into each, RSS of the 5"
        echo "processes 6 s after the load; ideal = raw x 5/K. Throughput: $RECORDS records of 1 KB, zipfian"
        echo "keys, $CONNS connections, $RUN_SECS s runs, $ROUNDS rounds alternating the schemes; medians,"
        echo "spread = (max - min) / median. Paper: memory RS(2,5) > RS(3,5) > RS(4,5), all better at larger"
        echo "values; throughput about equal; RS(2,5) a little longer write latency (more parity messages)."
        echo
        if [ -n "$MEM_SIZES" ]; then
            echo "## Memory"
            echo
            echo "| values | scheme | raw MiB | RSS MiB | RSS / raw | ideal 5/K | empty MiB | net of empty / raw |"
            echo "|---|---|---:|---:|---:|---:|---:|---:|"
            awk -F, '$1 == "memory" { print $2, $3, $5, $6, $7 }' "$CSV" | while read -r sch size raw empty rss; do
                printf '| %s B | %s | %s | %s | %s | %s | %s | %s |\n' "$size" "$(label "$sch")" "$(mib "$raw")" \
                    "$(mib "$rss")" "$(ratio "$rss" "$raw")" "$(ratio 5 "$(kof "$sch")")" "$(mib "$empty")" \
                    "$(awk -v a="$rss" -v e="$empty" -v r="$raw" 'BEGIN { printf "%.3f", (a - e) / r }')"
            done
            echo
        fi
        echo "## Throughput and latency (1 KB)"
        echo
        echo "| get:set | scheme | ops/s | spread | ratio vs $(label "$base") | get p50 us | get p99 us | set p50 us | set p99 us | server CPU us/op |"
        echo "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"
        for rr in $WORKLOADS; do
            for sch in "${SCHEMES[@]}"; do
                printf '| %s | %s | %s | %s%% | %s | %s | %s | %s | %s | %s |\n' "$(wl_label "$rr")" "$(label "$sch")" \
                    "$(fmt "$(rows ops_per_s "$sch" "$rr" | median)" 0)" "$(rows ops_per_s "$sch" "$rr" | spread)" \
                    "$(ratio "$(rows ops_per_s "$sch" "$rr" | median)" "$(rows ops_per_s "$base" "$rr" | median)")" \
                    "$(rows get_p50_us "$sch" "$rr" | medf 0)" "$(rows get_p99_us "$sch" "$rr" | medf 0)" \
                    "$(rows set_p50_us "$sch" "$rr" | medf 0)" "$(rows set_p99_us "$sch" "$rr" | medf 0)" \
                    "$(fmt "$(us_per_op "$CSV" "c[\"part\"] == \"run\" && c[\"scheme\"] == \"$sch\" && c[\"read_ratio\"] == \"$rr\"")" 1)"
            done
        done
        echo
        echo "![schemes](schemes.png)"
    } >"$md"
    {
        # block 0: memory RSS/raw per size; block 1: ops/s per workload; block 2: set p50 per workload
        printf 'case'; for sch in "${SCHEMES[@]}"; do printf '\t%s' "$(label "$sch")"; done; printf '\n'
        for size in $MEM_SIZES; do
            printf '%s B' "$size"
            for sch in "${SCHEMES[@]}"; do
                printf '\t%s' "$(awk -F, -v s="$sch" -v z="$size" '$1 == "memory" && $2 == s && $3 == z { printf "%.3f", $7 / $5 }' "$CSV")"
            done
            printf '\n'
        done
        [ -n "$MEM_SIZES" ] || printf 'none\t0\t0\t0\n'
        for col in ops_per_s set_p50_us; do
            printf '\n\ncase'; for sch in "${SCHEMES[@]}"; do printf '\t%s' "$(label "$sch")"; done; printf '\n'
            for rr in $WORKLOADS; do
                printf '%s' "$(wl_label "$rr")"
                for sch in "${SCHEMES[@]}"; do printf '\t%s' "$(rows "$col" "$sch" "$rr" | median)"; done
                printf '\n'
            done
        done
    } >"$dat"
    local n=${#SCHEMES[@]}
    {
        plot_header "$OUT_DIR/schemes.png" ""
        echo 'set terminal pngcairo size 1400,520 noenhanced font ",10"'
        echo "set output '$OUT_DIR/schemes.png'"
        echo 'set multiplot layout 1,3 title "Coding schemes (one group of 5 processes each; medians)"'
        echo 'set key top left'
        echo 'set title "memory: RSS / raw"'
        echo "plot for [i=2:$((n + 1))] '$dat' index 0 using i:xtic(1) title columnheader(i)"
        echo 'set title "throughput (ops/s), 1 KB"'
        echo "plot for [i=2:$((n + 1))] '$dat' index 1 using i:xtic(1) title columnheader(i)"
        echo 'set title "set p50 latency (us)"'
        echo "plot for [i=2:$((n + 1))] '$dat' index 2 using i:xtic(1) title columnheader(i)"
        echo 'unset multiplot'
    } >"$gp"
    gnuplot_run "$gp"
    cat "$md"
}

main() {
    eval_init schemes
    CSV="$OUT_DIR/schemes.csv"
    FAILED=0
    echo "part,scheme,value_size,records,raw_bytes,empty_rss_bytes,rss_bytes,round,read_ratio,$RUN_COLS" >"$CSV"
    [ -z "$MEM_SIZES" ] || memory_part
    run_part
    report
    note "done in ${SECONDS} s"
    [ "$FAILED" -eq 0 ] || { note "some runs had errors (see above)"; exit 1; }
}

main "$@"
