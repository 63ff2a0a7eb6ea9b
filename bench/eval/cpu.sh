#!/usr/bin/env bash
# cpu.sh - the paper's table 2 (CPU by process role) and the RAMCloud
# study's efficiency view (CPU time per operation), from the runs of
# bench/eval/throughput.sh.  The idea: throughput.sh already recorded, for
# every run, the utime+stime each role's processes (memcached, plain,
# primary, backup, data, parity) and the client spent; here the medians over
# the rounds become CPU% (CPU seconds / run seconds: 100% = one core busy)
# and CPU-us per operation, which moves far less than ops/s on a shared
# machine.  Runs nothing itself, so it takes a second.
#
# usage: bench/eval/cpu.sh [THROUGHPUT_CSV]   (default docs/evaluation/throughput.csv)
# Writes docs/evaluation/cpu.{csv,md,png}.

source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

ROLES="memcached plain primary backup data parity"
declare -A LABEL=([memcached]="memcached -t 3" [plain]="plain x3" [pbr]="PBR(2) x3" [rs]="RS(3,5)")

wl_label() {
    awk -v r="$1" 'BEGIN { printf "%d:%d", r * 100 + 0.5, 100 - (r * 100 + 0.5) + 0.5 }'
}

# per_run: one line per run and role: read_ratio system role cpu_percent us_per_op
per_run() {
    awk -F, -v roles="$ROLES client" 'BEGIN { owns["memcached"] = "memcached"; owns["plain"] = "plain"
            owns["pbr"] = "primary backup"; owns["rs"] = "data parity" }
        NR == 1 { for (i = 1; i <= NF; i++) h[$i] = i; next }
        { n = split(roles, r, " "); ops = $h["ops"]; secs = $h["seconds"]
          if (ops <= 0 || secs <= 0) next
          srv = 0
          for (j = 1; j <= n; j++) {
              c = $h["cpu_" r[j] "_s"]
              if (r[j] != "client") srv += c
              if (c > 0 || r[j] == "client" || index(" " owns[$h["system"]] " ", " " r[j] " "))
                  printf "%s %s %s %.1f %.2f\n", $h["read_ratio"], $h["system"], r[j], 100 * c / secs, 1e6 * c / ops
          }
          printf "%s %s servers %.1f %.2f\n", $h["read_ratio"], $h["system"], 100 * srv / secs, 1e6 * srv / ops
          cl = $h["cpu_client_s"]
          printf "%s %s total %.1f %.2f\n", $h["read_ratio"], $h["system"], 100 * (srv + cl) / secs, 1e6 * (srv + cl) / ops }' "$1"
}

