#!/usr/bin/env bash
# redirect-share.sh - how many requests of a map-caching client are
# redirected (MOVED) in steady state, and while one slot moves every few
# seconds (issue #5: target <= 0.1% in steady state).
#
# usage: bench/redirect-share.sh      (settings through the environment)
#   SCHEMES="plain rs:3:5"  NODES=5  SECS=20 (each run)  MOVE_EVERY=5
#   CONNS=8  RECORDS=10000  VALUE=1024  READ_RATIO=0.95  DIST=zipfian
#   MOVES=1 (0: steady state only)   COORDINATOR=host:port  where to send
#   `cocytus move` when the cluster directory does not say
#   plus bench/eval/lib.sh's COCYTUS_BUILD_DIR, COCYTUS_BENCH, EVAL_OUT, EVAL_KEEP
#
# For each scheme one cluster is started (scripts/cluster up --no-proxy) and
# loaded, then:
#  1. steady state: cocytus-bench --route map for SECS seconds; redirects/ops
#     and map refreshes come from libcocytus' counters summed over the
#     connections (the first map fetch of each connection is a refresh).
#  2. moving slots: the same run while every MOVE_EVERY seconds one slot is
#     moved to the next group.  The slots moved are those of the most popular
#     records of the bench's scrambled zipfian (computed with the bench's own
#     bench/ycsb_gen.c), so every connection does touch them.  A move is
#     `cocytus-cli --dir DIR move <slot> <group>` when cocytus-cli has that
#     command, else `cocytus move <slot> <group>` sent to the coordinator
#     (DIR/coordinator, or the cluster.conf `coordinator` line).  Without
#     either, this part is skipped with a message.
# Writes docs/evaluation/routing-redirects.csv and .md.  Exit 0 whatever the
# figures; 1 when something broke (errors seen by the bench included).

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=eval/lib.sh
. "$SCRIPT_DIR/eval/lib.sh"

SCHEMES=${SCHEMES:-"plain rs:3:5"}
NODES=${NODES:-5}
SECS=${SECS:-20}
MOVE_EVERY=${MOVE_EVERY:-5}
MOVES=${MOVES:-1}
CONNS=${CONNS:-8}
RECORDS=${RECORDS:-10000}
VALUE=${VALUE:-1024}
READ_RATIO=${READ_RATIO:-0.95}
DIST=${DIST:-zipfian}
TARGET_SHARE=0.001

for v in NODES SECS MOVE_EVERY MOVES CONNS RECORDS VALUE; do
    is_uint "${!v}" || { echo "redirect-share: $v must be a whole number (got '${!v}')" >&2; exit 1; }
done
[ "$SECS" -ge 2 ] && [ "$SECS" -le 300 ] || { echo "redirect-share: SECS must be 2..300" >&2; exit 1; }
[ "$MOVE_EVERY" -ge 1 ] || { echo "redirect-share: MOVE_EVERY must be >= 1" >&2; exit 1; }
case $DIST in uniform | zipfian) ;; *) echo "redirect-share: DIST must be uniform or zipfian" >&2; exit 1 ;; esac

# slot moves need the coordinator, which bench/eval/lib.sh leaves out by default
[ "$MOVES" = 1 ] && export EVAL_COORDINATOR=${EVAL_COORDINATOR:-1}
eval_init redirect-share
CLI=$BUILD_DIR/client/cocytus-cli
[ -x "$CLI" ] || die "no cocytus-cli at $CLI"
CSV="$OUT_DIR/routing-redirects.csv"
MD="$OUT_DIR/routing-redirects.md"
RUN_ARGS=(--route map --no-load --run -n "$RECORDS" -r "$READ_RATIO" -d "$DIST" -v "$VALUE" -c "$CONNS")

echo "redirect-share: $0 with SCHEMES='$SCHEMES' NODES=$NODES SECS=$SECS MOVE_EVERY=$MOVE_EVERY CONNS=$CONNS" \
     "RECORDS=$RECORDS VALUE=$VALUE READ_RATIO=$READ_RATIO DIST=$DIST"
echo "redirect-share: each run: $BENCH -s <seeds> -q ${RUN_ARGS[*]} -t $SECS"

# ---- keys and slots ---------------------------------------------------------------------

