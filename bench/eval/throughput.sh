#!/usr/bin/env bash
# throughput.sh - the paper's figure 7: throughput and latency of Debian's
# memcached, our plain server, PBR(2) and RS(3,5) with the same number of
# data processes (3), under 50:50, 95:5 and 100:0 get:set at 1 KB values,
# zipfian keys.  The idea: all four systems run at once, each loaded once
# with the same records; then rounds run every (workload, system) pair for
# a fixed time, the systems alternating A B C D | D C B A so that a drift in
# machine load favours none.  Each run also records the CPU time of every
# server process (by role) and of the client, which bench/eval/cpu.sh
# turns into the paper's table 2 and CPU-us per operation.
#
# memcached runs as ONE process with -t 3: cocytus-bench (libcocytus) takes
# a server without a cluster as the owner of every slot, so three separate
# memcached processes would need client-side sharding the bench does not do;
# one process with 3 worker threads gives memcached the same 3 cores' worth
# of parallelism as our 3 single-threaded data processes.
#
# usage: bench/eval/throughput.sh
#   RECORDS=50000 ROUNDS=4 RUN_SECS=5 CONNS=8 WARMUP_SECS=2 VALUE=1024
#   WORKLOADS="0.5 0.95 1"     read ratios
#   SYSTEMS="memcached plain pbr rs"
# Writes docs/evaluation/throughput.{csv,md,png}.  Exit 0 when every run
# completed without errors, 1 otherwise.

source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

RECORDS=${RECORDS:-50000}
ROUNDS=${ROUNDS:-4}
RUN_SECS=${RUN_SECS:-5}
CONNS=${CONNS:-8}
WARMUP_SECS=${WARMUP_SECS:-2}
VALUE=${VALUE:-1024}
WORKLOADS=${WORKLOADS:-"0.5 0.95 1"}
read -r -a SYSTEMS <<<"${SYSTEMS:-memcached plain pbr rs}"
declare -A LABEL=([memcached]="memcached -t 3" [plain]="plain x3" [pbr]="PBR(2) x3" [rs]="RS(3,5)")
ROLES="memcached plain primary backup data parity client"

for v in RECORDS ROUNDS RUN_SECS CONNS WARMUP_SECS VALUE; do
    is_uint "${!v}" && [ "${!v}" -ge 1 ] || { echo "throughput.sh: $v must be a positive number" >&2; exit 2; }
done

start_systems() {
    local mem sys
    mem=$(( RECORDS * (VALUE + 100) / 3 * 8 / 5 / 1048576 + 32 ))
    for sys in "${SYSTEMS[@]}"; do
        case $sys in
            memcached) sys_up_memcached memcached 3 $((mem * 3)) ;;
            plain) sys_up_cluster plain plain 3 --memory "$mem" ;;
            pbr) sys_up_cluster pbr pbr:2 3 --memory "$mem" ;;
            rs) sys_up_cluster rs rs:3:5 1 --region "$mem" ;;
            *) die "unknown system '$sys'" ;;
        esac
    done
}

load_systems() {
    local sys out
    for sys in "${SYSTEMS[@]}"; do
        out="$WORK/$sys-load"
        bench_run "$sys" "$out" 300 --load --no-run -n "$RECORDS" -v "$VALUE" -c 4 \
            || die "loading $sys failed: $(tail -n 3 "$out.err" | tr '\n' ' ')"
        bench_check "$out" "load of $sys" || die "load of $sys had errors"
        note "$sys: $RECORDS records loaded at $(bval "$out.txt" phase=load ops_per_s) ops/s"
        if [ "$WARMUP_SECS" -gt 0 ]; then
            bench_run "$sys" "$WORK/$sys-warm" 60 --no-load --run -n "$RECORDS" -v "$VALUE" -r 0.95 \
                -c "$CONNS" -t "$WARMUP_SECS" || die "warm-up of $sys failed"
        fi
    done
}

