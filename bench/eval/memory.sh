#!/usr/bin/env bash
# memory.sh - the paper's figure 6: memory of Debian's memcached (one
# process, -t 3), our plain server (3 processes), PBR(2) (3 primaries, 6
# backups) and RS(3,5) (3 data + 2 parity processes) holding the same records, for 1 KB, 4 KB and 16 KB values and values of zipfian
# size in 10 B..1 KB.  The idea: load the same records (same seed, same
# count, cocytus-bench's load phase) into the three systems side by side,
# let the servers hand back freed heap, then sum VmRSS of every server
# process and set it beside the ideal (raw value bytes x redundancy: 1, 3,
# 5/3).  The RSS of each system right after start (empty) is shown too: it
# is the fixed cost of its processes, large at this small scale.  A short
# --verify read run afterwards checks that every system returns what was
# loaded.
#
# usage: bench/eval/memory.sh
#   RAW_MB=200          raw value MiB per fixed size (records = RAW_MB / size)
#   ZIPF_RECORDS=600000 records of the zipfian-size case
#   SIZES="1024 4096 16384 zipf:10:1024"
#   CONNS=8             load connections
#   SETTLE_SECS=6       wait after the loads (servers trim their heap every 5 s)
# Writes docs/evaluation/memory.{csv,md,png}.  Exit 0 when every case was
# measured, 1 when something broke.

source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

RAW_MB=${RAW_MB:-200}
ZIPF_RECORDS=${ZIPF_RECORDS:-600000}
SIZES=${SIZES:-"1024 4096 16384 zipf:10:1024"}
CONNS=${CONNS:-8}
SETTLE_SECS=${SETTLE_SECS:-6}
SYSTEMS=(memcached plain pbr rs)
declare -A LABEL=([memcached]="memcached -t 3" [plain]="plain x3" [pbr]="PBR(2) x3" [rs]="RS(3,5)")
declare -A IDEAL=([memcached]=1 [plain]=1 [pbr]=3 [rs]=1.6667)
ITEM_OVERHEAD=66    # plain engine: 48-byte header + 16-byte key + CRLF per item

for v in RAW_MB ZIPF_RECORDS CONNS SETTLE_SECS; do
    is_uint "${!v}" && [ "${!v}" -ge 1 ] || { echo "memory.sh: $v must be a positive number" >&2; exit 2; }
done

# stat_sum SYSTEM NAME: sum of `stats` NAME over the serving processes.
stat_sum() {
    local addr sum=0 line val
    for addr in ${SYS_SEEDS[$1]//,/ }; do
        exec 3<>"/dev/tcp/${addr%:*}/${addr##*:}" || return 1
        printf 'stats\r\n' >&3
        val=0
        while IFS= read -r -t 5 line <&3; do
            line=${line%$'\r'}
            [ "$line" = END ] && break
            case $line in "STAT $2 "*) val=${line#"STAT $2 "} ;; esac
        done
        exec 3<&- 3>&-
        sum=$((sum + val))
    done
    echo "$sum"
}

# case_records SIZE: records of one case; case_mean_max SIZE: largest value.
case_records() {
    case $1 in
        zipf:*) echo "$ZIPF_RECORDS" ;;
        *) echo $((RAW_MB * 1048576 / $1)) ;;
    esac
}
case_max() {
    case $1 in zipf:*) echo "${1##*:}" ;; *) echo "$1" ;; esac
}