# hot_keys COUNT: "rank key slot" of the COUNT most popular records of the
# bench's scrambled zipfian over RECORDS records, from its own generator.
build_hot_keys() {
    cat >"$WORK/hotkeys.c" <<'EOF'
/* hotkeys.c - written by bench/redirect-share.sh: the keys and slots of the
 * most popular records of cocytus-bench's scrambled zipfian (the record of
 * rank r is fnv64(r) mod records, as bench/ycsb_gen.h describes). */
#include <stdio.h>
#include <stdlib.h>
#include "ycsb_gen.h"

/* One-at-a-time hash & 16383: the key -> slot function (docs/routing.md). */
static unsigned key_slot(const char *key, size_t n)
{
    uint32_t h = 0;
    for (size_t i = 0; i < n; i++) {
        h += (uint32_t)(int)(signed char)key[i];
        h += h << 10;
        h ^= h >> 6;
    }
    h += h << 3;
    h ^= h >> 11;
    h += h << 15;
    return h & 16383u;
}

int main(int argc, char **argv)
{
    if (argc != 3)
        return 2;
    unsigned long long records = strtoull(argv[1], NULL, 10);
    unsigned long long count = strtoull(argv[2], NULL, 10);
    char key[YCSB_KEY_LEN + 1];
    if (records == 0)
        return 2;
    for (unsigned long long rank = 0; rank < count; rank++) {
        uint64_t record = ycsb_fnv64(rank) % records;
        size_t n = ycsb_key_name(record, key);
        printf("%llu %s %u\n", rank, key, key_slot(key, n));
    }
    return 0;
}
EOF
    ${CC:-cc} -O2 -I"$SCRIPT_DIR" -o "$WORK/hotkeys" "$WORK/hotkeys.c" "$SCRIPT_DIR/ycsb_gen.c" -lm \
        >"$WORK/hotkeys.log" 2>&1
}

# config_reply HOST PORT: the body lines of `config get cluster` (epoch,
# endpoints, ranges), nothing when the server does not answer one.  `quit`
# makes the server close, so cat reads the reply in large chunks (bash's
# read takes a socket byte by byte, slow for a 16 KB ranges line on a busy
# machine).
config_reply() {
    exec 3<>"/dev/tcp/$1/$2" || return 1
    printf 'config get cluster\r\nquit\r\n' >&3
    timeout 5 cat <&3 | tr -d '\r' | awk '/^CONFIG / { body = 1; next } /^END$/ { exit }
        body && NF && n < 3 { print; n++ }'
    exec 3<&- 3>&-
}

# slot_owner_addr DIR SLOT: host:port of the slot's owner in the map the
# first serving process answers.
slot_owner_addr() {
    local d=$1 slot=$2 addr body
    addr=$(awk '$1 == "plain" || $1 == "data" || $1 == "primary" { print $5; exit }' "$d/endpoints")
    body=$(config_reply "${addr%:*}" "${addr##*:}") || return 1
    awk -v s="$slot" 'NR == 2 { n = split($0, ep, " ") } NR == 3 { for (i = 1; i <= NF; i++) {
        split($i, r, "[-:]"); if (s >= r[1] && s <= r[2]) { split(ep[r[3] + 1], h, "|");
        print (h[1] != "" ? h[1] : h[2]) ":" h[3]; exit } } }' <<<"$body"
}

map_epoch() {
    local d=$1 addr
    addr=$(awk '$1 == "plain" || $1 == "data" || $1 == "primary" { print $5; exit }' "$d/endpoints")
    config_reply "${addr%:*}" "${addr##*:}" | head -n 1
}

# has_key ADDR KEY: the server at ADDR holds KEY.
has_key() {
    local line found=1
    exec 4<>"/dev/tcp/${1%:*}/${1##*:}" || return 1
    printf 'get %s\r\n' "$2" >&4
    while IFS= read -r -t 2 line <&4; do
        line=${line%$'\r'}
        case $line in VALUE*) found=0 ;; END | ERROR* | SERVER_ERROR* | CLIENT_ERROR*) break ;; esac
    done
    exec 4<&- 4>&-
    return $found
}

# ---- moving a slot ----------------------------------------------------------------------

MOVE_HOW=""
# find_move_method DIR: sets MOVE_HOW to "cli" or "coord HOST PORT", or
# leaves it empty.
find_move_method() {
    local d=$1 c
    MOVE_HOW=""
    if "$CLI" --help 2>&1 | grep -Eq '^[[:space:]]+move[[:space:]]'; then
        MOVE_HOW=cli
        return
    fi
    if [ -n "${COORDINATOR:-}" ]; then
        MOVE_HOW="coord ${COORDINATOR%:*} ${COORDINATOR##*:}"
    elif [ -s "$d/coordinator" ]; then
        c=$(head -n 1 "$d/coordinator")
        MOVE_HOW="coord ${c%:*} ${c##*:}"
    elif c=$(awk '$1 == "coordinator" { print $2, $3; exit }' "$d/cluster.conf") && [ -n "$c" ]; then
        MOVE_HOW="coord $c"
    fi
}

