#!/usr/bin/env bash
# memory.sh - memory efficiency of a coding group: starts an RS(3,5) group
# (scripts/cluster up), loads N values of one size spread evenly over its
# data processes (bench/mc-load.c, one loader per data process), checks the
# group with `cocytus-cli verify`, and reads total RSS of all server
# processes / raw value bytes with `cocytus-cli mem --raw-bytes`; then stops
# the group.  One fresh group per value size.  Prints a markdown table with
# the ideal N/K (5/3 for RS(3,5)) and the target (<= 1.80 at 4 KB).
#
# usage: bench/memory.sh [--sizes "1024 4096 16384"] [--raw-mb 200] [--count N]
#                        [--scheme rs:3:5] [--key-len 12] [--dir DIR] [--no-verify]
#                        [--one-by-one]
#   --raw-mb   raw value bytes per size, in MiB (N = raw / size); default 200
#   --count    N values per size instead (overrides --raw-mb)
#   --dir      cluster directory (default: a new temporary directory)
#   --one-by-one  load with one round trip per set (mc-load -u) instead of
#              quiet pipelined sets: few records in flight at any time
#              (steady state rather than right after a burst)
# Environment: COCYTUS_BUILD_DIR (where memcached/, cocytus/, client/ are
# built; default build/ or the source tree, as scripts/cluster), MC_LOAD
# (a built bench/mc-load; default: compiled into a temp dir).
# Exit status: 0 when every size was measured (whatever the ratios), 1 when
# something broke (the group did not start, a load or verify failed), 2 on
# bad usage.

set -u
set -o pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_DIR=$(cd "$SCRIPT_DIR/.." && pwd)
CLUSTER="$REPO_DIR/scripts/cluster"

TARGET_RATIO=1.80
TARGET_SIZE=4096
LOAD_TIMEOUT_SECS=600
SAMPLE=2000                     # values read back per loader

sizes="1024 4096 16384"
raw_mb=200
count=""
scheme=rs:3:5
key_len=12
dir=""
verify=1
loader_mode=""                  # "-u": one set per round trip

WORK=""
CLUSTER_UP=0
RESULTS=()

die() { echo "memory.sh: error: $*" >&2; exit 1; }
note() { echo "memory.sh: $*" >&2; }

usage() {
    sed -n '/^# usage:/,/^#              (steady state/p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
    exit 2
}

is_uint() {
    case $1 in '' | *[!0-9]*) return 1 ;; *) return 0 ;; esac
}

# ---- arguments -----------------------------------------------------------------

parse_args() {
    while [ $# -gt 0 ]; do
        [ $# -ge 2 ] || case $1 in --no-verify | --one-by-one) ;; *) usage ;; esac
        case $1 in
            --sizes) sizes=$2; shift 2 ;;
            --raw-mb) raw_mb=$2; shift 2 ;;
            --count) count=$2; shift 2 ;;
            --scheme) scheme=$2; shift 2 ;;
            --key-len) key_len=$2; shift 2 ;;
            --dir) dir=$2; shift 2 ;;
            --no-verify) verify=0; shift ;;
            --one-by-one) loader_mode=-u; shift ;;
            *) usage ;;
        esac
    done
    is_uint "$raw_mb" && [ "$raw_mb" -ge 1 ] || die "bad --raw-mb '$raw_mb'"
    [ -z "$count" ] || { is_uint "$count" && [ "$count" -ge 1 ]; } || die "bad --count '$count'"
    local s
    for s in $sizes; do
        is_uint "$s" && [ "$s" -ge 1 ] && [ "$s" -le 1048576 ] || die "bad size '$s' (1 to 1048576)"
    done
    case $scheme in
        rs:*:*) K=${scheme#rs:}; K=${K%%:*}; N=${scheme##*:} ;;
        *) die "bad scheme '$scheme' (rs:K:N)" ;;
    esac
    is_uint "$K" && is_uint "$N" && [ "$K" -ge 1 ] && [ "$K" -lt "$N" ] || die "bad scheme '$scheme'"
}

# ---- tools ---------------------------------------------------------------------

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

build_loader() {
    if [ -n "${MC_LOAD:-}" ]; then
        [ -x "$MC_LOAD" ] || die "MC_LOAD=$MC_LOAD is not executable"
        LOADER=$MC_LOAD
        return
    fi
    LOADER="$WORK/mc-load"
    # shellcheck disable=SC2046
    cc -O2 -o "$LOADER" "$SCRIPT_DIR/mc-load.c" $(pkg-config --cflags --libs libmemcached) \
        || die "cannot build bench/mc-load.c"
}

cleanup() {
    if [ "$CLUSTER_UP" -eq 1 ]; then
        "$CLUSTER" down --dir "$dir" >/dev/null 2>&1
        CLUSTER_UP=0
    fi
    [ -n "$WORK" ] && rm -rf "$WORK"
}

# ---- one measurement -----------------------------------------------------------

# region_mb PER_DP SIZE: a region with room for PER_DP values of SIZE bytes
# (+25% and 16 MiB for allocator rounding); untouched pages cost no RSS.
region_mb() {
    local per_dp=$1 size=$2
    echo $(( (per_dp * ((size + 31) / 16 * 16) * 5 / 4) / 1048576 + 16 ))
}

# data_ports: the client ports of group 0's data processes, in index order.
data_ports() {
    awk '$1 == "data" && $2 == 0 { split($5, a, ":"); print $3, a[2] }' "$dir/endpoints" \
        | sort -n | awk '{ print $2 }'
}