# measure_case SIZE: one row per system into $CSV.
measure_case() {
    local size=$1 n max per_mb region mem sys out
    n=$(case_records "$size")
    max=$(case_max "$size")
    # worst case per serving process: a third of the records, zipfian slot
    # shares up to ~1.2x, plus item overhead; untouched pages cost no RSS
    per_mb=$(( n * (max + 100) / 3 * 8 / 5 / 1048576 + 32 ))
    mem=$per_mb
    region=$per_mb
    note "== $size: $n records; memory/region ${per_mb} MiB per process"
    sys_up_memcached memcached 3 $((mem * 3))
    sys_up_cluster plain plain 3 --memory "$mem"
    sys_up_cluster pbr pbr:2 3 --memory "$mem"
    sys_up_cluster rs rs:3:5 1 --region "$region"
    declare -A EMPTY=() RSS=() LOADS=()
    sleep 1
    for sys in "${SYSTEMS[@]}"; do
        EMPTY[$sys]=$(sys_rss "$sys")
    done
    for sys in "${SYSTEMS[@]}"; do
        out="$WORK/$sys-${size//:/_}-load"
        bench_run "$sys" "$out" 600 --load --no-run -n "$n" -v "$size" -c "$CONNS" --seed 7 \
            || die "loading $sys failed (exit $?): $(tail -n 3 "$out.err" | tr '\n' ' ')"
        bench_check "$out" "load of $sys" || die "the load of $sys had errors"
        LOADS[$sys]=$(bval "$out.txt" phase=load ops_per_s)
        note "$sys: loaded $n records at ${LOADS[$sys]} ops/s"
    done
    sleep "$SETTLE_SECS"
    for sys in "${SYSTEMS[@]}"; do
        sys_alive "$sys" || die "$sys lost a process"
        RSS[$sys]=$(sys_rss "$sys")
    done
    # raw value bytes, from the plain system's item bytes
    local bytes items raw
    bytes=$(stat_sum plain bytes)
    items=$(stat_sum plain curr_items)
    raw=$((bytes - items * ITEM_OVERHEAD))
    [ "$items" -eq "$n" ] || die "the plain system holds $items items, want $n"
    case $size in
        zipf:*) ;;
        *) [ "$raw" -eq $((n * size)) ] || die "raw bytes $raw != $n x $size (item overhead changed?)" ;;
    esac
    for sys in "${SYSTEMS[@]}"; do
        out="$WORK/$sys-${size//:/_}-verify"
        bench_run "$sys" "$out" 120 --no-load --run -n "$n" -v "$size" -r 1 -o 3000 -c 2 --verify \
            --seed 7 -d uniform || die "verify read of $sys failed (exit $?): $(tail -n 3 "$out.err" | tr '\n' ' ')"
        bench_check "$out" "verify read of $sys" || die "$sys returned wrong values"
    done
    for sys in "${SYSTEMS[@]}"; do
        echo "$size,$sys,$(wc -l <"${SYS_DIR[$sys]}/endpoints"),$n,$raw,${EMPTY[$sys]},${RSS[$sys]},${IDEAL[$sys]},${LOADS[$sys]}" >>"$CSV"
        note "$sys: RSS $(mib "${RSS[$sys]}") MiB (empty $(mib "${EMPTY[$sys]}")), raw $(mib "$raw") MiB"
    done
    for sys in "${SYSTEMS[@]}"; do sys_down "$sys"; done
    SYS_NAMES=()
}

size_label() {
    case $1 in zipf:*) echo "zipf ${1#zipf:}" | sed 's/:/-/; s/$/ B/' ;; *) echo "$(($1 / 1024)) KB" ;; esac
}