# move_slot DIR SLOT GROUP: one move; prints the reply, fails if refused.
move_slot() {
    local d=$1 slot=$2 group=$3 host port line
    case $MOVE_HOW in
        cli)
            # the reply lines (OK moving ..., then the outcome) joined into one
            local out rc
            out=$("$CLI" --dir "$d" move "$slot" "$group" 2>&1)
            rc=$?
            echo "$out" | paste -sd ';' -
            return $rc
            ;;
        coord*)
            read -r _ host port <<<"$MOVE_HOW"
            # control commands need the cluster secret: cocytus-cli admin proves it
            line=$("$CLI" --dir "$d" --timeout 30000 admin "$host:$port" move "$slot" "$group" 2>&1 | head -1)
            echo "$line"
            case $line in '' | ERROR* | CLIENT_ERROR* | SERVER_ERROR*) return 1 ;; esac
            return 0
            ;;
    esac
    return 1
}

# group_of DIR ADDR: the group of the serving process at ADDR.
group_of() { awk -v a="$2" '$5 == a { print $2; exit }' "$1/endpoints"; }
ngroups() { awk '$1 ~ /^(plain|data|parity|primary|backup)$/ { if ($2 + 1 > n) n = $2 + 1 } END { print n + 0 }' "$1/endpoints"; }

# ---- runs -------------------------------------------------------------------------------

echo "scheme,nodes,run,seconds,ops,ops_per_s,redirects,refreshes,retries,errors,redirect_share,moves,epoch_before,epoch_after" \
    >"$WORK/rows.csv"
NOTES=()

row() { # row SCHEME RUN OUT MOVES EPOCH0 EPOCH1
    local out=$3 ops red
    ops=$(bval "$out.txt" phase=run ops)
    red=$(bval "$out.txt" redirects= redirects)
    printf '%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s\n' "$1" "$NODES" "$2" \
        "$(bval "$out.txt" phase=run seconds)" "$ops" "$(bval "$out.txt" phase=run ops_per_s)" "$red" \
        "$(bval "$out.txt" redirects= refreshes)" "$(bval "$out.txt" redirects= retries)" \
        "$(bval "$out.txt" total_errors total_errors)" \
        "$(awk -v r="$red" -v o="$ops" 'BEGIN { if (o > 0) printf "%.6f", r / o; else print "nan" }')" \
        "$4" "$5" "$6" >>"$WORK/rows.csv"
    tail -n 1 "$WORK/rows.csv" | awk -F, '{ printf "  %-7s %8.0f ops/s  ops %s  redirects %s (%.4f%%)  refreshes %s  errors %s  moves %s  epoch %s -> %s\n",
        $3, $6, $5, $7, 100 * $11, $8, $10, $12, $13, $14 }'
}