main() {
    local in=${1:-}
    EVAL_NAME=cpu
    SECONDS=0
    WORK=$(mktemp -d "${TMPDIR:-/tmp}/eval-cpu.XXXXXX") || die "mktemp failed"
    trap 'rm -rf "$WORK"' EXIT
    mkdir -p "$OUT_DIR"
    [ -n "$in" ] || in="$OUT_DIR/throughput.csv"
    [ -s "$in" ] || die "no $in: run bench/eval/throughput.sh first"
    per_run "$in" >"$WORK/runs"
    local csv="$OUT_DIR/cpu.csv" md="$OUT_DIR/cpu.md"
    # medians per (workload, system, role)
    echo "read_ratio,system,role,rounds,cpu_percent,cpu_us_per_op,cpu_us_per_op_spread_percent" >"$csv"
    local rr sys role vals
    local wls systems
    wls=$(awk '{ print $1 }' "$WORK/runs" | awk '!s[$0]++')
    systems=$(awk '{ print $2 }' "$WORK/runs" | awk '!s[$0]++')
    for rr in $wls; do
        for sys in $systems; do
            for role in $ROLES client servers total; do
                vals=$(awk -v a="$rr" -v b="$sys" -v c="$role" '$1 == a && $2 == b && $3 == c' "$WORK/runs")
                [ -n "$vals" ] || continue
                echo "$rr,$sys,$role,$(wc -l <<<"$vals"),$(awk '{ print $4 }' <<<"$vals" | medf 1),$(awk '{ print $5 }' <<<"$vals" | medf 2),$(awk '{ print $5 }' <<<"$vals" | spread)" >>"$csv"
            done
        done
    done
    get() { awk -F, -v a="$1" -v b="$2" -v c="$3" -v col="$4" '$1 == a && $2 == b && $3 == c { print $col; f = 1 } END { if (!f) print "-" }' "$csv"; }
    {
        echo "# CPU by process role (paper table 2) and CPU time per operation"
        echo
        echo "Command: \`bench/eval/cpu.sh\` over the runs of \`bench/eval/throughput.sh\` (see throughput.md for"
        echo "scale and systems). CPU = utime + stime from /proc/<pid>/stat of each server process over the run,"
        echo "summed by role; the client is cocytus-bench itself (all its threads). CPU% = CPU seconds / run"
        echo "seconds (100% = one core); medians over the rounds."
        md_machine
        echo
        echo "## CPU% by role (paper table 2: 15 memcached 231/228/222%; PBR 15 primaries 439/234/230% +"
        echo "30 backups 189/60/21%; Cocytus 15 data 802/256/223% + 10 parity 255/54/15% for 50:50/95:5/100:0)"
        echo
        echo "| get:set | system | role CPU% | servers CPU% | client CPU% |"
        echo "|---|---|---|---:|---:|"
        for rr in $wls; do
            for sys in $systems; do
                local parts=""
                for role in $ROLES; do
                    v=$(get "$rr" "$sys" "$role" 5)
                    [ "$v" = - ] || parts="$parts${parts:+, }$role $v%"
                done
                echo "| $(wl_label "$rr") | ${LABEL[$sys]:-$sys} | $parts | $(get "$rr" "$sys" servers 5)% | $(get "$rr" "$sys" client 5)% |"
            done
        done
        echo
        echo "## CPU-us per operation (RAMCloud's efficiency view)"
        echo
        echo "| get:set | system | by role (us/op) | servers us/op | spread | client us/op | total us/op | servers vs ${LABEL[memcached]} |"
        echo "|---|---|---|---:|---:|---:|---:|---:|"
        for rr in $wls; do
            for sys in $systems; do
                local parts=""
                for role in $ROLES; do
                    v=$(get "$rr" "$sys" "$role" 6)
                    [ "$v" = - ] || parts="$parts${parts:+, }$role $v"
                done
                echo "| $(wl_label "$rr") | ${LABEL[$sys]:-$sys} | $parts | $(get "$rr" "$sys" servers 6) |" \
                     "$(get "$rr" "$sys" servers 7)% | $(get "$rr" "$sys" client 6) | $(get "$rr" "$sys" total 6) |" \
                     "$(ratio "$(get "$rr" "$sys" servers 6)" "$(get "$rr" memcached servers 6)") |"
            done
        done
        echo
        echo "![cpu](cpu.png)"
    } >"$md"
    # plot: stacked us/op by role, one bar per system, grouped by workload
    local dat="$WORK/cpu.dat" gp="$WORK/cpu.gp" first=1
    for rr in $wls; do
        {
            printf 'system'
            for role in $ROLES client; do printf '\t%s' "$role"; done
            printf '\n'
            for sys in $systems; do
                printf '%s' "${LABEL[$sys]:-$sys}"
                for role in $ROLES client; do
                    v=$(get "$rr" "$sys" "$role" 6)
                    [ "$v" = - ] && v=0
                    printf '\t%s' "$v"
                done
                printf '\n'
            done
            printf '\n\n'
        } >>"$dat"
    done
    {
        plot_header "$OUT_DIR/cpu.png" "CPU time per operation by process role (medians; 1 KB, zipfian)"
        echo 'set terminal pngcairo size 1200,560 noenhanced font ",10"'
        echo "set output '$OUT_DIR/cpu.png'"
        echo 'set style histogram rowstacked title offset 0,-1'
        echo 'set ylabel "CPU us per operation"'
        echo 'set xtics rotate by -30'
        echo 'set bmargin 6'
        printf 'plot '
        local idx=0 sep="" c
        for rr in $wls; do
            printf '%s newhistogram "%s"' "$sep" "$(wl_label "$rr")"
            for ((c = 2; c <= 8; c++)); do
                printf ", '%s' index %d using %d%s %s lc %d" "$dat" "$idx" "$c" \
                    "$([ $c -eq 2 ] && echo ':xtic(1)')" \
                    "$([ $idx -eq 0 ] && echo "title columnheader($c)" || echo 'notitle')" $((c - 1))
            done
            sep=","
            idx=$((idx + 1))
        done
        echo
    } >"$gp"
    gnuplot_run "$gp"
    cat "$md"
}

main "$@"
