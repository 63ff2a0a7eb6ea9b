#!/usr/bin/env bash
# pbr-memory.sh - memory of PBR(2) beside RS(3,5) holding the same data: for
# each value size, the same number of values of that size (same raw bytes,
# same 12-byte keys) goes into a fresh RS(3,5) group and a fresh PBR(2) group
# on one node; prints the total RSS of all server processes of each and the
# saving of RS(3,5) = 1 - RSS(RS) / RSS(PBR) against the targets (>= 40% at
# 1 KB, 43% at 4 KB, 45% at 16 KB).
#
# The RS(3,5) side is bench/memory.sh itself (its table is printed as it
# comes and its "total RSS" column read back).  The PBR(2) side follows the
# same steps: scripts/cluster up --scheme pbr:2 (sync full), quiet pipelined
# sets with bench/mc-load into the primary, a settle pause, RSS of all
# server processes with `cocytus-cli mem --raw-bytes`, then `cocytus-cli
# verify`, which must report every value on both backups.
#
# usage: bench/pbr-memory.sh [--sizes "1024 4096 16384"] [--raw-mb 1024]
#   --raw-mb  raw value bytes per size, in MiB (values = raw / size); default 1024
# memory.sh starts the RS group with `routing off` (its loaders write to every
# data process directly); the single PBR group's primary owns every slot.
# Environment: COCYTUS_BUILD_DIR (as scripts/cluster), MC_LOAD (a built
# bench/mc-load; default the in-tree build when up to date, else compiled
# into a temp dir), SETTLE_SECONDS (default 6, as memory.sh).
# Exit status: 0 when every size was measured (whatever the savings), 1 when
# something broke, 2 on bad usage.

set -u
set -o pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_DIR=$(cd "$SCRIPT_DIR/.." && pwd)
CLUSTER="$REPO_DIR/scripts/cluster"

LOAD_TIMEOUT_SECS=300
SAMPLE=2000
KEY_LEN=12
SETTLE=${SETTLE_SECONDS:-6}

sizes="1024 4096 16384"
raw_mb=1024

WORK=""
PBR_DIR=""
PBR_UP=0
declare -A PBR_ROW RS_TOTAL

die() { echo "pbr-memory: error: $*" >&2; exit 1; }
note() { echo "pbr-memory: $*" >&2; }

usage() {
    sed -n '/^# usage:/,/^#   --raw-mb/p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
    exit 2
}

is_uint() { case $1 in '' | *[!0-9]*) return 1 ;; *) return 0 ;; esac; }

cleanup() {
    if [ "$PBR_UP" -eq 1 ]; then
        "$CLUSTER" down --dir "$PBR_DIR" >/dev/null 2>&1
        PBR_UP=0
    fi
    [ -n "$WORK" ] && rm -rf "$WORK"
}

while [ $# -gt 0 ]; do
    [ $# -ge 2 ] || usage
    case $1 in
        --sizes) sizes=$2; shift 2 ;;
        --raw-mb) raw_mb=$2; shift 2 ;;
        *) usage ;;
    esac
done
is_uint "$raw_mb" && [ "$raw_mb" -ge 1 ] && [ "$raw_mb" -le 8192 ] || die "bad --raw-mb '$raw_mb' (1 to 8192)"
for s in $sizes; do
    is_uint "$s" && [ "$s" -ge 1 ] && [ "$s" -le 1048576 ] || die "bad size '$s' (1 to 1048576)"
done
is_uint "$SETTLE" || die "bad SETTLE_SECONDS '$SETTLE'"

# target SIZE: the saving asked for at that size ("-" if none)
target() {
    case $1 in 1024) echo 40 ;; 4096) echo 43 ;; 16384) echo 45 ;; *) echo - ;; esac
}

mib() { awk -v b="$1" 'BEGIN { printf "%.1f", b / 1048576 }'; }