# load SIZE N: N values of SIZE bytes, split evenly over the data processes
# (every process gets keys key:00000000.. of its own).  Sets RAW_BYTES.
load() {
    local size=$1 n=$2 ports=() i per pids=() rc=0 pid
    mapfile -t ports < <(data_ports)
    [ "${#ports[@]}" -eq "$K" ] || { note "endpoints list ${#ports[@]} data processes, want $K"; return 1; }
    RAW_BYTES=0
    for i in "${!ports[@]}"; do
        per=$(( n / K + (i < n % K ? 1 : 0) ))
        [ "$per" -ge 1 ] || continue
        RAW_BYTES=$(( RAW_BYTES + per * size ))
        timeout "$LOAD_TIMEOUT_SECS" "$LOADER" ${loader_mode} -s 127.0.0.1 -p "${ports[$i]}" \
            -n "$per" -z "$size" -k "$key_len" -v "$SAMPLE" >"$WORK/load-$i.out" 2>&1 &
        pids+=("$!")
    done
    for pid in "${pids[@]}"; do
        wait "$pid" || rc=1
    done
    cat "$WORK"/load-*.out >&2
    return $rc
}

# field FILE ROLE COLUMN: from `total ROLE ...` of cocytus-cli mem.
mem_total() {
    awk -v r="$2" -v f="$3" '$1 == "total" && $2 == r {
        for (i = 3; i < NF; i++) if ($i == f) print $(i + 1) }' "$1"
}

mib() {
    awk -v b="$1" 'BEGIN { printf "%.1f", b / 1048576 }'
}

measure_size() {
    local size=$1 n per_dp region out="$WORK/mem-$1.txt"
    if [ -n "$count" ]; then n=$count; else n=$(( raw_mb * 1048576 / size )); fi
    per_dp=$(( (n + K - 1) / K ))
    region=$(region_mb "$per_dp" "$size")
    note "size $size: $n values, region ${region} MiB per process"
    # Loaders write to every data process directly: no slot routing.
    "$CLUSTER" up --nodes 1 --scheme "$scheme" --routing off --no-proxy --region "$region" --dir "$dir" >&2 \
        || die "scripts/cluster up failed"
    CLUSTER_UP=1
    load "$size" "$n" || die "loading $n x $size B failed"
    # Servers hand freed heap back every 5 s; measure the settled state,
    # before verify (which pulls whole regions through admin replies).
    sleep "${SETTLE_SECONDS:-6}"
    "$CLI" --dir "$dir" mem --raw-bytes "$RAW_BYTES" >"$out" || die "cocytus-cli mem failed"
    if [ "$verify" -eq 1 ]; then
        "$CLI" --dir "$dir" verify >&2 || die "cocytus-cli verify failed after the load"
    fi
    cat "$out" >&2
    local ratio data_rss parity_rss all_rss meta regions
    ratio=$(awk '$1 == "rss/raw" { print $2 }' "$out")
    data_rss=$(mem_total "$out" data rss)
    parity_rss=$(mem_total "$out" parity rss)
    all_rss=$(mem_total "$out" all rss)
    meta=$(mem_total "$out" all meta_bytes)
    regions=$(mem_total "$out" all region_used)
    "$CLUSTER" down --dir "$dir" >&2
    CLUSTER_UP=0
    RESULTS+=("$size $n $RAW_BYTES $data_rss $parity_rss $all_rss $regions $meta $ratio")
}

# ---- report --------------------------------------------------------------------

print_table() {
    local ideal verdict size n raw data parity all regions meta ratio
    ideal=$(awk -v n="$N" -v k="$K" 'BEGIN { printf "%.3f", n / k }')
    echo
    echo "Memory of an RS($K,$N) group (${K} data + $((N - K)) parity processes, 1 node," \
         "key length $key_len, $([ -n "$loader_mode" ] && echo "one set per round trip" || echo "pipelined quiet sets")):"
    echo
    echo "| value size | values | raw MiB | data RSS MiB | parity RSS MiB | total RSS MiB | regions MiB | metadata MiB | other MiB | RSS / raw | ideal N/K | target |"
    echo "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"
    for row in "${RESULTS[@]}"; do
        read -r size n raw data parity all regions meta ratio <<<"$row"
        verdict="-"
        if [ "$size" -eq "$TARGET_SIZE" ]; then
            verdict=$(awk -v r="$ratio" -v t="$TARGET_RATIO" \
                'BEGIN { print (r <= t) ? "<= " t ": PASS" : "<= " t ": FAIL" }')
        fi
        echo "| $size B | $n | $(mib "$raw") | $(mib "$data") | $(mib "$parity") | $(mib "$all") |" \
             "$(mib "$regions") | $(mib "$meta") | $(mib $((all - regions - meta))) | $ratio | $ideal | $verdict |"
    done
    echo
    echo "RSS counts every server process of the group (not the cocytus-node launcher);"
    echo "raw = values x value size (keys and metadata excluded); regions = bytes in use"
    echo "(data) or written (parity) of the regions; other = RSS - regions - metadata."
}

main() {
    parse_args "$@"
    WORK=$(mktemp -d /tmp/cocytus-memory.XXXXXX) || die "mktemp failed"
    trap cleanup EXIT
    trap 'exit 1' INT TERM
    [ -n "$dir" ] || dir="$WORK/cluster"
    mkdir -p "$dir"
    find_cli
    build_loader
    local s
    for s in $sizes; do
        measure_size "$s"
    done
    print_table
}

main "$@"