# one_run ROUND READ_RATIO SYSTEM: a measured run, one CSV row.
one_run() {
    local round=$1 rr=$2 sys=$3 out="$WORK/run-$1-$2-$3" f row role
    sys_alive "$sys" || die "$sys lost a process before round $round"
    bench_run "$sys" "$out" $((RUN_SECS + 60)) --no-load --run -n "$RECORDS" -v "$VALUE" -r "$rr" \
        -d zipfian -c "$CONNS" -t "$RUN_SECS" --seed "$round" \
        || { note "$sys r=$rr round $round: bench exit $?: $(tail -n 3 "$out.err" | tr '\n' ' ')"; FAILED=1; }
    bench_check "$out" "$sys r=$rr round $round" || FAILED=1
    f="$out.txt"
    row="$round,$rr,$sys,$(bval "$f" phase=run ops),$(bval "$f" phase=run seconds),$(bval "$f" phase=run ops_per_s)"
    row="$row,$(lat "$f" get p50_us),$(lat "$f" get p99_us),$(lat "$f" set p50_us),$(lat "$f" set p99_us)"
    row="$row,$(bval "$f" total_errors total_errors),$(bval "$f" total_errors total_wrong)"
    for role in $ROLES; do
        row="$row,$(cval "$out.cpu" "$role")"
    done
    row="$row,$(cval "$out.cpu" wall)"
    echo "$row" >>"$CSV"
    note "round $round r=$rr $sys: $(bval "$f" phase=run ops_per_s) ops/s, get p99 $(bval "$f" op=get p99_us) us, set p99 $(bval "$f" op=set p99_us) us"
}

verify_systems() {
    local sys out
    for sys in "${SYSTEMS[@]}"; do
        out="$WORK/$sys-verify"
        bench_run "$sys" "$out" 120 --no-load --run -n "$RECORDS" -v "$VALUE" -r 0.5 -o 4000 -c 2 --verify \
            || { note "verify run of $sys: exit $?: $(tail -n 3 "$out.err" | tr '\n' ' ')"; FAILED=1; }
        bench_check "$out" "verify run of $sys" || FAILED=1
    done
}

wl_label() {
    awk -v r="$1" 'BEGIN { printf "%d:%d", r * 100 + 0.5, 100 - (r * 100 + 0.5) + 0.5 }'
}

# med RR SYS COLUMN: median of a column over the rounds of (RR, SYS).
med() { csv_col "$CSV" "$3" "c[\"read_ratio\"] == \"$1\" && c[\"system\"] == \"$2\"" | median; }
spr() { csv_col "$CSV" "$3" "c[\"read_ratio\"] == \"$1\" && c[\"system\"] == \"$2\"" | spread; }

# per_round_ratio RR SYS BASE: median over rounds of ops_per_s(SYS)/ops_per_s(BASE).
per_round_ratio() {
    awk -F, -v rr="$1" -v s="$2" -v b="$3" 'NR > 1 && $2 == rr { t[$1 "," $3] = $6; r[$1] = 1 }
        END { for (k in r) if (t[k "," b] > 0 && t[k "," s] != "") printf "%.3f\n", t[k "," s] / t[k "," b] }' "$CSV" | median
}