report() {
    local md="$OUT_DIR/memory.md" dat="$WORK/memory.dat" gp="$WORK/memory.gp"
    # csv columns: size,system,processes,records,raw_bytes,empty_rss,rss,ideal_factor,load_ops_per_s
    {
        echo "# Memory: plain, PBR(2) and RS(3,5) holding the same data (paper fig. 6)"
        echo
        echo "Command: \`bench/eval/memory.sh\` (RAW_MB=$RAW_MB, ZIPF_RECORDS=$ZIPF_RECORDS)."
        md_machine
        echo
        echo "Scale: $RAW_MB MiB of raw values per fixed size ($((RAW_MB * 1048576 / 1024)) x 1 KB," \
             "$((RAW_MB * 1048576 / 4096)) x 4 KB, $((RAW_MB * 1048576 / 16384)) x 16 KB), $ZIPF_RECORDS records" \
             "of zipfian size in 10 B..1 KB; keys are cocytus-bench's 16-byte \"user<12 digits>\"."
        echo "Systems: memcached = Debian's memcached 1.6 (one process, -t 3: the paper's vanilla baseline);"
        echo "plain = 3 plain cocytus-server processes; PBR(2) = 3 groups of 1 primary + 2 backups (9 processes);"
        echo "RS(3,5) = 1 group of 3 data + 2 parity processes. All on loopback, one system per directory;"
        echo "loaded with \`cocytus-bench --load --no-run -c $CONNS\` (same seed, so the same records), measured"
        echo "${SETTLE_SECS} s after the last load, then checked with a 3000-read \`--verify\` run each."
        echo
        echo "RSS = sum of VmRSS of the system's server processes. Ideal = raw value bytes x redundancy"
        echo "(plain 1, PBR(2) 3, RS(3,5) 5/3). *empty* = RSS right after start (shared libraries, tables:"
        echo "a fixed cost per process); *net* = (RSS - empty) / raw."
        echo
        echo "| values | system | procs | raw MiB | RSS MiB | ideal MiB | RSS / raw | ideal | empty MiB | net / raw |"
        echo "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"
        awk -F, 'NR > 1 { printf "%s|%s|%s|%s|%s|%s|%s|%s\n", $1, $2, $3, $5, $6, $7, $8, $4 }' "$CSV" |
            while IFS='|' read -r size sys procs raw empty rss ideal recs; do
                printf '| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n' "$(size_label "$size")" "${LABEL[$sys]}" \
                    "$procs" "$(mib "$raw")" "$(mib "$rss")" "$(awk -v r="$raw" -v f="$ideal" 'BEGIN { printf "%.1f", r * f / 1048576 }')" \
                    "$(ratio "$rss" "$raw")" "$(fmt "$ideal" 3)" "$(mib "$empty")" \
                    "$(awk -v a="$rss" -v e="$empty" -v r="$raw" 'BEGIN { printf "%.3f", (a - e) / r }')"
            done
        echo
        echo "Saving of RS(3,5) against PBR(2) (1 - RSS_RS / RSS_PBR; paper: 33% to 46% from 1 KB to 16 KB,"
        echo "20% for zipfian 10 B-1 KB; ideal 1 - (5/3)/3 = 44.4%):"
        echo
        echo "| values | PBR(2) MiB | RS(3,5) MiB | saving | saving net of empty | RS(3,5) RSS / raw (paper 1.7-2.0) |"
        echo "|---|---:|---:|---:|---:|---:|"
        local size
        for size in $SIZES; do
            awk -F, -v s="$size" -v lbl="$(size_label "$size")" '$1 == s { rss[$2] = $7; e[$2] = $6; raw = $5 }
                END { if (rss["pbr"] == "" || rss["rs"] == "") exit
                    printf "| %s | %.1f | %.1f | %.1f%% | %.1f%% | %.3f |\n", lbl, rss["pbr"] / 1048576, rss["rs"] / 1048576,
                    100 * (1 - rss["rs"] / rss["pbr"]), 100 * (1 - (rss["rs"] - e["rs"]) / (rss["pbr"] - e["pbr"])), rss["rs"] / raw }' "$CSV"
        done
        echo
        echo "Memory is not noisy the way throughput is (one round per case; repeating the 1 KB case moved every total by under 0.1%);"
        echo "the load rates (ops/s, in memory.csv) are noisy and only there to show the load took seconds."
        echo
        echo "![memory](memory.png)"
    } >"$md"
    # plot: per case, RSS and ideal of each system (MiB)
    {
        printf 'case\tmemcached\tplain\tplain, memcached ideal\tPBR(2)\tPBR(2) ideal\tRS(3,5)\tRS(3,5) ideal\n'
        for size in $SIZES; do
            awk -F, -v s="$size" -v lbl="$(size_label "$size")" '$1 == s { rss[$2] = $7 / 1048576; raw = $5; f[$2] = $8 }
                END { if (raw == "") exit; printf "%s\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\n", lbl, rss["memcached"], rss["plain"], raw * f["plain"] / 1048576,
                    rss["pbr"], raw * f["pbr"] / 1048576, rss["rs"], raw * f["rs"] / 1048576 }' "$CSV"
        done
    } >"$dat"
    {
        plot_header "$OUT_DIR/memory.png" "Memory (RSS of all server processes) vs ideal; $RAW_MB MiB raw per fixed size"
        echo 'set ylabel "MiB"'
        echo "plot '$dat' using 2:xtic(1) title columnheader(2) lc rgb '#777777', '' using 3 title columnheader(3) lc rgb '#4477aa', \\"
        echo "  '' using 4 title columnheader(4) lc rgb '#aabbdd', '' using 5 title columnheader(5) lc rgb '#cc6677', \\"
        echo "  '' using 6 title columnheader(6) lc rgb '#eebbcc', '' using 7 title columnheader(7) lc rgb '#228833', \\"
        echo "  '' using 8 title columnheader(8) lc rgb '#bbddaa'"
    } >"$gp"
    gnuplot_run "$gp"
    cat "$md"
}

main() {
    eval_init memory
    CSV="$OUT_DIR/memory.csv"
    echo "size,system,processes,records,raw_bytes,empty_rss_bytes,rss_bytes,ideal_factor,load_ops_per_s" >"$CSV"
    local size
    for size in $SIZES; do
        measure_case "$size"
    done
    report
    note "done in ${SECONDS} s"
}

main "$@"