# mem_total FILE ROLE FIELD: FIELD of the `total ROLE ...` line of cocytus-cli mem.
mem_total() {
    awk -v r="$2" -v f="$3" '$1 == "total" && $2 == r {
        for (i = 3; i < NF; i++) if ($i == f) print $(i + 1) }' "$1"
}

find_tools() {
    local d built="$SCRIPT_DIR/mc-load"
    for d in ${COCYTUS_BUILD_DIR:-} "$REPO_DIR/build" "$REPO_DIR"; do
        [ -x "$d/client/cocytus-cli" ] && { CLI="$d/client/cocytus-cli"; break; }
    done
    [ -n "${CLI:-}" ] || die "no client/cocytus-cli built (run make, or set COCYTUS_BUILD_DIR)"
    if [ -n "${MC_LOAD:-}" ]; then
        [ -x "$MC_LOAD" ] || die "MC_LOAD=$MC_LOAD is not executable"
    elif [ -x "$built" ] && ! [ "$SCRIPT_DIR/mc-load.c" -nt "$built" ]; then
        MC_LOAD=$built
    else
        MC_LOAD="$WORK/mc-load"
        # shellcheck disable=SC2046
        cc -O2 -o "$MC_LOAD" "$SCRIPT_DIR/mc-load.c" $(pkg-config --cflags --libs libmemcached) \
            || die "cannot build bench/mc-load.c"
    fi
    export MC_LOAD          # memory.sh uses the same loader
}

# ---- RS(3,5): bench/memory.sh ---------------------------------------------------

run_rs() {
    note "RS(3,5): bench/memory.sh --sizes \"$sizes\" --raw-mb $raw_mb"
    "$SCRIPT_DIR/memory.sh" --sizes "$sizes" --raw-mb "$raw_mb" --scheme rs:3:5 \
        >"$WORK/rs.table" 2>"$WORK/rs.log" \
        || { tail -n 20 "$WORK/rs.log" >&2; die "bench/memory.sh failed"; }
    cat "$WORK/rs.table"
    # | 1024 B | values | raw | data | parity | total | ...
    local size total
    while read -r size total; do
        RS_TOTAL[$size]=$total
    done < <(awk -F'|' '$2 ~ /^ *[0-9]+ B *$/ { s = $2; gsub(/[^0-9]/, "", s); t = $7; gsub(/ /, "", t); print s, t }' \
        "$WORK/rs.table")
    for size in $sizes; do
        [ -n "${RS_TOTAL[$size]:-}" ] || die "no RS(3,5) figure for $size B in memory.sh's table"
    done
}

# ---- PBR(2) ---------------------------------------------------------------------

measure_pbr() {
    local size=$1 n raw mem port out="$WORK/pbr-mem-$1.txt" items
    n=$(( raw_mb * 1048576 / size ))
    raw=$(( n * size ))
    # per process: every value with ~128 B of item and table overhead, +10%, +64 MiB;
    # pages never touched cost no RSS
    mem=$(( n * (size + 128) / 1048576 * 11 / 10 + 64 ))
    note "PBR(2), $size B: $n values, memory limit ${mem} MiB per process"
    PBR_DIR="$WORK/pbr-$size"
    mkdir -p "$PBR_DIR"
    PBR_UP=1
    "$CLUSTER" up --nodes 1 --scheme pbr:2 --sync full --no-proxy --memory "$mem" --dir "$PBR_DIR" >&2 \
        || die "scripts/cluster up --scheme pbr:2 failed"
    port=$(awk '$1 == "primary" && $2 == 0 { n = split($5, a, ":"); print a[n] }' "$PBR_DIR/endpoints")
    [ -n "$port" ] || die "no primary in $PBR_DIR/endpoints"
    timeout "$LOAD_TIMEOUT_SECS" "$MC_LOAD" -s 127.0.0.1 -p "$port" -n "$n" -z "$size" \
        -k "$KEY_LEN" -v "$SAMPLE" >&2 || die "loading $n x $size B into PBR(2) failed"
    sleep "$SETTLE"
    "$CLI" --dir "$PBR_DIR" mem --raw-bytes "$raw" >"$out" || die "cocytus-cli mem failed"
    cat "$out" >&2
    "$CLI" --dir "$PBR_DIR" verify >"$WORK/pbr-verify-$size.txt" 2>&1 \
        || { cat "$WORK/pbr-verify-$size.txt" >&2; die "cocytus-cli verify failed"; }
    cat "$WORK/pbr-verify-$size.txt" >&2
    items=$(awk '/^group 0:/ { for (i = 1; i < NF; i++) if ($(i + 1) == "items,") print $i }' \
        "$WORK/pbr-verify-$size.txt")
    [ "$items" = "$n" ] || die "PBR(2) holds ${items:-?} items after loading $n (evicted?)"
    "$CLUSTER" down --dir "$PBR_DIR" >&2
    PBR_UP=0
    PBR_ROW[$size]="$n $raw $(mem_total "$out" primary rss) $(mem_total "$out" backup rss) \
$(mem_total "$out" all rss) $(mem_total "$out" all region_used) $(mem_total "$out" all meta_bytes)"
}

