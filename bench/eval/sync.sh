#!/usr/bin/env bash
# sync.sh - the Redis paper's figures 8 and 9: throughput of a primary with
# two backups (PBR(2)) in its three sync modes, full, semi and async
# (Redis's "partial"), all sets, 100-byte values, as the client count
# grows; and the ratios full/async and semi/async.  The idea: three groups,
# one per mode, run side by side; each round runs every (connections, mode)
# pair, the modes alternating A B C | C B A, so the ratios come from runs
# that were close in time.  cocytus-bench replaces bench/pbr-sync.sh's
# sync-load so that every figure of docs/evaluation comes from one tool;
# afterwards `cocytus-cli verify` must find every backup equal to its
# primary.
#
# usage: bench/eval/sync.sh
#   CONNS_LIST="1 4 16 50" ROUNDS=5 RUN_SECS=4 KEYS=25000 VALUE=100
#   MODES="async semi full"
# Writes docs/evaluation/sync.{csv,md,png}.

source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

CONNS_LIST=${CONNS_LIST:-"1 4 16 50"}
ROUNDS=${ROUNDS:-5}
RUN_SECS=${RUN_SECS:-4}
KEYS=${KEYS:-25000}
VALUE=${VALUE:-100}
read -r -a MODES <<<"${MODES:-async semi full}"

for v in ROUNDS RUN_SECS KEYS VALUE; do
    is_uint "${!v}" && [ "${!v}" -ge 1 ] || { echo "sync.sh: $v must be a positive number" >&2; exit 2; }
done
for m in "${MODES[@]}"; do
    case $m in full | semi | async) ;; *) echo "sync.sh: bad mode $m" >&2; exit 2 ;; esac
done
case " ${MODES[*]} " in *" async "*) ;; *) echo "sync.sh: MODES must include async (the base)" >&2; exit 2 ;; esac

find_cli() {
    CLI=$BUILD_DIR/client/cocytus-cli
    [ -x "$CLI" ] || die "no $CLI"
}

main() {
    eval_init sync
    find_cli
    CSV="$OUT_DIR/sync.csv"
    FAILED=0
    echo "round,conns,mode,$RUN_COLS" >"$CSV"
    local mem mode out round c
    mem=$(( KEYS * (VALUE + 100) * 2 / 1048576 + 32 ))
    for mode in "${MODES[@]}"; do
        sys_up_cluster "$mode" pbr:2 1 --sync "$mode" --memory "$mem"
        out="$WORK/$mode-load"
        bench_run "$mode" "$out" 300 --load --no-run -n "$KEYS" -v "$VALUE" -c 4 \
            || die "loading the $mode group failed: $(tail -n 3 "$out.err" | tr '\n' ' ')"
        bench_check "$out" "load of $mode" || die "load had errors"
        bench_run "$mode" "$WORK/$mode-warm" 60 --no-load --run -n "$KEYS" -v "$VALUE" -r 0 -d uniform -c 8 -t 1 >/dev/null
    done
    for ((round = 1; round <= ROUNDS; round++)); do
        for c in $CONNS_LIST; do
            for mode in $(order_for "$round" "${MODES[@]}"); do
                sys_alive "$mode" || die "the $mode group lost a process"
                out="$WORK/run-$round-$c-$mode"
                bench_run "$mode" "$out" $((RUN_SECS + 60)) --no-load --run -n "$KEYS" -v "$VALUE" -r 0 \
                    -d uniform -c "$c" -t "$RUN_SECS" --seed "$round" || { note "bench exit $? ($mode)"; FAILED=1; }
                bench_check "$out" "$mode c=$c round $round" || FAILED=1
                echo "$round,$c,$mode,$(run_fields "$out")" >>"$CSV"
                note "round $round c=$c $mode: $(bval "$out.txt" phase=run ops_per_s) ops/s, set p50 $(bval "$out.txt" op=set p50_us) us"
            done
        done
    done
    sleep 1
    for mode in "${MODES[@]}"; do
        if "$CLI" --dir "${SYS_DIR[$mode]}" verify >"$WORK/verify-$mode" 2>&1; then
            VERIFY[$mode]=$(head -n 1 "$WORK/verify-$mode")
        else
            VERIFY[$mode]="FAILED: $(head -n 3 "$WORK/verify-$mode" | tr '\n' ' ')"
            FAILED=1
        fi
        note "verify $mode: ${VERIFY[$mode]}"
    done
    report
    note "done in ${SECONDS} s"
    [ "$FAILED" -eq 0 ] || { note "something failed (see above)"; exit 1; }
}

declare -A VERIFY=()