report() {
    local md="$OUT_DIR/throughput.md" rr sys base dat="$WORK/tp.dat" gp="$WORK/tp.gp"
    base=${SYSTEMS[0]}
    {
        echo "# Throughput and latency (paper fig. 7)"
        echo
        echo "Command: \`bench/eval/throughput.sh\` (RECORDS=$RECORDS ROUNDS=$ROUNDS RUN_SECS=$RUN_SECS CONNS=$CONNS)."
        md_machine
        echo
        echo "Scale: $RECORDS records of $VALUE B (zipfian keys, theta 0.99, scrambled), $CONNS client connections"
        echo "(cocytus-bench threads, one request in flight each, closed loop) on loopback, $RUN_SECS s per run,"
        echo "$ROUNDS rounds; within a round every system runs each workload back to back, in the order"
        echo "${SYSTEMS[*]} | reversed | ... . Systems: memcached = Debian's memcached 1.6 as ONE process with"
        echo "-t 3 (libcocytus treats a server without a cluster as owner of every slot, so 3 memcached processes"
        echo "would need client-side sharding the bench lacks; -t 3 gives it the parallelism of our 3 data"
        echo "processes); plain = 3 cocytus-server processes with the slot map; PBR(2) = 3 primaries with 2"
        echo "backups each (9 processes, full sync); RS(3,5) = 3 data + 2 parity processes."
        echo "The client and all servers share the same 2 cores, so the client's CPU is part of every figure."
        echo
        echo "Figures are medians over the rounds; spread = (max - min) / median of ops/s; ratio = median ops/s"
        echo "/ median ops/s of $base; per-round ratio = median over rounds of the ratio within a round."
        echo
        for rr in $WORKLOADS; do
            echo "### get:set $(wl_label "$rr")"
            echo
            echo "| system | ops/s | spread | ratio vs ${LABEL[$base]} | per-round ratio | get p50 us | get p99 us | set p50 us | set p99 us |"
            echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|"
            for sys in "${SYSTEMS[@]}"; do
                printf '| %s | %s | %s%% | %s | %s | %s | %s | %s | %s |\n' "${LABEL[$sys]}" \
                    "$(fmt "$(med "$rr" "$sys" ops_per_s)" 0)" "$(spr "$rr" "$sys" ops_per_s)" \
                    "$(ratio "$(med "$rr" "$sys" ops_per_s)" "$(med "$rr" "$base" ops_per_s)")" \
                    "$(fmt "$(per_round_ratio "$rr" "$sys" "$base")" 3)" \
                    "$(dash "$(fmt "$(med "$rr" "$sys" get_p50_us)" 0)")" "$(dash "$(fmt "$(med "$rr" "$sys" get_p99_us)" 0)")" \
                    "$(dash "$(fmt "$(med "$rr" "$sys" set_p50_us)" 0)")" "$(dash "$(fmt "$(med "$rr" "$sys" set_p99_us)" 0)")"
            done
            echo
        done
        echo "Raw rows (every round): throughput.csv. CPU by process role: cpu.md."
        echo
        echo "![throughput](throughput.png)"
    } >"$md"
    {
        for col in ops_per_s get_p50_us get_p99_us set_p50_us set_p99_us; do
            printf 'workload'
            for sys in "${SYSTEMS[@]}"; do printf '\t%s' "${LABEL[$sys]}"; done
            printf '\n'
            for rr in $WORKLOADS; do
                case $col:$rr in set_*:1 | set_*:1.0) continue ;; esac
                printf '%s' "$(wl_label "$rr")"
                for sys in "${SYSTEMS[@]}"; do printf '\t%s' "$(med "$rr" "$sys" "$col")"; done
                printf '\n'
            done
            printf '\n\n'
        done
    } >"$dat"
    local n=${#SYSTEMS[@]}
    {
        plot_header "$OUT_DIR/throughput.png" ""
        echo 'set terminal pngcairo size 1400,520 noenhanced font ",10"'
        echo "set output '$OUT_DIR/throughput.png'"
        echo 'set multiplot layout 1,3 title "Throughput and latency, 1 KB values, zipfian ('"$CONNS"' connections, medians of '"$ROUNDS"' rounds)"'
        echo 'set key top left'
        echo 'set title "throughput (ops/s)"'
        echo "plot for [i=2:$((n + 1))] '$dat' index 0 using i:xtic(1) title columnheader(i)"
        echo 'set title "get p99 (us)"'
        echo "plot for [i=2:$((n + 1))] '$dat' index 2 using i:xtic(1) title columnheader(i)"
        echo 'set title "set p99 (us), 50:50 and 95:5"'
        echo "plot for [i=2:$((n + 1))] '$dat' index 4 using i:xtic(1) title columnheader(i)"
        echo 'unset multiplot'
    } >"$gp"
    gnuplot_run "$gp"
    cat "$md"
}

main() {
    eval_init throughput
    CSV="$OUT_DIR/throughput.csv"
    FAILED=0
    local cols="round,read_ratio,system,ops,seconds,ops_per_s,get_p50_us,get_p99_us,set_p50_us,set_p99_us,errors,wrong" role
    for role in $ROLES; do cols="$cols,cpu_${role}_s"; done
    echo "$cols,wall_s" >"$CSV"
    start_systems
    load_systems
    local round rr sys
    for ((round = 1; round <= ROUNDS; round++)); do
        for rr in $WORKLOADS; do
            for sys in $(order_for "$round" "${SYSTEMS[@]}"); do
                one_run "$round" "$rr" "$sys"
            done
        done
    done
    verify_systems
    report
    note "done in ${SECONDS} s"
    [ "$FAILED" -eq 0 ] || { note "some runs had errors (see above)"; exit 1; }
}

main "$@"