print_pbr_table() {
    local size n raw prim back all items meta
    echo
    echo "Memory of a PBR(2) group (1 primary + 2 backups, 1 node, sync full, key length $KEY_LEN," \
         "pipelined quiet sets):"
    echo
    echo "| value size | values | raw MiB | primary RSS MiB | backup RSS MiB | total RSS MiB | items MiB | metadata MiB | other MiB | RSS / raw | ideal |"
    echo "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    for size in $sizes; do
        read -r n raw prim back all items meta <<<"${PBR_ROW[$size]}"
        echo "| $size B | $n | $(mib "$raw") | $(mib "$prim") | $(mib "$back") | $(mib "$all") |" \
             "$(mib "$items") | $(mib "$meta") | $(mib $(( all - items - meta ))) |" \
             "$(awk -v a="$all" -v r="$raw" 'BEGIN { printf "%.3f", a / r }') | 3.000 |"
    done
    echo
    echo "items = bytes of the stored items (header, key, value) over all 3 copies;"
    echo "metadata = hash tables and pending/backlog structures; other = RSS - items - metadata."
}

print_comparison() {
    local size n raw all rs saving t v
    echo
    echo "Saving of RS(3,5) over PBR(2), same data ($raw_mb MiB raw per size):"
    echo
    echo "| value size | raw MiB | RS(3,5) total RSS MiB | PBR(2) total RSS MiB | saving 1 - RS/PBR | ideal | target | verdict |"
    echo "|---:|---:|---:|---:|---:|---:|---:|---|"
    for size in $sizes; do
        read -r n raw _ _ all _ _ <<<"${PBR_ROW[$size]}"
        rs=${RS_TOTAL[$size]}
        saving=$(awk -v r="$rs" -v p="$all" 'BEGIN { printf "%.1f", 100 * (1 - r * 1048576 / p) }')
        t=$(target "$size")
        if [ "$t" = - ]; then v="-"
        else v=$(awk -v s="$saving" -v t="$t" 'BEGIN { print (s + 0 >= t + 0) ? "PASS" : "FAIL" }'); fi
        echo "| $size B | $(mib "$raw") | $rs | $(mib "$all") | **$saving%** | 44.4% |" \
             "$([ "$t" = - ] && echo - || echo ">= $t%") | $v |"
    done
    echo
    echo "ideal = 1 - (5/3)/3: both schemes storing only the raw bytes and their redundancy."
}

main() {
    WORK=$(mktemp -d /tmp/pbr-memory.XXXXXX) || die "mktemp failed"
    trap cleanup EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
    SECONDS=0
    find_tools
    run_rs
    local s
    for s in $sizes; do
        measure_pbr "$s"
    done
    print_pbr_table
    print_comparison
    echo
    echo "(${SECONDS}s elapsed)"
}

main "$@"