report() {
    local md="$OUT_DIR/sync.md" c mode dat="$WORK/sync.dat" gp="$WORK/sync.gp"
    rows() { csv_col "$CSV" "$1" "c[\"conns\"] == \"$2\" && c[\"mode\"] == \"$3\""; }
    # per-round ratio: median over rounds of ops(mode)/ops(async) within the round
    prr() {
        awk -F, -v c="$1" -v m="$2" 'NR > 1 && $2 == c { t[$1 "," $3] = $6; r[$1] = 1 }
            END { for (k in r) if (t[k ",async"] > 0) printf "%.3f\n", t[k "," m] / t[k ",async"] }' "$CSV" | median
    }
    {
        echo "# PBR sync modes: full, semi, async (Redis paper figs. 8-9)"
        echo
        echo "Command: \`bench/eval/sync.sh\` (CONNS_LIST=\"$CONNS_LIST\" ROUNDS=$ROUNDS RUN_SECS=$RUN_SECS KEYS=$KEYS VALUE=$VALUE)."
        md_machine
        echo
        echo "One PBR(2) group (1 primary + 2 backups, one node, loopback) per mode, all three up at once."
        echo "All sets (Redis: 0:10 read:write), $VALUE-byte values over $KEYS keys (uniform; every set"
        echo "overwrites, memory stays flat), cocytus-bench with C connections each with one set in flight,"
        echo "$RUN_SECS s per run, $ROUNDS rounds, modes alternating. Medians; spread = (max - min) / median;"
        echo "ratio = median ops/s / median async ops/s; per-round = median of the ratios within each round."
        echo "Redis paper: full sync about halves throughput (ratio ~0.5), semi stays within 5% (>= 0.95)."
        echo
        echo "| conns | mode | ops/s | spread | ratio vs async | per-round ratio | set p50 us | set p99 us | server CPU us/set |"
        echo "|---:|---|---:|---:|---:|---:|---:|---:|---:|"
        for c in $CONNS_LIST; do
            for mode in "${MODES[@]}"; do
                printf '| %s | %s | %s | %s%% | %s | %s | %s | %s | %s |\n' "$c" "$mode" \
                    "$(fmt "$(rows ops_per_s "$c" "$mode" | median)" 0)" "$(rows ops_per_s "$c" "$mode" | spread)" \
                    "$(ratio "$(rows ops_per_s "$c" "$mode" | median)" "$(rows ops_per_s "$c" async | median)")" \
                    "$(fmt "$(prr "$c" "$mode")" 3)" "$(rows set_p50_us "$c" "$mode" | medf 0)" "$(rows set_p99_us "$c" "$mode" | medf 0)" \
                    "$(fmt "$(us_per_op "$CSV" "c[\"conns\"] == \"$c\" && c[\"mode\"] == \"$mode\"")" 1)"
            done
        done
        echo
        echo "Backups checked with \`cocytus-cli verify\` after the runs:"
        echo
        for mode in "${MODES[@]}"; do echo "- $mode: ${VERIFY[$mode]:-not run}"; done
        echo
        echo "![sync](sync.png)"
    } >"$md"
    {
        printf 'conns'; for mode in "${MODES[@]}"; do printf '\t%s' "$mode"; done; printf '\n'
        for c in $CONNS_LIST; do
            printf '%s' "$c"
            for mode in "${MODES[@]}"; do printf '\t%s' "$(rows ops_per_s "$c" "$mode" | median)"; done
            printf '\n'
        done
        printf '\n\nconns'; for mode in "${MODES[@]}"; do printf '\t%s/async' "$mode"; done; printf '\n'
        for c in $CONNS_LIST; do
            printf '%s' "$c"
            for mode in "${MODES[@]}"; do printf '\t%s' "$(ratio "$(rows ops_per_s "$c" "$mode" | median)" "$(rows ops_per_s "$c" async | median)")"; done
            printf '\n'
        done
    } >"$dat"
    local n=${#MODES[@]}
    {
        plot_header "$OUT_DIR/sync.png" ""
        echo 'set terminal pngcairo size 1200,520 noenhanced font ",10"'
        echo "set output '$OUT_DIR/sync.png'"
        echo "set multiplot layout 1,2 title \"PBR(2) sync modes, all sets, $VALUE B values (medians of $ROUNDS rounds)\""
        echo 'set key top left'
        echo 'set xlabel "client connections"'
        echo 'set title "throughput (sets/s)"'
        echo "plot for [i=2:$((n + 1))] '$dat' index 0 using i:xtic(1) title columnheader(i)"
        echo 'set title "ratio to async (Redis: full ~0.5, semi >= 0.95)"'
        echo 'set yrange [0:1.2]'
        echo "plot for [i=2:$((n + 1))] '$dat' index 1 using i:xtic(1) title columnheader(i), 0.95 with lines dt 2 lc rgb 'gray' notitle, 0.5 with lines dt 2 lc rgb 'gray' notitle"
        echo 'unset multiplot'
    } >"$gp"
    gnuplot_run "$gp"
    cat "$md"
}

main "$@"