run_scheme() {
    local scheme=$1 name d out e0 e1 moved=0 bpid rc t t0 slot key addr g to reply rank
    name="${scheme//:/-}-n$NODES"
    echo "== $scheme, $NODES nodes =="
    sys_up_cluster "$name" "$scheme" "$NODES"
    d=${SYS_DIR[$name]}
    out="$WORK/$name-load"
    bench_run "$name" "$out" 300 --load --no-run -n "$RECORDS" -v "$VALUE" -c "$CONNS" \
        || die "$name: loading failed: $(tail -n 3 "$out.err" | tr '\n' ' ')"
    bench_check "$out" "$name load" || die "$name: the load phase reported errors"

    # 1. steady state
    e0=$(map_epoch "$d")
    out="$WORK/$name-steady"
    bench_run "$name" "$out" $((SECS + 30)) "${RUN_ARGS[@]}" -t "$SECS" \
        || die "$name: the steady-state run failed: $(tail -n 3 "$out.err" | tr '\n' ' ')"
    e1=$(map_epoch "$d")
    row "$scheme" steady "$out" 0 "$e0" "$e1"
    bench_check "$out" "$name steady" || die "$name: the steady-state run reported errors"

    # 2. moving slots
    if [ "$MOVES" != 1 ]; then
        sys_down "$name"
        return
    fi
    find_move_method "$d"
    if [ -z "$MOVE_HOW" ]; then
        NOTES+=("$scheme: slot moves skipped: cocytus-cli has no \`move\` command and the cluster has no coordinator (no coordinator file in the cluster directory, no \`coordinator\` line in cluster.conf)")
        note "${NOTES[-1]}"
        sys_down "$name"
        return
    fi
    # the slots to move: those of the most popular records, one per move
    local nmoves=$(((SECS - 1) / MOVE_EVERY)) slots=()
    [ "$nmoves" -ge 1 ] || nmoves=1
    while read -r rank key slot; do
        case " ${slots[*]} " in *" $slot "*) continue ;; esac
        slots+=("$slot")
        [ "${#slots[@]}" -ge "$nmoves" ] && break
    done < <("$WORK/hotkeys" "$RECORDS" 1000)
    # check the key names against the cluster: the hottest key must be there
    read -r rank key slot < <("$WORK/hotkeys" "$RECORDS" 1)
    addr=$(slot_owner_addr "$d" "$slot")
    if [ -n "$addr" ] && has_key "$addr" "$key"; then
        echo "  hottest key $key (slot $slot) found at its owner $addr; moving slots ${slots[*]} ($MOVE_HOW)"
    else
        NOTES+=("$scheme: the hottest key computed here ($key, slot $slot) is not at its owner ${addr:-?}: bench/ycsb_gen.c and cocytus-bench disagree; the moved slots may see no traffic")
        note "${NOTES[-1]}"
    fi
    e0=$(map_epoch "$d")
    out="$WORK/$name-moving"
    t0=$SECONDS
    bench_run "$name" "$out" $((SECS + 60)) "${RUN_ARGS[@]}" -t "$SECS" &
    bpid=$!
    local k=0
    for slot in "${slots[@]}"; do
        k=$((k + 1))
        # every MOVE_EVERY seconds from the start, whatever a move took
        while [ $((SECONDS - t0)) -lt $((k * MOVE_EVERY)) ] && kill -0 "$bpid" 2>/dev/null; do
            sleep 0.2
        done
        kill -0 "$bpid" 2>/dev/null || break
        addr=$(slot_owner_addr "$d" "$slot")
        g=$(group_of "$d" "$addr")
        [ -n "$g" ] || { note "slot $slot: owner ${addr:-?} not in the endpoints file"; continue; }
        to=$(((g + 1) % $(ngroups "$d")))
        t=$((SECONDS - t0))
        if reply=$(move_slot "$d" "$slot" "$to"); then
            moved=$((moved + 1))
            echo "  t+${t}s moved slot $slot: group $g -> $to ($reply)"
        else
            NOTES+=("$scheme: moving slot $slot to group $to failed: $reply")
            note "${NOTES[-1]}"
        fi
    done
    wait "$bpid"
    rc=$?
    [ "$rc" -eq 0 ] || die "$name: the run with moving slots failed: $(tail -n 3 "$out.err" | tr '\n' ' ')"
    e1=$(map_epoch "$d")
    row "$scheme" moving "$out" "$moved" "$e0" "$e1"
    bench_check "$out" "$name moving" || NOTES+=("$scheme: the bench saw errors while slots moved")
    if ! "$CLI" --dir "$d" map >"$WORK/$name-map.txt" 2>&1; then
        NOTES+=("$scheme: after the moves not every process answers the same map: $(tail -n 1 "$WORK/$name-map.txt")")
        note "${NOTES[-1]}"
    fi
    sys_down "$name"
}

if [ "$MOVES" = 1 ]; then
    build_hot_keys || { cat "$WORK/hotkeys.log" >&2; die "cannot build the hot-key helper from bench/ycsb_gen.c"; }
fi
for scheme in $SCHEMES; do
    run_scheme "$scheme"
done
cp "$WORK/rows.csv" "$CSV"

{
    echo "# Redirected requests of a map-caching client (issue #5)"
    echo
    echo "Generated by \`bench/redirect-share.sh\`. $(md_machine)"
    echo
    echo "Each run: \`cocytus-bench -s <every serving process> -q ${RUN_ARGS[*]} -t $SECS\`"
    echo "on a loaded $NODES-node cluster (\`scripts/cluster up --scheme <scheme> --nodes $NODES --no-proxy\`)."
    echo "\`moving\`: one slot (of the most popular records) moved to the next group every $MOVE_EVERY s."
    echo "Redirects, refreshes (map fetches, one per connection at start included) and retries are"
    echo "libcocytus' counters summed over the $CONNS connections. Target: redirects/ops <= $(awk -v t="$TARGET_SHARE" 'BEGIN { print 100 * t }')% in steady state."
    echo "The clusters run their coordinator; moves are \`cocytus-cli move\` (or \`cocytus move\` to the coordinator)."
    echo "The ops/s of the two runs are not a comparison: one run each on a shared $(nproc)-core machine."
    echo
    echo "| scheme | run | ops/s | ops | redirects | redirects/ops | map refreshes | retries | errors | slots moved | epoch before -> after |"
    echo "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"
    awk -F, 'NR > 1 { printf "| %s | %s | %.0f | %s | %s | %.4f%% | %s | %s | %s | %s | %s -> %s |\n",
        $1, $3, $6, $5, $7, 100 * $11, $8, $9, $10, $12, $13, $14 }' "$CSV"
    if [ "${#NOTES[@]}" -gt 0 ]; then
        echo
        for n in "${NOTES[@]}"; do echo "* $n"; done
    fi
    echo
    echo "Discussion: \`routing.md\`."
} >"$MD"

echo
echo "== summary (${SECONDS}s) =="
column -s, -t <"$CSV" 2>/dev/null || cat "$CSV"
for n in "${NOTES[@]}"; do echo "note: $n"; done
echo "wrote $CSV, $MD"
exit 0
